"""Streams that resume (SEP-1699): an SSE reply stream that ends before its reply is resumed with ``GET`` +
``Last-Event-ID`` after the server's ``retry``; every hostile variant ends bounded, typed, with one POST.

A scripted HTTP/1.1 server (requests parsed by h11, replies written as raw bytes: what no library would send) plays
each case; the real runtime that cycles its streams (the TypeScript SDK with its event store) is in
tests/test_call_input.py. The SSE fields themselves are parsed by httpx2's decoder; what is ours (the clamp of
``retry``, which event id may be sent back, how many resumptions) is held here, on the decoder's own output.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import h11
import httpx2
import pytest

from mcp_temporal_tasks.activities.wire import resume
from mcp_temporal_tasks.activities.wire.http_transport import HttpTransport
from mcp_temporal_tasks.activities.wire.resume import (
    DEFAULT_RETRY_S,
    MAX_IDLE_RESUMPTIONS,
    MAX_RETRY_S,
    MIN_RETRY_S,
    ResumePoint,
    retry_delay_s,
    usable_event_id,
)
from mcp_temporal_tasks.protocol.wire_errors import StreamLost, TransportError

pytestmark = pytest.mark.fast

SSE_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"


def reply_event(msg_id: Any, event_id: str = "r") -> bytes:
    body = json.dumps({"jsonrpc": "2.0", "id": msg_id, "result": {"content": [{"type": "text", "text": "ok"}]}})
    return f"id: {event_id}\ndata: {body}\n\n".encode()


@dataclass
class Script:
    """What the server sends: ``post(msg_id)`` for the POST, ``get(n, msg_id)`` for the n-th GET (from 1). Each
    returns raw bytes (written, then the connection is closed) or ``("drop", bytes)`` (written, then reset)."""

    post: Callable[[Any], bytes]
    get: Callable[[int, Any], bytes]
    posts: int = 0
    gets: list[tuple[float, str | None]] = field(default_factory=list)
    #: When the POST's stream was written and closed.
    closed_at: float = 0.0


@contextlib.asynccontextmanager
async def scripted(script: Script) -> AsyncIterator[str]:
    msg_ids: list[Any] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = h11.Connection(h11.SERVER)
        request: h11.Request | None = None
        body = b""
        try:
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    data = await reader.read(65536)
                    conn.receive_data(data)
                    if not data:
                        return
                    continue
                if isinstance(event, h11.Request):
                    request = event
                elif isinstance(event, h11.Data):
                    body += bytes(event.data)
                elif isinstance(event, h11.EndOfMessage):
                    break
            assert request is not None
            headers = {k.decode().lower(): v.decode() for k, v in request.headers}
            if request.method == b"POST":
                script.posts += 1
                msg_ids.append(json.loads(body)["id"])
                writer.write(script.post(msg_ids[-1]))
            else:
                script.gets.append((time.monotonic(), headers.get("last-event-id")))
                answer = script.get(len(script.gets), msg_ids[-1] if msg_ids else None)
                if answer.startswith(b"HOLD:"):  # written, then the stream stays open and silent
                    writer.write(answer[5:])
                    await writer.drain()
                    await asyncio.sleep(30)
                    return
                writer.write(answer)
            await writer.drain()
            if request.method == b"POST":
                script.closed_at = time.monotonic()
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.close()


async def call(url: str, timeout_s: float = 5.0) -> dict[str, Any]:
    transport = HttpTransport(url, timeout_s=timeout_s)
    try:
        return await transport.request("tools/call", {"name": "t", "arguments": {}})
    finally:
        await transport.aclose()


async def test_a_stream_closed_gracefully_is_resumed_after_retry_and_the_reply_read_once() -> None:
    script = Script(
        post=lambda i: SSE_HEAD + b"id: e1\nretry: 300\ndata: \n\n",
        get=lambda n, i: SSE_HEAD + b"id: e2\ndata: \n\n" + reply_event(i),
    )
    async with scripted(script) as url:
        started = time.monotonic()
        reply = await call(url)
    assert reply["content"][0]["text"] == "ok"
    assert script.posts == 1 and len(script.gets) == 1
    ((at, last_id),) = script.gets
    assert last_id == "e1"
    assert at - script.closed_at >= 0.3 - 0.02 and at - started >= 0.3 - 0.02  # waited the server's retry


async def test_a_dropped_stream_is_resumed_from_its_last_event_id() -> None:
    # The first stream carries an event, then the connection is cut mid-chunk (not a graceful end).
    first = b"id: e7\nretry: 50\ndata: \n\n"
    script = Script(
        post=lambda i: (
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked"
            b"\r\n\r\n" + b"%x\r\n%s\r\n" % (len(first), first) + b"40\r\nid: e8\ndata: {"
        ),
        get=lambda n, i: SSE_HEAD + reply_event(i),
    )
    async with scripted(script) as url:
        reply = await call(url)
    assert reply["content"][0]["text"] == "ok"
    assert script.posts == 1 and [g[1] for g in script.gets] == ["e7"]


async def test_a_stream_that_closes_forever_ends_stream_lost_after_the_bound() -> None:
    script = Script(
        post=lambda i: SSE_HEAD + b"id: e1\nretry: 20\ndata: \n\n",
        get=lambda n, i: SSE_HEAD + f"id: g{n}\nretry: 20\ndata: \n\n".encode(),
    )
    async with scripted(script) as url:
        started = time.monotonic()
        with pytest.raises(StreamLost) as caught:
            await call(url)
    assert time.monotonic() - started < 10
    assert script.posts == 1 and len(script.gets) == MAX_IDLE_RESUMPTIONS
    assert [g[1] for g in script.gets] == ["e1"] + [f"g{n}" for n in range(1, MAX_IDLE_RESUMPTIONS)]
    exc = caught.value
    assert exc.sent and exc.may_have_reached_server and exc.kind == "StreamLost"
    assert f"{MAX_IDLE_RESUMPTIONS} resumptions in a row" in exc.message and "tools/call" in exc.message


@pytest.mark.parametrize(
    "answer, named",
    [
        (b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n", "HTTP 404"),
        (b"HTTP/1.1 405 Method Not Allowed\r\ncontent-length: 0\r\nconnection: close\r\n\r\n", "HTTP 405"),
        (
            b"HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: 5\r\nconnection: close\r\n\r\n<html",
            "text/html",
        ),
        (
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}",
            "application/json",
        ),
    ],
)
async def test_a_refused_resumption_ends_at_once_naming_it(answer: bytes, named: str) -> None:
    script = Script(post=lambda i: SSE_HEAD + b"id: e1\nretry: 10\ndata: \n\n", get=lambda n, i: answer)
    async with scripted(script) as url:
        with pytest.raises(StreamLost) as caught:
            await call(url)
    assert script.posts == 1 and len(script.gets) == 1
    assert named in caught.value.message and caught.value.may_have_reached_server


async def test_garbage_on_the_resumed_stream_is_a_garbled_reply_not_a_hang() -> None:
    script = Script(
        post=lambda i: SSE_HEAD + b"id: e1\nretry: 10\ndata: \n\n",
        get=lambda n, i: SSE_HEAD + b"id: e2\ndata: {not json\n\n",
    )
    async with scripted(script) as url:
        with pytest.raises(Exception) as caught:
            await call(url)
    assert caught.value.__class__.__name__ == "ProtocolViolation" and script.posts == 1


async def test_a_resumed_stream_that_goes_silent_is_a_read_fault_within_the_read_timeout() -> None:
    script = Script(
        post=lambda i: SSE_HEAD + b"id: e1\nretry: 10\ndata: \n\n",
        get=lambda n, i: b"HOLD:" + SSE_HEAD + b"id: e2\ndata: \n\n",
    )
    async with scripted(script) as url:
        started = time.monotonic()
        with pytest.raises(TransportError) as caught:
            await call(url, timeout_s=1.0)
    assert time.monotonic() - started < 5 and script.posts == 1 and len(script.gets) == 1
    assert "ReadTimeout" in caught.value.message and caught.value.may_have_reached_server


async def test_a_busy_resumption_is_asked_again_within_the_bound() -> None:
    busy = b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
    script = Script(
        post=lambda i: SSE_HEAD + b"id: e1\nretry: 10\ndata: \n\n",
        get=lambda n, i: busy if n < 3 else SSE_HEAD + reply_event(i),
    )
    async with scripted(script) as url:
        reply = await call(url)
    assert reply["content"][0]["text"] == "ok" and script.posts == 1 and len(script.gets) == 3


@pytest.mark.parametrize(
    "retry_line",
    [
        b"retry: -5\n",  # the decoder keeps a negative number: ours to refuse
        b"retry: soon\n",  # not an integer: the decoder ignores it
        b"retry: 1e3\n",
        b"",  # none sent
    ],
)
async def test_a_hostile_retry_is_replaced_by_the_default(retry_line: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    expected_s = 0.4  # the default (1 s), shortened for the test
    monkeypatch.setattr(resume, "DEFAULT_RETRY_S", expected_s)
    script = Script(
        post=lambda i: SSE_HEAD + b"id: e1\n" + retry_line + b"data: \n\n", get=lambda n, i: SSE_HEAD + reply_event(i)
    )
    async with scripted(script) as url:
        await call(url)
    waited = script.gets[0][0] - script.closed_at
    assert expected_s - 0.05 <= waited < expected_s + 2.0


async def test_a_stream_without_event_id_is_not_resumed() -> None:
    script = Script(post=lambda i: SSE_HEAD + b"data: \n\n", get=lambda n, i: SSE_HEAD + reply_event(i))
    async with scripted(script) as url:
        with pytest.raises(TransportError) as caught:
            await call(url)
    assert not script.gets and script.posts == 1 and "ended without a reply" in caught.value.message


def decoded(raw: bytes) -> list[httpx2.ServerSentEvent]:
    """What httpx2's SSE decoder (the library that parses every stream) makes of ``raw``."""
    response = httpx2.Response(
        200, headers={"content-type": "text/event-stream"}, content=raw, request=httpx2.Request("GET", "http://x")
    )
    return list(httpx2.EventSource(response))


@pytest.mark.parametrize(
    "raw, event_id, delay_s",
    [
        (b"id: a\nretry: 99999999999999\ndata: \n\n", "a", MAX_RETRY_S),  # huge: clamped
        (b"id: a\nretry: 0\ndata: \n\n", "a", MIN_RETRY_S),  # zero: a floor, no hammering
        (b"id: a\nretry: -1\ndata: \n\n", "a", DEFAULT_RETRY_S),
        (b"id: a\nretry: 12ms\ndata: \n\n", "a", DEFAULT_RETRY_S),
        (b"id: a\ndata: \n\nid\ndata: x\n\n", "a", DEFAULT_RETRY_S),  # an empty id keeps the last (SDK rule)
        (b"id: a\ndata: \n\nid: b\0c\ndata: x\n\n", "a", DEFAULT_RETRY_S),  # an id with NUL is ignored
        (b"id: \xc3\xa9t\xc3\xa9\ndata: \n\n", None, DEFAULT_RETRY_S),  # not ASCII: cannot be a header
        (b"id: " + b"x" * 5000 + b"\ndata: \n\n", None, DEFAULT_RETRY_S),  # too long to send back
        (b"id: a\r\nretry: 250\r\ndata: \r\n\r\n", "a", 0.25),  # CRLF lines
    ],
)
def test_resume_point_bounds_what_the_decoder_read(raw: bytes, event_id: str | None, delay_s: float) -> None:
    point = ResumePoint()
    for event in decoded(raw):
        point.saw(event.id, event.retry, message=False)
    assert point.header() == event_id
    assert point.delay_s() == pytest.approx(delay_s)


def test_the_clamp_and_the_id_rule() -> None:
    assert retry_delay_s(None) == DEFAULT_RETRY_S and retry_delay_s(500) == 0.5
    assert retry_delay_s(10**15) == MAX_RETRY_S and retry_delay_s(-3) == DEFAULT_RETRY_S
    assert usable_event_id(" padded ") is None and usable_event_id("a\nb") is None and usable_event_id("ok-1") == "ok-1"
    point = ResumePoint(event_id="e")
    for _ in range(MAX_IDLE_RESUMPTIONS):
        assert point.ended() is None  # each resumption that brings nothing counts
    assert point.ended() is not None
    point = ResumePoint(event_id="e")
    for _ in range(3 * MAX_IDLE_RESUMPTIONS):
        point.seen_message = True  # a resumption that brings a message starts the count again
        assert point.ended() is None
