"""The age-aware poll schedule on real peers, through a worker that is SIGKILLed while it waits.

The schedule is compressed so that its shape shows in seconds: the server's pollInterval (100 ms) for the first
2 s of a task's age, then half the age between polls, at most 6 s. The same code runs with the defaults (60 s,
5 %, 600 s); only the numbers differ. What must hold on both eras: the task completes with one ``tools/call``,
the server's pollInterval is never undercut, the polls after the first 2 s are a handful instead of hundreds,
the worker that takes over keeps the stretched schedule (its age comes from the task, not from the attempt), and
the history stays the size of a short task's.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import PendingActivityState
from temporalio.client import WorkflowHandle

from mcp_temporal_tasks.workflows.client import outcome_of, start_mcp_task
from mcp_temporal_tasks.workflows.records import McpTaskRequest, Outcome, Phase, Timeouts
from tests.peers.harness import Peer, fastmcp_peer, ts_http_peer
from tests.temporal_harness import (
    address_of,
    eventually,
    keep_history,
    tool_calls,
    unique,
    wait_for_view,
    worker_process,
    write_config,
)

POLL_MS = 100
AFTER_S, FRACTION, MAX_S = 2.0, 0.5, 6.0
TASK_S = 24.0
KILL_AT_AGE_S = 9.0
TIMEOUTS = Timeouts(heartbeat_s=2.0, poll_floor_s=0.05, owner_pickup_s=4, submit_s=60)


#: The polling schedule under test: the silent TypeScript peer's tasks/list is not read (tests/test_list_reader.py),
#: nor an idle wait's task by the worker's hub (tests/test_idle_waits.py): every read is the wait's own.
NO_LIST = {"push_list_reads": False, "push_task_reads": False}


@pytest.fixture(params=["ts-http", "fastmcp"])
def slow_poll_peer(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    if request.param == "ts-http":
        # A server that never notifies: the schedule under test is the polling one (notifications would end these
        # waits early, and stretch their gaps: tests/test_push.py).
        with ts_http_peer(tmp_path, poll_ms=POLL_MS, notify=False) as peer:
            yield peer
    else:
        with fastmcp_peer(tmp_path, poll_interval_ms=POLL_MS, name="fastmcp-100ms") as peer:
            yield peer


async def test_a_long_wait_survives_kill_minus_9_on_the_stretched_schedule(
    slow_poll_peer: Peer, temporal_env: Any, tmp_path: Path
) -> None:
    peer = slow_poll_peer
    address, queue = address_of(temporal_env), unique("wait")
    mark = peer.log_mark()
    cfg = write_config(
        tmp_path / "w.toml",
        {"srv": {"url": peer.url, "polling": {"after_s": AFTER_S, "age_fraction": FRACTION, "max_interval_s": MAX_S}}},
        worker=NO_LIST,
    )
    text = unique("waited")
    with worker_process(address, queue, cfg) as first:
        handle = await start_mcp_task(
            temporal_env.client,
            McpTaskRequest(
                server="srv", tool="slow_echo", arguments={"seconds": TASK_S, "text": text}, timeouts=TIMEOUTS
            ),
            workflow_id=unique("wait"),
            task_queue=queue,
        )
        view = await wait_for_view(handle, lambda v: v.phase == Phase.WORKING and v.task_id)
        started = time.monotonic()
        await asyncio.sleep(max(0.0, KILL_AT_AGE_S - (time.monotonic() - started)))
        first.kill()
    with worker_process(address, queue, cfg):
        out = await asyncio.wait_for(outcome_of(handle), 90)
    assert out.outcome == Outcome.COMPLETED, (out.outcome, out.reason)
    assert out.result is not None and out.result["structuredContent"] == {"echo": text}
    assert len(tool_calls(peer, mark, "slow_echo")) == 1, "the tool was called again"

    gets = sorted(
        x["ts"] / 1000 for x in peer.log_since(mark) if x["method"] == "tasks/get" and x.get("taskId") == view.task_id
    )
    created = gets[0]
    gaps = [b - a for a, b in zip(gets, gets[1:], strict=False)]
    # Never sooner than the server asked (a little slack for the two clocks' ms rounding).
    assert min(gaps) >= POLL_MS / 1000 - 0.02, f"a poll {min(gaps):.3f}s after the previous one"
    late = [t for t in gets if t - created > AFTER_S + 0.5]
    at_interval = (TASK_S - AFTER_S) / (POLL_MS / 1000)
    # Ages 2→24 s at half the age per gap is ~6 polls, plus the new worker's first poll and the kill's gap.
    assert len(late) <= 12, f"{len(late)} polls after {AFTER_S:g}s of age (polling at pollInterval: {at_interval:.0f})"
    # The worker that took over did not start the schedule afresh (that would be ~20 polls at 100 ms).
    resumed = [t for t in gets if t - created > KILL_AT_AGE_S + 1]
    assert resumed, "no poll after the kill"
    burst = [t for t in resumed if t - resumed[0] < AFTER_S]
    assert len(burst) <= 2, f"{len(burst)} polls in the new worker's first {AFTER_S:g}s: the schedule restarted"

    events = [e async for e in handle.fetch_history_events()]
    # O(1) whatever the polls: a short task has 21, a few more for the hand-over and when the kill strands workflow
    # tasks on the dead worker's sticky queue; the activities are the submit, the first wait (heartbeating, while
    # the gaps are shorter than 0.8 × the heartbeat timeout) and the idle polls (one attempt each, no events).
    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    assert scheduled == ["mcp-tasks.start_call.v1", "mcp-tasks.await_task.v1", "mcp-tasks.poll_task.v1"], scheduled
    assert len(events) <= 34, f"{len(events)} history events"
    print(
        f"[measured] {peer.name}: {len(gets)} tasks/get in {gets[-1] - created:.1f}s, {len(late)} after "
        f"{AFTER_S:g}s of age (at pollInterval: {at_interval:.0f}); {len(events)} history events",
        flush=True,
    )


async def test_an_old_task_is_waited_on_under_the_long_heartbeat_and_survives_kill_minus_9(
    slow_poll_peer: Peer, temporal_env: Any, tmp_path: Path
) -> None:
    """Past ``long_wait_after_s`` the wait is handed to one more activity whose heartbeat timeout is
    ``long_wait_heartbeat_s``: fewer heartbeats for the rest of a long task, one activity more in its history,
    and a worker killed during it is replaced after that longer timeout."""
    peer = slow_poll_peer
    address, queue = address_of(temporal_env), unique("long")
    mark = peer.log_mark()
    cfg = write_config(tmp_path / "w.toml", {"srv": {"url": peer.url, "polling": {"age_fraction": 0}}}, worker=NO_LIST)
    timeouts = Timeouts(
        heartbeat_s=2.0,
        long_wait_after_s=4.0,
        long_wait_heartbeat_s=5.0,
        poll_floor_s=0.05,
        owner_pickup_s=4,
        submit_s=60,
    )
    with worker_process(address, queue, cfg) as first:
        handle = await start_mcp_task(
            temporal_env.client,
            McpTaskRequest(server="srv", tool="slow_echo", arguments={"seconds": 16, "text": "old"}, timeouts=timeouts),
            workflow_id=unique("long"),
            task_queue=queue,
        )
        await wait_for_view(handle, lambda v: v.phase == Phase.WORKING and v.task_id)
        await eventually(lambda: on_the_long_heartbeat(handle), 30, "the wait handed to the long-heartbeat activity")
        first.kill()
        killed = time.monotonic()
    with worker_process(address, queue, cfg):
        out = await asyncio.wait_for(outcome_of(handle), 90)
    assert out.outcome == Outcome.COMPLETED, (out.outcome, out.reason)
    assert len(tool_calls(peer, mark, "slow_echo")) == 1
    events = [e async for e in handle.fetch_history_events()]
    waits = [
        e.activity_task_scheduled_event_attributes
        for e in events
        if e.HasField("activity_task_scheduled_event_attributes")
        and e.activity_task_scheduled_event_attributes.activity_type.name == "mcp-tasks.await_task.v1"
    ]
    assert [w.heartbeat_timeout.ToTimedelta().total_seconds() for w in waits] == [2.0, 5.0]
    assert any(e.HasField("marker_recorded_event_attributes") for e in events), "the hand-over is patch-guarded"
    # 21 + 8 for the one hand-over, a few more when the kill strands workflow tasks on the dead worker's sticky queue.
    assert len(events) <= 38, f"{len(events)} history events"
    await keep_history(handle, f"long_wait_{peer.flavour}")
    print(
        f"[measured] {peer.name}: long wait, {len(events)} history events, outcome "
        f"{time.monotonic() - killed:.1f}s after the kill",
        flush=True,
    )


async def on_the_long_heartbeat(handle: WorkflowHandle[Any, Any]) -> bool:
    """The wait has been handed on: an ``await_task`` scheduled with the long heartbeat timeout is running."""
    long_waits = {
        e.activity_task_scheduled_event_attributes.activity_id
        async for e in handle.fetch_history_events()
        if e.HasField("activity_task_scheduled_event_attributes")
        and e.activity_task_scheduled_event_attributes.activity_type.name == "mcp-tasks.await_task.v1"
        and e.activity_task_scheduled_event_attributes.heartbeat_timeout.ToTimedelta().total_seconds() == 5.0
    }
    return any(
        a.activity_id in long_waits and a.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
        for a in (await handle.describe()).raw_description.pending_activities
    )


def _two_hours_earlier(message: dict[str, Any]) -> dict[str, Any]:
    """A server whose clock is 2 h behind: every createdAt it sends (the CreateTaskResult's task, tasks/get) is."""
    from datetime import datetime, timedelta

    res = message.get("result")
    for task in (res, res.get("task") if isinstance(res, dict) else None):
        if isinstance(task, dict) and isinstance(task.get("createdAt"), str):
            created = datetime.fromisoformat(task["createdAt"].replace("Z", "+00:00"))
            task["createdAt"] = (created - timedelta(hours=2)).isoformat().replace("+00:00", "Z")
    return message


async def test_a_server_clock_hours_behind_does_not_stretch_a_fresh_tasks_polls(
    ts_http_stateful: Peer, client: Any, queue: str, worker: Any
) -> None:
    """A task cannot be older than the tools/call that created it: its age is our own send time, so a createdAt
    2 h in the past (the default schedule would then poll 6 minutes apart) changes nothing for a 10 s task."""
    from mcp_temporal_tasks.activities.wire import Endpoint
    from tests.faults import FaultProxy, Rewrite

    with FaultProxy(ts_http_stateful.url or "") as proxy:
        skew = proxy.add("*", Rewrite(_two_hours_earlier), times=10_000)
        mark = ts_http_stateful.log_mark()
        t0 = time.monotonic()
        handle = await start_mcp_task(
            client,
            McpTaskRequest(
                server=Endpoint(url=proxy.url),
                tool="slow_echo",
                arguments={"seconds": 10, "text": unique("skew")},
                timeouts=Timeouts(heartbeat_s=5.0),
            ),
            workflow_id=unique("skew"),
            task_queue=queue,
        )
        view = await wait_for_view(handle, lambda v: v.phase == Phase.WORKING and v.task_id, timeout_s=30)
        out = await asyncio.wait_for(outcome_of(handle), 60)
        elapsed = time.monotonic() - t0
    assert skew.fired > 1 and view.task_id
    assert out.outcome == Outcome.COMPLETED, (out.outcome, out.reason)
    assert len(tool_calls(ts_http_stateful, mark, "slow_echo")) == 1
    # 10 s of work, seen within 2 s of its end (plus the start of the workflow and its first tools/call).
    assert elapsed < 10 + 2 + 1.5, f"delivered {elapsed - 10:.1f}s after the task's 10 s of work"
