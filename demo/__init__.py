"""The bundled demo MCP server (``mcp_temporal_tasks.demo.server``), behind the ``[demo]`` extra (fastmcp): never
imported by the worker, only run by ``mcp-tasks demo`` (as a child process) and ``mcp-tasks demo-server``."""
