"""CANCELLING: ``tasks/cancel``, then the task's true end.

A cancel (workflow cancellation or the ``cancel`` update, an input timeout set to cancel, the deadline) sends
``tasks/cancel`` and then reads how the task really ended: a task that had already finished keeps its real outcome.
"""

from __future__ import annotations

from datetime import timedelta
from typing import NoReturn

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from mcp_temporal_tasks.activities.activity_io import AwaitInput, CancelInput, PollSchedule
    from mcp_temporal_tasks.activities.defs import McpActivityDefs as McpActivities  # stubs: names, no wire
    from mcp_temporal_tasks.protocol.tasks import TaskState
    from mcp_temporal_tasks.workflows.failure_decoding import attempts_text, last_read_failure
    from mcp_temporal_tasks.workflows.options import TASK_STEP, WAIT, read_budget
    from mcp_temporal_tasks.workflows.phases.base import TaskMachine, _bug, _Ended, _short
    from mcp_temporal_tasks.workflows.records import Ending, Outcome, Phase, Stage


class CancelPhase(TaskMachine):
    """CANCELLING, from any phase that has a task to cancel."""

    async def _settle_after_cancel(self) -> Ending:
        self._cancelled_by_temporal()
        if self.m.task_state is None or self.m.session is None:
            return Ending(outcome=Outcome.CANCELLED, stage=Stage.CANCELLING, reason=self.m.cancel_reason)
        try:
            await self._cancel_and_settle(self.m.task_state)
        except _Ended as end:
            return end.ending

    async def _cancel_and_settle(self, task: TaskState) -> NoReturn:
        """Send ``tasks/cancel``, then learn how the task really ended. Always raises :class:`_Ended`."""
        if self.m.session is None:
            raise _bug("_cancel_and_settle without a session")
        self._enter(Phase.CANCELLING, "cancelling")
        principal = self._principal()
        asked = workflow.now()
        try:
            out = await workflow.execute_activity_method(
                McpActivities.cancel_task,
                CancelInput(session=self.m.session, job=self._job(), task_id=task.task_id, principal=principal),
                # Retried on every read fault, for as long as a poll would be (at most 5 minutes).
                **self._config(
                    TASK_STEP,
                    **read_budget(min(300.0, self.req.timeouts.unreachable_s)),
                    summary=f"tasks/cancel {_short(task.task_id)}",
                ),
            )
        except ActivityError as err:
            kind, info, last = last_read_failure(err)
            raise _Ended(
                Ending(
                    outcome=Outcome.CANCELLED,
                    stage=Stage.CANCELLING,
                    error=last,
                    reason=(
                        f"{self.m.cancel_reason}; tasks/cancel got no usable answer ({attempts_text(info, asked)}; "
                        f"last: {kind}): the task may still be running on the server"
                    ),
                )
            )
        if out.not_found or out.unreachable:
            raise _Ended(
                Ending(
                    outcome=Outcome.CANCELLED,
                    stage=Stage.CANCELLING,
                    reason=f"{self.m.cancel_reason}; task already gone on the server",
                )
            )
        # Cancellation is cooperative: the task may still have finished first. Read its real end.
        try:
            aw = await workflow.execute_activity_method(
                McpActivities.await_task,
                AwaitInput(
                    session=self.m.session,
                    task_id=task.task_id,
                    principal=principal,
                    poll_floor_s=self.req.timeouts.poll_floor_s,
                    poll_ceiling_s=2.0,
                    output_schema=self.m.output_schema,
                    answered_keys=list(self.m.pending),
                    unreachable_s=min(60.0, self.req.timeouts.unreachable_s),
                    schedule=PollSchedule(age_fraction=0),
                    job=self._job(),
                ),
                **self._config(
                    WAIT,
                    start_to_close_timeout=timedelta(minutes=2),
                    schedule_to_close_timeout=timedelta(minutes=3),
                    summary=f"settle {_short(task.task_id)} after cancel",
                ),
            )
        except ActivityError:
            raise _Ended(
                Ending(
                    outcome=Outcome.CANCELLED,
                    stage=Stage.CANCELLING,
                    reason=f"{self.m.cancel_reason}; final state unknown",
                )
            )
        if aw.state is not None and aw.state.terminal:
            self.m.task_state = aw.state
            if aw.state.status != "cancelled":
                payload = aw.payload if aw.payload is not None else await self._retrieve()
                end = self._ended_from_payload(aw.state.status, payload, Stage.CANCELLING)
                end.ending.reason = f"cancel requested ({self.m.cancel_reason}) but the task had already ended"
                raise end
        elif aw.state is not None:
            self.m.task_state = aw.state
        raise _Ended(Ending(outcome=Outcome.CANCELLED, stage=Stage.CANCELLING, reason=self.m.cancel_reason))
