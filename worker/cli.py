"""mcp-tasks: run, follow and operate MCP tasks as Temporal workflows.

Exit codes: 0 the task completed without tool error · 1 it ended otherwise (or is not finished) ·
2 bad input or usage · 3 Temporal or the MCP server unreachable at start.
With --json stdout carries exactly one JSON object on every exit (errors: {"error": {"kind", "message"}});
progress and logs go to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import json
import os
import shlex
import shutil
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from mcp_temporal_tasks.worker.printable import printable

EXIT_OK, EXIT_ENDED, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3
EXIT_INTERRUPTED = 130
DEFAULT_ADDRESS = "localhost:7233"
WORKER_CONNECT_WAIT_S = 60.0  # how long `mcp-tasks worker` waits for Temporal to come up
#: Longest workflow id the CLI accepts (Temporal's own default limit is 1,000 bytes; ids are also shown in links).
MAX_ID_CHARS = 255
#: A task that `run` starts with its own in-process worker goes to a task queue of that command alone (this
#: prefix and a random suffix): no other worker, with another configuration, can take it.
RUN_QUEUE_PREFIX = "mcp-tasks-run-"
#: After the first Ctrl-C (or SIGTERM) of a foreground `run`: how long the task has to report how it ended.
CANCEL_WAIT_S = 4.0
#: `status`: how long a worker has to answer the status query.
STATUS_QUERY_S = 5.0
_KINDS = {EXIT_ENDED: "ended", EXIT_USAGE: "usage", EXIT_UNREACHABLE: "unreachable", EXIT_INTERRUPTED: "interrupted"}


class CliError(Exception):
    """One line for the user and an exit code; ``kind`` names it in the ``--json`` error object."""

    def __init__(self, message: str, code: int, *, kind: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.kind = kind or _KINDS.get(code, "error")


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line and exit 2 (and, with --json, one JSON error object), never argparse's exit."""

    def error(self, message: str) -> Any:
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


def err(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def emit(args: argparse.Namespace, obj: Any, human: str) -> None:
    """The one place that writes results to stdout."""
    if getattr(args, "json", False):
        print(json.dumps(obj, default=str), flush=True)
    else:
        print(human, flush=True)


# --- Temporal connection -------------------------------------------------------------------------


def _address(args: argparse.Namespace) -> tuple[str, str, bool]:
    """(address, namespace, explicit): explicit when given by flag, TEMPORAL_ADDRESS or a temporal.toml profile
    (Temporal's environment configuration); otherwise the default, where the embedded Temporal may start."""
    from mcp_temporal_tasks.worker.config import ConfigError
    from mcp_temporal_tasks.worker.runner import connect_options

    try:
        options, explicit = connect_options(address=args.address, namespace=getattr(args, "namespace", None))
    except ConfigError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    check_address(options["target_host"], "--address" if args.address else "the Temporal address (TEMPORAL_ADDRESS "
                  "or temporal.toml)")
    return options["target_host"], options["namespace"], explicit


def _why(exc: BaseException) -> str:
    """An exception as one line that is never empty (a bare TimeoutError has no text)."""
    text = " ".join(str(exc).split())
    if isinstance(exc, TimeoutError) and not text:
        return "no answer in time"
    return printable(text) or type(exc).__name__


def check_address(address: str, source: str) -> None:
    """``HOST:PORT`` or exit 2 naming where the address came from."""
    host, sep, port = address.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or any(c.isspace() for c in address) or "/" in host or not port.isdigit() \
            or not 0 < int(port) < 65536:
        raise CliError(f"{source} {address!r} is not HOST:PORT (e.g. localhost:7233)", EXIT_USAGE)


async def check_namespace(client: Any, namespace: str, address: str) -> None:
    """An unknown namespace is exit 2, named as such (the server would answer each call with NOT_FOUND)."""
    from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
    from temporalio.service import RPCError, RPCStatusCode

    try:
        await client.workflow_service.describe_namespace(DescribeNamespaceRequest(namespace=namespace), timeout=None)
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            raise CliError(f"namespace {namespace!r} does not exist at {address} (--namespace or TEMPORAL_NAMESPACE; "
                           "create it with `temporal operator namespace create`)", EXIT_USAGE,
                           kind="namespace") from None
        # Anything else (e.g. not permitted to describe it): the commands themselves will say.


def check_ui_url(url: str, source: str) -> str:
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc or any(c.isspace() for c in url):
        raise CliError(f"{source} {url!r} is not an http(s) URL (e.g. http://localhost:8080)", EXIT_USAGE)
    return url.rstrip("/")


def ui_base(address: str, *, given: str | None = None, configured: str | None = None,
            started: str | None = None) -> str | None:
    """Where the Temporal UI of ``address`` is, or None when nothing says so (no link rather than a dead one):
    ``--ui-url``, then ``$MCP_TASKS_UI_URL``, then ``[temporal] ui_url``, then the dev server this command
    started, then the lock file of a dev server serving the default state at ``address``."""
    from mcp_temporal_tasks.worker.devserver import ui_for_address

    if given:
        return check_ui_url(given, "--ui-url")
    if os.environ.get("MCP_TASKS_UI_URL"):
        return check_ui_url(os.environ["MCP_TASKS_UI_URL"], "$MCP_TASKS_UI_URL")
    if configured:
        return check_ui_url(configured, "[temporal] ui_url")
    if started:
        return started.rstrip("/")
    return ui_for_address(address)


def ui_link(base: str | None, namespace: str, workflow_id: str) -> str | None:
    from urllib.parse import quote

    if base is None:
        return None
    return f"{base}/namespaces/{namespace}/workflows/{quote(workflow_id, safe='')}"


@contextlib.asynccontextmanager
async def temporal(args: argparse.Namespace, *, allow_embedded: bool = False, detached: bool = False,
                   configured_ui: str | None = None) -> AsyncIterator[tuple[Any, str | None]]:
    """Yield (client, UI base URL or None). Starts the embedded default when allowed and nothing listens at the
    default.

    ``detached``: the caller exits before the task runs, so an embedded server (which would stop with it) is
    refused with the command that starts one that outlives it.
    """
    from mcp_temporal_tasks.worker.devserver import DevServer, DevServerError, StateInUse, port_open
    from mcp_temporal_tasks.worker.runner import connect

    address, namespace, explicit = _address(args)
    server = None
    host, port = address.rsplit(":", 1)
    host = host.strip("[]")
    if not explicit and allow_embedded and not port_open(host, int(port)):
        if detached:
            raise CliError(f"--detach needs a Temporal that outlives this command, and none serves at {address}: "
                           "start one with `mcp-tasks dev-server` (and a worker with `mcp-tasks worker`), "
                           "or run without --detach", EXIT_USAGE)
        try:
            server = DevServer(port=int(port)).start()
        except StateInUse as exc:
            raise CliError(f"cannot start the embedded Temporal: {exc}", EXIT_USAGE, kind="state_in_use") from None
        except DevServerError as exc:
            raise CliError(f"cannot start the embedded Temporal: {exc}", EXIT_UNREACHABLE) from None
        err(f"started the embedded Temporal at {address} (state: {server.db}; UI {server.ui_url})")
    try:
        try:
            # An embedded server we started already serves (DevServer.start waits for that). Another that
            # listens may still be starting: it gets time to become healthy; nothing listening fails at once.
            wait_s = 5.0 if server is None and port_open(host, int(port)) else 0.0
            client = await asyncio.wait_for(connect(address, namespace, wait_s=wait_s), timeout=wait_s + 15)
        except Exception as exc:
            raise CliError(f"Temporal is unreachable at {address}: {_why(exc)}", EXIT_UNREACHABLE) from None
        await check_namespace(client, namespace, address)
        yield client, ui_base(address, given=getattr(args, "ui_url", None), configured=configured_ui,
                              started=server.ui_url if server else None)
    finally:
        if server is not None:
            server.stop()


# --- run -----------------------------------------------------------------------------------------


def _request(args: argparse.Namespace) -> Any:
    from mcp_temporal_tasks.activities.wire.models import Endpoint
    from mcp_temporal_tasks.workflows.models import McpTaskRequest, RequestTooLarge, check_request_size

    text = _read_args(args.args)
    try:
        arguments = json.loads(text) if text else {}
    except json.JSONDecodeError as exc:
        raise CliError(f"--args is not valid JSON: {exc}", EXIT_USAGE) from None
    except RecursionError:
        raise CliError("--args is nested too deeply", EXIT_USAGE) from None
    if not isinstance(arguments, dict):
        raise CliError("--args must be a JSON object, e.g. '{\"seconds\": 3}'", EXIT_USAGE)
    try:
        if args.server:
            server: Any = args.server
        elif args.url:
            server = Endpoint(url=args.url)
        else:
            server = Endpoint(command=shlex.split(args.command))
        request = McpTaskRequest(server=server, tool=args.tool, arguments=arguments, era=args.era,
                                 ttl_s=args.ttl, replay=args.replay, idempotent=True if args.idempotent else None,
                                 idempotency_key=args.idempotency_key, principal=args.principal)
        check_request_size(request.arguments)  # refused here, before any workflow starts
        return request
    except RequestTooLarge as exc:
        raise CliError(f"--args: {exc}", EXIT_USAGE) from None
    except (ValidationError, ValueError) as exc:
        raise CliError(f"invalid request: {_plain_errors(exc)}", EXIT_USAGE) from None


def _read_args(spec: str | None) -> str:
    """``--args``: inline JSON, ``@FILE`` (a file's contents) or ``-`` (stdin): large arguments need not pass
    through the command line, which the OS caps (~128 KiB per argument)."""
    if not spec:
        return ""
    if spec == "-":
        raw, where = sys.stdin.buffer.read(), "--args - (stdin)"
    elif spec.startswith("@"):
        path = spec[1:]
        try:
            raw, where = Path(path).read_bytes(), f"--args @{path}"
        except OSError as exc:
            raise CliError(f"--args @{path}: cannot read the file: {exc.strerror or exc}", EXIT_USAGE) from None
    else:
        return spec
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CliError(f"{where}: not UTF-8 text (byte {exc.start})", EXIT_USAGE) from None


def _plain_errors(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'request'}: {e['msg']}" for e in exc.errors())
    return str(exc)


def _endpoint_of(request: Any, cfg: Any) -> Any:
    from mcp_temporal_tasks.activities.wire.models import Endpoint

    return request.server if isinstance(request.server, Endpoint) else (
        cfg.servers[request.server].endpoint() if request.server in cfg.servers else None)


def missing_env_refs(where: str, endpoint: Any) -> list[str]:
    """``where.headers.NAME`` / ``where.env.NAME`` entries whose environment variable is not set."""
    missing = []
    for table, refs in (("headers", endpoint.header_refs or {}), ("env", endpoint.env_refs or {})):
        for name, var in refs.items():
            if var not in os.environ:
                missing.append(f"{where}.{table}.{name} = {{ env = \"{var}\" }}: ${var} is not set")
    return missing


def check_env_refs(cfg: Any, only: list[str] | None = None, inline: Any = None) -> None:
    """A credential reference to an unset variable is a configuration error, named before anything runs."""
    missing = []
    for name, server in sorted(cfg.servers.items()):
        if only is None or name in only:
            missing += missing_env_refs(f"servers.{name}", server.endpoint())
    if inline is not None:
        missing += missing_env_refs("the request's server", inline)
    if missing:
        raise CliError("configuration: " + "; ".join(missing), EXIT_USAGE, kind="config")


async def _preflight(request: Any, cfg: Any, *, stdio: bool) -> None:
    """Fail fast (exit 3) when the MCP server cannot be reached: an HTTP server not listening, or (``stdio``:
    only where this process's worker would spawn it) a command that cannot start or exits before the
    handshake. Never sends ``tools/call``."""
    from mcp_temporal_tasks.activities.wire import McpTaskClient, TaskUnreachable, TransportError

    endpoint = _endpoint_of(request, cfg)
    if endpoint is None or (endpoint.url is None and not stdio):
        return
    try:
        client = await asyncio.wait_for(McpTaskClient.connect(endpoint, era=request.era), timeout=15)
        await client.aclose()
    except (TimeoutError, TransportError, TaskUnreachable) as exc:
        raise CliError(f"MCP server unreachable at start ({printable(endpoint.identity())}): "
                       f"{printable(exc) or 'no answer to initialize within 15 s'}; no tools/call was sent",
                       EXIT_UNREACHABLE) from None
    except Exception as exc:  # it answered: the workflow will report precisely what is wrong
        err(f"note: MCP server at {endpoint.identity()} answered the handshake with: {printable(exc)}")


async def follow(handle: Any, *, ui: str | None, quiet: bool = False) -> Any:
    """Print live progress to stderr until the workflow ends; return its outcome."""
    from mcp_temporal_tasks.workflows.mcp_task import McpTaskWorkflow

    start = time.monotonic()
    from mcp_temporal_tasks.workflows.client import outcome_of

    result = asyncio.create_task(outcome_of(handle))
    last = ""
    if not quiet:
        err(f"following {handle.id}" + (f"  ·  UI: {ui}" if ui else ""))
    while not result.done():
        line = await _progress_line(handle, McpTaskWorkflow)
        if line and line != last and not quiet:
            err(f"[{time.monotonic() - start:6.1f}s] {line}")
            last = line
        await asyncio.wait({result}, timeout=0.5)
    return result.result()


async def live_view(handle: Any, wf: Any) -> Any:
    """The ``status()`` query's view with the live MCP status and ``statusMessage`` of the waiting activity's
    heartbeat (the workflow's own copy is as of its last transition). None when no worker answers."""
    try:
        view = await asyncio.wait_for(handle.query(wf.status), timeout=2)
    except Exception:
        return None
    live = None
    try:
        desc = await asyncio.wait_for(handle.describe(), timeout=2)
        for act in desc.raw_description.pending_activities:
            if act.heartbeat_details.payloads:
                live = json.loads(act.heartbeat_details.payloads[0].data)
    except Exception:
        pass
    if isinstance(live, dict):
        if live.get("status") in ("working", "input_required", "completed", "failed", "cancelled"):
            view.task_status = live["status"]
        if isinstance(live.get("statusMessage"), str):
            view.status_message = live["statusMessage"]
    return view


def view_line(view: Any, workflow_id: str) -> str:
    """One progress line (and, for each input request or a pending approval, how to answer it)."""
    parts = [view.phase.value]
    # Server text: shown escaped (control and bidi characters), one line per field.
    if view.task_status:
        parts.append(printable(view.task_status))
    if view.status_message:
        parts.append(f"“{printable(view.status_message)}”")
    if view.task_id:
        parts.append(f"task {printable(view.task_id)}")
    line = " · ".join(parts)
    wid = shlex.quote(printable(workflow_id))
    if view.phase.value == "AWAITING_APPROVAL":
        ended = view.operation_attempts[-1].ended if view.operation_attempts else None
        line += (f"\n    waiting for approval to send tools/call again: the last call ended {printable(ended or 'unknown')}"
                 f"\n    approve with: mcp-tasks approve {wid}   (or stop with: mcp-tasks cancel {wid})")
    for p in view.pending_inputs:
        key = printable(p.key)
        line += (f"\n    needs input [{key}]: {printable(p.message or p.method)}\n"
                 f"    answer with: mcp-tasks answer {wid} --key {shlex.quote(key)}")
    return line


async def _progress_line(handle: Any, wf: Any) -> str:
    view = await live_view(handle, wf)
    return view_line(view, handle.id) if view is not None else ""


def outcome_summary(o: Any) -> str:
    """The human view of an outcome. Every server-originated string goes through ``printable``."""
    p = printable
    lines = [f"{o.outcome.value}: {p(o.ledger.tool)} on {p(o.ledger.server)} (workflow {p(o.workflow_id)})"]
    if o.task_id:
        lines.append(f"  task {p(o.task_id)} · last status {p(o.task_status)} · era {p(o.era)}")
    if o.result is not None:
        texts = [p(b.get("text", ""), multiline=True) for b in o.result.get("content", []) if b.get("type") == "text"]
        lines.append("  result: " + (" | ".join(texts) if texts else json.dumps(o.result)[:500]))
    if o.result_ref is not None:
        lines.append(f"  result stored outside history ({o.result_ref.size} bytes): {o.result_ref.uri}")
    if o.error is not None:
        lines.append(f"  error {o.error.code}: {p(o.error.message)}")
    if o.classification is not None:
        lines.append(f"  classification: {o.classification.value}"
                     + (f" · retry after {o.retry_after_s:g}s" if o.retry_after_s is not None else ""))
    if o.reason:
        lines.append(f"  reason: {p(o.reason)}")
    lines.append(f"  tools/call sent: {len(o.operation_attempts)}")
    return "\n".join(lines)


def exit_code(outcome: Any) -> int:
    return EXIT_OK if outcome.outcome.value == "completed" else EXIT_ENDED


def _load_config(args: argparse.Namespace) -> Any:
    from mcp_temporal_tasks.worker.config import ConfigError, load_config

    try:
        return load_config(getattr(args, "config", None))
    except ConfigError as exc:
        raise CliError(f"configuration: {exc}", EXIT_USAGE, kind="config") from None


def _run_logging() -> Path | None:
    """``run``'s (and ``demo``'s) in-process worker logs (activity failures with their tracebacks) go to a log file; the user
    gets the outcome. Errors still reach stderr as one line each, naming the file."""
    import logging

    from mcp_temporal_tasks.activities.wire.redact import install_log_redaction
    from mcp_temporal_tasks.worker.devserver import state_dir
    from mcp_temporal_tasks.worker.runner import JsonFormatter

    root = logging.getLogger()
    path: Path | None = state_dir() / "run.log"
    handlers: list[logging.Handler] = []
    try:
        assert path is not None
        path.parent.mkdir(parents=True, exist_ok=True)
        file_handler = logging.FileHandler(path, encoding="utf-8")
        file_handler.setFormatter(JsonFormatter())
        install_log_redaction(file_handler)
        handlers.append(file_handler)
    except OSError:
        path = None

    class OneLine(logging.Formatter):
        def format(self, record: logging.LogRecord) -> str:
            where = f" (details: {path})" if path else ""
            return f"mcp-tasks: {record.levelname.lower()}: {printable(record.getMessage())}{where}"

    console = logging.StreamHandler(sys.stderr)
    console.setLevel(logging.ERROR)
    console.setFormatter(OneLine())
    # asyncio's "Task exception was never retrieved" at shutdown (the SDK's pollers): for the log file only.
    console.addFilter(lambda record: not record.name.startswith("asyncio"))
    install_log_redaction(console)
    root.handlers[:] = [*handlers, console]
    root.setLevel(logging.INFO)
    for noisy in ("httpx2", "httpcore2", "mcp"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    return path


async def _existing(client: Any, wid: str) -> Any:
    """The description of workflow ``wid``, or None when there is none."""
    from temporalio.service import RPCError, RPCStatusCode

    try:
        return await client.get_workflow_handle(wid).describe()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return None
        raise


def _resume_command(wid: str) -> str:
    """The command line of this `run`, with ``--id``: typed again, it re-attaches to the task and runs its worker."""
    argv = sys.argv[1:]
    if "--id" not in argv and not any(a.startswith("--id=") for a in argv):
        argv = [*argv, "--id", wid]
    return f"{prog()} {shlex.join(argv)}"


class _Interrupts:
    """SIGINT/SIGTERM while a foreground `run` follows its task. The first asks the workflow to cancel the task
    (``first`` is set); the second calls ``leave`` (which exits at once)."""

    def __init__(self) -> None:
        self.first = asyncio.Event()
        self.count = 0
        self.leave: Callable[[], None] = lambda: None

    def __call__(self) -> None:
        self.count += 1
        if self.count == 1:
            self.first.set()
        else:
            self.leave()

    def install(self, loop: asyncio.AbstractEventLoop) -> list[int]:
        installed: list[int] = []
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, self)
                installed.append(sig)
        return installed


def _leave_now(args: argparse.Namespace, message: str) -> None:
    """The second Ctrl-C: say where the task stands and how to follow it, then exit 130 at once."""
    _report(CliError(message, EXIT_INTERRUPTED), getattr(args, "json", False))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(EXIT_INTERRUPTED)


async def _start_again(client: Any, request: Any, wid: str, queue: str) -> Any:
    """Start ``wid`` again after a run that was refused before anything was sent (``rejected``, no tools/call).

    Only a *failed* earlier run may be replaced (a rejection fails its workflow): if the id has meanwhile
    completed, Temporal refuses and its outcome stands."""
    from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
    from temporalio.exceptions import WorkflowAlreadyStartedError

    from mcp_temporal_tasks.workflows.mcp_task import McpTaskWorkflow, initial_search_attributes

    try:
        return await client.start_workflow(
            McpTaskWorkflow.run, request, id=wid, task_queue=queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE_FAILED_ONLY,
            search_attributes=initial_search_attributes(request),
            static_summary=f"MCP {request.tool} on {request.server_label()}",
            static_details=f"tool `{request.tool}` · server `{request.server_label()}` · "
                           f"replay `{(request.replay.value if request.replay else 'configured')}`")
    except WorkflowAlreadyStartedError:
        return client.get_workflow_handle_for(McpTaskWorkflow.run, wid)


def _refused_before_sending(outcome: Any) -> bool:
    """``rejected`` with no tools/call sent (unknown server, inline endpoint refused, invalid request, server
    unreachable before the call): nothing happened that running it again could repeat."""
    return outcome.outcome.value == "rejected" and not outcome.operation_attempts


def check_inline_for_workers(request: Any, cfg: Any, how: str) -> None:
    """``--detach``/``--no-worker`` with ``--url``/``--command``: the running workers decide, and a worker refuses an
    inline endpoint unless its ``[worker]`` table allows that kind. Refused here (exit 2) unless the configuration
    this command was given (``--config``/``$MCP_TASKS_CONFIG``, the workers' own) allows it."""
    from mcp_temporal_tasks.activities.wire.models import Endpoint

    server = request.server
    if not isinstance(server, Endpoint):
        return
    w = cfg.worker
    if server.url is not None and not w.allow_inline_endpoints:
        key, flag = "allow_inline_endpoints", "--url"
    elif server.command is not None and not w.allow_inline_commands:
        key, flag = "allow_inline_commands", "--command"
    else:
        return
    raise CliError(f"{how} {flag}: a worker refuses an inline endpoint unless its [worker] {key} = true (see "
                   f"Trust model), so no worker would run this task; use --server NAME (a configured server), run "
                   f"without {how} (this command's own worker takes the endpoint you typed), or give --config with "
                   f"the workers' configuration if it allows it", EXIT_USAGE)


async def cmd_run(args: argparse.Namespace) -> int:
    from temporalio.client import WorkflowExecutionStatus

    from mcp_temporal_tasks.activities.wire.models import Endpoint
    from mcp_temporal_tasks.worker.runner import make_activities, run_workers
    from mcp_temporal_tasks.workflows.client import RequestMismatch, default_workflow_id, outcome_of, start_mcp_task
    from mcp_temporal_tasks.workflows.mcp_task import McpTaskWorkflow

    request = _request(args)
    cfg = _load_config(args)
    if args.ui_url:
        check_ui_url(args.ui_url, "--ui-url")
    if isinstance(request.server, str) and request.server not in cfg.servers and not args.no_worker:
        known = ", ".join(sorted(cfg.servers)) or "none"
        raise CliError(f"unknown server {request.server!r} (configured: {known}); use --config, --url or --command",
                       EXIT_USAGE)
    in_process = not args.no_worker and not args.detach
    if in_process:  # this process is the worker: its configuration must be complete
        check_env_refs(cfg, only=[request.server] if isinstance(request.server, str) else [],
                       inline=request.server if isinstance(request.server, Endpoint) else None)
    else:
        check_inline_for_workers(request, cfg, "--detach" if args.detach else "--no-worker")
    wid = args.id or default_workflow_id(request)
    _check_id(wid, "--id")
    _address(args)  # a malformed address is bad input (exit 2), whatever the MCP server does
    # The queue: a private one for a task this command's own worker runs (no other worker, with another
    # configuration, may take it); --task-queue when given; else the configured one the running workers poll.
    queue = args.task_queue or (f"{RUN_QUEUE_PREFIX}{uuid.uuid4().hex[:12]}" if in_process else cfg.temporal.task_queue)
    await _preflight(request, cfg, stdio=in_process)
    if in_process:
        _run_logging()
    loop = asyncio.get_running_loop()
    interrupts = _Interrupts()
    installed: list[int] = []
    async with temporal(args, allow_embedded=True, detached=args.detach, configured_ui=cfg.temporal.ui_url) \
            as (client, ui):
        existing = await _existing(client, wid)
        again = False
        if existing is not None and existing.status == WorkflowExecutionStatus.RUNNING:
            if in_process and not args.task_queue:
                if existing.task_queue.startswith(RUN_QUEUE_PREFIX):
                    queue = existing.task_queue  # left by an earlier `run`: this command is its worker now
                else:
                    in_process = False  # the workers of its queue run it; ours would take nothing
                    queue = existing.task_queue
        elif existing is not None:
            with contextlib.suppress(Exception):
                again = _refused_before_sending(await asyncio.wait_for(outcome_of(client.get_workflow_handle(wid)), 10))
        stop = asyncio.Event()
        worker_task = None
        if not args.detach:
            installed = interrupts.install(loop)
        if in_process:
            from mcp_temporal_tasks.worker.registry import ensure_search_attributes

            await ensure_search_attributes(client, client.namespace)
            cfg.temporal.task_queue = queue
            # The in-process worker may reach the one endpoint its user typed (--url/--command), and nothing
            # else inline beyond what the configuration allows. --no-worker: the running workers decide.
            typed = [request.server] if isinstance(request.server, Endpoint) else []
            worker_task = asyncio.create_task(run_workers(
                client, cfg, stop=stop, activities=make_activities(cfg, inline_allowlist=typed), handle_signals=False))
        interrupted = False
        try:
            try:
                if again:
                    handle = await _start_again(client, request, wid, queue)
                else:
                    handle = await start_mcp_task(client, request, workflow_id=wid, task_queue=queue)
            except RequestMismatch as exc:
                raise CliError(f"{exc} (mcp-tasks run ... --id NEW)", EXIT_USAGE, kind="request_mismatch") from None
            handle = client.get_workflow_handle_for(McpTaskWorkflow.run, wid)
            link = ui_link(ui, client.namespace, wid)
            at = f" (UI: {link})" if link else ""
            if again:
                err(f"note: {wid} was refused before anything was sent (rejected, no tools/call): running it again "
                    "with the same id")
            elif existing is not None:
                when = existing.start_time.strftime("%Y-%m-%d %H:%M:%S UTC") if existing.start_time else "earlier"
                if existing.status == WorkflowExecutionStatus.RUNNING:
                    err(f"note: {wid} is already running (started {when}): following it; no new tools/call is sent. "
                        "To run the tool again as a new task: --id NEW")
                else:
                    err(f"note: {wid} already ran (started {when}): this is its STORED outcome, no new tools/call "
                        f"was sent. To run the tool again: mcp-tasks run ... --id NEW (any new workflow id)")
            if args.detach:
                emit(args, {"workflow_id": wid}, wid)
                err(f"started; a worker on task queue {queue!r} runs it (mcp-tasks worker --task-queue {queue}).{at}")
                return EXIT_OK
            if in_process:
                left = (f"{wid} has no worker now (it ran in this command, on task queue {queue}); resume it with "
                        f"the same command: {_resume_command(wid)}")
            else:
                left = (f"the workers on task queue {queue} finish it; follow it with: {prog()} result "
                        f"{shlex.quote(wid)} --wait")
            cancel_sent = False
            interrupts.leave = lambda: _leave_now(
                args, f"interrupted twice: left {wid} ({'cancel requested' if cancel_sent else 'not cancelled'}); {left}")
            following = asyncio.create_task(follow(handle, ui=link))
            first = asyncio.create_task(interrupts.first.wait())
            await asyncio.wait({following, first}, return_when=asyncio.FIRST_COMPLETED)
            if not following.done():
                interrupted = True
                err(f"interrupted: cancelling {wid} through its workflow (tasks/cancel); waiting up to "
                    f"{CANCEL_WAIT_S:g} s for how it ends. Ctrl-C again to leave at once")
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(handle.cancel(), CANCEL_WAIT_S)
                    cancel_sent = True
                await asyncio.wait({following}, timeout=max(0.1, CANCEL_WAIT_S - 0.5))
                if not following.done():
                    following.cancel()
                    raise CliError(f"interrupted: {wid} did not end within {CANCEL_WAIT_S:g} s of the cancel; {left}",
                                   EXIT_INTERRUPTED)
            first.cancel()
            outcome = following.result()
        finally:
            stop.set()
            if worker_task is not None:
                # After an interrupt the outcome is known: the worker gets a moment, not its whole graceful timeout.
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(asyncio.shield(worker_task), 1.0 if interrupted else None)
            for sig in installed:
                loop.remove_signal_handler(sig)
    emit(args, outcome.model_dump(mode="json"), outcome_summary(outcome))
    if interrupted:
        err(f"mcp-tasks: interrupted: {wid} ended {outcome.outcome.value} after the cancel")
        return EXIT_INTERRUPTED
    return exit_code(outcome)


# --- status / result / cancel / approve / answer / list ------------------------------------------


def _check_id(wid: str, what: str = "ID") -> None:
    if not wid.strip():
        raise CliError(f"{what}: a workflow id must not be empty", EXIT_USAGE)
    if len(wid) > MAX_ID_CHARS:
        raise CliError(f"{what}: a workflow id is at most {MAX_ID_CHARS} characters (this one has {len(wid)})",
                       EXIT_USAGE)


async def _handle(client: Any, wid: str) -> tuple[Any, Any]:
    from temporalio.service import RPCError, RPCStatusCode

    from mcp_temporal_tasks.workflows.mcp_task import McpTaskWorkflow

    handle = client.get_workflow_handle_for(McpTaskWorkflow.run, wid)
    try:
        desc = await handle.describe()
    except RPCError as exc:
        if exc.status != RPCStatusCode.NOT_FOUND:
            raise CliError(f"cannot read task {wid!r}: {exc.message}", EXIT_USAGE) from None
        hint = ""
        if not wid.startswith("mcp-task-") and len(wid) + 9 <= MAX_ID_CHARS \
                and await _existing(client, f"mcp-task-{wid}") is not None:
            hint = f"; did you mean mcp-task-{wid} (the workflow id of --idempotency-key {wid})?"
        raise CliError(f"no such task: {wid!r} in namespace {client.namespace!r}{hint}", EXIT_USAGE,
                       kind="not_found") from None
    return handle, desc


def _resolve_ref(outcome: Any) -> Any:
    if outcome.result is None and outcome.result_ref is not None:
        from mcp_temporal_tasks.activities.result_store import ResultStore

        try:
            outcome.result = ResultStore.get(outcome.result_ref.model_dump())
        except (OSError, ValueError) as exc:
            err(f"warning: cannot read the stored result {outcome.result_ref.uri}: {exc}")
    return outcome


async def cmd_status(args: argparse.Namespace) -> int:
    from temporalio.client import WorkflowExecutionStatus

    from mcp_temporal_tasks.workflows.client import outcome_of
    from mcp_temporal_tasks.workflows.mcp_task import McpTaskWorkflow

    async with temporal(args) as (client, _):
        handle, desc = await _handle(client, args.id)
        if desc.status != WorkflowExecutionStatus.RUNNING:
            try:
                outcome = await outcome_of(handle)
            except Exception as exc:
                # No outcome (terminated, timed out, cancelled before it could record one): say what Temporal says.
                why = _why(getattr(exc, "cause", None) or exc)
                emit(args, {"workflow_id": args.id, "workflow_status": desc.status.name, "error": why},
                     f"{printable(args.id)}: workflow {desc.status.name}, no outcome recorded: {why}")
                return EXIT_ENDED
            emit(args, outcome.model_dump(mode="json"), outcome_summary(outcome))
            return exit_code(outcome)
        await query_status(client, handle, desc)
        view = await live_view(handle, McpTaskWorkflow)
        if view is None:
            raise CliError(f"{args.id} is running but no worker answered the status query", EXIT_UNREACHABLE)
        # The JSON and the text show the same view (live status and statusMessage included).
        emit(args, view.model_dump(mode="json"), f"{printable(args.id)}: {view_line(view, args.id)}")
        return EXIT_ENDED


async def _pollers(client: Any, queue: str) -> int | None:
    """How many workers the server has seen polling ``queue`` for workflow tasks lately (None: unknown)."""
    from temporalio.api.taskqueue.v1 import TaskQueue
    from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest

    try:
        resp = await asyncio.wait_for(client.workflow_service.describe_task_queue(DescribeTaskQueueRequest(
            namespace=client.namespace, task_queue=TaskQueue(name=queue))), 5)
    except Exception:
        return None
    return len(resp.pollers)


def _no_worker_hint(queue: str, wid: str) -> str:
    if queue.startswith(RUN_QUEUE_PREFIX):
        return (f"it was started by `mcp-tasks run` with its own worker, which is gone: run that same command again "
                f"with --id {shlex.quote(wid)} to resume it (its worker runs a cancel too)")
    return f"start one: {prog()} worker --task-queue {shlex.quote(queue)}"


async def query_status(client: Any, handle: Any, desc: Any) -> Any:
    """The ``status()`` query's answer, or exit 3 at once naming why: no worker polls the task's queue, or none
    answered within STATUS_QUERY_S."""
    from mcp_temporal_tasks.workflows.mcp_task import McpTaskWorkflow

    queue = desc.task_queue
    if await _pollers(client, queue) == 0:
        raise CliError(f"{handle.id} is running but no worker polls its task queue {queue!r}: "
                       f"{_no_worker_hint(queue, handle.id)}",
                       EXIT_UNREACHABLE, kind="no_worker")
    try:
        return await asyncio.wait_for(handle.query(McpTaskWorkflow.status), timeout=STATUS_QUERY_S)
    except Exception as exc:
        raise CliError(f"{handle.id} is running but no worker answered the status query within {STATUS_QUERY_S:g} s "
                       f"(task queue {queue!r}; {_why(exc)}); if its workers have stopped: "
                       f"{_no_worker_hint(queue, handle.id)}",
                       EXIT_UNREACHABLE, kind="no_worker") from None


async def _ended(handle: Any, desc: Any) -> str:
    """How a finished task ended, for messages: its outcome (``cancelled``), else the workflow's status."""
    from mcp_temporal_tasks.workflows.client import outcome_of

    try:
        outcome = await asyncio.wait_for(outcome_of(handle), 10)
    except Exception:
        return f"workflow {desc.status.name.lower()}"
    return outcome.outcome.value


async def cmd_result(args: argparse.Namespace) -> int:
    from temporalio.client import WorkflowExecutionStatus

    async with temporal(args) as (client, ui):
        handle, desc = await _handle(client, args.id)
        if desc.status == WorkflowExecutionStatus.RUNNING and not args.wait:
            raise CliError(f"{args.id} is still running; add --wait to wait for it", EXIT_ENDED)
        if desc.status == WorkflowExecutionStatus.RUNNING and await _pollers(client, desc.task_queue) == 0:
            err(f"note: no worker polls task queue {desc.task_queue!r}, so {args.id} cannot end until one does: "
                f"{_no_worker_hint(desc.task_queue, args.id)}")
        try:
            outcome = await follow(handle, ui=ui_link(ui, client.namespace, args.id), quiet=not args.wait)
        except Exception as exc:
            raise CliError(f"{args.id}: workflow did not produce an outcome: {exc}", EXIT_ENDED) from None
    outcome = _resolve_ref(outcome)
    emit(args, outcome.model_dump(mode="json"), outcome_summary(outcome))
    return exit_code(outcome)


async def cmd_cancel(args: argparse.Namespace) -> int:
    from temporalio.client import WorkflowExecutionStatus

    async with temporal(args) as (client, _):
        handle, desc = await _handle(client, args.id)
        if desc.status != WorkflowExecutionStatus.RUNNING:
            raise CliError(f"{args.id} has already ended: {await _ended(handle, desc)}; nothing to cancel", EXIT_ENDED)
        # Workflow cancellation is accepted by the server even while no worker runs; the workflow then
        # sends tasks/cancel and keeps the true outcome if the task had already finished.
        await handle.cancel()
    emit(args, {"workflow_id": args.id, "cancel_requested": True}, f"cancel requested for {args.id}")
    return EXIT_OK


async def _update(args: argparse.Namespace, name: str, *update_args: Any, what: str | None = None,
                  refused_code: int = EXIT_ENDED) -> Any:
    what = what or name
    from temporalio.client import WorkflowExecutionStatus, WorkflowUpdateFailedError
    from temporalio.service import RPCError

    async with temporal(args) as (client, _):
        handle, desc = await _handle(client, args.id)
        if desc.status != WorkflowExecutionStatus.RUNNING:
            raise CliError(f"{what} refused: {args.id} has already ended: {await _ended(handle, desc)}", EXIT_ENDED)
        if await _pollers(client, desc.task_queue) == 0:
            raise CliError(f"{what}: {args.id} is running but no worker polls its task queue {desc.task_queue!r}: "
                           f"{_no_worker_hint(desc.task_queue, args.id)}", EXIT_UNREACHABLE, kind="no_worker")
        try:
            return await asyncio.wait_for(handle.execute_update(name, *update_args), timeout=30)
        except WorkflowUpdateFailedError as exc:
            # The task runs but is not in a state that takes this (nothing to approve, the answer does not fit).
            raise CliError(f"{what} refused: {getattr(exc.cause, 'message', None) or exc}", refused_code,
                           kind="refused") from None
        except RPCError as exc:
            raise CliError(f"{what} refused: {exc.message}", EXIT_ENDED, kind="refused") from None
        except TimeoutError:
            raise CliError(f"{what}: no worker processed the update within 30 s (task queue {desc.task_queue!r})",
                           EXIT_UNREACHABLE, kind="no_worker") from None


async def cmd_approve(args: argparse.Namespace) -> int:
    attempt = await _update(args, "approve_replay", what="approve")
    emit(args, {"workflow_id": args.id, "approved": True, "attempt": attempt},
         f"replay approved for {args.id} (tools/call #{attempt} will be sent)")
    return EXIT_OK


def cmd_answer(args: argparse.Namespace) -> int:
    """Synchronous on purpose: the prompts run outside the event loop, so the first Ctrl-C stops at once
    (``asyncio.run`` would turn it into a task cancellation that a blocked ``input()`` never sees)."""
    from mcp_temporal_tasks.workflows.mcp_task import validate_input_response

    if args.response is None and not sys.stdin.isatty():
        raise CliError("answer: standard input is not a terminal, so there is nobody to prompt: give the answer "
                       "with --response, e.g. --response '{\"action\": \"accept\", \"content\": {...}}'", EXIT_USAGE)

    async def read_view() -> Any:
        async with temporal(args) as (client, _):
            from temporalio.client import WorkflowExecutionStatus

            handle, desc = await _handle(client, args.id)
            if desc.status != WorkflowExecutionStatus.RUNNING:
                raise CliError(f"{args.id} has already ended: {await _ended(handle, desc)}; nothing to answer",
                               EXIT_ENDED)
            return await query_status(client, handle, desc)

    view = asyncio.run(read_view())
    pending = {p.key: p for p in view.pending_inputs}
    if not pending:
        raise CliError(f"{args.id} is not waiting for input (phase {view.phase.value})", EXIT_ENDED)
    if args.key and args.key not in pending:
        raise CliError(f"input {args.key!r} is not outstanding; outstanding: {', '.join(pending)}", EXIT_USAGE)
    keys = [args.key] if args.key else list(pending)
    responses: dict[str, Any] = {}
    if args.response is not None:
        try:
            given = json.loads(args.response)
        except json.JSONDecodeError as exc:
            raise CliError(f"--response is not valid JSON: {exc}", EXIT_USAGE) from None
        if not isinstance(given, dict):
            raise CliError("--response must be an object: an ElicitResult, or {key: ElicitResult}", EXIT_USAGE)
        responses = given if set(given) <= set(pending) and given else {k: given for k in keys}
        for key, response in responses.items():  # what the workflow would refuse, refused here as bad input
            if not isinstance(response, dict):
                raise CliError(f"--response [{printable(key)}]: an ElicitResult must be an object", EXIT_USAGE)
            try:
                validate_input_response(pending[key], response)
            except ValueError as exc:
                raise CliError(f"--response: {printable(exc)}", EXIT_USAGE) from None
    else:
        for key in keys:
            responses[key] = prompt_elicitation(pending[key])
    accepted = asyncio.run(_update(args, "provide_input", responses, what="answer", refused_code=EXIT_USAGE))
    emit(args, {"workflow_id": args.id, "answered": sorted(responses), "still_outstanding": accepted},
         f"answered {printable(', '.join(sorted(responses)))}"
         + (f"; still outstanding: {printable(accepted)}" if accepted else ""))
    return EXIT_OK


def _ask(prompt: str) -> str:
    """One line from the terminal; end of input stops (nothing is sent)."""
    try:
        return input(prompt).strip()
    except EOFError:
        raise CliError("answer: input ended before every field was answered; nothing was sent", EXIT_USAGE) from None


def _choices(prop: dict[str, Any]) -> list[Any] | None:
    if isinstance(prop.get("enum"), list):
        return list(prop["enum"])
    options = prop.get("oneOf") or prop.get("anyOf")
    if isinstance(options, list) and options and all(isinstance(o, dict) and "const" in o for o in options):
        return [o["const"] for o in options]
    return None


def _parse_field(raw: str, prop: dict[str, Any]) -> Any:
    """The typed value of one answer, or ValueError with what is expected."""
    kind = prop.get("type", "string")
    choices = _choices(prop)
    if kind == "boolean":
        word = raw.lower()
        if word in ("y", "yes", "true", "1"):
            return True
        if word in ("n", "no", "false", "0"):
            return False
        raise ValueError("answer y or n")
    if kind == "integer":
        try:
            value: Any = int(raw)
        except ValueError:
            raise ValueError("a whole number is expected") from None
    elif kind == "number":
        try:
            value = float(raw)
        except ValueError:
            raise ValueError("a number is expected") from None
    else:
        value = raw
    if choices is not None and value not in choices:
        raise ValueError("one of: " + ", ".join(printable(c) for c in choices))
    import jsonschema

    try:
        jsonschema.validate(value, prop)
    except jsonschema.ValidationError as exc:
        raise ValueError(printable(exc.message)) from None
    except jsonschema.SchemaError:
        pass
    return value


def prompt_elicitation(p: Any) -> dict[str, Any]:
    """Ask a human on the terminal for each field of the requested schema.

    An invalid answer, or Enter at a required field, asks again (never a silent default such as "declined");
    the prompt shows the choices (``[y/n]``, enum values) and the field's description.
    """
    err(f"\n{printable(p.message or p.method, multiline=True)}")
    while True:
        action = _ask("action [accept/decline/cancel] (Enter: accept): ") or "accept"
        if action in ("accept", "decline", "cancel"):
            break
        err(f"  {printable(action)!r} is not one of accept, decline, cancel")
    if action != "accept":
        return {"action": action}
    schema = p.requested_schema or {}
    required = set(schema.get("required", []))
    content: dict[str, Any] = {}
    for name, prop in (schema.get("properties") or {}).items():
        prop = prop if isinstance(prop, dict) else {}
        label = printable(prop.get("title") or name)
        kind = prop.get("type", "string")
        choices = _choices(prop)
        hint = "[y/n]" if kind == "boolean" else (
            "[" + "/".join(printable(c) for c in choices) + "]" if choices else f"({printable(kind)})")
        if "default" in prop:
            hint += f" (Enter: {printable(json.dumps(prop['default']))})"
        elif name not in required:
            hint += " (optional, Enter skips)"
        else:
            hint += " (required)"
        if prop.get("description"):
            err(f"  {label}: {printable(prop['description'])}")
        while True:
            raw = _ask(f"{label} {hint}: ")
            if not raw:
                if "default" in prop:
                    content[name] = prop["default"]
                    break
                if name not in required:
                    break
                err(f"  {label} is required")
                continue
            try:
                content[name] = _parse_field(raw, prop)
                break
            except ValueError as exc:
                err(f"  {printable(raw)!r}: {exc}")
    return {"action": "accept", "content": content}


#: ``McpTaskStatus`` values: the server's task statuses, our phases before and between them, and the outcome a
#: finished task without a terminal server status is listed under.
def _status_values() -> list[str]:
    from mcp_temporal_tasks.workflows.models import Outcome, Phase

    values = ["submitting", "working", "input_required", "awaiting_approval", "replaying", "retrieving",
              "cancelling", "completed", "failed", "cancelled"]
    values += [p.value.lower() for p in Phase if p.value.lower() not in values and p != Phase.DONE]
    return values + [o.value for o in Outcome if o.value not in values]


def _outcome_values() -> list[str]:
    from mcp_temporal_tasks.workflows.models import Outcome

    return [o.value for o in Outcome]


async def cmd_list(args: argparse.Namespace) -> int:
    for option, value, allowed in (("--outcome", args.outcome, _outcome_values()),
                                   ("--status", args.status, _status_values())):
        if value is not None and value not in allowed:
            raise CliError(f"{option} {value!r} is not one of: {', '.join(allowed)}", EXIT_USAGE)
    clauses = ["WorkflowType = 'McpTaskWorkflow'"]
    for attr, value in (("McpOutcome", args.outcome), ("McpTaskStatus", args.status), ("McpServer", args.server),
                        ("McpTool", args.tool)):
        if value:
            if "'" in value or "\\" in value:
                raise CliError(f"invalid value {value!r}: quotes and backslashes cannot be searched", EXIT_USAGE)
            clauses.append(f"{attr} = '{value}'")
    query = " AND ".join(clauses)
    rows = []
    async with temporal(args) as (client, _):
        async for wf in client.list_workflows(query, limit=args.limit):
            sa = {k.name: v for k, v in wf.typed_search_attributes}
            rows.append({"workflow_id": wf.id, "workflow_status": wf.status.name if wf.status else None,
                         "server": sa.get("McpServer"), "tool": sa.get("McpTool"), "task_id": sa.get("McpTaskId"),
                         "task_status": sa.get("McpTaskStatus"), "outcome": sa.get("McpOutcome"),
                         "started": wf.start_time.isoformat() if wf.start_time else None})
    p = printable

    def shown_status(r: dict[str, Any]) -> str:
        # A finished task is shown under its outcome (older histories kept their last server status).
        if r["workflow_status"] != "RUNNING" and r["outcome"]:
            return r["outcome"] if r["task_status"] not in ("completed", "failed", "cancelled") else r["task_status"]
        return r["task_status"] or ""

    table = [("WORKFLOW ID", "SERVER", "TOOL", "STATUS", "OUTCOME", "STARTED")] + [
        (p(r["workflow_id"]), p(r["server"]), p(r["tool"]), p(shown_status(r)), p(r["outcome"] or "-"),
         (r["started"] or "")[:19].replace("T", " ")) for r in rows]
    widths = [min(48, max(len(row[i]) for row in table)) for i in range(5)]
    human = "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)) + "  " + row[5] for row in table)
    if not rows:
        human += "\n(none)"
    emit(args, {"query": query, "workflows": rows}, human)
    return EXIT_OK


# --- worker / dev-server / demo ------------------------------------------------------------------


async def cmd_worker(args: argparse.Namespace) -> int:
    import logging

    from mcp_temporal_tasks.worker.registry import ensure_search_attributes
    from mcp_temporal_tasks.worker.runner import connect, run_workers, setup_logging

    setup_logging(args.log_level, json_logs=not args.plain_logs)
    log = logging.getLogger("mcp_tasks.worker")
    cfg = _load_config(args)
    if args.address:
        cfg.temporal.address = args.address
    if args.namespace:
        cfg.temporal.namespace = args.namespace
    if args.task_queue:
        cfg.temporal.task_queue = args.task_queue
    from mcp_temporal_tasks.worker.config import ConfigError
    from mcp_temporal_tasks.worker.runner import make_activities

    check_env_refs(cfg)  # a credential reference to an unset variable: named now, not as each task's failure
    try:
        activities = make_activities(cfg)  # refuses an unwritable result store before anything runs
    except ConfigError as exc:
        raise CliError(f"configuration: {exc}", EXIT_USAGE, kind="config") from None
    from mcp_temporal_tasks.worker.runner import connect_options

    try:
        options, _ = connect_options(cfg=cfg)
    except ConfigError as exc:
        raise CliError(f"configuration: {exc}", EXIT_USAGE, kind="config") from None
    check_address(options["target_host"], "--address" if args.address else "[temporal] address")
    # What the logs below name: the effective address and namespace, wherever they came from.
    cfg.temporal.address, cfg.temporal.namespace = options["target_host"], options["namespace"]
    # A worker is a service: it may come up before Temporal does (compose, Kubernetes), so with an address from
    # the environment or configuration it waits, and says so at once. An address typed with --address is
    # expected to serve: nothing there fails at once.
    wait_s = 0.0 if args.address else WORKER_CONNECT_WAIT_S
    if wait_s:
        log.info("connecting to Temporal at %s (waiting up to %.0f s for it to come up)", cfg.temporal.address, wait_s)
    try:
        client = await asyncio.wait_for(connect(cfg=cfg, metrics_port=cfg.worker.metrics_port, wait_s=wait_s),
                                        timeout=wait_s + 15)
    except Exception as exc:
        waited = f" (waited {wait_s:.0f} s)" if wait_s else ""
        raise CliError(f"Temporal is unreachable at {cfg.temporal.address}{waited}: {_why(exc)}",
                       EXIT_UNREACHABLE) from None
    await check_namespace(client, cfg.temporal.namespace, cfg.temporal.address)
    added = await ensure_search_attributes(client, cfg.temporal.namespace)
    if added:
        log.info("registered search attributes %s in namespace %s", ", ".join(added), cfg.temporal.namespace)
    else:
        log.info("search attributes already registered in namespace %s", cfg.temporal.namespace)
    if cfg.worker.metrics_port:
        log.info("Prometheus metrics on :%d/metrics", cfg.worker.metrics_port)
    await run_workers(client, cfg, activities=activities, on_ready=lambda: log.info(
        "ready: polling task queue %s on %s (namespace %s; servers: %s)", cfg.temporal.task_queue,
        cfg.temporal.address, cfg.temporal.namespace, ", ".join(sorted(cfg.servers)) or "none",
        extra={"event": "ready", "task_queue": cfg.temporal.task_queue}))
    log.info("stopped")
    return EXIT_OK


async def cmd_dev_server(args: argparse.Namespace) -> int:
    from mcp_temporal_tasks.worker.devserver import DevServer, DevServerError, StateInUse

    server = DevServer(db=args.db, port=args.port, ui_port=args.ui_port, ip=args.ip)
    # SIGINT and SIGTERM stop the server (terminated, killed after 10 s) and release the state file; the server
    # is in our process group and dies with us even if we are killed (DevServer). Installed before it starts:
    # a signal during the start is acted on once it serves.
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stopping.set)
    try:
        server.start(foreground=True)
    except StateInUse as exc:
        raise CliError(str(exc), EXIT_USAGE, kind="state_in_use") from None
    except DevServerError as exc:
        raise CliError(str(exc), EXIT_UNREACHABLE) from None
    err(f"Temporal dev server at {server.address} · UI {server.ui_url or 'off'} · state {server.db} (Ctrl-C stops)")
    try:
        while server.proc and server.proc.poll() is None and not stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), 0.5)
        code = server.proc.returncode if server.proc and not stopping.is_set() else None
    finally:
        await asyncio.to_thread(server.stop)
    if code is not None:
        raise CliError(f"the Temporal dev server exited by itself (code {code}); state {server.db}", EXIT_ENDED)
    err("stopped")
    return EXIT_OK


def _require_demo_extra() -> None:
    """The demo server's fastmcp is an extra: a worker image does not carry it."""
    import importlib.util

    if importlib.util.find_spec("fastmcp") is None:
        raise CliError("the demo needs the [demo] extra: pip install 'mcp-temporal-tasks[demo]' "
                       "(from a checkout: pip install '.[demo]')", EXIT_USAGE)


async def cmd_demo(args: argparse.Namespace) -> int:
    _require_demo_extra()
    from mcp_temporal_tasks.worker.demo import run_demo

    return await run_demo(args)


def cmd_demo_server(args: argparse.Namespace) -> int:
    _require_demo_extra()
    import socket

    from mcp_temporal_tasks.worker import demo_server

    family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
    try:  # what uvicorn would fail on, said in one line
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((args.host, args.port))
    except OSError as exc:
        raise CliError(f"demo-server: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}"
                       + (" (pick another with --port, or --port 0 for a free one)"
                          if exc.errno == errno.EADDRINUSE else ""),
                       EXIT_USAGE) from None
    argv = ["--host", args.host, "--port", str(args.port), "--poll-interval-ms", str(args.poll_interval_ms)]
    demo_server.main(argv)
    return 0


# --- parser --------------------------------------------------------------------------------------


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


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="mcp-tasks", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def temporal_opts(p: argparse.ArgumentParser) -> None:
        p.add_argument("--address", help="Temporal frontend HOST:PORT (default: $TEMPORAL_ADDRESS, a temporal.toml "
                                         "profile, else localhost:7233)")
        p.add_argument("--namespace", help="Temporal namespace (default: $TEMPORAL_NAMESPACE or default)")

    def ui_opt(p: argparse.ArgumentParser) -> None:
        p.add_argument("--ui-url", metavar="URL",
                       help="the Temporal UI for printed links, e.g. http://localhost:8080 (default: "
                            "$MCP_TASKS_UI_URL, [temporal] ui_url, else the dev server's own when mcp-tasks runs it; "
                            "no link otherwise)")

    def json_opt(p: argparse.ArgumentParser) -> None:
        p.add_argument("--json", action="store_true",
                       help="print exactly one JSON object on stdout, also on errors ({\"error\": {...}})")

    p = sub.add_parser("run", help="run one MCP tool call as a durable task and follow it to its outcome")
    p.add_argument("tool", help="tool name")
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--server", help="a server name from the worker configuration")
    target.add_argument("--url", help="streamable HTTP endpoint of the MCP server")
    target.add_argument("--command", help="stdio MCP server command line, e.g. \"node server.mjs\"")
    p.add_argument("--args", metavar="JSON|@FILE|-",
                   help="tool arguments: a JSON object, @FILE to read it from a file, - to read it from stdin "
                        "(at most 512 KiB)")
    p.add_argument("--id", help="workflow id (default: mcp-task-KEY with --idempotency-key, else derived from the "
                                "request). The same id never runs the tool twice: running the same command again "
                                "shows the stored outcome; a new id runs it again")
    p.add_argument("--replay", choices=["never", "if_idempotent", "always", "with_approval"],
                   help="when a new tools/call may be sent after a lost or failed one (default: configured, else never)")
    p.add_argument("--idempotent", action="store_true", help="declare the tool idempotent (trusted: you say so)")
    p.add_argument("--idempotency-key", metavar="KEY",
                   help="your key for this operation (recorded in the ledger); the default workflow id becomes "
                        "mcp-task-KEY, so `mcp-tasks status mcp-task-KEY` finds it")
    p.add_argument("--ttl", type=float, help="requested task TTL in seconds (2025-11-25 servers)")
    p.add_argument("--era", choices=["2025-11-25", "2026-07-28"], help="pin the protocol era")
    p.add_argument("--principal", help="who the call is made for (recorded in the ledger; sessions are pooled per "
                                       "principal)")
    p.add_argument("--detach", action="store_true",
                   help="exit once the workflow is started and print its id; a running worker runs it (needs a "
                        "Temporal that outlives this command: --address, or `mcp-tasks dev-server`)")
    p.add_argument("--no-worker", action="store_true", help="do not run an in-process worker; rely on running ones")
    p.add_argument("--config", help="worker TOML configuration (default: $MCP_TASKS_CONFIG)")
    p.add_argument("--task-queue", metavar="Q",
                   help="task queue of the workflow. Default: with the in-process worker, a queue of this command "
                        f"alone ({RUN_QUEUE_PREFIX}<random>), so no other worker takes the task; with --no-worker "
                        "or --detach, the queue your workers poll ([temporal] task_queue, $MCP_TASKS_TASK_QUEUE, "
                        "else mcp-tasks)")
    ui_opt(p)
    temporal_opts(p)
    json_opt(p)
    p.set_defaults(func=cmd_run)

    for name, helptext, fn in (("status", "show where a task is", cmd_status),
                               ("result", "print a task's outcome", cmd_result),
                               ("cancel", "cancel a task (tasks/cancel); a finished task keeps its outcome", cmd_cancel),
                               ("approve", "approve the pending replay of a task (policy with_approval)", cmd_approve)):
        p = sub.add_parser(name, help=helptext)
        p.add_argument("id", help="workflow id")
        if name == "result":
            p.add_argument("--wait", action="store_true", help="wait for the outcome (exits like run)")
            ui_opt(p)
        temporal_opts(p)
        json_opt(p)
        p.set_defaults(func=fn)

    p = sub.add_parser("answer", help="answer a task's outstanding input request (prompts on a terminal)")
    p.add_argument("id", help="workflow id")
    p.add_argument("--key", help="which input request (default: every outstanding one)")
    p.add_argument("--response", metavar="JSON",
                   help='the answer as an ElicitResult, e.g. \'{"action":"accept","content":{"approve":true}}\' '
                        "(or {KEY: ElicitResult}); needed when stdin is not a terminal")
    temporal_opts(p)
    json_opt(p)
    p.set_defaults(func=cmd_answer)

    p = sub.add_parser("list", help="list MCP task workflows")
    p.add_argument("--outcome", metavar="OUTCOME", help="only tasks that ended so: " + ", ".join(_outcome_values()))
    p.add_argument("--status", metavar="STATUS",
                   help="only tasks whose McpTaskStatus is STATUS: " + ", ".join(_status_values()))
    p.add_argument("--server", help="configured server name (or the inline endpoint as listed)")
    p.add_argument("--tool", help="tool name")
    p.add_argument("--limit", type=_positive_int, default=50, help="show at most this many (default: 50)")
    temporal_opts(p)
    json_opt(p)
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("worker", help="run workflows and activities on a task queue")
    p.add_argument("--config", help="TOML configuration (default: $MCP_TASKS_CONFIG)")
    p.add_argument("--task-queue", help="task queue (default from config, else mcp-tasks)")
    p.add_argument("--log-level", default=os.environ.get("MCP_TASKS_LOG_LEVEL", "INFO"),
                   choices=["DEBUG", "INFO", "WARNING", "ERROR"], type=str.upper,
                   help="log level (default: $MCP_TASKS_LOG_LEVEL or INFO)")
    p.add_argument("--plain-logs", action="store_true", help="human-readable logs instead of JSON lines")
    temporal_opts(p)
    p.set_defaults(func=cmd_worker)

    p = sub.add_parser("dev-server", help="the embedded Temporal dev server, in the foreground")
    p.add_argument("--db", help="SQLite state file (default: <state dir>/temporal.db; one server per file)")
    p.add_argument("--port", type=_port, default=7233, help="frontend (gRPC) port (default: 7233)")
    p.add_argument("--ui-port", type=_port, default=8233, help="Temporal UI port (default: 8233)")
    p.add_argument("--ip", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    p.set_defaults(func=cmd_dev_server)

    p = sub.add_parser("demo", help="embedded Temporal + demo MCP server + worker: see the point in a minute")
    p.add_argument("--keep", action="store_true",
                   help="keep Temporal, the demo server and the worker running after the demo (Ctrl-C stops)")
    ui_opt(p)
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("demo-server", help="the bundled task-capable demo MCP server (streamable HTTP)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    p.add_argument("--port", type=_port_or_0, default=8000, help="port (default: 8000; 0 picks a free one)")
    p.add_argument("--poll-interval-ms", type=_positive_int, default=500,
                   help="pollInterval the server suggests to clients, in ms (default: 500)")
    p.set_defaults(func=cmd_demo_server)
    return parser


def _check_text(args: argparse.Namespace) -> None:
    """Arguments the OS passed as bytes that are not UTF-8 (kept as lone surrogates): exit 2, naming the option."""
    for key, value in vars(args).items():
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                positional = key == "tool" or (key == "id" and args.func is not cmd_run)
                name = key.upper() if positional else f"--{key.replace('_', '-')}"
                raise CliError(f"{name}: not valid UTF-8 text", EXIT_USAGE)
    if getattr(args, "id", None) is not None:
        _check_id(args.id, "--id" if args.func is cmd_run else "ID")


def _report(exc: CliError, as_json: bool) -> None:
    message = printable(exc)  # may quote server text
    err(f"mcp-tasks: {message}")
    if as_json:
        print(json.dumps({"error": {"kind": exc.kind, "message": str(exc)}}), flush=True)


def _run_async(coro: Any) -> int:
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
    from mcp_temporal_tasks.activities.wire.redact import install_log_redaction

    argv = sys.argv[1:] if argv is None else argv
    as_json = "--json" in argv
    try:
        args = build_parser().parse_args(argv)
        as_json = bool(getattr(args, "json", False))
        _check_text(args)
        install_log_redaction()  # `worker` replaces the handlers with its own, redacting as well (setup_logging)
        if asyncio.iscoroutinefunction(args.func):
            code = _run_async(args.func(args))
        else:
            code = args.func(args)
    except CliError as exc:
        _report(exc, as_json)
        code = exc.code
    except KeyboardInterrupt:
        _report(CliError("interrupted; nothing more was sent", EXIT_INTERRUPTED), as_json)
        code = EXIT_INTERRUPTED
    except Exception as exc:  # a bug of ours: one line (MCP_TASKS_DEBUG=1 shows the traceback)
        if os.environ.get("MCP_TASKS_DEBUG"):
            raise
        _report(CliError(f"internal error: {type(exc).__name__}: {exc} (MCP_TASKS_DEBUG=1 shows the traceback)",
                         EXIT_ENDED, kind="internal"), as_json)
        code = EXIT_ENDED
    sys.stdout.flush()
    sys.stderr.flush()
    # The Temporal runtime's threads can abort a normal interpreter shutdown; our work is flushed.
    os._exit(code)


if __name__ == "__main__":
    # Run the module's canonical copy: as ``python -m`` this file is ``__main__``, and an error class raised by
    # another module (``CliError`` from worker/demo.py) would not be the one ``__main__.main`` catches.
    from mcp_temporal_tasks.worker.cli import main as _main

    _main()
