"""Offline unit tests of the wire layer's parsing and failure mapping.

No MCP peer here: the failure *shapes* a transport can meet (HTTP 429/401/403/500, malformed JSON, 404 of a
gone session, SSE quirks, refused connections) come from a tiny ``http.server`` fixture in this file. The
scenario is the URL path the client posts to.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterator
from datetime import timedelta
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from mcp_temporal_tasks.activities.wire import (
    ERROR_TYPES,
    EXTENSION,
    LEGACY,
    AuthorizationRequired,
    CapabilityUnavailable,
    Endpoint,
    HeaderMismatch,
    InvalidParams,
    JsonRpcError,
    McpWireError,
    MethodNotFound,
    MissingCapability,
    ProtocolViolation,
    RateLimited,
    ResultDecodeError,
    SessionGone,
    TaskNotFound,
    TaskUnreachable,
    TransportError,
    UnsupportedProtocolVersion,
    WireSession,
    decode_result,
    parse_task,
)
from mcp_temporal_tasks.activities.wire.http_transport import HttpTransport
from mcp_temporal_tasks.activities.wire.replies import payload_from_error
from mcp_temporal_tasks.protocol.tasks import UNLIMITED
from mcp_temporal_tasks.protocol.wire_errors import (
    MAX_RETRY_AFTER_S,
    RAW_CAP,
    HttpRefusal,
    error_from_rpc,
    parse_retry_after,
    read_retry_after,
)

pytestmark = pytest.mark.fast

# --- the fixture server ------------------------------------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _FakeServer

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def _reply(
        self,
        status: int,
        body: bytes | str = b"",
        ctype: str | None = "application/json",
        headers: dict[str, str] | None = None,
    ) -> None:
        data = body.encode() if isinstance(body, str) else body
        self.send_response(status)
        if ctype:
            self.send_header("Content-Type", ctype)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_DELETE(self) -> None:
        self.server.requests.append(
            {"verb": "DELETE", "path": self.path, "headers": self.headers.items(), "body": None}
        )
        self._reply(200, b"", ctype=None)

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        self.server.requests.append({"verb": "POST", "path": self.path, "headers": self.headers.items(), "body": body})
        parts = self.path.strip("/").split("/")
        route = parts[0]
        if isinstance(body, dict) and "method" not in body:  # our answer to a server->client request
            if route == "404-session":
                return self._reply(
                    404,
                    json.dumps(
                        {"jsonrpc": "2.0", "id": None, "error": {"code": -32001, "message": "Session not found"}}
                    ),
                )
            return self._reply(202, b"", ctype=None)
        msg_id = body.get("id") if isinstance(body, dict) else None

        def rpc_error(code: int, message: str = "refused", data: Any = None) -> str:
            err: dict[str, Any] = {"code": code, "message": message}
            if data is not None:
                err["data"] = data
            return json.dumps({"jsonrpc": "2.0", "id": msg_id, "error": err})

        def rpc_result(result: Any) -> str:
            return json.dumps({"jsonrpc": "2.0", "id": msg_id, "result": result})

        if route == "429":
            return self._reply(429, "slow down", "text/plain", {"Retry-After": "7"})
        if route == "429-date":
            return self._reply(
                429, "slow down", "text/plain", {"Retry-After": formatdate(time.time() + 30, usegmt=True)}
            )
        if route == "429-custom":  # /429-custom/<Retry-After, URL-quoted>
            return self._reply(429, "slow down", "text/plain", {"Retry-After": urllib.parse.unquote(parts[1])})
        if route == "429-bare":
            return self._reply(429, "slow down", "text/plain")
        if route in ("401", "403"):
            return self._reply(int(route), "no", "text/plain")
        if route == "500":
            return self._reply(500, "boom", "text/plain")
        if route == "503-rpc":
            return self._reply(503, rpc_error(-32603, "overloaded"))
        if route == "bad-json":
            return self._reply(200, '{"jsonrpc": "2.0", "id": 1, "result": {')
        if route == "not-jsonrpc":
            return self._reply(200, json.dumps({"hello": "world"}))
        if route == "no-result":
            return self._reply(200, json.dumps({"jsonrpc": "2.0", "id": msg_id, "result": 5}))
        if route == "rpc":  # /rpc/<code>[/<http status>]
            status = int(parts[2]) if len(parts) > 2 else 200
            code = int(parts[1])
            data = {"supported": ["2026-07-28"]} if code == -32022 else None
            return self._reply(status, rpc_error(code, f"error {code}", data))
        if route == "404-session":
            return self._reply(404, rpc_error(-32001, "Session not found"))
        if route == "404-method":
            return self._reply(404, rpc_error(-32601, "Method not found"))
        if route == "404-text":
            return self._reply(404, "not here", "text/plain")
        if route == "202":
            return self._reply(202, b"", ctype=None)
        if route == "html":
            return self._reply(200, "<html>hi</html>", "text/html")
        if route == "ok":  # echoes a task or a result by method
            if body["method"] in ("tasks/get", "tasks/cancel"):
                return self._reply(
                    200, rpc_result({"taskId": body["params"]["taskId"], "status": "working", "resultType": "complete"})
                )
            if body["method"] == "tools/call":
                return self._reply(200, rpc_result({"resultType": "weird"}))
            return self._reply(200, rpc_result({}))
        if route.startswith("sse"):
            events = [
                ": comment\n\n",
                "data:\n\n",
                "data: \n\n",  # priming/empty events
                "event: message\ndata: "
                + json.dumps({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": 1}})
                + "\n\n",
                "data: "
                + json.dumps(
                    {"jsonrpc": "2.0", "id": "srv-1", "method": "elicitation/create", "params": {"message": "?"}}
                )
                + "\n\n",
                "data: " + json.dumps({"jsonrpc": "2.0", "id": "someone-else", "result": {}}) + "\n\n",
            ]
            if route == "sse":
                events.append("data: " + rpc_result({"taskId": "t-sse", "status": "completed"}) + "\n\n")
            elif route == "sse-bad":
                events.append("data: {nope\n\n")
            # "sse-end": the stream ends without our reply
            payload = "".join(events).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            return
        if route == "reset":
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if route == "slow":
            time.sleep(1.5)
            return self._reply(200, rpc_result({}))
        return self._reply(500, f"unknown route {route}", "text/plain")


class _FakeServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[dict[str, Any]] = []

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that timed out on purpose ("slow") has gone when the reply is written: expected, not news.
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)


@pytest.fixture(scope="module")
def fake() -> Iterator[_FakeServer]:
    server = _FakeServer()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


async def _request(
    url: str,
    method: str = "tasks/get",
    params: dict[str, Any] | None = None,
    *,
    session_id: str | None = None,
    **kw: Any,
) -> dict[str, Any]:
    transport = HttpTransport(url, session_id=session_id, protocol_version=LEGACY if session_id else None)
    try:
        return await transport.request(method, params if params is not None else {"taskId": "t-1"}, **kw)
    finally:
        await transport.aclose()


# --- HTTP status mapping -----------------------------------------------------------------------------


async def test_429_with_retry_after_seconds(fake: _FakeServer) -> None:
    with pytest.raises(RateLimited) as info:
        await _request(f"{fake.base}/429")
    exc = info.value
    assert exc.retry_after_s == 7
    assert exc.status == 429 and exc.retryable
    assert exc.may_have_reached_server is False  # a 429 is a refusal
    assert exc.raw == "slow down"
    assert exc.info()["retry_after_s"] == 7


async def test_429_with_http_date_retry_after(fake: _FakeServer) -> None:
    with pytest.raises(RateLimited) as info:
        await _request(f"{fake.base}/429-date")
    assert 25 <= info.value.retry_after_s <= 31


async def test_429_without_retry_after(fake: _FakeServer) -> None:
    with pytest.raises(RateLimited) as info:
        await _request(f"{fake.base}/429-bare")
    assert info.value.retry_after_s is None


@pytest.mark.parametrize("status", [401, 403])
async def test_401_403_authorization_required(fake: _FakeServer, status: int) -> None:
    with pytest.raises(AuthorizationRequired) as info:
        await _request(f"{fake.base}/{status}")
    assert info.value.status == status
    assert not info.value.retryable and info.value.may_have_reached_server is False


async def test_500_is_transport_error_sent(fake: _FakeServer) -> None:
    with pytest.raises(TransportError) as info:
        await _request(f"{fake.base}/500", "tools/call", {"name": "x", "arguments": {}})
    exc = info.value
    assert type(exc) is TransportError
    assert (exc.sent, exc.status, exc.retryable, exc.may_have_reached_server) == (True, 500, True, True)
    assert exc.raw == "boom"


async def test_5xx_wins_over_a_jsonrpc_body(fake: _FakeServer) -> None:
    with pytest.raises(TransportError) as info:
        await _request(f"{fake.base}/503-rpc")
    assert info.value.status == 503


async def test_connection_refused_is_transport_error_not_sent() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    with pytest.raises(TransportError) as info:
        await _request(f"http://127.0.0.1:{port}/mcp", "tools/call", {"name": "x", "arguments": {}})
    assert info.value.sent is False and info.value.may_have_reached_server is False
    assert info.value.retryable


async def test_connection_reset_is_transport_error_sent(fake: _FakeServer) -> None:
    with pytest.raises(TransportError) as info:
        await _request(f"{fake.base}/reset", "tools/call", {"name": "x", "arguments": {}})
    assert info.value.sent is True and info.value.may_have_reached_server is True


async def test_read_timeout_is_transport_error_sent(fake: _FakeServer) -> None:
    with pytest.raises(TransportError) as info:
        await _request(f"{fake.base}/slow", timeout_s=0.3)
    assert info.value.sent is True


async def test_malformed_json_is_protocol_violation_with_raw(fake: _FakeServer) -> None:
    with pytest.raises(ProtocolViolation) as info:
        await _request(f"{fake.base}/bad-json")
    assert info.value.raw == '{"jsonrpc": "2.0", "id": 1, "result": {'
    assert not info.value.retryable


@pytest.mark.parametrize("route", ["not-jsonrpc", "no-result", "202", "html"])
async def test_other_bad_shapes_are_protocol_violations(fake: _FakeServer, route: str) -> None:
    with pytest.raises(ProtocolViolation):
        await _request(f"{fake.base}/{route}")


async def test_4xx_without_jsonrpc_body_is_a_refusal_not_a_garbled_reply(fake: _FakeServer) -> None:
    # The server answered (it refused the request): a JSON-RPC-level error, not a transport fault to retry.
    with pytest.raises(HttpRefusal) as info:
        await _request(f"{fake.base}/404-text")
    assert isinstance(info.value, JsonRpcError) and not info.value.retryable


async def test_404_with_session_is_session_gone(fake: _FakeServer) -> None:
    with pytest.raises(SessionGone) as info:
        await _request(f"{fake.base}/404-session", session_id="sess-1")
    assert isinstance(info.value, TaskUnreachable)
    assert info.value.may_have_reached_server is False
    # Without a session the same 404 is just the JSON-RPC error it carries.
    with pytest.raises(JsonRpcError) as plain:
        await _request(f"{fake.base}/404-session")
    assert not isinstance(plain.value, TaskUnreachable) and plain.value.code == -32001
    # A 404 whose body names a missing method is not a gone session.
    with pytest.raises(MethodNotFound):
        await _request(f"{fake.base}/404-method", session_id="sess-1")


# --- JSON-RPC error codes through the transport -------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "method", "expected"),
    [
        (-32601, "tasks/result", MethodNotFound),
        (-32021, "tasks/get", MissingCapability),
        (-32003, "tasks/get", MissingCapability),
        (-32020, "tasks/get", HeaderMismatch),
        (-32022, "tasks/get", UnsupportedProtocolVersion),
        (-32602, "tasks/get", TaskNotFound),
        (-32602, "tools/call", InvalidParams),
        (-32000, "tools/call", JsonRpcError),
    ],
)
@pytest.mark.parametrize("http_status", [200, 400])
async def test_jsonrpc_codes_map_to_types(
    fake: _FakeServer, code: int, method: str, expected: type, http_status: int
) -> None:
    with pytest.raises(expected) as info:
        await _request(f"{fake.base}/rpc/{code}/{http_status}", method)
    exc = info.value
    assert type(exc) is expected
    assert exc.code == code and not exc.retryable and exc.may_have_reached_server
    if code == -32022:
        assert exc.data == {"supported": ["2026-07-28"]}


# --- SSE ---------------------------------------------------------------------------------------------


async def test_sse_skips_priming_and_notifications_and_refuses_server_requests(fake: _FakeServer) -> None:
    before = len(fake.requests)
    result = await _request(f"{fake.base}/sse")
    assert result == {"taskId": "t-sse", "status": "completed"}
    # Without a handler the elicitation/create was answered -32601, so the server is never left waiting.
    answers = [r["body"] for r in fake.requests[before:] if r["body"] and "method" not in r["body"]]
    assert answers == [
        {
            "jsonrpc": "2.0",
            "id": "srv-1",
            "error": {"code": -32601, "message": "client has no handler for elicitation/create"},
        }
    ]


async def test_sse_server_request_goes_to_handler(fake: _FakeServer) -> None:
    seen: list[tuple[str, dict[str, Any], Any]] = []

    async def handler(method: str, params: dict[str, Any], request_id: Any) -> dict[str, Any]:
        seen.append((method, params, request_id))
        return {"action": "decline"}

    before = len(fake.requests)
    await _request(f"{fake.base}/sse", on_server_request=handler)
    assert seen == [("elicitation/create", {"message": "?"}, "srv-1")]
    answers = [r["body"] for r in fake.requests[before:] if r["body"] and "method" not in r["body"]]
    assert answers == [{"jsonrpc": "2.0", "id": "srv-1", "result": {"action": "decline"}}]


async def test_late_reply_to_a_server_request(fake: _FakeServer) -> None:
    transport = HttpTransport(f"{fake.base}/ok", session_id="sess-3", protocol_version=LEGACY)
    before = len(fake.requests)
    await transport.respond("srv-7", {"action": "accept", "content": {"approve": True}})
    sent = fake.requests[before]
    assert sent["body"] == {
        "jsonrpc": "2.0",
        "id": "srv-7",
        "result": {"action": "accept", "content": {"approve": True}},
    }
    assert _header_values(sent, "mcp-session-id") == ["sess-3"]
    await transport.aclose()
    gone = HttpTransport(f"{fake.base}/404-session", session_id="sess-3", protocol_version=LEGACY)
    with pytest.raises(SessionGone):
        await gone.respond("srv-7", {"action": "decline"})
    await gone.aclose()


async def test_sse_malformed_event_is_protocol_violation(fake: _FakeServer) -> None:
    with pytest.raises(ProtocolViolation) as info:
        await _request(f"{fake.base}/sse-bad")
    assert info.value.raw == "{nope"


async def test_sse_without_reply_is_transport_error(fake: _FakeServer) -> None:
    with pytest.raises(TransportError) as info:
        await _request(f"{fake.base}/sse-end")
    assert info.value.sent is True


# --- stdio failure shapes ----------------------------------------------------------------------------


async def test_stdio_command_that_cannot_start_is_transport_error_not_sent(tmp_path: Any) -> None:
    with pytest.raises(TransportError) as info:
        await WireSession.connect(Endpoint(command=[str(tmp_path / "no-such-server")]))
    assert info.value.sent is False and info.value.may_have_reached_server is False


async def test_stdio_child_that_dies_fails_requests_instead_of_hanging() -> None:
    # Prints a non-JSON line (logged and skipped), then exits without answering anything.
    script = "import sys, time; print('garbage', flush=True); time.sleep(0.3)"
    started = time.monotonic()
    with pytest.raises(TaskUnreachable, match="is gone"):
        await WireSession.connect(Endpoint(command=[sys.executable, "-c", script]))
    assert time.monotonic() - started < 10


async def test_stdio_missing_env_ref_is_a_clear_error() -> None:
    endpoint = Endpoint(command=[sys.executable, "-c", "pass"], env_refs={"TOKEN": "MCP_TEST_SURELY_UNSET_VAR"})
    with pytest.raises(CapabilityUnavailable, match="MCP_TEST_SURELY_UNSET_VAR"):
        await WireSession.connect(endpoint)


# --- what the client sends ---------------------------------------------------------------------------


def _header_values(request: dict[str, Any], name: str) -> list[str]:
    return [v for k, v in request["headers"] if k.lower() == name]


async def test_extension_envelope_and_routing_headers(fake: _FakeServer) -> None:
    url = f"{fake.base}/ok"
    client = WireSession(
        HttpTransport(url, protocol_version=EXTENSION),
        Endpoint(url=url),
        era=EXTENSION,
        protocol_version=EXTENSION,
        tasks_offered=True,
    )
    try:
        before = len(fake.requests)
        state = await client.get("task-1")
        assert (state.task_id, state.status, state.era) == ("task-1", "working", EXTENSION)
        sent = fake.requests[before]
        meta = sent["body"]["params"]["_meta"]
        assert meta["io.modelcontextprotocol/protocolVersion"] == "2026-07-28"
        assert meta["io.modelcontextprotocol/clientCapabilities"] == {
            "elicitation": {},
            "extensions": {"io.modelcontextprotocol/tasks": {}},
        }
        assert "io.modelcontextprotocol/clientInfo" in meta
        # Each routing header exactly once (a duplicate makes TS servers answer HTTP 400).
        assert _header_values(sent, "mcp-protocol-version") == ["2026-07-28"]
        assert _header_values(sent, "mcp-method") == ["tasks/get"]
        assert _header_values(sent, "mcp-name") == ["task-1"]
        assert _header_values(sent, "mcp-session-id") == []

        with pytest.raises(ProtocolViolation):  # neither a task nor a CallToolResult
            await client.start("tool-x", {})
        assert _header_values(fake.requests[-1], "mcp-name") == ["tool-x"]
    finally:
        await client.aclose()


async def test_legacy_requests_carry_session_and_no_routing_headers(fake: _FakeServer) -> None:
    url = f"{fake.base}/ok"
    transport = HttpTransport(url, session_id="sess-9", protocol_version=LEGACY)
    client = WireSession(transport, Endpoint(url=url), era=LEGACY, protocol_version=LEGACY, tasks_offered=True)
    before = len(fake.requests)
    await client.get("task-2")
    sent = fake.requests[before]
    assert "_meta" not in sent["body"]["params"]
    assert _header_values(sent, "mcp-protocol-version") == [LEGACY]
    assert _header_values(sent, "mcp-session-id") == ["sess-9"]
    assert _header_values(sent, "mcp-method") == [] and _header_values(sent, "mcp-name") == []
    # aclose() keeps a persisted session; terminate=True DELETEs it.
    await client.aclose()
    assert not [r for r in fake.requests[before:] if r["verb"] == "DELETE"]
    other = WireSession(HttpTransport(url, session_id="sess-9"), Endpoint(url=url), era=LEGACY, protocol_version=LEGACY)
    await other.aclose(terminate=True)
    deletes = [r for r in fake.requests[before:] if r["verb"] == "DELETE"]
    assert len(deletes) == 1 and _header_values(deletes[0], "mcp-session-id") == ["sess-9"]


# --- pure functions ----------------------------------------------------------------------------------


def test_parse_task_lenient() -> None:
    legacy = parse_task({"taskId": "a", "status": "working"}, LEGACY)
    assert (legacy.ttl_ms, legacy.poll_interval_ms, legacy.status_message) == (None, None, None)  # ttl omitted
    assert parse_task({"taskId": "a", "status": "completed", "ttl": None}, LEGACY).ttl_ms == UNLIMITED
    full = parse_task(
        {
            "taskId": "a",
            "status": "working",
            "ttl": 5000,
            "pollInterval": 250,
            "statusMessage": "busy",
            "createdAt": "2025-01-01T00:00:00Z",
            "extra": 1,
        },
        LEGACY,
    )
    assert (full.ttl_ms, full.poll_interval_ms, full.status_message, full.created_at) == (
        5000,
        250,
        "busy",
        "2025-01-01T00:00:00Z",
    )
    ext = parse_task(
        {
            "resultType": "task",
            "taskId": "b",
            "status": "failed",
            "ttlMs": 900000,
            "pollIntervalMs": 100,
            "error": {"code": -32602, "message": "bad"},
            "inputRequests": {},
        },
        EXTENSION,
    )
    assert (ext.ttl_ms, ext.poll_interval_ms, ext.terminal) == (900000, 100, True)
    assert (ext.error.code, ext.error.message) == (-32602, "bad")
    assert ext.input_requests is None
    asking = parse_task(
        {
            "taskId": "c",
            "status": "input_required",
            "inputRequests": {"k": {"method": "elicitation/create", "params": {"message": "?"}}},
        },
        EXTENSION,
    )
    assert asking.input_requests["k"].method == "elicitation/create"
    assert not asking.terminal
    # Junk in optional fields is dropped, not fatal.
    odd = parse_task(
        {"taskId": "d", "status": "working", "ttl": "soon", "pollInterval": True, "statusMessage": 5}, LEGACY
    )
    assert (odd.ttl_ms, odd.poll_interval_ms, odd.status_message) == (None, None, None)


@pytest.mark.parametrize(
    "obj",
    [
        "not a dict",
        {"status": "working"},
        {"taskId": "", "status": "working"},
        {"taskId": "a"},
        {"taskId": "a", "status": "running"},
        {"taskId": "a", "status": "input_required", "inputRequests": {"k": {"params": {}}}},
    ],
)
def test_parse_task_rejects_what_it_cannot_rely_on(obj: Any) -> None:
    with pytest.raises(ProtocolViolation) as info:
        parse_task(obj, LEGACY, raw={"wrapped": obj})
    assert info.value.raw is not None


@pytest.mark.parametrize(
    ("code", "method", "expected"),
    [
        (-32602, "tasks/get", TaskNotFound),
        (-32602, "tasks/cancel", TaskNotFound),
        (-32602, "tasks/result", TaskNotFound),
        (-32602, "tools/call", InvalidParams),
        (-32601, "tasks/list", MethodNotFound),
        (-32021, "tools/call", MissingCapability),
        (-32003, "tools/call", MissingCapability),
        (-32020, "tasks/get", HeaderMismatch),
        (-32022, "server/discover", UnsupportedProtocolVersion),
        (-32603, "tasks/result", JsonRpcError),
        (-32600, "tools/call", JsonRpcError),
    ],
)
def test_error_from_rpc(code: int, method: str, expected: type) -> None:
    exc = error_from_rpc({"code": code, "message": "m", "data": {"x": 1}}, method=method)
    assert type(exc) is expected
    assert (exc.code, exc.data) == (code, {"x": 1})
    assert exc.message == f"{method}: m"
    assert ERROR_TYPES[exc.kind] is expected  # rebuildable after crossing a process boundary


def test_error_from_rpc_without_integer_code() -> None:
    for bad in ({"message": "x"}, {"code": "-32602"}, "oops"):
        assert isinstance(error_from_rpc(bad, method="tasks/get"), ProtocolViolation)


def test_payload_from_error_strips_the_method_prefix() -> None:
    exc = error_from_rpc({"code": -32602, "message": "invalid account id: acct-0"}, method="tasks/result")
    payload = payload_from_error(exc)
    assert (payload.error.code, payload.error.message) == (-32602, "invalid account id: acct-0")


@pytest.mark.parametrize(
    ("value", "expected", "note"),
    [
        (None, None, None),
        ("", None, None),
        ("7", 7.0, None),
        (" 2.5 ", 2.5, None),
        ("+5", 5.0, None),
        ("-3", 0.0, "negative"),
        ("soon", None, "ignored"),
        ("inf", None, "ignored"),
        ("-inf", None, "ignored"),
        ("nan", None, "ignored"),
        ("1e15", None, "ignored"),
        ("0x10", None, "ignored"),
        ("5\x00", None, "ignored"),
        ("86400", 86400.0, None),
        ("86401", 86400.0, "clamped"),
        ("99999999999999999999999999", 86400.0, "clamped"),
        ("9" * 500, None, "ignored"),
        ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0, None),  # a date in the past: retry now
        ("Fri, 31 Dec 9999 23:59:59 GMT", 86400.0, "clamped"),
        ("Mon, 99 Foo 2020 99:99:99 GMT", None, "ignored"),
    ],
)
def test_retry_after_is_digits_or_a_date_and_bounded(
    value: str | None, expected: float | None, note: str | None
) -> None:
    """Every shape: a number ``timedelta`` can hold (at most a day) or None, and a note that names what was clamped
    or ignored; never an exception (an ``OverflowError`` here once made a 429 on tools/call look unknown)."""
    read = read_retry_after(value)
    assert read.seconds == expected and parse_retry_after(value) == expected
    assert (read.note is None) if note is None else (note in (read.note or "")), read
    if read.seconds is not None:
        timedelta(seconds=read.seconds)


@pytest.mark.parametrize("header", ["inf", "1e15", "99999999999", "Fri, 31 Dec 9999 23:59:59 GMT", "-1"])
async def test_a_429_with_any_retry_after_maps_to_a_bounded_refusal(fake: _FakeServer, header: str) -> None:
    """Through the transport and the activities' one mapping: a RateLimited that never reached the tool, its
    ``next_retry_delay`` at most a day, what the server sent named in the message when it was not used as is."""
    from mcp_temporal_tasks.activities.failure_encoding import to_application_error

    with pytest.raises(RateLimited) as info:
        await _request(f"{fake.base}/429-custom/{urllib.parse.quote(header, safe='')}", "tools/call", {"name": "x"})
    exc = info.value
    assert not exc.may_have_reached_server and exc.retry_after_note is not None
    assert exc.retry_after_s is None or 0 <= exc.retry_after_s <= MAX_RETRY_AFTER_S
    err = to_application_error(exc, sent=None)
    assert err.type == "RateLimited" and (err.next_retry_delay is None or err.next_retry_delay <= timedelta(days=1))
    assert err.details[0]["may_have_reached_server"] is False and header[:8] in str(err), str(err)


def test_parse_retry_after_future_http_date() -> None:
    assert 55 <= parse_retry_after(formatdate(time.time() + 60, usegmt=True)) <= 61


def test_decode_result() -> None:
    ok = {"content": [{"type": "text", "text": "x"}], "structuredContent": {"n": 1}, "_meta": {"k": 1}}
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    decoded = decode_result(ok, schema)
    assert decoded["structuredContent"] == {"n": 1} and decoded["content"][0]["text"] == "x"
    assert decode_result(ok) == decoded  # no schema: shape only

    cases = [
        ({"_meta": {"k": 1}}, None, "content"),  # a {_meta}-only payload is not a CallToolResult
        ({"content": "nope"}, None, "content"),
        ({"content": []}, schema, "no structuredContent"),
        ({"content": [], "structuredContent": {"n": "one"}}, schema, "outputSchema"),
        ({"content": [], "structuredContent": {"n": 1}}, {"type": "nonsense"}, "invalid"),
    ]
    for raw, sch, words in cases:
        with pytest.raises(ResultDecodeError, match=words) as info:
            decode_result(raw, sch)
        assert info.value.raw == raw
        assert info.value.may_have_reached_server  # the work happened; only decoding failed

    error_result = {"content": [{"type": "text", "text": "boom"}], "isError": True}
    assert decode_result(error_result, schema)["isError"] is True  # isError is not held to the schema


def test_raw_payloads_are_capped() -> None:
    huge = "x" * (RAW_CAP * 2)
    exc = ProtocolViolation("big", raw=huge)
    assert len(exc.raw) < RAW_CAP + 40 and exc.raw.endswith(f"[truncated {RAW_CAP} chars]")
    big_dict = {"k": huge}
    assert isinstance(ProtocolViolation("big", raw=big_dict).raw, str)  # too big to keep as an object
    small = {"k": "v"}
    assert ProtocolViolation("small", raw=small).raw == small


def test_every_error_type_is_a_wire_error_with_a_kind() -> None:
    for kind, cls in ERROR_TYPES.items():
        assert issubclass(cls, McpWireError) and cls.kind == kind


def test_endpoint_validation() -> None:
    with pytest.raises(ValueError):
        Endpoint()
    with pytest.raises(ValueError):
        Endpoint(url="http://x", command=["y"])
    with pytest.raises(ValueError):
        Endpoint(command=[])
    with pytest.raises(ValueError):
        Endpoint(url="ftp://x")
    assert Endpoint(url="https://user:pw@host:8443/mcp?token=s").identity() == "https://host:8443/mcp"
