"""The listeners of ``activities/wire/notifications.py`` against hostile and broken servers, and the 2026-07-28 seam.

Hostile input is normal input: a GET stream refused (405, 409), cut, silent forever, sending malformed JSON, an
oversized event or a flood of useless notifications must each end in a bounded retry or in being ignored, never in a
hang or a crash. The servers here are scripted (starlette + uvicorn, SSE frames as bytes) because the hostile
protocol side is what is under test; the real runtimes' streams are exercised by tests/test_push.py. The 2026-07-28
``subscriptions/listen`` seam is checked against fastmcp 4.1.4 (which serves no task events: refused, as it should
be) and against a scripted server that does (the ext-tasks draft's shapes), since no runtime here emits them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from mcp_temporal_tasks.activities.wire import EXTENSION, LEGACY, SessionRef, WireSession
from mcp_temporal_tasks.activities.wire import notifications as n
from mcp_temporal_tasks.activities.wire.http_transport import HttpTransport
from mcp_temporal_tasks.protocol.tasks import Endpoint
from tests.peers.harness import Peer


def notice(task_id: str, status: str = "completed", method: str = "notifications/tasks/status") -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "method": method,
        "params": {"taskId": task_id, "status": status, "createdAt": "2026-12-01T00:00:00Z"},
    }


def frame(data: str) -> bytes:
    return f"data: {data}\n\n".encode()


# --- reading one notification (pure) -----------------------------------------------------------------------


@pytest.mark.fast
def test_a_task_notice_reads_only_the_task_id_and_the_status() -> None:
    assert n.task_notice(notice("t-1")) == n.TaskNotice("t-1", "completed")
    assert n.task_notice(notice("t-2", "input_required", "notifications/tasks")) == n.TaskNotice(
        "t-2", "input_required"
    )
    nested = {
        "jsonrpc": "2.0",
        "method": "notifications/tasks",
        "params": {"task": {"taskId": "t-3", "status": "failed"}},
    }
    assert n.task_notice(nested) == n.TaskNotice("t-3", "failed")
    assert n.task_notice({"jsonrpc": "2.0", "method": "notifications/progress", "params": {}}) is None
    # A request (it has an id) is not a notification, whatever its method says.
    assert n.task_notice({**notice("t-1"), "id": 7}) is None
    for bad in (
        notice(""),
        notice("t-1", "done"),
        {"method": "notifications/tasks/status", "params": []},
        {"method": "notifications/tasks/status", "params": {"taskId": 5, "status": "completed"}},
        {"method": "notifications/tasks/status", "params": {"taskId": "x" * 20_000, "status": "completed"}},
        {"method": "notifications/tasks/status", "params": {"taskId": "\ud800", "status": "completed"}},
        [1],
    ):
        with pytest.raises(n.MalformedNotice):
            n.task_notice(bad)


# --- a scripted server -----------------------------------------------------------------------------------------

#: One GET answer: (status, content type, the body's chunks, or an async generator factory for a stream).
Answer = Callable[[], Response]


class Scripted:
    """A server whose successive GET streams (and POSTs) answer as the test scripted them; the last one repeats."""

    def __init__(self) -> None:
        self.gets: list[Answer] = []
        self.posts: list[Callable[[dict[str, Any]], Response]] = []
        self.get_count = 0
        #: (monotonic time, Last-Event-ID header) of each GET.
        self.get_seen: list[tuple[float, str | None]] = []
        self.bodies: list[dict[str, Any]] = []
        self.url = ""

    async def _get(self, request: Request) -> Response:
        self.get_count += 1
        self.get_seen.append((time.monotonic(), request.headers.get("last-event-id")))
        answer = self.gets[min(self.get_count - 1, len(self.gets) - 1)]
        return answer()

    async def _post(self, request: Request) -> Response:
        body = await request.json()
        self.bodies.append(body)
        answer = self.posts[min(len(self.bodies) - 1, len(self.posts) - 1)]
        return answer(body)


@contextlib.asynccontextmanager
async def scripted() -> AsyncIterator[Scripted]:
    script = Scripted()

    async def mcp(request: Request) -> Response:
        return await (script._get(request) if request.method == "GET" else script._post(request))

    app = Starlette(routes=[Route("/mcp", mcp, methods=["GET", "POST"])])
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="error", lifespan="off"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            await asyncio.sleep(0.01)
        script.url = f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
        yield script
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)


def status(code: int) -> Answer:
    return lambda: JSONResponse(
        {"jsonrpc": "2.0", "error": {"code": -32000, "message": f"HTTP {code}"}, "id": None}, status_code=code
    )


def stream(*chunks: bytes, then_hold: bool = False, every_s: float = 0.0) -> Answer:
    """An SSE stream of ``chunks`` (one each ``every_s``), then closed, or held open with nothing more."""

    async def body() -> AsyncIterator[bytes]:
        for chunk in chunks:
            yield chunk
            if every_s:
                await asyncio.sleep(every_s)
        if then_hold:
            await asyncio.sleep(3600)

    return lambda: StreamingResponse(body(), media_type="text/event-stream")


class Heard:
    def __init__(self, useful: Callable[[dict[str, Any]], bool] = lambda m: True) -> None:
        self.messages: list[dict[str, Any]] = []
        self.useful = useful

    def __call__(self, message: dict[str, Any]) -> bool:
        self.messages.append(message)
        return self.useful(message)


async def until(predicate: Callable[[], Any], timeout_s: float, what: str) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


@contextlib.asynccontextmanager
async def get_stream(url: str, heard: Heard) -> AsyncIterator[n.GetStream]:
    transport = HttpTransport(url, session_id="s-1", protocol_version=LEGACY)
    listener = n.GetStream(transport, heard, name="scripted")
    task = asyncio.create_task(listener.run())
    try:
        yield listener
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await transport.aclose()


# --- the GET stream, hostile ----------------------------------------------------------------------------------


async def test_a_refused_get_stream_says_so_and_is_retried_or_given_up() -> None:
    async with scripted() as server:
        server.gets = [status(409)]
        async with get_stream(server.url, Heard()) as listener:
            await until(lambda: listener.state == n.Reach.HELD_ELSEWHERE, 5, "409 understood")
            assert listener.live(), "a stream held elsewhere still reaches one of us"
            await until(lambda: server.get_count >= 2, 6, "the retry after 409")
        server.get_count = 0
        for code in (405, 406):
            server.gets = [status(code)]
            async with get_stream(server.url, Heard()) as listener:
                await until(lambda: listener.state == n.Reach.UNSUPPORTED, 5, f"{code} understood")
                await asyncio.sleep(0.5)
                assert not listener.live()
        assert server.get_count == 2, "an unsupported stream is not asked for again by the listener"


async def test_malformed_and_unsolicited_messages_are_skipped_and_the_stream_goes_on() -> None:
    async with scripted() as server:
        server.gets = [
            stream(
                b": keep-alive\n\n",
                frame(""),
                frame("{not json"),
                frame('"a string"'),
                frame(json.dumps({"jsonrpc": "2.0", "method": "notifications/message", "params": {}})),
                frame(json.dumps(notice("t-1"))),
                then_hold=True,
            )
        ]
        heard = Heard()
        async with get_stream(server.url, heard) as listener:
            await until(
                lambda: any(m.get("params", {}).get("taskId") == "t-1" for m in heard.messages if isinstance(m, dict)),
                5,
                "the good notification",
            )
            assert listener.counts["malformed"] == 1 and listener.state == n.Reach.LISTENING
            assert server.get_count == 1


async def test_an_oversized_event_breaks_only_that_stream_which_is_reopened() -> None:
    huge = frame(
        json.dumps(
            {
                **notice("t-big"),
                "params": {"taskId": "t-big", "status": "completed", "statusMessage": "x" * (n.MAX_NOTICE_BYTES + 10)},
            }
        )
    )
    async with scripted() as server:
        server.gets = [stream(huge, then_hold=True), stream(frame(json.dumps(notice("t-after"))), then_hold=True)]
        heard = Heard()
        async with get_stream(server.url, heard) as listener:
            await until(lambda: [m for m in heard.messages if m["params"]["taskId"] == "t-after"], 8, "the next stream")
            assert listener.counts["oversized"] == 1 and server.get_count == 2
            assert not [m for m in heard.messages if m["params"]["taskId"] == "t-big"]


async def test_a_silent_stream_is_reopened_and_a_cut_one_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(n, "READ_IDLE_S", 0.5)
    async with scripted() as server:
        server.gets = [
            stream(then_hold=True),
            stream(frame(json.dumps(notice("t-1")))),
            stream(frame(json.dumps(notice("t-2"))), then_hold=True),
        ]
        heard = Heard()
        async with get_stream(server.url, heard) as listener:
            await until(lambda: len(heard.messages) == 2, 10, "both notifications")
            assert listener.counts["silent"] >= 1 and listener.counts["ended"] >= 1
            assert server.get_count == 3


async def test_an_ended_stream_is_resumed_with_its_last_event_id_after_the_servers_retry() -> None:
    """SEP-1699 on the standalone GET stream: reopened with Last-Event-ID (the last id it carried) after the
    server's retry (300 ms here), not the listener's own 1 s backoff; a hostile retry is clamped (30 s at most)."""
    async with scripted() as server:
        server.gets = [
            stream(b"id: g-1\nretry: 300\ndata: \n\n", frame(json.dumps(notice("t-1")))),
            stream(frame(json.dumps(notice("t-2"))), then_hold=True),
        ]
        heard = Heard()
        async with get_stream(server.url, heard) as listener:
            await until(lambda: len(heard.messages) == 2, 10, "both notifications")
            assert [seen[1] for seen in server.get_seen] == [None, "g-1"]
            assert 0.2 <= server.get_seen[1][0] - server.get_seen[0][0] < 0.9  # the retry, jittered ±20 %
            assert listener.point.header() == "g-1"
    point = n.ResumePoint(event_id="g", retry_ms=10**12)
    assert point.delay_s() == 30.0


async def test_a_flood_of_useless_notifications_sheds_the_stream() -> None:
    flood = b"".join(frame(json.dumps(notice(f"unknown-{i}"))) for i in range(5_000))
    async with scripted() as server:
        server.gets = [stream(flood, then_hold=True)]
        heard = Heard(useful=lambda m: False)
        async with get_stream(server.url, heard) as listener:
            await until(lambda: listener.state == n.Reach.SHEDDING, 10, "the flood shed")
            read = len(heard.messages)
            await asyncio.sleep(1.0)
            assert len(heard.messages) == read and server.get_count == 1, "still reading a flood"
    assert n.FLOOD_USELESS_PER_S < read <= 5_000, read


# --- 2026-07-28: subscriptions/listen --------------------------------------------------------------------------


async def test_subscriptions_listen_on_fastmcp_is_refused_no_task_events(fastmcp_server: Peer) -> None:
    """fastmcp 4.1.4 serves subscriptions/listen for list-changed and resource events only: our seam asks it for
    task ids and finds none agreed (or an error): unsupported, the waits on it keep their schedule."""
    client = await WireSession.connect(fastmcp_server.endpoint, era=EXTENSION)
    try:
        heard = Heard()
        listener = n.TasksSubscription(client, lambda: ["t-1"], heard, name="fastmcp")
        await asyncio.wait_for(listener.run(), 20)
        assert listener.state == n.Reach.UNSUPPORTED and not listener.live("t-1"), (listener.state, listener.why)
        print(f"[measured] fastmcp 4.1.4 subscriptions/listen for task ids: {listener.why}", flush=True)
        assert not heard.messages
    finally:
        await client.aclose()


async def test_subscriptions_listen_delivers_task_events_where_a_server_agrees() -> None:
    """The ext-tasks draft's shapes from a scripted server: the acknowledgement agrees to one of the two ids asked,
    then a ``notifications/tasks`` for it arrives; the set of ids changing opens a new subscription."""
    async with scripted() as server:

        def listen(body: dict[str, Any]) -> Response:
            asked = body["params"]["notifications"]["taskIds"]
            sub = {"io.modelcontextprotocol/subscriptionId": body["id"]}
            ack = {
                "jsonrpc": "2.0",
                "method": "notifications/subscriptions/acknowledged",
                "params": {"_meta": sub, "notifications": {"taskIds": [i for i in asked if i != "t-no"]}},
            }
            event = {**notice(asked[0], "completed", "notifications/tasks")}
            event["params"]["_meta"] = sub
            return stream(frame(json.dumps(ack)), frame(json.dumps(event)), then_hold=True)()

        server.posts = [listen]
        ids = ["t-1", "t-no"]
        ref = SessionRef(endpoint=Endpoint(url=server.url), era=EXTENSION, protocol_version=EXTENSION)
        client = await WireSession.attach(ref)
        heard = Heard()
        listener = n.TasksSubscription(client, lambda: list(ids), heard, name="scripted")
        task = asyncio.create_task(listener.run())
        try:
            await until(lambda: heard.messages, 5, "the task event")
            assert heard.messages[0]["params"]["taskId"] == "t-1"
            assert listener.live("t-1") and not listener.live("t-no")
            meta = server.bodies[0]["params"]["_meta"]
            assert "io.modelcontextprotocol/clientCapabilities" in meta, "the extension is declared on listen too"
            ids.insert(0, "t-2")
            listener.ids_changed()
            await until(lambda: len(server.bodies) == 2, 5, "a subscription for the new ids")
            assert sorted(server.bodies[1]["params"]["notifications"]["taskIds"]) == ["t-1", "t-2", "t-no"]
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await client.aclose()
