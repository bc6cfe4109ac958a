"""Activities: the only code that talks to MCP servers; ``wire`` speaks the protocol.

``mcp_activities`` composes the Temporal activities out of one job per module (``calling``, ``waiting``, ``task_steps``,
with ``input_relay`` and what they share in ``shared``), failures mapped narrowly by ``failure_encoding``, waits paced
by ``schedule`` and woken by the ``push`` hub, heartbeats typed by ``heartbeats``, and the relay's messages named by
``relay``.
"""
