"""The hub's own reads of an HTTP session's idle waits' tasks, each on its wait's schedule, no Temporal round trip.

A status that can end a wait wakes it (``via = poll``); a read here never decides. Bounds: :data:`MAX_IN_FLIGHT` reads
of a session at once, a failed read tried again after min(its gap, :data:`RETRY_S`) or once the server's hold has
passed (``wire/backpressure.py``: its ``Retry-After``), whichever is later, and after :data:`FAILS_TO_STOP` failures in
a row the session's waits keep today's schedule (:meth:`TaskPoller.healthy`) until a read succeeds
(``docs/operating.md``, "The push hub"). A task dropped (its wait ended) is not read again, and a read of it in flight
is cancelled.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

from mcp_temporal_tasks.activities.wire.backpressure import HeldBack, hold_of
from mcp_temporal_tasks.protocol.tasks import TaskState
from mcp_temporal_tasks.protocol.wire_errors import McpWireError, TaskNotFound

log = logging.getLogger("mcp_tasks.poller")

#: Reads of one session in flight at once.
MAX_IN_FLIGHT = 8
#: A read that failed is tried again after at most this long.
RETRY_S = 30.0
#: Failed reads in a row after which the poller covers nothing on its session until one succeeds.
FAILS_TO_STOP = 3
#: The loop looks at its schedule at least this often (a new registration earlier than the next read wakes it too).
TICK_S = 5.0

#: What the hub says when a read is due: None, stop reading the task; 0, read it now; > 0, ask again in that long.
Before = Callable[[str], float | None]
#: What the hub makes of a read: the seconds until the next, or None to stop reading the task.
After = Callable[[str, TaskState], float | None]


class TaskPoller:
    """Reads the tasks of one session's idle waits on their schedules.

    ``read(task_id)`` reads one task (``tasks/get`` on the session); the hub decides, through ``before`` and
    ``after``, whether a due read happens and when the next one is."""

    def __init__(
        self,
        read: Callable[[str], Awaitable[TaskState]],
        before: Before,
        after: After,
        *,
        name: str,
        max_in_flight: int = MAX_IN_FLIGHT,
        on_result: Callable[[str], None] | None = None,
    ) -> None:
        self.read, self.before, self.after, self.name = read, before, after, name
        #: Told each read's result (``read``, ``gone``, ``failed``; a read cancelled with the poller is none of them).
        self.on_result = on_result
        self.max_in_flight = max_in_flight
        self._heap: list[tuple[float, int, str]] = []
        #: task id → when its next read is due (monotonic); heap entries that disagree are stale.
        self._due: dict[str, float] = {}
        self._seq = itertools.count()
        self._sooner = asyncio.Event()
        self._in_flight: set[asyncio.Task[None]] = set()
        #: task id → its read in flight (cancelled when the task is dropped).
        self._reading: dict[str, asyncio.Task[None]] = {}
        self.fails = 0
        self.counts: Counter[str] = Counter()

    def healthy(self) -> bool:
        """Whether this poller's reads can be counted on (fewer than :data:`FAILS_TO_STOP` failures in a row)."""
        return self.fails < FAILS_TO_STOP

    def schedule(self, task_id: str, in_s: float) -> None:
        """Read ``task_id`` in ``in_s`` seconds (replacing any read planned for it)."""
        at = time.monotonic() + max(0.0, in_s)
        self._due[task_id] = at
        heapq.heappush(self._heap, (at, next(self._seq), task_id))
        if self._heap[0][2] == task_id and self._heap[0][0] == at:
            self._sooner.set()

    def drop(self, task_id: str) -> None:
        """Read ``task_id`` no more: its planned read is dropped and a read of it in flight cancelled."""
        self._due.pop(task_id, None)
        reading = self._reading.pop(task_id, None)
        if reading is not None:
            reading.cancel()

    def planned(self) -> int:
        return len(self._due)

    def plans(self, task_id: str) -> bool:
        return task_id in self._due

    async def run(self) -> None:
        """Read what is due until nothing is planned and nothing is in flight."""
        slots = asyncio.Semaphore(self.max_in_flight)
        try:
            while self._due or self._in_flight:
                now = time.monotonic()
                while self._heap and self._heap[0][0] <= now:
                    at, _, task_id = heapq.heappop(self._heap)
                    if self._due.get(task_id) != at:
                        continue  # replaced or dropped since
                    del self._due[task_id]
                    wait = self.before(task_id)
                    if wait is None:
                        continue
                    if wait > 0:
                        self.schedule(task_id, wait)
                        continue
                    await slots.acquire()
                    t = asyncio.create_task(self._read(task_id, slots))
                    self._in_flight.add(t)
                    self._reading[task_id] = t
                    t.add_done_callback(self._read_done)
                    now = time.monotonic()
                if len(self._heap) > 4 * len(self._due) + 1024:  # stale entries of often-renewed waits
                    self._heap = [e for e in self._heap if self._due.get(e[2]) == e[0]]
                    heapq.heapify(self._heap)
                next_in = self._heap[0][0] - time.monotonic() if self._heap else TICK_S
                self._sooner.clear()
                # A timer, not wait_for: no task per wake-up (this loop wakes for every read of every idle wait).
                timer = asyncio.get_running_loop().call_later(max(0.0, min(TICK_S, next_in)), self._sooner.set)
                try:
                    await self._sooner.wait()
                finally:
                    timer.cancel()
        finally:
            for t in list(self._in_flight):
                t.cancel()

    async def _read(self, task_id: str, slots: asyncio.Semaphore) -> None:
        try:
            state = await self.read(task_id)
        except asyncio.CancelledError:
            raise
        except HeldBack as held:
            # Not sent: the server asked this process to wait. No failure of the reads; tried once the hold passed.
            self.counts["held"] += 1
            if self.before(task_id) is not None and task_id not in self._due:
                self.schedule(task_id, held.retry_after_s or RETRY_S)
        except TaskNotFound:
            self.fails = 0
            self.counts["gone"] += 1  # not woken: the wait's own attempt finds out and decides
            self._tell("gone")
        except Exception as exc:  # noqa: BLE001  (a fault, or a bug: this task is read again later)
            self.fails += 1
            self.counts["errors"] += 1
            self._tell("failed")
            if not isinstance(exc, McpWireError):
                log.debug("read of a task on %s failed: %s: %s", self.name, type(exc).__name__, exc)
            nxt = self.before(task_id)
            if nxt is not None and task_id not in self._due:
                hold = hold_of(exc) if isinstance(exc, McpWireError) else None
                self.schedule(task_id, max(RETRY_S if nxt == 0 else min(RETRY_S, nxt), hold or 0.0))
        else:
            self.fails = 0
            self.counts["reads"] += 1
            self._tell("read")
            nxt = self.after(task_id, state)
            if nxt is not None and task_id not in self._due:
                self.schedule(task_id, nxt)
        finally:
            if self._reading.get(task_id) is asyncio.current_task():
                del self._reading[task_id]
            slots.release()

    def _tell(self, result: str) -> None:
        if self.on_result is not None:
            try:
                self.on_result(result)
            except Exception:  # noqa: BLE001  (a metric never stops the reads)
                log.debug("on_result failed", exc_info=True)

    def _read_done(self, task: asyncio.Task[None]) -> None:
        self._in_flight.discard(task)
        self._sooner.set()  # the loop looks again (it ends once nothing is planned or in flight)

    def stats(self) -> dict[str, Any]:
        return {
            "planned": len(self._due),
            "in_flight": len(self._in_flight),
            "fails_in_a_row": self.fails,
            "counts": dict(self.counts),
        }


__all__ = ["FAILS_TO_STOP", "MAX_IN_FLIGHT", "RETRY_S", "TaskPoller"]
