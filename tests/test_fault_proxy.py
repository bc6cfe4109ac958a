"""The fault-injecting proxy itself (tests/faults/proxy.py), over the wire layer, against the real peers.

Each fault must produce the client-side error a real network failure of that shape produces, and the
proxy's counters must say what reached the upstream.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
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
from tests.faults import (
    FaultProxy,
    Malformed,
    RateLimit,
    Refuse,
    ResetAfterSend,
    Rewrite,
    Stall,
    Status,
    Truncated,
)
from tests.peers.harness import Peer

PEERS = ["fastmcp_server", "ts_http_stateful", "fastmcp_json"]


@pytest.fixture(params=PEERS)
def peer(request: pytest.FixtureRequest) -> Peer:
    return request.getfixturevalue(request.param)


@pytest.fixture
def proxy(peer: Peer) -> Iterator[FaultProxy]:
    with FaultProxy(peer.url or "") as p:
        yield p


def unhold(proxy: FaultProxy) -> None:
    """Forget the hold a 429 from the proxy set (``activities/wire/backpressure.py``, tested in
    ``tests/test_backpressure.py``): here the next request is about the proxy itself."""
    HOLDS.clear(key_of(Endpoint(url=proxy.url)))


async def connect(proxy: FaultProxy) -> WireSession:
    return await WireSession.connect(Endpoint(url=proxy.url))


async def run_task(client: WireSession, text: str = "hi") -> Any:
    start = await client.start("slow_echo", {"seconds": 0.2, "text": text})
    assert start.task is not None
    for _ in range(100):
        state = await client.get(start.task.task_id)
        if state.terminal:
            return await client.result(state)
        await asyncio.sleep(0.1)
    raise AssertionError("task never ended")


async def test_passthrough_and_counters(peer: Peer, proxy: FaultProxy) -> None:
    assert proxy.url.startswith("http://127.0.0.1:") and proxy.url.endswith("/mcp")
    mark = peer.log_mark()
    client = await connect(proxy)
    try:
        assert client.era == ("2025-11-25" if peer.flavour == "legacy" else "2026-07-28")
        if peer.flavour == "legacy":  # Mcp-Session-Id came back through the proxy and goes out again
            assert client.transport.session_id
        payload = await run_task(client, "through")
        assert payload.result is not None and payload.result["content"][0]["text"] == "through"
    finally:
        await client.aclose(terminate=True)
    methods = [line["method"] for line in peer.log_since(mark)]
    for method in ("tools/list", "tools/call", "tasks/get"):
        assert proxy.seen(method) == proxy.forwarded(method) == methods.count(method), method
    # The server/discover probe first, every server (the TS HTTP transport refuses it before its MCP layer logs
    # anything); initialize only where the probe was refused (the TS peer, 2025-11-25).
    assert proxy.seen("server/discover") == proxy.forwarded("server/discover") == 1
    assert proxy.seen("tools/call") == 1
    assert proxy.seen("initialize") == proxy.forwarded("initialize") == (peer.flavour == "legacy")
    if peer.flavour == "legacy":
        assert proxy.forwarded("tasks/result") == methods.count("tasks/result") == 1
    assert proxy.seen("*") == proxy.forwarded("*") >= 5
    assert proxy.log == []


async def _fails(coro: Any) -> BaseException:
    try:
        await coro
    except Exception as exc:  # noqa: BLE001
        return exc
    raise AssertionError("expected a failure")


async def test_refuse(peer: Peer, proxy: FaultProxy) -> None:
    client = await connect(proxy)
    try:
        # connect may have listed tools already (a 2025-11-25 answer without tasks: issue 37's era choice)
        seen, forwarded = proxy.seen("tools/list"), proxy.forwarded("tools/list")
        rule = proxy.add("tools/list", Refuse(seconds=1.0))
        first = await _fails(client.list_tools(refresh=True))
        # Dropped after the request went out on a kept-alive connection, before any reply (what a server closing an
        # idle connection looks like): sent once more on a new connection, which is refused while the proxy is down.
        assert isinstance(first, TransportError) and first.sent is False, first
        await asyncio.sleep(1.2)
        assert "slow_echo" in await client.list_tools(refresh=True)
        # the dropped one and the last (refused: unseen)
        assert rule.fired == 1 and proxy.seen("tools/list") - seen == 2
        assert proxy.forwarded("tools/list") - forwarded == 1
        # tools/call is never sent twice: it goes on a new connection, and a drop after it left is "may have arrived".
        proxy.add("tools/call", Refuse(seconds=1.0))
        call = await _fails(client.start("slow_echo", {"seconds": 0.1, "text": "dropped"}))
        assert isinstance(call, TransportError) and call.sent is True, call
        assert proxy.seen("tools/call") == 1
    finally:
        await client.aclose()


@pytest.mark.parametrize(
    "fault, check",
    [
        (ResetAfterSend(), lambda e: isinstance(e, TransportError) and e.sent and not isinstance(e, RateLimited)),
        (Malformed(), lambda e: isinstance(e, ProtocolViolation)),
        (Truncated(), lambda e: isinstance(e, TransportError) and e.sent),
        (Status(500), lambda e: isinstance(e, TransportError) and e.status == 500 and e.sent),
        (Status(503, "busy"), lambda e: isinstance(e, TransportError) and e.status == 503),
        (
            RateLimit(retry_after_s=3),
            lambda e: isinstance(e, RateLimited) and e.retry_after_s == 3 and not e.may_have_reached_server,
        ),
    ],
    ids=["reset", "malformed", "truncated", "500", "503", "429"],
)
async def test_fault_gives_the_expected_error(peer: Peer, proxy: FaultProxy, fault: Any, check: Any) -> None:
    client = await connect(proxy)
    try:
        listed = proxy.seen("tools/list")
        # A reset before any reply on a kept-alive connection is sent once more on a new one (it may be a server
        # closing an idle connection): only a second reset is the caller's error.
        times = 2 if isinstance(fault, ResetAfterSend) else 1
        rule = proxy.add("tools/list", fault, times=times)
        exc = await _fails(client.list_tools(refresh=True))
        assert check(exc), repr(exc)
        assert rule.fired == times and proxy.log[-1][:2] == ("tools/list", type(fault).__name__)
        assert proxy.seen("tools/list") == listed + times
        assert proxy.forwarded("tools/list") == listed + (0 if isinstance(fault, RateLimit) else times)
        unhold(proxy)
        # once only: the next request goes through untouched, on the same session
        assert "slow_echo" in await client.list_tools(refresh=True)
    finally:
        await client.aclose()


async def test_stall_delays_the_reply(peer: Peer, proxy: FaultProxy) -> None:
    client = await connect(proxy)
    try:
        proxy.add("tools/list", Stall(1.0))
        t0 = time.monotonic()
        assert "slow_echo" in await client.list_tools(refresh=True)
        assert time.monotonic() - t0 >= 1.0
    finally:
        await client.aclose()


async def test_stall_after_the_client_left(peer: Peer, proxy: FaultProxy) -> None:
    client = await connect(proxy)
    try:
        proxy.add("tools/list", Stall(1.0))
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(client.list_tools(refresh=True), 0.3)
    finally:
        await client.aclose()
    await asyncio.sleep(1.2)  # the held reply is dropped; the proxy keeps serving
    client = await connect(proxy)
    try:
        assert "slow_echo" in await client.list_tools(refresh=True)
    finally:
        await client.aclose()


async def test_rewrite_dict_and_raw_text(peer: Peer, proxy: FaultProxy) -> None:
    client = await connect(proxy)
    try:

        def add_tool(message: dict[str, Any]) -> dict[str, Any]:
            message["result"]["tools"].append({"name": "injected", "inputSchema": {"type": "object"}})
            return message

        proxy.add("tools/list", Rewrite(add_tool))
        assert "injected" in await client.list_tools(refresh=True)
        seen_ids: list[Any] = []

        def raw(message: dict[str, Any]) -> str:
            seen_ids.append(message["id"])
            return '{"jsonrpc": "2.0", "id": "' + str(message["id"]) + '", "result": {"tools": []}}'

        proxy.add("tools/list", Rewrite(raw))
        assert await client.list_tools(refresh=True) == {}
        assert len(seen_ids) == 1
        assert "slow_echo" in await client.list_tools(refresh=True)
    finally:
        await client.aclose()


async def test_rewrite_the_result_of_a_task(peer: Peer, proxy: FaultProxy) -> None:
    """The reply that carries the payload: tasks/result (legacy) or the terminal tasks/get (extension)."""

    def swap(message: dict[str, Any]) -> dict[str, Any]:
        res = message.get("result") or {}
        target = res.get("result") if peer.flavour == "extension" else res
        if isinstance(target, dict) and "content" in target:
            target["content"] = [{"type": "text", "text": "rewritten"}]
        return message

    client = await connect(proxy)
    try:
        proxy.add("tasks/result" if peer.flavour == "legacy" else "tasks/get", Rewrite(swap), times=1000)
        payload = await run_task(client)
        assert payload.result is not None and payload.result["content"][0]["text"] == "rewritten"
    finally:
        await client.aclose()


async def test_nth_and_times(peer: Peer, proxy: FaultProxy) -> None:
    client = await connect(proxy)
    try:
        rule = proxy.add("tools/list", RateLimit(1), nth=2, times=2)
        await client.list_tools(refresh=True)
        for _ in range(2):
            assert isinstance(await _fails(client.list_tools(refresh=True)), RateLimited)
            unhold(proxy)
        await client.list_tools(refresh=True)
        assert (rule.matched, rule.fired) == (4, 2)
        proxy.add("*", RateLimit(1))
        assert isinstance(await _fails(client.list_tools(refresh=True)), RateLimited)
        unhold(proxy)
        proxy.add("tools/list", RateLimit(1))
        proxy.clear()
        await client.list_tools(refresh=True)
    finally:
        await client.aclose()


async def test_down_refuses_then_listens_again(peer: Peer, proxy: FaultProxy) -> None:
    client = await connect(proxy)
    try:
        port = proxy.port
        proxy.down(1.0)
        exc = await _fails(client.list_tools(refresh=True))
        assert isinstance(exc, TransportError) and exc.sent is False, repr(exc)
        await asyncio.sleep(1.3)
        assert proxy.port == port and "slow_echo" in await client.list_tools(refresh=True)
    finally:
        await client.aclose()


async def test_sse_stream_relays_server_requests_before_the_reply(ts_http_stateful: Peer) -> None:
    """Legacy ask_user: elicitation/create arrives on the tasks/result stream and must be answered while
    the (stalled) reply is still pending."""
    with FaultProxy(ts_http_stateful.url or "") as proxy:
        client = await connect(proxy)
        try:
            start = await client.start("ask_user", {})
            assert start.task is not None
            for _ in range(100):
                state = await client.get(start.task.task_id)
                if state.status == "input_required":
                    break
                await asyncio.sleep(0.05)
            asked: list[str] = []

            async def answer(method: str, params: dict[str, Any], rpc_id: Any) -> dict[str, Any]:
                asked.append(method)
                return {"action": "accept", "content": {"account": "acct-7", "approve": True}}

            proxy.add("tasks/result", Stall(0.5))
            payload = await asyncio.wait_for(client.result(state, on_server_request=answer, timeout_s=30), 30)
            assert asked == ["elicitation/create"]
            assert payload.result is not None and payload.result["content"][0]["text"] == "approved account=acct-7"
        finally:
            await client.aclose(terminate=True)
        assert proxy.forwarded("tasks/result") == 1


def test_sync_use_and_stop() -> None:
    """Usable without an event loop; stops by itself (lifetime) and on exit."""
    proxy = FaultProxy("http://127.0.0.1:9/mcp", lifetime_s=0.5)
    with proxy:
        assert proxy.url.endswith("/mcp") and proxy.seen("*") == 0
        time.sleep(0.8)
        import socket

        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", proxy.port), timeout=1).close()
    assert proxy._thread is not None and not proxy._thread.is_alive()
