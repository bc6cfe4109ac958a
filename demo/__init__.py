"""The bundled demo MCP server's package (``[demo]``): run, never imported.

``mcp_temporal_tasks.demo.server`` needs fastmcp, the ``[demo]`` extra: never imported by the worker, only run by
``mcp-tasks demo`` (as a child process) and ``mcp-tasks demo-server``."""
