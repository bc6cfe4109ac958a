"""WORKING: one wait for a task the server accepted, in its mode (``WaitMode``), and where the read that ends it leads.

Heartbeating (``await_task``) while polls are close together; once the next poll is ≥ 0.8 × the heartbeat timeout away,
idle (``poll_task``: one attempt per poll, nothing running in between). A notification wakes the wait; the read that
follows decides. A cancel or the deadline leads to ``Cancel``, a terminal task to its ending, a question to a person.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError, TimeoutError

with workflow.unsafe.imports_passed_through():
    from mcp_temporal_tasks.activities.activity_io import AwaitInput, AwaitOutput, PollSchedule
    from mcp_temporal_tasks.activities.defs import McpActivityDefs
    from mcp_temporal_tasks.protocol.eras import era_rules
    from mcp_temporal_tasks.protocol.limits import short_id
    from mcp_temporal_tasks.protocol.tasks import RpcErrorInfo, SessionRef
    from mcp_temporal_tasks.workflows import decisions
    from mcp_temporal_tasks.workflows.options import IDLE_POLL, LONG_WAIT, WAIT
    from mcp_temporal_tasks.workflows.phases import endings
    from mcp_temporal_tasks.workflows.phases.consent import for_a_subject, wait_for_consent, who
    from mcp_temporal_tasks.workflows.phases.machine import TaskMachine, abandon, bug
    from mcp_temporal_tasks.workflows.phases.patches import CONSENT_READ, IDLE_WAITS, LONG_WAIT_HEARTBEAT
    from mcp_temporal_tasks.workflows.phases.steps import (
        AskInput,
        Cancel,
        Ended,
        Follow,
        Relay,
        Retrieve,
        Step,
        WaitMode,
    )
    from mcp_temporal_tasks.workflows.records import Classification, Ending, Outcome, Phase, Stage


class _Woken:
    """A wait cut short by a notification (its activity cancelled): the task is read again at once."""


_WOKEN = _Woken()


async def follow(mc: TaskMachine, step: Follow) -> Step:
    """One wait, then the next step: the same wait again (woken, handed over, or still working), the task's ending,
    a question to a person, or ``Cancel``."""
    if mc.state.session is None:
        raise bug("follow without a session")
    task = step.task
    mc.enter(Phase.WORKING)
    arg = _await_input(mc, mc.state.session, step)
    if step.mode == WaitMode.IDLE and not step.woken:
        waited = await _wait_idle(mc, arg, summary=f"poll {short_id(task.task_id)} until terminal (idle between polls)")
    else:
        # A woken wait reads at once in the heartbeating activity, which polls on or hands over to the idle one as
        # any wait does: a notification that lied costs this one read.
        waited = await _wait_heartbeating(
            mc,
            arg,
            summary=(
                f"read {short_id(task.task_id)} (notified)"
                if step.woken
                else f"poll {short_id(task.task_id)} until terminal" + (" (long wait)" if step.old_task else "")
            ),
            heartbeat_s=mc.req.timeouts.long_wait_heartbeat_s if step.old_task else None,
        )
    if waited is None:
        return Cancel(task)
    if isinstance(waited, Ending):
        return Ended(waited)
    if isinstance(waited, _Woken):
        mc.state.wake = None
        return dataclasses.replace(step, woken=True, woken_via=mc.state.wake_via, first_poll_at=None)
    if waited.consent is not None:
        return await _after_consent(mc, step, waited.consent)
    return _after_read(mc, step, waited)


async def _after_consent(mc: TaskMachine, step: Follow, consent: dict[str, object]) -> Step:
    """A read needed the subject's consent (``consent-read``): AWAITING_AUTHORIZATION, then the same task read again
    (never a second ``tools/call``), ``cancelled`` on a cancel, or ``lost`` (refused, past ``consent_s``)."""
    asked = decisions.consent_asked("AuthorizationRequired", False, {"consent": consent})
    verdict, refused = "malformed", None
    if asked is not None and workflow.patched(CONSENT_READ):
        verdict, refused = await wait_for_consent(mc, asked, reading=short_id(step.task.task_id))
    nxt = decisions.after_read_consent(verdict)
    if nxt == "read":
        return dataclasses.replace(step, woken=False, woken_via=None, first_poll_at=None)
    if nxt == "cancelled":
        # tasks/cancel needs the very grant that is missing: the cancel is the person's, so it ends here, saying so.
        return Ended(
            Ending(
                outcome=Outcome.CANCELLED,
                stage=Stage.CANCELLING,
                reason=f"{mc.state.cancel_reason} while waiting for consent to read the task; tasks/cancel could not "
                "be sent (no grant): the task may still run on the server",
            )
        )
    kind, why = "AuthorizationRequired", f"its reads need the consent of {who(mc)}"
    if verdict == "refused":
        why = f"consent not given: {refused}"
    elif verdict == "expired":
        kind, why = "ConsentExpired", f"consent_expired: no consent of {who(mc)} within {mc.req.timeouts.consent_s:g} s"
    elif verdict == "too_many":
        why = f"the server asked for consent more than {decisions.MAX_CONSENTS} times"
    return Ended(
        Ending(
            outcome=Outcome.LOST,
            stage=Stage.UNREACHABLE,
            error=RpcErrorInfo(code=-32001, message=why[:2048], data={"kind": kind}),
            classification=Classification.AUTHORIZATION_REQUIRED,
            reason=f"{why[:512]}; not replayed: the task may still exist on the server",
        )
    )


def _await_input(mc: TaskMachine, session: SessionRef, step: Follow) -> AwaitInput:
    timeouts = mc.req.timeouts
    # A wait on an old task goes on under a longer heartbeat timeout: one more activity per task, far fewer
    # heartbeats (billable actions, server writes) for the hours it may still take.
    hand_over = timeouts.long_wait_heartbeat_s > timeouts.heartbeat_s
    # Past this gap a poll as an attempt of its own costs less than the heartbeats that would hold it (the SDK sends
    # one per 0.8 × the heartbeat timeout).
    idle_gap = timeouts.idle_gap_s if timeouts.idle_gap_s is not None else 0.8 * timeouts.heartbeat_s
    return AwaitInput(
        session=session,
        task_id=step.task.task_id,
        principal=mc.principal(),
        poll_floor_s=timeouts.poll_floor_s,
        poll_ceiling_s=timeouts.poll_ceiling_s,
        output_schema=mc.state.output_schema,
        answered_keys=mc.state.answered_keys,
        unreachable_s=timeouts.unreachable_s,
        schedule=mc.state.profile.polling if mc.state.profile else PollSchedule(),
        job=mc.job(),
        submitted_at=mc.state.attempts[-1].at.timestamp() if mc.state.attempts else None,
        return_after_age_s=timeouts.long_wait_after_s if hand_over and not step.old_task else None,
        hand_over_gap_s=idle_gap or None,
        first_poll_at=step.first_poll_at,
        # A read that needs the subject's consent ends the wait (consent-read) instead of being retried.
        consent_wait_s=timeouts.consent_s if for_a_subject(mc) else None,
    )


def _after_read(mc: TaskMachine, step: Follow, aw: AwaitOutput) -> Step:
    """Where a read leads: the wait again (handed over idle, or to the long heartbeat, or still working), the task's
    ending (its payload read again if the wait's own read failed), or a question to a person."""
    if aw.state is None:
        return Ended(
            endings.unread(
                mc, not_found=aw.not_found, no_answer=aw.no_answer, unreachable=aw.unreachable, last_error=aw.last_error
            )
        )
    mc.state.task_state = seen = aw.state  # the next enter() or finish() shows the new status
    if mc.state.wake is not None and (seen.terminal or seen.status == mc.state.wake):
        mc.state.wake = None  # this read already shows what the notification said
    if seen.terminal:
        # How the end was learned: the first read after a wake, or a poll of the schedule.
        woke = step.woken and aw.polls <= 1
        mc.state.delivered_by = (step.woken_via or "notification") if woke else "poll"  # type: ignore[assignment]
    going_on = Follow(step.task, step.mode, step.old_task)
    if aw.idle and workflow.patched(IDLE_WAITS):
        return Follow(step.task, WaitMode.IDLE, step.old_task, first_poll_at=aw.next_poll_at)
    if aw.long_wait and workflow.patched(LONG_WAIT_HEARTBEAT):
        return Follow(step.task, step.mode, old_task=True)
    if seen.terminal:
        if aw.payload is None:  # the read in the same activity failed: the retrieval is retried alone
            mc.state.ledger.last_retrieval = f"retrying: {aw.retrieval_error}"
            return Retrieve(Stage.PAYLOAD)
        return Ended(endings.from_payload(mc, seen.status, aw.payload, Stage.PAYLOAD))
    if seen.status == "input_required":
        if era_rules(seen.era).input_on_result_stream:
            return Relay(step.task)
        return AskInput(step.task, then=going_on)
    return going_on


async def _wait_heartbeating(
    mc: TaskMachine, arg: AwaitInput, *, summary: str, heartbeat_s: float | None = None
) -> AwaitOutput | _Woken | Ending | None:
    """Poll until the task moves; None if a cancel (or the deadline) came first, :data:`_WOKEN` if a notification did
    (the activity is then cancelled either way), the ending if the wait failed for good."""
    deadline = mc.req.deadline
    budget = (deadline - workflow.now()) if deadline else LONG_WAIT
    config = mc.config(WAIT, start_to_close_timeout=max(budget, timedelta(seconds=1)), summary=summary)
    if heartbeat_s:
        config["heartbeat_timeout"] = timedelta(seconds=heartbeat_s)
    handle = workflow.start_activity_method(McpActivityDefs.await_task, arg, **config)
    await mc.interruptible_wait(lambda: handle.done() or mc.state.wake is not None)
    if mc.state.cancel_reason is not None and not handle.done():
        await abandon(handle)
        return None
    if mc.state.wake is not None and not handle.done():
        await abandon(handle)
        return _WOKEN
    try:
        return await handle
    except ActivityError as err:
        if isinstance(err.cause, TimeoutError) and deadline and workflow.now() >= deadline:
            mc.state.cancel_reason = "deadline exceeded"
            return None
        return endings.lost(err, "could not follow the task", Stage.UNREACHABLE)


async def _wait_idle(mc: TaskMachine, arg: AwaitInput, *, summary: str) -> AwaitOutput | _Woken | Ending | None:
    """Poll with nothing running between polls (``poll_task``); None if a cancel or the deadline came first,
    :data:`_WOKEN` if a notification did (the pending attempt is cancelled: Temporal does it at once).

    The deadline is a timer here (two history events), not a schedule-to-close: Temporal would refuse a retry scheduled
    past it, up to a whole gap early.
    """
    deadline = mc.req.deadline
    config = mc.config(IDLE_POLL, summary=summary)
    if deadline is None:
        config["schedule_to_close_timeout"] = LONG_WAIT
    handle = workflow.start_activity_method(McpActivityDefs.poll_task, arg, **config)
    left = (deadline - workflow.now()).total_seconds() if deadline else None
    await mc.interruptible_wait(
        lambda: handle.done() or mc.state.wake is not None, timeout_s=max(left, 0.001) if left is not None else None
    )
    if not handle.done() and mc.state.cancel_reason is None and mc.state.wake is not None:
        await abandon(handle)
        return _WOKEN
    if not handle.done():
        if mc.state.cancel_reason is None:
            mc.state.cancel_reason = "deadline exceeded"
        await abandon(handle)
        return None
    try:
        return await handle
    except ActivityError as err:
        return endings.lost(err, "could not follow the task", Stage.UNREACHABLE)


__all__ = ["follow"]
