"""Activities: the only code that talks to MCP servers. ``wire`` speaks the protocol; ``mcp_activities``
wraps it as Temporal activities with typed, narrowly mapped failures."""
