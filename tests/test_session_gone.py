"""A session gone is not a task gone (activities/wire/pool.py ``SessionPool.read_task``), on real servers.

When a server answers 404 to a task's ``Mcp-Session-Id``, the read is asked again in a new session, and only the
server's answer there decides. The TypeScript SDK and the official Python SDK 1.30 scope tasks to sessions
(``-32602``: gone, the wait ends as before). No runtime here keeps tasks across sessions, so that answer (the task,
read in the new session, and the wait goes on) comes from a scripted server of ours; so does a server that refuses
the new session too, which says nothing about the task: a read fault, never "gone".
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from mcp_temporal_tasks.activities.wire import Endpoint, SessionPool, TaskNotFound, TransportError
from mcp_temporal_tasks.protocol.tasks import LEGACY, SessionRef
from mcp_temporal_tasks.protocol.wire_errors import SessionGone, TaskUnreachable, is_read_fault
from tests.peers.harness import Peer
from tests.scripted_mcp import ScriptedMcp, scripted_mcp, task


async def _task_on_a_session_then_gone(peer: Peer, pool: SessionPool) -> tuple[SessionRef, str]:
    """A task started on a pooled session, whose session the server is then told to forget (DELETE)."""
    client = await pool.for_new_call(Endpoint(url=peer.url), principal=None, era=None)
    start = await client.start("slow_echo", {"seconds": 30, "text": "still here"})
    assert start.task is not None and start.session.session_id
    await client.aclose(terminate=True)
    return start.session, start.task.task_id


async def test_on_a_server_that_scopes_tasks_to_sessions_the_new_sessions_answer_ends_it(
    ts_http_stateful: Peer,
) -> None:
    pool = SessionPool()
    try:
        ref, task_id = await _task_on_a_session_then_gone(ts_http_stateful, pool)
        mark = ts_http_stateful.log_mark()
        with pytest.raises(TaskNotFound):
            await pool.read_task(ref, principal=None, fn=lambda s: s.get(task_id))
    finally:
        await pool.aclose()
    # The old session's 404 comes before the server's JSON-RPC layer (unlogged); then a handshake and the same read
    # in the new session, whose -32602 decided.
    assert [line.get("method") for line in ts_http_stateful.log_since(mark)] == ["initialize", "tasks/get"]


async def test_the_official_python_sdk_scopes_tasks_to_sessions_too(py1_http: Peer) -> None:
    pool = SessionPool()
    try:
        ref, task_id = await _task_on_a_session_then_gone(py1_http, pool)
        with pytest.raises(TaskNotFound):
            await pool.read_task(ref, principal=None, fn=lambda s: s.get(task_id))
    finally:
        await pool.aclose()


@pytest.fixture
def scripted() -> Iterator[ScriptedMcp]:
    with scripted_mcp({"tasks/get": lambda m, p: task(p["taskId"])}) as server:  # a task that keeps working
        yield server


async def _ref_then_forgotten(scripted: ScriptedMcp) -> SessionRef:
    pool = SessionPool()
    client = await pool.for_new_call(Endpoint(url=scripted.url), principal=None, era=LEGACY)
    ref = client.session_ref()
    await client.aclose(terminate=True)
    await pool.aclose()
    return ref


async def test_on_a_server_that_keeps_tasks_across_sessions_the_wait_goes_on_in_the_new_one(
    scripted: ScriptedMcp,
) -> None:
    ref = await _ref_then_forgotten(scripted)
    pool = SessionPool()
    try:
        session, state = await pool.read_task(ref, principal=None, fn=lambda s: s.get("t-1"))
        assert state.task_id == "t-1" and state.status == "working"
        assert session.transport.session_id not in (None, ref.session_id)
        del scripted.asked[:]
        again, state = await pool.read_task(ref, principal=None, fn=lambda s: s.get("t-1"))
        assert again is session and state.status == "working"  # this process reads it there from now on
    finally:
        await pool.aclose()
    assert scripted.asked == ["tasks/get"]


async def test_a_server_that_refuses_the_new_session_too_is_a_read_fault_never_gone(scripted: ScriptedMcp) -> None:
    ref = await _ref_then_forgotten(scripted)
    scripted.refuse_new_sessions = True
    pool = SessionPool()
    try:
        with pytest.raises(Exception) as caught:
            await pool.read_task(ref, principal=None, fn=lambda s: s.get("t-1"))
    finally:
        await pool.aclose()
    exc = caught.value
    assert not isinstance(exc, (SessionGone, TaskUnreachable, TaskNotFound)), repr(exc)
    assert isinstance(exc, TransportError) or is_read_fault(exc), repr(exc)
    assert scripted.asked[-2:] == ["tasks/get", "initialize"], scripted.asked
