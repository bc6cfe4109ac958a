"""The fast tier of a plain call's question (patch ``plain-call-input``): ``McpTaskWorkflow`` on the time-skipping
server with a fake ``start_call`` that asks as the real one does (the relay's signal, the answer read back by query).
The real activity against a real runtime: tests/test_call_input.py."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import pytest
from temporalio import activity
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from mcp_temporal_tasks.activities import mcp_activities as names
from mcp_temporal_tasks.activities.activity_io import LegacyInputRequest, StartCallInput, StartCallOutput
from mcp_temporal_tasks.activities.relay import INPUT_DELIVERED_SIGNAL, INPUT_REQUESTED_SIGNAL, RELAY_STATE_QUERY
from mcp_temporal_tasks.worker.runner import workflow_runner
from mcp_temporal_tasks.workflows.client import outcome_of, start_mcp_task
from mcp_temporal_tasks.workflows.mcp_task import McpTaskWorkflow
from mcp_temporal_tasks.workflows.records import McpTaskRequest, Outcome, Phase
from tests.temporal_harness import wait_for_view
from tests.test_machine_fakes import TIMEOUTS, Fakes, sync, text

pytestmark = pytest.mark.fast

SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}, "who": {"type": "string", "default": "ops"}}}


async def asked(env: WorkflowEnvironment, steer: Any, **request: Any) -> tuple[Any, list[StartCallInput], Any]:
    """One task whose start_call asks one question and answers the call with the answer it got."""
    inputs: list[StartCallInput] = []
    fakes = Fakes()

    @activity.defn(name=names.START_CALL)
    async def start_call(inp: StartCallInput) -> StartCallOutput:
        inputs.append(inp)
        info = activity.info()
        wf = activity.client().get_workflow_handle(info.workflow_id or "", run_id=info.workflow_run_id)
        await wf.signal(
            INPUT_REQUESTED_SIGNAL,
            LegacyInputRequest(
                key="q1", rpc_id=7, method="elicitation/create", params={"message": "ok?", "requestedSchema": SCHEMA}
            ),
        )
        while True:
            answer = ((await wf.query(RELAY_STATE_QUERY)).get("q1") or {}).get("answer")
            if answer is not None:
                break
            await asyncio.sleep(0.1)
        await wf.signal(INPUT_DELIVERED_SIGNAL, "q1")
        return sync(text(json.dumps(answer)))

    queue = f"fast-{uuid.uuid4().hex[:8]}"
    acts = [a for a in fakes.activities() if getattr(a, "__temporal_activity_definition").name != names.START_CALL]
    async with Worker(
        env.client,
        task_queue=queue,
        workflows=[McpTaskWorkflow],
        activities=[*acts, start_call],
        workflow_runner=workflow_runner(),
    ):
        handle = await start_mcp_task(
            env.client,
            McpTaskRequest(server="fake", tool="t", timeouts=TIMEOUTS, **request),
            workflow_id=f"fast-{uuid.uuid4().hex[:8]}",
            task_queue=queue,
        )
        await steer(handle)
        out = await asyncio.wait_for(outcome_of(handle), 30)
    return out, inputs, handle


async def test_answered_with_defaults_then_the_call_goes_on(skipping_env: WorkflowEnvironment) -> None:
    async def answer(handle: Any) -> None:
        view = await wait_for_view(handle, lambda v: v.phase == Phase.INPUT_REQUIRED and v.pending_inputs)
        assert view.pending_inputs[0].requested_schema == SCHEMA and view.task_id is None
        await handle.execute_update(
            McpTaskWorkflow.provide_input, {"q1": {"action": "accept", "content": {"ok": True}}}
        )

    out, inputs, _ = await asked(skipping_env, answer)
    assert out.outcome == Outcome.COMPLETED and len(out.operation_attempts) == 1
    assert json.loads(out.result["content"][0]["text"]) == {"action": "accept", "content": {"ok": True, "who": "ops"}}
    assert inputs[0].input_wait_s == TIMEOUTS.submit_s / 2 and inputs[0].input_timeout_action == "cancel"


async def test_cancelled_while_asking_answers_cancel_and_keeps_the_calls_end(skipping_env: WorkflowEnvironment) -> None:
    async def cancel(handle: Any) -> None:
        await wait_for_view(handle, lambda v: v.phase == Phase.INPUT_REQUIRED)
        await handle.execute_update(McpTaskWorkflow.cancel, "operator said stop")

    out, _, _ = await asked(skipping_env, cancel)
    # The call was already out: it is never abandoned; its question is answered "cancel" and its reply kept.
    assert json.loads(out.result["content"][0]["text"]) == {"action": "cancel"}
    assert len(out.operation_attempts) == 1 and "answered cancel" in (out.reason or "")


async def test_nobody_answers_declined_after_the_bound(skipping_env: WorkflowEnvironment) -> None:
    async def nothing(handle: Any) -> None:
        await wait_for_view(handle, lambda v: v.phase == Phase.INPUT_REQUIRED)

    out, inputs, _ = await asked(skipping_env, nothing, input_timeout_s=1, on_input_timeout="decline")
    assert out.outcome == Outcome.COMPLETED and json.loads(out.result["content"][0]["text"]) == {"action": "decline"}
    assert "nobody answered within 1s" in (out.reason or "") and inputs[0].input_wait_s == 1
