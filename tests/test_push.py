"""Told, not polled: a server's task notification ends the wait, on real peers, through real workers.

The servers here ask for a ``pollInterval`` of 60 s and finish a task after 20 s: without notifications the end is
seen at the next poll, 40 s late. With them, the worker that holds the session's listener (the TypeScript SDK's
stdout on stdio; the session's GET stream over HTTP, TypeScript SDK 1.32 and the official Python SDK 1.30) signals the
workflow, which drops its pending poll and reads the task at once: the workflow closes within 3 s of the server's
own record of the end (``{"event": "terminal"}`` in its log), with one ``tools/call`` and ``delivered_by =
notification``. The same server with its notifications off is seen at the poll (``delivered_by = poll``), on today's
schedule exactly; a notification that lies costs one read; ``input_required`` by notification reaches the status
query (what the CLI and the UI show) within 3 s; a worker holding the stream killed mid-task loses nothing; a flood of
10,000 notifications for unknown task ids sends no signal.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHandle

from mcp_temporal_tasks.activities.mcp_activities import McpActivities
from mcp_temporal_tasks.worker.config import WorkerConfig
from mcp_temporal_tasks.worker.registry import make_activities
from mcp_temporal_tasks.worker.runner import run_workers
from mcp_temporal_tasks.workflows.client import outcome_of, start_mcp_task
from mcp_temporal_tasks.workflows.mcp_task import McpTaskWorkflow
from mcp_temporal_tasks.workflows.records import McpTaskRequest, Outcome, Phase, Timeouts
from tests.peers.harness import Peer, py1_http_peer, ts_http_peer, ts_stdio_peer
from tests.temporal_harness import (
    TRUSTED,
    address_of,
    keep_history,
    tool_calls,
    unique,
    until,
    wait_for_view,
    worker_process,
    write_config,
)

pytestmark = pytest.mark.slow

POLL_MS = 60_000
TASK_S = 20.0
#: The acceptance bound: the workflow closed this long after the server's own record of the end, at most.
CLOSED_WITHIN_S = 3.0


@contextlib.contextmanager
def peer_of(kind: str, tmp_path: Path, *, poll_ms: int = POLL_MS, notify: bool = True) -> Iterator[Peer]:
    if kind == "ts-stdio":
        child = {"PEER_POLL_MS": str(poll_ms), **({} if notify else {"PEER_NOTIFY": "0"})}
        with ts_stdio_peer(
            tmp_path, env_var=unique("MCP_TEST_PUSH_LOG").upper().replace("-", "_"), child_env=child
        ) as peer:
            yield peer
    elif kind == "ts-http":
        with ts_http_peer(tmp_path, poll_ms=poll_ms, notify=notify, name=unique("ts-http-push")) as peer:
            yield peer
    else:
        assert notify, "the mcp 1.30 peer always notifies"
        with py1_http_peer(tmp_path, poll_ms=poll_ms, name=unique("py1-push")) as peer:
            yield peer


def server_table(peer: Peer) -> dict[str, Any]:
    if peer.endpoint.command is not None:
        return {"command": peer.endpoint.command, "env": {k: {"env": v} for k, v in peer.endpoint.env_refs.items()}}
    return {"url": peer.url}


def terminal_at(peer: Peer, task_id: str | None) -> float:
    """The server's own record of when the task ended (epoch seconds)."""
    ends = [x["ts"] / 1000 for x in peer.events(event="terminal", taskId=task_id)]
    assert len(ends) == 1, f"the server recorded {len(ends)} ends of {task_id}"
    return ends[0]


def reads(peer: Peer, mark: int, task_id: str | None) -> list[float]:
    return sorted(
        x["ts"] / 1000 for x in peer.log_since(mark) if x.get("method") == "tasks/get" and x.get("taskId") == task_id
    )


async def closed_at(handle: WorkflowHandle[Any, Any]) -> float:
    desc = await handle.describe()
    assert desc.close_time is not None
    return desc.close_time.timestamp()


async def signals(handle: WorkflowHandle[Any, Any]) -> int:
    return len(
        [
            e
            async for e in handle.fetch_history_events()
            if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
        ]
    )


@pytest.mark.parametrize("kind", ["ts-stdio", "ts-http", "py1-http"])
async def test_a_notification_ends_the_wait_within_seconds(kind: str, temporal_env: Any, tmp_path: Path) -> None:
    address, queue = address_of(temporal_env), unique("push")
    with peer_of(kind, tmp_path) as peer:
        mark = peer.log_mark()
        cfg = write_config(tmp_path / "w.toml", {"srv": server_table(peer)})
        with worker_process(address, queue, cfg):
            handle = await start_mcp_task(
                temporal_env.client,
                McpTaskRequest(server="srv", tool="slow_echo", arguments={"seconds": TASK_S, "text": "told"}),
                workflow_id=unique("push"),
                task_queue=queue,
            )
            out = await asyncio.wait_for(outcome_of(handle), TASK_S + 40)
        ended, closed = terminal_at(peer, out.task_id), await closed_at(handle)
        got = reads(peer, mark, out.task_id)
        calls = tool_calls(peer, mark, "slow_echo")
    assert out.outcome == Outcome.COMPLETED, (out.outcome, out.reason)
    assert out.delivered_by == "notification", out.delivered_by
    assert len(calls) == 1, calls
    assert closed - ended <= CLOSED_WITHIN_S, f"closed {closed - ended:.2f}s after the server's end"
    # The first poll, then the read the notification asked for: nothing polled in between (the next poll was 60 s away).
    assert len(got) == 2 and got[1] >= ended, [round(t - got[0], 2) for t in got]
    assert await signals(handle) == 1
    if kind == "ts-http":
        await keep_history(handle, "notified_wake")
    print(
        f"[measured] {kind}: closed {closed - ended:.2f}s after the server's end (the next poll was "
        f"{got[0] + POLL_MS / 1000 - ended:.0f}s away), {len(got)} tasks/get",
        flush=True,
    )


async def test_a_server_that_never_notifies_is_seen_at_the_poll_on_todays_schedule(
    temporal_env: Any, tmp_path: Path
) -> None:
    """The TypeScript peer with its notifications off (PEER_NOTIFY=0) and its tasks/list not read
    (``push_list_reads = false``): the end is learned at the poll, every gap is the server's pollInterval as without
    push (nothing it never sent can stretch it), no signal, one tools/call."""
    address, queue = address_of(temporal_env), unique("push-silent")
    poll_s = 4.0
    with peer_of("ts-http", tmp_path, poll_ms=int(poll_s * 1000), notify=False) as peer:
        mark = peer.log_mark()
        # Its tasks/list is not read here (tests/test_list_reader.py reads it): polls alone, on today's schedule.
        cfg = write_config(tmp_path / "w.toml", {"srv": server_table(peer)}, worker={"push_list_reads": False})
        with worker_process(address, queue, cfg):
            handle = await start_mcp_task(
                temporal_env.client,
                McpTaskRequest(server="srv", tool="slow_echo", arguments={"seconds": 10, "text": "polled"}),
                workflow_id=unique("push-silent"),
                task_queue=queue,
            )
            out = await asyncio.wait_for(outcome_of(handle), 60)
        ended = terminal_at(peer, out.task_id)
        got = reads(peer, mark, out.task_id)
        calls = tool_calls(peer, mark, "slow_echo")
        streams = peer.events(event="get_stream")
    assert out.outcome == Outcome.COMPLETED and out.delivered_by == "poll", (out.outcome, out.delivered_by)
    assert len(calls) == 1 and await signals(handle) == 0
    gaps = [b - a for a, b in zip(got, got[1:], strict=False)]
    assert gaps and all(poll_s - 0.05 <= g <= poll_s + 1.0 for g in gaps), [round(g, 2) for g in gaps]
    assert got[-1] >= ended and len(got) == 4, [round(t - got[0], 2) for t in got]  # at 0, 4, 8 and 12 s
    assert streams, "the worker never listened: the test would not show a silent server"
    print(
        f"[measured] silent ts-http: {len(got)} tasks/get, gaps {[round(g, 2) for g in gaps]} s, end seen "
        f"{got[-1] - ended:.2f}s after it",
        flush=True,
    )


async def test_a_notification_that_lies_costs_one_read_and_the_task_ends_as_the_server_finally_says(
    temporal_env: Any, tmp_path: Path
) -> None:
    """``lying_echo`` says ``completed`` 2 s in while its task works on to 10 s: one read confirms it is working (the
    workflow cancels its heartbeating wait for it), no second wake for the same status, the task ends ``completed``
    with its true result at a poll, one tools/call."""
    address, queue = address_of(temporal_env), unique("push-lie")
    with peer_of("ts-http", tmp_path, poll_ms=3000) as peer:
        mark = peer.log_mark()
        cfg = write_config(tmp_path / "w.toml", {"srv": server_table(peer)})
        with worker_process(address, queue, cfg):
            handle = await start_mcp_task(
                temporal_env.client,
                McpTaskRequest(
                    server="srv", tool="lying_echo", arguments={"seconds": 10, "lie_after": 2, "text": "true end"}
                ),
                workflow_id=unique("push-lie"),
                task_queue=queue,
            )
            out = await asyncio.wait_for(outcome_of(handle), 60)
        lied = [x["ts"] / 1000 for x in peer.events(event="lie", taskId=out.task_id)]
        ended = terminal_at(peer, out.task_id)
        got = reads(peer, mark, out.task_id)
        calls = tool_calls(peer, mark, "lying_echo")
    assert out.outcome == Outcome.COMPLETED and out.result is not None, (out.outcome, out.reason)
    assert out.result["content"][0]["text"] == "true end"
    assert len(calls) == 1 and len(lied) == 1
    between = [t for t in got if lied[0] <= t < ended]
    assert len(between) == 1, f"{len(between)} reads between the lie and the end: {[round(t - got[0], 2) for t in got]}"
    assert between[0] - lied[0] < 2.0, "the read the lie asked for came late"
    # The server has shown it notifies: the next poll is 4 × its pollInterval away (the stretch), not 3 s.
    assert got[2] - got[1] >= 4 * 3.0 - 0.5, [round(t - got[0], 2) for t in got]
    assert await signals(handle) == 1, "one wake per status: the true completion is not signalled again"
    assert out.delivered_by == "poll"
    print(
        f"[measured] lying ts-http: reads at {[round(t - got[0], 2) for t in got]} s (lie at "
        f"{lied[0] - got[0]:.2f}, end at {ended - got[0]:.2f})",
        flush=True,
    )


async def test_input_required_by_notification_is_shown_within_seconds(temporal_env: Any, tmp_path: Path) -> None:
    """``ask_user`` asks 4 s in, its next poll a minute away: the notification wakes the wait, the read sees
    ``input_required`` and the relay receives the question; the status query (what ``mcp-tasks run``/``status``
    and the UI show) lists it within 3 s of the server asking. Answered, the task completes; one tools/call."""
    from tests.temporal_harness import cli

    address, queue = address_of(temporal_env), unique("push-input")
    with peer_of("ts-http", tmp_path) as peer:
        mark = peer.log_mark()
        cfg = write_config(tmp_path / "w.toml", {"srv": server_table(peer)})
        with worker_process(address, queue, cfg):
            wid = unique("push-input")
            handle = await start_mcp_task(
                temporal_env.client,
                McpTaskRequest(server="srv", tool="ask_user", arguments={"question": "Ship it?", "delay": 4}),
                workflow_id=wid,
                task_queue=queue,
            )
            view = await wait_for_view(handle, lambda v: bool(v.pending_inputs), timeout_s=30)
            shown = time.time()
            asked = [x["ts"] / 1000 for x in peer.events(event="input_required")]
            code, stdout, stderr = await cli("status", wid, "--address", address)
            key = view.pending_inputs[0].key
            await handle.execute_update(
                McpTaskWorkflow.provide_input,
                {key: {"action": "accept", "content": {"approve": True, "account": "a-1"}}},
            )
            out = await asyncio.wait_for(outcome_of(handle), 60)
            closed = await closed_at(handle)
        calls = tool_calls(peer, mark, "ask_user")
        ended = terminal_at(peer, out.task_id)
    assert len(asked) == 1 and shown - asked[0] <= CLOSED_WITHIN_S, f"shown {shown - asked[0]:.2f}s after it was asked"
    # Answered, the held tasks/result would be answered at the server's next poll (a minute away): its notification
    # ends the hold instead, and the task is read anew.
    assert closed - ended <= CLOSED_WITHIN_S, f"closed {closed - ended:.2f}s after the server's end"
    assert out.delivered_by == "notification", out.delivered_by
    assert "needs input" in stdout + stderr and "Ship it?" in stdout + stderr, (code, stdout, stderr)
    assert out.outcome == Outcome.COMPLETED and "approved account=a-1" in str(out.result)
    assert len(calls) == 1
    print(
        f"[measured] input_required on ts-http: in the status view {shown - asked[0]:.2f}s after the server asked "
        "(its next poll was a minute away)",
        flush=True,
    )


async def test_the_worker_holding_the_stream_killed_mid_task_loses_nothing(temporal_env: Any, tmp_path: Path) -> None:
    """Two workers on one queue; the first holds the session's GET stream (the second gets 409 and stands by) and
    is SIGKILLed mid-task: the other one finishes the task (taking the stream over, or at a poll), one tools/call."""
    address, queue = address_of(temporal_env), unique("push-kill")
    fast = Timeouts(heartbeat_s=2.0, poll_floor_s=0.05, owner_pickup_s=4, submit_s=60)
    with peer_of("ts-http", tmp_path, poll_ms=2000) as peer:
        mark = peer.log_mark()
        cfg = write_config(tmp_path / "w.toml", {"srv": server_table(peer)})
        with worker_process(address, queue, cfg) as first:
            handle = await start_mcp_task(
                temporal_env.client,
                McpTaskRequest(
                    server="srv", tool="slow_echo", arguments={"seconds": 30, "text": "survived"}, timeouts=fast
                ),
                workflow_id=unique("push-kill"),
                task_queue=queue,
            )
            await wait_for_view(handle, lambda v: v.phase == Phase.WORKING and v.task_id)
            await until(lambda: peer.events(event="get_stream"), 20, "the first worker's GET stream")
            with worker_process(address, queue, cfg):
                await asyncio.sleep(6)  # both workers poll: the idle attempts land on either
                held = len(peer.events(event="get_stream"))
                first.kill()
                killed = time.time()
                out = await asyncio.wait_for(outcome_of(handle), 90)
        calls = tool_calls(peer, mark, "slow_echo")
        after = [x for x in peer.events(event="get_stream") if x["ts"] / 1000 > killed]
    assert out.outcome == Outcome.COMPLETED and out.result is not None, (out.outcome, out.reason)
    assert len(calls) == 1, calls
    print(
        f"[measured] kill: {held} GET stream requests before the kill, {len(after)} after it (taken over); "
        f"end learned by {out.delivered_by}",
        flush=True,
    )


@contextlib.asynccontextmanager
async def in_process(
    client: Any, queue: str, servers: dict[str, Any], *, list_reads: bool = True
) -> AsyncIterator[McpActivities]:
    """An in-process worker whose activities (and so its push hub) the test can read; ``list_reads=False``: its hub
    reads no session's ``tasks/list`` (``[worker] push_list_reads``)."""
    from mcp_temporal_tasks.worker.config import server_config

    cfg = WorkerConfig(
        servers={k: server_config(k, v) for k, v in servers.items()},
        worker=TRUSTED.model_copy(update={"push_list_reads": list_reads}),
    )
    cfg.temporal.task_queue = queue
    acts = make_activities(cfg)
    stop, ready = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(
        run_workers(client, cfg, stop=stop, on_ready=ready.set, activities=acts, handle_signals=False)
    )
    try:
        await asyncio.wait_for(ready.wait(), 30)
        yield acts
    finally:
        stop.set()
        await task


async def test_a_flood_of_notifications_for_unknown_tasks_sends_no_signal(temporal_env: Any, tmp_path: Path) -> None:
    """10,000 ``notifications/tasks/status`` ``completed`` for task ids the server never made, on the session's GET
    stream while a task of ours waits: no signal, a bounded number of visibility lookups, the stream shed; the task
    itself completes, at its poll. The worker's CPU over the flood is printed (a figure, not a bound)."""
    queue = unique("push-flood")
    with peer_of("ts-http", tmp_path, poll_ms=8000) as peer:
        mark = peer.log_mark()
        # No tasks/list reads: the TypeScript peer lists its tasks, and a list read would (rightly) wake the wait
        # when the task ends; what this test holds is that the flood itself wakes nothing.
        async with in_process(temporal_env.client, queue, {"srv": {"url": peer.url}}, list_reads=False) as acts:
            cpu0, t0 = time.process_time(), time.monotonic()
            handle = await start_mcp_task(
                temporal_env.client,
                McpTaskRequest(server="srv", tool="notify_flood", arguments={"count": 10_000, "seconds": 5}),
                workflow_id=unique("push-flood"),
                task_queue=queue,
            )
            await until(lambda: peer.events(event="flood_end"), 60, "the end of the flood")
            await asyncio.sleep(1.0)  # the last events in flight reach the listener (or its shedding)
            cpu = time.process_time() - cpu0
            wall = time.monotonic() - t0
            out = await asyncio.wait_for(outcome_of(handle), 60)
            stats = acts.push.stats()
        calls = tool_calls(peer, mark, "notify_flood")
    counts = stats["counts"]
    listener = next(iter(stats["sessions"].values()), {}).get("listener", {}) if stats["sessions"] else {}
    assert out.outcome == Outcome.COMPLETED and len(calls) == 1, (out.outcome, out.reason)
    assert await signals(handle) == 0 and counts.get("signals", 0) == 0 and counts.get("woken", 0) == 0, counts
    # The lookup bucket: its burst, then 5 per second of the flood's duration.
    assert counts.get("lookups", 0) <= 20 + 5 * wall, counts
    assert counts.get("notices", 0) >= 500, counts  # the flood did reach the listener
    print(
        f"[measured] flood of 10,000 unknown-task notifications: {counts.get('notices', 0)} read before the "
        f"listener shed the stream ({listener.get('floods', 0)} flood trips), {counts.get('lookups', 0)} lookups, "
        f"{counts.get('lookup_dropped', 0)} not looked up, 0 signals; process CPU {cpu:.2f}s over {wall:.1f}s "
        f"(this test process: the worker, the test and its Temporal client)",
        flush=True,
    )
