"""What the activity jobs share: their dependencies, heartbeating, sleeping between polls, metrics, payloads.

Heartbeats are the only live state Temporal keeps of a running attempt (and hands to the next one): each job writes
them as a :class:`~.heartbeats.Heartbeat`, through the helpers here.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, TypeVar

from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from mcp_temporal_tasks.activities.activity_io import WORKER_SHUTDOWN, DecodedPayload, JobBinding
from mcp_temporal_tasks.activities.heartbeats import Heartbeat
from mcp_temporal_tasks.activities.push import Lease, PushHub, Registration
from mcp_temporal_tasks.activities.result_store import ResultStore
from mcp_temporal_tasks.activities.wire import (
    ResultDecodeError,
    SessionPool,
    SessionRef,
    WireSession,
    decode_result,
)
from mcp_temporal_tasks.activities.wire.jobs import JobTasks
from mcp_temporal_tasks.protocol.tasks import TaskPayload, TaskState
from mcp_temporal_tasks.protocol.wire_errors import _cap

T = TypeVar("T")


class WaitOver(Exception):
    """A wait's read or sleep was cut short: the wait is over here (``Lease.over``)."""


async def unless_over(aw: Awaitable[T], over: asyncio.Future[None] | None) -> T:
    """``aw``, cancelled once ``over`` is done (then :class:`WaitOver`): a wait that ended sends nothing more, and
    its read in flight stops at once. Nothing started once ``over`` is done."""
    if over is None:
        return await aw
    if over.done():
        if asyncio.iscoroutine(aw):
            aw.close()
        raise WaitOver
    task: asyncio.Future[T] = asyncio.ensure_future(aw)
    either: set[asyncio.Future[Any]] = {task, over}
    try:
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            return task.result()
        raise WaitOver
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


def beat_every(info: activity.Info) -> float:
    """Heartbeat period: half the heartbeat timeout. The SDK sends at most one per 0.8 × the timeout (the
    latest one given); calling more often adds local work (thousands of waiting tasks) and no safety."""
    return max(0.2, (info.heartbeat_timeout or timedelta(seconds=30)).total_seconds() / 2)


async def heartbeating(coro: Awaitable[T], beat: Heartbeat, every_s: float | None = None, *, at_once: bool = True) -> T:
    """Await ``coro`` while heartbeating ``beat`` (as it is at each beat) every ``every_s`` (default half the
    heartbeat timeout), so a dead worker is noticed and a cancel gets through; the first beat at once, or
    (``at_once=False``) only once the coroutine has outlasted a period: a ``poll_task`` read normally takes
    milliseconds, and a heartbeat is a billable action, so an attempt should cost exactly one. A timer, not a task of
    its own: thousands of short attempts a minute pay for no task, no ``asyncio.wait`` and no cancellation of
    either."""
    every = every_s or beat_every(activity.info())
    loop = asyncio.get_running_loop()

    def again() -> None:
        activity.heartbeat(beat.details())
        timer[0] = loop.call_later(every, again)  # runs in the activity's context, copied by call_later

    if at_once:
        activity.heartbeat(beat.details())
    timer = [loop.call_later(every, again)]
    try:
        return await coro
    finally:
        timer[0].cancel()


async def sleep_beating(
    seconds: float,
    every: float,
    beat: Heartbeat,
    shutdown: asyncio.Future[None] | None = None,
    woken: asyncio.Future[None] | None = None,
) -> None:
    """Sleep without outlasting the heartbeat timeout. When this worker starts shutting down, the wait is
    handed on: a retryable failure (after one last heartbeat, so the next attempt keeps the unreachable clock),
    retried at once by another worker. Only waits between polls are cut short, never a request in flight.
    ``woken`` done ends the sleep early (a notification woke the workflow)."""
    remaining = seconds
    while remaining > 0:
        if woken is not None and woken.done():
            return
        step = min(remaining, every)
        if shutdown is None:
            await asyncio.sleep(step)
        else:
            await asyncio.wait({shutdown, woken} if woken is not None else {shutdown}, timeout=step)
            if shutdown.done():
                activity.heartbeat(beat.details())
                # BENIGN: an expected hand-over, not an error (the SDK logs it at debug, with no traceback).
                raise ApplicationError(
                    "this worker is shutting down: another one goes on waiting for the task",
                    type=WORKER_SHUTDOWN,
                    next_retry_delay=timedelta(milliseconds=100),
                    category=ApplicationErrorCategory.BENIGN,
                )
        remaining -= step
        if remaining > 0:
            activity.heartbeat(beat.details())


def count(name: str, description: str, **attrs: str) -> None:
    """Add one to the counter ``name`` on the activity's metric meter (Prometheus where ``metrics_port`` is set)."""
    try:
        activity.metric_meter().create_counter(name, description).add(1, attrs)
    except Exception:  # metrics must never fail an activity
        pass


def sdk_stores_large_payloads() -> bool:
    """Whether this activity's client offloads large payloads itself (Temporal's External Storage on its data
    converter, ``worker/storage.py``): then a large result travels as it is, and the SDK puts it in the store and
    only a claim in the history, readable by every client and worker configured alike, in any SDK. Otherwise (a
    client without it) the result store's ``file://`` reference, as before."""
    try:
        return activity.client().data_converter.external_storage is not None
    except RuntimeError:  # not in an activity with a client (a unit test calling the method directly)
        return False


def tasks_of(client: WireSession, job: JobBinding | None) -> WireSession | JobTasks:
    """What speaks for a task: the MCP task methods, or a job binding's tools in their place."""
    return JobTasks(client, job) if job is not None else client


class Shared:
    """The dependencies every job works over: one each per worker process (or per plugin)."""

    def __init__(
        self,
        *,
        pool: SessionPool,
        store: ResultStore,
        push: PushHub,
        live_sink: Callable[[str, dict[str, Any]], None] | None,
    ) -> None:
        self.pool = pool
        self.store = store
        #: Who hears the servers' task notifications for this process's waits (``activities/push/``).
        self.push = push
        #: Called with (workflow id, heartbeat details) whenever a call's or a wait's live status changes: the live
        #: view of a `mcp-tasks run` whose own worker this is (heartbeats reach Temporal throttled).
        self.live_sink = live_sink

    def live(self, beat: Heartbeat, workflow_id: str | None = None) -> None:
        """Hand ``beat`` (what the heartbeat carries) to this process's live view at once, where one listens
        (``mcp-tasks run``'s own worker): heartbeats reach Temporal only every 0.8 × the heartbeat timeout."""
        if self.live_sink is not None:
            try:
                self.live_sink(workflow_id or activity.info().workflow_id or "", beat.details())
            except Exception:  # noqa: BLE001  (a display must never fail an activity)
                pass

    def decode(self, payload: TaskPayload, output_schema: dict[str, Any] | None) -> DecodedPayload:
        """The payload as the workflow may carry it: decoded, or decode_failed with the raw kept (capped),
        and over the store's inline limit only as a reference. Every activity returning a payload uses it."""
        if payload.result is None:
            return DecodedPayload(error=payload.error, empty=payload.empty)
        try:
            decoded = decode_result(payload.result, output_schema)
        except ResultDecodeError as exc:
            return DecodedPayload(decode_error=exc.message, raw=_cap(payload.result))
        inline, ref = (decoded, None) if sdk_stores_large_payloads() else self.store.maybe_offload(decoded)
        if ref is not None:
            # The workflow never sees the offloaded body: it must still know a tool error from a success.
            ref["is_error"] = bool(decoded.get("isError"))
            activity.logger.warning("result of %s bytes kept outside history at %s", ref["size"], ref["uri"])
        return DecodedPayload(result=inline, result_ref=ref)

    def moved_on(self, ref: SessionRef, principal: str | None, task_id: str) -> None:
        """This activity's workflow has left its wait on ``task_id`` (this is its next step): a wait of it still
        running here ends (``PushHub.moved_on``), its read in flight cancelled, rather than when a heartbeat's reply
        brings the cancel."""
        try:
            workflow_id = activity.info().workflow_id
        except RuntimeError:  # not in an activity (a unit test calling the method directly)
            return
        if workflow_id:
            self.push.moved_on(ref, principal, task_id, workflow_id)

    def lease(
        self,
        ref: SessionRef,
        principal: str | None,
        task_id: str,
        *,
        job: JobBinding | None,
        epoch: int,
        gap_for: Callable[[TaskState], float] | None = None,
    ) -> Lease:
        """This wait's lease on the push hub: a notification for the task (or the hub's own read, or a ``tasks/list``
        read) then wakes its workflow at once. A lease on nothing for a job (plain tools have no notifications) or an
        activity run outside a worker (ActivityEnvironment: nobody to wake)."""
        if job is not None:
            return Lease()
        try:
            temporal = activity.client()
        except RuntimeError:
            return Lease()
        info = activity.info()
        if info.workflow_id is None:
            return Lease()
        return self.push.register(
            Registration(ref, principal, task_id, info.workflow_id, info.workflow_run_id, epoch, temporal, gap_for)
        )


__all__ = [
    "Shared",
    "WaitOver",
    "beat_every",
    "count",
    "heartbeating",
    "sdk_stores_large_payloads",
    "sleep_beating",
    "tasks_of",
    "unless_over",
]
