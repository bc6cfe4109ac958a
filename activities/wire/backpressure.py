"""The one back-pressure rule: a server's ``Retry-After`` holds every request of this process to it until it passes.

Kept per (server, credential): the key is the whole endpoint (URL, header references, OAuth client), so two
credentials on one server are held apart and every session of one credential together. What sets a hold
(:func:`hold_of`): HTTP 429 (its ``Retry-After``, or :data:`DEFAULT_429_HOLD_S` without a usable one), HTTP 503 with
a ``Retry-After``, a JSON-RPC error whose ``data`` carries ``retryAfter`` (seconds). Bounded both ways: never below
0, never past :data:`MAX_HOLD_S`; what ``protocol.wire_errors.read_retry_after`` ignores (garbage) sets no more than
a bare 429 does. While held, a request is not sent: it fails at once with :class:`HeldBack` (a ``RateLimited`` that
never left, carrying what is left of the hold), which every reader already waits out (``docs/faults.md``,
"Back-pressure"). A wake-up does not jump it: the read that follows is a request like any other.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable
from typing import Any

from mcp_temporal_tasks.protocol.tasks import Endpoint
from mcp_temporal_tasks.protocol.wire_errors import JsonRpcError, McpWireError, RateLimited, TransportError

#: The longest a server's ``Retry-After`` holds this process's requests to it. Longer ones are clamped: asked again
#: after an hour, one request, rather than every task of that server held for a day on one reply's word (the
#: workflow's own resend of a refused ``tools/call`` still honours up to a day: ``decisions.bounded_delay_s``).
MAX_HOLD_S = 3600.0
#: A 429 without a usable ``Retry-After`` (absent, garbage) still holds the server this long: every reader of this
#: process does not knock again at once.
DEFAULT_429_HOLD_S = 2.0
#: What a refused request is told to wait beyond the hold's end.
EDGE_S = 0.05
#: Keys remembered at most (the oldest expired ones go first; a live hold is never forgotten for room).
MAX_KEYS = 10_000
#: Keys a JSON-RPC error's ``data`` may carry its delay under (seconds).
_DATA_KEYS = ("retryAfter", "retry_after", "retryAfterSeconds", "retry_after_s")


class HeldBack(RateLimited):
    """A request not sent: its server asked this process to wait (``Retry-After``), and the hold has not passed.

    Travels as ``RateLimited`` (never reached the server, ``retry_after_s`` = what is left of the hold)."""

    def __init__(self, method: str, server: str, left_s: float) -> None:
        super().__init__(
            f"{method}: not sent, {server} asked us to wait (Retry-After): {left_s:.1f}s left", retry_after_s=left_s
        )
        self.sent = False


def bounded_hold_s(value: Any) -> float | None:
    """A delay a server gave, as a hold: finite, at least 0, at most :data:`MAX_HOLD_S`; None for anything else."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    seconds = float(value)
    if math.isnan(seconds):
        return None
    return min(max(seconds, 0.0), MAX_HOLD_S)


def hold_of(exc: McpWireError) -> float | None:
    """How long ``exc`` (a reply to any request) holds its server: seconds, or None when it asks for nothing."""
    if isinstance(exc, RateLimited):
        if exc.retry_after_s is None:
            return DEFAULT_429_HOLD_S
        return bounded_hold_s(exc.retry_after_s)
    if isinstance(exc, TransportError) and exc.status == 503:
        return bounded_hold_s(getattr(exc, "retry_after_s", None))
    if isinstance(exc, JsonRpcError) and isinstance(exc.data, dict):
        for key in _DATA_KEYS:
            found = bounded_hold_s(exc.data.get(key))
            if found is not None:
                return found
    return None


def key_of(endpoint: Endpoint) -> str:
    """The hold's key: the server and the credential it is reached with (references only: no secret is kept)."""
    return hashlib.sha256(endpoint.model_dump_json().encode()).hexdigest()[:32]


class Holds:
    """This process's holds, by key: until when (``clock``: monotonic seconds) no request goes to that server."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, max_keys: int = MAX_KEYS) -> None:
        self._clock = clock
        self._until: dict[str, float] = {}
        self._max_keys = max_keys

    def left(self, key: str) -> float:
        """Seconds left of ``key``'s hold (0: none)."""
        until = self._until.get(key)
        if until is None:
            return 0.0
        left = until - self._clock()
        if left <= 0:
            del self._until[key]
            return 0.0
        return left

    def hold(self, key: str, seconds: float) -> None:
        """Hold ``key`` for ``seconds`` from now; a hold already longer stays."""
        seconds = bounded_hold_s(seconds) or 0.0
        if seconds <= 0:
            return
        until = self._clock() + seconds
        if until > self._until.get(key, 0.0):
            self._until[key] = until
        if len(self._until) > self._max_keys:
            now = self._clock()
            for k in [k for k, u in self._until.items() if u <= now]:
                del self._until[k]

    def clear(self, key: str) -> None:
        """Forget ``key``'s hold (a test that reuses a transport after a scripted 429)."""
        self._until.pop(key, None)

    def saw(self, key: str, exc: McpWireError) -> None:
        """A reply from ``key``'s server: hold it as long as the reply asks (:func:`hold_of`)."""
        seconds = hold_of(exc)
        if seconds:
            self.hold(key, seconds)

    def check(self, key: str, method: str, server: str) -> None:
        """Raise :class:`HeldBack` while ``key`` is held: the request ``method`` is not to be sent."""
        left = self.left(key)
        if left > 0:
            # A little past the end: a timer may fire a clock tick early, and a read then would be refused again.
            raise HeldBack(method, server, left + EDGE_S)


#: The process's holds: every transport of this process asks these.
HOLDS = Holds()


__all__ = ["DEFAULT_429_HOLD_S", "HOLDS", "MAX_HOLD_S", "HeldBack", "Holds", "bounded_hold_s", "hold_of", "key_of"]
