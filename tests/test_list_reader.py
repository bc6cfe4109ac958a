"""Read, not told: a silent server's ``tasks/list`` wakes the waits whose task changed, on real peers and workers.

The TypeScript SDK 1.32 and the official Python SDK 1.30 peers, their notifications off (``PEER_NOTIFY=0``), list a
session's own tasks. A task polled as an hour-old one is (every gap 180 s: 5 % of 3600 s, the age schedule's gap at
1 h; floor and ceiling both) ends 12 s in: the worker's list reader sees it within the server's pollInterval (2 s)
and wakes the workflow, whose own read ends it: closed within pollInterval + 3 s of the server's own record of the
end, ``delivered_by = list``, one ``tools/call``, one signal, two ``tasks/get`` (the first poll and the woken read).
Its first gap is stretched already (4 × 180 s): the wait waited for the reader to list it before it slept.
Hostile lists (a scripted server): one that lies, one that pages forever, one of 10,000 foreign ids: the outcome is
the read's, the list requests bounded, one ``tools/call``. And the worker holding the reader SIGKILLed: the other
worker delivers within one safety gap (stretch × the gap: 4 × 2 s here).
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from mcp_temporal_tasks.activities.push.list_reader import (
    LIST_MIN_S,
    MAX_ITEMS,
    MAX_PAGES,
    ListRead,
    ListReader,
    ListState,
    changed,
    list_interval,
    read_bounds,
)
from mcp_temporal_tasks.workflows.client import outcome_of, start_mcp_task
from mcp_temporal_tasks.workflows.records import McpTaskRequest, Outcome, Phase, Timeouts
from tests.peers.harness import py1_http_peer, ts_http_peer
from tests.scripted_mcp import ScriptedMcp, task
from tests.temporal_harness import address_of, tool_calls, unique, until, wait_for_view, worker_process, write_config
from tests.test_push import closed_at, in_process, reads, signals, terminal_at

POLL_MS = 2000
TASK_S = 12.0
#: Every gap of an hour-old task on the age schedule (5 % of its age).
HOUR_OLD_GAP_S = 180.0
#: The wake's signal, the workflow task that takes it, and the read it asks for, on a loaded machine.
WAKE_SLACK_S = 3.0
#: ``[worker] push_stretch``'s default: a listed wait's gaps, like a notified one's.
STRETCH = 4.0


@pytest.mark.fast
def test_a_list_read_wakes_only_waits_whose_status_changed_to_one_that_ends_a_wait() -> None:
    read = ListRead(
        ours={
            "a": ("completed", 2000),
            "b": ("working", 2000),
            "c": ("input_required", None),
            "d": ("input_required", 500),
        }
    )
    # a: was working, now completed; b: unchanged working; c: input still asked (seen before): nothing; d: new input
    assert changed(read, {"a": "working", "b": "working", "c": "input_required", "d": "working"}) == [
        ("a", "completed"),
        ("d", "input_required"),
    ]
    assert list_interval([2000, None, 500]) == LIST_MIN_S == 2.0  # bounded below
    assert list_interval([None]) == 5.0 and list_interval([90_000_000]) == 3600.0 and list_interval([8000]) == 8.0


@pytest.mark.fast
def test_a_reads_bounds_and_pace_follow_the_sessions_waits_and_pages() -> None:
    # One wait: about the floor, so 10,000 foreign ids or endless pages stop early.
    assert read_bounds(1) == (MAX_PAGES + 1, MAX_ITEMS + 2) and read_bounds(1)[1] < 10_000
    # 10,000 waits on one session (pages of 10, as both SDKs): room for all of them and their ended neighbours.
    pages, items = read_bounds(10_000)
    assert pages >= 2 * 10_000 // 10 and items >= 2 * 10_000
    # A long list is read less often: 1,000 pages at most 10 a second, or one page of 10,000 tasks (the Python SDK)
    # at most 100 tasks a second; a short one at the pollInterval.
    assert list_interval([500], 1000) == 100.0 and list_interval([500], 3) == LIST_MIN_S
    assert list_interval([500], 1, 10_000) == 100.0 and list_interval([500], 1, 60) == LIST_MIN_S
    assert list_interval([8000], 3) == 8.0


@pytest.mark.fast
async def test_a_new_wait_learns_within_its_timeout_whether_the_next_read_lists_it() -> None:
    reader = ListReader(None, dict, lambda t, s: False, name="test")  # type: ignore[arg-type]

    async def a_read(listed: set[str], after: float) -> None:
        await asyncio.sleep(after)
        reader.state, reader.covered = ListState.READING, {t: time.monotonic() for t in listed}
        reader._ended_a_read()

    # A read already under way ends without it; the next one lists it: True, after two reads.
    reads = asyncio.gather(a_read(set(), 0.05), a_read({"t-1"}, 0.15))
    assert await reader.until_listed("t-1", timeout=2.0) is True
    await reads
    # Never listed: False once the timeout has passed, not before two reads have been seen or the time is up.
    t0 = time.monotonic()
    assert await reader.until_listed("t-2", timeout=0.3) is False and time.monotonic() - t0 >= 0.29
    # A reader that is not reading: False at once.
    reader.state = ListState.BOUNDED
    t0 = time.monotonic()
    assert await reader.until_listed("t-3", timeout=5.0) is False and time.monotonic() - t0 < 0.1


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["ts-http", "py1-http"])
async def test_a_silent_servers_list_delivers_an_old_tasks_end_within_its_poll_interval(
    kind: str, temporal_env: Any, tmp_path: Path
) -> None:
    address, queue = address_of(temporal_env), unique("list")
    peer_cm = (
        ts_http_peer(tmp_path, poll_ms=POLL_MS, notify=False, name=unique("ts-list"))
        if kind == "ts-http"
        else py1_http_peer(tmp_path, poll_ms=POLL_MS, notify=False, name=unique("py1-list"))
    )
    with peer_cm as peer:
        mark = peer.log_mark()
        cfg = write_config(tmp_path / "w.toml", {"srv": {"url": peer.url}})
        with worker_process(address, queue, cfg):
            handle = await start_mcp_task(
                temporal_env.client,
                McpTaskRequest(
                    server="srv",
                    tool="slow_echo",
                    arguments={"seconds": TASK_S, "text": "listed"},
                    timeouts=Timeouts(poll_floor_s=HOUR_OLD_GAP_S, poll_ceiling_s=HOUR_OLD_GAP_S),
                ),
                workflow_id=unique("list"),
                task_queue=queue,
            )
            first_gap = await _next_poll_in(handle, TASK_S - 2)
            out = await asyncio.wait_for(outcome_of(handle), TASK_S + 60)
        ended, closed = terminal_at(peer, out.task_id), await closed_at(handle)
        got = reads(peer, mark, out.task_id)
        calls = tool_calls(peer, mark, "slow_echo")
        lists = [x for x in peer.log_since(mark) if x.get("method") == "tasks/list"]
    assert out.outcome == Outcome.COMPLETED and out.result is not None, (out.outcome, out.reason)
    assert out.delivered_by == "list", out.delivered_by
    assert len(calls) == 1, calls
    assert closed - ended <= POLL_MS / 1000 + WAKE_SLACK_S, f"closed {closed - ended:.2f}s after the server's end"
    # The first poll, then the read the list's wake asked for (the next poll was 720 s away).
    assert len(got) == 2 and got[1] >= ended, [round(t - got[0], 2) for t in got]
    # The first gap stretched too (the reader listed the new wait before it slept): 4 × 180 s, not 180 s.
    assert first_gap >= 0.9 * STRETCH * HOUR_OLD_GAP_S - TASK_S, f"first gap {first_gap:.0f}s"
    assert await signals(handle) == 1
    # Read at the pollInterval, not faster: about TASK_S / 2 s reads (+ slack for the loaded machine's jitter).
    assert 2 <= len(lists) <= TASK_S / (POLL_MS / 1000) + 4, len(lists)
    print(
        f"[measured] {kind}, notifications off: closed {closed - ended:.2f}s after the server's end (the next poll "
        f"was {got[0] + STRETCH * HOUR_OLD_GAP_S - ended:.0f}s away: the first gap stretched to {first_gap:.0f}s), "
        f"{len(got)} tasks/get, {len(lists)} tasks/list",
        flush=True,
    )


async def _next_poll_in(handle: Any, within_s: float) -> float:
    """Seconds from now to the idle wait's next poll (its pending activity's next attempt), once it has handed over."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        for a in (await handle.describe()).raw_description.pending_activities:
            if a.HasField("next_attempt_schedule_time"):
                return a.next_attempt_schedule_time.ToMilliseconds() / 1000 - time.time()
        await asyncio.sleep(0.2)
    raise AssertionError(f"no idle wait with a next poll within {within_s:g}s")


def _scripted(kind: str, state: dict[str, Any]) -> ScriptedMcp:
    """A 2025-11-25 server offering tasks/list: its task ``t-1`` works until 5 s after tools/call, then completes
    (tasks/get says so); its list lies, pages forever, or is 10,000 foreign ids."""

    def call(m: str, p: dict[str, Any]) -> dict[str, Any]:
        state.setdefault(kind, time.time())
        return {"task": task("t-1", "working")}

    def get(m: str, p: dict[str, Any]) -> dict[str, Any]:
        done = time.time() - state.get(kind, time.time()) >= 5.0
        return task(p.get("taskId", "t-1"), "completed" if done else "working")

    def listed(m: str, p: dict[str, Any]) -> dict[str, Any]:
        if kind == "lies":
            return {"tasks": [task("t-1", "completed")]}  # from the start: tasks/get says working for 5 s
        if kind == "pages":
            n = int(p.get("cursor") or 0)
            return {"tasks": [task(f"foreign-{n}", "completed"), task("t-1", "working")], "nextCursor": str(n + 1)}
        return {"tasks": [task(f"foreign-{i}", "completed") for i in range(10_000)]}

    server = ScriptedMcp({"tools/call": call, "tasks/get": get, "tasks/list": listed})
    server.capabilities = {"tasks": {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}}
    return server


@pytest.mark.slow
async def test_a_list_that_lies_pages_forever_or_lists_foreign_ids_changes_no_outcome(
    temporal_env: Any, tmp_path: Path
) -> None:
    kinds = ("lies", "pages", "foreign")
    state: dict[str, Any] = {}
    servers = {k: _scripted(k, state) for k in kinds}
    for s in servers.values():
        threading.Thread(target=s.serve_forever, daemon=True).start()
    queue = unique("list-hostile")
    try:
        async with in_process(temporal_env.client, queue, {k: {"url": s.url} for k, s in servers.items()}) as acts:
            handles = {
                k: await start_mcp_task(
                    temporal_env.client,
                    McpTaskRequest(server=k, tool="charge", arguments={}, timeouts=Timeouts(poll_floor_s=1.0)),
                    workflow_id=unique(f"list-{k}"),
                    task_queue=queue,
                )
                for k in kinds
            }
            outs = {k: await asyncio.wait_for(outcome_of(h), 60) for k, h in handles.items()}
            stats = acts.push.stats()
    finally:
        for s in servers.values():
            s.shutdown()
            s.server_close()
    for k in kinds:
        out, srv = outs[k], servers[k]
        assert out.outcome == Outcome.COMPLETED and out.result is not None, (k, out.outcome, out.reason)
        assert srv.calls == 1, (k, srv.calls)  # no tools/call but the one
        assert out.delivered_by == "poll", (k, out.delivered_by)  # the read saw the end, never the list's word
    lists = {k: servers[k].asked.count("tasks/list") for k in kinds}
    # The lie: one wake (its read showed working), never a second for the same status.
    assert await signals(handles["lies"]) == 1
    assert await signals(handles["pages"]) == 0 and await signals(handles["foreign"]) == 0
    # Bounded: a read is at most about MAX_PAGES pages (the floor, one wait), and one cut by a bound is followed by a
    # 30 s backoff.
    assert lists["pages"] <= read_bounds(1)[0], lists
    assert lists["foreign"] <= 2, lists
    states = {v["server"]: (v.get("list") or {}).get("state") for v in stats["sessions"].values()}
    print(
        f"[measured] hostile lists: tasks/list requests {lists}; tasks/get "
        f"{ {k: servers[k].asked.count('tasks/get') for k in kinds} }; reader states {states}",
        flush=True,
    )


@pytest.mark.slow
async def test_the_worker_holding_the_reader_killed_costs_at_most_one_safety_gap(
    temporal_env: Any, tmp_path: Path
) -> None:
    """Two workers on one queue, the TypeScript peer silent: the first reads the session's list (and the second,
    once an attempt of the wait runs there) and is SIGKILLed mid-task. The end is seen within one safety gap: the
    stretch (4) × the wait's gap (pollInterval 2 s), plus the wake's slack; one tools/call."""
    address, queue = address_of(temporal_env), unique("list-kill")
    fast = Timeouts(heartbeat_s=2.0, poll_floor_s=0.05, owner_pickup_s=4, submit_s=60)
    safety_gap = 4 * POLL_MS / 1000
    with ts_http_peer(tmp_path, poll_ms=POLL_MS, notify=False, name=unique("ts-list-kill")) as peer:
        mark = peer.log_mark()
        cfg = write_config(tmp_path / "w.toml", {"srv": {"url": peer.url}})
        with worker_process(address, queue, cfg) as first:
            handle = await start_mcp_task(
                temporal_env.client,
                McpTaskRequest(
                    server="srv", tool="slow_echo", arguments={"seconds": 20, "text": "survived"}, timeouts=fast
                ),
                workflow_id=unique("list-kill"),
                task_queue=queue,
            )
            await wait_for_view(handle, lambda v: v.phase == Phase.WORKING and v.task_id)
            await until(
                lambda: [x for x in peer.log_since(mark) if x.get("method") == "tasks/list"],
                20,
                "the first worker's tasks/list read",
            )
            with worker_process(address, queue, cfg):
                await asyncio.sleep(5)
                first.kill()
                out = await asyncio.wait_for(outcome_of(handle), 90)
        ended, closed = terminal_at(peer, out.task_id), await closed_at(handle)
        calls = tool_calls(peer, mark, "slow_echo")
    assert out.outcome == Outcome.COMPLETED and out.result is not None, (out.outcome, out.reason)
    assert len(calls) == 1, calls
    assert closed - ended <= safety_gap + WAKE_SLACK_S + 2.0, f"closed {closed - ended:.2f}s after the end"
    print(
        f"[measured] reader's worker killed: closed {closed - ended:.2f}s after the server's end (safety gap "
        f"{safety_gap:g} s), end learned by {out.delivered_by}",
        flush=True,
    )
