"""Every number and time a server sends, clamped or ignored where parsed; time arithmetic that cannot raise.

A task record may say ``ttl: 1e15``, ``pollInterval: -1``, ``ttl: "soon"``, ``createdAt: "0001-01-01T00:00:00Z"``,
``NaN``, ``1e400``: clamped into range or ignored, its raw text kept (``TaskState.unusable``). Nothing a server writes
may reach ``timedelta``/``datetime`` arithmetic unchecked: in workflow code an ``OverflowError`` fails the workflow
task on every attempt, forever (``workflows.decisions`` does its time arithmetic only through :func:`shifted`). Pure.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta
from typing import Any

#: The longest task TTL honoured: ten years. A longer one is clamped (a server keeping a task longer is no help to
#: anyone waiting for it, and ``createdAt + ttl`` must stay a date).
MAX_TTL_MS = 10 * 366 * 86_400_000
#: The longest ``pollInterval`` kept: a day (the poll schedule honours at most an hour of it anyway).
MAX_POLL_INTERVAL_MS = 86_400_000
#: Task times outside this window are ignored: no real server created a task before 1970 or after 2200.
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(2200, 1, 1, tzinfo=UTC)
_RAW_CAP = 64


def raw_text(value: Any) -> str:
    """A value as the server sent it, for the record: JSON text (``NaN``, ``Infinity`` as Python reads them), at
    most 64 characters."""
    try:
        text = json.dumps(value, ensure_ascii=True, default=repr)
    except (ValueError, TypeError, RecursionError):
        text = f"[{type(value).__name__}]"
    return text if len(text) <= _RAW_CAP else text[:_RAW_CAP] + "…"


def finite_number(value: Any) -> float | None:
    """``value`` as a finite float, or None (not a number, a bool, NaN, ±∞). Never raises (a huge int too)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:  # an int beyond float's range: "huge" is all that matters
        return 1e308 if value > 0 else -1e308
    return number if math.isfinite(number) else None


def bounded_int(value: Any, *, low: int, high: int) -> tuple[int | None, bool]:
    """``(value as an int within [low, high], usable as sent)``. A finite number below ``low`` or not a number at
    all gives ``(None, False)``; one above ``high`` gives ``(high, False)``."""
    number = finite_number(value)
    if number is None or number < low:
        return None, False
    if number > high:
        return high, False
    return int(number), True


def parse_time(text: Any) -> datetime | None:
    """An ISO 8601 date-time as an aware datetime in UTC (naive ones read as UTC), or None when ``text`` is not one
    or lies outside :data:`EARLIEST` .. :data:`LATEST`. Never raises."""
    if not isinstance(text, str) or len(text) > 64:
        return None
    try:
        at = datetime.fromisoformat(text.replace("Z", "+00:00"))
        at = at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)
    except (ValueError, OverflowError, TypeError):
        return None
    return at if EARLIEST <= at <= LATEST else None


def shifted(at: datetime, *, ms: Any = 0, seconds: Any = 0) -> datetime:
    """``at + ms milliseconds + seconds``, saturated at ``datetime.min``/``datetime.max`` (in ``at``'s zone) instead
    of raising; a NaN or non-number shift counts as 0. The one way workflow code adds a server's span to a time."""
    parts = [p if isinstance(p, (int, float)) and not isinstance(p, bool) else 0 for p in (ms, seconds)]
    try:  # exact for every usable value (integer milliseconds stay exact)
        return at + timedelta(milliseconds=parts[0]) + timedelta(seconds=parts[1])
    except (OverflowError, ValueError):
        pass
    total = 0.0
    for part, scale in zip(parts, (0.001, 1.0), strict=True):
        try:
            value = float(part) * scale
        except OverflowError:
            value = math.inf if part > 0 else -math.inf
        if not math.isnan(value):
            total += value
    edge = (datetime.max if total > 0 else datetime.min).replace(tzinfo=at.tzinfo)
    if not math.isfinite(total):
        return edge
    try:
        return at + timedelta(seconds=total)
    except (OverflowError, ValueError):
        return edge
