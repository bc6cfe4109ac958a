"""``mcp-tasks``' entry point: parse, run the command, turn every ending into an exit code.

With ``--json``, every ending is also one JSON object on stdout."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Coroutine
from typing import Any

from mcp_temporal_tasks.worker.cli.parser import (
    EXIT_ENDED,
    EXIT_HOOKS,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    build_parser,
    check_text,
    remember_hint_options,
    report,
    stdout_gone,
)

#: A command: synchronous (``answer`` prompts outside the event loop; ``demo-server`` runs its own) or a coroutine.
Command = Callable[[argparse.Namespace], int | Coroutine[Any, Any, int]]

#: What serves a process (the worker, Temporal, the demo); every other command is an operation on tasks.
SERVING = ("worker", "dev-server", "demo", "demo-server", "codec-server")


def command(name: str) -> Command:
    """The function of a command, imported only once the arguments have parsed: ``--help``, ``--version`` and usage
    errors never load Temporal, the MCP SDK or pydantic (tests/test_cli_startup.py checks it)."""
    if name in SERVING:
        from mcp_temporal_tasks.worker.cli import serving

        serves: dict[str, Command] = {
            "worker": serving.cmd_worker,
            "dev-server": serving.cmd_dev_server,
            "demo": serving.cmd_demo,
            "demo-server": serving.cmd_demo_server,
            "codec-server": serving.cmd_codec_server,
        }
        return serves[name]
    if name == "schema":
        from mcp_temporal_tasks.worker.cli.schema import cmd_schema

        return cmd_schema
    if name == "login":
        from mcp_temporal_tasks.worker.cli.login import cmd_login

        return cmd_login
    if name in ("run", "tools"):  # they reach an MCP server: only they load the wire and the MCP SDK
        from mcp_temporal_tasks.worker.cli import calling

        return {"run": calling.cmd_run, "tools": calling.cmd_tools}[name]
    from mcp_temporal_tasks.worker.cli import operations

    operates: dict[str, Command] = {
        "status": operations.cmd_status,
        "result": operations.cmd_result,
        "cancel": operations.cmd_cancel,
        "approve": operations.cmd_approve,
        "answer": operations.cmd_answer,
        "list": operations.cmd_list,
    }
    return operates[name]


def _is_config_error(exc: Exception) -> bool:
    """Whether ``exc`` is the configuration's ``ConfigError``: only raised once that module is loaded, so it is looked
    up there rather than imported (the module loads pydantic)."""
    config = sys.modules.get("mcp_temporal_tasks.worker.config")
    return config is not None and isinstance(exc, config.ConfigError)


def run_async(coro: Coroutine[Any, Any, int]) -> int:
    """``asyncio.run`` without its unbounded end: tasks still running when the command returns (an MCP session or
    an SDK poller that ignores cancellation) get 2 s after being cancelled, then the process leaves anyway
    (``main`` exits with ``os._exit``). Ctrl-C before a command installs its own handlers is KeyboardInterrupt,
    as with ``asyncio.run``."""
    import asyncio  # here: ~0.1 s of imports (ssl, sockets, threads) that `--help` does not need

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
        remember_hint_options(args)
        from mcp_temporal_tasks.activities.wire.redact import install_log_redaction

        install_log_redaction()  # `worker` replaces the handlers with its own, redacting as well (setup_logging)
        ran = command(args.subcommand)(args)
        code = ran if isinstance(ran, int) else run_async(ran)
    except CliError as exc:
        report(exc, as_json)
        code = exc.code
    except BrokenPipeError:  # stdout's reader left: nothing more to say, to anyone
        stdout_gone()
        code = EXIT_OK
    except KeyboardInterrupt:
        report(CliError("interrupted; nothing more was sent", EXIT_INTERRUPTED), as_json)
        code = EXIT_INTERRUPTED
    except Exception as exc:
        if _is_config_error(exc):  # a configuration error found past the checks at start: still one line, exit 2
            report(CliError(f"configuration: {exc}", EXIT_USAGE, kind="config"), as_json)
            code = EXIT_USAGE
        elif os.environ.get("MCP_TASKS_DEBUG"):  # a bug of ours: one line, or with MCP_TASKS_DEBUG=1 the traceback
            raise
        else:
            report(
                CliError(
                    f"internal error: {type(exc).__name__}: {exc} (MCP_TASKS_DEBUG=1 shows the traceback)",
                    EXIT_ENDED,
                    kind="internal",
                ),
                as_json,
            )
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
    # A stdio child whose close was cut short (its bound, a cancelled shutdown) is not left behind (none was started
    # where the module was never loaded).
    stdio = sys.modules.get("mcp_temporal_tasks.activities.wire.stdio")
    if stdio is not None:
        stdio.kill_all()
    # The Temporal runtime's threads can abort a normal interpreter shutdown; our work is flushed.
    os._exit(code)
