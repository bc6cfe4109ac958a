"""A stateful 2025-11-25 HTTP session's ``tasks/list``, read for the hub: which waits a changed status wakes.

Read at the session's pollInterval; a wake it makes says ``via = list``. Only a list that is the session's own is read,
and a wait counts as under the reader only while its last complete read (every page, within :func:`read_bounds`) listed
it; anything else keeps today's per-task reads. A failed read is tried again after a backoff, never before the
server's hold (``wire/backpressure.py``) has passed (``docs/how-it-works.md``, "Read, not told"; its bounds:
``docs/operating.md``, "The push hub").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from mcp_temporal_tasks.activities.wire import SessionRef, WireSession
from mcp_temporal_tasks.activities.wire.backpressure import hold_of
from mcp_temporal_tasks.protocol.limits import MAX_TASK_ID
from mcp_temporal_tasks.protocol.wire_errors import (
    McpWireError,
    MethodNotFound,
    ProtocolViolation,
    TaskUnreachable,
)

log = logging.getLogger("mcp_tasks.list")

#: A server's ``pollInterval`` is honoured up to this (``schedule.MAX_HONOURED_POLL_INTERVAL_S``, the same 1 h).
MAX_HONOURED_POLL_INTERVAL_S = 3600.0

#: A ``tasks/list`` read at most this often, whatever ``pollInterval`` the server asks for.
LIST_MIN_S = 2.0
#: How often while no listed task of ours gives a ``pollInterval``.
DEFAULT_LIST_S = 5.0
#: One read: at most this many pages and tasks, plus room for the session's waits (:func:`read_bounds`).
MAX_PAGES = 20
MAX_ITEMS = 5_000
#: The TypeScript SDK 1.32's page (``PAGE_SIZE``; the Python SDK 1.30 answers in one page): the pages a list of our
#: waits needs, for the bound.
SDK_PAGE_SIZE = 10
#: A long list is read at most this many pages, and tasks, a second on average (the interval grows with them): the
#: TypeScript SDK pages by 10, the Python SDK 1.30 answers a session's whole list in one page.
PAGES_PER_S = 10.0
ITEMS_PER_S = 100.0
MAX_CURSOR = 4096
#: After a read cut by a bound or failed: this long before the next, doubling to MAX_BACKOFF_S.
BOUNDED_BACKOFF_S = 30.0
MAX_BACKOFF_S = 600.0
#: After ``-32601`` (or no ``tasks.list`` capability): not tried again for this long.
NOT_OFFERED_RETRY_S = 600.0
#: A complete read covers the waits it listed for this many intervals (+ COVER_SLACK_S): a reader that stopped
#: (its worker died, its server stopped answering) stops stretching their polls within that.
COVER_INTERVALS = 3.0
COVER_SLACK_S = 10.0
#: Statuses whose change wakes a wait (never ``working``).
WAKE_STATUSES = frozenset({"input_required", "completed", "failed", "cancelled"})
_STATUSES = frozenset({"working", *WAKE_STATUSES})


class ListState(str, Enum):
    STARTING = "starting"
    #: Reading at the interval; complete reads cover the waits they list.
    READING = "reading"
    #: The last read was cut by a bound (pages, tasks, cursor): it covers nothing.
    BOUNDED = "bounded"
    #: The last read failed; tried again after a backoff.
    BACKING_OFF = "backing_off"
    #: No ``tasks/list`` here (-32601, or not in the server's capabilities).
    NOT_OFFERED = "not_offered"
    #: The session is gone (404) or cannot be reached from here.
    GONE = "gone"


@dataclass
class ListRead:
    """One read of a session's list: what it said of the tasks asked about (status, pollInterval ms)."""

    ours: dict[str, tuple[str, int | None]] = field(default_factory=dict)
    complete: bool = True
    pages: int = 0
    items: int = 0
    why: str | None = None


async def read_list(
    client: WireSession, ours: Collection[str], *, max_pages: int = MAX_PAGES, max_items: int = MAX_ITEMS
) -> ListRead:
    """All pages of ``tasks/list`` within the bounds; only the tasks in ``ours`` are kept. A page that is not a list
    reply raises :class:`ProtocolViolation`; a malformed item is skipped."""
    out = ListRead()
    cursor: str | None = None
    cursors: set[str] = set()
    while True:
        if out.pages >= max_pages:
            out.complete, out.why = False, f"more than {max_pages} pages"
            return out
        reply = await client.list_tasks_page(cursor)
        out.pages += 1
        tasks = reply.get("tasks")
        if not isinstance(tasks, list):
            raise ProtocolViolation("tasks/list reply without a tasks array", raw=str(reply)[:200])
        for t in tasks:
            out.items += 1
            if out.items > max_items:
                out.complete, out.why = False, f"more than {max_items} tasks"
                return out
            if not isinstance(t, dict):
                continue
            task_id, status = t.get("taskId"), t.get("status")
            if isinstance(task_id, str) and len(task_id) <= MAX_TASK_ID and task_id in ours and status in _STATUSES:
                poll = t.get("pollInterval")
                ms = int(poll) if isinstance(poll, (int, float)) and not isinstance(poll, bool) and poll > 0 else None
                out.ours[task_id] = (status, ms)
        nxt = reply.get("nextCursor")
        if nxt is None or nxt == "":
            return out
        if not isinstance(nxt, str) or len(nxt) > MAX_CURSOR or nxt in cursors:
            out.complete, out.why = False, "a cursor repeated or unusable"
            return out
        cursors.add(nxt)
        cursor = nxt


def list_interval(poll_ms: Collection[int | None], pages: int = 1, items: int = 0) -> float:
    """Seconds between two reads: the smallest ``pollInterval`` given, within [LIST_MIN_S, 1 h], and no less than
    the last read's ``pages`` at :data:`PAGES_PER_S` and ``items`` at :data:`ITEMS_PER_S`."""
    given = [ms / 1000.0 for ms in poll_ms if ms]
    base = min(given) if given else DEFAULT_LIST_S
    return min(MAX_HONOURED_POLL_INTERVAL_S, max(LIST_MIN_S, base, pages / PAGES_PER_S, items / ITEMS_PER_S))


def read_bounds(waits: int) -> tuple[int, int]:
    """(pages, tasks) one read may take for a session with ``waits`` waits here: the floor, plus twice what the
    waits fill (a store also lists its ended tasks until their TTL). 10,000 foreign ids beside one wait, or pages
    that never end, still stop at about the floor."""
    return MAX_PAGES + -(-2 * waits // SDK_PAGE_SIZE), MAX_ITEMS + 2 * waits


def changed(read: ListRead, last_seen: Mapping[str, str | None]) -> list[tuple[str, str]]:
    """(task id, status) of the waits whose listed status differs from their own last read and can end a wait."""
    return [(tid, st) for tid, (st, _) in read.ours.items() if st in WAKE_STATUSES and st != last_seen.get(tid)]


class ListReader:
    """Reads one session's ``tasks/list`` while it has waits here.

    ``waits()`` gives the waits registered here, task id → the status their own last read saw; ``wake(task_id,
    status)`` wakes one (True when a signal was queued). ``offered``: whether the server's handshake offered
    ``tasks.list`` (None: not known in this process; the first read finds out)."""

    def __init__(
        self,
        ref: SessionRef,
        waits: Callable[[], Mapping[str, str | None]],
        wake: Callable[[str, str], bool],
        *,
        name: str,
        offered: bool | None = None,
    ) -> None:
        self.ref, self.waits, self.wake, self.name = ref, waits, wake, name
        self.state = ListState.NOT_OFFERED if offered is False else ListState.STARTING
        self.why: str | None = "tasks.list not in the server's capabilities" if offered is False else None
        self.interval = DEFAULT_LIST_S
        #: task id → when a complete read last listed it (monotonic).
        self.covered: dict[str, float] = {}
        self.counts: Counter[str] = Counter()
        self.last_read_at: float | None = None
        #: Set when a read ends, whatever it found, then replaced: what :meth:`until_listed` waits on.
        self._read_ended = asyncio.Event()

    def covers(self, task_id: str) -> bool:
        """Whether a recent complete read listed this task: its own reads may stretch to the safety net."""
        at = self.covered.get(task_id)
        return at is not None and time.monotonic() - at <= COVER_INTERVALS * self.interval + COVER_SLACK_S

    def reading(self) -> bool:
        """Whether reads are under way here (the next one is at most an interval away)."""
        return self.state in (ListState.STARTING, ListState.READING)

    async def until_listed(self, task_id: str, timeout: float) -> bool:
        """Wait (at most ``timeout`` seconds) until a complete read has listed ``task_id``, registered just before;
        True when it has. A read already under way when it registered may not have asked for it: up to two reads."""
        deadline = time.monotonic() + timeout
        for _ in range(2):
            if self.covers(task_id):
                return True
            left = deadline - time.monotonic()
            if left <= 0 or not self.reading():
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._read_ended.wait(), left)
        return self.covers(task_id)

    def _ended_a_read(self) -> None:
        ended, self._read_ended = self._read_ended, asyncio.Event()
        ended.set()

    async def run(self) -> float | None:
        """Read until no wait is left here (returns None), or until the list cannot be read here (returns how long
        before the hub may try again)."""
        if self.state == ListState.NOT_OFFERED:
            return NOT_OFFERED_RETRY_S
        client: WireSession | None = None
        backoff = BOUNDED_BACKOFF_S
        try:
            client = await WireSession.attach(self.ref)
            while True:
                waits = self.waits()
                if not waits:
                    return None
                t0 = time.monotonic()
                max_pages, max_items = read_bounds(len(waits))
                try:
                    got = await read_list(client, waits.keys(), max_pages=max_pages, max_items=max_items)
                except MethodNotFound:
                    self.state, self.why = ListState.NOT_OFFERED, "tasks/list answered -32601"
                    self.covered.clear()
                    return NOT_OFFERED_RETRY_S
                except TaskUnreachable as exc:
                    self.state, self.why = ListState.GONE, exc.message[:200]
                    self.covered.clear()
                    return BOUNDED_BACKOFF_S
                except McpWireError as exc:
                    self.counts["errors"] += 1
                    self.state, self.why = ListState.BACKING_OFF, f"{exc.kind}: {exc.message[:200]}"
                    self.covered.clear()
                    self._ended_a_read()
                    # Never sooner than the server's hold (wire/backpressure.py): a held read is refused unsent.
                    await asyncio.sleep(max(backoff, hold_of(exc) or 0.0))
                    backoff = min(MAX_BACKOFF_S, backoff * 2)
                    continue
                self.last_read_at = time.monotonic()
                self.counts["reads"] += 1
                self.counts["pages"] += got.pages
                for task_id, status in changed(got, waits):
                    self.counts["woken" if self.wake(task_id, status) else "not_woken"] += 1
                if not got.complete:
                    self.counts["bounded"] += 1
                    self.state, self.why = ListState.BOUNDED, got.why
                    self.covered.clear()
                    self._ended_a_read()
                    if len(self.waits()) > len(waits):
                        # More waits registered meanwhile (a burst of new tasks): the next read has room for them,
                        # at the pace of the pages read, not after a backoff meant for a list that is not ours.
                        await asyncio.sleep(list_interval([], got.pages, got.items))
                        continue
                    await asyncio.sleep(backoff)
                    backoff = min(MAX_BACKOFF_S, backoff * 2)
                    continue
                backoff = BOUNDED_BACKOFF_S
                self.state, self.why = ListState.READING, None
                now = time.monotonic()
                self.covered = {tid: now for tid in got.ours}
                self.interval = list_interval([ms for _, ms in got.ours.values()], got.pages, got.items)
                self._ended_a_read()
                await asyncio.sleep(max(0.0, self.interval - (time.monotonic() - t0)))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001  (cannot attach, or a bug: the per-task reads go on unstretched)
            self.state, self.why = ListState.GONE, f"{type(exc).__name__}: {str(exc)[:200]}"
            self.covered.clear()
            log.debug("tasks/list of %s not read: %s", self.name, self.why)
            return BOUNDED_BACKOFF_S
        finally:
            self._ended_a_read()  # whoever waits for a read learns that none is coming from this run
            if client is not None:
                with contextlib.suppress(Exception):
                    await client.aclose()

    def stats(self) -> dict[str, Any]:
        return {
            "state": self.state.value,
            "why": self.why,
            "interval_s": self.interval,
            "covered": len(self.covered),
            "counts": dict(self.counts),
        }


__all__ = ["ListReader", "ListRead", "ListState", "changed", "list_interval", "read_bounds", "read_list"]
