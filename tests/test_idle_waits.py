"""Waiting with nothing running between polls, on real peers, through workers killed with SIGKILL.

Once the gap to a task's next poll reaches 0.8 × the heartbeat timeout, the wait goes on in ``poll_task``: one short
attempt per poll, retried by Temporal at the gap the attempt names (``next_retry_delay``), so no activity runs, no
worker slot is held and no heartbeat is sent between polls. The schedule is compressed as in tests/test_waiting.py
(pollInterval 100 ms for the first second, then half the task's age between polls, at most 3 s; heartbeat timeout
2 s, so the hand-over comes at a 1.6 s gap). What must hold on both eras and for a job: the task completes with one
``tools/call`` although one worker is killed between two polls and another during a poll; the workers that take
over keep the stretched schedule and never undercut the server's pollInterval; the history stays a short task's;
and a cancel reaches the server without waiting for the next poll.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import PendingActivityState
from temporalio.client import WorkflowHandle

from mcp_temporal_tasks.activities.mcp_activities import POLL_TASK
from mcp_temporal_tasks.workflows.client import outcome_of, start_mcp_task
from mcp_temporal_tasks.workflows.mcp_task import McpTaskWorkflow
from mcp_temporal_tasks.workflows.records import McpTaskRequest, Outcome, Phase, Timeouts
from tests.faults import FaultProxy, Stall
from tests.peers.harness import Peer, fastmcp_peer, py1_http_peer, ts_http_peer, ts_stdio_peer
from tests.temporal_harness import (
    WorkerProcess,
    address_of,
    tool_calls,
    unique,
    until,
    wait_for_view,
    what_happened,
    worker_process,
    write_config,
)

POLL_MS = 100
SCHEDULE = {"after_s": 1.0, "age_fraction": 0.5, "max_interval_s": 3.0}
TIMEOUTS = Timeouts(heartbeat_s=2.0, poll_floor_s=0.05, owner_pickup_s=4, submit_s=60)
TASK_S = 22.0
JOB = {
    "submit": "start_export",
    "job_id": "/jobId",
    "status": "get_export_status",
    "state": "/state",
    "states": {"running": "working", "succeeded": "completed", "failed": "failed", "cancelled": "cancelled"},
    "message": "/message",
    "error": "/error",
    "result": "download_export",
    "cancel": "cancel_export",
    "poll_interval_s": 0.1,
}


class Case:
    """A peer and what a task on it is: the tool called, the request that reads its status, its arguments."""

    def __init__(self, peer: Peer, *, job: bool) -> None:
        self.peer, self.job = peer, job
        self.tool = "export" if job else "slow_echo"
        self.submit = "start_export" if job else "slow_echo"
        self.arguments: dict[str, Any] = {"seconds": TASK_S, "rows": 2} if job else {"seconds": TASK_S, "text": "idle"}

    def server(self, url: str) -> dict[str, Any]:
        table: dict[str, Any] = {"url": url, "polling": SCHEDULE}
        if self.job:
            table["jobs"] = {"export": JOB}
        return table

    def polls(self, mark: int, task_id: str) -> list[float]:
        """Server times of the status reads of this task."""
        lines = self.peer.log_since(mark)
        if self.job:
            return sorted(
                x["ts"] / 1000
                for x in lines
                if x.get("method") == "tools/call" and x.get("tool") == "get_export_status"
            )
        return sorted(x["ts"] / 1000 for x in lines if x.get("method") == "tasks/get" and x.get("taskId") == task_id)


#: The polling waits under test: the silent TypeScript peer's tasks/list is not read (tests/test_list_reader.py), nor
#: are the idle waits' tasks read by the worker's hub (the last test here): each read is an attempt of the wait.
NO_LIST = {"push_list_reads": False, "push_task_reads": False}


@pytest.fixture(params=["ts-http", "fastmcp", "job-fastmcp"])
def case(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Case]:
    if request.param == "ts-http":
        # A server that never notifies: the waits under test are the polling ones (tests/test_push.py: the pushes).
        with ts_http_peer(tmp_path, poll_ms=POLL_MS, notify=False) as peer:
            yield Case(peer, job=False)
    else:
        with fastmcp_peer(tmp_path, poll_interval_ms=POLL_MS, name=f"fastmcp-idle-{request.param}") as peer:
            yield Case(peer, job=request.param.startswith("job"))


async def idle_poll_state(handle: WorkflowHandle[Any, Any]) -> tuple[int, int] | None:
    """(state, attempt) of the pending ``poll_task``, None when the wait is not idle."""
    desc = await handle.describe()
    for act in desc.raw_description.pending_activities:
        if act.activity_type.name == POLL_TASK:
            return act.state, act.attempt
    return None


async def until_between_polls(
    handle: WorkflowHandle[Any, Any], *, min_attempt: int = 1, worker: WorkerProcess | None = None
) -> None:
    """Wait until the task's idle wait sits between two attempts (nothing running)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        seen = await idle_poll_state(handle)
        if (
            seen is not None
            and seen[0] == PendingActivityState.PENDING_ACTIVITY_STATE_SCHEDULED
            and seen[1] > min_attempt
        ):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(
        f"the wait never went idle: {await idle_poll_state(handle)}\n{await what_happened(handle, worker)}"
    )


async def test_an_idle_wait_survives_a_worker_killed_between_polls_and_one_killed_during_a_poll(
    case: Case, temporal_env: Any, tmp_path: Path
) -> None:
    address, queue = address_of(temporal_env), unique("idle")
    mark = case.peer.log_mark()
    status_method = "tools/call" if case.job else "tasks/get"
    with FaultProxy(case.peer.url) as proxy:
        cfg = write_config(tmp_path / "w.toml", {"srv": case.server(proxy.url)}, worker=NO_LIST)
        with worker_process(address, queue, cfg) as first:
            handle = await start_mcp_task(
                temporal_env.client,
                McpTaskRequest(server="srv", tool=case.tool, arguments=case.arguments, timeouts=TIMEOUTS),
                workflow_id=unique("idle"),
                task_queue=queue,
            )
            view = await wait_for_view(handle, lambda v: v.phase == Phase.WORKING and v.task_id)
            await until_between_polls(handle, worker=first)
            first.kill()  # nothing of the task runs on it now: the next attempt simply goes to whoever polls
        with worker_process(address, queue, cfg) as second:
            seen = proxy.seen(status_method)
            await until(lambda: proxy.seen(status_method) > seen, 20, "the second worker's first poll")
            proxy.add(status_method, Stall(8.0))
            seen = proxy.seen(status_method)
            await until(lambda: proxy.seen(status_method) > seen, 20, "a poll to stall")
            second.kill()  # its poll is in flight: the attempt times out on its heartbeat and is retried
            killed = time.monotonic()
        with worker_process(address, queue, cfg):
            out = await asyncio.wait_for(outcome_of(handle), 90)
    assert out.outcome == Outcome.COMPLETED, (out.outcome, out.reason)
    assert len(tool_calls(case.peer, mark, case.submit)) == 1, "the tool was called again"

    polls = case.polls(mark, view.task_id or "")
    created = polls[0]
    gaps = [b - a for a, b in zip(polls, polls[1:], strict=False)]
    assert min(gaps) >= POLL_MS / 1000 - 0.02, f"a poll {min(gaps):.3f}s after the previous one"
    late = [t for t in polls if t - created > 2.5]
    # Ages 2.5 → 22 s at half the age (at most 3 s) per gap is ~9 polls, plus the two take-overs' first polls.
    assert len(late) <= 14, f"{len(late)} polls past 2.5 s of age (at pollInterval: {(TASK_S - 2.5) / 0.1:.0f})"
    resumed = [t for t in polls if t > time.time() - (time.monotonic() - killed)]
    assert resumed and len([t for t in resumed if t - resumed[0] < 1.0]) <= 2, "the schedule restarted after the kill"

    events = [e async for e in handle.fetch_history_events()]
    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    assert scheduled == ["mcp-tasks.start_call.v1", "mcp-tasks.await_task.v1", POLL_TASK], scheduled
    # A short task's 21, the hand-over's marker and activity, and workflow tasks stranded on the killed workers'
    # sticky queues: constant, whatever the number of polls and kills.
    assert len(events) <= 38, f"{len(events)} history events"
    print(
        f"[measured] {case.peer.name}{' job' if case.job else ''}: {len(polls)} status reads in "
        f"{polls[-1] - created:.1f}s ({len(late)} past 2.5 s of age), {len(events)} history events, outcome "
        f"{time.monotonic() - killed:.1f}s after the kill during a poll",
        flush=True,
    )


@pytest.mark.parametrize("case", ["ts-http", "fastmcp"], indirect=True)
async def test_a_cancel_during_an_idle_wait_reaches_the_server_without_waiting_for_the_next_poll(
    case: Case, temporal_env: Any, tmp_path: Path
) -> None:
    address, queue = address_of(temporal_env), unique("idle-cancel")
    mark = case.peer.log_mark()
    # A gap as long as the task's age, up to a minute: by 8 s of age the next poll is ≥ 8 s away.
    cfg = write_config(
        tmp_path / "w.toml",
        {"srv": {"url": case.peer.url, "polling": {"after_s": 1.0, "age_fraction": 1.0, "max_interval_s": 60.0}}},
        worker=NO_LIST,
    )
    with worker_process(address, queue, cfg) as worker:
        handle = await start_mcp_task(
            temporal_env.client,
            McpTaskRequest(
                server="srv", tool="slow_echo", arguments={"seconds": 120, "text": "never"}, timeouts=TIMEOUTS
            ),
            workflow_id=unique("idle-cancel"),
            task_queue=queue,
        )
        view = await wait_for_view(handle, lambda v: v.phase == Phase.WORKING and v.task_id)
        # A poll past 6 s of the task's age (the one at ~8 s): the gap after it is longer than the 5 s bound below,
        # so a cancel that waited for the next poll would miss it.
        created = tool_calls(case.peer, mark, case.submit)[0]["ts"] / 1000
        await until(
            lambda: [t for t in case.polls(mark, view.task_id or "") if t - created > 6.0], 30, "a poll past 6 s of age"
        )
        await until_between_polls(handle, worker=worker)
        last_poll = case.polls(mark, view.task_id or "")[-1]
        asked = time.time()
        await handle.execute_update(McpTaskWorkflow.cancel, "operator")
        out = await asyncio.wait_for(outcome_of(handle), 60)
    cancels = [x["ts"] / 1000 for x in case.peer.log_since(mark) if x.get("method") == "tasks/cancel"]
    assert out.outcome == Outcome.CANCELLED and len(cancels) == 1, (out.outcome, cancels)
    reached = cancels[0] - asked
    gap = asked - last_poll
    # The bound stated in the README: max(5 s, ...) is never needed, the cancel goes out at once.
    assert reached < 5.0, f"tasks/cancel reached the server {reached:.1f}s after the cancel"
    print(
        f"[measured] {case.peer.name}: tasks/cancel at the server {reached:.2f}s after the cancel, "
        f"{gap:.1f}s into a gap of ≥ 8 s",
        flush=True,
    )


async def test_an_idle_wait_on_a_stdio_server_stays_with_the_child_that_owns_the_task(
    temporal_env: Any, tmp_path: Path
) -> None:
    """A stdio server's task lives in one child process of one worker: its idle attempts go to that worker's own
    queue (another worker would spawn a child that never heard of the task) and read it from the same child."""
    address, queue = address_of(temporal_env), unique("idle-stdio")
    with ts_stdio_peer(tmp_path, env_var="MCP_TEST_PEER_LOG_TS_STDIO_IDLE") as peer:
        mark = peer.log_mark()
        cfg = write_config(
            tmp_path / "w.toml",
            {
                "local": {
                    "command": peer.endpoint.command,
                    "env": {"PEER_LOG": {"env": "MCP_TEST_PEER_LOG_TS_STDIO_IDLE"}},
                    "polling": SCHEDULE,
                }
            },
        )
        with worker_process(address, queue, cfg) as worker:
            handle = await start_mcp_task(
                temporal_env.client,
                McpTaskRequest(
                    server="local", tool="slow_echo", arguments={"seconds": 12, "text": "stdio idle"}, timeouts=TIMEOUTS
                ),
                workflow_id=unique("idle-stdio"),
                task_queue=queue,
            )
            view = await wait_for_view(handle, lambda v: v.phase == Phase.WORKING and v.task_id)
            await until_between_polls(handle, worker=worker)  # idle: nothing of the task runs, its child lives on
            out = await asyncio.wait_for(outcome_of(handle), 60)
        lines = peer.log_since(mark)
    assert out.outcome == Outcome.COMPLETED, (out.outcome, out.reason)
    calls = [x for x in lines if x.get("method") == "tools/call" and x.get("tool") == "slow_echo"]
    reads = [x for x in lines if x.get("method") == "tasks/get" and x.get("taskId") == view.task_id]
    assert len(calls) == 1, calls
    assert {x["pid"] for x in reads} == {calls[0]["pid"]}, "a read went to a child that does not own the task"
    created = reads[0]["ts"] / 1000
    late = [x for x in reads if x["ts"] / 1000 - created > 2.5]
    assert len(late) <= 8, f"{len(late)} polls past 2.5 s of age (the stretched schedule asks ~5)"

    events = [e async for e in handle.fetch_history_events()]
    scheduled = {}
    for e in events:
        if e.HasField("activity_task_scheduled_event_attributes"):
            attrs = e.activity_task_scheduled_event_attributes
            scheduled[attrs.activity_type.name] = attrs.task_queue.name
    assert POLL_TASK in scheduled, scheduled
    # The wait, idle or not, runs on the worker that started the call, never on the shared queue.
    assert scheduled[POLL_TASK] == scheduled["mcp-tasks.await_task.v1"] != queue, scheduled
    print(
        f"[measured] ts-stdio: {len(reads)} reads by pid {calls[0]['pid']} ({len(late)} past 2.5 s of age), "
        f"idle attempts on {scheduled[POLL_TASK]}",
        flush=True,
    )


@pytest.mark.parametrize("kind", ["ts-http", "py1-http"])
async def test_a_silent_servers_idle_wait_is_read_by_the_worker_and_its_attempts_are_only_the_net(
    kind: str, temporal_env: Any, tmp_path: Path
) -> None:
    """Real peers that neither notify nor have their tasks/list read here: an idle wait's task is read by the
    worker's hub on today's schedule (gaps of at most 3 s), its end wakes the workflow (one signal, ``delivered_by
    = poll``), whose own read ends it within a gap; meanwhile the wait's own attempts are the net, push_net_stretch ×
    the gap apart. The server is never asked sooner than its pollInterval, and the tool is called once."""
    from tests.test_list_reader import _next_poll_in
    from tests.test_push import closed_at, reads, signals, terminal_at

    task_s, max_gap_s, slack_s = 22.0, SCHEDULE["max_interval_s"], 3.0
    address, queue = address_of(temporal_env), unique("hub-reads")
    peer_cm = (
        ts_http_peer(tmp_path, poll_ms=POLL_MS, notify=False, name=unique("ts-hub"))
        if kind == "ts-http"
        else py1_http_peer(tmp_path, poll_ms=POLL_MS, notify=False, name=unique("py1-hub"))
    )
    with peer_cm as peer:
        mark = peer.log_mark()
        cfg = _read_here_config(tmp_path, peer)
        with worker_process(address, queue, cfg) as worker:
            handle = await _idle_wait_read_here(temporal_env, queue, worker, task_s, "read here")
            net_gap = await _next_poll_in(handle, 10)
            out = await asyncio.wait_for(outcome_of(handle), task_s + 60)
        ended, closed = terminal_at(peer, out.task_id), await closed_at(handle)
        got = reads(peer, mark, out.task_id)
        calls = tool_calls(peer, mark, "slow_echo")
    assert out.outcome == Outcome.COMPLETED and out.result is not None, (out.outcome, out.reason)
    assert len(calls) == 1, calls
    assert out.delivered_by == "poll" and await signals(handle) == 1, (out.delivered_by, await signals(handle))
    assert closed - ended <= max_gap_s + slack_s, f"closed {closed - ended:.2f}s after the server's end"
    # The wait's own next attempt was far beyond today's gap (3 s at most): the net, 8 × the gap (less what passed).
    assert net_gap > 2 * max_gap_s, f"the idle wait's next attempt was {net_gap:.1f}s away"
    gaps = [b - a for a, b in zip(got, got[1:], strict=False)]
    assert min(gaps) >= POLL_MS / 1000 - 0.02, f"a read {min(gaps):.3f}s after the previous one"
    print(
        f"[measured] {kind}: closed {closed - ended:.2f}s after the server's end, the wait's next attempt "
        f"{net_gap:.1f}s away (today's gap ≤ {max_gap_s:g} s), {len(got)} tasks/get",
        flush=True,
    )


async def test_the_worker_reading_an_idle_wait_killed_costs_at_most_one_net_gap(
    temporal_env: Any, tmp_path: Path
) -> None:
    """Two workers, the TypeScript peer silent and its tasks/list not read: the first worker's hub reads the idle
    wait's task and is SIGKILLed; the wait's next attempt (at most push_net_stretch × today's gap away: 8 × 3 s)
    lands on the second worker, which reads the task from then on and sees the end. One tools/call."""
    from tests.test_push import closed_at, terminal_at

    address, queue = address_of(temporal_env), unique("hub-kill")
    net_gap_s, slack_s = 8 * SCHEDULE["max_interval_s"], 4.0
    with ts_http_peer(tmp_path, poll_ms=POLL_MS, notify=False, name=unique("ts-hub-kill")) as peer:
        mark = peer.log_mark()
        cfg = _read_here_config(tmp_path, peer)
        with worker_process(address, queue, cfg) as first:
            handle = await _idle_wait_read_here(temporal_env, queue, first, TASK_S, "survived")
            with worker_process(address, queue, cfg):
                await asyncio.sleep(6)
                first.kill()
                killed = time.time()
                out = await asyncio.wait_for(outcome_of(handle), TASK_S + net_gap_s + 60)
        ended, closed = terminal_at(peer, out.task_id), await closed_at(handle)
        calls = tool_calls(peer, mark, "slow_echo")
    assert out.outcome == Outcome.COMPLETED and out.result is not None, (out.outcome, out.reason)
    assert len(calls) == 1, calls
    # Seen within one net gap of the later of the kill and the end (the second worker takes over at the next attempt).
    assert closed - max(ended, killed) <= net_gap_s + slack_s, f"closed {closed - max(ended, killed):.2f}s late"
    print(
        f"[measured] the reading worker killed: closed {closed - ended:.2f}s after the server's end, "
        f"{closed - killed:.2f}s after the kill (net gap {net_gap_s:g} s), by {out.delivered_by}",
        flush=True,
    )


async def _idle_wait_read_here(
    temporal_env: Any, queue: str, worker: WorkerProcess, seconds: float, text: str
) -> WorkflowHandle[Any, Any]:
    """A slow_echo task on a silent peer whose tasks/list is not read, waited on until its wait is idle."""
    handle = await start_mcp_task(
        temporal_env.client,
        McpTaskRequest(server="srv", tool="slow_echo", arguments={"seconds": seconds, "text": text}, timeouts=TIMEOUTS),
        workflow_id=unique(queue),
        task_queue=queue,
    )
    await wait_for_view(handle, lambda v: v.phase == Phase.WORKING and v.task_id)
    await until_between_polls(handle, min_attempt=2, worker=worker)
    return handle


def _read_here_config(tmp_path: Path, peer: Peer) -> Path:
    return write_config(
        tmp_path / "w.toml", {"srv": {"url": peer.url, "polling": SCHEDULE}}, worker={"push_list_reads": False}
    )
