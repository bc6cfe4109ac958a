"""How often a waiting task is polled, and how a wait backs off from a failed poll within its budget.

The server's ``pollInterval``, our floor and ceiling, the age schedule; ``unreachable_s`` bounds the backoff.
"""

from __future__ import annotations

import time
from datetime import datetime

from mcp_temporal_tasks.activities.activity_io import AwaitInput, AwaitOutput, PollSchedule
from mcp_temporal_tasks.activities.failure_encoding import read_error_info, to_application_error
from mcp_temporal_tasks.activities.wire import McpWireError
from mcp_temporal_tasks.activities.wire.backpressure import hold_of
from mcp_temporal_tasks.protocol.limits import cap_text
from mcp_temporal_tasks.protocol.wire_errors import is_read_fault

#: A server's ``pollInterval`` is honoured up to this (a longer one is a server bug, not a reason to wait a day).
MAX_HONOURED_POLL_INTERVAL_S = 3600.0


def next_poll_delay(
    server_ms: int | None,
    *,
    floor_s: float,
    ceiling_s: float,
    previous_s: float | None,
    age_s: float | None = None,
    schedule: PollSchedule | None = None,
) -> float:
    """Seconds until the next ``tasks/get``.

    The base is the server's ``pollInterval`` (or, when it gives none, a backoff from 0.5 s by 1.5× per poll)
    within our floor and ceiling. Once the task is older than ``schedule.after_s`` the gap grows to
    ``schedule.age_fraction × age`` (bounded by ``schedule.max_interval_s``), so a waiting task costs
    O(log age) polls instead of age / pollInterval, and is still seen within that fraction of its age.
    Never shorter than the server's ``pollInterval``: the spec lets a client poll less often, not more.
    """
    server_s = (
        min(server_ms / 1000.0, MAX_HONOURED_POLL_INTERVAL_S) if server_ms is not None and server_ms > 0 else None
    )
    if server_s is not None:
        base = server_s
    elif previous_s is None:
        base = 0.5
    else:
        base = previous_s * 1.5
    delay = min(ceiling_s, max(floor_s, base))
    if schedule is not None and age_s is not None and age_s >= schedule.after_s and schedule.age_fraction > 0:
        delay = max(delay, min(schedule.max_interval_s, schedule.age_fraction * age_s))
    return max(delay, server_s or 0.0)


def task_age_s(created_at: str | None, submitted_at: float | None, now: float) -> float | None:
    """A task's age, by our own clock: since we sent the ``tools/call`` that created it (durable, in the workflow's
    history). A task cannot be older than that call, whatever the server's ``createdAt`` says (a server clock
    hours behind, or local time written with a ``Z``, would make a fresh task look old and be polled minutes
    apart). The server's ``createdAt`` counts only where we have no send time, and not when it is in the future."""
    if submitted_at is not None:
        return max(0.0, now - submitted_at)
    if created_at:
        try:
            created = datetime.fromisoformat(created_at)
        except ValueError:
            return None
        if created.tzinfo is not None and created.timestamp() <= now + 5:
            return max(0.0, now - created.timestamp())
    return None


def after_read_fault(
    exc: McpWireError, inp: AwaitInput, failing_since: float, faults: int, tries: int
) -> tuple[AwaitOutput | None, float]:
    """What a failed poll leads to: ``(no_answer, 0)`` once the server has given no usable answer for
    ``unreachable_s``, else ``(None, seconds before the next try)``: a backoff by ``tries``, or the server's hold
    (``wire.backpressure.hold_of``: a 429's or a 503's ``Retry-After``, what is left of this process's hold) when
    longer, never past the budget. A failure that is not a read fault raises the activity's typed error."""
    if not is_read_fault(exc):
        raise to_application_error(exc, task_read=True)
    now = time.time()
    if now - failing_since >= inp.unreachable_s:
        what = "tasks/get" if inp.job is None else f"the status tool {inp.job.status}"
        return AwaitOutput(
            no_answer=f"{what} got no usable answer in {faults} attempts over {now - failing_since:.0f}s "
            f"(last: {exc.kind}: {cap_text(exc.message, 512)})",
            last_error=read_error_info(exc),
        ), 0.0
    backoff = min(30.0, 0.5 * 2 ** min(tries, 6))
    wait = max(backoff, hold_of(exc) or 0.0)
    return None, min(wait, max(0.1, failing_since + inp.unreachable_s - now))
