"""``python -m mcp_temporal_tasks.worker.cli``: the same as ``mcp-tasks``.

Hints print it when the script is not on PATH."""

from mcp_temporal_tasks.worker.cli.main import main

main()
