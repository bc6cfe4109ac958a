"""Bundled demo MCP server: the 2026-07-28 / tasks-extension peer.

Once it accepts connections it prints exactly one line to stderr, ``LISTENING http://127.0.0.1:<port>/mcp``, which
whoever started it waits for; nothing goes to stdout, and by default (``--log-level critical``) nothing else to
stderr. A tool's docstring is its description on the wire. Its tools, for users: docs/index.md ("The demo server").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
import os
import secrets
import socket
import sys
import time
import uuid
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import mcp_types
from fastmcp import Context, FastMCP
from fastmcp.exceptions import ToolError
from fastmcp.server.middleware import Middleware, MiddlewareContext
from fastmcp.tools.base import ToolResult
from fastmcp.utilities.tasks import TaskConfig
from fastmcp_tasks import TasksExtension
from mcp.shared.exceptions import MCPError

SERVER_NAME = "mcp-temporal-tasks-demo"
MCP_PATH = "/mcp"
DEFAULT_POLL_INTERVAL_MS = 500

RATE_LIMIT_MESSAGE = "HTTP 429 Too Many Requests: rate limit exceeded; retry-after=30"
RPC_ERROR_CODE = -32602
RPC_ERROR_MESSAGE = "invalid account id: acct-0"
ASK_KEY = "approval"
ASK_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "account": {"type": "string", "title": "Account", "description": "Account to charge"},
        "approve": {"type": "boolean", "title": "Approve"},
    },
    "required": ["approve"],
}
EXPORT_FAILURE_MESSAGE = "export failed: disk quota exceeded on volume exports-1"
ECHO_OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"echo": {"type": "string"}},
    "required": ["echo"],
}


class _TtlTasksExtension(TasksExtension):
    """TasksExtension whose task TTL (Docket ``execution_ttl``) can be set.

    fastmcp-tasks 4.1.4 builds its Docket without an ``execution_ttl`` (Docket
    default 15 min) and ignores any client-requested TTL; this only overrides
    the server-wide value once the Docket exists.

    Every task reports that server-wide TTL as ``ttlMs`` (default 900000 = 15 min);
    ``--task-ttl-ms`` (or ``build_server(task_ttl_ms=...)``) changes it, in whole
    seconds (min 1 s). The clock starts when the task (or its current leg) stops
    running, i.e. on completed/failed/cancelled or on parking in input_required,
    not at ``createdAt``; afterwards every ``tasks/*`` call answers -32602
    "Task <id> not found" (HTTP 400).
    """

    def __init__(self, *, task_ttl_ms: int | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._task_ttl_ms = task_ttl_ms

    @asynccontextmanager
    async def lifespan(self) -> AsyncGenerator[None, None]:
        async with super().lifespan():
            docket = getattr(self.server, "_docket", None)
            if docket is not None and self._task_ttl_ms is not None:
                # Docket stores TTLs in whole seconds and treats 0 as "delete
                # at once": round to whole seconds, at least one, so the
                # advertised ttlMs is the TTL actually applied.
                docket.execution_ttl = timedelta(seconds=max(1, round(self._task_ttl_ms / 1000)))
            yield


def _fmt_seconds(seconds: float) -> str:
    return f"{seconds:g}s"


async def _report(ctx: Context, progress: float, total: float, message: str | None = None) -> None:
    """Best-effort progress: never let status reporting fail the tool."""
    try:
        await ctx.report_progress(progress, total, message)
    except Exception:  # pragma: no cover - cosmetic only
        logging.getLogger(__name__).debug("progress report failed", exc_info=True)


async def _work(ctx: Context, seconds: float, verb: str) -> None:
    """Sleep ``seconds`` in small steps, reporting percent progress and a status message.

    As a task the message surfaces as ``statusMessage`` on ``tasks/get``
    (Docket progress; its total must be an int >= 1, hence percent).
    """
    total = max(0.0, float(seconds))
    await _report(ctx, 0, 100, f"{verb} {_fmt_seconds(total)}")
    deadline = time.monotonic() + total
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        await asyncio.sleep(min(0.25, remaining))
        left = max(0.0, deadline - time.monotonic())
        await _report(ctx, int(100 * (total - left) / total) if total else 100, 100)


def _field(obj: Any, name: str) -> Any:
    if isinstance(obj, dict):
        return obj.get(name)
    return getattr(obj, name, None)


def _text_result(text: str, structured: dict[str, Any] | None = None, *, is_error: bool = False) -> ToolResult:
    return ToolResult(
        content=[mcp_types.TextContent(type="text", text=text)], structured_content=structured, is_error=is_error
    )


def _json_result(structured: dict[str, Any]) -> ToolResult:
    """Structured content plus the same JSON as text (compact, like the TS peer's JSON.stringify)."""
    return _text_result(json.dumps(structured, separators=(",", ":")), structured)


class _ExportJob:
    """One in-memory export job; its state follows from the time elapsed since it started."""

    def __init__(self, job_id: str, seconds: float, fail: bool, garble: bool, rows: int) -> None:
        self.job_id = job_id
        self.seconds = max(0.0, float(seconds))
        self.fail = fail
        self.garble = garble
        self.rows = max(0, int(rows))
        self.started = time.monotonic()
        self.cancelled_at: float | None = None

    def _elapsed(self) -> float:
        end = self.cancelled_at if self.cancelled_at is not None else time.monotonic()
        return end - self.started

    def state(self) -> str:
        if self.cancelled_at is not None:
            return "cancelled"
        if self._elapsed() < self.seconds:
            return "running"
        return "failed" if self.fail else "succeeded"

    def progress(self) -> float:
        if self.seconds <= 0:
            return 1.0
        return round(min(1.0, self._elapsed() / self.seconds), 3)

    def status(self) -> dict[str, Any]:
        state = self.state()
        progress = self.progress()
        if state == "failed":
            message, error = EXPORT_FAILURE_MESSAGE, EXPORT_FAILURE_MESSAGE
        else:
            message, error = f"exported {math.floor(progress * self.rows)}/{self.rows} rows", None
        return {"jobId": self.job_id, "state": state, "progress": progress, "message": message, "error": error}


class _ExportJobs:
    """The job store of one demo server (in memory; the server process is its lifetime)."""

    def __init__(self) -> None:
        self._jobs: dict[str, _ExportJob] = {}
        self._counter = 0

    def start(self, seconds: float, fail: bool, garble: bool, rows: int) -> _ExportJob:
        self._counter += 1
        job = _ExportJob(f"exp-{self._counter}-{secrets.token_hex(3)}", seconds, fail, garble, rows)
        self._jobs[job.job_id] = job
        return job

    def get(self, job_id: str) -> _ExportJob | None:
        return self._jobs.get(job_id)


def _no_such_job(job_id: str) -> ToolResult:
    return _text_result(f"no such job: {job_id}", is_error=True)


class ProtocolErrorPassthrough(Middleware):
    """Foreground ``tools/call``: let a tool's ``MCPError`` reach the wire as a JSON-RPC error.

    FastMCP masks any non-``ToolError`` exception of a synchronously run tool into
    an ``isError`` result ("Error calling tool ..."). A task run of the same tool
    ends ``failed`` with the JSON-RPC error; this keeps the inline path consistent.
    """

    async def on_call_tool(self, context: MiddlewareContext[Any], call_next: Any) -> Any:
        try:
            return await call_next(context)
        except ToolError as exc:
            cause = exc.__cause__
            if isinstance(cause, MCPError):
                raise MCPError(code=cause.error.code, message=cause.error.message, data=cause.error.data) from None
            raise


def build_server(poll_interval_ms: int = DEFAULT_POLL_INTERVAL_MS, task_ttl_ms: int | None = None) -> FastMCP:
    """Build the demo server (tools + tasks extension on ``memory://``).

    A real task-capable MCP server built on ``fastmcp[tasks]==4.1.4`` with the SEP-2663 tasks extension
    (``io.modelcontextprotocol/tasks``) on an in-memory Docket backend (``memory://``, single process, no Redis). It
    is both the demo server of the CLI and the extension-era fixture of the test suite.

    Era: 2026-07-28 requests (per-request ``_meta``, no session) are answered with ``application/json``. The same
    endpoint also accepts a 2025-11-25 ``initialize`` (stateful, ``Mcp-Session-Id``, SSE replies unless
    ``--json-response``), but on that era there are no tasks: ``tasks/*`` answer -32601 and ``params.task`` is
    ignored.

    Task modes (in each tool's comment): ``optional`` runs as a task only when the request declares the extension in
    ``_meta`` and inline otherwise; ``required`` answers -32021 without it; ``forbidden`` (``task=False``) never runs
    as a task.
    """
    poll = timedelta(milliseconds=max(1, int(poll_interval_ms)))
    optional = TaskConfig(mode="optional", poll_interval=poll)
    required = TaskConfig(mode="required", poll_interval=poll)

    mcp = FastMCP(SERVER_NAME)
    mcp.add_middleware(ProtocolErrorPassthrough())
    # A distinct in-memory backend per server: docket caches memory:// backends
    # by URL (and event loop), so two demo servers built in one process would
    # otherwise share one task queue and store.
    mcp.add_extension(_TtlTasksExtension(url=f"memory://demo-{uuid.uuid4().hex}", task_ttl_ms=task_ttl_ms))

    # [optional] text + structured {"echo": text}; statusMessage "sleeping <seconds>s" while working.
    @mcp.tool(task=optional, output_schema=ECHO_OUTPUT_SCHEMA)
    async def slow_echo(ctx: Context, seconds: float = 1, text: str = "hello") -> ToolResult:
        """Echo `text` after sleeping `seconds` (reports 'sleeping Ns' while working)."""
        await _work(ctx, seconds, "sleeping")
        return ToolResult(
            content=[mcp_types.TextContent(type="text", text=text)],
            structured_content={"echo": text},
        )

    # [optional] tool error (isError) "HTTP 429 ..."; as a task: completed with result.isError true.
    @mcp.tool(task=optional)
    async def rate_limited() -> str:
        """Always ends with a tool error (isError): HTTP 429 rate limit exceeded."""
        raise ToolError(RATE_LIMIT_MESSAGE)

    # [optional] JSON-RPC error -32602 "invalid account id: acct-0"; as a task: failed with error {code, message};
    # inline: a JSON-RPC error reply (HTTP 400).
    @mcp.tool(task=optional)
    async def rpc_error() -> str:
        """Always ends with JSON-RPC error -32602 'invalid account id: acct-0'."""
        raise MCPError(code=RPC_ERROR_CODE, message=RPC_ERROR_MESSAGE)

    # [required] works `seconds` unless cancelled.
    @mcp.tool(task=required)
    async def cancellable(ctx: Context, seconds: float = 60) -> str:
        """Works `seconds` unless cancelled; a task-only tool (taskSupport required on 2025-11-25)."""
        await _work(ctx, seconds, "working")
        return f"finished after {_fmt_seconds(seconds)}"

    # [forbidden] plain synchronous tool.
    @mcp.tool(task=False)
    def quick_sync(text: str = "hi") -> str:
        """Plain synchronous tool (never a task)."""
        return text

    # [optional] asks the client for {account?: str, approve: bool} with the guard pattern (fastmcp-tasks refuses
    # imperative ctx.elicit in a task): as a task it goes input_required with inputRequests answered by tasks/update;
    # inline it answers resultType "input_required" (retry the call with inputResponses: {"approval": ElicitResult}).
    # accept+approve -> "approved account=<account>", accept/approve=false or decline -> "declined", cancel -> tool
    # error "cancelled by user".
    @mcp.tool(task=optional)
    async def ask_user(
        ctx: Context, question: str = "Approve payment of 10 EUR?"
    ) -> str | mcp_types.InputRequiredResult:
        """Asks the client {account?: str, approve: bool}; answers 'approved account=..' or 'declined'."""
        responses = ctx.input_responses or {}
        answer = responses.get(ASK_KEY)
        if answer is None:
            return mcp_types.InputRequiredResult(
                input_requests={
                    ASK_KEY: mcp_types.ElicitRequest(
                        params=mcp_types.ElicitRequestFormParams(message=question, requested_schema=ASK_SCHEMA)
                    )
                }
            )
        action = _field(answer, "action")
        content = _field(answer, "content") or {}
        if action == "cancel":
            raise ToolError("cancelled by user")
        if action == "accept" and content.get("approve") is True:
            return f"approved account={content.get('account') or ''}"
        return "declined"

    # [optional] side-effect demo, 2 s, "charged <amount_cents>"; readOnlyHint/idempotentHint false.
    @mcp.tool(
        task=optional,
        annotations=mcp_types.ToolAnnotations(read_only_hint=False, idempotent_hint=False),
    )
    async def charge_card(ctx: Context, amount_cents: int, idempotency_key: str = "") -> str:
        """Side-effecting demo: 'charges' `amount_cents` after 2 s."""
        await _work(ctx, 2, "charging")
        return f"charged {amount_cents}"

    # --- job tools: plain tools (task=False) modelling a "start, then poll" job API -------------------
    # A "start a job, poll its status" API that a client has to turn into a task itself. Same names, arguments and
    # reply shapes as the TS peer (tests/peers/ts/server.mjs). Jobs live in memory, per server (one per process when
    # run as a peer).
    jobs = _ExportJobs()

    # {"jobId": "exp-<n>-<6 hex>"}, text "started export job <id>". The job is running until `seconds` elapsed, then
    # succeeded (failed with `fail`).
    @mcp.tool(task=False)
    async def start_export(seconds: float = 2, fail: bool = False, garble: bool = False, rows: int = 3) -> ToolResult:
        """Starts an export job and answers at once with {"jobId"}; poll it with get_export_status.

        The job runs `seconds`, then succeeds with `rows` rows (or fails if `fail`). With `garble`,
        get_export_status answers a malformed status for it.
        """
        job = jobs.start(seconds, fail, garble, rows)
        return _text_result(f"started export job {job.job_id}", {"jobId": job.job_id})

    # Structured (and the same JSON as text) {"jobId", "state": running|succeeded|failed|cancelled, "progress": 0..1,
    # "message": "exported k/rows rows" | "export failed: disk quota exceeded on volume exports-1", "error": null |
    # that failure message}. A job started with `garble` answers {"jobId", "phase": "??"} (no state), text "garbled".
    # Unknown id: isError "no such job: <id>".
    @mcp.tool(task=False)
    async def get_export_status(jobId: str) -> ToolResult:
        # The docstring is the tool's description on the wire: split by implicit concatenation, byte-identical.
        # fmt: off
        ("Status of an export job: "
         '{"jobId", "state" (running|succeeded|failed|cancelled), "progress" (0..1), "message", "error"}.')
        # fmt: on
        job = jobs.get(jobId)
        if job is None:
            return _no_such_job(jobId)
        if job.garble:
            return _text_result("garbled", {"jobId": job.job_id, "phase": "??"})
        return _json_result(job.status())

    # succeeded -> {"jobId", "rows": [{"n": 1}, ...]} (JSON as text); otherwise isError "job <id> is <state>".
    @mcp.tool(task=False)
    async def download_export(jobId: str) -> ToolResult:
        """Rows of a succeeded export job: {"jobId", "rows": [{"n": 1}, ...]}; an error while it is not succeeded."""
        job = jobs.get(jobId)
        if job is None:
            return _no_such_job(jobId)
        state = job.state()
        if state != "succeeded":
            return _text_result(f"job {job.job_id} is {state}", is_error=True)
        return _json_result({"jobId": job.job_id, "rows": [{"n": n} for n in range(1, job.rows + 1)]})

    # A running job becomes cancelled (a terminal one stays as it is); {"jobId", "state": <state after>} (JSON as text).
    @mcp.tool(task=False)
    async def cancel_export(jobId: str) -> ToolResult:
        """Cancels a running export job (a finished one stays as it is); answers {"jobId", "state"}."""
        job = jobs.get(jobId)
        if job is None:
            return _no_such_job(jobId)
        if job.state() == "running":
            job.cancelled_at = time.monotonic()
        return _json_result({"jobId": job.job_id, "state": job.state()})

    # Answers "slow_progress done after <seconds>s" after `seconds`; every `every` seconds it sends
    # notifications/progress (progress i, total n, message "step i/n") when the request carried a progressToken.
    @mcp.tool(task=False)
    async def slow_progress(ctx: Context, seconds: float = 60, every: float = 5) -> ToolResult:
        # The docstring is the tool's description on the wire: split by implicit concatenation, byte-identical.
        # fmt: off
        ("Plain synchronous tool that answers after `seconds`, sending a progress notification ('step i/n') "
         "every `every` seconds.")
        # fmt: on
        total = max(0.0, float(seconds))
        step = float(every) if every and every > 0 else total
        n = max(1, math.ceil(total / step - 1e-9)) if step > 0 else 1
        start = time.monotonic()
        for i in range(1, n + 1):
            await asyncio.sleep(max(0.0, start + min(total, i * step) - time.monotonic()))
            await _report(ctx, i, n, f"step {i}/{n}")
        # Text only (no structuredContent, no outputSchema), like the TS peer.
        return _text_result(f"slow_progress done after {_fmt_seconds(seconds)}")

    return mcp


class PeerLogMiddleware:
    """ASGI wrapper appending one JSON line per incoming JSON-RPC message.

    Installed when env ``PEER_LOG=/path/file.jsonl`` is set: one line per message (``ts`` ms, ``pid``, ``method``,
    ``id``, ``tool`` for ``tools/call``, ``taskId`` for ``tasks/*``, ``mcpName``: the ``Mcp-Name`` header as
    received, ``traceparent``). As an ASGI wrapper it also sees requests the MCP layer rejects (e.g. -32020 /
    -32021). Notifications are logged with id null.
    """

    def __init__(self, app: Any, path: str) -> None:
        self.app = app
        self.path = path

    def _write(self, body: bytes, mcp_name: str | None) -> None:
        try:
            payload = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            return
        messages = payload if isinstance(payload, list) else [payload]
        lines = []
        for msg in messages:
            if not isinstance(msg, dict) or "method" not in msg:
                continue  # responses to server requests carry no method
            method = msg.get("method")
            raw_params = msg.get("params")
            params: dict[str, Any] = raw_params if isinstance(raw_params, dict) else {}
            lines.append(
                json.dumps(
                    {
                        "ts": int(time.time() * 1000),
                        "pid": os.getpid(),
                        "method": method,
                        "id": msg.get("id"),
                        "tool": params.get("name") if method == "tools/call" else None,
                        "taskId": params.get("taskId")
                        if isinstance(method, str) and method.startswith("tasks/")
                        else None,
                        "mcpName": mcp_name,
                        "traceparent": (params.get("_meta") or {}).get("traceparent")
                        if isinstance(params.get("_meta"), dict)
                        else None,
                    }
                )
                + "\n"
            )
        if not lines:
            return
        try:
            with open(self.path, "a", encoding="utf-8") as fh:
                fh.write("".join(lines))
                fh.flush()
        except OSError as exc:  # logging must never break the server
            print(f"PEER_LOG write failed: {exc}", file=sys.stderr, flush=True)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope.get("type") != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] != "http.request":
                # Client went away before the body arrived; let the app see it.
                async def _gone(msg: Any = message) -> Any:
                    return msg

                await self.app(scope, _gone, send)
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        mcp_name = None
        for key, value in scope.get("headers") or []:
            if key.lower() == b"mcp-name":
                mcp_name = value.decode("latin-1")
        self._write(body, mcp_name)
        replayed = False

        async def _replay() -> Any:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, _replay, send)


def build_app(mcp: FastMCP, *, json_response: bool = False) -> Any:
    """The ASGI app: streamable HTTP at ``/mcp``, wrapped by PEER_LOG if set."""
    app = mcp.http_app(path=MCP_PATH, transport="http", json_response=json_response)
    peer_log = os.environ.get("PEER_LOG")
    if peer_log:
        return PeerLogMiddleware(app, peer_log)
    return app


_QUIET_LOGGERS = ("fastmcp", "fastmcp_tasks", "docket", "mcp", "uvicorn", "uvicorn.error", "uvicorn.access")


def _configure_logging(level: str) -> None:
    """Server-side logs go to stderr only; default is quiet (``critical``).

    The demo tools fail on purpose, and FastMCP/Docket log a traceback for each
    failure. A parent that reads only the LISTENING line and never drains
    stderr would eventually block the server on a full pipe, so keep it quiet
    unless asked (``--log-level info|debug|warning|error``).
    """
    numeric = getattr(logging, level.upper(), logging.CRITICAL)
    for name in _QUIET_LOGGERS:
        logging.getLogger(name).setLevel(numeric)


async def _serve(
    host: str, port: int, poll_interval_ms: int, task_ttl_ms: int | None, json_response: bool, log_level: str
) -> None:
    import uvicorn

    mcp = build_server(poll_interval_ms, task_ttl_ms=task_ttl_ms)
    app = build_app(mcp, json_response=json_response)

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY only then; without it every keep-alive reply
    # waits for the client's delayed ACK (~40 ms per request, measured in bench/).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    sock.setblocking(False)
    bound_port = sock.getsockname()[1]

    config = uvicorn.Config(
        app,
        log_level=log_level if log_level in ("critical", "error", "warning", "info", "debug", "trace") else "critical",
        access_log=log_level in ("info", "debug", "trace"),
        lifespan="on",
        timeout_graceful_shutdown=2,
        ws="none",
    )
    server = uvicorn.Server(config)
    serve_task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if serve_task.done():
            await serve_task  # re-raise the startup failure
            raise SystemExit(1)
        await asyncio.sleep(0.01)
    display_host = f"[{host}]" if ":" in host else host
    print(f"LISTENING http://{display_host}:{bound_port}{MCP_PATH}", file=sys.stderr, flush=True)
    await serve_task


def main(argv: list[str] | None = None) -> None:
    """Serve until SIGTERM/SIGINT (uvicorn re-raises the signal, so the exit status is -15 / -2). Run from the
    repository root::

        python -m mcp_temporal_tasks.demo.server --host 127.0.0.1 --port 0 [--poll-interval-ms 500]
            [--task-ttl-ms MS] [--json-response] [--log-level critical|error|warning|info|debug]

    Streamable HTTP on path ``/mcp``; ``--port 0`` picks a free port.
    """
    parser = argparse.ArgumentParser(
        prog="python -m mcp_temporal_tasks.demo.server", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--poll-interval-ms", type=int, default=DEFAULT_POLL_INTERVAL_MS)
    parser.add_argument(
        "--task-ttl-ms", type=int, default=None, help="task TTL (ttlMs); default Docket's 15 min; min 1000"
    )
    parser.add_argument("--json-response", action="store_true", help="answer POSTs with JSON instead of SSE")
    parser.add_argument(
        "--log-level",
        default="critical",
        choices=["critical", "error", "warning", "info", "debug"],
        help="server log level on stderr (default: critical = quiet)",
    )
    args = parser.parse_args(argv)
    _configure_logging(args.log_level)
    try:
        asyncio.run(
            _serve(args.host, args.port, args.poll_interval_ms, args.task_ttl_ms, args.json_response, args.log_level)
        )
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
