"""The wire layer against the TypeScript SDK 1.32.2 task runtime (2025-11-25), on stdio, stateful HTTP and
stateless HTTP (``ts_peer`` is parametrized over the three). Peer contract: tests/peers/ts/README.md.

The last test of this module scans every TS PEER_LOG and checks that no ``tasks/result`` ever reached the
server before the task was terminal (legacy ``tasks/result`` blocks while a task works).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from mcp_temporal_tasks.activities.wire import (
    EXTENSION,
    LEGACY,
    CapabilityUnavailable,
    JsonRpcError,
    ProcessGone,
    ResultDecodeError,
    SessionGone,
    SessionPool,
    SessionRef,
    TaskNotFound,
    TaskPayload,
    TaskState,
    TaskUnreachable,
    WireSession,
    decode_result,
)
from tests.peers.harness import REPO_ROOT, Peer, poll_until_terminal, read_peer_log, stdio_child_pid

BOGUS = "no-such-task-"
RATE_LIMIT_TEXT = "HTTP 429 Too Many Requests: rate limit exceeded; retry-after=30"


@pytest.fixture(scope="module")
async def ts_client(ts_peer: Peer) -> AsyncIterator[WireSession]:
    """One shared client per TS transport for the read-mostly cases."""
    client = await WireSession.connect(ts_peer.endpoint)
    yield client
    await client.aclose()


async def _connect(peer: Peer, **kw) -> WireSession:
    return await WireSession.connect(peer.endpoint, **kw)


# --- era detection ---------------------------------------------------------------------------------


async def test_era_detected_as_legacy_with_tasks(ts_peer: Peer) -> None:
    mark = ts_peer.log_mark()
    client = await _connect(ts_peer)
    try:
        assert client.era == LEGACY == "2025-11-25"
        assert client.tasks_offered is True
        assert client.capabilities["tasks"]["requests"]["tools"]["call"] == {}
        if ts_peer.transport == "stdio":
            assert client.transport.session_id.startswith("stdio-")  # names the child, never sent
        elif ts_peer.stateful:
            assert client.transport.session_id, "stateful HTTP must hand out an Mcp-Session-Id"
            assert {line["session"] for line in ts_peer.log_since(mark) if line["method"] != "initialize"} <= {
                client.transport.session_id
            }
        else:
            assert client.transport.session_id is None
        methods = [line["method"] for line in ts_peer.log_since(mark)]
        # Not pinned: the 2026-07-28 probe first, which a 2025-11-25 server refuses (the TS HTTP transport before its
        # MCP layer, so its log shows it only on stdio), then initialize; after that nothing its version lacks.
        assert methods.count("initialize") == 1
        assert methods[: methods.index("initialize")] in ([], ["server/discover"]), methods
        assert methods.count("server/discover") <= 1, methods
    finally:
        await client.aclose()


async def test_pinned_legacy_skips_discovery(ts_peer: Peer) -> None:
    mark = ts_peer.log_mark()
    client = await _connect(ts_peer, era=LEGACY)
    try:
        assert (client.era, client.tasks_offered) == (LEGACY, True)
        methods = [line["method"] for line in ts_peer.log_since(mark)]
        assert "server/discover" not in methods
        assert methods[0] == "initialize"
    finally:
        await client.aclose()


async def test_pinning_extension_on_ts_is_capability_unavailable(ts_peer: Peer) -> None:
    mark = ts_peer.log_mark()
    with pytest.raises(CapabilityUnavailable) as info:
        await _connect(ts_peer, era=EXTENSION)
    assert "2026-07-28 pinned" in info.value.message
    # Pinned means pinned: no fallback initialize was attempted.
    assert "initialize" not in [line["method"] for line in ts_peer.log_since(mark)]


# --- outcomes ----------------------------------------------------------------------------------------


async def test_completed_slow_echo_decodes_against_output_schema(ts_peer: Peer, ts_client: WireSession) -> None:
    text = f"hi from {ts_peer.name}"
    started = await ts_client.start("slow_echo", {"seconds": 0.2, "text": text})
    assert started.task is not None and started.result is None and started.task_requested
    assert started.task.status == "working"
    assert started.task.status_message == "sleeping 0.2s"
    assert started.task.poll_interval_ms == 200
    assert started.session.era == LEGACY

    state = await poll_until_terminal(ts_client, started.task.task_id)
    assert state.status == "completed"
    payload = await ts_client.result(state)
    assert payload.error is None and not payload.empty
    assert payload.result["structuredContent"] == {"echo": text}
    assert payload.result["content"] == [{"type": "text", "text": text}]

    schema = (await ts_client.list_tools())["slow_echo"].output_schema
    assert schema is not None and schema["required"] == ["echo"]
    decoded = decode_result(payload.result, schema)
    assert decoded["structuredContent"] == {"echo": text}

    wrong = {"type": "object", "properties": {"echo": {"type": "integer"}}, "required": ["echo"]}
    with pytest.raises(ResultDecodeError) as info:
        decode_result(payload.result, wrong)
    assert info.value.raw == payload.result
    assert "echo" in info.value.message


async def test_tool_error_is_failed_with_stored_is_error_payload(ts_peer: Peer, ts_client: WireSession) -> None:
    started = await ts_client.start("rate_limited", {})
    assert started.task is not None
    state = await poll_until_terminal(ts_client, started.task.task_id)
    assert state.status == "failed"  # the TS runtime keeps the spec's "isError -> failed"
    payload = await ts_client.result(state)
    assert payload.error is None and not payload.empty
    assert payload.result["isError"] is True
    assert payload.result["content"] == [{"type": "text", "text": RATE_LIMIT_TEXT}]
    # isError results are not held to an output schema: the schema describes success.
    assert decode_result(payload.result, {"type": "object", "required": ["echo"]})["isError"] is True


async def test_jsonrpc_error_of_failed_task_comes_back_as_payload(ts_peer: Peer, ts_client: WireSession) -> None:
    started = await ts_client.start("rpc_error", {})
    task_id = started.task.task_id
    state = await poll_until_terminal(ts_client, task_id)
    assert state.status == "failed"
    mark = ts_peer.log_mark()
    payload = await ts_client.result(state)
    assert payload == TaskPayload(error={"code": -32602, "message": "invalid account id: acct-0", "data": None})
    # -32602 from tasks/result is ambiguous ("task not found" vs the tool's own invalid-params error): the
    # client settled it with a tasks/get that found the task.
    after = [(line["method"], line["taskId"]) for line in ts_peer.log_since(mark)]
    assert after == [("tasks/result", task_id), ("tasks/get", task_id)]


# --- cancel ------------------------------------------------------------------------------------------


async def test_cancel_working_task_then_again_is_benign(ts_peer: Peer, ts_client: WireSession) -> None:
    started = await ts_client.start("cancellable", {"seconds": 60})
    task_id = started.task.task_id
    assert started.task.status == "working"

    cancelled = await ts_client.cancel(task_id)
    assert isinstance(cancelled, TaskState) and cancelled.status == "cancelled"
    assert (await ts_client.get(task_id)).status == "cancelled"

    mark = ts_peer.log_mark()
    again = await ts_client.cancel(task_id)  # the server answers -32602 (terminal): benign
    assert again is not None and again.status == "cancelled"
    assert [line["method"] for line in ts_peer.log_since(mark)] == ["tasks/cancel", "tasks/get"]

    # The TS runtime answers tasks/result of a cancelled task with -32603 "no result stored" ...
    with pytest.raises(JsonRpcError) as raw:
        await ts_client.transport.request("tasks/result", {"taskId": task_id})
    assert raw.value.code == -32603
    # ... which result() tolerates as an empty payload.
    assert await ts_client.result(again) == TaskPayload(empty=True)


async def test_cancel_completed_task_keeps_its_true_outcome(ts_client: WireSession) -> None:
    started = await ts_client.start("slow_echo", {"seconds": 0.05, "text": "done"})
    state = await poll_until_terminal(ts_client, started.task.task_id)
    assert state.status == "completed"
    after_cancel = await ts_client.cancel(state.task_id)
    assert after_cancel is not None and after_cancel.status == "completed"
    assert (await ts_client.result(after_cancel)).result["structuredContent"] == {"echo": "done"}


async def test_unknown_task_is_task_not_found(ts_peer: Peer, ts_client: WireSession) -> None:
    for call in (ts_client.get, ts_client.cancel):
        with pytest.raises(TaskNotFound) as info:
            await call(BOGUS + "1")
        assert info.value.code == -32602 and not info.value.retryable
    # A "failed" state for an unknown id: the -32602 of tasks/result is NOT turned into an error payload.
    with pytest.raises(TaskNotFound):
        await ts_client.result(TaskState(task_id=BOGUS + "2", status="failed", era=LEGACY))


async def test_result_of_non_terminal_state_raises_without_sending(ts_peer: Peer, ts_client: WireSession) -> None:
    started = await ts_client.start("cancellable", {"seconds": 60})
    try:
        mark = ts_peer.log_mark()
        for status in ("working", "input_required"):
            with pytest.raises(ValueError, match="terminal"):
                await ts_client.result(started.task.model_copy(update={"status": status}))
        assert ts_peer.log_since(mark) == []
    finally:
        await ts_client.cancel(started.task.task_id)


async def test_list_tasks_contains_created_task(ts_peer: Peer, ts_client: WireSession) -> None:
    started = await ts_client.start("slow_echo", {"seconds": 0.05})
    listed = {t.task_id: t for t in await ts_client.list_tasks()}
    assert started.task.task_id in listed
    assert listed[started.task.task_id].era == LEGACY


# --- expiry ------------------------------------------------------------------------------------------


async def test_expiry_with_short_ttl(ts_stdio: Peer, ts_http_stateful: Peer, ts_http_stateless: Peer) -> None:
    """ttl_ms=1000 is honoured: the task is there and completes, and is purged (TaskNotFound) by ~2.5 s."""

    async def one(peer: Peer) -> tuple[str, float, str]:
        client = await _connect(peer)
        try:
            t0 = time.monotonic()  # before creation: the measured age is never less than the real one
            started = await client.start("slow_echo", {"seconds": 0.1}, ttl_ms=1000)
            assert started.task.ttl_ms == 1000
            seen = started.task.status
            while time.monotonic() - t0 < 2.5:
                try:
                    seen = (await client.get(started.task.task_id)).status
                except TaskNotFound:
                    return peer.name, time.monotonic() - t0, seen
                await asyncio.sleep(0.1)
            pytest.fail(f"{peer.name}: task still there 2.5 s after creation with ttl 1000 ms (last {seen!r})")
        finally:
            await client.aclose()

    results = await asyncio.gather(*(one(p) for p in (ts_stdio, ts_http_stateful, ts_http_stateless)))
    for name, gone_after, last_status in results:
        assert last_status == "completed", name
        assert 0.9 <= gone_after <= 2.5, (name, gone_after)


# --- sessions: attach, fresh connect, stdio ---------------------------------------------------------


async def test_reattach_from_serialised_ref_without_initialize(ts_http_stateful: Peer) -> None:
    peer = ts_http_stateful
    first = await _connect(peer)
    started = await first.start("slow_echo", {"seconds": 0.3, "text": "attached"})
    ref_json = started.session.model_dump_json()
    await first.aclose()  # no DELETE: the session must outlive this client object

    ref = SessionRef.model_validate_json(ref_json)
    assert ref.session_id and ref.era == LEGACY
    mark = peer.log_mark()
    second = await WireSession.attach(ref)
    try:
        state = await poll_until_terminal(second, started.task.task_id)
        assert state.status == "completed"
        payload = await second.result(state)
        assert payload.result["structuredContent"] == {"echo": "attached"}
    finally:
        await second.aclose()
    lines = peer.log_since(mark)
    assert lines, "the re-attached client sent nothing?"
    assert "initialize" not in [line["method"] for line in lines]
    assert {line["session"] for line in lines} == {ref.session_id}


async def test_reattach_from_another_process(ts_http_stateful: Peer) -> None:
    peer = ts_http_stateful
    client = await _connect(peer)
    started = await client.start("cancellable", {"seconds": 60})
    snippet = (
        "import asyncio, json, os, sys\n"
        "from mcp_temporal_tasks.activities.wire import WireSession, SessionRef\n"
        "async def main():\n"
        "    ref = SessionRef.model_validate_json(sys.stdin.read())\n"
        "    client = await WireSession.attach(ref)\n"
        "    state = await client.get(sys.argv[1])\n"
        "    await client.aclose()\n"
        "    print(json.dumps({'pid': os.getpid(), 'status': state.status}))\n"
        "asyncio.run(main())\n"
    )
    mark = peer.log_mark()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        snippet,
        started.task.task_id,
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(started.session.model_dump_json().encode()), 60)
    try:
        assert proc.returncode == 0, err.decode()
        answer = json.loads(out.decode().strip().splitlines()[-1])
        assert answer["status"] == "working"
        theirs = [line for line in peer.log_since(mark) if str(line["id"]).startswith(f"mtt-{answer['pid']}-")]
        assert [line["method"] for line in theirs] == ["tasks/get"]
        assert theirs[0]["session"] == started.session.session_id
    finally:
        assert (await client.cancel(started.task.task_id)).status == "cancelled"
        await client.aclose()


async def test_fresh_connect_loses_tasks_on_stateful_http(ts_http_stateful: Peer) -> None:
    """Why attach exists: a new initialize is a new session, and the task is bound to the old one."""
    owner = await _connect(ts_http_stateful)
    started = await owner.start("slow_echo", {"seconds": 0.1})
    fresh = await _connect(ts_http_stateful)
    try:
        assert fresh.transport.session_id != owner.transport.session_id
        with pytest.raises(TaskNotFound):
            await fresh.get(started.task.task_id)
        assert (await owner.get(started.task.task_id)).task_id == started.task.task_id
    finally:
        await fresh.aclose()
        await owner.aclose()


async def test_fresh_connect_reaches_tasks_on_stateless_http(ts_http_stateless: Peer) -> None:
    owner = await _connect(ts_http_stateless)
    started = await owner.start("slow_echo", {"seconds": 0.1, "text": "shared"})
    await owner.aclose()
    fresh = await _connect(ts_http_stateless)
    try:
        state = await poll_until_terminal(fresh, started.task.task_id)
        assert (await fresh.result(state)).result["structuredContent"] == {"echo": "shared"}
    finally:
        await fresh.aclose()


async def test_attach_stdio_is_task_unreachable(ts_stdio: Peer) -> None:
    client = await _connect(ts_stdio)
    try:
        started = await client.start("cancellable", {"seconds": 60})
        ref = SessionRef.model_validate_json(started.session.model_dump_json())
        mark = ts_stdio.log_mark()
        with pytest.raises(TaskUnreachable):
            await WireSession.attach(ref)
        assert ts_stdio.log_since(mark) == []  # no second child was spawned
        await client.cancel(started.task.task_id)
    finally:
        await client.aclose()


async def test_deleted_session_is_session_gone(ts_http_stateful: Peer) -> None:
    client = await _connect(ts_http_stateful)
    started = await client.start("slow_echo", {"seconds": 0.1})
    ref = started.session
    await client.aclose(terminate=True)  # HTTP DELETE of the session
    again = await WireSession.attach(ref)
    try:
        with pytest.raises(SessionGone) as info:
            await again.get(started.task.task_id)
        assert isinstance(info.value, TaskUnreachable)
        assert info.value.may_have_reached_server is False
    finally:
        await again.aclose()


# --- what gets sent ----------------------------------------------------------------------------------


async def test_plain_fallback_reply_is_a_result(ts_peer: Peer, ts_client: WireSession) -> None:
    mark = ts_peer.log_mark()
    started = await ts_client.start("plain_fallback", {"text": "inline"})
    assert started.task is None
    assert started.task_requested is True
    assert started.result == {"content": [{"type": "text", "text": "inline"}]}
    calls = [line for line in ts_peer.log_since(mark) if line["method"] == "tools/call"]
    assert [(c["tool"], c["task"]) for c in calls] == [("plain_fallback", True)]


async def test_forbidden_tool_is_called_without_task(ts_peer: Peer, ts_client: WireSession) -> None:
    assert (await ts_client.list_tools())["forbidden_tool"].task_support == "forbidden"
    mark = ts_peer.log_mark()
    started = await ts_client.start("forbidden_tool", {})
    assert started.task is None and started.task_requested is False
    assert started.result["content"] == [{"type": "text", "text": "sync ok"}]
    calls = [line for line in ts_peer.log_since(mark) if line["method"] == "tools/call"]
    assert [(c["tool"], c["task"]) for c in calls] == [("forbidden_tool", False)]


async def test_required_tool_without_tasks_offered_is_refused_locally(ts_stdio: Peer) -> None:
    client = await _connect(ts_stdio)
    try:
        client.tasks_offered = False  # as against a server that does not declare tasks.requests.tools.call
        mark = ts_stdio.log_mark()
        with pytest.raises(CapabilityUnavailable, match="requires task execution"):
            await client.start("required_echo", {"text": "x"})
        assert [line for line in ts_stdio.log_since(mark) if line["method"] == "tools/call"] == []
        # An optional tool is then simply called without params.task.
        started = await client.start("slow_echo", {"seconds": 0.05, "text": "sync"})
        assert started.task is None and started.task_requested is False
        assert started.result["structuredContent"] == {"echo": "sync"}
        calls = [line for line in ts_stdio.log_since(mark) if line["method"] == "tools/call"]
        assert [(c["tool"], c["task"]) for c in calls] == [("slow_echo", False)]
    finally:
        await client.aclose()


# --- the pool ----------------------------------------------------------------------------------------


async def _wait_dead(client: WireSession, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while client.alive:
        assert time.monotonic() < deadline, "the killed stdio child was not noticed"
        await asyncio.sleep(0.02)


async def test_pool_reuses_client_per_key(ts_http_stateless: Peer) -> None:
    pool = SessionPool()
    try:
        a = await pool.for_new_call(ts_http_stateless.endpoint, principal="alice", era=None)
        b = await pool.for_new_call(ts_http_stateless.endpoint, principal="alice", era=None)
        c = await pool.for_new_call(ts_http_stateless.endpoint, principal="bob", era=None)
        assert a is b
        assert c is not a
    finally:
        await pool.aclose()


async def test_pool_stdio_child_death(ts_stdio: Peer) -> None:
    pool = SessionPool()
    try:
        mark = ts_stdio.log_mark()
        client = await pool.for_new_call(ts_stdio.endpoint, principal=None, era=None)
        pid = stdio_child_pid(ts_stdio, mark)
        started = await client.start("cancellable", {"seconds": 60})
        pool.track(client, started.task.task_id)
        ref = SessionRef.model_validate_json(started.session.model_dump_json())
        assert ref.owner == pool.owner
        assert await pool.for_task(ref, principal=None) is client  # reachable while the child lives

        os.kill(pid, signal.SIGKILL)
        await _wait_dead(client)
        with pytest.raises(ProcessGone) as gone:  # never written: the child was already gone
            await client.get(started.task.task_id)
        assert gone.value.may_have_reached_server is False
        with pytest.raises(TaskUnreachable):
            await pool.for_task(ref, principal=None)

        mark = ts_stdio.log_mark()
        reopened = await pool.for_new_call(ts_stdio.endpoint, principal=None, era=None)
        assert reopened is not client and reopened.alive
        new_pid = stdio_child_pid(ts_stdio, mark)  # exactly one new child
        assert new_pid != pid
        assert await pool.for_new_call(ts_stdio.endpoint, principal=None, era=None) is reopened
        assert [line["method"] for line in ts_stdio.log_since(mark)].count("initialize") == 1
        # The old task is still unreachable (not "not found"): the new child is not the one that held it.
        with pytest.raises(TaskUnreachable):
            await pool.for_task(ref, principal=None)
        fresh_task = await reopened.start("cancellable", {"seconds": 60})
        assert await pool.for_task(fresh_task.session, principal=None) is reopened
        await reopened.cancel(fresh_task.task.task_id)
    finally:
        await pool.aclose()


async def test_pool_stdio_ref_of_another_process_is_unreachable(ts_stdio: Peer) -> None:
    pool = SessionPool(owner="this-process")
    try:
        await pool.for_new_call(ts_stdio.endpoint, principal=None, era=None)
        ref = SessionRef(endpoint=ts_stdio.endpoint, era=LEGACY, protocol_version=LEGACY, owner="other-process")
        with pytest.raises(TaskUnreachable, match="other-process"):
            await pool.for_task(ref, principal=None)
    finally:
        await pool.aclose()


async def test_pool_idle_close(ts_http_stateful: Peer, ts_stdio: Peer) -> None:
    pool = SessionPool(idle_s=0.1)
    try:
        http = await pool.for_new_call(ts_http_stateful.endpoint, principal=None, era=None)
        stdio = await pool.for_new_call(ts_stdio.endpoint, principal=None, era=None)
        started = await stdio.start("cancellable", {"seconds": 60})
        pool.track(stdio, started.task.task_id)
        await asyncio.sleep(0.25)
        http_again = await pool.for_new_call(ts_http_stateful.endpoint, principal=None, era=None)
        assert http_again is not http
        assert http.transport.closed, "an idle HTTP client must be closed"
        # A stdio child holding an unfinished task is kept even when idle: closing it would kill the task.
        assert stdio.alive
        assert await pool.for_new_call(ts_stdio.endpoint, principal=None, era=None) is stdio
        await stdio.cancel(started.task.task_id)
        pool.track(stdio, started.task.task_id, done=True)
        await asyncio.sleep(0.25)
        await pool.for_new_call(ts_http_stateful.endpoint, principal=None, era=None)  # sweeps
        assert not stdio.alive, "an idle stdio child without tasks must be closed"
    finally:
        await pool.aclose()


# --- the invariant that must hold after all of the above --------------------------------------------


async def test_no_tasks_result_before_terminal(
    peer_logs: Path, ts_stdio: Peer, ts_http_stateful: Peer, ts_http_stateless: Peer
) -> None:
    """Every ``tasks/result`` any test sent to a TS peer arrived when the task was already terminal.

    Runs last in this module to scan everything above (and whatever ran earlier in the session against the
    same peers); it also makes a few calls itself so it is not vacuous when run alone. ``input_required`` is
    the one non-terminal status the spec allows (to receive queued input requests; the input relay uses it):
    this module never causes it, so here every line must show a terminal status.
    """
    for peer in (ts_stdio, ts_http_stateful, ts_http_stateless):
        client = await _connect(peer)
        try:
            for tool, args in (("slow_echo", {"seconds": 0.1}), ("rate_limited", {}), ("rpc_error", {})):
                started = await client.start(tool, args)
                await client.result(await poll_until_terminal(client, started.task.task_id))
            started = await client.start("cancellable", {"seconds": 60})
            await client.result(await client.cancel(started.task.task_id))
        finally:
            await client.aclose()

    checked = 0
    for log in sorted(peer_logs.glob("ts-*.jsonl")):
        for line in read_peer_log(log):
            if line.get("method") != "tasks/result" or str(line["taskId"]).startswith(BOGUS):  # (event lines too)
                continue
            if line["statusAtReceipt"] == "input_required":
                continue  # spec-legal; not produced by this module
            checked += 1
            assert line["statusAtReceipt"] in ("completed", "failed", "cancelled"), (log.name, line)
    assert checked >= 12
