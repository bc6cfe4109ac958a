"""``mcp-tasks``' entry point: parse, run the command, and turn every way it ends into an exit code (and, with
``--json``, one JSON object)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
from collections.abc import Callable, Coroutine
from typing import Any

from mcp_temporal_tasks.activities.wire import stdio
from mcp_temporal_tasks.activities.wire.redact import install_log_redaction
from mcp_temporal_tasks.worker.cli.operations import (
    cmd_answer,
    cmd_approve,
    cmd_cancel,
    cmd_list,
    cmd_result,
    cmd_run,
    cmd_status,
    cmd_tools,
)
from mcp_temporal_tasks.worker.cli.parser import (
    EXIT_ENDED,
    EXIT_HOOKS,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    build_parser,
    check_text,
    report,
    stdout_gone,
)
from mcp_temporal_tasks.worker.cli.serving import cmd_demo, cmd_demo_server, cmd_dev_server, cmd_worker
from mcp_temporal_tasks.worker.config import ConfigError

#: A command: synchronous (``answer`` prompts outside the event loop; ``demo-server`` runs its own) or a coroutine.
Command = Callable[[argparse.Namespace], int | Coroutine[Any, Any, int]]

COMMANDS: dict[str, Command] = {
    "run": cmd_run, "status": cmd_status, "result": cmd_result, "cancel": cmd_cancel, "approve": cmd_approve,
    "answer": cmd_answer, "list": cmd_list, "worker": cmd_worker, "dev-server": cmd_dev_server, "demo": cmd_demo,
    "demo-server": cmd_demo_server, "tools": cmd_tools,
}


def run_async(coro: Coroutine[Any, Any, int]) -> int:
    """``asyncio.run`` without its unbounded end: tasks still running when the command returns (an MCP session or
    an SDK poller that ignores cancellation) get 2 s after being cancelled, then the process leaves anyway
    (``main`` exits with ``os._exit``). Ctrl-C before a command installs its own handlers is KeyboardInterrupt,
    as with ``asyncio.run``."""
    runner = asyncio.Runner()
    loop = runner.get_loop()
    try:
        return int(runner.run(coro))
    finally:
        pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for task in pending:
            task.cancel()
        if pending:
            with contextlib.suppress(BaseException):
                loop.run_until_complete(asyncio.wait(pending, timeout=2.0))
        for task in pending:  # retrieved: asyncio would log "Task exception was never retrieved" for each
            if task.done() and not task.cancelled():
                task.exception()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    as_json = "--json" in argv
    try:
        args = build_parser().parse_args(argv)
        as_json = bool(getattr(args, "json", False))
        check_text(args)
        install_log_redaction()  # `worker` replaces the handlers with its own, redacting as well (setup_logging)
        ran = COMMANDS[args.subcommand](args)
        code = ran if isinstance(ran, int) else run_async(ran)
    except CliError as exc:
        report(exc, as_json)
        code = exc.code
    except ConfigError as exc:  # a configuration error found past the checks at start: still one line, exit 2
        report(CliError(f"configuration: {exc}", EXIT_USAGE, kind="config"), as_json)
        code = EXIT_USAGE
    except BrokenPipeError:  # stdout's reader left: nothing more to say, to anyone
        stdout_gone()
        code = EXIT_OK
    except KeyboardInterrupt:
        report(CliError("interrupted; nothing more was sent", EXIT_INTERRUPTED), as_json)
        code = EXIT_INTERRUPTED
    except Exception as exc:  # a bug of ours: one line (MCP_TASKS_DEBUG=1 shows the traceback)
        if os.environ.get("MCP_TASKS_DEBUG"):
            raise
        report(CliError(f"internal error: {type(exc).__name__}: {exc} (MCP_TASKS_DEBUG=1 shows the traceback)",
                        EXIT_ENDED, kind="internal"), as_json)
        code = EXIT_ENDED
    for hook in EXIT_HOOKS:
        with contextlib.suppress(Exception):
            hook()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BrokenPipeError:
            if stream is sys.stdout:
                stdout_gone()
        except (OSError, ValueError):
            pass
    # A stdio child whose close was cut short (its bound, a cancelled shutdown) is not left behind.
    stdio.kill_all()
    # The Temporal runtime's threads can abort a normal interpreter shutdown; our work is flushed.
    os._exit(code)
