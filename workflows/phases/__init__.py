"""The phases of ``McpTaskWorkflow`` (``workflows/mcp_task.py`` composes them), one module each.

``base`` (the one state, the one move, shared steps) and ``patches`` (the patch ids) below; above them, side by side
and importing none of each other: ``messages`` (query, updates, signals), ``submit`` (SUBMITTING), ``wait`` (WORKING),
``input`` (INPUT_REQUIRED), ``retrieve`` (RETRIEVING), ``cancel`` (CANCELLING) and ``finish`` (DONE). Which move is
allowed is said once, by ``records.TRANSITIONS`` (checked in ``base.TaskMachine._move``).
"""
