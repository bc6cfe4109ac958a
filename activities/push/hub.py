"""The push hub: this worker's waits and their sessions' listeners, turning what it hears and reads into wake-ups.

One rule: a wake-up never decides (the workflow's own read does), at most one per (workflow, task, status, input
round); polling stays the safety net, stretched only where this process hears or reads for a wait. How it works and
what bounds it: ``docs/how-it-works.md`` ("Told, not only polled" and after), ``docs/operating.md`` ("The push hub").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
import weakref
from collections import Counter, OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from temporalio.client import Client

from mcp_temporal_tasks.activities.activity_io import (
    TASK_ID_SEARCH_ATTRIBUTE,
    TASK_NOTIFIED_SIGNAL,
    TASK_WORKFLOW_TYPE,
    TaskNotified,
    search_attribute_value,
)
from mcp_temporal_tasks.activities.push.lease import GRACE_S, Lease, Registration
from mcp_temporal_tasks.activities.push.list_reader import ListReader
from mcp_temporal_tasks.activities.push.poller import TaskPoller
from mcp_temporal_tasks.activities.wire import SessionRef, WireSession
from mcp_temporal_tasks.activities.wire.notifications import (
    GetStream,
    Listener,
    MalformedNotice,
    StdioTap,
    TaskNotice,
    TasksSubscription,
    task_notice,
)
from mcp_temporal_tasks.activities.wire.stdio_transport import StdioTransport
from mcp_temporal_tasks.protocol.eras import era_rules
from mcp_temporal_tasks.protocol.tasks import TaskState

log = logging.getLogger("mcp_tasks.push")

#: Statuses whose notification may end a wait: the wait is woken for them, never for ``working``.
WAKE_STATUSES = frozenset({"input_required", "completed", "failed", "cancelled"})
DEFAULT_STRETCH = 4.0
#: How far apart an idle wait's own attempts are (× today's gap) while this process reads for it (notifications, a
#: ``tasks/list`` read, or its own ``tasks/get``): the bound on a dead worker (``[worker] push_net_stretch``).
DEFAULT_NET_STRETCH = 8.0
#: Sessions whose tasks the hub can read itself (``push/poller.py``): HTTP, 2025-11-25 and 2026-07-28.
_POLLABLE = frozenset({"get", "listen"})
SWEEP_S = 5.0
#: A hub's read stands for an idle wait's own (:meth:`PushHub.fresh`) up to this many times the hub's pace.
FRESH_SLACK = 1.5
#: A read right after the hub's own waits for the server's pollInterval, at most this long (:meth:`PushHub.spacing`).
MAX_SPACING_S = 5.0
#: Where the hub reads an idle wait's task once per attempt of the wait's (the net's pace), its read after the wait's
#: own is planned this much of the gap ahead of the wait's next attempt (between :data:`LEAD_MIN_S` and
#: :data:`LEAD_MAX_S`): the attempt then finds the read made (:meth:`PushHub.fresh`) instead of racing it.
LEAD_FRACTION = 0.05
LEAD_MIN_S = 1.0
LEAD_MAX_S = 30.0
#: How long a server that delivered a notification for one of our waits counts as one that notifies. Long: waits on
#: old tasks hear nothing for hours (none of them ends), and a server that stopped notifying costs at most the
#: stretch factor of today's bound, never a wrong outcome.
NOTIFYING_MEMORY_S = 24 * 3600.0
#: After a listener found no stream for a session (405, no task events...), how long before it is tried again.
UNSUPPORTED_RETRY_S = 600.0
LOOKUPS_PER_S = 5.0
LOOKUP_BURST = 20
MAX_LOOKUPS_IN_FLIGHT = 32
NEGATIVE_S = 600.0
CACHE_SIZE = 50_000
SIGNAL_QUEUE = 10_000
SENDERS = 4
#: Search attribute values written into a visibility query literal as they are (anything else is not looked up).
_SAFE_LITERAL = re.compile(r"^[A-Za-z0-9._:@/+=~-]{1,256}$")


@dataclass
class _Route:
    workflow_id: str
    run_id: str | None
    #: Input requests the workflow had answered when this was registered: a new input round may be woken again.
    epoch: int
    expires: float
    #: Run once the workflow is being woken (a heartbeating wait of this process stops polling).
    on_wake: Callable[[], None] | None = None
    #: The status the wait's own last read saw (what a ``tasks/list`` read is compared with; None: not known).
    status: str | None = None
    #: An idle wait's schedule (today's gap from a read of its task), when the hub reads the task itself.
    gap_for: Callable[[TaskState], float] | None = None
    #: The hub's own last read of the task (monotonic time, the server's pollInterval then, and the state while it
    #: was ``working``).
    read_at: float | None = None
    read_poll_s: float | None = None
    read_state: TaskState | None = None


@dataclass
class _Session:
    key: str
    ref: SessionRef
    principal: str | None
    #: ``stdio`` | ``get`` | ``listen``
    kind: str
    #: The server, for "has shown it notifies" and the metric's label (the redacted endpoint identity).
    server: str
    routes: dict[str, _Route] = field(default_factory=dict)
    listener: Listener | None = None
    task: asyncio.Task[None] | None = None
    temporal: Client | None = None
    stdio: StdioTransport | None = None
    retry_at: float = 0.0
    #: Last time a notice for a task waited on here arrived.
    heard: float | None = None
    #: The session's ``tasks/list`` reader (``push/list_reader.py``): stateful 2025-11-25 HTTP sessions only.
    reader: ListReader | None = None
    reader_task: asyncio.Task[None] | None = None
    reader_retry_at: float = 0.0
    #: Reads the idle waits' tasks here (``push/poller.py``): HTTP sessions with idle waits.
    poller: TaskPoller | None = None
    poller_task: asyncio.Task[None] | None = None


class _Lru(OrderedDict[Any, float]):
    """A bounded map of key → time: the oldest entries go first."""

    def put(self, key: Any, value: float) -> None:
        self[key] = value
        self.move_to_end(key)
        while len(self) > CACHE_SIZE:
            self.popitem(last=False)


def _kind(ref: SessionRef) -> str | None:
    """How notifications of this session reach us, or None when they cannot (stateless 2025-11-25 HTTP)."""
    if ref.endpoint.command is not None:
        return "stdio"
    if era_rules(ref.era).notified_by == "subscriptions/listen":
        return "listen"
    return "get" if ref.session_id else None


def _ahead(gap_s: float, factor: float) -> float:
    """When the hub reads next after a wait's own read: ``factor`` × today's gap, and where that is the wait's own
    pace (the net's, under notifications), :data:`LEAD_FRACTION` of it sooner. Planned for the same instant, the
    hub's read and the wait's next attempt raced: an attempt that came while the hub's read was in flight read the
    task again itself, and re-planned the hub's next read onto its own next attempt, so the race came back; a quarter
    of the attempts read twice so (``bench/README.md``). Ahead of the attempt, the read is there when it comes, and
    stays ahead: each later read is planned from the one before, which was earlier than the attempt."""
    in_s = gap_s * factor
    if factor <= 1.0:
        return in_s
    # Never sooner than today's gap: that is what keeps the server's pollInterval.
    return max(gap_s, in_s - min(max(LEAD_MIN_S, LEAD_FRACTION * in_s), LEAD_MAX_S))


class PushHub:
    """The registry of this process's waits and the listeners of their sessions. A wait registers with
    :meth:`register` and asks its :class:`~.lease.Lease` everything else; the worker gives the hub its read
    (:meth:`reads_with`) and closes it (:meth:`aclose`)."""

    def __init__(
        self,
        *,
        enabled: bool = True,
        stretch: float = DEFAULT_STRETCH,
        list_reads: bool = True,
        task_reads: bool = True,
        net_stretch: float = DEFAULT_NET_STRETCH,
    ) -> None:
        self.enabled = enabled
        #: Read ``tasks/list`` of stateful 2025-11-25 HTTP sessions with waits here (``push/list_reader.py``).
        self.list_reads = list_reads
        #: Read idle waits' tasks here (``push/poller.py``), once :meth:`reads_with` gave the read.
        self.task_reads = task_reads
        self.factor = max(1.0, stretch)
        self.net = max(self.factor, net_stretch)
        self._read: Callable[[SessionRef, str | None, str], Awaitable[TaskState]] | None = None
        self._sessions: dict[str, _Session] = {}
        self._notifying: dict[str, float] = {}
        self._woken = _Lru()
        self._looked = _Lru()
        self._not_ours = _Lru()
        self._tokens = float(LOOKUP_BURST)
        self._tokens_at = time.monotonic()
        self._lookups: set[asyncio.Task[None]] = set()
        self._queue: asyncio.Queue[tuple[Client, str, str | None, TaskNotified, str]] | None = None
        self._senders: list[asyncio.Task[None]] = []
        self._sweeper: asyncio.Task[None] | None = None
        self._meter_counter: Any = None
        self._reads_counter: Any = None
        #: notices, woken, signals, signal_errors, duplicates, unknown, not_waking, malformed, lookups, ...
        self.counts: Counter[str] = Counter()
        self._closed = False
        #: (key, task id) → the leases of activities running here on that task (weak: a lease an activity dropped
        #: without closing goes with it).
        self._live: dict[tuple[str, str], weakref.WeakSet[HubLease]] = {}

    # --- what the waiting activities call (through their lease) -----------------------------------------

    def register(self, registration: Registration) -> HubLease:
        """A lease on ``registration``'s wait: registered (and renewed) by :meth:`HubLease.renew` before each gap,
        asked what the hub knows of it, released when the wait ends. Its key is computed here, once.

        An activity of the same workflow on the same task that still runs here was abandoned by its workflow (which
        runs one at a time on a task, and starts the next only once it let the last one go): its lease ends
        (:attr:`Lease.ended`), so it stops reading at once instead of when a heartbeat's reply brings the cancel."""
        key = self.key(registration.ref, registration.principal)
        lease = HubLease(self, registration, key)
        self._end_leases(key, registration.task_id, registration.workflow_id, keep=lease)
        self._live.setdefault((key, registration.task_id), weakref.WeakSet()).add(lease)
        return lease

    def moved_on(self, ref: SessionRef, principal: str | None, task_id: str, workflow_id: str) -> None:
        """The workflow ``workflow_id`` left its wait on ``task_id`` (an activity of its next step started here: a
        retrieval, a cancel): its waits here end, and the hub reads the task no more for it."""
        key = self.key(ref, principal)
        self._end_leases(key, task_id, workflow_id)
        s = self._sessions.get(key)
        route = s.routes.get(task_id) if s is not None else None
        if route is not None and route.workflow_id == workflow_id:
            self.forget(ref, principal, task_id, key=key)

    def _end_leases(self, key: str, task_id: str, workflow_id: str | None, *, keep: HubLease | None = None) -> None:
        """End the leases running here on ``task_id`` (of ``workflow_id`` only, unless None), ``keep`` aside."""
        live = self._live.get((key, task_id))
        if not live:
            self._live.pop((key, task_id), None)
            return
        for other in list(live):
            if other is not keep and (workflow_id is None or other.workflow_id == workflow_id):
                other.end()
                live.discard(other)
                self.counts["waits_ended_here"] += 1

    def _closed_lease(self, lease: HubLease, key: str, task_id: str) -> None:
        live = self._live.get((key, task_id))
        if live is not None:
            live.discard(lease)
            if not live:
                del self._live[(key, task_id)]

    def watch(
        self,
        reg: Registration,
        for_s: float,
        *,
        session: WireSession | None = None,
        on_wake: Callable[[], None] | None = None,
        key: str | None = None,
        status: str | None = None,
        gap_s: float | None = None,
        read: bool = True,
        state: TaskState | None = None,
    ) -> None:
        """Register (or renew) the wait ``reg`` for ``for_s`` more seconds; starts the session's listener.
        ``on_wake`` runs when a notification wakes the workflow (the registering activity stops its own wait);
        ``key``: :meth:`key` of the registration's session and principal, computed once by its lease;
        ``status``: what the wait's own last read saw (a ``tasks/list`` read wakes the wait when it says otherwise);
        ``gap_s``: an idle wait that just read its task, with today's gap (``reg.gap_for`` computes it from a read):
        the hub reads the task itself from then on (``push/poller.py``); ``read`` False: the wait took the hub's own
        last read (:meth:`fresh`) and did not ask the server, so the hub's schedule stays as it is; ``state``: what
        the wait's own read saw (a read of this process, as the hub's own are)."""
        ref, principal, task_id = reg.ref, reg.principal, reg.task_id
        workflow_id, run_id, epoch, temporal = reg.workflow_id, reg.run_id, reg.epoch, reg.temporal
        gap_for = reg.gap_for if gap_s is not None else None
        if not self.enabled or self._closed:
            return
        kind = _kind(ref)
        if kind is None:
            return
        key = key or self.key(ref, principal)
        s = self._sessions.get(key)
        if s is None:
            s = self._sessions[key] = _Session(
                key=key, ref=ref, principal=principal, kind=kind, server=ref.endpoint.identity()
            )
        new = task_id not in s.routes
        route = s.routes.get(task_id)
        expires = time.monotonic() + max(for_s, 1.0)
        if route is not None and route.workflow_id == workflow_id and route.run_id == run_id:
            # Renewed in place: one registration per poll of every idle wait, the hub's hottest path.
            route.epoch, route.expires, route.on_wake, route.status = epoch, expires, on_wake, status
            route.gap_for = gap_for
        else:
            route = s.routes[task_id] = _Route(
                workflow_id=workflow_id,
                run_id=run_id,
                epoch=epoch,
                expires=expires,
                on_wake=on_wake,
                status=status,
                gap_for=gap_for,
            )
        if read and state is not None and gap_for is not None:
            self._saw(route, state)
        s.temporal = temporal
        if kind == "stdio" and session is not None and isinstance(session.transport, StdioTransport):
            s.stdio = session.transport
        if new and isinstance(s.listener, TasksSubscription):
            s.listener.ids_changed()
        if self._meter_counter is None:
            self._meter_counter = _counter(temporal)
            self._reads_counter = _counter(
                temporal, "mcp_tasks_worker_reads", "tasks/get reads the worker made for its idle waits, by result"
            )
        self._ensure_listener(s)
        if kind == "get" and self.list_reads:
            if s.reader is None:
                caps = session.capabilities if session is not None else {}
                offered = None if not caps else (caps.get("tasks") or {}).get("list") is not None
                s.reader = ListReader(
                    ref,
                    lambda: self._list_waits(s),
                    lambda t, st: self._list_wake(s, t, st),
                    name=f"{s.server} {ref.session_id or ''}".strip(),
                    offered=offered,
                )
            self._ensure_reader(s)
        if gap_s is not None and route.gap_for is not None and self._polls(s):
            if s.poller is None:
                s.poller = TaskPoller(
                    lambda t: self._read_task(s, t),
                    lambda t: self._poll_before(s, t),
                    lambda t, st: self._poll_after(s, t, st),
                    name=f"{s.server} {ref.session_id or ''}".strip(),
                    on_result=lambda result: self._count_read(s, result),
                )
            if read or not s.poller.plans(task_id):
                s.poller.schedule(task_id, _ahead(gap_s, self._poll_factor(s, task_id)))  # from the read just made
            self._ensure_poller(s)
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = asyncio.create_task(self._sweep(), name="mcp-tasks-push-sweep")

    def fresh(self, key: str, task_id: str) -> TaskState | None:
        """The task's state as this process's last read saw it (the hub's or the wait's own), if it saw it ``working``
        and that read is within the hub's pace for the task (today's gap, × ``push_net_stretch`` under notifications;
        :data:`FRESH_SLACK` of room) or a recent complete ``tasks/list`` read listed the task (a change would have
        woken the wait either way): an idle wait's attempt need not ask the server again."""
        s = self._sessions.get(key)
        route = s.routes.get(task_id) if s is not None else None
        if s is None or route is None or route.read_state is None or route.read_at is None or route.gap_for is None:
            return None
        if self._listed(s, task_id):
            return route.read_state  # a recent complete tasks/list read listed it, and a change there wakes it
        if s.poller is None or not s.poller.healthy() or not s.poller.plans(task_id):
            return None  # nobody here reads it between the wait's attempts: each attempt reads
        try:
            # The hub's own pace for it, with room for a read that is due now and not made yet.
            gap = route.gap_for(route.read_state) * self._poll_factor(s, task_id) * FRESH_SLACK
        except Exception:  # noqa: BLE001
            return None
        return route.read_state if time.monotonic() - route.read_at < gap else None

    def spacing(self, key: str, task_id: str) -> float:
        """Seconds until the server's pollInterval has passed since this hub's last read of the task (at most
        :data:`MAX_SPACING_S`): the read a wake asks for waits that long, so the server is never asked sooner than
        it asked to be."""
        s = self._sessions.get(key)
        route = s.routes.get(task_id) if s is not None else None
        if route is None or route.read_at is None or not route.read_poll_s:
            return 0.0
        return max(0.0, min(MAX_SPACING_S, route.read_poll_s - (time.monotonic() - route.read_at)))

    def reads_with(self, read: Callable[[SessionRef, str | None, str], Awaitable[TaskState]]) -> None:
        """How the hub reads a task itself (``tasks/get`` through the worker's session pool): (session, principal,
        task id) → its state. Without it, no task is read here."""
        self._read = read

    def forget(self, ref: SessionRef, principal: str | None, task_id: str, *, key: str | None = None) -> None:
        """The wait on ``task_id`` ended (terminal, gone): no more wake-ups for it from here, no read of it (one in
        flight is cancelled)."""
        s = self._sessions.get(key or self.key(ref, principal))
        if s is not None and s.poller is not None:
            s.poller.drop(task_id)
        if s is not None and s.routes.pop(task_id, None) is not None and isinstance(s.listener, TasksSubscription):
            s.listener.ids_changed()

    def stretch(
        self, ref: SessionRef, principal: str | None, task_id: str, *, key: str | None = None, idle: bool = False
    ) -> float:
        """How much this wait's poll gaps may stretch: ``stretch`` where its session's notifications can reach us
        (a live listener here, or the session's stream held by another client) on a server that has delivered a
        notification for one of our waits within the last day, or a recent complete ``tasks/list`` read listed it;
        else 1 (today's schedule exactly). ``idle``: the wait's own attempts, for a wait registered with a gap
        (:meth:`watch`): ``push_net_stretch`` wherever this process reads for it, its own reads of the task
        included (the wait's attempts are then only the net for this process's death)."""
        if not self.enabled or self.factor <= 1.0:
            return 1.0
        s = self._sessions.get(key or self.key(ref, principal))
        if s is None:
            return 1.0
        factor = self.net if idle else self.factor
        if self._listed(s, task_id) or self._notified(s, task_id):
            return factor
        if idle and s.poller is not None and s.poller.healthy() and self._polls(s):
            route = s.routes.get(task_id)
            if route is not None and route.gap_for is not None:
                return factor
        return 1.0

    def _listed(self, s: _Session, task_id: str) -> bool:
        """A recent complete tasks/list read listed it: the reader wakes it."""
        return s.reader is not None and s.reader.covers(task_id)

    def _notified(self, s: _Session, task_id: str) -> bool:
        """Its session's notifications reach us on a server that has shown it notifies."""
        if s.listener is None or not s.listener.live(task_id):
            return False
        heard = self._notifying.get(s.server)
        return heard is not None and time.monotonic() - heard <= NOTIFYING_MEMORY_S

    async def until_listed(
        self, ref: SessionRef, principal: str | None, task_id: str, *, timeout: float, key: str | None = None
    ) -> bool:
        """For a wait registered just now (:meth:`watch`) on a session whose ``tasks/list`` is being read here: wait
        (at most ``timeout``) for the reader's next complete read to list it, so that its next gap stretches as a
        notified wait's would, the first one included. False at once where no reader reads this session."""
        if not self.enabled or self.factor <= 1.0:
            return False
        s = self._sessions.get(key or self.key(ref, principal))
        if s is None or s.reader is None or task_id not in s.routes:
            return False
        if s.reader.covers(task_id):
            return True
        if s.reader_task is None or s.reader_task.done() or not s.reader.reading():
            return False
        return await s.reader.until_listed(task_id, timeout)

    def stats(self) -> dict[str, Any]:
        """Counts and each session's listener state (tests, the benchmark, debugging)."""
        return {
            "counts": dict(self.counts),
            "sessions": {
                s.key: {
                    "kind": s.kind,
                    "server": s.server,
                    "waits": len(s.routes),
                    "state": s.listener.state.value if s.listener else None,
                    "why": s.listener.why if s.listener else None,
                    "listener": dict(s.listener.counts) if s.listener else {},
                    "list": s.reader.stats() if s.reader else None,
                    "reads": s.poller.stats() if s.poller else None,
                }
                for s in self._sessions.values()
            },
        }

    async def aclose(self) -> None:
        self._closed = True
        tasks = [t for t in (self._sweeper, *self._senders, *self._lookups) if t is not None]
        tasks += [s.task for s in self._sessions.values() if s.task is not None]
        tasks += [s.reader_task for s in self._sessions.values() if s.reader_task is not None]
        tasks += [s.poller_task for s in self._sessions.values() if s.poller_task is not None]
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self._sessions.clear()
        self._sweeper, self._senders, self._queue = None, [], None
        self._closed = False  # a plugin may run its worker again: the hub then listens again

    # --- listening --------------------------------------------------------------------------------------

    @staticmethod
    def key(ref: SessionRef, principal: str | None) -> str:
        """The listener a wait belongs to: matched by server (the whole endpoint, credential references included),
        session and principal, so a notice heard on one session never wakes a wait registered on another."""
        return f"{ref.endpoint.model_dump_json()}|{ref.session_id or ''}|{principal or ''}|{ref.era}"

    def _ensure_listener(self, s: _Session) -> None:
        if (s.task is None or s.task.done()) and time.monotonic() >= s.retry_at and s.routes:
            s.task = asyncio.create_task(self._listen(s), name=f"mcp-tasks-push:{s.kind}")

    def _ensure_reader(self, s: _Session) -> None:
        if (
            s.reader is not None
            and (s.reader_task is None or s.reader_task.done())
            and time.monotonic() >= s.reader_retry_at
            and s.routes
        ):
            s.reader_task = asyncio.create_task(self._read_lists(s), name="mcp-tasks-list")

    def _polls(self, s: _Session) -> bool:
        return self.task_reads and self._read is not None and s.kind in _POLLABLE

    def _ensure_poller(self, s: _Session) -> None:
        if s.poller is not None and s.poller.planned() and (s.poller_task is None or s.poller_task.done()):
            s.poller_task = asyncio.create_task(s.poller.run(), name="mcp-tasks-poller")

    def _poll_factor(self, s: _Session, task_id: str) -> float:
        """How much further apart than today's the hub reads a task: not at all while a list read lists it (the
        list read is the read; asked again after a gap), the net's (``push_net_stretch``) where notifications reach
        us, else 1.

        Under notifications the hub's read of an idle wait's task is there for a notification the server did not
        send; the wait's own attempt, one net gap apart, takes that read (:meth:`fresh`). Read at ``push_stretch``
        (4), there were two reads per attempt, and at 10,000 tasks aged 10 min … 1 h the second one was a quarter
        of the worker's CPU (``bench/README.md``). At the net's pace a dropped notification is seen within the gap
        that already bounds a dead worker, and only once per server: a read that finds an end no notification
        announced takes the server's notifying standing away (:meth:`_poll_after`)."""
        return self.net if self._notified(s, task_id) else 1.0

    def _poll_before(self, s: _Session, task_id: str) -> float | None:
        route = s.routes.get(task_id)
        if route is None or route.gap_for is None or route.expires < time.monotonic():
            return None
        if self._listed(s, task_id):
            return max(1.0, s.reader.interval if s.reader is not None else 1.0)
        return 0.0

    def _poll_after(self, s: _Session, task_id: str, state: TaskState) -> float | None:
        """A read here: wake the wait when its task changed to a status that can end it (``via = poll``, once per
        status and input round); then the next read, on the wait's schedule, until the wait's workflow reads the task
        itself and ends or renews the registration (a wake that could not be sent is tried at the next read)."""
        route = s.routes.get(task_id)
        if route is None or route.gap_for is None:
            return None
        self._saw(route, state)
        if state.status in WAKE_STATUSES and state.status != route.status:
            if self._wake(
                s,
                route.workflow_id,
                route.run_id,
                TaskNotice(task_id=task_id, status=state.status),
                route.epoch,
                via="poll",
            ):
                if self._notified(s, task_id):
                    # A server counted as notifying let a wait's task change with no notification of it (none woke
                    # the wait first): it drops some, so its waits go back to today's schedule until the next
                    # notification it delivers for one of them (a notifier of some statuses only flips between).
                    self._notifying.pop(s.server, None)
                    self._count(s, "unannounced")
                if route.on_wake is not None:
                    with contextlib.suppress(Exception):
                        route.on_wake()
        if state.terminal and (route.workflow_id, task_id, state.status, route.epoch) in self._woken:
            # An end is final: the workflow, woken, reads it itself. Reading it again here only asks a server about a
            # task already settled (a wake not sent yet is tried at the next read instead).
            return None
        try:
            gap = route.gap_for(state)
        except Exception:  # noqa: BLE001  (a schedule that cannot be computed: the wait's own attempts go on)
            return None
        return max(1.0, gap) * self._poll_factor(s, task_id)

    @staticmethod
    def _saw(route: _Route, state: TaskState) -> None:
        """A read of the task by this process (the hub's, or its wait's own): when, its pollInterval, its state."""
        route.read_at, route.read_state = time.monotonic(), state if state.status == "working" else None
        route.read_poll_s = state.poll_interval_ms / 1000 if state.poll_interval_ms else None

    async def _read_task(self, s: _Session, task_id: str) -> TaskState:
        assert self._read is not None
        return await self._read(s.ref, s.principal, task_id)

    def _count_read(self, s: _Session, result: str) -> None:
        if self._reads_counter is not None:
            self._reads_counter.add(1, {"endpoint": s.server, "result": result})

    async def _read_lists(self, s: _Session) -> None:
        assert s.reader is not None
        again = await s.reader.run()
        if again is not None:
            s.reader_retry_at = time.monotonic() + again

    def _list_waits(self, s: _Session) -> dict[str, str | None]:
        now = time.monotonic()
        return {task_id: r.status for task_id, r in s.routes.items() if r.expires >= now}

    def _list_wake(self, s: _Session, task_id: str, status: str) -> bool:
        """A ``tasks/list`` read says a wait's task changed: the same wake-up as a notification's (``via = list``)."""
        route = s.routes.get(task_id)
        if route is None or route.expires < time.monotonic():
            return False
        if not self._wake(
            s, route.workflow_id, route.run_id, TaskNotice(task_id=task_id, status=status), route.epoch, via="list"
        ):
            return False
        if route.on_wake is not None:
            with contextlib.suppress(Exception):
                route.on_wake()
        return True

    async def _listen(self, s: _Session) -> None:
        """Run the session's listener; when it finds no stream (unsupported, gone), try again much later."""
        owned: WireSession | None = None
        name = f"{s.server} {s.ref.session_id or ''}".strip()
        try:

            def deliver(message: dict[str, Any]) -> bool:
                return self._on_message(s, message)

            if s.kind == "stdio":
                if s.stdio is None:
                    return
                s.listener = StdioTap(s.stdio, deliver, name=name)
            elif s.kind == "get":
                owned = await WireSession.attach(s.ref)
                transport = owned.transport
                assert not isinstance(transport, StdioTransport)
                s.listener = GetStream(transport, deliver, name=name)
            else:
                owned = await WireSession.attach(s.ref)
                s.listener = TasksSubscription(owned, lambda: list(s.routes), deliver, name=name)
            await s.listener.run()
            s.retry_at = time.monotonic() + UNSUPPORTED_RETRY_S
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001  (cannot attach: the polls go on; tried again later)
            log.debug("notifications for %s: no listener (%s: %s)", name, type(exc).__name__, exc)
            s.retry_at = time.monotonic() + 30.0
        finally:
            if owned is not None:
                with contextlib.suppress(Exception):
                    await owned.aclose()

    async def _sweep(self) -> None:
        """Expire registrations, close listeners of sessions with no wait left, restart those due again."""
        while not self._closed:
            await asyncio.sleep(SWEEP_S)
            now = time.monotonic()
            for gone in [k for k, live in self._live.items() if not live]:
                del self._live[gone]
            for key in list(self._sessions):
                s = self._sessions[key]
                for task_id in [t for t, r in s.routes.items() if r.expires < now]:
                    del s.routes[task_id]
                    if isinstance(s.listener, TasksSubscription):
                        s.listener.ids_changed()
                if s.routes:
                    self._ensure_listener(s)
                    self._ensure_reader(s)
                    self._ensure_poller(s)
                    continue
                for t in (s.task, s.reader_task, s.poller_task):
                    if t is not None:
                        t.cancel()
                        with contextlib.suppress(asyncio.CancelledError, Exception):
                            await t
                del self._sessions[key]
            if not self._sessions:
                self._sweeper = None
                return

    # --- hearing --------------------------------------------------------------------------------------

    def _on_message(self, s: _Session, message: dict[str, Any]) -> bool:
        """One message from a session's listener; True when it was of use (for the listener's flood guard)."""
        try:
            notice = task_notice(message)
        except MalformedNotice:
            self._count(s, "malformed")
            return False
        if notice is None:
            return False  # another notification (progress, log, list changed): not ours to read
        self.counts["notices"] += 1
        route = s.routes.get(notice.task_id)
        if route is None or route.expires < time.monotonic():
            if s.kind == "get" and notice.status in WAKE_STATUSES:
                self._lookup(s, notice)
            else:
                self._count(s, "unknown")
            return False
        s.heard = self._notifying[s.server] = time.monotonic()
        if notice.status not in WAKE_STATUSES:
            self._count(s, "not_waking")
            return True
        if not self._wake(s, route.workflow_id, route.run_id, notice, route.epoch):
            return False
        if route.on_wake is not None:
            with contextlib.suppress(Exception):
                route.on_wake()
        return True

    def _wake(
        self,
        s: _Session,
        workflow_id: str,
        run_id: str | None,
        notice: TaskNotice,
        epoch: int,
        via: str = "notification",
    ) -> bool:
        key = (workflow_id, notice.task_id, notice.status, epoch)
        if key in self._woken:
            self._count(s, "duplicate")
            return False
        if s.temporal is None:
            return False
        if self._queue is None:
            self._queue = asyncio.Queue(SIGNAL_QUEUE)
            self._senders = [asyncio.create_task(self._send(), name="mcp-tasks-push-signal") for _ in range(SENDERS)]
        try:
            notified = TaskNotified.model_validate(
                {"task_id": notice.task_id, "status": notice.status, "via": via if via != "notification" else None}
            )
            self._queue.put_nowait((s.temporal, workflow_id, run_id, notified, s.server))
        except asyncio.QueueFull:
            self._count(s, "signal_dropped")
            return False
        self._woken.put(key, time.monotonic())
        self._count(s, "woken" if via == "notification" else f"{via}_woken")
        return True

    async def _send(self) -> None:
        assert self._queue is not None
        while True:
            temporal, workflow_id, run_id, notified, server = await self._queue.get()
            try:
                await temporal.get_workflow_handle(workflow_id, run_id=run_id).signal(TASK_NOTIFIED_SIGNAL, notified)
                self.counts["signals"] += 1
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001  (ended meanwhile, or Temporal unreachable: the poll sees it)
                self.counts["signal_errors"] += 1
                log.debug("wake of %s not sent: %s: %s", workflow_id, type(exc).__name__, exc)

    def _lookup(self, s: _Session, notice: TaskNotice) -> None:
        """A wake-worthy notice for a task not registered here: find its workflow, within the bounds."""
        now = time.monotonic()
        value = search_attribute_value(notice.task_id)
        if not _SAFE_LITERAL.match(value) or s.temporal is None:
            self._count(s, "unknown")
            return
        if self._not_ours.get(notice.task_id, 0.0) > now or (notice.task_id, notice.status) in self._looked:
            self._count(s, "unknown")
            return
        self._tokens = min(float(LOOKUP_BURST), self._tokens + (now - self._tokens_at) * LOOKUPS_PER_S)
        self._tokens_at = now
        if self._tokens < 1.0 or len(self._lookups) >= MAX_LOOKUPS_IN_FLIGHT:
            self._count(s, "lookup_dropped")
            return
        self._tokens -= 1.0
        self._looked.put((notice.task_id, notice.status), now)
        self._count(s, "lookups")
        task = asyncio.create_task(self._find_and_wake(s, s.temporal, notice, value))
        self._lookups.add(task)
        task.add_done_callback(self._lookups.discard)

    async def _find_and_wake(self, s: _Session, temporal: Client, notice: TaskNotice, value: str) -> None:
        query = (
            f"WorkflowType = '{TASK_WORKFLOW_TYPE}' AND ExecutionStatus = 'Running' AND "
            f"{TASK_ID_SEARCH_ATTRIBUTE} = '{value}'"
        )
        try:
            found = [wf async for wf in temporal.list_workflows(query, limit=2)]
        except Exception as exc:  # noqa: BLE001  (visibility unavailable: the polls see the task)
            self.counts["lookup_errors"] += 1
            log.debug("lookup of a notified task failed: %s: %s", type(exc).__name__, exc)
            return
        if not found:
            self._not_ours.put(notice.task_id, time.monotonic() + NEGATIVE_S)
            self._count(s, "not_ours")
            return
        for wf in found:
            self._wake(s, wf.id, wf.run_id, notice, -1)

    def _count(self, s: _Session, result: str) -> None:
        self.counts[result] += 1
        if self._meter_counter is not None:
            with contextlib.suppress(Exception):  # metrics never fail a listener
                self._meter_counter.add(1, {"endpoint": s.server, "result": result})


def _counter(
    temporal: Client,
    name: str = "mcp_tasks_notifications",
    description: str = "task status notifications heard, by what became of them",
) -> Any:
    """A counter on the worker's runtime (Prometheus where ``metrics_port`` is set): ``mcp_tasks_notifications`` by
    default."""
    try:
        from temporalio.runtime import Runtime

        runtime = temporal.service_client.config.runtime or Runtime.default()
        return runtime.metric_meter.create_counter(name, description)
    except Exception:  # noqa: BLE001
        return None


class HubLease(Lease):
    """A lease on a :class:`PushHub`: each answer is the hub's, for the key computed once at registration (a
    heartbeating wait may renew every 100 ms, every idle wait once per attempt: the renewal makes no object)."""

    __slots__ = ("_hub", "_reg", "_key", "_on_wake", "__weakref__")

    def __init__(self, hub: PushHub, registration: Registration, key: str) -> None:
        super().__init__()
        self._hub, self._reg, self._key = hub, registration, key
        self._on_wake = self._wake  # bound once, handed to the hub at every renewal

    @property
    def workflow_id(self) -> str:
        return self._reg.workflow_id

    @property
    def net(self) -> float:
        return self._hub.net

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
        self._hub.watch(
            self._reg,
            gap_s * 1.1 + GRACE_S,
            session=session,
            on_wake=self._on_wake,
            key=self._key,
            status=status,
            gap_s=today_s,
            read=read,
            state=state,
        )

    def hold(self, for_s: float, *, session: WireSession | None, status: str | None) -> None:
        self._hub.watch(self._reg, for_s, session=session, on_wake=self._on_wake, key=self._key, status=status)

    def stretch(self, *, idle: bool = False) -> float:
        r = self._reg
        return self._hub.stretch(r.ref, r.principal, r.task_id, key=self._key, idle=idle)

    def fresh(self) -> TaskState | None:
        return self._hub.fresh(self._key, self._reg.task_id)

    def spacing(self) -> float:
        return self._hub.spacing(self._key, self._reg.task_id)

    async def until_listed(self, timeout: float) -> bool:
        r = self._reg
        return await self._hub.until_listed(r.ref, r.principal, r.task_id, timeout=timeout, key=self._key)

    def release(self) -> None:
        r = self._reg
        self._hub.forget(r.ref, r.principal, r.task_id, key=self._key)
        # Read terminal here: any other wait on the task here has nothing left to read.
        self._hub._end_leases(self._key, r.task_id, None, keep=self)

    def close(self) -> None:
        self._hub._closed_lease(self, self._key, self._reg.task_id)

    def _wake(self) -> None:
        if not self.woken.done():
            self.woken.set_result(None)


__all__ = ["DEFAULT_NET_STRETCH", "DEFAULT_STRETCH", "GRACE_S", "HubLease", "PushHub", "WAKE_STATUSES"]
