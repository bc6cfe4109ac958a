"""The fast tier of MRTR (SEP-2322, patch ``mrtr-continuation``): ``McpTaskWorkflow`` on the time-skipping server with
a fake ``start_call`` that answers ``tools/call`` with input requests the way a 2026-07-28 server does. The
questions go to a person, the call goes on with the answers and the echoed ``requestState``: one call and its
continuation in ``operation_attempts`` and the ledger, never a replay. The real wire against the suite's own server:
the ``sep-2322-client-request-state`` conformance scenario (tests/test_conformance.py)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from temporalio import activity
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from mcp_temporal_tasks.activities import mcp_activities as names
from mcp_temporal_tasks.activities.activity_io import StartCallInput, StartCallOutput
from mcp_temporal_tasks.protocol.tasks import EXTENSION, InputRequest, StartResult
from mcp_temporal_tasks.worker.runner import workflow_runner
from mcp_temporal_tasks.workflows import decisions
from mcp_temporal_tasks.workflows.client import outcome_of, start_mcp_task
from mcp_temporal_tasks.workflows.mcp_task import McpTaskWorkflow
from mcp_temporal_tasks.workflows.records import McpTaskRequest, Outcome, Phase
from tests.temporal_harness import wait_for_view
from tests.test_machine_fakes import TIMEOUTS, Fakes, session, sync, text

pytestmark = pytest.mark.fast

QUESTION = InputRequest(
    method="elicitation/create",
    params={"message": "sure?", "requestedSchema": {"type": "object", "properties": {"ok": {"type": "boolean"}}}},
)
#: Opaque to the client: bytes that a parse-and-reserialise would change (spacing, key order, a unicode escape).
STATE = '{"z": 1,  "a":"\\u00e9"}'


def asking(state: str | None, key: str = "confirm") -> StartCallOutput:
    return StartCallOutput(
        start=StartResult(
            era=EXTENSION, session=session(EXTENSION), input_requests={key: QUESTION}, request_state=state
        ),
        sdk_version="fake",
    )


async def run_task(env: WorkflowEnvironment, replies: list[StartCallOutput], steer: Any, **request: Any) -> Any:
    inputs: list[StartCallInput] = []

    @activity.defn(name=names.START_CALL)
    async def start_call(inp: StartCallInput) -> StartCallOutput:
        inputs.append(inp)
        return replies[len(inputs) - 1]

    fakes = Fakes()
    queue = f"mrtr-{uuid.uuid4().hex[:8]}"
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
            workflow_id=f"mrtr-{uuid.uuid4().hex[:8]}",
            task_queue=queue,
        )
        await steer(handle)
        out = await asyncio.wait_for(outcome_of(handle), 30)
    return out, inputs


async def answer(handle: Any, response: dict[str, Any]) -> None:
    view = await wait_for_view(handle, lambda v: v.phase == Phase.INPUT_REQUIRED and v.pending_inputs)
    assert [p.key for p in view.pending_inputs] == ["confirm"] and view.pending_inputs[0].message == "sure?"
    await handle.execute_update("provide_input", {"confirm": response})


async def test_two_rounds_then_complete_one_call_and_its_continuations(skipping_env: WorkflowEnvironment) -> None:
    async def steer(handle: Any) -> None:
        await answer(handle, {"action": "accept", "content": {"ok": True}})
        await answer(handle, {"action": "decline"})

    out, inputs = await run_task(skipping_env, [asking(STATE), asking(None), sync(text("done"))], steer)
    assert out.outcome == Outcome.COMPLETED, out
    # The first call carries nothing of MRTR; the second the answer and the state byte for byte; the third (the server
    # sent no state that round) no state at all.
    assert (inputs[0].input_responses, inputs[0].request_state) == (None, None)
    assert inputs[1].input_responses == {"confirm": {"action": "accept", "content": {"ok": True}}}
    assert inputs[1].request_state == STATE
    assert (inputs[2].input_responses, inputs[2].request_state) == ({"confirm": {"action": "decline"}}, None)
    attempts = [(a.n, a.reason, a.ended, a.continues) for a in out.operation_attempts]
    assert attempts == [
        (1, "initial", "input_required", None),
        (2, "input_response", "input_required", 1),
        (3, "input_response", "completed", 2),
    ]
    assert out.ledger.input_rounds == 2
    assert decisions.replays_used([a.reason for a in out.operation_attempts]) == 0


async def test_cancelled_while_asked_the_call_is_not_continued(skipping_env: WorkflowEnvironment) -> None:
    async def steer(handle: Any) -> None:
        await wait_for_view(handle, lambda v: v.phase == Phase.INPUT_REQUIRED and v.pending_inputs)
        await handle.execute_update("cancel", "changed my mind")

    out, inputs = await run_task(skipping_env, [asking(STATE), sync(text("never"))], steer)
    assert out.outcome == Outcome.CANCELLED and "not continued" in (out.reason or ""), out
    assert len(inputs) == 1


def test_replays_used_counts_replays_only() -> None:
    assert decisions.replays_used(["initial", "input_response", "replay_lost", "input_response"]) == 1
    assert decisions.replays_used(["initial"]) == 0
