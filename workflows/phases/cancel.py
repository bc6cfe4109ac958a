"""CANCELLING: ``tasks/cancel``, then the task's true end (a task that had already finished keeps its real outcome).

Reached by the ``cancel`` update, workflow cancellation, an input timeout set to cancel, or the deadline.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from mcp_temporal_tasks.activities.activity_io import AwaitInput, CancelInput, PollSchedule
    from mcp_temporal_tasks.activities.defs import McpActivityDefs
    from mcp_temporal_tasks.protocol.limits import short_id
    from mcp_temporal_tasks.protocol.tasks import SessionRef
    from mcp_temporal_tasks.workflows.failure_decoding import attempts_text, last_read_failure
    from mcp_temporal_tasks.workflows.options import TASK_STEP, WAIT, read_budget
    from mcp_temporal_tasks.workflows.phases import endings
    from mcp_temporal_tasks.workflows.phases.machine import TaskMachine, bug
    from mcp_temporal_tasks.workflows.phases.steps import Cancel, Ended, Retrieve, Step
    from mcp_temporal_tasks.workflows.records import Ending, Outcome, Phase, Stage


def after_temporal_cancel(mc: TaskMachine) -> Step:
    """The workflow was cancelled mid-step (retrieving, answering input): settle the task, keeping its true end."""
    mc.cancelled_by_temporal()
    if mc.state.task_state is None or mc.state.session is None:
        return Ended(Ending(outcome=Outcome.CANCELLED, stage=Stage.CANCELLING, reason=mc.state.cancel_reason))
    return Cancel(mc.state.task_state)


async def cancel(mc: TaskMachine, step: Cancel) -> Step:
    """Send ``tasks/cancel``, then read how the task really ended."""
    if mc.state.session is None:
        raise bug("cancel without a session")
    task = step.task
    mc.enter(Phase.CANCELLING, "cancelling")
    principal = mc.principal()
    asked = workflow.now()
    try:
        out = await workflow.execute_activity_method(
            McpActivityDefs.cancel_task,
            CancelInput(session=mc.state.session, job=mc.job(), task_id=task.task_id, principal=principal),
            # Retried on every read fault, for as long as a poll would be (at most 5 minutes).
            **mc.config(
                TASK_STEP,
                **read_budget(min(300.0, mc.req.timeouts.unreachable_s)),
                summary=f"tasks/cancel {short_id(task.task_id)}",
            ),
        )
    except ActivityError as err:
        kind, info, last = last_read_failure(err)
        return Ended(
            Ending(
                outcome=Outcome.CANCELLED,
                stage=Stage.CANCELLING,
                error=last,
                reason=(
                    f"{mc.state.cancel_reason}; tasks/cancel got no usable answer ({attempts_text(info, asked)}; "
                    f"last: {kind}): the task may still be running on the server"
                ),
            )
        )
    if out.not_found or out.unreachable:
        return Ended(
            Ending(
                outcome=Outcome.CANCELLED,
                stage=Stage.CANCELLING,
                reason=f"{mc.state.cancel_reason}; task already gone on the server",
            )
        )
    return await _settle(mc, step, mc.state.session, principal)


async def _settle(mc: TaskMachine, step: Cancel, session: SessionRef, principal: str | None) -> Step:
    """Cancellation is cooperative: the task may still have finished first. Read its real end."""
    task = step.task
    try:
        aw = await workflow.execute_activity_method(
            McpActivityDefs.await_task,
            AwaitInput(
                session=session,
                task_id=task.task_id,
                principal=principal,
                poll_floor_s=mc.req.timeouts.poll_floor_s,
                poll_ceiling_s=2.0,
                output_schema=mc.state.output_schema,
                answered_keys=list(mc.state.pending),
                unreachable_s=min(60.0, mc.req.timeouts.unreachable_s),
                schedule=PollSchedule(age_fraction=0),
                job=mc.job(),
            ),
            **mc.config(
                WAIT,
                start_to_close_timeout=timedelta(minutes=2),
                schedule_to_close_timeout=timedelta(minutes=3),
                summary=f"settle {short_id(task.task_id)} after cancel",
            ),
        )
    except ActivityError:
        return Ended(
            Ending(
                outcome=Outcome.CANCELLED,
                stage=Stage.CANCELLING,
                reason=f"{mc.state.cancel_reason}; final state unknown",
            )
        )
    if aw.state is not None:
        mc.state.task_state = aw.state
    if aw.state is not None and aw.state.terminal and aw.state.status != "cancelled":
        if aw.payload is None:
            return Retrieve(Stage.CANCELLING)
        return Ended(endings.found_ended(mc, endings.from_payload(mc, aw.state.status, aw.payload, Stage.CANCELLING)))
    return Ended(Ending(outcome=Outcome.CANCELLED, stage=Stage.CANCELLING, reason=mc.state.cancel_reason))


__all__ = ["after_temporal_cancel", "cancel"]
