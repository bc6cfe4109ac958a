"""Test peer: a server of the official Python SDK's newest line, ``mcp`` 2.3's ``MCPServer``, over streamable HTTP.

2026-07-28 with multi-round-trip requests (MRTR, SEP-2322). Its tool ``confirm`` asks one question (the call, then its
continuation with ``inputResponses`` and the sealed ``requestState``); ``confirm_twice`` asks two questions, one round
each (the second resolver needs the first answer), so a call is three ``tools/call`` requests at this server: the
call, then two continuations with ``inputResponses`` and the sealed ``requestState`` the SDK minted.

    .venv/bin/python -m tests.peers.mcp2_server --port 0

The protocol, the rounds and the sealing of ``requestState`` are all the SDK's; this file defines the tools and the
request log. Env: ``PEER_LOG=/path.jsonl`` (one JSON line per incoming JSON-RPC message: method, tool, whether it
carried ``inputResponses`` and ``requestState``).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from typing import Annotated, Any

import anyio
import uvicorn
from mcp.server.mcpserver import Elicit, MCPServer, Resolve
from pydantic import BaseModel

PEER_LOG = os.environ.get("PEER_LOG")

mcp = MCPServer("mcp-temporal-tasks-mcp2-peer")


class Ok(BaseModel):
    ok: bool


def first() -> Elicit[Ok]:
    return Elicit("first question: go on?", Ok)


def second(a: Annotated[Ok, Resolve(first)]) -> Elicit[Ok]:
    return Elicit(f"second question (the first was {a.ok}): really?", Ok)


@mcp.tool(description="Asks one question, then says what was answered.")
def confirm(a: Annotated[Ok, Resolve(first)]) -> str:
    return f"answered {a.ok}"


@mcp.tool(description="Asks two questions, one round each, then says what was answered.")
def confirm_twice(a: Annotated[Ok, Resolve(first)], b: Annotated[Ok, Resolve(second)]) -> str:
    return f"answered {a.ok} then {b.ok}"


@mcp.tool(description="Echoes text.")
def echo(text: str = "hello") -> str:
    return text


def record(msg: dict[str, Any]) -> None:
    if not PEER_LOG:
        return
    params = msg.get("params") if isinstance(msg.get("params"), dict) else {}
    line = {
        "ts": int(time.time() * 1000),
        "pid": os.getpid(),
        "method": msg["method"],
        "id": msg.get("id"),
        "tool": params.get("name") if msg["method"] == "tools/call" else None,
        "input_responses": sorted(params.get("inputResponses") or {}),
        "request_state": "requestState" in params,
    }
    with open(PEER_LOG, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(line) + "\n")


def log_requests(app: Any) -> Any:
    """ASGI wrapper: reads each POST body, logs its JSON-RPC message, then replays the body to ``app``."""

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
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict) and isinstance(parsed.get("method"), str):
            record(parsed)
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
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    anyio.run(serve, parser.parse_args().port)


if __name__ == "__main__":
    main()
