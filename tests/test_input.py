"""Human input mid-task, durable in both eras, against the real peers.

2026-07-28 (fastmcp): inputRequests in tasks/get, answered with tasks/update.
2025-11-25 (TS SDK): elicitation/create on the stream of tasks/result, relayed by an activity.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowUpdateFailedError

from mcp_temporal_tasks.workflows.client import outcome_of, start_mcp_task
from mcp_temporal_tasks.workflows.mcp_task import McpTaskWorkflow
from mcp_temporal_tasks.workflows.records import McpTaskRequest, Outcome, Phase
from tests.peers.harness import Peer
from tests.temporal_harness import (
    FAST,
    address_of,
    tool_calls,
    unique,
    wait_for_view,
    worker_process,
    write_config,
)

APPROVE = {"action": "accept", "content": {"account": "acct-7", "approve": True}}
PEERS = ["fastmcp_server", "ts_http_stateful", "ts_stdio"]


async def start_ask(client: Client, peer: Peer, queue: str, **kw: Any) -> Any:
    request = McpTaskRequest(server=peer.endpoint, tool="ask_user", timeouts=FAST, **kw)
    return await start_mcp_task(client, request, workflow_id=unique("ask"), task_queue=queue)


def text_of(out: Any) -> str:
    return out.result["content"][0]["text"]


@pytest.mark.parametrize("peer_name", PEERS)
async def test_answer_accepted(
    request: pytest.FixtureRequest, peer_name: str, client: Client, queue: str, worker: Any
) -> None:
    peer: Peer = request.getfixturevalue(peer_name)
    handle = await start_ask(client, peer, queue)
    view = await wait_for_view(handle, lambda v: v.phase == Phase.INPUT_REQUIRED and v.pending_inputs)
    (pending,) = view.pending_inputs
    assert pending.method == "elicitation/create" and pending.message == "Approve payment of 10 EUR?"
    assert pending.requested_schema["required"] == ["approve"]
    for _ in range(50):  # the upsert lands with the workflow task that entered INPUT_REQUIRED
        desc = await handle.describe()
        status = {k.name: v for k, v in desc.typed_search_attributes}.get("McpTaskStatus")
        if status == "input_required":
            break
        await asyncio.sleep(0.1)
    assert status == "input_required"
    remaining = await handle.execute_update(McpTaskWorkflow.provide_input, {pending.key: APPROVE})
    assert remaining == []
    out = await asyncio.wait_for(outcome_of(handle), 60)
    assert out.outcome == Outcome.COMPLETED and text_of(out) == "approved account=acct-7"


@pytest.mark.parametrize("peer_name", ["fastmcp_server", "ts_http_stateful"])
async def test_decline_gives_the_tools_own_outcome(
    request: pytest.FixtureRequest, peer_name: str, client: Client, queue: str, worker: Any
) -> None:
    peer: Peer = request.getfixturevalue(peer_name)
    handle = await start_ask(client, peer, queue)
    view = await wait_for_view(handle, lambda v: v.pending_inputs)
    await handle.execute_update(McpTaskWorkflow.provide_input, {view.pending_inputs[0].key: {"action": "decline"}})
    out = await asyncio.wait_for(outcome_of(handle), 60)
    assert out.outcome == Outcome.COMPLETED and text_of(out) == "declined"


@pytest.mark.parametrize(
    "peer_name, action, expected",
    [
        ("fastmcp_server", "decline", Outcome.COMPLETED),
        ("fastmcp_server", "cancel", Outcome.CANCELLED),
        ("ts_http_stateful", "decline", Outcome.COMPLETED),
        ("ts_http_stateful", "cancel", Outcome.CANCELLED),
    ],
)
async def test_no_answer_in_time(
    request: pytest.FixtureRequest,
    peer_name: str,
    action: str,
    expected: Outcome,
    client: Client,
    queue: str,
    worker: Any,
) -> None:
    peer: Peer = request.getfixturevalue(peer_name)
    handle = await start_ask(client, peer, queue, input_timeout_s=1.5, on_input_timeout=action)
    out = await asyncio.wait_for(outcome_of(handle), 60)
    assert out.outcome == expected, out.reason
    if expected == Outcome.COMPLETED:
        assert text_of(out) == "declined"
    else:
        assert out.reason and "no answer to input request within 1.5s" in out.reason


async def test_invalid_answers_are_rejected_before_history(
    fastmcp_server: Peer, client: Client, queue: str, worker: Any
) -> None:
    handle = await start_ask(client, fastmcp_server, queue)
    view = await wait_for_view(handle, lambda v: v.pending_inputs)
    key = view.pending_inputs[0].key
    for bad, message in [
        ({"nope": APPROVE}, "is not outstanding"),
        ({key: {"action": "maybe"}}, "action must be accept, decline or cancel"),
        ({key: {"action": "accept", "content": {"approve": "yes"}}}, "'yes' is not of type 'boolean'"),
        ({key: {"action": "accept", "content": {"account": "a"}}}, "'approve' is a required property"),
        ({key: {"action": "decline", "content": {"approve": True}}}, "only allowed with action 'accept'"),
    ]:
        with pytest.raises(WorkflowUpdateFailedError) as exc:
            await handle.execute_update(McpTaskWorkflow.provide_input, bad)
        assert message in str(exc.value.cause), (bad, exc.value.cause)
    history = [e async for e in handle.fetch_history_events()]
    assert not any(e.HasField("workflow_execution_update_accepted_event_attributes") for e in history)
    await handle.execute_update(McpTaskWorkflow.provide_input, {key: APPROVE})
    assert (await outcome_of(handle)).outcome == Outcome.COMPLETED


async def test_sampling_is_refused_cleanly(ts_http_stateful: Peer, client: Client, queue: str, worker: Any) -> None:
    handle = await start_mcp_task(
        client,
        McpTaskRequest(server=ts_http_stateful.endpoint, tool="ask_model", timeouts=FAST),
        workflow_id=unique("samp"),
        task_queue=queue,
    )
    out = await asyncio.wait_for(outcome_of(handle), 60)
    assert out.outcome == Outcome.COMPLETED
    assert text_of(out).startswith("sampling refused:") and "not supported by this client" in text_of(out)


@pytest.mark.parametrize("peer_name", ["fastmcp_server", "ts_http_stateful"])
async def test_worker_killed_while_waiting_for_the_human(
    request: pytest.FixtureRequest, peer_name: str, temporal_env: Any, tmp_path: Path
) -> None:
    """The answer given after a restart still reaches the server, exactly once."""
    peer: Peer = request.getfixturevalue(peer_name)
    cfg = write_config(tmp_path / "w.toml", {"p": {"url": peer.url}})
    queue = unique("kill-input")
    address = address_of(temporal_env)
    mark = peer.log_mark()
    with worker_process(address, queue, cfg) as first:
        handle = await start_mcp_task(
            temporal_env.client,
            McpTaskRequest(server="p", tool="ask_user", timeouts=FAST),
            workflow_id=unique("ki"),
            task_queue=queue,
        )
        view = await wait_for_view(handle, lambda v: v.pending_inputs)
        first.kill()
    with worker_process(address, queue, cfg):
        await handle.execute_update(McpTaskWorkflow.provide_input, {view.pending_inputs[0].key: APPROVE})
        out = await asyncio.wait_for(outcome_of(handle), 60)
    assert out.outcome == Outcome.COMPLETED and text_of(out) == "approved account=acct-7"
    assert len(tool_calls(peer, mark)) == 1
    if peer.flavour == "extension":
        updates = [x for x in peer.log_since(mark) if x["method"] == "tasks/update"]
        assert len(updates) == 1
