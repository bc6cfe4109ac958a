"""MRTR (SEP-2322) on a real 2026-07-28 runtime: the official Python SDK's newest line, ``mcp`` 2.3 ``MCPServer``
(``tests/peers/mcp2_server.py``), whose resolvers ask the client and seal ``requestState`` themselves.

A tool that asks one question is two ``tools/call`` at the server, the ledger's one call and its continuation; a
worker SIGKILLed between the answer and the continuation never makes a third.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from temporalio.client import Client

from mcp_temporal_tasks.activities.wire import EXTENSION, WireSession
from mcp_temporal_tasks.workflows.client import outcome_of, start_mcp_task
from mcp_temporal_tasks.workflows.records import McpTaskRequest, Outcome, Phase
from tests.peers.harness import Peer
from tests.temporal_harness import (
    FAST,
    address_of,
    in_process_worker,
    settled_calls,
    tool_calls,
    unique,
    wait_for_view,
    worker_process,
    write_config,
)

YES = {"action": "accept", "content": {"ok": True}}


async def test_the_wire_continues_each_round_with_the_sealed_state(mcp2_http: Peer) -> None:
    mark = mcp2_http.log_mark()
    client = await WireSession.connect(mcp2_http.endpoint)
    try:
        assert (client.era, client.tasks_offered) == (EXTENSION, False)
        first = await client.start("confirm_twice", {})
        assert first.input_requests is not None and first.request_state is not None
        second = await client.start(
            "confirm_twice",
            {},
            input_responses=dict.fromkeys(first.input_requests, YES),
            request_state=first.request_state,
        )
        assert second.input_requests is not None and second.request_state not in (None, first.request_state)
        third = await client.start(
            "confirm_twice",
            {},
            input_responses=dict.fromkeys(second.input_requests, YES),
            request_state=second.request_state,
        )
        assert third.result is not None and third.result["content"][0]["text"] == "answered True then True", third
    finally:
        await client.aclose()
    calls = tool_calls(mcp2_http, mark, "confirm_twice")
    assert [(c["request_state"], bool(c["input_responses"])) for c in calls] == [
        (False, False),
        (True, True),
        (True, True),
    ]
    assert len({c["id"] for c in calls}) == 3  # a new JSON-RPC id for each continuation


async def test_one_question_is_one_call_and_its_continuation(mcp2_http: Peer, client: Client, queue: str) -> None:
    mark = mcp2_http.log_mark()
    async with in_process_worker(client, task_queue=queue):
        handle = await start_mcp_task(
            client,
            McpTaskRequest(server=mcp2_http.endpoint, tool="confirm", timeouts=FAST),
            workflow_id=unique("mrtr-peer"),
            task_queue=queue,
        )
        view = await wait_for_view(handle, lambda v: v.phase == Phase.INPUT_REQUIRED and v.pending_inputs)
        assert view.pending_inputs[0].message == "first question: go on?"
        await handle.execute_update("provide_input", {view.pending_inputs[0].key: YES})
        out = await asyncio.wait_for(outcome_of(handle), 30)
    assert out.outcome == Outcome.COMPLETED and out.result is not None, out
    assert out.result["content"][0]["text"] == "answered True"
    assert [(a.reason, a.continues) for a in out.operation_attempts] == [("initial", None), ("input_response", 1)]
    assert out.ledger.input_rounds == 1 and out.ledger.era == EXTENSION
    assert len(tool_calls(mcp2_http, mark, "confirm")) == 2


async def test_worker_killed_between_the_answer_and_the_continuation_no_third_call(
    mcp2_http: Peer, temporal_env: Any, tmp_path: Path
) -> None:
    cfg = write_config(tmp_path / "w.toml", {"m2": {"url": mcp2_http.url}})
    queue = unique("mrtr-kill")
    address = address_of(temporal_env)
    mark = mcp2_http.log_mark()
    with worker_process(address, queue, cfg) as first:
        handle = await start_mcp_task(
            temporal_env.client,
            McpTaskRequest(server="m2", tool="confirm", timeouts=FAST),
            workflow_id=unique("mrtr-kill"),
            task_queue=queue,
        )
        view = await wait_for_view(handle, lambda v: v.phase == Phase.INPUT_REQUIRED and v.pending_inputs)
        await handle.execute_update("provide_input", {view.pending_inputs[0].key: YES})
        first.kill()  # the answer is in the history; the continuation is scheduled, maybe started, maybe sent
    with worker_process(address, queue, cfg):
        out = await asyncio.wait_for(outcome_of(handle), 90)
    calls = await settled_calls(
        mcp2_http, mark, "confirm", client=temporal_env.client, workflows=[handle.id], workers_stopped=True
    )
    # The continuation is recorded once it may have left (an attempt counts what may have been sent): it went once
    # (completed, or its reply lost with the worker: unknown_outcome), or the worker died before its bytes left
    # (unknown_outcome too: nobody can tell, so it is not resent). Never a third tools/call, never two continuations.
    assert 1 <= calls <= len(out.operation_attempts) <= 2, (calls, out.operation_attempts)
    assert [a.reason for a in out.operation_attempts] == ["initial", "input_response"][: len(out.operation_attempts)]
    assert out.outcome in (Outcome.COMPLETED, Outcome.UNKNOWN_OUTCOME), out
