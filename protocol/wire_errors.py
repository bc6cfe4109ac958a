"""The typed wire failures, and what a JSON-RPC error on a read means.

Every failure a caller can act on has its own type (its ``kind``, ``retryable``, ``may_have_reached_server``:
:class:`McpWireError`); nothing above this layer parses error strings.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import Enum
from typing import Any

from mcp_temporal_tasks.protocol.limits import RAW_CAP, cap_text, safe_raw  # noqa: F401  (RAW_CAP re-exported)

# JSON-RPC / MCP error codes this project reacts to.
INVALID_PARAMS = -32602
METHOD_NOT_FOUND = -32601
INTERNAL_ERROR = -32603
INVALID_REQUEST = -32600
HEADER_MISMATCH = -32020
MISSING_CAPABILITY = -32021
MISSING_CAPABILITY_OLD = -32003
UNSUPPORTED_PROTOCOL_VERSION = -32022

#: Raw payloads kept on errors are capped so a huge bad reply cannot blow up a workflow history.
_cap = safe_raw


class McpWireError(Exception):
    """Base of all wire-layer failures. Each knows:

    * ``kind``: a stable name, used as the Temporal ``ApplicationError.type`` by the activities;
    * ``retryable``: whether repeating the *same request* can succeed (a transport hiccup) or not (the server
      answered, and will answer the same again);
    * ``may_have_reached_server``: for transport failures, whether the request may have been delivered. This is
      what separates "safe to resend" from "the tool may already be running" on ``tools/call``.
    """

    kind = "McpWireError"
    retryable = False

    def __init__(self, message: str, *, code: int | None = None, data: Any = None, raw: Any = None) -> None:
        # Server text is hostile: bounded here, once, for every error above this layer.
        message = cap_text(message)
        super().__init__(message)
        self.message = message
        self.code = code
        self.data = safe_raw(data)
        self.raw = safe_raw(raw)

    @property
    def may_have_reached_server(self) -> bool:
        # The server answered: it certainly saw the request.
        return True

    def info(self) -> dict[str, Any]:
        """JSON-safe description, the shape carried in ``ApplicationError.details``."""
        out: dict[str, Any] = {"kind": self.kind, "message": self.message, "code": self.code, "data": self.data}
        if self.raw is not None:
            out["raw"] = self.raw
        return out

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, message={self.message!r})"


# --- The server answered with a JSON-RPC error --------------------------------------------------


class JsonRpcError(McpWireError):
    """A JSON-RPC error with a code this layer has no narrower type for."""

    kind = "JsonRpcError"


class TaskNotFound(JsonRpcError):
    """``-32602`` on a ``tasks/*`` method: unknown, expired or purged task id (or a new session)."""

    kind = "TaskNotFound"


class InvalidParams(JsonRpcError):
    """``-32602`` on anything but ``tasks/*``: the request itself was refused."""

    kind = "InvalidParams"


class MethodNotFound(JsonRpcError):
    """``-32601``: the method (or the task flavour of a tool call) is not offered."""

    kind = "MethodNotFound"


class MissingCapability(JsonRpcError):
    """``-32021`` (``-32003`` in older drafts): a required client capability was not declared."""

    kind = "MissingCapability"


class HeaderMismatch(JsonRpcError):
    """``-32020``: routing headers (``Mcp-Method``/``Mcp-Name``) disagree with the body."""

    kind = "HeaderMismatch"


class UnsupportedProtocolVersion(JsonRpcError):
    """``-32022``: the server does not speak the protocol version we sent (``data.supported``)."""

    kind = "UnsupportedProtocolVersion"


# --- The request did not get a usable answer ----------------------------------------------------


class TransportError(McpWireError):
    """Refused, reset, timed out or HTTP 5xx. Retryable for idempotent requests.

    ``sent`` is False only when we know the bytes never left (connection refused, DNS failure):
    then even ``tools/call`` may be resent safely.
    """

    kind = "TransportError"
    retryable = True

    def __init__(
        self, message: str, *, sent: bool, status: int | None = None, retry_after_s: float | None = None, **kw: Any
    ) -> None:
        super().__init__(message, **kw)
        self.sent = sent
        self.status = status
        #: A 503's ``Retry-After`` (a 429's: :class:`RateLimited`), read by :func:`read_retry_after`.
        self.retry_after_s = retry_after_s

    @property
    def may_have_reached_server(self) -> bool:
        return self.sent

    def info(self) -> dict[str, Any]:
        extra = {"retry_after_s": self.retry_after_s} if self.retry_after_s is not None else {}
        return {**super().info(), "sent": self.sent, "status": self.status, **extra}


class StreamLost(TransportError):
    """A request's SSE stream ended (closed or dropped) before its reply, and resuming it (SEP-1699: ``GET`` with
    ``Last-Event-ID`` after the server's ``retry``) did not bring the reply: no event id to resume from, the
    resumption refused (HTTP 4xx, not an event stream) or too many resumptions in a row brought nothing
    (:mod:`.resume` states the bounds). The request was delivered (``sent`` is always True): for ``tools/call``
    the tool may be running, so it is never sent again for this; a read is simply asked again."""

    kind = "StreamLost"

    def __init__(self, message: str, **kw: Any) -> None:
        super().__init__(message, sent=True, **kw)


class RateLimited(TransportError):
    """HTTP 429. ``retry_after_s`` is the parsed ``Retry-After`` header, when present."""

    kind = "RateLimited"

    def __init__(
        self, message: str, *, retry_after_s: float | None, retry_after_note: str | None = None, **kw: Any
    ) -> None:
        if retry_after_note:
            retry_after_note = cap_text(retry_after_note, 256)
            message = f"{message} ({retry_after_note})"
        super().__init__(message, sent=True, status=429, retry_after_s=retry_after_s, **kw)
        #: Why the server's Retry-After was clamped or ignored (None: used as sent, or absent).
        self.retry_after_note = retry_after_note

    @property
    def may_have_reached_server(self) -> bool:
        # A 429 is a refusal: the request was not processed.
        return False

    def info(self) -> dict[str, Any]:
        return {**super().info(), "retry_after_s": self.retry_after_s, "retry_after_note": self.retry_after_note}


class AuthorizationRequired(McpWireError):
    """HTTP 401/403: credentials are missing, wrong or insufficient. Not retryable as is.

    Also no access token to be had (``status`` None): the authorization server refused the client, is down,
    or discovery led nowhere (:mod:`.auth`). The request was not sent.
    """

    kind = "AuthorizationRequired"

    def __init__(self, message: str, *, status: int | None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.status = status

    @property
    def may_have_reached_server(self) -> bool:
        return False


class ProtocolViolation(McpWireError):
    """Malformed JSON or a reply shape the protocol does not allow. ``raw`` keeps what arrived.

    Not retryable as a *call* (``tools/call`` is never resent for it), but a garbled reply to an idempotent
    read is a transport fault: the activities retry reads on it (:func:`is_transient_read_error`).
    """

    kind = "ProtocolViolation"


class HttpRefusal(JsonRpcError):
    """An HTTP 4xx without a JSON-RPC error body (not 401/403/404-session/429): the server refused the request."""

    kind = "HttpRefusal"


class PayloadUnusable(McpWireError):
    """The server answered, but what it sent cannot be carried (over :data:`~.limits.MAX_REPLY_BYTES`).

    Final: asking again gets the same answer. For a task's payload this is ``decode_failed``, never "lost".
    """

    kind = "PayloadUnusable"


class TaskUnreachable(McpWireError):
    """The task's session cannot be reached any more (server restarted, session gone, stdio child died).

    Distinct from :class:`TaskNotFound`: the server never said the task is gone; we cannot ask it.
    """

    kind = "TaskUnreachable"


class SessionGone(TaskUnreachable):
    """HTTP 404 on a request that carried ``Mcp-Session-Id``: the server no longer knows the session.

    The request was refused before any work, so even ``tools/call`` is known not to have run.
    """

    kind = "SessionGone"

    @property
    def may_have_reached_server(self) -> bool:
        return False


class ProcessGone(TaskUnreachable):
    """The stdio child had already exited when we tried to write: the request was never sent."""

    kind = "ProcessGone"

    @property
    def may_have_reached_server(self) -> bool:
        return False


class RequestRefused(McpWireError):
    """The request cannot be written as it is (a header name that is not a token, a value with CR, LF, NUL or
    characters outside ASCII, a body that does not match its length): refused here, before any byte left. Final:
    the same request is refused again, so it is a rejection, never a resend and never an unknown outcome."""

    kind = "RequestRefused"

    @property
    def may_have_reached_server(self) -> bool:
        return False


class ResultDecodeError(McpWireError):
    """The task finished but its payload does not match the pinned result contract.

    The work succeeded; only decoding failed. ``raw`` carries the payload (size-capped).
    """

    kind = "ResultDecodeError"


class CapabilityUnavailable(McpWireError):
    """The server offers no tasks in the era we need (e.g. pinned era not spoken, tool forbids tasks)."""

    kind = "CapabilityUnavailable"


class UnknownProtocolVersion(CapabilityUnavailable):
    """The server answered ``initialize`` or ``server/discover`` with protocol versions this client does not speak
    (or refused ours, ``-32022``, offering only such versions). Nothing more is
    sent to it (no ``tools/list``, no ``tools/call``); across processes it travels as ``CapabilityUnavailable``
    (a refusal: never retried)."""


class NotMcpEndpoint(CapabilityUnavailable):
    """What answers at the URL is not an MCP endpoint: the handshake got no JSON-RPC at all (a page that is not JSON or
    SSE, an HTTP 4xx without a JSON-RPC error, 501 Not Implemented or 505). The message names what answered (status,
    content type, the ``Server`` header, the page's title or first words). Final: nothing more is sent to it, and
    across processes it travels as ``CapabilityUnavailable`` (a refusal: never retried)."""


#: Every error type by kind, so a failure that crossed a process boundary can be rebuilt.
ERROR_TYPES: dict[str, type[McpWireError]] = {
    cls.kind: cls
    for cls in (
        McpWireError,
        JsonRpcError,
        TaskNotFound,
        InvalidParams,
        MethodNotFound,
        MissingCapability,
        HeaderMismatch,
        UnsupportedProtocolVersion,
        TransportError,
        RateLimited,
        AuthorizationRequired,
        ProtocolViolation,
        TaskUnreachable,
        SessionGone,
        ProcessGone,
        ResultDecodeError,
        CapabilityUnavailable,
        HttpRefusal,
        PayloadUnusable,
        RequestRefused,
        StreamLost,
    )
}


def is_transient_read_error(exc: McpWireError) -> bool:
    """Worth retrying for an *idempotent* request: transport faults and garbled replies (never tools/call).

    The narrow rule, for requests that are not reads of an existing task (``tools/list``, ``tasks/list``):
    there a JSON-RPC error is the server's answer. For reads of a task see :func:`is_read_fault`.
    """
    return isinstance(exc, (TransportError, ProtocolViolation))


# --- What a JSON-RPC error on a read of an existing task means ------------------------------------------
#
# A *read* is any request about a task the server already accepted: ``tasks/get``, ``tasks/result``,
# ``tasks/cancel``, ``tasks/update``, and a job binding's status, result and cancel tools (``tools/call`` of a
# tool that only reads or stops the job). Reading again is always safe; re-running the operation never is.
# So an error reply to a read is one of four things, and only two of them may end the task:


class ReadMeaning(str, Enum):
    #: The server says the task does not exist (unknown, expired or purged): ``lost``, or ``expired`` when
    #: its TTL explains it. The one error reply that may end a task as "gone".
    GONE = "gone"
    #: The error *is* the task's stored payload: 2025-11-25 ``tasks/result`` answers a ``failed`` task with
    #: "exactly what the original request returned", which may be a JSON-RPC error. The outcome is ``failed``.
    PAYLOAD = "payload"
    #: No payload to read: 2025-11-25 ``tasks/result`` of a ``cancelled`` task answering ``-32603``.
    EMPTY = "empty"
    #: A retrieval fault: asked again with the same bounded backoff as a garbled reply, within
    #: ``timeouts.unreachable_s`` for polls and updates and the retrieval budget for payloads. Never the task's
    #: ending while the budget lasts, and never a reason to re-run the tool.
    FAULT = "fault"


@dataclass(frozen=True)
class ReadErrorRule:
    """One row of :data:`READ_ERROR_RULES`. ``None`` in a column matches anything."""

    method: str | None
    era: str | None
    status: str | None
    code: int | None
    meaning: ReadMeaning
    why: str


_LEGACY_ERA = "2025-11-25"  # protocol.tasks.LEGACY (not imported: this module needs no model)

#: The whole rule, first match wins. Derived from the two specs and what the runtimes send (the TS SDK, fastmcp,
#: the official Python SDK): ``-32602`` is the only code either spec gives to "no such task"; 2025-11-25 stores
#: a failed request's JSON-RPC error as the task's result; everything else a server may answer to a read
#: (``-32603`` "temporarily unavailable", ``-32000`` from a gateway, an unknown code, a 3 MiB message, even
#: ``-32601`` from a replica being rolled out) says nothing about the task, only about this one answer.
READ_ERROR_RULES: tuple[ReadErrorRule, ...] = (
    ReadErrorRule(
        "tasks/result",
        _LEGACY_ERA,
        "failed",
        METHOD_NOT_FOUND,
        ReadMeaning.FAULT,
        "the server offers no tasks/result: not a stored error",
    ),
    ReadErrorRule(
        "tasks/result",
        _LEGACY_ERA,
        "failed",
        None,
        ReadMeaning.PAYLOAD,
        "the failed request's stored JSON-RPC error (for -32602 only if tasks/get still knows the task; else gone)",
    ),
    ReadErrorRule(
        "tasks/result",
        _LEGACY_ERA,
        "cancelled",
        INTERNAL_ERROR,
        ReadMeaning.EMPTY,
        "the TS SDK's answer for a cancelled task: no payload",
    ),
    ReadErrorRule("tasks/get", None, None, INVALID_PARAMS, ReadMeaning.GONE, "unknown, expired or purged task id"),
    ReadErrorRule("tasks/result", None, None, INVALID_PARAMS, ReadMeaning.GONE, "unknown, expired or purged task id"),
    ReadErrorRule("tasks/update", None, None, INVALID_PARAMS, ReadMeaning.GONE, "unknown, expired or purged task id"),
    ReadErrorRule(
        "tasks/cancel",
        None,
        None,
        INVALID_PARAMS,
        ReadMeaning.GONE,
        "unknown task id; on 2025-11-25 also an already terminal task (tasks/get then tells which)",
    ),
    ReadErrorRule(
        None,
        None,
        None,
        None,
        ReadMeaning.FAULT,
        "any other code on any read, job tools' -32602 included (no spec gives them a 'gone' code)",
    ),
)


def read_error_meaning(
    method: str, code: int | None, *, era: str | None = None, status: str | None = None
) -> ReadMeaning:
    """What a JSON-RPC error with ``code`` means as the answer to a read ``method`` (see :data:`READ_ERROR_RULES`).

    ``era`` and ``status`` (the task's last known status) narrow the legacy ``tasks/result`` rows; without them
    those rows do not match.
    """
    for rule in READ_ERROR_RULES:
        if (
            (rule.method is None or rule.method == method)
            and (rule.era is None or rule.era == era)
            and (rule.status is None or rule.status == status)
            and (rule.code is None or rule.code == code)
        ):
            return rule.meaning
    raise AssertionError("READ_ERROR_RULES ends with a catch-all row")


def read_error_table() -> str:
    """:data:`READ_ERROR_RULES` as the markdown table the README shows (a test keeps the two equal)."""
    rows = ["| read | era | task status | code | meaning | why |", "|---|---|---|---|---|---|"]
    for r in READ_ERROR_RULES:
        rows.append(
            f"| {f'`{r.method}`' if r.method else 'any read'} | {r.era or 'both'} | {r.status or 'any'} "
            f"| {r.code if r.code is not None else 'any other'} | **{r.meaning.value}** | {r.why} |"
        )
    return "\n".join(rows)


def is_read_fault(exc: McpWireError) -> bool:
    """Worth asking again, for a read of an existing task: transport faults, garbled replies and every JSON-RPC
    error the table calls a fault. ``TaskNotFound`` is the table's "gone" (decided by :func:`error_from_rpc`);
    "payload" and "empty" never reach here (the client returns them as the payload).

    A 401 that survived a fresh token, a 403, or no token to be had (authorization server down or refusing) is a
    fault too: the task is not known to be gone, and credentials or an authorization server may recover within
    the budget (an operator fixing a grant); if they do not, the task is reported as out of reach, never gone."""
    if isinstance(exc, (TransportError, ProtocolViolation, AuthorizationRequired)):
        return True
    return isinstance(exc, JsonRpcError) and not isinstance(exc, TaskNotFound)


def error_from_rpc(error: Any, *, method: str, raw: Any = None) -> McpWireError:
    """Map a JSON-RPC ``error`` object to its type. ``method`` decides what ``-32602`` means."""
    if not isinstance(error, dict) or not isinstance(error.get("code"), int):
        return ProtocolViolation(f"{method}: error object without an integer code", raw=raw or error)
    code: int = error["code"]
    message = str(error.get("message", ""))
    data = error.get("data")
    if read_error_meaning(method, code) == ReadMeaning.GONE:
        cls: type[JsonRpcError] = TaskNotFound
    elif code == INVALID_PARAMS:
        cls = InvalidParams
    elif code == METHOD_NOT_FOUND:
        cls = MethodNotFound
    elif code in (MISSING_CAPABILITY, MISSING_CAPABILITY_OLD):
        cls = MissingCapability
    elif code == HEADER_MISMATCH:
        cls = HeaderMismatch
    elif code == UNSUPPORTED_PROTOCOL_VERSION:
        cls = UnsupportedProtocolVersion
    else:
        cls = JsonRpcError
    return cls(f"{method}: {message}" if message else method, code=code, data=data)


#: The longest ``Retry-After`` honoured: a day. A longer one is clamped to it (a server asking for a week is
#: better retried daily than believed), and the workflow's deadline bounds any wait anyway.
MAX_RETRY_AFTER_S = 86400.0


@dataclass(frozen=True)
class RetryAfter:
    """A ``Retry-After`` header as read: ``seconds`` to wait (None: absent or unusable), and ``note`` saying why a
    value was clamped or ignored (kept on the error, so an operator sees what the server sent)."""

    seconds: float | None
    note: str | None = None


_DECIMAL = re.compile(r"[+-]?\d{1,64}(?:\.\d{1,64})?")


def read_retry_after(value: str | None, *, now: datetime | None = None) -> RetryAfter:
    """``Retry-After`` (RFC 9110 10.2.3): delay-seconds or an HTTP date. Read leniently where the meaning is plain
    (``2.5`` is 2.5 s; a negative number or a past date is 0), never past :data:`MAX_RETRY_AFTER_S` (clamped), and
    anything else (an exponent, ``inf``/``nan``, junk) ignored; a note says what was clamped or ignored. Never raises,
    never returns a value ``timedelta`` cannot hold."""
    if value is None or not value.strip():
        return RetryAfter(None)
    text = value.strip()
    shown = cap_text(text, 64)
    if _DECIMAL.fullmatch(text):
        seconds = float(text)
        if seconds < 0:
            return RetryAfter(0.0, f"Retry-After {shown} is negative: read as 0s")
    else:
        from email.utils import parsedate_to_datetime

        try:
            when = parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError, OverflowError):
            return RetryAfter(None, f"Retry-After {shown!r} ignored: neither delay-seconds nor an HTTP date")
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = max(0.0, (when - (now or datetime.now(UTC))).total_seconds())
    if seconds > MAX_RETRY_AFTER_S:
        return RetryAfter(MAX_RETRY_AFTER_S, f"Retry-After {shown} clamped to {MAX_RETRY_AFTER_S:.0f}s")
    return RetryAfter(seconds)


def parse_retry_after(value: str | None) -> float | None:
    """``Retry-After`` as seconds (see :func:`read_retry_after`); None when absent or unusable."""
    return read_retry_after(value).seconds
