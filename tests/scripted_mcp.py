"""A scripted 2025-11-25 MCP server of ours over HTTP, for server behaviour no runtime here has.

The real runtimes (tests/peers/) are the evidence that the client speaks MCP; this one plays what they never do:
answer every ``tasks/result`` with a 3 MiB JSON-RPC error, keep tasks across sessions, refuse every new session.
Each JSON-RPC request is answered by :meth:`ScriptedMcp.answer` (override or set ``on``), with sessions
(``initialize`` issues ``Mcp-Session-Id``; ``DELETE`` forgets it; an unknown one gets 404) and a log of the
methods asked (``asked``) and of ``tools/call`` requests (``calls``).
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

LEGACY = "2025-11-25"
#: (method, params) -> a JSON-RPC ``result`` dict, or ``{"error": {...}}`` for an error reply.
Answer = Callable[[str, dict[str, Any]], dict[str, Any]]


def task(task_id: str = "t-1", status: str = "working", **extra: Any) -> dict[str, Any]:
    return {
        "taskId": task_id,
        "status": status,
        "createdAt": "2026-12-02T00:00:00Z",
        "lastUpdatedAt": "2026-12-02T00:00:00Z",
        "ttl": None,
        "pollInterval": 200,
        **extra,
    }


TOOLS = [{"name": "charge", "inputSchema": {"type": "object"}, "execution": {"taskSupport": "optional"}}]


class ScriptedMcp(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, on: dict[str, Answer] | None = None) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        #: Answers by method; the defaults make a task that completes at once with a text result.
        self.on: dict[str, Answer] = {
            "tools/list": lambda m, p: {"tools": TOOLS},
            "tools/call": lambda m, p: {"task": task()},
            "tasks/get": lambda m, p: task(p.get("taskId", "t-1"), "completed"),
            "tasks/result": lambda m, p: {"content": [{"type": "text", "text": "done"}], "isError": False},
            **(on or {}),
        }
        self.live: set[str] = set()
        self.asked: list[str] = []
        self.calls = 0
        self.sessions_made = 0
        #: Refuse every ``initialize`` after the first with a 404 (a server that lost all sessions).
        self.refuse_new_sessions = False
        #: An authorization server URL: every request without a bearer token is refused with a 401 whose challenge
        #: points at protected resource metadata naming it (MCP authorization, as a protected server answers).
        self.challenge: str | None = None
        #: What ``initialize`` offers (``{"tasks": {"list": {}, ...}}`` for a server with ``tasks/list``).
        self.capabilities: dict[str, Any] = {"tasks": {"requests": {"tools": {"call": {}}}}}
        #: Session ids are this prefix and a count (servers of one test that must not issue the same ids differ).
        self.session_prefix = "s"
        #: The ``protocolVersion`` ``initialize`` answers (any JSON value: a hostile server's too).
        self.initialize_version: Any = LEGACY
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/mcp"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: ScriptedMcp

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, status: int, body: dict[str, Any] | None = None, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode() if body is not None else b""
        self.send_response(status)
        for k, v in {"content-type": "application/json", **(headers or {})}.items():
            self.send_header(k, v)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        srv = self.server
        if srv.challenge and self.path.startswith("/.well-known/oauth-protected-resource"):
            return self._send(200, {"resource": srv.url, "authorization_servers": [srv.challenge]})
        self._send(404, {"error": "not found"})

    def do_DELETE(self) -> None:
        with self.server._lock:
            self.server.live.discard(self.headers.get("mcp-session-id") or "")
        self._send(200)

    def do_POST(self) -> None:
        msg = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
        if self.server.challenge and not (self.headers.get("authorization") or "").startswith("Bearer "):
            port = self.server.server_address[1]
            return self._send(
                401,
                {"error": "invalid_token"},
                {
                    "www-authenticate": f"Bearer resource_metadata="
                    f'"http://127.0.0.1:{port}/.well-known/oauth-protected-resource/mcp"'
                },
            )
        method, sid, rid = msg.get("method"), self.headers.get("mcp-session-id"), msg.get("id")
        srv = self.server
        with srv._lock:
            srv.asked.append(method)
            if method == "tools/call":
                srv.calls += 1
        if method == "initialize":
            if srv.refuse_new_sessions and srv.sessions_made:
                return self._send(
                    404, {"jsonrpc": "2.0", "id": rid, "error": {"code": -32001, "message": "no sessions"}}
                )
            sid = f"{srv.session_prefix}{next(srv._ids)}"
            with srv._lock:
                srv.live.add(sid)
                srv.sessions_made += 1
            return self._send(
                200,
                {
                    "jsonrpc": "2.0",
                    "id": rid,
                    "result": {
                        "protocolVersion": srv.initialize_version,
                        "capabilities": srv.capabilities,
                        "serverInfo": {"name": "scripted", "version": "0"},
                    },
                },
                {"mcp-session-id": sid},
            )
        if sid not in srv.live:
            return self._send(
                404, {"jsonrpc": "2.0", "id": None, "error": {"code": -32001, "message": "Session not found"}}
            )
        if rid is None:  # a notification
            return self._send(202)
        answer = srv.on.get(method)
        result = answer(method, msg.get("params") or {}) if answer else {"error": {"code": -32601, "message": method}}
        if "error" in result and len(result) == 1:
            return self._send(200, {"jsonrpc": "2.0", "id": rid, "error": result["error"]})
        self._send(200, {"jsonrpc": "2.0", "id": rid, "result": result})


@contextmanager
def scripted_mcp(on: dict[str, Answer] | None = None) -> Iterator[ScriptedMcp]:
    server = ScriptedMcp(on)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
