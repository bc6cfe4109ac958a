"""WORKING: following a task the server accepted until it ends or asks for input.

One heartbeating activity per wait (``await_task``) while polls are close together; once the next poll is ≥ 0.8 ×
the heartbeat timeout away, ``poll_task``: one attempt per poll, retried by Temporal at the gap, nothing running in
between. A wait on an old task goes on under a longer heartbeat timeout. A server's notification wakes the wait
(the read that follows decides); a cancel or the deadline ends it (``cancel``). What a read finds leads on:
RETRIEVING for a terminal task (``retrieve``), INPUT_REQUIRED for a task that asks (``input``).
"""

from __future__ import annotations

from datetime import timedelta
from typing import NoReturn

from temporalio import workflow
from temporalio.exceptions import ActivityError, TimeoutError

with workflow.unsafe.imports_passed_through():
    from mcp_temporal_tasks.activities.activity_io import AwaitInput, AwaitOutput, PollSchedule
    from mcp_temporal_tasks.activities.defs import McpActivityDefs as McpActivities  # stubs: names, no wire
    from mcp_temporal_tasks.protocol.tasks import LEGACY, TaskState
    from mcp_temporal_tasks.workflows import decisions
    from mcp_temporal_tasks.workflows.options import IDLE_POLL, LONG_WAIT, WAIT
    from mcp_temporal_tasks.workflows.phases.base import (
        _WOKEN,
        TaskMachine,
        _bug,
        _Ended,
        _short,
        _unusable_note,
        _Woken,
    )
    from mcp_temporal_tasks.workflows.phases.patches import IDLE_WAITS, LONG_WAIT_HEARTBEAT
    from mcp_temporal_tasks.workflows.records import Ending, Outcome, Phase, Stage


class WaitPhase(TaskMachine):
    """WORKING: the two wait modes and what a read leads to."""

    async def _follow(self, task: TaskState) -> NoReturn:
        """WORKING ⇄ INPUT_REQUIRED → RETRIEVING → terminal. Raises :class:`_Ended`."""
        if self.m.session is None:
            raise _bug("_follow without a session")
        timeouts = self.req.timeouts
        # A wait on an old task goes on under a longer heartbeat timeout: one more activity per task, far fewer
        # heartbeats (billable actions, server writes) for the hours it may still take.
        hand_over = timeouts.long_wait_heartbeat_s > timeouts.heartbeat_s
        # Past this gap a poll as an attempt of its own costs less than the heartbeats that would hold it (the SDK
        # sends one per 0.8 × the heartbeat timeout).
        idle_gap = timeouts.idle_gap_s if timeouts.idle_gap_s is not None else 0.8 * timeouts.heartbeat_s
        long_wait = idle = False
        first_poll_at: float | None = None
        #: The wait that follows reads the task because a notification woke the one before (delivered_by).
        woken_read = False
        woken_via: str | None = None
        while True:
            self._enter(Phase.WORKING)
            arg = AwaitInput(
                session=self.m.session,
                task_id=task.task_id,
                principal=self._principal(),
                poll_floor_s=timeouts.poll_floor_s,
                poll_ceiling_s=timeouts.poll_ceiling_s,
                output_schema=self.m.output_schema,
                answered_keys=self.m.answered_keys,
                unreachable_s=timeouts.unreachable_s,
                schedule=self.m.profile.polling if self.m.profile else PollSchedule(),
                job=self._job(),
                submitted_at=self.m.attempts[-1].at.timestamp() if self.m.attempts else None,
                return_after_age_s=timeouts.long_wait_after_s if hand_over and not long_wait else None,
                hand_over_gap_s=idle_gap or None,
                first_poll_at=first_poll_at,
            )
            first_poll_at = None
            if idle and not woken_read:
                waited = await self._wait_idle(
                    arg, summary=f"poll {_short(task.task_id)} until terminal (idle between polls)"
                )
            else:
                # A woken wait reads at once in the heartbeating activity, which polls on, or hands over to the
                # idle one, as any wait does: a notification that lied costs this one read.
                waited = await self._wait_for_task(
                    arg,
                    summary=(
                        f"read {_short(task.task_id)} (notified)"
                        if woken_read
                        else f"poll {_short(task.task_id)} until terminal" + (" (long wait)" if long_wait else "")
                    ),
                    heartbeat_s=timeouts.long_wait_heartbeat_s if long_wait else None,
                )
            if waited is None:
                await self._cancel_and_settle(task)
            if isinstance(waited, _Woken):
                self.m.wake, woken_read, woken_via = None, True, self.m.wake_via
                continue
            aw = waited
            self._after_wait(aw)
            if self.m.task_state is None:
                raise _bug("a wait ended without a task state")
            if self.m.wake is not None and (self.m.task_state.terminal or self.m.task_state.status == self.m.wake):
                self.m.wake = None  # this read already shows what the notification said
            if self.m.task_state.terminal:
                # How the end was learned: the first read after a wake, or a poll of the schedule.
                self.m.delivered_by = (woken_via or "notification") if woken_read and aw.polls <= 1 else "poll"  # type: ignore[assignment]
            woken_read = False
            if aw.idle and workflow.patched(IDLE_WAITS):
                idle, first_poll_at = True, aw.next_poll_at
                continue
            if aw.long_wait and workflow.patched(LONG_WAIT_HEARTBEAT):
                long_wait = True
                continue
            await self._next_phase(task, aw)

    async def _next_phase(self, task: TaskState, aw: AwaitOutput) -> None:
        """Where a read leads: RETRIEVING for a terminal task (its payload read again if the read's own failed) and
        INPUT_REQUIRED for a task asking for input; else (back in WORKING) the wait goes on."""
        if self.m.task_state is None:
            raise _bug("a wait ended without a task state")
        if self.m.task_state.terminal:
            if aw.payload is None:  # read in the same activity failed: retry the retrieval alone
                self.m.ledger.last_retrieval = f"retrying: {aw.retrieval_error}"
            payload = aw.payload if aw.payload is not None else await self._retrieve()
            raise self._ended_from_payload(self.m.task_state.status, payload, Stage.PAYLOAD)
        if self.m.task_state.status == "input_required":
            if self.m.task_state.era == LEGACY:
                await self._legacy_relay(task)  # ends the task: always raises _Ended
            await self._input_required(task)

    def _after_wait(self, aw: AwaitOutput) -> None:
        if aw.state is not None:
            self.m.task_state = aw.state  # the next _enter or _finish shows the new status
            return
        last = self.m.task_state
        if aw.not_found:
            outcome = decisions.not_found_outcome(
                last.created_at if last else None, last.ttl_ms if last else None, workflow.now()
            )
            raise _Ended(
                Ending(
                    outcome=outcome,
                    stage=Stage.GONE,
                    reason="tasks/get answered -32602: the task is gone"
                    + (" after its TTL" if outcome == Outcome.EXPIRED else "")
                    + _unusable_note(last),
                )
            )
        if aw.no_answer is not None:
            # The server may still hold the task: we lost sight of it, it is not known to be gone.
            raise _Ended(
                Ending(
                    outcome=Outcome.LOST,
                    stage=Stage.UNREACHABLE,
                    error=aw.last_error,
                    reason=f"{aw.no_answer}; not replayed: the task may still exist on the server",
                )
            )
        raise _Ended(Ending(outcome=Outcome.LOST, stage=Stage.GONE, reason=aw.unreachable or "task unreachable"))

    async def _wait_for_task(
        self, arg: AwaitInput, *, summary: str, heartbeat_s: float | None = None
    ) -> AwaitOutput | _Woken | None:
        """Poll until the task moves; None if a cancel (or the deadline) came first, :data:`_WOKEN` if a notification
        did (the activity is then cancelled either way)."""
        deadline = self.req.deadline
        budget = (deadline - workflow.now()) if deadline else LONG_WAIT
        config = self._config(WAIT, start_to_close_timeout=max(budget, timedelta(seconds=1)), summary=summary)
        if heartbeat_s:
            config["heartbeat_timeout"] = timedelta(seconds=heartbeat_s)
        handle = workflow.start_activity_method(McpActivities.await_task, arg, **config)
        await self._interruptible_wait(lambda: handle.done() or self.m.wake is not None)
        if self.m.cancel_reason is not None and not handle.done():
            await self._abandon(handle)
            return None
        if self.m.wake is not None and not handle.done():
            await self._abandon(handle)
            return _WOKEN
        try:
            return await handle
        except ActivityError as err:
            if isinstance(err.cause, TimeoutError) and deadline and workflow.now() >= deadline:
                self.m.cancel_reason = "deadline exceeded"
                return None
            raise self._lost(err, "could not follow the task", Stage.UNREACHABLE)

    async def _wait_idle(self, arg: AwaitInput, *, summary: str) -> AwaitOutput | _Woken | None:
        """Poll with nothing running between polls (``poll_task``); None if a cancel or the deadline came first,
        :data:`_WOKEN` if a notification did (the pending attempt is cancelled: Temporal does it at once).

        A cancel cancels the activity wherever it is: between two attempts Temporal cancels it at once, so the cancel
        reaches the server without waiting for the next poll. The deadline is a timer here (two history events),
        not a schedule-to-close: Temporal would refuse a retry scheduled past it, up to a whole gap early.
        """
        deadline = self.req.deadline
        config = self._config(IDLE_POLL, summary=summary)
        if deadline is None:
            config["schedule_to_close_timeout"] = LONG_WAIT
        handle = workflow.start_activity_method(McpActivities.poll_task, arg, **config)
        left = (deadline - workflow.now()).total_seconds() if deadline else None
        await self._interruptible_wait(
            lambda: handle.done() or self.m.wake is not None, timeout_s=max(left, 0.001) if left is not None else None
        )
        if not handle.done() and self.m.cancel_reason is None and self.m.wake is not None:
            await self._abandon(handle)
            return _WOKEN
        if not handle.done():
            if self.m.cancel_reason is None:
                self.m.cancel_reason = "deadline exceeded"
            await self._abandon(handle)
            return None
        try:
            return await handle
        except ActivityError as err:
            raise self._lost(err, "could not follow the task", Stage.UNREACHABLE)
