"""The command line itself: its options, how a command ends (exit codes, ``CliError``) and how it writes.

The bottom of the CLI package: every other module raises ``CliError`` and writes through ``emit``/``err``, and
``main`` reads ``args.subcommand`` to pick the command's function, so this module names none.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from mcp_temporal_tasks.worker.printable import printable
from mcp_temporal_tasks.workflows.states import Outcome, Phase

#: ``mcp-tasks --help``'s description.
DESCRIPTION = """mcp-tasks: run, follow and operate MCP tasks as Temporal workflows.

Exit codes: 0 the task completed without tool error · 1 it ended otherwise (or is not finished) ·
2 bad input, usage or configuration · 3 Temporal or the MCP server unreachable at start, or no worker can run
the task (none polls its queue, or this command's own worker stopped) · 130 interrupted.
With --json stdout carries exactly one JSON object on every exit (errors: {"error": {"kind", "message"}});
progress and logs go to stderr.
"""

EXIT_OK, EXIT_ENDED, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3
EXIT_INTERRUPTED = 130
#: Longest workflow id the CLI accepts (Temporal's own default limit is 1,000 bytes; ids are also shown in links).
MAX_ID_CHARS = 255
#: A task that `run` starts with its own in-process worker goes to a task queue of that command alone (this
#: prefix and a random suffix): no other worker, with another configuration, can take it.
RUN_QUEUE_PREFIX = "mcp-tasks-run-"
_KINDS = {EXIT_ENDED: "ended", EXIT_USAGE: "usage", EXIT_UNREACHABLE: "unreachable", EXIT_INTERRUPTED: "interrupted"}


class CliError(Exception):
    """One line for the user and an exit code; ``kind`` names it in the ``--json`` error object."""

    def __init__(self, message: str, code: int, *, kind: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.kind = kind or _KINDS.get(code, "error")


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line and exit 2 (and, with --json, one JSON error object), never argparse's exit."""

    def error(self, message: str) -> NoReturn:
        # Reported as "mcp-tasks: ..." already: name only the subcommand, if any.
        sub = self.prog.removeprefix("mcp-tasks").strip()
        raise CliError(f"{sub + ': ' if sub else ''}{message} (see {self.prog} --help)", EXIT_USAGE)


def prog() -> str:
    """How to type ``mcp-tasks`` in a hint so that it works as printed: ``mcp-tasks`` when that is on PATH, else the
    path of the script beside this Python (a venv that is not activated), else ``python -m``."""
    script = Path(sys.executable).parent / "mcp-tasks"
    on_path = shutil.which("mcp-tasks")
    if on_path and (not script.exists() or Path(on_path).resolve() == script.resolve()):
        return "mcp-tasks"
    if script.exists():
        return shlex.quote(str(script))
    return f"{shlex.quote(sys.executable)} -m mcp_temporal_tasks.worker.cli"


#: The options that say where Temporal is, as this command was given them (``--address``, ``--namespace``,
#: ``--config`` as an absolute path): every command a hint prints carries them, so it works when typed as printed.
HINT_OPTIONS: list[str] = []


def remember_hint_options(args: argparse.Namespace) -> None:
    HINT_OPTIONS.clear()
    for option in ("address", "namespace", "config"):
        value = getattr(args, option, None)
        if value:
            HINT_OPTIONS.extend([f"--{option}", str(Path(value).absolute()) if option == "config" else str(value)])


def hint(*words: str, config: str | None = None) -> str:
    """A command line to print, which works as printed: ``mcp-tasks`` (as :func:`prog` types it), ``words``, and
    the options that say where Temporal is; ``config``: the worker configuration the command needs (its servers),
    in place of this command's ``--config``."""
    options = list(HINT_OPTIONS)
    if config:
        if "--config" in options:
            del options[options.index("--config") : options.index("--config") + 2]
        options += ["--config", str(Path(config).absolute())]
    return f"{prog()} {shlex.join([*words, *options])}"


#: Run by ``main`` before the process leaves (with ``os._exit``, which runs no ``atexit``): e.g. sending the last
#: spans of a traced worker.
EXIT_HOOKS: list[Callable[[], None]] = []


def at_exit(hook: Callable[[], None]) -> None:
    EXIT_HOOKS.append(hook)


def stdout_gone() -> None:
    """The reader of stdout has left (``mcp-tasks result ID --json | head -c 10``): what is left to write goes
    nowhere, quietly, and the command ends with its own exit code."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def _print_out(text: str) -> None:
    try:
        print(text, flush=True)
    except BrokenPipeError:
        stdout_gone()


#: Set while a live line is drawn on the terminal (``following``): it is cleared before any other line is written.
LIVE_LINE: list[Callable[[], None]] = []


def err(msg: str) -> None:
    for clear in list(LIVE_LINE):
        clear()
    try:
        print(msg, file=sys.stderr, flush=True)
    except BrokenPipeError:  # stderr closed too: nothing left to tell
        pass


def emit(args: argparse.Namespace, obj: Any, human: str) -> None:
    """The one place that writes results to stdout."""
    _print_out(json.dumps(obj, default=str) if getattr(args, "json", False) else human)


def report(exc: CliError, as_json: bool) -> None:
    """How a command that failed ends: one line on stderr, and with ``--json`` one error object on stdout."""
    message = printable(exc)  # may quote server text
    err(f"mcp-tasks: {message}")
    if as_json:
        _print_out(json.dumps({"error": {"kind": exc.kind, "message": str(exc)}}))


def check_id(wid: str, what: str = "ID") -> None:
    if not wid.strip():
        raise CliError(f"{what}: a workflow id must not be empty", EXIT_USAGE)
    if len(wid) > MAX_ID_CHARS:
        raise CliError(
            f"{what}: a workflow id is at most {MAX_ID_CHARS} characters (this one has {len(wid)})", EXIT_USAGE
        )


def check_text(args: argparse.Namespace) -> None:
    """Arguments the OS passed as bytes that are not UTF-8 (kept as lone surrogates): exit 2, naming the option."""
    for key, value in vars(args).items():
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                positional = key == "tool" or (key == "id" and args.subcommand != "run")
                name = key.upper() if positional else f"--{key.replace('_', '-')}"
                raise CliError(f"{name}: not valid UTF-8 text", EXIT_USAGE)
    if getattr(args, "id", None) is not None:
        check_id(args.id, "--id" if args.subcommand == "run" else "ID")


#: ``McpTaskStatus`` values: the server's task statuses, our phases before and between them, and the outcome a
#: finished task without a terminal server status is listed under.
def status_values() -> list[str]:
    values = [
        "submitting",
        "working",
        "input_required",
        "awaiting_approval",
        "replaying",
        "retrieving",
        "cancelling",
        "completed",
        "failed",
        "cancelled",
    ]
    values += [p.value.lower() for p in Phase if p.value.lower() not in values and p != Phase.DONE]
    return values + [o.value for o in Outcome if o.value not in values]


def outcome_values() -> list[str]:
    return [o.value for o in Outcome]


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not at least 1")
    return value


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 < value < 65536:
        raise argparse.ArgumentTypeError(f"{text} is not a port number (1-65535)")
    return value


def _port_or_0(text: str) -> int:
    return 0 if text.strip() == "0" else _port(text)


def version() -> str:
    """The installed distribution's version (a checkout run without installing has none)."""
    import importlib.metadata  # only for --version: it is not free to import

    try:
        return importlib.metadata.version("mcp-temporal-tasks")
    except importlib.metadata.PackageNotFoundError:
        return "(not installed)"


class _Version(argparse.Action):
    """``--version``: the version is looked up only when asked for."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(
            option_strings, dest, nargs=0, default=argparse.SUPPRESS, help="print the version and exit", **kwargs
        )

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> NoReturn:
        print(f"{parser.prog} {version()}")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    """Every command and option; ``args.subcommand`` names the command (``main`` maps it to its function).

    Not ``args.command``, the subparsers' own destination: ``run --command`` sets that to its command line.
    """
    parser = _Parser(prog="mcp-tasks", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action=_Version)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, helptext: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=helptext)
        p.set_defaults(subcommand=name)
        return p

    def temporal_opts(p: argparse.ArgumentParser, *, config: bool = True) -> None:
        p.add_argument(
            "--address",
            help="Temporal frontend HOST:PORT (default: $TEMPORAL_ADDRESS, a temporal.toml "
            "profile, the --config file's [temporal] address, else localhost:7233)",
        )
        p.add_argument(
            "--namespace",
            help="Temporal namespace (default: $TEMPORAL_NAMESPACE, a temporal.toml "
            "profile, [temporal] namespace, else default)",
        )
        if config:
            p.add_argument(
                "--config",
                help="worker TOML configuration whose [temporal] table says where Temporal is "
                "(default: $MCP_TASKS_CONFIG)",
            )

    def ui_opt(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--ui-url",
            metavar="URL",
            help="the Temporal UI for printed links, e.g. http://localhost:8080 (default: "
            "$MCP_TASKS_UI_URL, [temporal] ui_url, else the dev server's own when mcp-tasks runs it; "
            "no link otherwise)",
        )

    def json_opt(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--json",
            action="store_true",
            help='print exactly one JSON object on stdout, also on errors ({"error": {...}})',
        )

    p = command("run", "run one MCP tool call as a durable task and follow it to its outcome")
    p.add_argument("tool", help="tool name")
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--server", help="a server name from the worker configuration")
    target.add_argument("--url", help="streamable HTTP endpoint of the MCP server")
    target.add_argument("--command", help='stdio MCP server command line, e.g. "node server.mjs"')
    p.add_argument(
        "--args",
        metavar="JSON|@FILE|-",
        help="tool arguments: a JSON object, @FILE to read it from a file, - to read it from stdin (at most 512 KiB)",
    )
    p.add_argument(
        "--id",
        help="workflow id (default: mcp-task-KEY with --idempotency-key, else derived from the "
        "request). The same id never runs the tool twice: running the same command again "
        "shows the stored outcome; a new id runs it again",
    )
    p.add_argument(
        "--replay",
        choices=["never", "if_idempotent", "always", "with_approval"],
        help="when a new tools/call may be sent after a lost or failed one (default: configured, else never)",
    )
    p.add_argument("--idempotent", action="store_true", help="declare the tool idempotent (trusted: you say so)")
    p.add_argument(
        "--idempotency-key",
        metavar="KEY",
        help="your key for this operation (recorded in the ledger); the default workflow id becomes "
        "mcp-task-KEY, so `mcp-tasks status mcp-task-KEY` finds it",
    )
    p.add_argument("--ttl", type=float, help="requested task TTL in seconds (2025-11-25 servers)")
    p.add_argument("--era", choices=["2025-11-25", "2026-07-28"], help="pin the protocol era")
    p.add_argument(
        "--principal", help="who the call is made for (recorded in the ledger; sessions are pooled per principal)"
    )
    p.add_argument(
        "--detach",
        action="store_true",
        help="exit once the workflow is started and print its id; a running worker runs it (needs a "
        "Temporal that outlives this command: --address, or `mcp-tasks dev-server`)",
    )
    p.add_argument("--no-worker", action="store_true", help="do not run an in-process worker; rely on running ones")
    p.add_argument(
        "--task-queue",
        metavar="Q",
        help="task queue of the workflow. Default: with the in-process worker, a queue of this command "
        f"alone ({RUN_QUEUE_PREFIX}<random>), so no other worker takes the task; with --no-worker "
        "or --detach, the queue your workers poll ([temporal] task_queue, $MCP_TASKS_TASK_QUEUE, "
        "else mcp-tasks)",
    )
    ui_opt(p)
    temporal_opts(p, config=False)
    p.add_argument(
        "--config",
        help="worker TOML configuration: its [servers] for --server NAME, its [temporal] table "
        "for where Temporal is (default: $MCP_TASKS_CONFIG)",
    )
    json_opt(p)

    p = command("tools", "list a server's tools: task support, idempotency hints, and the policy a worker applies")
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--server", help="a server name from the worker configuration")
    target.add_argument("--url", help="streamable HTTP endpoint of the MCP server")
    target.add_argument("--command", help='stdio MCP server command line, e.g. "node server.mjs"')
    p.add_argument("--era", choices=["2025-11-25", "2026-07-28"], help="pin the protocol era")
    p.add_argument(
        "--config",
        help="worker TOML configuration: the servers and tool policies a worker of it applies "
        "(default: $MCP_TASKS_CONFIG)",
    )
    json_opt(p)

    p = command("login", "give a subject's consent for a server at this terminal (its grant goes to the token store)")
    p.add_argument("server", nargs="?", help="a server name from the worker configuration")
    p.add_argument("--subject", help="whose grant: a task's principal (default: this OS user's name)")
    p.add_argument("--config", help="worker TOML configuration (default: $MCP_TASKS_CONFIG)")
    p.add_argument("--no-browser", action="store_true", help="only print the consent URL; open no browser")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for the consent (default 300)")
    p.add_argument(
        "--callback",
        metavar="URL",
        help="complete a consent a task asked for: the URL the browser was sent back to after opening the task's URL",
    )
    p.add_argument("--new-key", action="store_true", help="print a new key for MCP_TASKS_TOKEN_KEY and exit")
    temporal_opts(p, config=False)  # where the waiting task is told (its own re-check finds the consent otherwise)
    p.add_argument(
        "--id-token-file",
        metavar="FILE",
        help="enterprise-managed server: the subject's ID token from their identity provider (- for stdin)",
    )
    json_opt(p)

    for name, helptext in (
        ("status", "show where a task is"),
        ("result", "print a task's outcome"),
        ("cancel", "cancel a task (tasks/cancel); a finished task keeps its outcome"),
        ("approve", "approve the pending replay of a task (policy with_approval)"),
    ):
        p = command(name, helptext)
        p.add_argument("id", help="workflow id")
        if name == "result":
            p.add_argument("--wait", action="store_true", help="wait for the outcome (exits like run)")
            ui_opt(p)
        temporal_opts(p)
        json_opt(p)

    p = command("answer", "answer a task's outstanding input request (prompts on a terminal)")
    p.add_argument("id", help="workflow id")
    p.add_argument("--key", help="which input request (default: every outstanding one)")
    p.add_argument(
        "--response",
        metavar="JSON",
        help='the answer as an ElicitResult, e.g. \'{"action":"accept","content":{"approve":true}}\' '
        "(or {KEY: ElicitResult}); needed when stdin is not a terminal",
    )
    temporal_opts(p)
    json_opt(p)

    p = command(
        "schema",
        "print the JSON Schemas of the workflow's request, outcome, queries, updates and signals "
        "(for services in other languages)",
    )
    p.add_argument("--out", metavar="DIR", help="write one FILE.json per schema into DIR instead of printing them")
    p.add_argument("--check", action="store_true", help="with --out: exit 1 if DIR's files are not current")

    p = command("list", "list MCP task workflows")
    p.add_argument("--outcome", metavar="OUTCOME", help="only tasks that ended so: " + ", ".join(outcome_values()))
    p.add_argument(
        "--status", metavar="STATUS", help="only tasks whose McpTaskStatus is STATUS: " + ", ".join(status_values())
    )
    p.add_argument("--server", help="configured server name (or the inline endpoint as listed)")
    p.add_argument("--tool", help="tool name")
    p.add_argument("--limit", type=_positive_int, default=50, help="show at most this many (default: 50)")
    temporal_opts(p)
    json_opt(p)

    p = command("worker", "run workflows and activities on a task queue")
    p.add_argument("--config", help="TOML configuration (default: $MCP_TASKS_CONFIG)")
    p.add_argument("--task-queue", help="task queue (default from config, else mcp-tasks)")
    p.add_argument(
        "--log-level",
        default=os.environ.get("MCP_TASKS_LOG_LEVEL", "INFO"),
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        type=str.upper,
        help="log level (default: $MCP_TASKS_LOG_LEVEL or INFO)",
    )
    p.add_argument("--plain-logs", action="store_true", help="human-readable logs instead of JSON lines")
    p.add_argument(
        "--allow-mixed-servers",
        action="store_true",
        help="start even when a live worker on the task queue serves other [servers] (default: refuse; "
        "[worker] allow_mixed_servers)",
    )
    temporal_opts(p, config=False)

    p = command("dev-server", "the embedded Temporal dev server, in the foreground")
    p.add_argument("--db", help="SQLite state file (default: <state dir>/temporal.db; one server per file)")
    p.add_argument("--port", type=_port, default=7233, help="frontend (gRPC) port (default: 7233)")
    p.add_argument("--ui-port", type=_port, default=8233, help="Temporal UI port (default: 8233)")
    p.add_argument("--ip", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    p.add_argument(
        "--ui-codec-endpoint",
        metavar="URL",
        help="the UI decodes payloads through this codec server (e.g. `mcp-tasks codec-server`'s "
        "http://127.0.0.1:8081)",
    )

    p = command("codec-server", "Temporal's remote codec endpoint for the UI and the CLI: stored payloads read")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    p.add_argument("--port", type=_port_or_0, default=8081, help="port (default: 8081; 0 picks a free one)")
    p.add_argument("--config", help="the workers' TOML: its [temporal.storage] (default: $MCP_TASKS_CONFIG)")
    p.add_argument("--codec", metavar="MODULE:ATTR", help="your PayloadCodec (an instance, or a class to call)")
    p.add_argument(
        "--cors-origin",
        action="append",
        metavar="ORIGIN",
        help="a UI origin allowed to call it (repeatable; default: http://localhost:8233, http://127.0.0.1:8233, "
        "https://cloud.temporal.io)",
    )
    p.add_argument(
        "--auth-env",
        default="MCP_TASKS_CODEC_AUTH",
        metavar="VAR",
        help="the variable holding the Authorization header every request must carry (default: "
        "MCP_TASKS_CODEC_AUTH; unset: no check)",
    )
    p.add_argument(
        "--read-stored-on-decode",
        action="store_true",
        help="read stored payloads on /decode too, even when the UI asks to keep them as claims",
    )

    p = command("demo", "embedded Temporal + demo MCP server + worker: see the point in a minute")
    p.add_argument(
        "--keep",
        action="store_true",
        help="keep Temporal, the demo server and the worker running after the demo (Ctrl-C stops)",
    )
    ui_opt(p)

    p = command("demo-server", "the bundled task-capable demo MCP server (streamable HTTP)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    p.add_argument("--port", type=_port_or_0, default=8000, help="port (default: 8000; 0 picks a free one)")
    p.add_argument(
        "--poll-interval-ms",
        type=_positive_int,
        default=500,
        help="pollInterval the server suggests to clients, in ms (default: 500)",
    )
    return parser
