"""INPUT_REQUIRED: a task that asks a person, in either era (``era_rules(era).input_on_result_stream`` says which).

2026-07-28 (``AskInput``): the questions arrive in the task's state, are answered with the ``provide_input`` update (or
declined after the input timeout) and delivered with ``tasks/update``. 2025-11-25 (``Relay``): a relay activity holds
``tasks/result`` open; questions arrive by signal, the answers are read back by query, and the task's end comes with it.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from mcp_temporal_tasks.activities.activity_io import AnswerInput, RelayInput, RelayOutput
    from mcp_temporal_tasks.activities.defs import McpActivityDefs
    from mcp_temporal_tasks.protocol.limits import short_id
    from mcp_temporal_tasks.protocol.tasks import TaskState
    from mcp_temporal_tasks.workflows import decisions
    from mcp_temporal_tasks.workflows.failure_decoding import attempts_text, last_read_failure
    from mcp_temporal_tasks.workflows.options import TASK_STEP, WAIT, read_budget
    from mcp_temporal_tasks.workflows.phases import endings
    from mcp_temporal_tasks.workflows.phases.machine import TaskMachine, abandon, bug
    from mcp_temporal_tasks.workflows.phases.steps import AskInput, Cancel, Ended, Relay, Step
    from mcp_temporal_tasks.workflows.records import Ending, Outcome, PendingInput, Phase, Stage


async def ask_input(mc: TaskMachine, step: AskInput) -> Step:
    """The questions not answered yet put to a person, their answers delivered with ``tasks/update``; then the wait
    goes on (``step.then``), or a cancel, or the ending when the answers could not be delivered."""
    task = step.task
    if mc.state.task_state is None or mc.state.session is None:
        raise bug("ask_input without a task or a session")
    requests = {k: v for k, v in (mc.state.task_state.input_requests or {}).items() if k not in mc.state.answered_keys}
    if not requests:
        return step.then
    mc.state.pending = {k: PendingInput.of(k, r) for k, r in requests.items()}
    mc.enter(Phase.INPUT_REQUIRED, "input_required")
    timeout = mc.req.input_timeout_s or mc.req.timeouts.input_s
    answered = await mc.interruptible_wait(
        lambda: all(k in mc.state.answers for k in mc.state.pending), timeout_s=timeout
    )
    if mc.state.cancel_reason is not None:
        return Cancel(task)
    if not answered:
        if mc.req.on_input_timeout == "cancel":
            mc.state.cancel_reason = f"no answer to input request within {timeout:g}s"
            return Cancel(task)
        for key in mc.state.pending:
            mc.state.answers.setdefault(key, {"action": "decline"})
    responses = {k: mc.state.answers[k] for k in mc.state.pending}
    answering = workflow.now()
    try:
        await workflow.execute_activity_method(
            McpActivityDefs.answer_input,
            AnswerInput(session=mc.state.session, task_id=task.task_id, responses=responses, principal=mc.principal()),
            # tasks/update is retried on every read fault: bounded like a poll, by unreachable_s.
            **mc.config(
                TASK_STEP,
                **read_budget(mc.req.timeouts.unreachable_s),
                summary=f"tasks/update {short_id(task.task_id)}",
            ),
        )
    except ActivityError as err:
        return Ended(_undelivered(task, err, answering))
    mc.state.answered_keys.extend(responses)
    mc.state.pending = {}
    return step.then


def _undelivered(task: TaskState, err: ActivityError, answering: datetime) -> Ending:
    """``tasks/update`` failed for good: the task gone, or the answers' fate unknown."""
    kind, info, last = last_read_failure(err)
    if kind == "TaskNotFound":
        outcome = decisions.not_found_outcome(task.created_at, task.ttl_ms, workflow.now())
        return Ending(
            outcome=outcome,
            stage=Stage.GONE,
            reason="tasks/update answered -32602: the task is gone"
            + (" after its TTL" if outcome == Outcome.EXPIRED else ""),
        )
    # The answers may or may not have arrived; the task is not known to be gone: never a replay.
    return Ending(
        outcome=Outcome.LOST,
        stage=Stage.INPUT,
        error=last,
        reason=(
            f"tasks/update could not deliver the answers ({attempts_text(info, answering)}; last: {kind}: "
            f"{info.get('message', '')}); not replayed: the task may still exist on the server"
        ),
    )


async def relay(mc: TaskMachine, step: Relay) -> Step:
    """2025-11-25 input: a relay activity holds ``tasks/result`` open until the task ends; each question it hands over
    (signal) is put to a person, whose answer (``provide_input``) it reads back (query) and replies on the wire. Ends
    with the payload it brings back, or ``Cancel``."""
    task = step.task
    if mc.state.task_state is None or mc.state.session is None:
        raise bug("relay without a task or a session")
    timeout = mc.req.input_timeout_s or mc.req.timeouts.input_s
    handle = workflow.start_activity_method(
        McpActivityDefs.relay_input,
        RelayInput(
            session=mc.state.session,
            state=mc.state.task_state,
            output_schema=mc.state.output_schema,
            principal=mc.principal(),
            hold_s=timeout + 3600,
        ),
        **mc.config(
            WAIT,
            start_to_close_timeout=timedelta(seconds=timeout + 7200),
            summary=f"tasks/result {short_id(task.task_id)} (relaying input)",
        ),
    )
    while not handle.done():
        await mc.interruptible_wait(lambda: handle.done() or bool(mc.unanswered()))
        if mc.state.cancel_reason is None and mc.unanswered() and not handle.done():
            await _put_to_a_person(mc, handle, timeout)
        if mc.state.cancel_reason is not None and not handle.done():
            await abandon(handle)
            return Cancel(task)
    try:
        out: RelayOutput = await handle
    except ActivityError as err:
        return Ended(endings.lost(err, "input relay failed", Stage.INPUT))
    if out.not_found or out.unreachable or out.payload is None:
        return Ended(endings.unread(mc, not_found=out.not_found, unreachable=out.unreachable or "task unreachable"))
    if out.state is not None:
        mc.state.task_state = out.state
    if out.notified:  # (False in every history from before: the outcome reads as it did)
        mc.state.delivered_by = "notification"
    status = mc.state.task_state.status if mc.state.task_state.terminal else "completed"
    return Ended(endings.from_payload(mc, status, out.payload, Stage.PAYLOAD))


async def _put_to_a_person(mc: TaskMachine, handle: Any, timeout: float) -> None:
    """INPUT_REQUIRED until the relay's questions are answered, declined at the timeout (or the task cancelled)."""
    mc.enter(Phase.INPUT_REQUIRED, "input_required")
    answered = await mc.interruptible_wait(lambda: not mc.unanswered() or handle.done(), timeout_s=timeout)
    if not answered and mc.state.cancel_reason is None and mc.unanswered():
        if mc.req.on_input_timeout == "cancel":
            mc.state.cancel_reason = f"no answer to input request within {timeout:g}s"
        else:
            for key in mc.unanswered():
                mc.state.answers[key] = {"action": "decline"}
    mc.state.pending = {k: v for k, v in mc.state.pending.items() if k not in mc.state.answers}
    if mc.state.cancel_reason is None:
        mc.enter(Phase.WORKING, "working")


__all__ = ["ask_input", "relay"]
