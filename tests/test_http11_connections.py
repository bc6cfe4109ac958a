"""Our HTTP/1.1 connection layer (activities/wire/http11.py, framed by h11) against the real peers.

Every request httpx would send directly goes over it (``tasks/get`` is what a waiting worker sends ~80 times a
second at 10,000 tasks). What must hold: the same answers as through httpx (JSON bodies and SSE
streams, the TS SDK's chunked ones included), one request per read at the server, one connection for reads a poll
apart, every HTTP fault mapped to the error httpx's path gives, and a server that drops a kept-alive connection or
frames a reply another way costs no error. The hostile corpus is tests/test_wire_corpus.py.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from mcp_temporal_tasks.activities.wire import (
    Endpoint,
    ProtocolViolation,
    RateLimited,
    TransportError,
    WireSession,
)
from mcp_temporal_tasks.activities.wire.backpressure import HOLDS, key_of
from mcp_temporal_tasks.activities.wire.http11 import H11Transport
from mcp_temporal_tasks.activities.wire.http_transport import OLD_SWITCH, SWITCH, HttpTransport
from mcp_temporal_tasks.protocol.wire_errors import RequestRefused
from tests.faults import FaultProxy, Malformed, RateLimit, ResetAfterSend, Status, Truncated
from tests.peers.harness import Peer

PEERS = ["fastmcp_server", "ts_http_stateful", "fastmcp_json"]


@pytest.fixture(params=PEERS)
def peer(request: pytest.FixtureRequest) -> Peer:
    return request.getfixturevalue(request.param)


def kept_alive(client: WireSession) -> H11Transport:
    transport = client.transport
    assert isinstance(transport, HttpTransport) and transport.connections is not None
    return transport.connections


async def test_reads_after_the_first_share_one_kept_alive_connection(peer: Peer) -> None:
    mark = peer.log_mark()
    client = await WireSession.connect(Endpoint(url=peer.url))
    try:
        start = await client.start("slow_echo", {"seconds": 1.0, "text": "kept alive"})
        assert start.task is not None
        await client.get(start.task.task_id)
        path = kept_alive(client)
        replies, connections = path.replies, path.connections
        states = []
        for _ in range(100):
            states.append(await client.get(start.task.task_id))
            if states[-1].terminal:
                break
            await asyncio.sleep(0.1)
        payload = await client.result(states[-1])
        read_replies, opened = path.replies - replies, path.connections - connections
    finally:
        await client.aclose(terminate=True)
    assert states[-1].status == "completed" and {s.task_id for s in states} == {start.task.task_id}
    assert payload.result is not None and payload.result["content"][0]["text"] == "kept alive"
    # Every read a poll apart on a connection already open, each once at the server.
    assert len(states) >= 5 and read_replies >= len(states) and opened == 0, (len(states), read_replies, opened)
    gets = [x for x in peer.log_since(mark) if x.get("method") == "tasks/get"]
    assert len(gets) == len(states) + 1, (len(gets), len(states))


@pytest.mark.parametrize(
    "fault, check",
    [
        (
            RateLimit(retry_after_s=3),
            lambda e: isinstance(e, RateLimited) and e.retry_after_s == 3 and not e.may_have_reached_server,
        ),
        (Status(500), lambda e: isinstance(e, TransportError) and e.status == 500 and e.sent),
        (Status(503, "busy"), lambda e: isinstance(e, TransportError) and e.status == 503),
        (Malformed(), lambda e: isinstance(e, ProtocolViolation)),
        (Truncated(), lambda e: isinstance(e, TransportError) and e.sent),
        # A kept-alive connection closed before any byte of a reply is what a server dropping an idle connection looks
        # like: the read is sent once more on a new connection (it is a read), and answered.
        (ResetAfterSend(), None),
    ],
    ids=["429", "500", "503", "malformed", "truncated", "reset-then-resent"],
)
@pytest.mark.parametrize("peer", ["fastmcp_server", "fastmcp_json"], indirect=True)
async def test_a_fault_on_a_kept_alive_read_is_the_httpx_paths_error(peer: Peer, fault: Any, check: Any) -> None:
    with FaultProxy(peer.url or "") as proxy:
        client = await WireSession.connect(Endpoint(url=proxy.url))
        try:
            start = await client.start("slow_echo", {"seconds": 5.0, "text": "faulty"})
            assert start.task is not None
            await client.get(start.task.task_id)
            await client.get(start.task.task_id)
            before = kept_alive(client).replies
            rule = proxy.add("tasks/get", fault)
            seen = proxy.seen("tasks/get")
            try:
                await client.get(start.task.task_id)
            except Exception as exc:  # noqa: BLE001
                assert check is not None and check(exc), repr(exc)
            else:
                assert check is None, f"{type(fault).__name__}: no error"
            assert rule.fired == 1 and proxy.seen("tasks/get") == seen + (2 if check is None else 1)
            # The 429's hold (activities/wire/backpressure.py, tests/test_backpressure.py) is not this test's subject.
            HOLDS.clear(key_of(Endpoint(url=proxy.url)))
            state = await client.get(start.task.task_id)  # the next read is fine
            assert state.status == "working" and kept_alive(client).replies > before
        finally:
            await client.aclose(terminate=True)


# --- framing our peers do not use: a scripted HTTP/1.1 server -------------------------------------------------

TASK = {
    "taskId": "t-1",
    "status": "working",
    "createdAt": "2026-12-01T00:00:00Z",
    "lastUpdatedAt": "2026-12-01T00:00:00Z",
    "ttl": 60000,
    "pollInterval": 500,
}


class Scripted:
    """Answers each POST by the next framing in ``script`` (cycling the last): ``json``, ``json-then-close`` (a
    kept-alive connection dropped after the reply, without saying so), ``sse-open`` (the answer, then the stream
    left open), ``close-delimited`` (no length, the body ends with the connection)."""

    def __init__(self, script: list[str]) -> None:
        self.script, self.requests = script, 0
        self.server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/mcp"

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                msg = json.loads(await reader.readexactly(length))
                mode = self.script[min(self.requests, len(self.script) - 1)]
                self.requests += 1
                body = json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": TASK}).encode()
                if mode.startswith("json"):
                    writer.write(
                        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(body)
                        + body
                    )
                    await writer.drain()
                    if mode == "json-then-close":
                        break
                elif mode == "sse-open":
                    event = b"id: 1\ndata: \n\nevent: message\ndata: " + body + b"\n\n"
                    writer.write(
                        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked"
                        b"\r\n\r\n%x\r\n%s\r\n" % (len(event), event)
                    )
                    await writer.drain()
                    await asyncio.sleep(30)  # never ends the stream
                else:
                    writer.write(
                        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n" + body
                    )
                    await writer.drain()
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@pytest.fixture
async def scripted() -> AsyncIterator[Scripted]:
    s = Scripted([])
    s.server = await asyncio.start_server(s.handle, "127.0.0.1", 0)
    yield s
    s.server.close()


async def reads(scripted: Scripted, script: list[str], n: int) -> HttpTransport:
    scripted.script = script
    transport = HttpTransport(scripted.url, timeout_s=5)
    for _ in range(n):
        assert (await transport.request("tasks/get", {"taskId": "t-1"}))["taskId"] == "t-1"
    return transport


async def test_a_dropped_kept_alive_connection_is_replaced_without_an_error(scripted: Scripted) -> None:
    transport = await reads(scripted, ["json", "json-then-close"], 6)
    path = transport.connections
    await transport.aclose()
    # Each read the server answered once: a connection the server closed after its reply is never written into.
    assert scripted.requests == 6 and path is not None and path.replies == 6 and path.connections >= 3


async def test_an_sse_stream_left_open_is_answered_and_not_waited_for(scripted: Scripted) -> None:
    transport = await reads(scripted, ["json", "sse-open"], 3)
    path = transport.connections
    await transport.aclose()
    # The stream left open after its answer is dropped with its connection, never reused.
    assert scripted.requests == 3 and path is not None and path.connections == 2


async def test_a_reply_framed_by_the_connection_closing_is_read_and_its_connection_not_reused(
    scripted: Scripted,
) -> None:
    transport = await reads(scripted, ["json", "close-delimited"], 4)
    path = transport.connections
    await transport.aclose()
    # h11 frames a body that ends with the connection: each read once at the server, each later one on a new one.
    assert scripted.requests == 4 and path is not None and path.connections == 3


async def test_a_header_with_a_line_break_never_reaches_the_socket(scripted: Scripted) -> None:
    scripted.script = ["json"]
    transport = HttpTransport(scripted.url, timeout_s=5)
    await transport.request("tasks/get", {"taskId": "t-1"})
    for value in ("a\r\nx-evil: 1", "a\x00b", " leading space"):
        with pytest.raises(RequestRefused) as caught:
            await transport.request("tasks/get", {"taskId": "t-1"}, headers={"x-injected": value})
        assert not caught.value.may_have_reached_server and "header value" in caught.value.message, caught.value
    with pytest.raises(RequestRefused) as named:
        await transport.request("tools/call", {"name": "x"}, headers={"bad name": "v"})
    assert "header name" in named.value.message and not named.value.may_have_reached_server
    await transport.aclose()
    assert scripted.requests == 1, "a request with an illegal header was sent"


def test_our_connections_serve_exactly_where_httpx_goes_direct(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [k for k in __import__("os").environ if k.lower().endswith("_proxy")]:
        monkeypatch.delenv(name)
    assert HttpTransport("http://127.0.0.1:1/mcp").connections is not None
    assert HttpTransport("https://example.com/mcp").connections is not None
    assert HttpTransport("http://user:pw@example.com/mcp").connections is not None  # httpx's BasicAuth on top
    monkeypatch.setenv(SWITCH, "0")
    assert HttpTransport("http://127.0.0.1:1/mcp").connections is None
    monkeypatch.delenv(SWITCH)
    monkeypatch.setenv(OLD_SWITCH, "0")  # the deprecated name, still read while the new one is unset
    assert HttpTransport("http://127.0.0.1:1/mcp").connections is None
    monkeypatch.setenv(SWITCH, "1")  # the new name wins
    assert HttpTransport("http://127.0.0.1:1/mcp").connections is not None
    monkeypatch.delenv(SWITCH)
    monkeypatch.delenv(OLD_SWITCH)
    # httpx's NO_PROXY rules, not urllib's: ".example.com" does not exempt example.com itself from the proxy.
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.internal:3128")
    monkeypatch.setenv("NO_PROXY", ".example.com")
    assert HttpTransport("https://example.com/mcp").connections is None
    assert HttpTransport("https://api.example.com/mcp").connections is not None
    assert HttpTransport("http://127.0.0.1:1/mcp").connections is not None  # HTTPS_PROXY is not for http://
