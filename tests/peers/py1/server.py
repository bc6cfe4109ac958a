"""Test peer: an MCP server on the official Python SDK ``mcp==1.30.0`` and its experimental 2025-11-25
task support (``Server.experimental.enable_tasks()``), for the Python client tests.

    tests/peers/py1/.venv/bin/python tests/peers/py1/server.py --port 0

Runs only in its own venv (tests/peers/py1/.venv, from requirements.txt): the project venv pins mcp 2.x.
The protocol is all the SDK's: the low-level ``Server`` with ``enable_tasks()`` (default ``tasks/get``,
``tasks/result``, ``tasks/list``, ``tasks/cancel`` handlers, ``capabilities.tasks``), ``run_task()`` for
task-augmented ``tools/call``, and ``StreamableHTTPSessionManager`` (stateful sessions, SSE replies).
This file only defines the fixture tools and the request log. Contract: README.md next to this file.

Env: PEER_LOG=/path.jsonl (one JSON line per incoming JSON-RPC request, and ``{"event": "terminal", "taskId",
"status", "ts"}`` when a task ends), PEER_POLL_MS (pollInterval, 200), PEER_NOTIFY=0: ``slow_echo`` sends no
``notifications/tasks/status`` (the SDK's ``update_status``/``complete`` with ``notify=False``): a silent server whose
``tasks/list`` (the SDK's default handler, listing the session's own tasks) is the only way to learn more than polls do.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
import warnings
from collections import Counter
from typing import Any

import anyio
import uvicorn
from mcp import types
from mcp.server.experimental.task_context import ServerTaskContext
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.experimental.tasks.in_memory_task_store import InMemoryTaskStore

POLL_MS = int(os.environ.get("PEER_POLL_MS", "200"))
NOTIFY = os.environ.get("PEER_NOTIFY") != "0"
PEER_LOG = os.environ.get("PEER_LOG")
RATE_LIMIT_TEXT = "HTTP 429 Too Many Requests; retry-after=30"
CALL_COUNTS: Counter[str] = Counter()


class PeerTaskStore(InMemoryTaskStore):
    """The SDK's in-memory store; 1.30 hard-codes ``pollInterval=500`` (``create_task_state``) and offers
    no setting for it, so the one override here applies ``PEER_POLL_MS`` to each new task."""

    async def create_task(self, metadata: types.TaskMetadata, task_id: str | None = None) -> types.Task:
        task = await super().create_task(metadata, task_id)
        self._tasks[task.taskId].task.pollInterval = POLL_MS
        return task.model_copy(update={"pollInterval": POLL_MS})

    async def update_task(self, task_id: str, status: Any = None, status_message: str | None = None) -> types.Task:
        # The server's own record of when a task ended (before the SDK sends its notifications/tasks/status):
        # what a test measures delivery against.
        task = await super().update_task(task_id, status=status, status_message=status_message)
        if status in ("completed", "failed", "cancelled") and PEER_LOG:
            with open(PEER_LOG, "a", encoding="utf-8") as fh:
                fh.write(
                    json.dumps(
                        {
                            "ts": int(time.time() * 1000),
                            "pid": os.getpid(),
                            "event": "terminal",
                            "taskId": task_id,
                            "status": status,
                        }
                    )
                    + "\n"
                )
        return task


def text_result(text: str, *, is_error: bool = False, structured: dict[str, Any] | None = None) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)], structuredContent=structured, isError=is_error
    )


TOOLS = [
    types.Tool(
        name="slow_echo",
        description="Echoes text after `seconds`.",
        inputSchema={
            "type": "object",
            "properties": {"seconds": {"type": "number", "default": 1}, "text": {"type": "string", "default": "hello"}},
        },
        outputSchema={"type": "object", "properties": {"echo": {"type": "string"}}, "required": ["echo"]},
        execution=types.ToolExecution(taskSupport="optional"),
    ),
    types.Tool(
        name="rate_limited",
        description="Fails like an upstream HTTP 429.",
        inputSchema={"type": "object", "properties": {}},
        execution=types.ToolExecution(taskSupport="required"),
    ),
    types.Tool(
        name="counter",
        description="tools/call count per tool name in this process.",
        inputSchema={"type": "object", "properties": {}},
    ),
]
TOOLS_BY_NAME = {tool.name: tool for tool in TOOLS}


def build_server(store: InMemoryTaskStore) -> Server:
    server: Server = Server("mcp-temporal-tasks-py1-peer", version="1.0.0")
    with warnings.catch_warnings():  # `experimental` is deprecated in 1.30 (tasks leave the core spec)
        warnings.simplefilter("ignore", DeprecationWarning)
        server.experimental.enable_tasks(store=store)

    @server.list_tools()
    async def list_tools() -> list[types.Tool]:
        return TOOLS

    @server.call_tool()
    async def call_tool(name: str, arguments: dict[str, Any]) -> types.CallToolResult | types.CreateTaskResult:
        ctx = server.request_context
        tool = TOOLS_BY_NAME.get(name)
        if tool is None:
            return text_result(f"unknown tool {name!r}", is_error=True)
        # The SDK's check of params.task against execution.taskSupport (raises McpError -32601, which the
        # call_tool decorator of 1.30 turns into an isError result, not a JSON-RPC error).
        ctx.experimental.validate_for_tool(tool)

        if name == "counter":
            return text_result(json.dumps(dict(CALL_COUNTS)))

        if name == "slow_echo":
            seconds = float(arguments.get("seconds", 1))
            text = str(arguments.get("text", "hello"))

            async def echo(task: ServerTaskContext | None = None) -> types.CallToolResult:
                if task is not None:
                    await task.update_status(f"sleeping {seconds:g}s", notify=NOTIFY)
                await anyio.sleep(seconds)
                result = text_result(text, structured={"echo": text})
                if task is not None and not NOTIFY:
                    await task.complete(result, notify=False)  # run_task's own complete() would notify
                return result

            return await ctx.experimental.run_task(echo) if ctx.experimental.is_task else await echo()

        # rate_limited: a failed task whose stored result is the tool error (what tasks/result answers).
        async def rate_limited(task: ServerTaskContext) -> types.CallToolResult:
            await anyio.sleep(0.2)
            result = text_result(RATE_LIMIT_TEXT, is_error=True)
            await store.store_result(task.task_id, result)
            await task.fail(RATE_LIMIT_TEXT)
            return result

        return await ctx.experimental.run_task(rate_limited)

    return server


def log_requests(app: Any) -> Any:
    """ASGI wrapper: reads each POST body, logs its JSON-RPC requests, then replays the body to ``app``.

    1.30 offers no hook that sees every incoming request before its handler (``initialize`` is answered
    inside ``ServerSession``, task handlers are plain dict entries), so the log sits in front of the transport.
    """

    async def wrapped(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            return await app(scope, receive, send)
        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] != "http.request":  # disconnected before the body was read
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = None
        for msg in parsed if isinstance(parsed, list) else [parsed]:
            if isinstance(msg, dict) and "method" in msg and "id" in msg:
                record(msg, headers.get("mcp-session-id"))

        replayed = False

        async def replay() -> dict[str, Any]:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await app(scope, replay, send)

    return wrapped


def record(msg: dict[str, Any], session: str | None) -> None:
    method = msg["method"]
    params = msg.get("params") if isinstance(msg.get("params"), dict) else {}
    tool = params.get("name") if method == "tools/call" else None
    if tool is not None:
        CALL_COUNTS[tool] += 1
    if not PEER_LOG:
        return
    line = {
        "ts": int(time.time() * 1000),
        "pid": os.getpid(),
        "method": method,
        "id": msg["id"],
        "tool": tool,
        "task": tool is not None and "task" in params,
        "taskId": params.get("taskId") if method.startswith("tasks/") else None,
        "session": session,
    }
    with open(PEER_LOG, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(line) + "\n")


async def not_found(scope: dict[str, Any], receive: Any, send: Any) -> None:
    body = json.dumps({"jsonrpc": "2.0", "error": {"code": -32000, "message": "Not found"}, "id": None}).encode()
    await send({"type": "http.response.start", "status": 404, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body})


async def serve(port: int) -> None:
    store = PeerTaskStore()
    manager = StreamableHTTPSessionManager(app=build_server(store), stateless=False)
    mcp_app = log_requests(manager.handle_request)

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"].rstrip("/") == "/mcp":
            return await mcp_app(scope, receive, send)
        if scope["type"] == "http":
            return await not_found(scope, receive, send)

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    config = uvicorn.Config(app, lifespan="off", log_level="warning", access_log=False)
    http = uvicorn.Server(config)
    async with manager.run(), anyio.create_task_group() as tg:
        tg.start_soon(http.serve, [sock])
        while not http.started:
            await anyio.sleep(0.01)
        sys.stderr.write(f"LISTENING http://127.0.0.1:{sock.getsockname()[1]}/mcp\n")
        sys.stderr.flush()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    anyio.run(serve, parser.parse_args().port)


if __name__ == "__main__":
    main()
