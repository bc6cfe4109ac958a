"""A server's task status notifications: where they arrive, read within bounds. Nothing here knows Temporal.

This module only hears them; what they may cause (a wake-up, never a decision) is decided by the push hub. Where
each era sends them and the bounds every listener keeps are on :class:`Listener`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

import httpx2

from mcp_temporal_tasks.activities.wire.backpressure import hold_of
from mcp_temporal_tasks.activities.wire.http_transport import HttpTransport
from mcp_temporal_tasks.activities.wire.resume import ResumePoint
from mcp_temporal_tasks.activities.wire.session import WireSession
from mcp_temporal_tasks.activities.wire.stdio_transport import StdioTransport
from mcp_temporal_tasks.protocol.limits import MAX_TASK_ID, carry_problem, loads_bounded
from mcp_temporal_tasks.protocol.wire_errors import JsonRpcError, McpWireError

log = logging.getLogger(__name__)

#: Methods that carry a task's state: 2025-11-25's ``notifications/tasks/status``, the extension's
#: ``notifications/tasks``.
TASK_STATUS_METHODS = frozenset({"notifications/tasks/status", "notifications/tasks"})
TASK_STATUSES = frozenset({"working", "input_required", "completed", "failed", "cancelled"})
#: One notification is a task object of a few hundred bytes (the extension's may inline a result, which we never
#: read from it: the result is read by ``tasks/get`` or ``tasks/result``, as without notifications).
MAX_NOTICE_BYTES = 256 * 1024
#: A stream silent this long (not even the servers' 15 s keep-alive comments) is closed and opened again.
READ_IDLE_S = 75.0
#: Backoff after a stream dropped or was refused (5xx, 401/403, reset, oversized event): 1 s doubling to this.
MAX_BACKOFF_S = 60.0
#: Retry of a GET refused with 409 (another client holds the session's stream): 2 s doubling to this, so that a
#: worker of ours takes the stream over within half a minute of its holder's death.
MAX_HELD_BACKOFF_S = 30.0
#: More useless messages than this in one second shed the listener: for 60 s, doubling up to 10 minutes.
FLOOD_USELESS_PER_S = 500
FLOOD_BACKOFF_S = 60.0
MAX_FLOOD_BACKOFF_S = 600.0
#: Task ids one ``subscriptions/listen`` asks for (a session with more waits than this has the rest polled).
MAX_LISTEN_IDS = 1000
#: How long the ids of a subscription settle before it is re-opened for a changed set.
RELISTEN_DEBOUNCE_S = 1.0
#: How long a ``subscriptions/listen`` may take to be acknowledged.
ACK_TIMEOUT_S = 10.0


class MalformedNotice(ValueError):
    """A task status notification we cannot read (no task id, an unknown status, not an object): ignored."""


@dataclass(frozen=True, slots=True)
class TaskNotice:
    """What a task status notification says, and all that is read of it: which task, and its status."""

    task_id: str
    status: str


def task_notice(message: Any) -> TaskNotice | None:
    """The notice a message carries; None for any other message (progress, log, list-changed). Lenient about
    everything but the two fields read; :class:`MalformedNotice` when a task notification lacks them."""
    if not isinstance(message, dict):
        raise MalformedNotice("not a JSON object")
    method = message.get("method")
    if method not in TASK_STATUS_METHODS or "id" in message:
        return None
    params = message.get("params")
    if not isinstance(params, dict):
        raise MalformedNotice(f"{method} without a params object")
    nested = params.get("task")
    task: dict[str, Any] = nested if isinstance(nested, dict) else params
    task_id, status = task.get("taskId"), task.get("status")
    if not isinstance(task_id, str) or not task_id or len(task_id) > MAX_TASK_ID or carry_problem(task_id):
        raise MalformedNotice(f"{method} without a usable taskId")
    if status not in TASK_STATUSES:
        raise MalformedNotice(f"{method} with status {str(status)[:32]!r}")
    return TaskNotice(task_id=task_id, status=status)


class Reach(str, Enum):
    """Where a listener stands: whether a server's notifications for this session can reach us now."""

    STARTING = "starting"
    #: A stream is open here: notifications for the session arrive.
    LISTENING = "listening"
    #: HTTP 409: another client holds the session's one stream (another worker of ours, as a rule).
    HELD_ELSEWHERE = "held_elsewhere"
    #: Dropped, refused or broken; opened again after a backoff.
    BACKING_OFF = "backing_off"
    #: Mostly useless messages (a flood): ignored for a while.
    SHEDDING = "shedding"
    #: No stream for this session (405, 406, 400, a JSON-RPC error, no task events agreed): not retried by the listener.
    UNSUPPORTED = "unsupported"
    #: The session is gone (404) or its transport closed.
    GONE = "gone"


#: Called with every message that arrives; returns whether it was of use (a notice for a task being waited on).
Deliver = Callable[[dict[str, Any]], bool]


class _Unsupported(Exception):
    pass


class _Gone(Exception):
    pass


class _Held(Exception):
    pass


class _Flooded(Exception):
    pass


class _Dropped(Exception):
    pass


class _Again(Exception):
    """Open the stream again at once (a subscription whose task ids changed)."""


class Listener:
    """One session's notifications: ``run()`` until cancelled (or it ends UNSUPPORTED/GONE), reopening with backoff.
    Subclasses open one stream per ``_stream()`` call and feed each message to ``_deliver``.

    Both specs let a server tell its client when a task changes, and both say a requestor MUST NOT rely on it: this
    module only *hears* those messages; what they may cause (a wake-up, never a decision) is decided above the wire (the
    push hub). Where they arrive:

    * **2025-11-25 over streamable HTTP**: ``notifications/tasks/status`` (params = the task) on the session's
      standalone GET SSE stream (:class:`GetStream`). The TypeScript SDK 1.32 and the Python SDK 1.30 send them there
      and drop them while no client holds that stream; both allow one per session (a second GET gets HTTP 409). A 409
      therefore says "someone holds this session's stream" (another worker of ours, as a rule):
      :attr:`Reach.HELD_ELSEWHERE`, retried with backoff so that the stream is taken over once its holder is gone.
    * **2025-11-25 over stdio**: the same notification, a line on the child's stdout among the replies
      (:class:`StdioTap`, through ``StdioTransport.on_notification``: the child is this process's).
    * **2026-07-28**: ``notifications/tasks`` (carrying the task) on a ``subscriptions/listen`` stream for the task ids
      asked (:class:`TasksSubscription`, the ext-tasks draft). A server that answers with an error or agrees to no task
      id is :attr:`Reach.UNSUPPORTED`. fastmcp 4.1.4, the one 2026-07-28 runtime here, serves ``subscriptions/listen``
      for list-changed and resource events only: this seam is exercised against it (refused) and against no runtime that
      sends task events, because none does yet.

    Bounds, so that a hostile or broken server costs little and never a wrong outcome: an SSE event over
    :data:`MAX_NOTICE_BYTES` breaks that stream (reopened after a backoff); a silence longer than :data:`READ_IDLE_S`
    (keep-alive comments count: both SDKs send one every 15 s) reopens it; a stream that drops or is refused is reopened
    with capped exponential backoff; and a listener whose messages are mostly useless (unknown tasks, malformed or
    repeated notifications: the caller's ``deliver`` says which were useful) beyond :data:`FLOOD_USELESS_PER_S` is shed
    for :data:`FLOOD_BACKOFF_S` (an HTTP stream is closed; a stdio child's notifications are dropped unread), so a flood
    of thousands per second costs at most about a second of parsing per backoff. Nothing is logged per message: state
    changes and counts go to the debug log.
    """

    kind = "listener"

    def __init__(self, deliver: Deliver, *, name: str) -> None:
        self._deliver_to = deliver
        self.name = name
        self.state = Reach.STARTING
        self.why = ""
        #: messages, useless, malformed (unreadable JSON), shed, opened, refused, dropped, oversized, floods
        self.counts: Counter[str] = Counter()
        self._second = 0
        self._useless_now = 0
        self._flooded = False
        self._floods = 0
        self._logged = -10.0

    def live(self, task_id: str | None = None) -> bool:
        """Whether a notification for the session (for ``task_id``) can reach one of us now."""
        return self.state in (Reach.LISTENING, Reach.HELD_ELSEWHERE)

    def _set(self, state: Reach, why: str = "") -> None:
        if state != self.state or why != self.why:
            log.debug("notifications %s %s: %s%s", self.kind, self.name, state.value, f" ({why})" if why else "")
        self.state, self.why = state, why

    def _deliver(self, message: dict[str, Any]) -> None:
        """One message, counted; too many useless ones in a second flag a flood (the stream then ends)."""
        self.counts["messages"] += 1
        try:
            useful = self._deliver_to(message)
        except Exception:  # noqa: BLE001  (a bug above must not end the stream, nor be logged per message)
            log.debug("notifications %s %s: delivery failed", self.kind, self.name, exc_info=True)
            useful = False
        if not useful:
            self._useless()

    def _useless(self) -> None:
        self.counts["useless"] += 1
        now = time.monotonic()
        if now - self._logged >= 10.0:
            # One debug line per 10 s at most, whatever a server sends: what was ignored, and how much.
            self._logged = now
            log.debug(
                "notifications %s %s: ignored %d of %d messages so far (%d unreadable)",
                self.kind,
                self.name,
                self.counts["useless"],
                self.counts["messages"] + self.counts["malformed"],
                self.counts["malformed"],
            )
        second = int(now)
        if second != self._second:
            self._second, self._useless_now = second, 0
        self._useless_now += 1
        if self._useless_now > FLOOD_USELESS_PER_S:
            self._flooded = True

    def _flood_backoff(self) -> float:
        self._floods += 1
        self.counts["floods"] += 1
        return min(MAX_FLOOD_BACKOFF_S, FLOOD_BACKOFF_S * 2 ** (self._floods - 1))

    async def _stream(self) -> None:
        raise NotImplementedError

    def _after_end_s(self, backoff_s: float) -> float:
        """The wait before opening a stream the server ended (or dropped) again: ``backoff_s`` unless a subclass
        knows what the server asked for (the GET stream's SSE ``retry``)."""
        return backoff_s

    async def run(self) -> None:
        failures = held = 0
        while True:
            opened = time.monotonic()
            self._flooded = False
            delay = 0.0
            try:
                await self._stream()
                self.counts["ended"] += 1
                self._set(Reach.BACKING_OFF, "the server ended the stream")
                failures = 0 if time.monotonic() - opened >= MAX_BACKOFF_S else failures + 1
                delay = self._after_end_s(min(MAX_BACKOFF_S, 2.0 ** (failures - 1)) if failures else 1.0)
            except asyncio.CancelledError:
                raise
            except _Again:
                continue
            except _Unsupported as exc:
                self.counts["unsupported"] += 1
                self._set(Reach.UNSUPPORTED, str(exc))
                return
            except _Gone as exc:
                self._set(Reach.GONE, str(exc))
                return
            except _Held:
                self.counts["held_elsewhere"] += 1
                self._set(Reach.HELD_ELSEWHERE, "HTTP 409: another client holds this session's stream")
                delay = min(MAX_HELD_BACKOFF_S, 2.0 * 2**held)
                held += 1
            except _Flooded:
                delay = self._flood_backoff()
                self._set(
                    Reach.SHEDDING,
                    f"more than {FLOOD_USELESS_PER_S} useless messages in a second; ignored for {delay:.0f}s",
                )
            except httpx2.ReadTimeout:
                self.counts["silent"] += 1
                self._set(Reach.BACKING_OFF, f"silent for {READ_IDLE_S:.0f}s")
                delay = 0.2
            except Exception as exc:  # noqa: BLE001  (dropped, refused, garbled: all end in a bounded retry)
                self.counts["dropped"] += 1
                oversized = isinstance(exc, httpx2.SSEError) and "exceeded" in str(exc)
                if oversized:
                    self.counts["oversized"] += 1
                self._set(
                    Reach.BACKING_OFF,
                    f"an event over {MAX_NOTICE_BYTES} bytes"
                    if oversized
                    else f"{type(exc).__name__}: {str(exc)[:200]}",
                )
                failures = 0 if time.monotonic() - opened >= MAX_BACKOFF_S else failures
                delay = self._after_end_s(min(MAX_BACKOFF_S, 2.0**failures))
                if isinstance(exc, McpWireError):
                    delay = max(delay, hold_of(exc) or 0.0)  # the server's hold: wire/backpressure.py
                failures += 1
            if self.state != Reach.HELD_ELSEWHERE:
                held = 0
            await asyncio.sleep(delay * random.uniform(0.8, 1.2))


class GetStream(Listener):
    """2025-11-25 over streamable HTTP: the session's standalone GET stream, through httpx2 (its SSE decoder with a
    per-event bound). ``transport`` is this listener's own (never a pooled one the pool may close while idle).

    Resumed as the spec says (SEP-1699, :mod:`.resume`): a stream that ended or dropped is opened again with
    ``Last-Event-ID`` (the last event id it carried), after the server's ``retry`` when it sent one (clamped to
    [0.05 s, 30 s]; the listener's own backoff otherwise, and whenever the stream keeps failing: the longer wins)."""

    kind = "GET"

    def __init__(self, transport: HttpTransport, deliver: Deliver, *, name: str) -> None:
        super().__init__(deliver, name=name)
        self.transport = transport
        self.point = ResumePoint()

    def _after_end_s(self, backoff_s: float) -> float:
        if self.point.retry_ms is None:
            return backoff_s
        # The server's retry, unless the stream keeps failing (then the backoff, which grows, is longer).
        return max(self.point.delay_s(), backoff_s if backoff_s > 1.0 else 0.0)

    async def _stream(self) -> None:
        if self.transport.closed:
            raise _Gone("transport closed")
        async with self.transport.open_event_stream(
            read_timeout_s=READ_IDLE_S, last_event_id=self.point.header()
        ) as response:
            status = response.status_code
            if status == 409:
                raise _Held()
            if status == 404 and self.transport.session_id:
                raise _Gone("HTTP 404: the session is gone")
            if status in (400, 404, 405, 406):
                raise _Unsupported(f"HTTP {status} to the GET stream")
            if status >= 400:
                self.counts["refused"] += 1
                raise _Dropped(f"HTTP {status} to the GET stream")
            ctype = response.headers.get("content-type", "").lower()
            if not ctype.startswith("text/event-stream"):
                raise _Unsupported(f"GET answered {ctype[:64]!r}, not an event stream")
            self.counts["opened"] += 1
            self._set(Reach.LISTENING)
            async for event in httpx2.EventSource(response, max_event_size=MAX_NOTICE_BYTES):
                self.point.saw(event.id, event.retry, message=False)
                if not event.data or not event.data.strip():
                    continue  # priming events
                try:
                    message = loads_bounded(event.data)
                except ValueError:
                    self.counts["malformed"] += 1
                    self._useless()
                else:
                    self._deliver(message)
                if self._flooded:
                    raise _Flooded()


class StdioTap(Listener):
    """2025-11-25 (or any era) over stdio: the child's notifications, through ``StdioTransport.on_notification``.
    Nothing to open or close; while shed after a flood, the child's notifications are dropped unread."""

    kind = "stdio"

    def __init__(self, transport: StdioTransport, deliver: Deliver, *, name: str) -> None:
        super().__init__(deliver, name=name)
        self.transport = transport
        self._shed_until = 0.0

    def live(self, task_id: str | None = None) -> bool:
        return self.state == Reach.LISTENING and self.transport.alive

    def _tap(self, message: dict[str, Any]) -> None:
        if self._shed_until:
            if time.monotonic() < self._shed_until:
                self.counts["shed"] += 1
                return
            self._shed_until = 0.0
            self._set(Reach.LISTENING)
        self._deliver(message)
        if self._flooded:
            self._flooded = False
            delay = self._flood_backoff()
            self._shed_until = time.monotonic() + delay
            self._set(
                Reach.SHEDDING,
                f"more than {FLOOD_USELESS_PER_S} useless messages in a second; ignored for {delay:.0f}s",
            )

    async def run(self) -> None:
        self.transport.on_notification = self._tap
        self._set(Reach.LISTENING)
        try:
            while self.transport.alive:
                await asyncio.sleep(5.0)
            self._set(Reach.GONE, "the stdio server exited")
        finally:
            if self.transport.on_notification == self._tap:
                self.transport.on_notification = None


class TasksSubscription(Listener):
    """2026-07-28: ``subscriptions/listen`` for the task ids ``task_ids()`` returns (at most :data:`MAX_LISTEN_IDS`),
    opened again (after :data:`RELISTEN_DEBOUNCE_S`) when that set changes; ``agreed`` holds the ids the server's
    acknowledgement agreed to. ``client`` is this listener's own session (the extension is stateless)."""

    kind = "subscriptions/listen"

    def __init__(
        self,
        client: WireSession,
        task_ids: Callable[[], list[str]],
        deliver: Deliver,
        *,
        name: str,
        on_transport_frames: bool = True,
    ) -> None:
        super().__init__(deliver, name=name)
        self.client = client
        self.task_ids = task_ids
        self.agreed: frozenset[str] = frozenset()
        self._changed = asyncio.Event()
        self._acked = asyncio.Event()
        self._refused: str | None = None
        self._asked: frozenset[str] = frozenset()
        #: False on stdio, where the transport's own tap already delivers every notification.
        self._deliver_frames = on_transport_frames

    def live(self, task_id: str | None = None) -> bool:
        return self.state == Reach.LISTENING and (task_id is None or task_id in self.agreed)

    def ids_changed(self) -> None:
        self._changed.set()

    def _frame(self, message: dict[str, Any]) -> None:
        if message.get("method") == "notifications/subscriptions/acknowledged":
            params = message.get("params")
            notes = params.get("notifications") if isinstance(params, dict) else None
            ids = notes.get("taskIds") if isinstance(notes, dict) else None
            agreed = (
                frozenset(i for i in ids if isinstance(i, str)) & self._asked if isinstance(ids, list) else frozenset()
            )
            self.agreed = agreed
            if not agreed:
                self._refused = "the server agreed to no task events"
            self._acked.set()
            return
        if self._deliver_frames:
            self._deliver(message)
            if self._flooded:
                self._changed.set()  # wakes the loop, which ends this subscription

    async def _stream(self) -> None:
        self._changed.clear()
        ids = sorted(self.task_ids())[:MAX_LISTEN_IDS]
        while not ids:
            await self._changed.wait()
            self._changed.clear()
            ids = sorted(self.task_ids())[:MAX_LISTEN_IDS]
        self._asked, self.agreed, self._refused = frozenset(ids), frozenset(), None
        self._acked.clear()
        listen = asyncio.ensure_future(self.client.listen_tasks(ids, self._frame, hold_s=READ_IDLE_S))
        changed = asyncio.ensure_future(self._changed.wait())
        acked = asyncio.ensure_future(self._acked.wait())
        try:
            done, _ = await asyncio.wait({listen, acked}, timeout=ACK_TIMEOUT_S, return_when=asyncio.FIRST_COMPLETED)
            if not done:
                raise _Dropped(f"no acknowledgement within {ACK_TIMEOUT_S:.0f}s")
            if listen.done() and not acked.done():
                self._ended(listen)
                raise _Dropped("the subscription ended before it was acknowledged")
            if self._refused:
                raise _Unsupported(self._refused)
            self.counts["opened"] += 1
            self._set(Reach.LISTENING, f"{len(self.agreed)} task ids")
            while True:
                done, _ = await asyncio.wait({listen, changed}, return_when=asyncio.FIRST_COMPLETED)
                if listen in done:
                    self._ended(listen)
                    return
                if self._flooded:
                    raise _Flooded()
                await asyncio.sleep(RELISTEN_DEBOUNCE_S)
                raise _Again()  # the ids changed: a subscription for the new set
        finally:
            for fut in (listen, changed, acked):
                fut.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await listen

    @staticmethod
    def _ended(listen: asyncio.Future[Any]) -> None:
        """The listen request's own end: its result (the server closed the subscription) or its error."""
        try:
            listen.result()
        except JsonRpcError as exc:
            raise _Unsupported(f"subscriptions/listen refused: {exc.message[:200]}") from None
        except McpWireError as exc:
            raise _Dropped(f"{exc.kind}: {exc.message[:200]}") from None


__all__ = [
    "FLOOD_USELESS_PER_S",
    "GetStream",
    "Listener",
    "MAX_NOTICE_BYTES",
    "MalformedNotice",
    "Reach",
    "StdioTap",
    "TASK_STATUS_METHODS",
    "TaskNotice",
    "TasksSubscription",
    "task_notice",
]
