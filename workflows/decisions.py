"""The workflow's pure decisions: replay, outcomes, bounded delays.

No Temporal, no I/O, no clock (the caller passes ``now``): the same inputs give the same decision on every replay,
and every rule is unit tested directly.
"""

from __future__ import annotations

import json
import math
import re
from datetime import datetime
from typing import Any, Literal

from mcp_temporal_tasks.protocol.bounds import parse_time, shifted
from mcp_temporal_tasks.protocol.tasks import RpcErrorInfo
from mcp_temporal_tasks.protocol.wire_errors import MAX_RETRY_AFTER_S
from mcp_temporal_tasks.workflows.records import Classification, Outcome, ReplayPolicy, Stage

_RATE = re.compile(r"\b429\b|rate[\s_-]?limit|too many requests|resource[_\s]exhausted|quota exceeded", re.I)
_RETRY_AFTER = re.compile(
    r"retry[\s_-]?after\s*[=:]?\s*(\d+(?:\.\d+)?)\s*(ms|milliseconds?|s|sec|seconds?|m|min|minutes?)?", re.I
)
_AUTH = re.compile(
    r"\b40[13]\b|unauthori[sz]ed|(?<!task )forbidden(?! tool)|permission denied|access denied|"
    r"(invalid|expired|missing) (api )?(token|credentials?|key)|authenticat",
    re.I,
)
_TRANSIENT = re.compile(
    r"time[sd]?[\s-]?out|temporar(y|ily)|unavailable|\b50[234]\b|connection (reset|refused)|try again|"
    r"overloaded|econnreset|transient",
    re.I,
)
_INPUT = re.compile(
    r"invalid|validation|must be|missing required|required (field|parameter|argument)|"
    r"not found|\b40[04]\b|\b422\b|malformed",
    re.I,
)
_PERMANENT = re.compile(
    r"not supported|unsupported|not implemented|method not found|no such tool|unknown tool|"
    r"-3260[01]\b|requires task augmentation",
    re.I,
)

_UNIT_S = {
    "ms": 0.001,
    "millisecond": 0.001,
    "milliseconds": 0.001,
    "m": 60.0,
    "min": 60.0,
    "minute": 60.0,
    "minutes": 60.0,
}


def payload_text(result: dict[str, Any] | None, error: RpcErrorInfo | None, status_message: str | None) -> str:
    """All human-readable text a failure carries, for the rules above."""
    parts: list[str] = []
    if result:
        for block in result.get("content") or []:
            if isinstance(block, dict) and block.get("type") == "text":
                parts.append(str(block.get("text", "")))
        if result.get("structuredContent") is not None:
            parts.append(json.dumps(result["structuredContent"], default=str))
    if error is not None:
        parts.append(error.message)
        if error.data is not None:
            parts.append(json.dumps(error.data, default=str))
    if status_message:
        parts.append(status_message)
    return "\n".join(parts)


def bounded_delay_s(value: Any) -> float | None:
    """A server-given delay the workflow can wait out: a finite number of seconds, at least 0, at most
    :data:`MAX_RETRY_AFTER_S` (a day; clamped), or None for anything else (``inf``, ``nan``, not a number). What a
    server writes must never become a timer ``timedelta`` cannot hold: that would fail the workflow task forever."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value < 0:
        return None
    return min(float(value), MAX_RETRY_AFTER_S)


def _structured_retry_after(result: dict[str, Any] | None, error: RpcErrorInfo | None) -> float | None:
    for source in ((result or {}).get("structuredContent"), error.data if error else None):
        if isinstance(source, dict):
            for key in ("retryAfter", "retry_after", "retryAfterSeconds", "retry_after_s"):
                value = bounded_delay_s(source.get(key))
                if value is not None:
                    return value
    return None


def parse_retry_after_text(text: str) -> float | None:
    m = _RETRY_AFTER.search(text)
    if not m:
        return None
    unit = (m.group(2) or "s").lower()
    return bounded_delay_s(float(m.group(1)) * _UNIT_S.get(unit, 1.0))


def classify_failure(
    result: dict[str, Any] | None,
    error: RpcErrorInfo | None,
    status_message: str | None = None,
) -> tuple[Classification, float | None]:
    """Classify a ``tool_error`` / ``failed`` / ``rejected`` payload; returns (classification, retry_after_s).

    First match wins:

    1. **retryable**: rate limiting (``429``, "rate limit", "too many requests", ``RESOURCE_EXHAUSTED``);
       ``retry_after_s`` from ``retry-after=N`` / ``Retry-After: N`` / "retry after N s" in the text, or
       ``retryAfter``/``retry_after`` in structured content or error data.
    2. **authorization_required**: ``401``/``403``, "unauthorized", "forbidden" (not "forbidden tool"),
       "permission denied", "invalid/expired token", "authentication".
    3. **retryable**: transient: timeouts, "temporarily", "unavailable", ``502/503/504``, connection
       reset/refused, "try again".
    4. **input_correctable**: JSON-RPC ``-32602``.
    5. **permanent**: JSON-RPC ``-32601``/``-32600``/``-32021``, or text naming them, "method not found",
       "not supported", "unknown tool", "requires task augmentation".
    6. **input_correctable**: "invalid", "validation", "must be", "missing required", "not found", ``400``/``422``.
    7. **unknown**: anything else.
    """
    text = payload_text(result, error, status_message)
    code = error.code if error else None
    retry_after = _structured_retry_after(result, error) or parse_retry_after_text(text)
    if _RATE.search(text):
        return Classification.RETRYABLE, retry_after
    if _AUTH.search(text):
        return Classification.AUTHORIZATION_REQUIRED, None
    if _TRANSIENT.search(text):
        return Classification.RETRYABLE, retry_after
    if code == -32602:
        return Classification.INPUT_CORRECTABLE, None
    # Explicit protocol refusals first: "method not found" is not a correctable "not found".
    if code in (-32601, -32600, -32021, -32003) or _PERMANENT.search(text):
        return Classification.PERMANENT, None
    if _INPUT.search(text):
        return Classification.INPUT_CORRECTABLE, None
    return Classification.UNKNOWN, retry_after


def terminal_outcome(
    status: str,
    *,
    result: dict[str, Any] | None,
    error: RpcErrorInfo | None,
    empty: bool,
    decode_error: str | None,
    status_message: str | None,
) -> tuple[Outcome, RpcErrorInfo | None]:
    """The outcome of a task the server reported terminal, from its status and retrieved payload.

    A task the server completed is never reported as failed or as nothing: a completed task whose
    payload cannot be decoded (or is empty) is ``decode_failed`` with the raw payload kept.
    """
    if status == "cancelled":
        return Outcome.CANCELLED, error
    if decode_error is not None:
        return Outcome.DECODE_FAILED, None
    if result is not None:
        return (Outcome.TOOL_ERROR if result.get("isError") else Outcome.COMPLETED), None
    if error is not None:
        return Outcome.FAILED, error
    if status == "completed":
        return Outcome.DECODE_FAILED, None
    # failed with no stored payload: the server's statusMessage is the only reason there is.
    return Outcome.FAILED, RpcErrorInfo(code=-32603, message=status_message or "task failed with no stored payload")


def task_expires_at(created_at: str | None, ttl_ms: int | str | None) -> datetime | None:
    """When a task's TTL runs out by the server's own record (``createdAt + ttl``), or None when it does not say
    (no or an unusable ``createdAt``, no ``ttl``, ``ttl: null``). Never raises, whatever the values: a date beyond
    the calendar saturates at ``datetime.max`` (an old worker's history may hold values the parser now bounds)."""
    created = parse_time(created_at)
    if created is None or isinstance(ttl_ms, bool) or not isinstance(ttl_ms, int):
        return None
    return shifted(created, ms=ttl_ms)


def not_found_outcome(created_at: str | None, ttl_ms: int | str | None, now: datetime) -> Outcome:
    """``-32602`` on a task we created: ``expired`` if its TTL had run out, else ``lost``."""
    expires = task_expires_at(created_at, ttl_ms)
    if expires is None:
        return Outcome.LOST
    # A little slack: server and worker clocks differ, and purges run late, not early.
    return Outcome.EXPIRED if now >= shifted(expires, seconds=-2) else Outcome.LOST


def unretrieved_outcome(status: str, status_message: str | None) -> tuple[Outcome, RpcErrorInfo | None]:
    """A task the server reported ``status`` (terminal) whose payload could not be read within the budget.

    The operation is done, so this is never ``lost`` and never a reason to replay: a cancelled task is
    ``cancelled``, a failed one ``failed`` with the server's ``statusMessage``, a completed one
    ``result_unavailable``.
    """
    if status == "cancelled":
        return Outcome.CANCELLED, None
    if status == "failed":
        return Outcome.FAILED, RpcErrorInfo(
            code=-32603, message=status_message or "task failed; its stored payload could not be read"
        )
    return Outcome.RESULT_UNAVAILABLE, None


Decision = Literal["replay", "await_approval", "stop"]


def decide_replay(policy: ReplayPolicy, *, idempotent: bool, replays_used: int, max_replays: int) -> Decision:
    """May a *new* ``tools/call`` be sent? Retrieval retries never come here: they never re-call the tool."""
    if replays_used >= max_replays or policy == ReplayPolicy.NEVER:
        return "stop"
    if policy == ReplayPolicy.IF_IDEMPOTENT:
        return "replay" if idempotent else "stop"
    if policy == ReplayPolicy.ALWAYS:
        return "replay"
    return "await_approval"


def annotation_idempotent(
    *, trusted: bool, idempotent_hint: bool | None, read_only_hint: bool | None, read_only_alone: bool = True
) -> bool | None:
    """What a tool's annotations say about sending its call again, or None when they do not count.

    They count only for a server configuration trusts (``trust_annotations``). ``readOnlyHint: true`` makes a tool
    idempotent (it changes nothing: the spec gives ``idempotentHint`` meaning only when ``readOnlyHint`` is false);
    else ``idempotentHint`` says. Neither stated: None (not idempotent unless configured so).
    ``read_only_alone=False`` is the rule of workflows recorded before ``readOnlyHint`` alone counted (it needed
    ``idempotentHint`` stated): kept only so their histories replay.
    """
    if not trusted or (idempotent_hint is None and (read_only_hint is None or not read_only_alone)):
        return None
    return bool(idempotent_hint or read_only_hint)


class ReplayRule:
    """The replay policy and idempotency of one tool, resolved once by :func:`replay_rule`."""

    __slots__ = ("policy", "idempotent", "max_replays")

    def __init__(self, policy: ReplayPolicy, idempotent: bool, max_replays: int) -> None:
        self.policy, self.idempotent, self.max_replays = policy, idempotent, max_replays

    def __repr__(self) -> str:
        return f"ReplayRule({self.policy.value}, idempotent={self.idempotent}, max_replays={self.max_replays})"


def replay_rule(
    *,
    requested_policy: ReplayPolicy | None = None,
    configured_policy: str | None = None,
    requested_idempotent: bool | None = None,
    configured_idempotent: bool | None = None,
    annotated_idempotent: bool | None = None,
    requested_max: int | None = None,
    configured_max: int | None = None,
) -> ReplayRule:
    """The precedence, in one place: for each of the policy, idempotency and the replay budget, the request (a
    trusted caller's start input: ``--replay``, ``--idempotent``, ``--max-replays``) first, then the worker's
    configuration (``[servers.NAME.tools.TOOL]``), then, for idempotency only, the annotations of a server
    configuration trusts (:func:`annotation_idempotent`); else policy ``never``, not idempotent, one replay."""
    policy = requested_policy or (ReplayPolicy(configured_policy) if configured_policy else ReplayPolicy.NEVER)
    idempotent = next(
        (v for v in (requested_idempotent, configured_idempotent, annotated_idempotent) if v is not None), False
    )
    max_replays = next((v for v in (requested_max, configured_max) if v is not None), 1)
    return ReplayRule(policy, bool(idempotent), max_replays)


#: The input rounds one ``tools/call`` may take (MRTR): a server that keeps asking past them is refused, bounded.
MAX_INPUT_ROUNDS = 16


def replays_used(reasons: list[str]) -> int:
    """How many of a task's ``tools/call`` attempts (their ``operation_attempts[].reason``) were replays: not the
    first call, and not a continuation that answers the server's input requests (``input_response``, MRTR)."""
    return sum(1 for reason in reasons if reason.startswith("replay_"))


def may_replay(rule: ReplayRule, *, replays_used: int = 0, repeat: bool = False) -> Decision:
    """May a *new* ``tools/call`` of the same request be sent? The one replay rule: ``McpTaskWorkflow`` asks it when
    an ending justifies a replay (:func:`replay_reason`), the agent tools when a model repeats an identical call.

    * a replay after a failure (``repeat=False``): nothing past ``max_replays`` or under policy ``never``;
      ``if_idempotent`` replays an idempotent tool only; ``always`` replays; ``ask`` waits for an operator;
    * ``repeat=True``, a caller's own second identical request (no failure): it runs again for an idempotent tool
      whatever the policy (running it again does no harm, and its answer may have changed) or under ``always``;
      else it is answered by the first call (``stop``).
    """
    if repeat:
        return "replay" if rule.idempotent or rule.policy == ReplayPolicy.ALWAYS else "stop"
    return decide_replay(
        rule.policy, idempotent=rule.idempotent, replays_used=replays_used, max_replays=rule.max_replays
    )


#: Outcomes that can ever justify a replay (each only at the stages :func:`replay_reason` names).
REPLAYABLE_OUTCOMES = frozenset({Outcome.LOST, Outcome.EXPIRED, Outcome.UNKNOWN_OUTCOME})


def replay_reason(stage: Stage, outcome: Outcome, classification: Classification | None) -> str | None:
    """The whole rule of when an ending may justify a new ``tools/call``, before the replay policy is asked.
    ``None`` (never) unless one of exactly three cases holds:

    * the server said the task is **gone** (``lost``/``expired`` at :attr:`Stage.GONE`): the work it held is lost;
    * ``tools/call``'s reply was lost (``unknown_outcome`` at :attr:`Stage.SUBMITTING`): no task id to follow;
    * the tool's own result or stored error says **retryable** (``tool_error``/``failed`` at
      :attr:`Stage.SUBMITTING` for a synchronous answer or :attr:`Stage.PAYLOAD`).

    Everything else never replays: a read that failed (``UNREACHABLE``, ``RETRIEVING``, ``INPUT``), a payload that
    came as an error reply (``ERROR_REPLY``), a cancel, a refused request.
    """
    if stage == Stage.GONE and outcome in (Outcome.LOST, Outcome.EXPIRED):
        return f"replay_{outcome.value}"
    if stage == Stage.SUBMITTING and outcome == Outcome.UNKNOWN_OUTCOME:
        return "replay_unknown_outcome"
    if (
        stage in (Stage.SUBMITTING, Stage.PAYLOAD)
        and outcome in (Outcome.TOOL_ERROR, Outcome.FAILED)
        and classification == Classification.RETRYABLE
    ):
        return "replay_retryable"
    return None


SubmitFailure = Literal["resend", "rejected", "unknown_outcome", "unreachable"]


#: Failures of a submit that are answers, not faults: resending the same request gets the same refusal. Those of
#: ``tools/list`` itself (``UnknownTool``: not listed; ``InvalidArguments``: against its ``inputSchema``) come before
#: ``tools/call`` is sent.
REFUSALS = frozenset(
    {
        "InvalidParams",
        "MethodNotFound",
        "MissingCapability",
        "HeaderMismatch",
        "CapabilityUnavailable",
        "UnsupportedProtocolVersion",
        "AuthorizationRequired",
        "JsonRpcError",
        "HttpRefusal",
        "UnknownTool",
        "InvalidArguments",
        "RequestRefused",
    }
)
#: How a refusal of our own before sending is classified, whatever its text says.
REFUSAL_CLASSES = {
    "AuthorizationRequired": Classification.AUTHORIZATION_REQUIRED,
    "UnknownTool": Classification.PERMANENT,
    "InvalidArguments": Classification.INPUT_CORRECTABLE,
}


def after_submit_failure(
    kind: str, *, may_have_reached_server: bool, resends: int, max_resends: int = 3
) -> SubmitFailure:
    """What a failed ``tools/call`` attempt means. Only a request that surely never arrived is resent."""
    if kind in REFUSALS:
        return "rejected"
    if not may_have_reached_server:
        return "resend" if resends < max_resends else "unreachable"
    return "unknown_outcome"


def retrieval_budget_s(
    created_at: str | None,
    ttl_ms: int | str | None,
    now: datetime,
    deadline: datetime | None,
    default_s: float = 3600.0,
) -> float:
    """How long a retrieval may keep retrying: until the task's TTL or the deadline, whichever is first."""
    candidates = [default_s]
    expires = task_expires_at(created_at, ttl_ms)
    if expires is not None:
        candidates.append((expires - now).total_seconds())
    if deadline is not None:
        candidates.append((deadline - now).total_seconds())
    return max(5.0, min(candidates))


def call_input_bound_s(input_s: float, call_bound_s: float) -> float:
    """How long a question asked on the stream of a plain ``tools/call`` (``elicitation/create``) waits for a person:
    the task's input bound (``input_timeout_s``, else ``timeouts.input_s``), but at most half the call's own bound
    (``submit_s``, or the tool's ``max_call_s``), so the tool has the other half to finish once answered. Then the
    answer is ``decline`` (``cancel`` with ``on_input_timeout = "cancel"``)."""
    return max(1.0, min(input_s, call_bound_s / 2))


# --- a subject's consent (AWAITING_AUTHORIZATION, patch ``consent-wait``) ---------------------------------------

#: How many consents one task may ask (the first; one more after a grant given and refused anyway, e.g. a step-up):
#: bounded, never a loop of consents.
MAX_CONSENTS = 3
#: How often a waiting task looks at the token store by itself (a login given without any signal still wakes it):
#: first after this, doubling up to :data:`CONSENT_RECHECK_MAX_S` (a day's wait costs ~150 checks).
CONSENT_RECHECK_FIRST_S = 30.0
CONSENT_RECHECK_MAX_S = 600.0


def consent_asked(kind: str, reached: bool, info: dict[str, Any]) -> dict[str, str] | None:
    """The consent a failed ``start_call`` asks for (``AuthorizationRequired`` with its ``consent``: URL, grant id,
    state; ``tools/call`` never sent), or None when it is not one, or not well formed (then the refusal stands)."""
    consent = info.get("consent")
    if kind != "AuthorizationRequired" or reached or not isinstance(consent, dict):
        return None
    url, grant, state = consent.get("url"), consent.get("grant"), consent.get("state")
    if not (isinstance(url, str) and url.startswith(("https://", "http://")) and len(url) <= 8192):
        return None
    if not (isinstance(grant, str) and 0 < len(grant) <= 128 and isinstance(state, str) and 0 < len(state) <= 512):
        return None
    return {"url": url, "grant": grant, "state": state}


def consent_recheck_s(checks: int, left_s: float) -> float:
    """How long a waiting task sleeps before it looks at the store again (a signal cuts it short): 30 s doubling to
    10 min, never past the end of its bound."""
    return max(0.0, min(left_s, CONSENT_RECHECK_FIRST_S * 2.0 ** min(checks, 10), CONSENT_RECHECK_MAX_S))


def after_consent_check(
    *, ready: bool, refused: str | None, left_s: float, cancelled: bool
) -> Literal["send", "refused", "expired", "cancelled", "wait"]:
    """What a waiting task does after a look at its consent: a grant there → send ``tools/call``; the consent refused
    (by the person, or the code by the authorization server) → end; past the bound → end ``consent_expired``; a
    cancel → end cancelled; else wait on. A grant found wins over a cancel or the bound that came meanwhile only if
    nothing cancelled: a cancel is never overridden."""
    if cancelled:
        return "cancelled"
    if ready:
        return "send"
    if refused is not None:
        return "refused"
    if left_s <= 0:
        return "expired"
    return "wait"


def may_ask_consent(consents: int) -> bool:
    """Whether a task may wait for one more consent (:data:`MAX_CONSENTS`)."""
    return consents < MAX_CONSENTS


def after_read_consent(verdict: str) -> Literal["read", "cancelled", "lost"]:
    """What a task whose reads waited for its subject's consent (``consent-read``) does next, the verdict of
    :func:`after_consent_check` (or ``too_many``) given: the grant is there → read the same task again (never a new
    ``tools/call``: the server has it); a cancel → ended ``cancelled`` at once (``tasks/cancel`` would need the
    missing grant); refused, past the bound or too many consents → ``lost``: the task may still run on the server,
    so it is never replayed."""
    if verdict == "send":
        return "read"
    if verdict == "cancelled":
        return "cancelled"
    return "lost"
