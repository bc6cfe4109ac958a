"""Keeping resolved secret values out of error texts and log lines: each is replaced by ``[redacted]`` wherever it is.

Every value read from a reference is registered the moment it is read; the registry stays bounded (a token leaves
once it expires). How transports and log handlers use it: :class:`RedactingFilter`.
"""

from __future__ import annotations

import heapq
import json
import logging
import re
import threading
import time
from collections.abc import Iterable
from typing import Any

REDACTED = "[redacted]"
MIN_SECRET_LEN = 4
#: The marker of a capped text (``limits.cap_text``/``safe_raw``): a secret cut there must not leak its prefix.
_TRUNCATED = re.compile(r"…\[truncated(?: \d+ chars)?\]$")

_lock = threading.Lock()
#: Every registered scrub form → when it leaves the registry (``time.monotonic()``), or None: for the life of the
#: process (configured values: header values, env refs, client secrets; bounded by the configuration). OAuth tokens
#: leave once they have expired (plus a grace: a log line may quote one shortly after), so a worker that runs for
#: months, fetching a token an hour, keeps only the live ones.
_expiry: dict[str, float | None] = {}
#: (when, form) of the expiring forms, soonest first; an entry whose form was registered again later is stale.
_heap: list[tuple[float, str]] = []
_expiring = 0
_registry: frozenset[str] = frozenset()
#: The registry, longest first (a secret containing another is replaced whole): rebuilt at most once per scrub
#: after a change, never per log record.
_ordered: tuple[str, ...] = ()
_dirty = False
#: How long an expired token's forms stay scrubbed: at most this, at most its own lifetime again.
EXPIRY_GRACE_S = 60.0
#: At most this many forms of expiring tokens are kept (the soonest to expire leave first): a hard bound whatever
#: lifetimes a server claims.
MAX_EXPIRING_FORMS = 4096


def secret_forms(values: Iterable[str]) -> frozenset[str]:
    """The strings to scrub for these values: each value, and the credential of ``Scheme credential`` forms."""
    out: set[str] = set()
    for value in values:
        if not isinstance(value, str):
            continue
        value = value.strip()
        scheme, _, credential = value.partition(" ")
        for form in (value, credential.strip()):  # "Bearer abc…": a server may echo only the token
            if len(form) >= MIN_SECRET_LEN:
                out.add(form)
                out.add(json.dumps(form)[1:-1])  # as it appears inside JSON text (raw payloads)
    return frozenset(out)


def _publish() -> None:
    """Rebuild the published registry (under the lock)."""
    global _registry, _ordered, _dirty
    _registry = frozenset(_expiry)
    _ordered = tuple(sorted(_registry, key=len, reverse=True))
    _dirty = False


def _purge(now: float) -> bool:
    """Drop expired forms, and the soonest to expire past the bound (under the lock): O(log n) per form dropped,
    whatever was ever registered. True when any left."""
    global _expiring, _heap
    dropped = False
    while _heap and (_heap[0][0] <= now or _expiring > MAX_EXPIRING_FORMS):
        when, form = heapq.heappop(_heap)
        if _expiry.get(form, None) == when:  # else stale: registered again later, or permanent
            del _expiry[form]
            _expiring -= 1
            dropped = True
    if len(_heap) > 2 * _expiring + 1024:  # stale entries of values registered again: compact
        _rebuild()
    return dropped


def _rebuild() -> None:
    """The heap and the count from ``_expiry`` (under the lock)."""
    global _heap, _expiring, _dirty
    _heap = [(t, f) for f, t in _expiry.items() if t is not None]
    heapq.heapify(_heap)
    _expiring = len(_heap)
    _dirty = True


def register(values: Iterable[str], *, lifetime_s: float | None = None) -> frozenset[str]:
    """Add resolved secret values to the process-wide registry; returns their scrub forms. ``lifetime_s``: the value
    expires (an OAuth token): its forms leave the registry that long (plus a grace) from now; None: never."""
    global _dirty, _expiring
    forms = secret_forms(values)
    if not forms:
        return forms
    now = time.monotonic()
    until = None if lifetime_s is None else now + max(0.0, lifetime_s) + min(EXPIRY_GRACE_S, max(0.0, lifetime_s))
    with _lock:
        for form in forms:
            if form in _expiry:
                old = _expiry[form]
                if old is None or (until is not None and until <= old):
                    continue  # permanent stays permanent; a later expiry wins
                if until is None:
                    _expiring -= 1
            else:
                _dirty = True
                if until is not None:
                    _expiring += 1
            _expiry[form] = until
            if until is not None:
                heapq.heappush(_heap, (until, form))
        if _purge(now):
            _dirty = True
    return forms


def _current() -> tuple[str, ...]:
    """The registry, longest first, after letting expired tokens go (a clock read and a heap peek per call)."""
    if _dirty or (_heap and _heap[0][0] <= time.monotonic()):
        with _lock:
            if _purge(time.monotonic()) or _dirty:
                _publish()
    return _ordered


def registered() -> frozenset[str]:
    _current()
    return _registry


def scrub(text: str, secrets: Iterable[str] | None = None) -> str:
    """``text`` with every secret (default: the registry) replaced by ``[redacted]``."""
    pool: Iterable[str] = _current() if secrets is None else sorted(secrets, key=len, reverse=True)
    if not pool or not text:
        return text
    for secret in pool:
        if secret in text:
            text = text.replace(secret, REDACTED)
    cut = _TRUNCATED.search(text)
    if cut is not None:
        body = text[: cut.start()]
        for secret in pool:  # a capped text may end in the first characters of a secret
            for k in range(len(secret) - 1, MIN_SECRET_LEN - 1, -1):
                if body.endswith(secret[:k]):
                    body = body[:-k] + REDACTED
                    break
        text = body + cut.group(0)
    return text


def scrub_obj(obj: Any, secrets: Iterable[str] | None = None) -> Any:
    """A JSON-like value with every string (keys too) scrubbed; other values unchanged."""
    if isinstance(obj, str):
        return scrub(obj, secrets)
    if isinstance(obj, dict):
        return {scrub_obj(k, secrets): scrub_obj(v, secrets) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(scrub_obj(v, secrets) for v in obj)
    return obj


def scrub_error(exc: Any, secrets: Iterable[str] | None) -> Any:
    """Scrub a wire error in place (message, str(), raw, data) and return it."""
    pool = frozenset(secrets or ())
    if not pool:
        return exc
    exc.message = scrub(exc.message, pool)
    exc.args = (exc.message,)
    exc.raw = scrub_obj(exc.raw, pool)
    exc.data = scrub_obj(exc.data, pool)
    return exc


class RedactingFilter(logging.Filter):
    """Scrubs registered secret values from a record's message, arguments, exception and stack text.

    Install it on *handlers* (a logger's own filters do not see records propagated from its children).

    Credentials reach the worker only by reference (an environment variable name); their *values* are read at connect
    time (``session.resolve_refs``). A server may still echo one back (a 401 body that quotes the ``Authorization``
    header, a stdio child that prints its environment in an error). So:

    * every transport knows the values it resolved (its header values, its stdio child's referenced env) and scrubs each
      :class:`~protocol.wire_errors.McpWireError` leaving it (``message``, ``args``, ``raw``, ``data``);
    * every value resolved in this process is also kept in a process-wide registry (an OAuth token until it expires,
      then it leaves: the registry stays bounded in a worker that runs for months), and :class:`RedactingFilter`
      (installed on the log handlers by ``mcp_temporal_tasks.worker.runner.setup_logging``) scrubs log records with it:
      message, arguments, exception and stack text.

    A value is replaced by ``[redacted]`` wherever it occurs. Values shorter than :data:`MIN_SECRET_LEN` are not
    tracked: scrubbing them would mangle ordinary text and they protect nothing.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        pool = _current()
        if not pool:
            return True
        try:
            message = record.getMessage()
        except Exception:  # a broken format string: leave it to the handler to report
            return True
        record.msg, record.args = scrub(message, pool), None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = scrub(record.exc_text, pool)
        if record.stack_info:
            record.stack_info = scrub(record.stack_info, pool)
        return True


def install_log_redaction(*handlers: logging.Handler) -> None:
    """Put one :class:`RedactingFilter` on these handlers (default: the root logger's and ``lastResort``)."""
    targets = list(handlers) or [*logging.getLogger().handlers, *([logging.lastResort] if logging.lastResort else [])]
    for handler in targets:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())


__all__ = [
    "REDACTED",
    "MIN_SECRET_LEN",
    "RedactingFilter",
    "install_log_redaction",
    "register",
    "registered",
    "scrub",
    "scrub_error",
    "scrub_obj",
    "secret_forms",
]
