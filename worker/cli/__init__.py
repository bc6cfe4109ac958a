"""mcp-tasks: run, follow and operate MCP tasks as Temporal workflows.

One job per module, each importing only those below it (an import-linter contract in pyproject.toml):
``main`` (entry point, the command table) → ``operations`` (run, tools, status, result, cancel, approve, answer, list)
→ ``serving`` (worker, dev-server, demo, demo-server; an in-process worker's configuration and logs) →
``form`` (answer's prompts) | ``following`` (live view, progress, outcome summary) → ``connection`` (Temporal
address, namespace, TLS, the HOST:PORT check, embedded server, UI links) → ``parser`` (options, exit codes,
``CliError``, output).
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
