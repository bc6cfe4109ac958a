"""The wire layer and McpTaskWorkflow against the official Python SDK ``mcp==1.30.0`` task server (2025-11-25
experimental tasks, stateful streamable HTTP): ``tests/peers/py1/server.py``, in its own venv."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from temporalio.client import Client

from mcp_temporal_tasks.activities.activity_io import ServerConfig
from mcp_temporal_tasks.activities.wire import LEGACY, Endpoint, SessionGone, TaskNotFound, WireSession
from mcp_temporal_tasks.workflows.client import outcome_of, start_mcp_task
from mcp_temporal_tasks.workflows.records import McpTaskRequest, Outcome, Timeouts
from tests.peers.harness import Peer, poll_until_terminal, py1_http_peer
from tests.temporal_harness import in_process_worker, unique

RATE_LIMIT_TEXT = "429 Too Many Requests; retry-after=30"


async def _connect(peer: Peer) -> WireSession:
    assert peer.url is not None
    return await WireSession.connect(Endpoint(url=peer.url))


async def test_era_and_completed_task(py1_http: Peer) -> None:
    client = await _connect(py1_http)
    try:
        assert (client.era, client.tasks_offered) == (LEGACY, True) and LEGACY == "2025-11-25"
        assert client.capabilities["tasks"] == {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
        mark = py1_http.log_mark()
        started = await client.start("slow_echo", {"seconds": 0.3, "text": "hi py1"})
        assert started.task is not None and started.result is None and started.task.status == "working"
        assert started.task.poll_interval_ms == 200  # PEER_POLL_MS default, not 1.30's hard-coded 500
        state = await poll_until_terminal(client, started.task.task_id)
        assert (state.status, state.status_message) == ("completed", "sleeping 0.3s")
        payload = await client.result(state)
        assert payload.error is None and payload.result is not None
        assert payload.result["content"] == [{"type": "text", "text": "hi py1"}]
        assert payload.result["structuredContent"] == {"echo": "hi py1"} and payload.result["isError"] is False
        calls = [line for line in py1_http.log_since(mark) if line["method"] == "tools/call"]
        assert [(c["tool"], c["task"], c["session"]) for c in calls] == [
            ("slow_echo", True, client.transport.session_id)
        ]
        assert any(
            line["method"] == "tasks/result" and line["taskId"] == state.task_id for line in py1_http.log_since(mark)
        )
    finally:
        await client.aclose()


async def test_rate_limited_keeps_stored_tool_error(py1_http: Peer) -> None:
    client = await _connect(py1_http)
    try:
        started = await client.start("rate_limited", {})
        assert started.task is not None
        state = await poll_until_terminal(client, started.task.task_id)
        assert state.status == "failed" and RATE_LIMIT_TEXT in (state.status_message or "")
        payload = await client.result(state)  # tasks/result on a failed task: the stored isError result
        assert payload.error is None and payload.result is not None and payload.result["isError"] is True
        assert RATE_LIMIT_TEXT in payload.result["content"][0]["text"]
    finally:
        await client.aclose()


async def test_tasks_list_is_scoped_to_the_session(py1_http: Peer) -> None:
    """1.30 embeds a per-session scope in generated task ids (``<scope hex>:<uuid>``); its default handlers
    list a task only to the session that created it and answer "Task not found" to any other session."""
    first, second = await _connect(py1_http), await _connect(py1_http)
    try:
        started = await first.start("slow_echo", {"seconds": 0.1})
        assert started.task is not None
        task_id = started.task.task_id
        assert task_id in [t.task_id for t in await first.list_tasks()]
        assert first.transport.session_id != second.transport.session_id
        assert task_id not in [t.task_id for t in await second.list_tasks()]
        try:
            await second.get(task_id)
        except TaskNotFound:
            pass
        else:
            raise AssertionError("a second session could read the first session's task")
        await poll_until_terminal(first, task_id)
    finally:
        await first.aclose()
        await second.aclose()


async def test_ending_one_session_stops_task_creation_in_others(tmp_path: Path) -> None:
    """An oddity of 1.30 pinned here: one ``TaskSupport`` (and its ``_task_group``) is shared by all sessions,
    each ``Server.run`` overwrites it and resets it to None when it ends. After any session ends, a task call
    in a session still open gets an isError result instead of a task, until some new session starts."""
    with py1_http_peer(tmp_path, name="py1-http-own") as peer:
        first, second = await _connect(peer), await _connect(peer)
        try:
            await second.aclose(terminate=True)  # DELETE: the second session's Server.run ends
            await asyncio.sleep(0.3)
            started = await first.start("slow_echo", {"seconds": 0.1})
            assert started.task is None and started.result is not None and started.result["isError"] is True
            assert "TaskSupport not running" in started.result["content"][0]["text"]
            third = await _connect(peer)  # a new session installs its task group again
            try:
                again = await first.start("slow_echo", {"seconds": 0.1})
                assert again.task is not None
                await poll_until_terminal(first, again.task.task_id)
            finally:
                await third.aclose()
        finally:
            await first.aclose()


async def test_cancelling_a_running_task_ends_the_session(tmp_path: Path) -> None:
    """Another 1.30 oddity pinned here: ``tasks/cancel`` marks the task cancelled, but ``run_task``'s wrapper
    still calls ``complete()`` when the work returns (its cached status is stale), the store refuses the
    terminal transition with ValueError, ``fail()`` raises it again, and that kills the session: 404."""
    with py1_http_peer(tmp_path, name="py1-http-cancel") as peer:
        client = await _connect(peer)
        try:
            started = await client.start("slow_echo", {"seconds": 0.6})
            assert started.task is not None
            assert (await client.cancel(started.task.task_id)).status == "cancelled"
            await asyncio.sleep(1.0)
            try:
                await client.get(started.task.task_id)
            except SessionGone:
                pass
            else:
                raise AssertionError("the session survived a cancel (has 1.30 changed?)")
            assert any("Cannot transition from terminal status 'cancelled'" in line for line in peer.stderr_lines)
        finally:
            await client.aclose()


async def test_counter_counts_tools_call(py1_http: Peer) -> None:
    client = await _connect(py1_http)
    try:
        before = json.loads((await client.start("counter", {})).result["content"][0]["text"])
        after = json.loads((await client.start("counter", {})).result["content"][0]["text"])
        assert after["counter"] == before["counter"] + 1
    finally:
        await client.aclose()


async def test_workflow_completed(py1_http: Peer, client: Client) -> None:
    """McpTaskWorkflow end to end on a real Temporal dev server, the peer named in the worker's config."""
    queue = unique("py1")
    mark = py1_http.log_mark()
    request = McpTaskRequest(
        server="py1",
        tool="slow_echo",
        arguments={"seconds": 0.5, "text": "wf-py1"},
        timeouts=Timeouts(heartbeat_s=2, poll_floor_s=0.05, owner_pickup_s=4, submit_s=60),
    )
    async with in_process_worker(client, task_queue=queue, servers={"py1": ServerConfig(url=py1_http.url)}):
        handle = await start_mcp_task(client, request, workflow_id=unique("py1-ok"), task_queue=queue)
        out = await asyncio.wait_for(outcome_of(handle), 60)
    assert out.outcome == Outcome.COMPLETED and out.era == "2025-11-25"
    assert out.result is not None and out.result["structuredContent"] == {"echo": "wf-py1"}
    assert out.task_id and out.task_status == "completed"
    assert [a.reason for a in out.operation_attempts] == ["initial"]
    calls = [line for line in py1_http.log_since(mark) if line["method"] == "tools/call"]
    assert [(c["tool"], c["task"]) for c in calls] == [("slow_echo", True)]
