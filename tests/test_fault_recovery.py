"""Recovery from crashes and persistent faults, with real parts only.

A real Temporal dev server (the harness's, or one of our own on SQLite), the real peers (TS SDK 2025-11-25 era,
fastmcp 2026-07-28 era), real ``mcp-tasks worker`` processes that are SIGKILLed mid-phase, and the
fault-injecting :class:`~tests.faults.FaultProxy` between worker and server.

Every test asserts three things: the outcome, how many ``tools/call`` the *server* received (its PEER_LOG, or
what the proxy forwarded), and that the workflow ended within a stated bound (heartbeat timeout + the fault's
own duration + slack): far below the 300 s a dead worker used to cost. Each measured time is printed as
``[measured] <test>: <seconds>`` (run with ``-s`` to see them).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError, RPCStatusCode

from mcp_temporal_tasks.activities.wire import Endpoint
from mcp_temporal_tasks.worker.devserver import DevServer, free_port
from mcp_temporal_tasks.workflows.client import outcome_of, start_mcp_task
from mcp_temporal_tasks.workflows.mcp_task import McpTaskWorkflow
from mcp_temporal_tasks.workflows.records import (
    MAX_ARGUMENTS_BYTES,
    McpTaskOutcome,
    McpTaskRequest,
    Outcome,
    Phase,
    ReplayPolicy,
    RequestTooLarge,
    Timeouts,
)
from tests.faults import FaultProxy, Malformed, Rewrite, Rule, Stall, Status
from tests.peers.harness import Peer
from tests.temporal_harness import (
    REPO_ROOT,
    address_of,
    settled_calls,
    tool_calls,
    unique,
    until,
    wait_for_view,
    worker_process,
    write_config,
)

HEARTBEAT_S = 2.0
#: Worker start (a fresh Python process on shared CPUs), workflow-task hand-over and retry backoff.
SLACK_S = 15.0
STALL_S = 20.0
UNREACHABLE_S = 4.0
KILL = Timeouts(heartbeat_s=HEARTBEAT_S, poll_floor_s=0.05, owner_pickup_s=4, submit_s=60)
UNREACHABLE = Timeouts(
    heartbeat_s=HEARTBEAT_S, poll_floor_s=0.05, owner_pickup_s=4, submit_s=60, unreachable_s=UNREACHABLE_S
)
APPROVE = {"action": "accept", "content": {"account": "acct-7", "approve": True}}
REPLAY_ALWAYS: dict[str, Any] = {"replay": ReplayPolicy.ALWAYS, "idempotent": True}


def held(rule: Rule) -> int:
    """How many replies the rule's :class:`Stall` holds or held: the server had answered each."""
    return rule.fault.held if isinstance(rule.fault, Stall) else 0


def measured(name: str, seconds: float, bound: float) -> None:
    print(f"[measured] {name}: {seconds:.1f}s (bound {bound:.0f}s)", flush=True)


async def history_summary(handle: Any) -> list[str]:
    """Event types and activity failures, for failure messages."""
    out = []
    async for e in handle.fetch_history_events():
        kind = e.WhichOneof("attributes") or "?"
        line = kind.replace("_event_attributes", "")
        if e.HasField("activity_task_failed_event_attributes"):
            line += f" {e.activity_task_failed_event_attributes.failure.message[:200]}"
        if e.HasField("activity_task_timed_out_event_attributes"):
            line += f" {e.activity_task_timed_out_event_attributes.failure.message[:200]}"
        out.append(line)
    return out


def diag(out: McpTaskOutcome, peer: Peer | None = None, mark: int = 0) -> str:
    log = [(x["method"], x.get("tool") or x.get("taskId")) for x in peer.log_since(mark)] if peer else []
    return (
        f"outcome={out.outcome.value} task_status={out.task_status} reason={out.reason!r} "
        f"attempts={[(a.reason, a.ended) for a in out.operation_attempts]} error={out.error} peer_log={log[-30:]}"
    )


async def expect(handle: Any, out: McpTaskOutcome, wanted: Outcome, peer: Peer | None = None, mark: int = 0) -> None:
    """Assert the outcome; on a mismatch, show the reason, the attempts, the peer log and the history."""
    if out.outcome != wanted:
        events = "\n  ".join(await history_summary(handle))
        pytest.fail(f"expected {wanted.value}, got {diag(out, peer, mark)}\nhistory:\n  {events}", pytrace=False)


# --- 1. kill -9 of the worker in each phase ---------------------------------------------------------


@pytest.mark.parametrize("where", ["await_task_read", "retrieve_result"])
async def test_worker_killed_while_retrieving(
    where: str, ts_http_stateful: Peer, temporal_env: Any, tmp_path: Path
) -> None:
    """``tasks/result`` stalls; the worker dies holding it. The next worker reads the payload: completed, 1 call.

    ``await_task_read``: the first read, inside the polling activity. ``retrieve_result``: the first read gets
    a 500, so the workflow runs the RETRIEVING activity alone, and that one's read stalls.
    """
    peer = ts_http_stateful
    address, queue = address_of(temporal_env), unique("kill-retr")
    mark = peer.log_mark()
    text = unique("kept")
    with FaultProxy(peer.url or "") as proxy:
        if where == "retrieve_result":
            proxy.add("tasks/result", Status(500), nth=1, times=1)
            stall = proxy.add("tasks/result", Stall(STALL_S), nth=2, times=1)
        else:
            stall = proxy.add("tasks/result", Stall(STALL_S), nth=1, times=1)
        cfg = write_config(tmp_path / "w.toml", {"legacy": {"url": proxy.url}})
        with worker_process(address, queue, cfg) as first:
            handle = await start_mcp_task(
                temporal_env.client,
                McpTaskRequest(
                    server="legacy", tool="slow_echo", arguments={"seconds": 0.5, "text": text}, timeouts=KILL
                ),
                workflow_id=unique("kr"),
                task_queue=queue,
            )
            await until(lambda: stall.fired == 1, 30, "the stalled tasks/result")
            if where == "retrieve_result":
                view = await handle.query(McpTaskWorkflow.status)
                assert view.phase == Phase.RETRIEVING, view.phase
            await until(lambda: held(stall), 30, "the server's reply to tasks/result, held by the proxy")
            first.kill()
            killed = time.monotonic()
        with worker_process(address, queue, cfg):
            out = await asyncio.wait_for(outcome_of(handle), 90)
            elapsed = time.monotonic() - killed
        n = await settled_calls(
            peer, mark, "slow_echo", client=temporal_env.client, workflows=[handle.id], workers_stopped=True
        )
        forwarded = proxy.forwarded("tools/call")
    bound = HEARTBEAT_S + SLACK_S
    measured(f"kill while retrieving ({where}), from the kill", elapsed, bound)
    await expect(handle, out, Outcome.COMPLETED, peer, mark)
    assert out.result is not None and out.result["content"][0]["text"] == text
    assert n == 1 and forwarded == 1, f"the server received {n} tools/call (proxy forwarded {forwarded})"
    assert elapsed < bound, f"{elapsed:.1f}s after the kill (the stall alone lasts {STALL_S:g}s)"
    assert elapsed < STALL_S, "the stalled read was waited out instead of noticing the dead worker"


async def test_worker_killed_while_cancelling(ts_http_stateful: Peer, temporal_env: Any, tmp_path: Path) -> None:
    """The worker dies while ``tasks/cancel``'s reply is held: the next one settles it, cancelled, 1 call."""
    peer = ts_http_stateful
    address, queue = address_of(temporal_env), unique("kill-cx")
    mark = peer.log_mark()
    with FaultProxy(peer.url or "") as proxy:
        stall = proxy.add("tasks/cancel", Stall(STALL_S), times=1)
        cfg = write_config(tmp_path / "w.toml", {"legacy": {"url": proxy.url}})
        with worker_process(address, queue, cfg) as first:
            handle = await start_mcp_task(
                temporal_env.client,
                McpTaskRequest(server="legacy", tool="cancellable", arguments={"seconds": 60}, timeouts=KILL),
                workflow_id=unique("kc"),
                task_queue=queue,
            )
            view = await wait_for_view(handle, lambda v: v.phase == Phase.WORKING and v.task_id)
            await handle.cancel()
            await until(lambda: held(stall), 30, "the server's reply to tasks/cancel, held by the proxy")
            first.kill()
            killed = time.monotonic()
        with worker_process(address, queue, cfg):
            out = await asyncio.wait_for(outcome_of(handle), 90)
            elapsed = time.monotonic() - killed
        n = await settled_calls(
            peer, mark, "cancellable", client=temporal_env.client, workflows=[handle.id], workers_stopped=True
        )
    bound = HEARTBEAT_S + SLACK_S
    measured("kill while cancelling, from the kill", elapsed, bound)
    await expect(handle, out, Outcome.CANCELLED, peer, mark)
    assert out.task_id == view.task_id and out.task_status == "cancelled", diag(out, peer, mark)
    cancels = [x for x in peer.log_since(mark) if x["method"] == "tasks/cancel" and x.get("taskId") == view.task_id]
    assert cancels, "tasks/cancel never reached the server"
    assert n == 1, f"the server received {n} tools/call"
    assert elapsed < bound and elapsed < STALL_S, f"{elapsed:.1f}s after the kill"


async def test_worker_killed_while_submitting(ts_http_stateful: Peer, temporal_env: Any, tmp_path: Path) -> None:
    """``tools/call`` reached the server, its reply is held, the worker dies: unknown_outcome (default policy)
    after about one heartbeat timeout, never a second call."""
    peer = ts_http_stateful
    address, queue = address_of(temporal_env), unique("kill-sub")
    mark = peer.log_mark()
    with FaultProxy(peer.url or "") as proxy:
        stall = proxy.add("tools/call", Stall(STALL_S), times=1)
        cfg = write_config(tmp_path / "w.toml", {"legacy": {"url": proxy.url}})
        with worker_process(address, queue, cfg) as first:
            handle = await start_mcp_task(
                temporal_env.client,
                McpTaskRequest(
                    server="legacy", tool="slow_echo", arguments={"seconds": 2, "text": "once"}, timeouts=KILL
                ),
                workflow_id=unique("ksub"),
                task_queue=queue,
            )
            await until(
                lambda: held(stall) and len(tool_calls(peer, mark, "slow_echo")),
                30,
                "tools/call at the server, its reply held by the proxy",
            )
            first.kill()
            killed = time.monotonic()
        with worker_process(address, queue, cfg):
            out = await asyncio.wait_for(outcome_of(handle), 90)
            elapsed = time.monotonic() - killed
        n = await settled_calls(
            peer, mark, "slow_echo", client=temporal_env.client, workflows=[handle.id], workers_stopped=True
        )
        forwarded = proxy.forwarded("tools/call")
    bound = HEARTBEAT_S + SLACK_S
    measured("kill while submitting, from the kill", elapsed, bound)
    await expect(handle, out, Outcome.UNKNOWN_OUTCOME, peer, mark)
    assert [a.reason for a in out.operation_attempts] == ["initial"]
    assert n == 1 and forwarded == 1, f"the server received {n} tools/call (proxy forwarded {forwarded})"
    assert elapsed < bound and elapsed < STALL_S, f"{elapsed:.1f}s after the kill (old bound: submit_s, 300 s)"


async def test_worker_killed_while_relaying_input(ts_http_stateful: Peer, temporal_env: Any, tmp_path: Path) -> None:
    """2025-11-25 input relay: the worker dies while the question is outstanding; the answer given through the
    ``provide_input`` update after the restart is applied: completed, 1 call."""
    peer = ts_http_stateful
    address, queue = address_of(temporal_env), unique("kill-input")
    mark = peer.log_mark()
    cfg = write_config(tmp_path / "w.toml", {"legacy": {"url": peer.url}})
    with worker_process(address, queue, cfg) as first:
        handle = await start_mcp_task(
            temporal_env.client,
            McpTaskRequest(server="legacy", tool="ask_user", timeouts=KILL),
            workflow_id=unique("ki"),
            task_queue=queue,
        )
        view = await wait_for_view(handle, lambda v: v.phase == Phase.INPUT_REQUIRED and v.pending_inputs)
        first.kill()
        killed = time.monotonic()
    with worker_process(address, queue, cfg):
        remaining = await asyncio.wait_for(
            handle.execute_update(McpTaskWorkflow.provide_input, {view.pending_inputs[0].key: APPROVE}), 60
        )
        out = await asyncio.wait_for(outcome_of(handle), 90)
        elapsed = time.monotonic() - killed
    n = await settled_calls(
        peer, mark, "ask_user", client=temporal_env.client, workflows=[handle.id], workers_stopped=True
    )
    bound = HEARTBEAT_S + SLACK_S
    measured("kill while relaying input, from the kill", elapsed, bound)
    assert remaining == []
    await expect(handle, out, Outcome.COMPLETED, peer, mark)
    assert out.result is not None and out.result["content"][0]["text"] == "approved account=acct-7"
    assert n == 1, f"the server received {n} tools/call"
    assert elapsed < bound, f"{elapsed:.1f}s after the kill"


# --- 2. persistent faults: never a replay --------------------------------------------------------------


@pytest.mark.parametrize("peer_name", ["ts_http_stateful", "fastmcp_server"])
async def test_garbled_polls_end_lost_not_replayed(
    request: pytest.FixtureRequest, peer_name: str, client: Client, queue: str, worker: Any
) -> None:
    peer: Peer = request.getfixturevalue(peer_name)
    mark = peer.log_mark()
    with FaultProxy(peer.url or "") as proxy:
        rule = proxy.add("tasks/get", Malformed(), times=10_000)
        t0 = time.monotonic()
        handle = await start_mcp_task(
            client,
            McpTaskRequest(
                server=Endpoint(url=proxy.url),
                tool="slow_echo",
                arguments={"seconds": 1},
                timeouts=UNREACHABLE,
                **REPLAY_ALWAYS,
            ),
            workflow_id=unique("garbled"),
            task_queue=queue,
        )
        out = await asyncio.wait_for(outcome_of(handle), 90)
        elapsed = time.monotonic() - t0
        n = await settled_calls(peer, mark, "slow_echo", client=client, workflows=[handle.id])
        forwarded = proxy.forwarded("tools/call")
    bound = UNREACHABLE_S + SLACK_S
    measured(f"garbled tasks/get forever ({peer_name})", elapsed, bound)
    assert rule.fired >= 2, f"only {rule.fired} garbled polls: the fault was not retried"
    await expect(handle, out, Outcome.LOST, peer, mark)
    assert out.reason and "not replayed" in out.reason, out.reason
    assert [a.reason for a in out.operation_attempts] == ["initial"]
    assert n == 1 and forwarded == 1, f"the server received {n} tools/call (proxy forwarded {forwarded})"
    assert UNREACHABLE_S <= elapsed < bound, f"{elapsed:.1f}s"


@pytest.mark.parametrize("replay", ["default", "always"])
async def test_unreadable_result_is_result_unavailable(
    replay: str, ts_http_stateful: Peer, client: Client, queue: str, worker: Any
) -> None:
    """The server says completed; ``tasks/result`` answers 500 until the task's TTL: result_unavailable."""
    peer = ts_http_stateful
    mark = peer.log_mark()
    extra = REPLAY_ALWAYS if replay == "always" else {}
    ttl_s = 6.0
    with FaultProxy(peer.url or "") as proxy:
        rule = proxy.add("tasks/result", Status(500), times=10_000)
        t0 = time.monotonic()
        handle = await start_mcp_task(
            client,
            McpTaskRequest(
                server=Endpoint(url=proxy.url),
                tool="slow_echo",
                arguments={"seconds": 0.5},
                ttl_s=ttl_s,
                timeouts=UNREACHABLE,
                **extra,
            ),
            workflow_id=unique("unread"),
            task_queue=queue,
        )
        out = await asyncio.wait_for(outcome_of(handle), 90)
        elapsed = time.monotonic() - t0
        n = await settled_calls(peer, mark, "slow_echo", client=client, workflows=[handle.id])
        forwarded = proxy.forwarded("tools/call")
    bound = ttl_s + SLACK_S
    measured(f"tasks/result 500 forever, ttl {ttl_s:g}s (replay {replay})", elapsed, bound)
    assert rule.fired >= 2, f"only {rule.fired} reads: retrieval was not retried"
    await expect(handle, out, Outcome.RESULT_UNAVAILABLE, peer, mark)
    assert out.task_status == "completed"
    assert out.reason and "not replayed" in out.reason, out.reason
    assert [a.reason for a in out.operation_attempts] == ["initial"]
    assert n == 1 and forwarded == 1, f"the server received {n} tools/call (proxy forwarded {forwarded})"
    assert elapsed < bound, f"{elapsed:.1f}s"


@pytest.mark.parametrize("peer_name", ["ts_http_stateful", "fastmcp_server"])
async def test_server_down_mid_task_ends_lost_not_replayed(
    request: pytest.FixtureRequest, peer_name: str, client: Client, queue: str, worker: Any
) -> None:
    peer: Peer = request.getfixturevalue(peer_name)
    mark = peer.log_mark()
    down_s = 3 * UNREACHABLE_S
    with FaultProxy(peer.url or "") as proxy:
        handle = await start_mcp_task(
            client,
            McpTaskRequest(
                server=Endpoint(url=proxy.url),
                tool="slow_echo",
                arguments={"seconds": 20},
                timeouts=UNREACHABLE,
                **REPLAY_ALWAYS,
            ),
            workflow_id=unique("down"),
            task_queue=queue,
        )
        await wait_for_view(handle, lambda v: v.phase == Phase.WORKING and v.task_id)
        await until(lambda: proxy.forwarded("tasks/get") >= 1, 20, "a first tasks/get")
        proxy.down(down_s)
        t0 = time.monotonic()
        out = await asyncio.wait_for(outcome_of(handle), 90)
        elapsed = time.monotonic() - t0
        n = await settled_calls(peer, mark, "slow_echo", client=client, workflows=[handle.id])
        forwarded = proxy.forwarded("tools/call")
    bound = UNREACHABLE_S + SLACK_S
    measured(f"server down {down_s:g}s mid-task ({peer_name}), from the outage", elapsed, bound)
    await expect(handle, out, Outcome.LOST, peer, mark)
    assert out.reason and "not replayed" in out.reason, out.reason
    assert [a.reason for a in out.operation_attempts] == ["initial"]
    assert n == 1 and forwarded == 1, f"the server received {n} tools/call (proxy forwarded {forwarded})"
    assert UNREACHABLE_S <= elapsed < bound, f"{elapsed:.1f}s"


# --- 3. inputs that do not validate ----------------------------------------------------------------------


async def test_raw_input_with_a_typo_is_rejected(fastmcp_server: Peer, client: Client, queue: str, worker: Any) -> None:
    """Another SDK starts the workflow by name with a misspelt field: rejected at once, naming it."""
    mark = fastmcp_server.log_mark()
    t0 = time.monotonic()
    handle = await client.start_workflow(
        "McpTaskWorkflow",
        {"server": {"url": fastmcp_server.url}, "tool": "slow_echo", "argumnts": {}},
        id=unique("raw"),
        task_queue=queue,
        result_type=McpTaskOutcome,
    )
    out = await asyncio.wait_for(outcome_of(handle), 30)
    elapsed = time.monotonic() - t0
    n = await settled_calls(fastmcp_server, mark, "slow_echo", client=client, workflows=[handle.id])
    bound = 10.0
    measured("raw input with a typo'd field", elapsed, bound)
    assert isinstance(out, McpTaskOutcome)
    await expect(handle, out, Outcome.REJECTED, fastmcp_server, mark)
    assert out.reason and "argumnts" in out.reason, out.reason
    assert out.error is not None and "argumnts" in out.error.message
    assert out.operation_attempts == []
    assert n == 0 and not [x for x in fastmcp_server.log_since(mark) if x["method"] == "tools/call"]
    assert elapsed < bound, f"{elapsed:.1f}s"


@pytest.mark.parametrize("size", ["1MiB", "limit+1"])
async def test_oversized_arguments_refused_before_start(size: str, fastmcp_server: Peer, client: Client) -> None:
    """1 MiB is over the limit (512 KiB: Temporal's per-payload warning); ``limit+1`` is just over whatever
    :data:`MAX_ARGUMENTS_BYTES` says now."""
    wid = unique("big-args")
    mark = fastmcp_server.log_mark()
    text = "x" * (1024 * 1024 if size == "1MiB" else MAX_ARGUMENTS_BYTES + 1)
    request = McpTaskRequest(server=fastmcp_server.endpoint, tool="slow_echo", arguments={"text": text})
    try:
        # A queue no worker serves: should the refusal regress, the stray workflow never runs the tool.
        with pytest.raises(RequestTooLarge) as refused:
            await start_mcp_task(client, request, workflow_id=wid, task_queue=unique("nobody"))
    finally:
        with contextlib.suppress(RPCError):
            await client.get_workflow_handle(wid).terminate("test: an oversized request must never start")
    assert len(tool_calls(fastmcp_server, mark, "slow_echo")) == 0
    assert str(MAX_ARGUMENTS_BYTES) in str(refused.value)
    with pytest.raises(RPCError) as missing:
        await client.get_workflow_handle(wid).describe()
    assert missing.value.status == RPCStatusCode.NOT_FOUND


# --- 4. a 10 KB task id ----------------------------------------------------------------------------------


class AliasingProxy(FaultProxy):
    """Gives every task a ``length``-character alias: replies carry the alias instead of the real task id,
    and requests (bodies and headers, ``Mcp-Name`` included) carrying an alias are mapped back to the real id.

    Built on the public ``Rewrite`` fault for replies; only the request direction reaches into the proxy's
    ``_serve`` (tests/faults/proxy.py has no request rewriting and belongs to another suite).
    """

    def __init__(self, upstream: str, *, length: int = 10_000) -> None:
        super().__init__(upstream)
        self.length = length
        self.alias_of: dict[str, str] = {}
        self.real_of: dict[str, str] = {}
        self.mapped_requests = 0
        self.add("*", Rewrite(self._rewrite_reply), times=10**9)

    def _alias(self, real: str) -> str:
        if real in self.real_of:  # already an alias
            return real
        if real not in self.alias_of:
            stem = "".join(c for c in real if c.isalnum()) or "t"
            alias = (f"alias{len(self.alias_of)}x{stem}" + "A" * self.length)[: self.length]
            self.alias_of[real] = alias
            self.real_of[alias] = real
        return self.alias_of[real]

    def _walk(self, node: Any) -> Any:
        if isinstance(node, dict):
            return {
                k: (self._alias(v) if k == "taskId" and isinstance(v, str) else self._walk(v)) for k, v in node.items()
            }
        if isinstance(node, list):
            return [self._walk(x) for x in node]
        return node

    def _rewrite_reply(self, message: dict[str, Any]) -> dict[str, Any]:
        return self._walk(message)

    async def _serve(self, req: Any, writer: Any) -> bool:
        for alias, real in list(self.real_of.items()):
            if alias.encode() in req.body or any(alias in v for _, v in req.headers):
                req.body = req.body.replace(alias.encode(), real.encode())
                req.headers = [(k, v.replace(alias, real)) for k, v in req.headers]
                self.mapped_requests += 1
        return await super()._serve(req, writer)


async def test_ten_kilobyte_task_id(fastmcp_server: Peer, client: Client, queue: str, worker: Any) -> None:
    peer = fastmcp_server
    mark = peer.log_mark()
    text = unique("long-id")
    with AliasingProxy(peer.url or "") as proxy:
        t0 = time.monotonic()
        handle = await start_mcp_task(
            client,
            McpTaskRequest(
                server=Endpoint(url=proxy.url), tool="slow_echo", arguments={"seconds": 1, "text": text}, timeouts=KILL
            ),
            workflow_id=unique("longid"),
            task_queue=queue,
        )
        out = await asyncio.wait_for(outcome_of(handle), 90)
        elapsed = time.monotonic() - t0
        n = await settled_calls(peer, mark, "slow_echo", client=client, workflows=[handle.id])
        mapped = proxy.mapped_requests
        (real,) = proxy.alias_of
        alias = proxy.alias_of[real]
    bound = 1 + SLACK_S
    measured("10,000-character task id", elapsed, bound)
    await expect(handle, out, Outcome.COMPLETED, peer, mark)
    assert out.result is not None and out.result["content"][0]["text"] == text
    assert out.task_id == alias and len(out.task_id) == 10_000
    assert mapped >= 1, "no request ever carried the alias"
    assert [x.get("taskId") for x in peer.log_since(mark) if x["method"] == "tasks/get"][-1] == real
    desc = await handle.describe()
    sa = {k.name: v for k, v in desc.typed_search_attributes}
    assert sa["McpTaskId"].startswith("sha256:") and len(sa["McpTaskId"]) == len("sha256:") + 64, sa["McpTaskId"]
    assert sa["McpOutcome"] == "completed"
    assert n == 1, f"the server received {n} tools/call: {diag(out, peer, mark)}"
    assert elapsed < bound, f"{elapsed:.1f}s"


# --- 5. a result store that cannot be written ---------------------------------------------------------


async def test_worker_refuses_unwritable_state_dir(temporal_env: Any, tmp_path: Path) -> None:
    blocker = tmp_path / "a-regular-file"
    blocker.write_text("not a directory\n")
    state_dir = blocker / "state"
    cfg = write_config(tmp_path / "w.toml", {})
    cmd = [
        sys.executable,
        "-m",
        "mcp_temporal_tasks.worker.cli",
        "worker",
        "--address",
        address_of(temporal_env),
        "--task-queue",
        unique("unwritable"),
        "--config",
        str(cfg),
        "--plain-logs",
    ]
    env = {**os.environ, "MCP_TASKS_STATE_DIR": str(state_dir), "PYTHONPATH": str(REPO_ROOT)}
    t0 = time.monotonic()
    proc = await asyncio.to_thread(
        subprocess.run,
        cmd,
        cwd=REPO_ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
    )
    elapsed = time.monotonic() - t0
    bound = 15.0
    measured("worker with an unwritable state dir: exit", elapsed, bound)
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert str(state_dir) in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-4000:]
    assert "ready: polling" not in proc.stderr
    assert elapsed < bound, f"{elapsed:.1f}s"


# --- 6. Temporal itself restarts mid-task (SQLite) ----------------------------------------------------------


async def test_temporal_restart_mid_task(fastmcp_server: Peer, tmp_path: Path) -> None:
    peer = fastmcp_server
    server = DevServer(db=tmp_path / "temporal.db", port=free_port(), ui_port=None)
    await asyncio.to_thread(server.start, timeout_s=90)
    try:
        own = await Client.connect(server.address, data_converter=pydantic_data_converter)
        cfg = write_config(tmp_path / "w.toml", {"ext": {"url": peer.url}})
        queue = unique("restart")
        mark = peer.log_mark()
        text = unique("through-restart")
        with contextlib.ExitStack() as workers:
            first = workers.enter_context(worker_process(server.address, queue, cfg))
            handle = await start_mcp_task(
                own,
                McpTaskRequest(server="ext", tool="slow_echo", arguments={"seconds": 6, "text": text}, timeouts=KILL),
                workflow_id=unique("rs"),
                task_queue=queue,
            )
            view = await wait_for_view(handle, lambda v: v.phase == Phase.WORKING and v.task_id)

            def polls(after: float = 0.0) -> list[dict[str, Any]]:
                return [
                    x
                    for x in peer.log_since(mark)
                    if x["method"] == "tasks/get" and x.get("taskId") == view.task_id and x["ts"] / 1000 > after
                ]

            await until(polls, 20, "a first tasks/get: the wait is under way")
            t0 = time.monotonic()
            await asyncio.to_thread(server.stop)
            down = time.time()  # Temporal's process has exited
            # The outage lasts until the worker's wait has gone on without Temporal: a poll reached the MCP server.
            await until(lambda: polls(after=down), 20, "a tasks/get while Temporal is down")
            await asyncio.to_thread(server.start, timeout_s=90)
            restarted = time.monotonic() - t0
            restarted_worker = False
            if first.proc.poll() is not None:  # the worker gave up on Temporal: start another one
                restarted_worker = True
                workers.enter_context(worker_process(server.address, queue, cfg))
            out = None
            for _ in range(60):
                try:
                    out = await asyncio.wait_for(outcome_of(handle), 90)
                    break
                except RPCError:  # the client's connection is re-established lazily
                    await asyncio.sleep(1)
            elapsed = time.monotonic() - t0
        assert out is not None
        n = await settled_calls(peer, mark, "slow_echo", client=own, workflows=[handle.id], workers_stopped=True)
    finally:
        await asyncio.to_thread(server.stop)
    bound = restarted + HEARTBEAT_S + 6 + SLACK_S
    measured(
        f"Temporal restart mid-task (restart took {restarted:.1f}s, worker restarted: {restarted_worker}), "
        "from the stop",
        elapsed,
        bound,
    )
    assert out.outcome == Outcome.COMPLETED, diag(out, peer, mark)  # (the server is stopped: no history)
    assert out.result is not None and out.result["content"][0]["text"] == text
    assert n == 1, f"the server received {n} tools/call"
    assert restarted < elapsed < bound, f"{elapsed:.1f}s (Temporal was back after {restarted:.1f}s)"
