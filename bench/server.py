"""Bench MCP server: the real fastmcp 2026-07-28 tasks runtime, instrumented for the benchmark.

It is the same stack as ``mcp_temporal_tasks.demo.server`` (``fastmcp[tasks]==4.1.4``, SEP-2663 extension, Docket on
``memory://``), with three differences that matter for a benchmark:

* **Docket worker concurrency** is raised from the fastmcp default of 10 (``DocketSettings.concurrency``)
  to ``--concurrency`` (default 10,000). With 10, 200 concurrent 5 s tasks run 10 at a time and every
  design measures the server, not itself. The demo server keeps the default: it cannot sustain the load.
* **No progress reports.** The demo's ``slow_echo`` writes progress every 0.25 s into Docket; the bench
  tool sleeps quietly so server CPU goes to answering ``tasks/get``.
* **Instrumentation**, read over plain HTTP (not MCP) at ``GET /bench/state``:

  - ``terminal[taskId]``: server wall clock (``time.time()``) right after Docket committed the terminal
    state (``Execution._mark_as_terminal`` returned: from then on ``tasks/get`` answers ``completed``);
  - ``gets[taskId]``: ``tasks/get`` requests received for the task (counted from the ``Mcp-Method`` and
    ``Mcp-Name`` headers, before MCP handling);
  - ``observed[taskId]``: when the first ``tasks/get`` reply showing a terminal status was handed to the
    transport (so ``observed - terminal`` is the poll-phase wait, ``delivered - observed`` the design's own
    overhead after its poll found the end);
  - ``calls``: ``tools/call`` requests received; ``requests``: every MCP request (``POST /mcp``) received;
  - ``aged[taskId]``: for a task started with ``age_s > 0``, its back-dated ``created`` (epoch s), ``age_s`` and
    the server time of every ``tasks/get`` it received (``polls``).

  ``POST /bench/reset`` clears it.

**Simulated age** (``age_s``): the bench must measure what a task costs an hour into its life without
waiting an hour. A tool call with ``age_s = A`` is an ordinary task, but every reply about it says it was created
``A`` seconds earlier than it was: ``createdAt`` in the ``tools/call`` reply (``CreateTaskResult``) and in every
``tasks/get`` reply is moved back by ``A`` (so is ``lastUpdatedAt`` in the ``tools/call`` reply, where it equals
``createdAt``; in ``tasks/get`` ``lastUpdatedAt`` stays what fastmcp says, the time of the reply, as a real old task
still being worked on would read). The rewrite is done on the wire by ``CountingMiddleware`` (fastmcp's stored
``created_at`` is untouched), and the server learns the task id from its own ``tools/call`` reply, so no ``tasks/get``
of an aged task is ever answered un-aged. A client that derives a task's age from ``createdAt`` (ours does) then sees
a task ``A`` seconds old from its first reply on.

Tool ``bench_task {seconds=5, polls=0, gate="", age_s=0}`` [task mode optional; pollIntervalMs =
``--poll-interval-ms``]: sleeps ``seconds`` then completes with ``{"ok": true}``. With ``polls > 0`` it ignores
``seconds`` and completes right after the task's ``polls``-th ``tasks/get`` was received, so the client sees it terminal
on its ``polls + 1``-th poll: a task that costs exactly the polls of a long task, in less wall time.
With ``gate`` it completes when ``POST /bench/open?gate=<gate>`` is called (to hold many tasks in flight).
``age_s`` only back-dates the task (above).

Run: ``python -m bench.server --port 0 --poll-interval-ms 500 [--task-ttl-s 3600]``; prints ``LISTENING http://...`` on
stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import re
import socket
import sys
import time
import uuid
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from typing import Any

import mcp_types
from docket.execution import Execution
from fastmcp import FastMCP
from fastmcp.tools.base import ToolResult
from fastmcp.utilities.tasks import TaskConfig
from fastmcp_tasks import TasksExtension
from fastmcp_tasks.context import get_task_context
from fastmcp_tasks.keys import base_task_key, parse_task_key
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

MCP_PATH = "/mcp"
TOOL = "bench_task"


class Recorder:
    """Per-task server-side facts; single process, single event loop."""

    def __init__(self) -> None:
        self.terminal: dict[str, float] = {}
        self.observed: dict[str, float] = {}
        self.gets: dict[str, int] = {}
        self.calls = 0
        self.requests = 0
        self.waiters: dict[str, tuple[int, asyncio.Event]] = {}
        self.gates: dict[str, asyncio.Event] = {}
        #: Aged tasks (``age_s > 0``): taskId -> {"age_s", "created" (back-dated epoch s), "polls": [server time, ...]}.
        self.aged: dict[str, dict[str, Any]] = {}

    def gate(self, name: str) -> asyncio.Event:
        return self.gates.setdefault(name, asyncio.Event())

    def reset(self) -> None:
        self.terminal.clear()
        self.observed.clear()
        self.gets.clear()
        self.calls = 0
        self.requests = 0
        self.aged.clear()

    def on_get(self, task_id: str) -> None:
        n = self.gets.get(task_id, 0) + 1
        self.gets[task_id] = n
        aged = self.aged.get(task_id)
        if aged is not None:
            aged["polls"].append(time.time())
        waiter = self.waiters.get(task_id)
        if waiter is not None and n >= waiter[0]:
            waiter[1].set()


REC = Recorder()


def _install_terminal_hook() -> None:
    """Record when Docket has committed a task's terminal state (completed/failed/cancelled)."""
    original = Execution._mark_as_terminal
    if getattr(original, "_bench_hooked", False):
        return

    async def _mark_as_terminal(self: Execution, state: Any, **kwargs: Any) -> None:
        await original(self, state, **kwargs)
        now = time.time()
        try:
            task_id = parse_task_key(base_task_key(self.key))["client_task_id"]
        except (ValueError, KeyError):
            return
        REC.terminal.setdefault(task_id, now)

    _mark_as_terminal._bench_hooked = True  # type: ignore[attr-defined]
    Execution._mark_as_terminal = _mark_as_terminal  # type: ignore[method-assign]


class _BenchTasksExtension(TasksExtension):
    """TasksExtension with a TTL long enough for a benchmark (Docket default 15 min is fine too)."""

    def __init__(self, *, task_ttl_s: int = 3600, **kwargs: Any) -> None:
        # Aged tasks (age_s) need a TTL longer than their simulated age: a client may treat createdAt + ttl as expiry.
        super().__init__(**kwargs)
        self._task_ttl_s = task_ttl_s

    @asynccontextmanager
    async def lifespan(self) -> AsyncGenerator[None, None]:
        async with super().lifespan():
            docket = getattr(self.server, "_docket", None)
            if docket is not None:
                docket.execution_ttl = timedelta(seconds=self._task_ttl_s)
            yield


def build_server(poll_interval_ms: int, concurrency: int = 10_000, task_ttl_s: int = 3600) -> FastMCP:
    _install_terminal_hook()
    mcp = FastMCP("mcp-temporal-tasks-bench")
    mcp.add_extension(
        _BenchTasksExtension(
            url=f"memory://bench-{uuid.uuid4().hex}",
            concurrency=concurrency,
            task_ttl_s=task_ttl_s,
            minimum_check_interval=timedelta(milliseconds=10),
        )
    )
    task = TaskConfig(mode="optional", poll_interval=timedelta(milliseconds=max(1, poll_interval_ms)))

    @mcp.tool(
        name=TOOL,
        task=task,
        output_schema={"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]},
    )
    async def bench_task(seconds: float = 5.0, polls: int = 0, gate: str = "", age_s: float = 0.0) -> ToolResult:
        """Completes after `seconds` (or right after its `polls`-th tasks/get when polls > 0, or when `gate` opens).
        `age_s` back-dates the task's createdAt in every reply (see the module docstring)."""
        info = get_task_context()
        if gate:
            await REC.gate(gate).wait()
        elif polls > 0 and info is not None:
            event = asyncio.Event()
            REC.waiters[info.task_id] = (polls, event)
            try:
                if REC.gets.get(info.task_id, 0) < polls:
                    await event.wait()
            finally:
                REC.waiters.pop(info.task_id, None)
        else:
            await asyncio.sleep(max(0.0, seconds))
        return ToolResult(content=[mcp_types.TextContent(type="text", text="ok")], structured_content={"ok": True})

    @mcp.custom_route("/bench/state", methods=["GET"])
    async def state(_request: Request) -> Response:
        return JSONResponse(
            {
                "terminal": REC.terminal,
                "observed": REC.observed,
                "gets": REC.gets,
                "calls": REC.calls,
                "requests": REC.requests,
                "aged": REC.aged,
                "now": time.time(),
            }
        )

    @mcp.custom_route("/bench/counts", methods=["GET"])
    async def counts(_request: Request) -> Response:
        """The cheap part of the state (no per-task maps): for sampling request rates during a run."""
        return JSONResponse(
            {
                "calls": REC.calls,
                "requests": REC.requests,
                "polled": len(REC.gets),
                "gets": sum(REC.gets.values()),
                "now": time.time(),
            }
        )

    @mcp.custom_route("/bench/open", methods=["POST"])
    async def open_gate(request: Request) -> Response:
        REC.gate(request.query_params.get("gate", "")).set()
        return JSONResponse({"ok": True})

    @mcp.custom_route("/bench/reset", methods=["POST"])
    async def reset(_request: Request) -> Response:
        REC.reset()
        return JSONResponse({"ok": True})

    return mcp


_TERMINAL_RE = re.compile(rb'"status"\s*:\s*"(completed|failed|cancelled)"')
_CREATED_RE = re.compile(rb'"createdAt"\s*:\s*"([^"]+)"')
_UPDATED_RE = re.compile(rb'"lastUpdatedAt"\s*:\s*"([^"]+)"')
_TASK_ID_RE = re.compile(rb'"taskId"\s*:\s*"([^"]+)"')


def _backdate(body: bytes, age_s: float, *, updated_too: bool) -> tuple[bytes, float | None]:
    """``body`` with ``createdAt`` (and ``lastUpdatedAt`` if ``updated_too``) moved back by ``age_s``; and the
    back-dated ``createdAt`` as epoch seconds (None when the body has none)."""
    created: list[float] = []

    def shift(m: re.Match[bytes]) -> bytes:
        key = m.group(0).split(b":", 1)[0]
        try:
            when = datetime.fromisoformat(m.group(1).decode().replace("Z", "+00:00")) - timedelta(seconds=age_s)
        except ValueError:
            return m.group(0)
        if key == b'"createdAt"':
            created.append(when.timestamp())
        return key + b':"' + when.isoformat(timespec="microseconds").encode() + b'"'

    body = _CREATED_RE.sub(shift, body)
    if updated_too:
        body = _UPDATED_RE.sub(shift, body)
    return body, (created[0] if created else None)


class CountingMiddleware:
    """ASGI wrapper: counts tools/call and tasks/get from the routing headers (no request body parsing), and
    notes when a ``tasks/get`` reply first carried a terminal status (``observed``: the poll that found it).

    Aged tasks: a ``tools/call`` body is read (it is small) for ``arguments.age_s``; when it is > 0 the reply's
    timestamps are back-dated and the new task id is remembered, and so is every ``tasks/get`` reply about it."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope.get("type") == "http" and scope.get("method") == "POST":
            REC.requests += 1
            method = name = None
            for key, value in scope.get("headers") or ():
                if key == b"mcp-method":
                    method = value
                elif key == b"mcp-name":
                    name = value
            if method == b"tasks/get" and name is not None:
                task_id = name.decode("latin-1")
                REC.on_get(task_id)
                aged = REC.aged.get(task_id)
                if aged is not None:
                    send = _rewriting(send, lambda body: _backdate(body, aged["age_s"], updated_too=False)[0])
                if task_id not in REC.observed:
                    await self.app(scope, receive, self._watch(task_id, send))
                    return
            elif method == b"tools/call":
                REC.calls += 1
                receive, age_s = await _peek_age(receive)
                if age_s > 0:
                    send = _rewriting(send, lambda body: _aged_call_reply(body, age_s))
        await self.app(scope, receive, send)

    @staticmethod
    def _watch(task_id: str, send: Any) -> Any:
        async def watched(message: Any) -> None:
            if message.get("type") == "http.response.body" and task_id not in REC.observed:
                if _TERMINAL_RE.search(message.get("body") or b""):
                    await send(message)
                    REC.observed[task_id] = time.time()  # the reply has been handed to the transport
                    return
            await send(message)

        return watched


def _aged_call_reply(body: bytes, age_s: float) -> bytes:
    body, created = _backdate(body, age_s, updated_too=True)
    m = _TASK_ID_RE.search(body)
    if m is not None and created is not None:
        REC.aged[m.group(1).decode()] = {"age_s": age_s, "created": created, "polls": []}
    return body


async def _peek_age(receive: Any) -> tuple[Any, float]:
    """Read the whole request body (a tools/call: small), return a ``receive`` that replays it and its
    ``params.arguments.age_s`` (0 when absent or not a number)."""
    messages, chunks = [], []
    while True:
        message = await receive()
        messages.append(message)
        if message.get("type") != "http.request":
            break
        chunks.append(message.get("body") or b"")
        if not message.get("more_body"):
            break
    age = 0.0
    body = b"".join(chunks)
    if b"age_s" in body:
        try:
            value = json.loads(body)["params"]["arguments"]["age_s"]
            age = float(value) if isinstance(value, (int, float)) else 0.0
        except (ValueError, KeyError, TypeError):
            pass

    async def replay() -> Any:
        return messages.pop(0) if messages else await receive()

    return replay, age


def _rewriting(send: Any, transform: Any) -> Any:
    """A ``send`` that buffers the response and passes its body through ``transform`` (fixing Content-Length)."""
    start: dict[str, Any] | None = None
    chunks: list[bytes] = []

    async def rewriting(message: Any) -> None:
        nonlocal start
        if message.get("type") == "http.response.start":
            start = message
            return
        if message.get("type") == "http.response.body" and start is not None:
            chunks.append(message.get("body") or b"")
            if message.get("more_body"):
                return
            body = transform(b"".join(chunks))
            headers = [(k, v) for k, v in start.get("headers") or () if k.lower() != b"content-length"]
            headers.append((b"content-length", str(len(body)).encode()))
            await send({**start, "headers": headers})
            start = None
            await send({"type": "http.response.body", "body": body, "more_body": False})
            return
        await send(message)

    return rewriting


async def serve(host: str, port: int, poll_interval_ms: int, concurrency: int, task_ttl_s: int = 3600) -> None:
    import uvicorn

    mcp = build_server(poll_interval_ms, concurrency, task_ttl_s)
    app = CountingMiddleware(mcp.http_app(path=MCP_PATH, transport="http", json_response=True))
    # proto=IPPROTO_TCP matters: asyncio sets TCP_NODELAY on accepted sockets only when sock.proto is
    # IPPROTO_TCP, and a socket made with proto 0 hands that 0 to every accepted connection. Without
    # NODELAY each keep-alive reply (headers and body written separately) waits ~40 ms for the client's
    # delayed ACK (Nagle). demo/server.py creates its socket with proto 0 and has this stall.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.setblocking(False)
    config = uvicorn.Config(
        app,
        log_level="critical",
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=1,
        ws="none",
        backlog=2048,
        limit_concurrency=None,
        timeout_keep_alive=30,
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if task.done():
            await task
            raise SystemExit(1)
        await asyncio.sleep(0.01)
    print(f"LISTENING http://{host}:{sock.getsockname()[1]}{MCP_PATH}", file=sys.stderr, flush=True)
    await task


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.server", description=__doc__.split("\n\n")[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--poll-interval-ms", type=int, default=500)
    p.add_argument("--concurrency", type=int, default=10_000, help="Docket worker concurrency (fastmcp default 10)")
    p.add_argument(
        "--task-ttl-s",
        type=int,
        default=3600,
        help="task TTL (ttlMs); longer than any simulated age_s, so createdAt + ttl stays in the future",
    )
    args = p.parse_args(argv)
    for name in ("fastmcp", "fastmcp_tasks", "docket", "mcp", "uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    try:
        asyncio.run(serve(args.host, args.port, args.poll_interval_ms, args.concurrency, args.task_ttl_s))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
