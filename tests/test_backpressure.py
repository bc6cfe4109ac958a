"""The one back-pressure rule (``activities/wire/backpressure.py``): what a reply's ``Retry-After`` holds, bounded both
ways, and how every reader of ours obeys it: the wait's backoff, the worker's poller, and a transport that sends
nothing while held. Pure functions and a scripted read here; the rule end to end, through the fault proxy and a real
worker, is in ``tests/test_wait_ends.py``."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest

from mcp_temporal_tasks.activities.activity_io import AwaitInput
from mcp_temporal_tasks.activities.push.poller import RETRY_S, TaskPoller
from mcp_temporal_tasks.activities.schedule import after_read_fault
from mcp_temporal_tasks.activities.wire import Endpoint, WireSession
from mcp_temporal_tasks.activities.wire.backpressure import (
    DEFAULT_429_HOLD_S,
    HOLDS,
    MAX_HOLD_S,
    HeldBack,
    Holds,
    hold_of,
    key_of,
)
from mcp_temporal_tasks.activities.wire.status import http_error
from mcp_temporal_tasks.protocol.tasks import SessionRef, TaskState
from mcp_temporal_tasks.protocol.wire_errors import JsonRpcError, RateLimited, TransportError
from tests.faults import FaultProxy, RateLimit
from tests.peers.harness import Peer


def _http(status: int, retry_after: str | None) -> TransportError:
    headers = {"retry-after": retry_after} if retry_after is not None else {}
    err = http_error("tasks/get", status, "application/json", headers.get, "", url="http://s/mcp", session_id=None)
    assert isinstance(err, TransportError)
    return err


@pytest.mark.fast
@pytest.mark.parametrize(
    "status, header, hold",
    [
        (429, "45", 45.0),
        (429, "2.5", 2.5),
        (429, str(10**9), MAX_HOLD_S),  # hostile: clamped
        (429, "-1", None),  # negative: read as 0, nothing held
        (429, "soon, please", DEFAULT_429_HOLD_S),  # garbage: as if absent
        (429, "1e400", DEFAULT_429_HOLD_S),
        (429, None, DEFAULT_429_HOLD_S),
        (503, "30", 30.0),
        (503, str(10**9), MAX_HOLD_S),
        (503, None, None),  # a plain 5xx asks for nothing
        (500, "30", None),  # only 429 and 503 carry a hold
    ],
)
def test_what_a_reply_holds_is_bounded_both_ways(status: int, header: str | None, hold: float | None) -> None:
    got = hold_of(_http(status, header))
    assert (got or None) == hold, got


@pytest.mark.fast
def test_an_http_date_holds_until_that_date_and_a_past_one_holds_nothing() -> None:
    soon = format_datetime(datetime.now(UTC) + timedelta(seconds=45), usegmt=True)
    got = hold_of(_http(429, soon))
    assert got is not None and 43.0 <= got <= 45.0, got  # an HTTP date has whole seconds
    past = format_datetime(datetime.now(UTC) - timedelta(days=1), usegmt=True)
    assert not hold_of(_http(429, past))
    far = format_datetime(datetime(9999, 12, 31, tzinfo=UTC), usegmt=True)
    assert hold_of(_http(503, far)) == MAX_HOLD_S


@pytest.mark.fast
@pytest.mark.parametrize(
    "data, hold",
    [
        ({"retryAfter": 12}, 12.0),
        ({"retry_after": 1.5}, 1.5),
        ({"retryAfter": 10**12}, MAX_HOLD_S),
        ({"retryAfter": -5}, 0.0),
        ({"retryAfter": float("nan")}, None),
        ({"retryAfter": "12"}, None),  # not a number: nothing to go on
        ({"retryAfter": True}, None),
        ("retryAfter 12", None),
        (None, None),
    ],
)
def test_a_json_rpc_error_that_carries_a_delay_holds_it(data: object, hold: float | None) -> None:
    assert hold_of(JsonRpcError("tasks/get: busy", code=-32000, data=data)) == hold


@pytest.mark.fast
def test_holds_are_kept_per_key_refuse_unsent_and_pass() -> None:
    now = [100.0]
    holds = Holds(clock=lambda: now[0])
    holds.saw("a", RateLimited("tasks/get: HTTP 429", retry_after_s=45.0))
    holds.hold("a", 5.0)  # a shorter hold never shortens a longer one
    assert holds.left("a") == 45.0 and holds.left("b") == 0.0
    with pytest.raises(HeldBack) as refused:
        holds.check("a", "tasks/list", "http://s/mcp")
    err = refused.value
    assert isinstance(err, RateLimited) and err.kind == "RateLimited"
    assert not err.sent and not err.may_have_reached_server  # a tools/call held here may be sent later
    assert err.retry_after_s is not None and 45.0 <= err.retry_after_s <= 45.1
    holds.check("b", "tasks/get", "http://s/mcp")  # another server, or another credential: not held
    now[0] += 45.0
    holds.check("a", "tasks/get", "http://s/mcp")  # passed
    holds.hold("c", float("inf"))
    assert holds.left("c") == MAX_HOLD_S


@pytest.mark.fast
def test_the_key_is_the_server_and_its_credential() -> None:
    a = Endpoint(url="http://s/mcp", header_refs={"Authorization": "env:TOKEN_A"})
    b = Endpoint(url="http://s/mcp", header_refs={"Authorization": "env:TOKEN_B"})
    assert key_of(a) == key_of(a.model_copy()) != key_of(b)
    assert "TOKEN" not in key_of(a)


@pytest.mark.fast
def test_the_wait_backs_off_at_least_as_long_as_the_hold() -> None:
    import time

    inp = AwaitInput(
        session=SessionRef(endpoint=Endpoint(url="http://s/mcp"), era="2025-11-25", protocol_version="2025-11-25"),
        task_id="t",
        unreachable_s=600.0,
    )
    since = time.time()
    _, wait = after_read_fault(_http(503, "45"), inp, since, 1, 1)
    assert wait >= 45.0
    _, wait = after_read_fault(HeldBack("tasks/get", "http://s/mcp", 20.0), inp, since, 1, 1)
    assert wait >= 20.0
    _, wait = after_read_fault(_http(429, "1000000"), inp, since, 1, 1)
    assert wait <= 600.0  # never past the read budget


@pytest.mark.fast
async def test_the_poller_reads_again_only_once_the_hold_passed_and_a_held_read_is_no_failure() -> None:
    reads: list[str] = []
    planned: dict[str, float] = {}

    async def read(task_id: str) -> TaskState:
        reads.append(task_id)
        if task_id == "limited":
            raise RateLimited("tasks/get: HTTP 429", retry_after_s=45.0)
        raise HeldBack("tasks/get", "http://s/mcp", 40.0)

    poller = TaskPoller(read, lambda t: 0.0, lambda t, s: None, name="test")
    real = poller.schedule

    def schedule(task_id: str, in_s: float) -> None:
        planned[task_id] = in_s
        real(task_id, in_s)

    poller.schedule = schedule  # type: ignore[method-assign]
    poller.schedule("limited", 0.0)
    poller.schedule("held", 0.0)
    run = asyncio.create_task(poller.run())
    try:
        for _ in range(200):
            if len(reads) == 2 and len(planned) == 2 and planned["limited"] > 0:
                break
            await asyncio.sleep(0.01)
    finally:
        run.cancel()
    assert planned["limited"] == 45.0 > RETRY_S  # the 429's Retry-After, not the poller's own retry
    assert planned["held"] == 40.0
    assert poller.fails == 1 and poller.counts["held"] == 1  # the held read was never sent: no failure


@pytest.mark.fast
async def test_dropping_a_task_cancels_its_read_in_flight() -> None:
    started, cancelled = asyncio.Event(), asyncio.Event()

    async def read(task_id: str) -> TaskState:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return TaskState(task_id=task_id, status="working", era="2025-11-25")

    poller = TaskPoller(read, lambda t: 0.0, lambda t, s: 1.0, name="test")
    poller.schedule("t", 0.0)
    run = asyncio.create_task(poller.run())
    await asyncio.wait_for(started.wait(), 5)
    poller.drop("t")
    await asyncio.wait_for(cancelled.wait(), 5)
    await asyncio.wait_for(run, 5)  # nothing planned, nothing in flight: it ends
    assert poller.counts["reads"] == 0


@pytest.fixture
def ts_peer(ts_http_stateful: Peer) -> Peer:
    return ts_http_stateful


@pytest.mark.parametrize(
    "header, held",
    [("3", (2.9, 3.2)), (str(10**9), (MAX_HOLD_S - 5, MAX_HOLD_S)), ("-1", (0, 0)), ("junk", (1.5, 2.1))],
)
async def test_a_429_holds_every_request_of_this_process_to_that_server(
    ts_peer: Peer, header: str, held: tuple[float, float]
) -> None:
    """Through the proxy: the 429's hold reaches every session of the credential; a request meanwhile is not sent."""
    with FaultProxy(ts_peer.url or "") as proxy:
        endpoint = Endpoint(url=proxy.url)
        key = key_of(endpoint)
        first = await WireSession.connect(endpoint)
        second = await WireSession.connect(endpoint)  # another session, same server and credential
        try:
            proxy.add("tools/list", RateLimit(header=header))
            with pytest.raises(RateLimited):
                await first.list_tools(refresh=True)
            left = HOLDS.left(key)
            assert held[0] <= left <= held[1], left
            before = len(proxy.requests)
            if left:
                with pytest.raises(HeldBack):
                    await second.list_tools(refresh=True)
                assert len(proxy.requests) == before  # not sent
            else:
                await second.list_tools(refresh=True)
        finally:
            HOLDS.clear(key)  # no other test shares this proxy's port, but leave nothing behind
            await first.aclose()
            await second.aclose()
