"""The worker's own reads of idle waits' tasks (``activities/push/poller.py``, ``PushHub``): on each wait's schedule, a
change wakes the workflow once, a read never decides, failures stop the coverage, and the wait's own attempts stretch
to the net only while the hub reads for them. No Temporal, no server: the read is a function here (the peers' runs are
in ``tests/test_idle_waits.py`` and ``bench --only push-inflight``)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from mcp_temporal_tasks.activities.push import DEFAULT_NET_STRETCH, PushHub, Registration
from mcp_temporal_tasks.activities.push.hub import _ahead
from mcp_temporal_tasks.activities.push.poller import FAILS_TO_STOP, TaskPoller
from mcp_temporal_tasks.protocol.tasks import Endpoint, TaskState
from mcp_temporal_tasks.protocol.wire_errors import TaskNotFound, TransportError

pytestmark = pytest.mark.fast


def _state(task_id: str, status: str = "working") -> TaskState:
    return TaskState(task_id=task_id, status=status, era="2025-11-25")


class _Signals:
    """Stands in for the Temporal client: records the wake-up signals the hub sends."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, Any]] = []

    def get_workflow_handle(self, workflow_id: str, run_id: str | None = None) -> Any:
        outer = self

        class _Handle:
            async def signal(self, name: str, arg: Any) -> None:
                outer.sent.append((workflow_id, arg))

        return _Handle()


async def test_a_poller_reads_each_task_on_its_own_schedule_and_stops_when_told() -> None:
    reads: dict[str, list[float]] = {"a": [], "b": []}
    t0 = time.monotonic()

    async def read(task_id: str) -> TaskState:
        reads[task_id].append(time.monotonic() - t0)
        return _state(task_id)

    gaps = {"a": 0.1, "b": 0.25}

    def after(task_id: str, state: TaskState) -> float | None:
        return gaps[task_id] if len(reads[task_id]) < 4 else None  # four reads each, then stop

    poller = TaskPoller(read, lambda t: 0.0, after, name="test")
    poller.schedule("a", 0.1)
    poller.schedule("b", 0.25)
    await asyncio.wait_for(poller.run(), 5)  # returns once nothing is planned
    assert len(reads["a"]) == 4 and len(reads["b"]) == 4, reads
    for task_id, times in reads.items():
        gaps_seen = [b - a for a, b in zip(times, times[1:], strict=False)]
        assert min(gaps_seen) >= gaps[task_id] * 0.9, (task_id, gaps_seen)  # never sooner than its schedule
    assert poller.counts["reads"] == 8 and poller.healthy()


async def test_a_renewed_or_dropped_task_keeps_only_its_latest_plan() -> None:
    reads: list[str] = []

    async def read(task_id: str) -> TaskState:
        reads.append(task_id)
        return _state(task_id)

    poller = TaskPoller(read, lambda t: 0.0, lambda t, s: None, name="test")
    poller.schedule("a", 0.05)
    poller.schedule("a", 0.2)  # the wait's own attempt read it meanwhile: the read moves, it is not doubled
    poller.schedule("gone", 0.05)
    poller.drop("gone")
    await asyncio.wait_for(poller.run(), 5)
    assert reads == ["a"], reads


async def test_failed_reads_stop_the_coverage_until_one_succeeds_and_a_gone_task_is_left_to_its_wait() -> None:
    outcomes: list[Any] = [TransportError("refused", sent=False)] * FAILS_TO_STOP + [TaskNotFound("gone", code=-32602)]
    poller = TaskPoller(lambda t: _raise(outcomes.pop(0)), lambda t: 0.0, lambda t, s: None, name="test")
    for i in range(FAILS_TO_STOP):
        poller.schedule(f"t{i}", 0.0)
    runner = asyncio.create_task(poller.run())
    await _until(lambda: poller.counts["errors"] == FAILS_TO_STOP)
    assert not poller.healthy()  # the hub stops stretching this session's waits
    for i in range(FAILS_TO_STOP):
        poller.drop(f"t{i}")  # (their retries are 30 s away)
    poller.schedule("g", 0.0)
    await _until(lambda: poller.counts["gone"] == 1)
    assert poller.healthy()  # an answer, even "not found", is a working read
    runner.cancel()


async def test_at_most_the_bound_of_reads_are_in_flight_at_once() -> None:
    now, most = 0, 0
    release = asyncio.Event()

    async def read(task_id: str) -> TaskState:
        nonlocal now, most
        now += 1
        most = max(most, now)
        await release.wait()
        now -= 1
        return _state(task_id)

    poller = TaskPoller(read, lambda t: 0.0, lambda t, s: None, name="test", max_in_flight=3)
    for i in range(20):
        poller.schedule(f"t{i}", 0.0)
    runner = asyncio.create_task(poller.run())
    await asyncio.sleep(0.2)
    assert most == 3, most
    release.set()
    await asyncio.wait_for(runner, 5)
    assert poller.counts["reads"] == 20


async def test_the_hub_wakes_a_changed_idle_wait_once_and_stretches_its_attempts_only_while_it_reads() -> None:
    hub = PushHub()
    status = {"t-1": "working"}
    read_times: list[float] = []

    async def read(ref: Any, principal: str | None, task_id: str) -> TaskState:
        read_times.append(time.monotonic())
        return _state(task_id, status[task_id])

    hub.reads_with(read)
    signals = _Signals()
    ref = _http_ref()
    key = hub.key(ref, None)
    hub.watch(
        Registration(ref, None, "t-1", "wf-1", None, 0, signals, gap_for=lambda s: 0.1), 60, status="working", gap_s=0.1
    )  # type: ignore[arg-type]
    try:
        # The hub reads for it: the wait's own attempts are the net, DEFAULT_NET_STRETCH × its gap; a heartbeating
        # wait (not idle) keeps push_stretch's rule (no notification here: 1).
        assert hub.stretch(ref, None, "t-1", key=key, idle=True) == DEFAULT_NET_STRETCH
        assert hub.stretch(ref, None, "t-1", key=key) == 1.0
        await _until(lambda: len(read_times) >= 2)
        assert hub.fresh(key, "t-1") is not None  # a read within the gap stands for the attempt's own
        status["t-1"] = "completed"
        await _until(lambda: signals.sent)
        n = len(read_times)
        await asyncio.sleep(0.5)  # five gaps: an end is final, the woken workflow reads it itself
        assert len(read_times) == n, "read again after a read here found the task ended and woke its workflow"
        assert len(signals.sent) == 1, signals.sent
        workflow_id, notified = signals.sent[0]
        assert workflow_id == "wf-1" and notified.status == "completed" and notified.via == "poll"
        assert hub.fresh(key, "t-1") is None  # an ended task's read never stands in for the wait's own
        hub.forget(ref, None, "t-1")  # the workflow's read saw the end
        await asyncio.sleep(0.3)
        n = len(read_times)
        await asyncio.sleep(0.3)
        assert len(read_times) == n, "read after its wait ended"
    finally:
        await hub.aclose()


async def test_an_attempt_that_took_the_hubs_read_keeps_its_schedule_and_a_woken_read_keeps_the_poll_interval() -> None:
    hub = PushHub()
    reads: list[float] = []

    async def read(ref: Any, principal: str | None, task_id: str) -> TaskState:
        reads.append(time.monotonic())
        return TaskState(task_id=task_id, status="working", era="2025-11-25", poll_interval_ms=800)

    hub.reads_with(read)
    ref = _http_ref()
    key = hub.key(ref, None)

    def watch(read_now: bool) -> None:
        hub.watch(
            Registration(ref, None, "t-1", "wf", None, 0, _Signals(), gap_for=lambda s: 1.0),
            60,
            status="working",
            gap_s=1.0,
            read=read_now,
        )

    try:
        watch(True)
        await _until(lambda: len(reads) == 1, 3)
        assert hub.fresh(key, "t-1") is not None
        # Right after the hub's read the server's pollInterval (0.8 s) is not over: a read now would wait for it.
        assert 0.5 < hub.spacing(key, "t-1") <= 0.8
        await asyncio.sleep(0.5)
        watch(False)  # an attempt took the hub's read: the hub's next read stays 1 s after its last, not postponed
        await _until(lambda: len(reads) == 2, 3)
        assert reads[1] - reads[0] < 1.3, reads
    finally:
        await hub.aclose()


async def test_the_hub_stops_stretching_when_its_reads_fail() -> None:
    hub = PushHub()

    async def read(ref: Any, principal: str | None, task_id: str) -> TaskState:
        raise TransportError("connection refused", sent=False)

    hub.reads_with(read)
    ref = _http_ref()
    key = hub.key(ref, None)
    for i in range(FAILS_TO_STOP):
        hub.watch(
            Registration(ref, None, f"t-{i}", f"wf-{i}", None, 0, _Signals(), gap_for=lambda s: 0.1),
            60,
            status="working",
            gap_s=0.0,
        )  # type: ignore[arg-type]
    try:
        await _until(lambda: hub.stats()["sessions"][key]["reads"]["fails_in_a_row"] >= FAILS_TO_STOP)
        assert hub.stretch(ref, None, "t-0", key=key, idle=True) == 1.0  # today's schedule: nobody reads for it
    finally:
        await hub.aclose()


async def test_under_notifications_the_hub_reads_once_per_net_gap_until_the_server_misses_one() -> None:
    """Where a server's notifications reach us, the hub reads an idle wait's task once per net gap (the wait's own
    attempt takes that read); a read that finds an end no notification announced wakes the wait (``via = poll``),
    takes the server's notifying standing away and brings its waits back to today's pace. (The hub reads a task at
    most once a second: today's gap is 1 s here, the net 3 s.)"""
    hub = PushHub(stretch=1.5, net_stretch=3.0)
    status = {"t-1": "working", "t-2": "working"}
    reads: dict[str, list[float]] = {"t-1": [], "t-2": []}

    async def read(ref: Any, principal: str | None, task_id: str) -> TaskState:
        reads[task_id].append(time.monotonic())
        return _state(task_id, status[task_id])

    class _Live:  # the session's GET stream, connected (no server here)
        def live(self, task_id: str) -> bool:
            return True

    hub.reads_with(read)
    hub._ensure_listener = lambda s: None  # type: ignore[method-assign]  # the stream stands here: nothing to reach
    signals = _Signals()
    ref = _http_ref()
    key = hub.key(ref, None)
    try:
        for task_id in status:
            hub.watch(
                Registration(ref, None, task_id, f"wf-{task_id}", None, 0, signals, gap_for=lambda s: 1.0),
                60,
                status="working",
                gap_s=1.0,
                read=False,
            )
        session = hub._sessions[key]
        session.listener = _Live()  # type: ignore[assignment]
        hub._notifying[session.server] = time.monotonic()  # it delivered one for a wait of ours
        assert hub.stretch(ref, None, "t-1", key=key) == 1.5  # a heartbeating wait: push_stretch
        assert hub.stretch(ref, None, "t-1", key=key, idle=True) == 3.0  # an idle wait's attempts: the net
        await _until(lambda: len(reads["t-1"]) >= 2, 10)
        assert reads["t-1"][1] - reads["t-1"][0] > 2.7, reads  # one read per net gap, not per push_stretch gap
        assert hub.fresh(key, "t-1") is not None  # and the attempt takes it
        status["t-1"] = "completed"  # no notification of it
        await _until(lambda: signals.sent, 5)
        assert signals.sent[0][1].via == "poll" and hub.counts["unannounced"] == 1, hub.counts
        assert hub.stretch(ref, None, "t-2", key=key) == 1.0  # the server lost its standing: today's schedule
        n = len(reads["t-2"])
        await _until(lambda: len(reads["t-2"]) >= n + 3, 8)  # read once more at the net's pace, then today's
        assert reads["t-2"][-1] - reads["t-2"][-2] < 1.5, reads["t-2"]
    finally:
        await hub.aclose()


async def test_under_notifications_the_hubs_read_comes_ahead_of_the_waits_next_attempt() -> None:
    """An attempt that read its task itself is due again one net gap later; the hub's next read of the task is planned
    a little ahead of it (``_ahead``), so the attempt finds that read made instead of racing it and reading twice.
    (Today's gap is 1 s here and the net 3 s: the hub reads at 2 s, the attempt comes at 3 s.)"""
    assert _ahead(10.0, 1.0) == 10.0  # at today's pace the hub reads many times per attempt: nothing to lead
    assert _ahead(30.0, 8.0) == 240.0 - 12.0 and _ahead(100.0, 8.0) == 800.0 - 30.0 and _ahead(1.0, 3.0) == 2.0
    assert _ahead(2.0, 1.2) == 2.0  # never sooner than today's gap (the server's pollInterval)
    hub = PushHub(stretch=1.5, net_stretch=3.0)
    reads: list[float] = []

    async def read(ref: Any, principal: str | None, task_id: str) -> TaskState:
        reads.append(time.monotonic())
        return _state(task_id)

    class _Live:
        def live(self, task_id: str) -> bool:
            return True

    hub.reads_with(read)
    hub._ensure_listener = lambda s: None  # type: ignore[method-assign]
    ref = _http_ref()
    key = hub.key(ref, None)
    hub._notifying[ref.endpoint.identity()] = time.monotonic()  # it delivered one for a wait of ours
    try:
        hub.watch(
            Registration(ref, None, "t-0", "wf-0", None, 0, _Signals()), 60, status="working"
        )  # a heartbeating wait's: the session and its stream
        hub._sessions[key].listener = _Live()  # type: ignore[assignment]
        t0 = time.monotonic()
        hub.watch(
            Registration(ref, None, "t-1", "wf", None, 0, _Signals(), gap_for=lambda s: 1.0),
            60,
            status="working",
            gap_s=1.0,
            read=True,
            state=_state("t-1"),
        )
        assert hub.stretch(ref, None, "t-1", key=key, idle=True) == 3.0  # the attempt's next comes at 3 s
        await _until(lambda: len(reads) == 1, 5)
        assert 1.7 < reads[0] - t0 < 2.6, reads[0] - t0  # the hub's read, ahead of it
        await asyncio.sleep(max(0.0, t0 + 3.0 - time.monotonic()))
        assert hub.fresh(key, "t-1") is not None  # and the attempt takes it
        assert len(reads) == 1
    finally:
        await hub.aclose()


async def test_each_read_of_the_hub_is_counted_by_its_result() -> None:
    """``mcp_tasks_worker_reads{endpoint,result}``: what an operator reads to see the hub's reads and their faults."""
    hub = PushHub()
    added: list[dict[str, str]] = []

    class Counter:
        def add(self, n: int, attrs: dict[str, str]) -> None:
            added.extend([attrs] * n)

    outcomes: list[Any] = [_state("t-0"), TaskNotFound("gone", code=-32602), TransportError("refused", sent=False)]

    async def read(ref: Any, principal: str | None, task_id: str) -> TaskState:
        out = outcomes.pop(0)
        if isinstance(out, Exception):
            raise out
        return out

    hub.reads_with(read)
    hub._meter_counter, hub._reads_counter = Counter(), Counter()  # the worker's runtime meter stands here
    ref = _http_ref()
    for i in range(3):
        hub.watch(
            Registration(ref, None, f"t-{i}", f"wf-{i}", None, 0, _Signals(), gap_for=lambda s: 30.0),
            60,
            status="working",
            gap_s=0.0,
        )  # type: ignore[arg-type]
    try:
        await _until(lambda: len(added) == 3)
        assert sorted(a["result"] for a in added) == ["failed", "gone", "read"], added
        assert {a["endpoint"] for a in added} == {ref.endpoint.identity()}
    finally:
        await hub.aclose()


async def test_no_reads_where_they_are_turned_off_or_the_session_is_stdio() -> None:
    from mcp_temporal_tasks.activities.wire import SessionRef

    off = PushHub(task_reads=False)
    stdio = PushHub()
    for hub in (off, stdio):
        hub.reads_with(_never)
    ref = _http_ref()
    child = SessionRef(
        endpoint=Endpoint(command=["server"]), era="2025-11-25", protocol_version="2025-11-25", owner="me"
    )
    try:
        for hub, r in ((off, ref), (stdio, child)):
            hub.watch(
                Registration(r, None, "t-1", "wf", None, 0, _Signals(), gap_for=lambda s: 1.0),
                60,
                status="working",
                gap_s=0.0,
                state=_state("t-1"),
            )
            assert hub.stretch(r, None, "t-1", idle=True) == 1.0
            # The wait's own read, with nobody reading between its attempts, never stands in for the next one.
            assert hub.fresh(hub.key(r, None), "t-1") is None
        await asyncio.sleep(0.1)  # (a read would have raised in the hub's task: none is planned)
        assert all(not s["reads"] for s in [*off.stats()["sessions"].values(), *stdio.stats()["sessions"].values()])
    finally:
        await off.aclose()
        await stdio.aclose()
    assert PushHub(stretch=4.0, net_stretch=2.0).net == 4.0  # the net is never tighter than push_stretch


async def _never(*a: Any) -> TaskState:
    raise AssertionError("read")


def _http_ref() -> Any:
    from mcp_temporal_tasks.activities.wire import SessionRef

    return SessionRef(
        endpoint=Endpoint(url="http://127.0.0.1:9/mcp"),
        era="2025-11-25",
        protocol_version="2025-11-25",
        session_id="s-1",
    )


async def _raise(exc: BaseException) -> TaskState:
    raise exc


async def _until(cond: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)
