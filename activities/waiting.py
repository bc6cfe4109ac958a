"""Waiting for a task: ``await_task`` and ``poll_task``, over one read of the task and one fault clock.

``await_task`` polls inside one heartbeating activity; ``poll_task`` reads once per attempt, nothing running between.
The one rule: a read fault is retried (``tasks/get`` is idempotent) until the server has given no usable answer for
``unreachable_s`` (``schedule.after_read_fault``), and that clock travels between attempts in the heartbeat details;
only ``-32602`` (gone) and an unreachable session end a wait without it. Never re-calls the tool.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from mcp_temporal_tasks.activities.activity_io import STILL_WORKING, AwaitInput, AwaitOutput, DecodedPayload
from mcp_temporal_tasks.activities.heartbeats import READ_BY_WORKER, Heartbeat
from mcp_temporal_tasks.activities.push import Lease
from mcp_temporal_tasks.activities.schedule import after_read_fault, next_poll_delay, task_age_s
from mcp_temporal_tasks.activities.shared import (
    Shared,
    WaitOver,
    beat_every,
    count,
    heartbeating,
    sleep_beating,
    tasks_of,
    unless_over,
)
from mcp_temporal_tasks.activities.wire import (
    McpWireError,
    SessionRef,
    TaskNotFound,
    TaskUnreachable,
    WireSession,
)
from mcp_temporal_tasks.activities.wire.auth import authorization_code
from mcp_temporal_tasks.activities.wire.jobs import JobReplyMismatch, JobTasks
from mcp_temporal_tasks.activities.wire.tracing import annotate
from mcp_temporal_tasks.protocol.eras import era_rules
from mcp_temporal_tasks.protocol.limits import cap_text, short_id
from mcp_temporal_tasks.protocol.tasks import TaskState
from mcp_temporal_tasks.protocol.wire_errors import PayloadUnusable

#: A wait's first gap at least this long, on a session whose ``tasks/list`` is read here, waits (within the gap) for
#: the reader to list it before sleeping, so that it stretches (push.Lease.until_listed).
SETTLE_MIN_GAP_S = 20.0
#: The error a wait's attempt ends with when the wait is over here (``Lease.over``: woken, or its workflow moved on):
#: its workflow has let it go, so this is seen only if it had not (then the attempt is simply retried).
WAIT_ENDED = "WaitEnded"


def _wait_ended() -> ApplicationError:
    # BENIGN: an expected end (the SDK logs it at debug, with no traceback).
    return ApplicationError(
        "this wait is over here (woken, or its workflow moved on): nothing more is read for it",
        type=WAIT_ENDED,
        next_retry_delay=timedelta(seconds=1),
        category=ApplicationErrorCategory.BENIGN,
    )


def gap_for(inp: AwaitInput) -> Callable[[TaskState], float]:
    """Today's gap for an idle wait's task, from a read of it (what the push hub reads it on)."""
    floor, ceiling, schedule, submitted = inp.poll_floor_s, inp.poll_ceiling_s, inp.schedule, inp.submitted_at

    def gap(state: TaskState) -> float:
        return next_poll_delay(
            state.poll_interval_ms,
            floor_s=floor,
            ceiling_s=ceiling,
            previous_s=ceiling,
            schedule=schedule,
            age_s=task_age_s(state.created_at, submitted, time.time()),
        )

    return gap


class FaultClock:
    """Failed reads of a task in a row: since when, and how many, across attempts (a worker that dies mid-fault hands
    them on in its last heartbeat), and how many in this attempt. What a fault leads to is
    ``schedule.after_read_fault``'s."""

    __slots__ = ("since", "faults", "tries", "across_attempts")

    def __init__(self, since: float | None, faults: int, *, across_attempts: bool) -> None:
        self.since, self.faults, self.tries = since, faults, 0
        #: The backoff grows with every failed read in a row, earlier attempts' included (one read per attempt:
        #: ``poll_task``), or with this attempt's own only (``await_task``: a new attempt backs off anew).
        self.across_attempts = across_attempts

    @classmethod
    def carried(cls, info: activity.Info, *, across_attempts: bool) -> FaultClock:
        """The clock the previous attempt's last heartbeat handed on (none: reads have not been failing)."""
        previous = Heartbeat.read(info.heartbeat_details[0]) if info.heartbeat_details else None
        since = previous.failing_since if previous is not None else None
        faults = (previous.faults or 0) if previous is not None and since else 0
        return cls(since, faults, across_attempts=across_attempts)

    def recovered(self) -> None:
        self.since, self.faults, self.tries = None, 0, 0

    def failed(self, exc: McpWireError, inp: AwaitInput, beat: Heartbeat) -> tuple[AwaitOutput | None, float]:
        """A read failed: ``(no_answer, 0)`` once the budget is spent, else ``(None, seconds before the next read)``,
        with ``beat`` saying since when reads fail, how many, the last error and when the budget ends. A failure
        that is not a read fault raises the activity's typed error."""
        self.since, self.faults, self.tries = self.since or time.time(), self.faults + 1, self.tries + 1
        gave_up, wait = after_read_fault(
            exc, inp, self.since, self.faults, self.faults if self.across_attempts else self.tries
        )
        if gave_up is None:
            beat.failing_since, beat.faults = self.since, self.faults
            beat.read_budget_ends_at = self.since + inp.unreachable_s
            beat.transport_error = cap_text(f"{exc.kind}: {exc.message}", 512)
        return gave_up, wait


def consent_asked(exc: McpWireError, inp: AwaitInput) -> dict[str, Any] | None:
    """The consent a failed read asks for (its grant needs the subject: revoked, or its refresh token spent), when
    the workflow waits for one (``consent_wait_s``): the wait then ends with it at once, one pending consent per
    wait, instead of retrying reads that would each ask anew."""
    consent = exc.info().get("consent") if inp.consent_wait_s else None
    return consent if isinstance(consent, dict) else None


def waiting_for_consent(inp: AwaitInput) -> contextvars.Token[tuple[str, float] | None] | None:
    """A consent a read asks for is kept for this task as long as it waits (as ``start_call``'s)."""
    if not inp.consent_wait_s:
        return None
    return authorization_code.consent_waiter.set((activity.info().workflow_id or "", inp.consent_wait_s))


class Waiting:
    """``await_task`` and ``poll_task``, and the push hub's own read of an idle wait's task."""

    def __init__(self, shared: Shared) -> None:
        self.shared = shared

    async def read_for_hub(self, ref: SessionRef, principal: str | None, task_id: str) -> TaskState:
        """The push hub's own read of an idle wait's task (``push/poller.py``): ``tasks/get`` on the pooled
        session, a session the server forgot replaced as for any read."""
        _, state = await self.shared.pool.read_task(ref, principal=principal, fn=lambda s: s.get(task_id))
        return state

    async def _read(
        self, inp: AwaitInput, polls: int, beat: Heartbeat | None = None, over: asyncio.Future[None] | None = None
    ) -> tuple[WireSession, TaskState] | AwaitOutput:
        """One read of the task (``tasks/get``, or a job's status tool): the session it was read on and its state, or
        how the wait ends with no state to go on: gone (``-32602``), the session unreachable, a job's reply that
        does not match its binding (asking again gets the same: ``decode_failed``). A read fault raises
        (:class:`McpWireError`, for the :class:`FaultClock`). ``beat``: heartbeat it while the read outlasts a period
        (never at once). ``over`` done: the wait is over here; the read is not made, or is cancelled
        (:class:`WaitOver`)."""
        read = self.shared.pool.read_task(
            inp.session, principal=inp.principal, fn=lambda s: tasks_of(s, inp.job).get(inp.task_id)
        )
        try:
            return await unless_over(read if beat is None else heartbeating(read, beat, at_once=False), over)
        except JobReplyMismatch as exc:
            ended = TaskState(
                task_id=inp.task_id, status="failed", era=inp.session.era, status_message=cap_text(exc.message, 512)
            )
            return AwaitOutput(state=ended, polls=polls, payload=DecodedPayload(decode_error=exc.message, raw=exc.raw))
        except TaskNotFound:
            return AwaitOutput(not_found=True, polls=polls)
        except TaskUnreachable as exc:
            return AwaitOutput(unreachable=exc.message, polls=polls)

    async def await_task(self, inp: AwaitInput) -> AwaitOutput:
        """Poll ``tasks/get`` inside one heartbeating activity, at the server's ``pollInterval`` within our floor and
        ceiling, until the task is terminal or needs input (O(1) history per wait).

        Read faults (transport faults, garbled replies, every JSON-RPC error but ``-32602``: the table in
        ``protocol/wire_errors.py``) are retried here (``tasks/get`` is idempotent), with backoff and ``Retry-After``,
        until the server has given no usable answer for ``unreachable_s``, then reported as ``no_answer`` with the
        server's last error; that clock and the count of failed reads survive a worker's death (they travel in the
        heartbeat details). Ends early, without raising, on ``-32602`` (``not_found``) or an unreachable session.
        A terminal task's payload is read here too (legacy ``tasks/result``; on 2026-07-28 it is inline, and is
        dropped from the returned state once decoded: a large one goes to the result store, never into history); if
        that read fails it says so and the workflow retries retrieval alone. Returns ``idle`` once the next poll is
        ``hand_over_gap_s`` away (``poll_task`` goes on), ``long_wait`` once the task is ``return_after_age_s`` old.
        """
        # A worker that stops hands its waits on at once instead of holding them through its graceful timeout.
        shutdown = asyncio.ensure_future(activity.wait_for_worker_shutdown())
        lease = self.shared.lease(inp.session, inp.principal, inp.task_id, job=inp.job, epoch=len(inp.answered_keys))
        waiter = waiting_for_consent(inp)
        try:
            return await self._poll_until_moved(inp, shutdown, lease)
        except WaitOver:
            raise _wait_ended() from None
        finally:
            shutdown.cancel()
            lease.close()
            if waiter is not None:
                authorization_code.consent_waiter.reset(waiter)

    async def _poll_until_moved(self, inp: AwaitInput, shutdown: asyncio.Future[None], lease: Lease) -> AwaitOutput:
        info = activity.info()
        annotate(task_id=inp.task_id)
        hb_every = beat_every(info)
        clock = FaultClock.carried(info, across_attempts=False)
        polls = 0
        delay: float | None = None
        beat = Heartbeat(task_id=short_id(inp.task_id), polls=0)
        # Done when the push hub wakes this task's workflow: the workflow then reads the task in an activity of its own
        # (it abandoned this one), so this one stops at once instead of polling on until a heartbeat tells it of the
        # cancel. Had the workflow not taken the wake, the state returned here makes it read again anyway.
        woken = lease.woken
        # Done when woken, or when this process learns the wait is over otherwise (Lease.ended): every read and sleep
        # below is cut short by it, a read in flight cancelled, and nothing is sent after it.
        over = lease.over()
        await self._after_hub_read(lease)
        while True:
            try:
                read = await self._read(inp, polls, over=over)
            except McpWireError as exc:
                if (consent := consent_asked(exc, inp)) is not None:
                    return AwaitOutput(consent=consent, polls=polls)
                gave_up, wait = clock.failed(exc, inp, beat)
                if gave_up is not None:
                    gave_up.polls = polls
                    return gave_up
                activity.heartbeat(beat.details())
                self.shared.live(beat)  # `run` shows at once that reads fail (and until when it tries)
                await sleep_beating(wait, hb_every, beat, shutdown, over)
                if over.done():
                    raise WaitOver
                continue
            if isinstance(read, AwaitOutput):
                return read
            session, state = read
            clock.recovered()
            polls += 1
            count("mcp_tasks_polls", "tasks/get polls")
            # The SDK throttles heartbeats itself; the details are what `mcp-tasks run` shows live.
            beat = Heartbeat(
                task_id=short_id(state.task_id), status=state.status, status_message=state.status_message, polls=polls
            )
            activity.heartbeat(beat.details())
            self.shared.live(beat)
            moved = await self._if_moved(session, state, inp, beat, polls, lease, over)
            if moved is not None:
                return moved
            age = task_age_s(state.created_at, inp.submitted_at, time.time())
            delay = next_poll_delay(
                state.poll_interval_ms,
                floor_s=inp.poll_floor_s,
                ceiling_s=inp.poll_ceiling_s,
                previous_s=delay,
                schedule=inp.schedule,
                age_s=age,
            )
            # Where the server has shown it notifies, polls are the safety net: further apart (push.Lease.stretch).
            factor = lease.stretch()
            lease.renew(delay * factor, session=session, status=state.status)
            if (
                factor == 1.0
                and delay >= SETTLE_MIN_GAP_S
                and await self._listed(lease, min(hb_every, delay / 4), shutdown, over)
            ):
                # Registered just now on a session whose tasks/list is read here: the reader's next read lists it,
                # so this first long gap stretches as the later ones will (not one gap at today's pace first).
                factor = lease.stretch()
                lease.renew(delay * factor, session=session, status=state.status)
            stretched = delay * factor
            if inp.hand_over_gap_s is not None and stretched >= inp.hand_over_gap_s:
                return AwaitOutput(state=state, polls=polls, idle=True, next_poll_at=time.time() + stretched)
            if inp.return_after_age_s is not None and age is not None and age >= inp.return_after_age_s:
                return AwaitOutput(state=state, polls=polls, long_wait=True)
            await sleep_beating(stretched, hb_every, beat, shutdown, over)
            if woken.done():
                return AwaitOutput(state=state, polls=polls)
            if over.done():
                raise WaitOver

    @staticmethod
    async def _listed(lease: Lease, timeout: float, *stop: asyncio.Future[None]) -> bool:
        """:meth:`Lease.until_listed`, given up when the worker starts shutting down or the workflow is woken."""
        listed = asyncio.ensure_future(lease.until_listed(timeout))
        waited: set[asyncio.Future[Any]] = {listed, *stop}
        await asyncio.wait(waited, return_when=asyncio.FIRST_COMPLETED)
        if not listed.done():
            listed.cancel()
            return False
        return listed.result()

    @staticmethod
    async def _after_hub_read(lease: Lease) -> None:
        """A read right after this process's own (the hub read it, and woke the workflow): keep the pollInterval."""
        if (spacing := lease.spacing()) > 0:
            await asyncio.sleep(spacing)

    async def poll_task(self, inp: AwaitInput) -> AwaitOutput:
        """One ``tasks/get`` per attempt, for a wait whose polls are far apart: nothing runs between polls.

        While the task works, the attempt ends with a benign, retryable ``ApplicationError(type="TaskStillWorking")``
        whose ``next_retry_delay`` is the schedule's gap (``next_poll_delay``: age, ``pollInterval``): Temporal
        starts the next attempt then, adds no history event for it, and holds no worker slot meanwhile (no slot, no
        heartbeat); its message and details are what the UI shows as the pending activity's last failure. The
        attempt returns (as ``await_task`` does) when the task is terminal (its payload read here), needs input, is
        gone or unreachable. A read fault is retried attempt by attempt (``TaskReadFault``) after a backoff (or a
        429's ``Retry-After``) until the server has given no usable answer for ``unreachable_s``, then
        ``no_answer``: that clock travels between attempts in the heartbeat details, the only state Temporal hands to
        the next attempt, so it costs a heartbeat only when a read fails and once when reads recover. Never
        re-calls the tool.
        """
        info = activity.info()
        annotate(task_id=inp.task_id)
        clock = FaultClock.carried(info, across_attempts=True)
        beat = Heartbeat(task_id=short_id(inp.task_id), polls=info.attempt)
        lease = self.shared.lease(
            inp.session, inp.principal, inp.task_id, job=inp.job, epoch=len(inp.answered_keys), gap_for=gap_for(inp)
        )
        waiter = waiting_for_consent(inp)
        try:
            return await self._poll_once(inp, info, clock, beat, lease)
        except WaitOver:
            raise _wait_ended() from None
        finally:
            lease.close()
            if waiter is not None:
                authorization_code.consent_waiter.reset(waiter)

    async def _poll_once(
        self, inp: AwaitInput, info: activity.Info, clock: FaultClock, beat: Heartbeat, lease: Lease
    ) -> AwaitOutput:
        """One attempt of :meth:`poll_task` (its lease closed by the caller)."""
        over = lease.over()
        early = (inp.first_poll_at or 0.0) - time.time()
        if info.attempt == 1 and early > 0.05:
            # The hand-over came right after a poll: the first attempt only keeps the schedule (never undercut the
            # server's pollInterval), at the price of the one poll it replaces.
            lease.renew(early)
            raise ApplicationError(
                f"waiting for the next poll in {early:.0f}s",
                beat.details(),
                type=STILL_WORKING,
                next_retry_delay=timedelta(seconds=early),
                category=ApplicationErrorCategory.BENIGN,
            )
        # This process's hub read the task within today's gap and saw it working: that read stands for this one (a
        # change would have woken the workflow), so the server is not asked twice in one gap.
        cached = None if clock.since else lease.fresh()
        session: WireSession | None = None
        if cached is None:
            await self._after_hub_read(lease)
        if cached is not None:
            state = cached
            beat.status, beat.status_message, beat.read_by = state.status, state.status_message, READ_BY_WORKER
            self.shared.live(beat)
            count("mcp_tasks_polls_from_worker", "idle attempts that took the worker's own recent read")
        else:
            try:
                read = await self._read(inp, 1, beat, over)
            except McpWireError as exc:
                if (consent := consent_asked(exc, inp)) is not None:
                    return AwaitOutput(consent=consent, polls=1)
                gave_up, wait = clock.failed(exc, inp, beat)
                if gave_up is not None:
                    return gave_up
                activity.heartbeat(beat.details())
                self.shared.live(beat)
                what = "tasks/get" if inp.job is None else inp.job.status
                raise ApplicationError(
                    f"{what} failed ({clock.faults} in a row, retrying in {wait:.1f}s): {exc.kind}: "
                    f"{cap_text(exc.message, 512)}",
                    type="TaskReadFault",
                    next_retry_delay=timedelta(seconds=wait),
                ) from None
            if isinstance(read, AwaitOutput):
                return read
            session, state = read
            count("mcp_tasks_polls", "tasks/get polls")
            beat.status, beat.status_message = state.status, state.status_message
            self.shared.live(beat)
            if clock.since:
                activity.heartbeat(
                    beat.details()
                )  # reads work again: the next attempt must not inherit the fault clock
            moved = await self._if_moved(session, state, inp, beat, 1, lease, over)
            if moved is not None:
                return moved
        age = task_age_s(state.created_at, inp.submitted_at, time.time())
        # The backoff without a server pollInterval has reached the ceiling by the time a wait is handed here.
        today = next_poll_delay(
            state.poll_interval_ms,
            floor_s=inp.poll_floor_s,
            ceiling_s=inp.poll_ceiling_s,
            previous_s=inp.poll_ceiling_s,
            schedule=inp.schedule,
            age_s=age,
        )
        # Registered for the longest gap this wait may get: the hub reads the task itself from now on (where it can),
        # and this wait's own attempts are then only the net for this process's death (push.Lease.stretch).
        lease.renew(
            today * lease.net, session=session, status=state.status, today_s=today, read=cached is None, state=state
        )
        delay = today * lease.stretch(idle=True)
        beat.next_poll_s = round(delay, 1)
        if clock.since:
            # The heartbeat above leaves at this attempt's end (nothing was awaited since): with the gap in it.
            activity.heartbeat(beat.details())
        message = state.status_message and cap_text(state.status_message, 256)
        # BENIGN: an expected outcome of every poll of a working task; the SDK logs it at debug, with no traceback.
        raise ApplicationError(
            f"{state.status}{f': {message}' if message else ''} (poll {info.attempt}; next in {delay:.0f}s)",
            beat.details(),
            type=STILL_WORKING,
            next_retry_delay=timedelta(seconds=delay),
            category=ApplicationErrorCategory.BENIGN,
        )

    async def _if_moved(
        self,
        session: WireSession,
        state: TaskState,
        inp: AwaitInput,
        beat: Heartbeat,
        polls: int,
        lease: Lease,
        over: asyncio.Future[None],
    ) -> AwaitOutput | None:
        """How a wait ends once the task moved: terminal (its payload read here too, unless the wait is ``over``
        first), or input to answer; None while it works (input already answered counts as working: servers
        acknowledge lazily)."""
        if state.terminal:
            annotate(status=state.status, polls=polls)
            out = AwaitOutput(state=state.model_copy(update={"result": None}), polls=polls)
            out.payload, out.retrieval_error = await unless_over(
                self._read_payload(tasks_of(session, inp.job), state, inp.output_schema, beat), over
            )
            self.shared.pool.track(session, state.task_id, done=True)
            lease.release()
            return out
        if state.status == "input_required":
            fresh = {k for k in (state.input_requests or {}) if k not in set(inp.answered_keys)}
            # Legacy input arrives only on a tasks/result stream: nothing to wait for here.
            if fresh or era_rules(state.era).input_on_result_stream:
                return AwaitOutput(state=state, polls=polls)
        return None

    async def _read_payload(
        self,
        client: WireSession | JobTasks,
        state: TaskState,
        output_schema: dict[str, Any] | None,
        beat: Heartbeat,
    ) -> tuple[DecodedPayload | None, str | None]:
        """(payload, None), or (None, why) when a transient fault kept it from being read: the workflow then
        retries the retrieval alone. A payload that cannot be carried is decode_failed, not a fault."""
        try:
            payload = self.shared.decode(await heartbeating(client.result(state), beat), output_schema)
        except PayloadUnusable as exc:
            payload = DecodedPayload(decode_error=exc.message, raw=exc.raw)
        except McpWireError as exc:
            count("mcp_tasks_retrievals", "task payload retrievals", outcome="error")
            return None, cap_text(f"{exc.kind}: {exc.message}", 1024)
        count("mcp_tasks_retrievals", "task payload retrievals", outcome="ok")
        return payload, None


__all__ = ["SETTLE_MIN_GAP_S", "FaultClock", "Waiting", "gap_for"]
