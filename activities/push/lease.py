"""What a wait holds of the push hub: its ``Registration``, and the ``Lease`` that answers what a wait asks.

A lease answers renewal, stretch, a fresh read, spacing, listing, the wake-up, the end and release. A lease on nothing
(``Lease()``) answers as if no hub were there: today's schedule, nothing read, never woken, never ended.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from temporalio.client import Client

from mcp_temporal_tasks.activities.wire import SessionRef, WireSession
from mcp_temporal_tasks.protocol.tasks import TaskState

#: A registration outlives the gap its activity scheduled by this much (an attempt may start late).
GRACE_S = 60.0


@dataclass(frozen=True, slots=True)
class Registration:
    """What a wait is on, and whom a wake-up reaches: the task (its server session and principal), the workflow to
    signal, through which Temporal client."""

    ref: SessionRef
    principal: str | None
    task_id: str
    workflow_id: str
    run_id: str | None
    #: Input requests the workflow had answered (a new input round may be woken again); -1 for a held relay.
    epoch: int
    temporal: Client
    #: An idle wait's schedule: today's gap from a read of its task (the hub then reads the task itself).
    gap_for: Callable[[TaskState], float] | None = None


class Lease:
    """A wait's hold on the hub. This base is the lease on nothing: a job binding, or an activity outside a worker
    (no Temporal client, no workflow id), which nothing can wake or read for. Renewing and releasing do nothing."""

    __slots__ = ("_woken", "_ended", "_over")

    def __init__(self) -> None:
        self._woken: asyncio.Future[None] | None = None
        self._ended: asyncio.Future[None] | None = None
        self._over: asyncio.Future[None] | None = None

    @property
    def net(self) -> float:
        """How much further apart than today's an idle wait's own attempts go while this process reads for it (the
        net for its death: ``push_net_stretch``)."""
        return 1.0

    def renew(
        self,
        gap_s: float,
        *,
        session: WireSession | None = None,
        status: str | None = None,
        today_s: float | None = None,
        read: bool = True,
        state: TaskState | None = None,
    ) -> None:
        """Registered until the next poll, ``gap_s`` away (× 1.1, plus :data:`GRACE_S`): a wake-up in between reaches
        the workflow. ``status``: what the wait's own last read saw; ``today_s``: an idle wait's unstretched gap (the
        hub reads its task on that schedule); ``read`` False: the wait took the hub's read (:meth:`fresh`) instead of
        asking the server; ``state``: what its own read saw."""

    def hold(self, for_s: float, *, session: WireSession | None, status: str | None) -> None:
        """Registered for exactly ``for_s`` (a held ``tasks/result``: as long as it may be held)."""

    def stretch(self, *, idle: bool = False) -> float:
        """How much this wait's poll gaps may stretch (``idle``: an idle wait's own attempts); 1 is today's."""
        return 1.0

    def fresh(self) -> TaskState | None:
        """The hub's last read of the task, when it stands for the wait's own (the task ``working``, read within the
        hub's pace); None: read it."""
        return None

    def spacing(self) -> float:
        """Seconds to wait before reading, so the server is not asked sooner than its pollInterval after the hub's own
        read."""
        return 0.0

    async def until_listed(self, timeout: float) -> bool:
        """Whether a ``tasks/list`` read here lists the task, waiting at most ``timeout`` for the reader's next read."""
        return False

    @property
    def woken(self) -> asyncio.Future[None]:
        """Done once the hub has woken the wait's workflow (the registering activity may stop its own wait)."""
        if self._woken is None:
            self._woken = asyncio.get_running_loop().create_future()
        return self._woken

    def rearm(self) -> None:
        """The wake-up was seen: :attr:`woken` waits for the next one."""
        self._woken = None

    @property
    def ended(self) -> asyncio.Future[None]:
        """Done once this process knows the wait is over though its activity still runs: its workflow started
        another activity on the task here (it abandoned this one: a cancel reaches the activity only with a
        heartbeat's reply, up to 0.8 × the heartbeat timeout later), or another wait here read the task terminal.
        Nothing is read for the wait after it; a read in flight is cancelled."""
        if self._ended is None:
            self._ended = asyncio.get_running_loop().create_future()
        return self._ended

    def end(self) -> None:
        """The wait is over (:attr:`ended`)."""
        if not self.ended.done():
            self.ended.set_result(None)

    def over(self) -> asyncio.Future[None]:
        """Done once the wait was woken (:attr:`woken`: its workflow then cancels it) or ended (:attr:`ended`): what
        a wait's reads and sleeps are cut short by."""
        if self._over is None:
            over = self._over = asyncio.get_running_loop().create_future()

            def done(_: asyncio.Future[None]) -> None:
                if not over.done():
                    over.set_result(None)

            self.woken.add_done_callback(done)
            self.ended.add_done_callback(done)
        return self._over

    def close(self) -> None:
        """The activity that held the lease is done with it (whatever its end): the hub forgets the lease."""

    def release(self) -> None:
        """The wait ended (terminal, gone): nothing wakes it from here any more."""


__all__ = ["GRACE_S", "Lease", "Registration"]
