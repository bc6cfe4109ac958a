"""McpTaskWorkflow on a real Temporal dev server against the real peers (TS SDK task runtime, fastmcp)."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.worker import Worker

from examples.fanout.workflow import FanOutRequest, FanOutResult, McpFanOutWorkflow
from mcp_temporal_tasks import McpTasksPlugin
from mcp_temporal_tasks.activities.result_store import ResultStore
from mcp_temporal_tasks.protocol.contract import canonical_json
from mcp_temporal_tasks.workflows.client import get_outcome, outcome_of, start_mcp_task
from mcp_temporal_tasks.workflows.mcp_task import McpTaskWorkflow
from mcp_temporal_tasks.workflows.records import McpTaskOutcome, McpTaskRequest, Outcome, Phase, Timeouts
from tests.peers.harness import Peer, ts_http_peer, wait_until
from tests.temporal_harness import (
    FAST,
    TRUSTED,
    address_of,
    in_process_worker,
    keep_history,
    settled_calls,
    tool_calls,
    unique,
    until,
    wait_for_view,
    worker_process,
    write_config,
)


def req(peer: Peer, tool: str, args: dict[str, Any] | None = None, **kw: Any) -> McpTaskRequest:
    return McpTaskRequest(
        server=peer.endpoint, tool=tool, arguments=args or {}, timeouts=kw.pop("timeouts", FAST), **kw
    )


async def run_to_end(client: Client, request: McpTaskRequest, *, queue: str, wid: str | None = None) -> McpTaskOutcome:
    handle = await start_mcp_task(client, request, workflow_id=wid or unique("wf"), task_queue=queue)
    return await asyncio.wait_for(outcome_of(handle), 90)


async def history_len(handle: WorkflowHandle[Any, Any]) -> int:
    return len([e async for e in handle.fetch_history_events()])


# --- outcomes ------------------------------------------------------------------------------------


@pytest.mark.parametrize("peer_name", ["ts_http_stateful", "ts_stdio", "fastmcp_server"])
async def test_completed(
    request: pytest.FixtureRequest, peer_name: str, client: Client, queue: str, worker: Any
) -> None:
    peer: Peer = request.getfixturevalue(peer_name)
    mark = peer.log_mark()
    args = {"seconds": 0.5, "text": f"done-{peer_name}"}
    handle = await start_mcp_task(client, req(peer, "slow_echo", args), workflow_id=unique("ok"), task_queue=queue)
    out = await asyncio.wait_for(outcome_of(handle), 60)
    assert out.outcome == Outcome.COMPLETED
    assert out.result is not None and out.result["content"][0]["text"] == f"done-{peer_name}"
    assert out.result["structuredContent"] == {"echo": f"done-{peer_name}"}
    assert out.task_id and out.task_status == "completed"
    assert out.era == ("2026-07-28" if peer.flavour == "extension" else "2025-11-25")
    assert [a.reason for a in out.operation_attempts] == ["initial"]
    assert out.operation_attempts[0].task_id == out.task_id and out.operation_attempts[0].ended == "completed"
    ledger = out.ledger
    assert ledger.request_digest == "sha256:" + hashlib.sha256(canonical_json(args).encode()).hexdigest()
    assert ledger.task_ids == [out.task_id] and ledger.terminal_state == "completed"
    assert ledger.result_contract and ledger.result_contract["outputSchema"]["required"] == ["echo"]
    assert ledger.sdk_version == "2.3.0" and ledger.protocol_version == out.era
    assert len(tool_calls(peer, mark, "slow_echo")) == 1
    desc = await handle.describe()
    sa = {k.name: v for k, v in desc.typed_search_attributes}
    assert sa["McpOutcome"] == "completed" and sa["McpTaskId"] == out.task_id and sa["McpTool"] == "slow_echo"
    assert sa["McpTaskStatus"] == "completed"
    memo = await desc.memo_value("ledger")
    assert memo["request_digest"] == ledger.request_digest
    if peer_name == "ts_http_stateful":
        await keep_history(handle, "completed_legacy")
    if peer_name == "fastmcp_server":
        await keep_history(handle, "completed_extension")


@pytest.mark.parametrize("peer_name", ["ts_http_stateful", "fastmcp_server"])
async def test_tool_error_429_recovered_and_classified(
    request: pytest.FixtureRequest, peer_name: str, client: Client, queue: str, worker: Any
) -> None:
    peer: Peer = request.getfixturevalue(peer_name)
    handle = await start_mcp_task(client, req(peer, "rate_limited"), workflow_id=unique("429"), task_queue=queue)
    out = await asyncio.wait_for(outcome_of(handle), 60)
    assert out.outcome == Outcome.TOOL_ERROR
    assert out.result is not None and out.result["isError"] is True
    assert out.result["content"][0]["text"] == "HTTP 429 Too Many Requests: rate limit exceeded; retry-after=30"
    assert out.classification is not None and out.classification.value == "retryable"
    assert out.retry_after_s == 30
    # TS stores a tool's isError result as `failed`; the extension as `completed` + isError.
    assert out.task_status == ("failed" if peer.flavour == "legacy" else "completed")
    if peer_name == "ts_http_stateful":
        await keep_history(handle, "tool_error_legacy")
        # Recorded after the task began to fail its workflow (McpTaskError, behind a patch marker).
        await keep_history(handle, "tool_error_legacy_fails_workflow")


@pytest.mark.parametrize("peer_name", ["ts_http_stateless", "fastmcp_server"])
async def test_jsonrpc_failure(
    request: pytest.FixtureRequest, peer_name: str, client: Client, queue: str, worker: Any
) -> None:
    peer: Peer = request.getfixturevalue(peer_name)
    out = await run_to_end(client, req(peer, "rpc_error"), queue=queue)
    assert out.outcome == Outcome.FAILED and out.task_status == "failed"
    assert out.error is not None and out.error.code == -32602
    assert out.error.message.endswith("invalid account id: acct-0")
    assert out.classification is not None and out.classification.value == "input_correctable"
    assert out.result is None


@pytest.mark.parametrize("peer_name", ["ts_http_stateful", "fastmcp_server"])
async def test_cancel_via_workflow_cancellation(
    request: pytest.FixtureRequest, peer_name: str, client: Client, queue: str, worker: Any
) -> None:
    peer: Peer = request.getfixturevalue(peer_name)
    handle = await start_mcp_task(
        client, req(peer, "cancellable", {"seconds": 60}), workflow_id=unique("cx"), task_queue=queue
    )
    view = await wait_for_view(handle, lambda v: v.phase == Phase.WORKING and v.task_id)
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await handle.execute_update(McpTaskWorkflow.approve_replay)  # the validator refuses; nothing in history
    assert "nothing to approve: the task is WORKING" in str(refused.value.cause)
    await handle.cancel()
    out = await asyncio.wait_for(outcome_of(handle), 60)
    assert out.outcome == Outcome.CANCELLED and out.task_status == "cancelled"
    cancels = [line for line in peer.log(method="tasks/cancel") if line.get("taskId") == view.task_id]
    assert len(cancels) == 1
    if peer_name == "ts_http_stateful":
        await keep_history(handle, "cancelled_legacy")


async def test_cancel_after_task_finished_keeps_true_outcome(
    client: Client, queue: str, worker: Any, tmp_path: Path
) -> None:
    # Polls 8 s apart on a server that never notifies: the task completes on the server long before the workflow
    # looks again (a notifying server would have ended the wait at once: tests/test_push.py).
    slow_poll = Timeouts(heartbeat_s=30, poll_floor_s=8, poll_ceiling_s=8)
    with ts_http_peer(tmp_path, notify=False, name="ts-http-silent-late") as silent:
        handle = await start_mcp_task(
            client,
            req(silent, "slow_echo", {"seconds": 0.3, "text": "kept"}, timeouts=slow_poll),
            workflow_id=unique("late"),
            task_queue=queue,
        )
        view = await wait_for_view(handle, lambda v: v.phase == Phase.WORKING and v.task_id)
        # The task has ended at the server (its own line), while the workflow's next poll is seconds away.
        await until(lambda: f"TASK {view.task_id} completed" in silent.stderr_lines, 20, "the task's end at the server")
        await handle.execute_update(McpTaskWorkflow.cancel, "operator changed their mind")
        out = await asyncio.wait_for(outcome_of(handle), 60)
    assert out.outcome == Outcome.COMPLETED, out.reason
    assert out.result is not None and out.result["content"][0]["text"] == "kept"
    assert out.reason and "had already ended" in out.reason


async def test_expired_before_read(ts_http_stateless: Peer, client: Client, queue: str, worker: Any) -> None:
    # The TS runtime purges a task ttl ms after creation even while it still works.
    out = await run_to_end(client, req(ts_http_stateless, "slow_echo", {"seconds": 4}, ttl_s=1.0), queue=queue)
    assert out.outcome == Outcome.EXPIRED, out
    assert out.task_status == "working" and out.result is None
    assert [a.reason for a in out.operation_attempts] == ["initial"]


async def test_forbidden_tool_runs_synchronously(
    ts_http_stateful: Peer, client: Client, queue: str, worker: Any
) -> None:
    mark = ts_http_stateful.log_mark()
    out = await run_to_end(client, req(ts_http_stateful, "forbidden_tool"), queue=queue)
    assert out.outcome == Outcome.COMPLETED and out.task_id is None
    assert out.result is not None and out.result["content"][0]["text"] == "sync ok"
    (call,) = tool_calls(ts_http_stateful, mark, "forbidden_tool")
    assert call["task"] is False


async def test_unknown_server_name_is_rejected(client: Client, queue: str, worker: Any) -> None:
    out = await run_to_end(client, McpTaskRequest(server="nope", tool="x", timeouts=FAST), queue=queue)
    assert out.outcome == Outcome.REJECTED and out.operation_attempts == []
    assert out.error is not None and "unknown MCP server 'nope'" in out.error.message


# --- durability: real worker processes, SIGKILL ----------------------------------------------------


async def test_worker_killed_while_polling(ts_http_stateful: Peer, temporal_env: Any, tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "w.toml", {"legacy": {"url": ts_http_stateful.url}})
    queue = unique("kill-poll")
    address = address_of(temporal_env)
    mark = ts_http_stateful.log_mark()
    text = unique("survives")
    with worker_process(address, queue, cfg) as first:
        handle = await start_mcp_task(
            temporal_env.client,
            McpTaskRequest(server="legacy", tool="slow_echo", arguments={"seconds": 6, "text": text}, timeouts=FAST),
            workflow_id=unique("kp"),
            task_queue=queue,
        )
        view = await wait_for_view(handle, lambda v: v.task_id)
        await asyncio.to_thread(
            wait_until,
            lambda: [line for line in ts_http_stateful.log_since(mark) if line["method"] == "tasks/get"],
            timeout_s=10,
        )
        first.kill()
    with worker_process(address, queue, cfg):
        out = await asyncio.wait_for(outcome_of(handle), 60)
    assert out.outcome == Outcome.COMPLETED and out.task_id == view.task_id
    assert out.result is not None and out.result["content"][0]["text"] == text
    assert len(tool_calls(ts_http_stateful, mark, "slow_echo")) == 1
    # The second process reached the task through the same MCP session, without a new initialize.
    gets = [line for line in ts_http_stateful.log_since(mark) if line.get("taskId") == view.task_id]
    assert len({line["pid"] for line in gets}) == 1 and len({line["session"] for line in gets}) == 1
    await keep_history(handle, "worker_killed_while_polling")


@pytest.mark.parametrize(
    "policy, idempotent, expected, calls",
    [
        ("never", None, Outcome.UNKNOWN_OUTCOME, 1),
        ("if_idempotent", True, Outcome.COMPLETED, 2),
    ],
)
async def test_worker_killed_after_sending_tools_call(
    ts_http_stateful: Peer,
    temporal_env: Any,
    tmp_path: Path,
    policy: str,
    idempotent: bool | None,
    expected: Outcome,
    calls: int,
) -> None:
    cfg = write_config(tmp_path / "w.toml", {"legacy": {"url": ts_http_stateful.url}})
    queue = unique("kill-send")
    address = address_of(temporal_env)
    mark = ts_http_stateful.log_mark()
    with worker_process(address, queue, cfg) as first:
        handle = await start_mcp_task(
            temporal_env.client,
            McpTaskRequest(
                server="legacy",
                tool="slow_sync",
                arguments={"seconds": 4},
                replay=policy,
                idempotent=idempotent,
                timeouts=FAST,
            ),
            workflow_id=unique("ks"),
            task_queue=queue,
        )
        await asyncio.to_thread(wait_until, lambda: tool_calls(ts_http_stateful, mark, "slow_sync"), timeout_s=15)
        first.kill()  # tools/call has reached the server; its reply never will reach anyone
    with worker_process(address, queue, cfg):
        out = await asyncio.wait_for(outcome_of(handle), 60)
    assert out.outcome == expected, out.reason
    assert len(out.operation_attempts) == calls
    assert out.operation_attempts[0].ended == "unknown_outcome"
    if calls == 2:
        assert out.operation_attempts[1].reason == "replay_unknown_outcome"
        assert out.result is not None and out.result["content"][0]["text"] == "slept 4s"
    assert (
        await settled_calls(
            ts_http_stateful, mark, "slow_sync", client=temporal_env.client, workflows=[handle.id], workers_stopped=True
        )
        == calls
    )
    await keep_history(handle, f"unknown_outcome_{policy}")


async def test_stdio_owner_death_ends_lost(ts_stdio: Peer, temporal_env: Any, tmp_path: Path) -> None:
    cfg = write_config(
        tmp_path / "w.toml",
        {"local": {"command": ts_stdio.endpoint.command, "env": {"PEER_LOG": {"env": "MCP_TEST_PEER_LOG_TS_STDIO"}}}},
    )
    queue = unique("stdio")
    address = address_of(temporal_env)
    with worker_process(address, queue, cfg) as first:
        handle = await start_mcp_task(
            temporal_env.client,
            McpTaskRequest(server="local", tool="slow_echo", arguments={"seconds": 30}, timeouts=FAST),
            workflow_id=unique("sd"),
            task_queue=queue,
        )
        await wait_for_view(handle, lambda v: v.task_id and v.phase == Phase.WORKING)
        first.kill()
    with worker_process(address, queue, cfg):
        out = await asyncio.wait_for(outcome_of(handle), 60)
    assert out.outcome == Outcome.LOST, out
    assert out.reason and ("gone" in out.reason or "owns" in out.reason)


# --- services and composition ------------------------------------------------------------------


async def test_start_is_idempotent(fastmcp_server: Peer, client: Client, queue: str, worker: Any) -> None:
    mark = fastmcp_server.log_mark()
    request = req(fastmcp_server, "slow_echo", {"seconds": 1, "text": "once"})
    wid = unique("idem")
    first = await start_mcp_task(client, request, workflow_id=wid, task_queue=queue)
    second = await start_mcp_task(client, request, workflow_id=wid, task_queue=queue)
    assert first.result_run_id == second.result_run_id
    out = await get_outcome(client, wid)
    third = await start_mcp_task(client, request, workflow_id=wid, task_queue=queue)  # after completion
    assert (await outcome_of(third)).task_id == out.task_id
    assert len(tool_calls(fastmcp_server, mark, "slow_echo")) == 1


async def test_fan_out_parent_aggregates_children(fastmcp_server: Peer, client: Client) -> None:
    """The example (examples/fanout/) on the worker it asks for: its own workflow beside ``McpTasksPlugin``, which
    registers McpTaskWorkflow and the activities (and never the example)."""
    tasks = [
        req(fastmcp_server, "slow_echo", {"seconds": 0.3, "text": "a"}),
        req(fastmcp_server, "rate_limited"),
        req(fastmcp_server, "quick_sync", {"text": "b"}),
    ]
    parent, queue = unique("fan"), unique("q-fan")
    async with Worker(
        client,
        task_queue=queue,
        workflows=[McpFanOutWorkflow],
        plugins=[McpTasksPlugin(settings=TRUSTED, register_search_attributes=False)],
    ):
        result = await client.execute_workflow(
            McpFanOutWorkflow.run, FanOutRequest(tasks=tasks), id=parent, task_queue=queue, result_type=FanOutResult
        )
    assert result.counts == {"completed": 2, "tool_error": 1} and not result.all_completed
    assert [o.workflow_id for o in result.outcomes] == [f"{parent}/step-{i}" for i in range(3)]
    assert result.outcomes[1].retry_after_s == 30


async def test_large_result_kept_outside_history(fastmcp_server: Peer, client: Client, queue: str, worker: Any) -> None:
    text = "x" * (300 * 1024)
    handle = await start_mcp_task(
        client, req(fastmcp_server, "quick_sync", {"text": text}), workflow_id=unique("big"), task_queue=queue
    )
    out = await outcome_of(handle)
    assert out.outcome == Outcome.COMPLETED and out.result is None and out.result_ref is not None
    stored = ResultStore.get(out.result_ref.model_dump())
    assert stored["content"][0]["text"] == text
    assert out.result_ref.size > 300 * 1024


async def test_history_is_constant_in_task_duration(
    fastmcp_server: Peer, client: Client, queue: str, worker: Any
) -> None:
    """O(1) history per wait: 5 polls or 40 polls cost the same events."""
    lengths = []
    for seconds in (0.5, 4.0):
        handle = await start_mcp_task(
            client, req(fastmcp_server, "slow_echo", {"seconds": seconds}), workflow_id=unique("len"), task_queue=queue
        )
        assert (await outcome_of(handle)).outcome == Outcome.COMPLETED
        lengths.append(await history_len(handle))
    assert abs(lengths[0] - lengths[1]) <= 2, lengths


async def test_search_attributes_find_outcomes(client: Client, fastmcp_server: Peer, queue: str, worker: Any) -> None:
    out = await run_to_end(client, req(fastmcp_server, "slow_echo", {"seconds": 0.1}), queue=queue)
    query = f"McpOutcome = 'completed' AND McpTaskId = '{out.task_id}'"

    async def listed() -> list[Any]:
        return [wf async for wf in client.list_workflows(query)]

    for _ in range(50):  # visibility is eventually consistent
        rows = await listed()
        if rows:
            break
        await asyncio.sleep(0.1)
    assert [r.id for r in rows] == [out.workflow_id]


async def test_decode_failed_keeps_the_raw_payload(fastmcp_server: Peer, client: Client) -> None:
    """The work finished; its payload breaks the pinned contract: decode_failed, raw kept, never re-run."""
    from mcp_temporal_tasks.activities.activity_io import ServerConfig, ToolPolicy

    queue = unique("contract")
    pinned = ToolPolicy(output_schema={"type": "object", "required": ["receipt"]}, replay="always")
    servers = {"strict": ServerConfig(url=fastmcp_server.url, tools={"slow_echo": pinned})}
    mark = fastmcp_server.log_mark()
    async with in_process_worker(client, task_queue=queue, servers=servers):
        out = await run_to_end(
            client,
            McpTaskRequest(
                server="strict", tool="slow_echo", arguments={"seconds": 0.2, "text": "paid"}, timeouts=FAST
            ),
            queue=queue,
        )
    assert out.outcome == Outcome.DECODE_FAILED and out.task_status == "completed"
    assert out.reason and "'receipt' is a required property" in out.reason
    assert out.raw_payload["structuredContent"] == {"echo": "paid"}
    assert out.ledger.result_contract["outputSchema"]["required"] == ["receipt"]
    assert len(tool_calls(fastmcp_server, mark, "slow_echo")) == 1  # even with replay=always
