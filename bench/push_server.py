"""Bench MCP server for the push phase: the official Python SDK's 2025-11-25 task runtime (``mcp==1.30.0``), which
sends ``notifications/tasks/status`` on the session's GET stream when a task ends, or (``--silent``) never does.

Why this runtime: the push phase compares a server that notifies with one that does not, on the same runtime, and
the fastmcp bench server (``bench/server.py``, 2026-07-28) sends no task notifications. ``mcp`` 1.30 is the runtime the
tests use as a peer (``tests/peers/py1``); it runs in that venv (``tests/peers/py1/.venv``, made by
``scripts/test.sh``), because the project's venv pins ``mcp`` 2.x. The protocol is the SDK's: the low-level ``Server``
with ``enable_tasks()``, ``run_task()``, ``ServerTaskContext.complete(result, notify=...)``,
``StreamableHTTPSessionManager`` (stateful; its idle timeout off: an idle wait polls every few minutes). This file
adds the tool, the age, the gates and the records, with the same ``/bench/*`` endpoints as ``bench/server.py``:

* tool ``bench_task {seconds=5, gate="", age_s=0}``: a task that completes after ``seconds`` (or when
  ``POST /bench/open?gate=<gate>``), its ``createdAt`` back-dated by ``age_s`` in every ``tasks/get`` (the store's
  ``get_task``), as ``bench/server.py`` does for the fastmcp runtime;
* ``GET /bench/state``: ``terminal[taskId]`` (when the store recorded the end, before the SDK's notification),
  ``observed[taskId]`` (the first ``tasks/get`` received once it had ended), ``gets[taskId]``, ``aged[taskId]``
  (``created``, ``age_s``, the time of every ``tasks/get``: ``polls``), ``streams`` (GET streams asked for);
  ``GET /bench/counts``: ``polled`` (tasks polled at least once), ``requests``, ``gets``; ``POST /bench/reset``;
* ``POST /bench/flood?n=<n>&task=<taskId>``: ``n`` ``notifications/tasks/status`` (status ``completed``) for task ids
  this server never made, sent on the session that created ``task`` (its GET stream, as the SDK sends its own; the
  SDK drops them while no client holds that stream); answers ``sent`` and ``seconds`` once all are handed over.

Run (from the repository): ``tests/peers/py1/.venv/bin/python -m bench.push_server --port 0 --poll-interval-ms 500
[--silent] [--no-list]``; prints ``LISTENING http://127.0.0.1:<port>/mcp`` on stderr. ``--no-list`` removes the SDK's
default ``tasks/list`` handler (and so ``capabilities.tasks.list``: a ``tasks/list`` is answered -32601), for a server
whose waits can only be polled one by one; with it (the SDK's default) the list is the session's own tasks
(``mcp`` 1.30 scopes task ids to the session that made them), which the worker's list reader reads.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import time
import uuid
import warnings
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import uvicorn
from mcp import types
from mcp.server.experimental.task_context import ServerTaskContext
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.experimental.tasks.in_memory_task_store import InMemoryTaskStore

TOOL = "bench_task"
TERMINAL = ("completed", "failed", "cancelled")


class Recorder:
    def __init__(self) -> None:
        self.gates: dict[str, anyio.Event] = {}
        self.reset()

    def reset(self) -> None:
        self.terminal: dict[str, float] = {}
        self.observed: dict[str, float] = {}
        self.gets: dict[str, int] = {}
        self.aged: dict[str, dict[str, Any]] = {}
        self.requests = 0
        self.streams = 0
        self.lists = 0
        #: taskId -> the session that created it (the flood's target); one entry per task the bench made.
        self.sessions: dict[str, Any] = {}

    def gate(self, name: str) -> anyio.Event:
        if name not in self.gates:
            self.gates[name] = anyio.Event()
        return self.gates[name]


REC = Recorder()


class BenchStore(InMemoryTaskStore):
    """The SDK's store, with the bench's age, pollInterval and end record; its expiry sweep (every access walks all
    tasks: 10,000 held tasks at 80 reads/s would make the server the bottleneck) runs at most once per 10 s."""

    def __init__(self, poll_ms: int) -> None:
        super().__init__()
        self.poll_ms = poll_ms
        self.ages: dict[str, float] = {}
        self._swept = 0.0

    def _cleanup_expired(self) -> None:
        if time.monotonic() - self._swept > 10:
            self._swept = time.monotonic()
            super()._cleanup_expired()

    async def create_task(self, metadata: types.TaskMetadata, task_id: str | None = None) -> types.Task:
        task = await super().create_task(metadata, task_id)
        self._tasks[task.taskId].task.pollInterval = self.poll_ms
        return task.model_copy(update={"pollInterval": self.poll_ms})

    async def get_task(self, task_id: str) -> types.Task | None:
        task = await super().get_task(task_id)
        age = self.ages.get(task_id)
        if task is not None and age:
            task = task.model_copy(update={"createdAt": task.createdAt - timedelta(seconds=age)})
        return task

    async def update_task(self, task_id: str, status: Any = None, status_message: str | None = None) -> types.Task:
        task = await super().update_task(task_id, status=status, status_message=status_message)
        if status in TERMINAL:
            REC.terminal.setdefault(task_id, time.time())
        return task


def build_server(store: BenchStore, *, silent: bool, listing: bool = True) -> Server:
    server: Server = Server("mcp-temporal-tasks-bench-push", version="1.0.0")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        server.experimental.enable_tasks(store=store)
    if not listing:
        # The capability follows the handler (ServerExperimental.update_capabilities): both go.
        server.request_handlers.pop(types.ListTasksRequest, None)
    tool = types.Tool(
        name=TOOL,
        description="Completes after `seconds`, or when its gate opens.",
        inputSchema={
            "type": "object",
            "properties": {"seconds": {"type": "number"}, "gate": {"type": "string"}, "age_s": {"type": "number"}},
        },
        execution=types.ToolExecution(taskSupport="optional"),
    )

    @server.list_tools()
    async def list_tools() -> list[types.Tool]:
        return [tool]

    @server.call_tool()
    async def call_tool(name: str, arguments: dict[str, Any]) -> types.CallToolResult | types.CreateTaskResult:
        ctx = server.request_context
        ctx.experimental.validate_for_tool(tool)
        seconds = float(arguments.get("seconds", 5))
        gate = str(arguments.get("gate") or "")
        age = float(arguments.get("age_s") or 0)

        async def work(task: ServerTaskContext) -> types.CallToolResult:
            REC.sessions[task.task_id] = ctx.session
            if age:
                store.ages[task.task_id] = age
                REC.aged[task.task_id] = {"age_s": age, "created": time.time() - age, "polls": []}
            if gate:
                await REC.gate(gate).wait()
            else:
                await anyio.sleep(seconds)
            result = types.CallToolResult(
                content=[types.TextContent(type="text", text="ok")], structuredContent={"ok": True}
            )
            # The SDK sends notifications/tasks/status here unless told not to: the silent server is told not to.
            await task.complete(result, notify=not silent)
            return result

        return await ctx.experimental.run_task(work)

    return server


def instrument(app: Any) -> Any:
    """ASGI wrapper: counts requests, notes each ``tasks/get`` (and whether its task had ended), GET streams."""

    async def wrapped(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await app(scope, receive, send)
        if scope["method"] == "GET":
            REC.streams += 1
            return await app(scope, receive, send)
        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
        REC.requests += 1
        try:
            msg = json.loads(body)
        except ValueError:
            msg = None
        if isinstance(msg, dict) and msg.get("method") == "tasks/list":
            REC.lists += 1
        if isinstance(msg, dict) and msg.get("method") == "tasks/get":
            task_id = str((msg.get("params") or {}).get("taskId"))
            now = time.time()
            REC.gets[task_id] = REC.gets.get(task_id, 0) + 1
            if task_id in REC.aged:
                REC.aged[task_id]["polls"].append(now)
            if task_id in REC.terminal:
                REC.observed.setdefault(task_id, now)
        replayed = False

        async def replay() -> dict[str, Any]:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await app(scope, replay, send)

    return wrapped


async def json_reply(send: Any, obj: Any, status: int = 200) -> None:
    body = json.dumps(obj).encode()
    await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body})


async def flood(task_id: str, n: int, poll_ms: int) -> dict[str, Any]:
    """``n`` completed-task notifications for ids nobody waits on, on ``task_id``'s session (bounded: 120 s)."""
    session = REC.sessions.get(task_id)
    if session is None:
        return {"error": f"no session for {task_id}"}
    now = datetime.now(UTC)
    sent, t0 = 0, time.monotonic()
    with anyio.move_on_after(120):
        for i in range(n):
            params = types.TaskStatusNotificationParams(
                taskId=f"flood-{i}-{uuid.uuid4().hex[:12]}",
                status="completed",
                createdAt=now,
                lastUpdatedAt=now,
                ttl=60_000,
                pollInterval=poll_ms,
            )
            await session.send_notification(types.ServerNotification(types.TaskStatusNotification(params=params)))
            sent += 1
    return {"sent": sent, "seconds": round(time.monotonic() - t0, 3)}


async def serve(port: int, poll_ms: int, silent: bool, listing: bool = True) -> None:
    store = BenchStore(poll_ms)
    manager = StreamableHTTPSessionManager(
        app=build_server(store, silent=silent, listing=listing), stateless=False, session_idle_timeout=None
    )
    mcp_app = instrument(manager.handle_request)

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        path = scope["path"].rstrip("/")
        if path == "/mcp":
            return await mcp_app(scope, receive, send)
        if path == "/bench/state":
            return await json_reply(
                send,
                {
                    "terminal": REC.terminal,
                    "observed": REC.observed,
                    "gets": REC.gets,
                    "aged": REC.aged,
                    "streams": REC.streams,
                    "lists": REC.lists,
                },
            )
        if path == "/bench/counts":
            return await json_reply(
                send,
                {
                    "polled": len(REC.gets),
                    "requests": REC.requests,
                    "gets": sum(REC.gets.values()),
                    "streams": REC.streams,
                    "lists": REC.lists,
                },
            )
        if path == "/bench/reset":
            REC.reset()
            return await json_reply(send, {"ok": True})
        if path == "/bench/flood":
            query = dict(p.split("=", 1) for p in scope.get("query_string", b"").decode().split("&") if "=" in p)
            return await json_reply(
                send, await flood(query.get("task", ""), min(int(query.get("n", "0")), 100_000), poll_ms)
            )
        if path == "/bench/open":
            query = dict(p.split("=", 1) for p in scope.get("query_string", b"").decode().split("&") if "=" in p)
            REC.gate(query.get("gate", "")).set()
            return await json_reply(send, {"ok": True})
        await json_reply(send, {"error": "not found"}, 404)

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    http = uvicorn.Server(
        uvicorn.Config(app, lifespan="off", log_level="warning", access_log=False, backlog=4096, timeout_keep_alive=600)
    )
    async with manager.run(), anyio.create_task_group() as tg:
        tg.start_soon(http.serve, [sock])
        while not http.started:
            await anyio.sleep(0.01)
        sys.stderr.write(f"LISTENING http://127.0.0.1:{sock.getsockname()[1]}/mcp\n")
        sys.stderr.flush()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--poll-interval-ms", type=int, default=500)
    p.add_argument("--silent", action="store_true", help="never send notifications/tasks/status")
    p.add_argument("--no-list", action="store_true", help="offer no tasks/list (the SDK's default handler removed)")
    args = p.parse_args(argv)
    anyio.run(serve, args.port, args.poll_interval_ms, args.silent, not args.no_list)


if __name__ == "__main__":
    main()
