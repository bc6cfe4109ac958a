"""mcp-tasks: run, follow and operate MCP tasks as Temporal workflows.

One job per module, each importing only those below it (an import-linter contract in pyproject.toml; the order:
ARCHITECTURE.md). A command's module is imported once the arguments parse, so ``--help`` and ``--version`` load no
Temporal, MCP or pydantic (``tests/test_cli_startup.py``).
"""

from mcp_temporal_tasks.worker.cli.main import main
from mcp_temporal_tasks.worker.cli.parser import (
    EXIT_ENDED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    RUN_QUEUE_PREFIX,
    CliError,
    build_parser,
)

__all__ = [
    "EXIT_ENDED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_UNREACHABLE",
    "EXIT_USAGE",
    "RUN_QUEUE_PREFIX",
    "CliError",
    "build_parser",
    "main",
]
