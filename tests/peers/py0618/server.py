"""Test peer: an MCP server of protocol 2025-06-18 (no tasks), the official Python SDK ``mcp==1.12.4`` FastMCP over
stateful streamable HTTP, as many servers people run today were built. For issue 37's older-server tests.

    tests/peers/py0618/.venv/bin/python tests/peers/py0618/server.py --port 0

Runs only in its own venv (tests/peers/py0618/.venv, from requirements.txt): the project venv pins mcp 2.x, and
1.12.4 needs pydantic < 2.12. The protocol is all the SDK's; this file defines the fixture tools and the request log.
Contract: README.md next to this file.

Env: PEER_LOG=/path.jsonl (one JSON line per incoming JSON-RPC message: requests and notifications, with
``known`` = whether protocol 2025-06-18 defines the method).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from collections import Counter
from typing import Any

import anyio
import uvicorn
from mcp.server.fastmcp import FastMCP
from pydantic import BaseModel

PEER_LOG = os.environ.get("PEER_LOG")
CALL_COUNTS: Counter[str] = Counter()
#: Every method of protocol 2025-06-18 a client may send (schema/2025-06-18/schema.ts, ClientRequest and
#: ClientNotification); anything else in the log is a method this server's version does not have.
KNOWN_METHODS = frozenset(
    {
        "initialize",
        "ping",
        "tools/list",
        "tools/call",
        "resources/list",
        "resources/templates/list",
        "resources/read",
        "resources/subscribe",
        "resources/unsubscribe",
        "prompts/list",
        "prompts/get",
        "logging/setLevel",
        "completion/complete",
        "notifications/initialized",
        "notifications/cancelled",
        "notifications/progress",
        "notifications/roots/list_changed",
    }
)

mcp = FastMCP("mcp-temporal-tasks-py0618-peer", stateless_http=False, log_level="WARNING")


class Echo(BaseModel):
    echo: str


@mcp.tool(description="Echoes text after `seconds` (structured output {echo}).")
async def slow_echo(seconds: float = 1.0, text: str = "hello") -> Echo:
    await anyio.sleep(seconds)
    return Echo(echo=text)


@mcp.tool(description="tools/call count per tool name in this process.")
def counter() -> str:
    return json.dumps(dict(CALL_COUNTS))


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
        "id": msg.get("id"),
        "tool": tool,
        "known": method in KNOWN_METHODS,
        "session": session,
        "protocolVersion": params.get("protocolVersion") if method == "initialize" else None,
    }
    with open(PEER_LOG, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(line) + "\n")


def log_requests(app: Any) -> Any:
    """ASGI wrapper: reads each POST body, logs its JSON-RPC messages, then replays the body to ``app``."""

    async def wrapped(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
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
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = None
        for msg in parsed if isinstance(parsed, list) else [parsed]:
            if isinstance(msg, dict) and isinstance(msg.get("method"), str):
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


async def serve(port: int) -> None:
    app = log_requests(mcp.streamable_http_app())
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    http = uvicorn.Server(uvicorn.Config(app, lifespan="on", log_level="warning", access_log=False))
    async with anyio.create_task_group() as tg:
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
