"""Activities: the only code that talks to MCP servers. ``wire`` speaks the protocol; ``mcp_activities``
wraps it as Temporal activities, with failures mapped narrowly by ``failures``, waits paced by ``schedule`` and
the relay's messages named by ``relay``."""
