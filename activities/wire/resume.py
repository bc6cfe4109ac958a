"""Resuming an SSE stream that ended before its reply: ``GET`` with ``Last-Event-ID`` after the clamped ``retry``.

A request is never POSTed again to resume it (that would be a second ``tools/call``); each value the server sends
is bounded, and the rules are on :class:`ResumePoint`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: Wait before a resumption when the server sent no ``retry``: the SDKs' default (1 s).
DEFAULT_RETRY_S = 1.0
#: A server's ``retry`` is never waited longer than this (a huge value would hold the read for days).
MAX_RETRY_S = 30.0
#: Nor shorter than this (``retry: 0`` in a loop would hammer the server).
MIN_RETRY_S = 0.05
#: Resumptions in a row that bring no JSON-RPC message before the stream is given up.
MAX_IDLE_RESUMPTIONS = 5
#: The longest event id sent back as ``Last-Event-ID``.
MAX_EVENT_ID = 1024


def retry_delay_s(retry_ms: int | None) -> float:
    """The wait before a resumption for a ``retry`` field as the decoder read it (None: absent or not an integer)."""
    if retry_ms is None or retry_ms < 0:
        return DEFAULT_RETRY_S
    return min(MAX_RETRY_S, max(MIN_RETRY_S, retry_ms / 1000.0))


def usable_event_id(event_id: str | None) -> str | None:
    """The event id as a ``Last-Event-ID`` header value, or None when it cannot be one (empty, too long, not
    printable ASCII: the decoder passes any text but NUL, a header carries none of that)."""
    if not event_id or len(event_id) > MAX_EVENT_ID:
        return None
    if not all(" " <= ch <= "~" for ch in event_id) or event_id != event_id.strip():
        return None
    return event_id


@dataclass
class ResumePoint:
    """Where a stream may be resumed from, and how many resumptions in a row have brought nothing.

    A server may end the SSE stream of a POST (or the session's standalone GET stream) before it has sent the reply: to
    free a connection, gracefully, or because the connection dropped. The spec's rule, as the official SDKs keep it
    (``mcp.client.streamable_http``: ``_handle_reconnection``): when the stream carried an event ``id``, the client
    reconnects with ``GET`` and ``Last-Event-ID: <that id>``, after waiting the ``retry`` the server sent, and reads the
    rest of the stream there; re-POSTing would be a *new* request (a second ``tools/call``), so it is never done.

    The SSE fields (``id``, ``retry``) are parsed by httpx2's event decoder (derived from httpx-sse); this module owns
    only what a client decides with them, each value bounded:

    * the wait before a resumption: the server's ``retry`` (milliseconds), clamped to [:data:`MIN_RETRY_S`,
      :data:`MAX_RETRY_S`]; :data:`DEFAULT_RETRY_S` when the server sent none or a value the decoder kept but the SSE
      spec does not allow (negative);
    * the ``Last-Event-ID`` sent: the last non-empty event id seen, across the resumed streams too (the SDKs' rule: a
      decoder starts each stream afresh, so an empty id cannot tell "none in this stream" from a reset); an id over
      :data:`MAX_EVENT_ID` characters or with characters a header cannot carry is not resumable;
    * how many resumptions: at most :data:`MAX_IDLE_RESUMPTIONS` in a row that bring no message (a failed GET, a 5xx, a
      stream that ends again with nothing but priming events). A resumption that brings a message starts the count
      again, so a long tool on a server that cycles its streams is followed for as long as the request's own bound
      lasts. A GET answered 4xx or with something else than an event stream is final at once: the server cannot resume
      this stream.

    With these bounds a stream that closes forever costs at most ``MAX_IDLE_RESUMPTIONS × (MAX_RETRY_S + the read
    timeout)`` and ends as :class:`~protocol.wire_errors.StreamLost` (``sent`` True: the request was delivered).
    """

    #: The last non-empty event id seen.
    event_id: str | None = None
    retry_ms: int | None = None
    idle: int = 0
    resumptions: int = 0
    #: Why the last resumption brought nothing (for the error text).
    last_failure: str = ""
    seen_message: bool = field(default=False, repr=False)

    def saw(self, event_id: str | None, retry_ms: int | None, *, message: bool) -> None:
        """One event read (``message``: it carried a JSON-RPC message, not only a priming or empty event)."""
        if event_id:
            self.event_id = event_id
        if retry_ms is not None:
            self.retry_ms = retry_ms
        if message:
            self.seen_message = True

    def delay_s(self) -> float:
        return retry_delay_s(self.retry_ms)

    def header(self) -> str | None:
        return usable_event_id(self.event_id)

    def ended(self) -> str | None:
        """The stream ended before the reply: None when it may be resumed now, else why not (the caller raises)."""
        if self.seen_message:
            self.idle = 0
        elif self.resumptions:
            self.idle += 1
        self.seen_message = False
        if self.header() is None:
            return (
                "the stream carried no usable event id to resume from"
                if not self.event_id
                else "its last event id cannot be sent back as Last-Event-ID"
            )
        if self.idle >= MAX_IDLE_RESUMPTIONS:
            return (
                f"{self.idle} resumptions in a row (GET with Last-Event-ID) brought nothing"
                + (f" (last: {self.last_failure})" if self.last_failure else "")
                + f"; at most {MAX_IDLE_RESUMPTIONS} are tried"
            )
        self.resumptions += 1
        return None
