"""Input and output of ``McpTaskWorkflow``, and the ledger it keeps. Pure pydantic, sandbox-safe.

The request carries no secrets: servers are named (resolved by the worker's configuration) or given
inline with credentials *by reference* (names of environment variables of the worker).
"""

from __future__ import annotations

import json
from datetime import datetime
from enum import Enum
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator
from temporalio.common import SearchAttributeKey

from mcp_temporal_tasks.activities.activity_io import (
    MAX_SEARCH_ATTRIBUTE_BYTES as MAX_SEARCH_ATTRIBUTE_BYTES,  # the shape lives below, shared with the push hub
)
from mcp_temporal_tasks.activities.activity_io import (
    TASK_ID_SEARCH_ATTRIBUTE,
    TASK_WORKFLOW_TYPE,
    ServerProfile,
)
from mcp_temporal_tasks.activities.activity_io import (
    search_attribute_value as search_attribute_value,
)
from mcp_temporal_tasks.protocol.tasks import (
    Endpoint,
    Era,
    InputRequest,
    RpcErrorInfo,
    SessionRef,
    TaskState,
    TaskStatus,
)
from mcp_temporal_tasks.protocol.tasks import StrictModel as _Model
from mcp_temporal_tasks.workflows.states import Classification, Outcome, Phase, ReplayPolicy

WORKFLOW_TYPE = TASK_WORKFLOW_TYPE
DEFAULT_TASK_QUEUE = "mcp-tasks"
#: Arguments are carried in the workflow input and in the tools/call activity's input: each must stay well
#: under Temporal's 2 MiB payload limit (and its 512 KiB warning).
MAX_ARGUMENTS_BYTES = 512 * 1024
MAX_TOOL_NAME = 256
#: The longest principal (a subject: a user id, an email, a tenant); it is in the ledger, the memo and the store's keys.
MAX_PRINCIPAL = 256


#: The search attributes every task keeps up to date (Keyword). Registered by the worker, the plugin, the dev server.
SA_SERVER = SearchAttributeKey.for_keyword("McpServer")
SA_TOOL = SearchAttributeKey.for_keyword("McpTool")
SA_TASK_ID = SearchAttributeKey.for_keyword(TASK_ID_SEARCH_ATTRIBUTE)
SA_STATUS = SearchAttributeKey.for_keyword("McpTaskStatus")
SA_OUTCOME = SearchAttributeKey.for_keyword("McpOutcome")
SEARCH_ATTRIBUTES = (SA_SERVER, SA_TOOL, SA_TASK_ID, SA_STATUS, SA_OUTCOME)
SEARCH_ATTRIBUTE_NAMES = tuple(key.name for key in SEARCH_ATTRIBUTES)


class RequestTooLarge(ValueError):
    """A request whose arguments are over :data:`MAX_ARGUMENTS_BYTES`: refused before any workflow starts."""


def _not_utf8(value: Any, path: str = "") -> str | None:
    """The path of the first string (key or value) in ``value`` that UTF-8 cannot encode, or None."""
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return where or "<input>"
        elif isinstance(item, dict):
            for key, sub in item.items():
                if isinstance(key, str) and _not_utf8(key) is not None:
                    return f"{where}.<key>" if where else "<key>"
                stack.append((sub, f"{where}.{key}" if where else str(key)))
        elif isinstance(item, (list, tuple)):
            stack.extend((sub, f"{where}[{i}]") for i, sub in enumerate(item))
    return None


def check_request_size(arguments: dict[str, Any]) -> None:
    """Raise :class:`RequestTooLarge` naming the limit. Pure: the workflow runs it too."""
    size = len(json.dumps(arguments, separators=(",", ":"), ensure_ascii=False, default=str).encode("utf-8", "replace"))
    if size > MAX_ARGUMENTS_BYTES:
        raise RequestTooLarge(
            f"arguments are {size} bytes of JSON, over the {MAX_ARGUMENTS_BYTES}-byte limit: "
            "pass large inputs by reference (a URL or a file name the tool can read)"
        )


def validation_message(error: Any) -> str:
    """One pydantic error's text without pydantic's ``Value error, `` / ``Assertion failed, `` prefixes (a validator's
    own message is the message), an unknown key called so."""
    if error.get("type") == "extra_forbidden":
        return "unknown key"
    if error.get("type") == "bool_type":
        return f"must be true or false (got {repr(error.get('input'))[:60]})"
    msg = str(error.get("msg", ""))
    for prefix in ("Value error, ", "Assertion failed, "):
        if msg.startswith(prefix):
            return msg[len(prefix) :]
    return msg


#: The machine's phases and the phases each may move to; ``McpTaskWorkflow`` checks every move against it. An
#: operation can end in any phase that talks to the server, and then goes to DONE, or, when the replay rule and
#: policy allow a new ``tools/call``, to AWAITING_APPROVAL or REPLAYING.
TRANSITIONS: dict[Phase, frozenset[Phase]] = {
    # CANCELLING: a cancel while a resend waits out a Retry-After settles the previous attempt's task, if any.
    # INPUT_REQUIRED: the server asked for input on the stream of a plain tools/call, which goes on once answered.
    # AWAITING_AUTHORIZATION: the call needs a subject's consent first; once given, it is sent (SUBMITTING).
    Phase.SUBMITTING: frozenset(
        {
            Phase.SUBMITTING,
            Phase.WORKING,
            Phase.INPUT_REQUIRED,
            Phase.AWAITING_AUTHORIZATION,
            Phase.CANCELLING,
            Phase.AWAITING_APPROVAL,
            Phase.REPLAYING,
            Phase.DONE,
        }
    ),
    Phase.WORKING: frozenset(
        {
            Phase.WORKING,
            Phase.INPUT_REQUIRED,
            Phase.AWAITING_AUTHORIZATION,
            Phase.RETRIEVING,
            Phase.CANCELLING,
            Phase.AWAITING_APPROVAL,
            Phase.REPLAYING,
            Phase.DONE,
        }
    ),
    Phase.INPUT_REQUIRED: frozenset(
        {Phase.SUBMITTING, Phase.WORKING, Phase.CANCELLING, Phase.AWAITING_APPROVAL, Phase.REPLAYING, Phase.DONE}
    ),
    # WORKING: the reads of an accepted task needed the consent (consent-read).
    Phase.AWAITING_AUTHORIZATION: frozenset({Phase.SUBMITTING, Phase.WORKING, Phase.DONE}),
    Phase.RETRIEVING: frozenset({Phase.CANCELLING, Phase.AWAITING_APPROVAL, Phase.REPLAYING, Phase.DONE}),
    Phase.CANCELLING: frozenset({Phase.RETRIEVING, Phase.DONE}),
    Phase.AWAITING_APPROVAL: frozenset({Phase.REPLAYING, Phase.DONE}),
    Phase.REPLAYING: frozenset({Phase.SUBMITTING, Phase.DONE}),
    Phase.DONE: frozenset(),
}


def transition_diagram() -> str:
    """:data:`TRANSITIONS` as text: one line per phase (the module docstring and the README show it; a test keeps
    them equal)."""
    width = max(len(p.value) for p in Phase)
    lines = []
    for p in Phase:
        line = f"{p.value:<{width}} ─►"
        for n in [n.value for n in Phase if n in TRANSITIONS[p]] or ["(end)"]:
            if len(line) + len(n) + 3 > 80:  # the width the documentation site shows
                lines.append(line)
                line = " " * (width + 3)
            line += f" {n}" if line.endswith(("─►", " ")) else f" · {n}"
        lines.append(line)
    return "\n".join(lines)


#: The longest span a request may give (any timeout, ``ttl_s``): 100 years. NaN, ±∞ and anything longer are refused
#: when the request is validated (the task ends ``rejected``): workflow code turns these into timers and deadlines,
#: where a value ``timedelta`` cannot hold would fail the workflow task on every attempt.
MAX_SPAN_S = 100 * 366 * 86400.0


class Timeouts(_Model):
    """Bounds of one task. Defaults suit production; tests shrink them."""

    #: Heartbeat timeout of activities that wait on the server: how fast a dead worker is noticed.
    heartbeat_s: float = Field(30.0, gt=0, le=MAX_SPAN_S, allow_inf_nan=False)
    #: Longest a single tools/call may take to answer (synchronous tools take the whole run).
    submit_s: float = Field(300.0, gt=0, le=MAX_SPAN_S, allow_inf_nan=False)
    #: How long a task's activities may wait for a worker on a stdio owner's queue before it is `lost`.
    owner_pickup_s: float = Field(60.0, gt=0, le=MAX_SPAN_S, allow_inf_nan=False)
    #: Poll-interval floor and ceiling of our own (the ceiling never undercuts the server's pollInterval; an
    #: old task's gap grows past it by the server's ``polling`` schedule).
    poll_floor_s: float = Field(0.1, gt=0, le=MAX_SPAN_S, allow_inf_nan=False)
    poll_ceiling_s: float = Field(30.0, gt=0, le=MAX_SPAN_S, allow_inf_nan=False)
    #: A wait on a task older than this moves to ``long_wait_heartbeat_s``. The SDK lets one heartbeat reach
    #: Temporal per min(0.8 × the heartbeat timeout, the worker's ``max_heartbeat_throttle_interval``): 150 per
    #: task-hour at 30 s; 37.5 at 120 s (``mcp-tasks worker`` sets the interval to 120 s; the SDK's default 60 s
    #: gives 60). The price is noticing a dead worker later, for tasks old enough (40 min: 2 min is 5 % of their
    #: age) that it is in scale.
    long_wait_after_s: float = Field(2400.0, gt=0, le=MAX_SPAN_S, allow_inf_nan=False)
    long_wait_heartbeat_s: float = Field(120.0, gt=0, le=MAX_SPAN_S, allow_inf_nan=False)
    #: Once the gap to a task's next poll is at least this long, the wait holds no activity open: each poll is one
    #: short attempt of ``poll_task`` that, while the task works, ends with a benign retryable error whose
    #: ``next_retry_delay`` is the gap (no heartbeats, no worker slot, no history events). One attempt costs one
    #: billable action, a heartbeat-held gap one per 0.8 × ``heartbeat_s``: None hands over where the attempt gets
    #: cheaper (24 s at the default 30 s heartbeat: a task's 8th minute on the default schedule); 0 never does.
    idle_gap_s: float | None = Field(None, ge=0, le=MAX_SPAN_S, allow_inf_nan=False)
    #: Default human-answer timeout for input requests.
    input_s: float = Field(24 * 3600.0, gt=0, le=MAX_SPAN_S, allow_inf_nan=False)
    #: How long a task waits for a subject's consent (AWAITING_AUTHORIZATION) before it ends ``rejected``
    #: (``consent_expired``), never having sent ``tools/call``. A person's answer, as ``input_s``: a day covers the
    #: person who answers tomorrow morning; the consent (its PKCE verifier, encrypted) is kept in the token store
    #: exactly as long.
    consent_s: float = Field(24 * 3600.0, gt=0, le=MAX_SPAN_S, allow_inf_nan=False)
    #: How long a task's server may give no usable answer (refused, reset, garbled, 5xx) before the task
    #: counts as ``lost``. Such a task may still exist on the server, so this ``lost`` is never replayed.
    unreachable_s: float = Field(600.0, gt=0, le=MAX_SPAN_S, allow_inf_nan=False)


class McpTaskRequest(_Model):
    """One MCP tool call to run as a durable task.

    ``server`` is a name from the worker's configuration, or an inline :class:`Endpoint`.
    Idempotency metadata (``idempotent``, ``replay``, ``max_replays``, ``idempotency_key``) must come
    from configuration or the calling service, never from model output.
    """

    server: str | Endpoint
    tool: str = Field(min_length=1, max_length=MAX_TOOL_NAME)
    arguments: dict[str, Any] = Field(default_factory=dict)
    era: Era | None = None
    ttl_s: float | None = Field(None, gt=0, le=MAX_SPAN_S, allow_inf_nan=False)
    deadline: datetime | None = None
    idempotency_key: str | None = Field(None, max_length=200)
    replay: ReplayPolicy | None = None
    #: None: the configured per-tool value, else 1.
    max_replays: int | None = Field(None, ge=0, le=10)
    idempotent: bool | None = None
    principal: str | None = Field(None, min_length=1, max_length=MAX_PRINCIPAL)
    timeouts: Timeouts = Field(default_factory=Timeouts)
    #: What to do when a human does not answer an input request in time.
    on_input_timeout: Literal["decline", "cancel"] = "cancel"
    input_timeout_s: float | None = Field(None, gt=0, le=MAX_SPAN_S, allow_inf_nan=False)

    @field_validator("server")
    @classmethod
    def _server_name(cls, v: str | Endpoint) -> str | Endpoint:
        if isinstance(v, str) and not v.strip():
            raise ValueError("server name must not be empty")
        return v

    @model_validator(mode="after")
    def _utf8_only(self) -> McpTaskRequest:
        # A lone surrogate (valid JSON text from another SDK, "\ud800") cannot be sent to a server, hashed for the
        # ledger or written to a search attribute: refused here, named, so the task ends `rejected` at once.
        where = _not_utf8(self.model_dump(mode="python", exclude={"timeouts"}))
        if where is not None:
            raise ValueError(f"{where} is not valid Unicode text (a lone surrogate)")
        return self

    @model_validator(mode="after")
    def _no_inline_secrets(self) -> McpTaskRequest:
        # Arguments are stored in history: refuse the obvious credential shapes outright.
        for key in self.arguments:
            if key.lower() in {"authorization", "api_key", "apikey", "password", "secret", "token", "access_token"}:
                raise ValueError(
                    f"argument {key!r} looks like a credential: pass credentials by reference "
                    "(a server's `headers` / `env` tables in the worker's configuration, "
                    'e.g. Authorization = { env = "VAR" }), never inline'
                )
        return self

    def server_label(self) -> str:
        return self.server if isinstance(self.server, str) else self.server.identity()


class OperationAttempt(_Model):
    """One ``tools/call`` that was (or may have been) sent."""

    n: int
    reason: Literal[
        "initial", "replay_lost", "replay_expired", "replay_unknown_outcome", "replay_retryable", "input_response"
    ]
    #: When ``tools/call`` was sent (workflow time), for a task and a synchronous call alike.
    at: datetime
    task_id: str | None = None
    ended: str | None = None  # how it ended: an Outcome value, or "in_flight"
    #: Set when the reply to this tools/call was lost and its task was identified with tasks/list.
    reconciled: str | None = None
    #: An ``input_response`` attempt (MRTR): the ``n`` of the call whose input requests it answers. The same call
    #: going on, never a replay (``decisions.replays_used`` does not count it).
    continues: int | None = None


class Ledger(_Model):
    """What an auditor needs to know about the call. Kept in workflow state, the memo and the outcome."""

    server: str
    server_identity: str | None = None
    principal: str | None = None
    method: str = "tools/call"
    tool: str
    request_digest: str
    sdk_version: str | None = None
    protocol_version: str | None = None
    era: Era | None = None
    result_contract: dict[str, Any] | None = None
    result_contract_digest: str | None = None
    created_at: datetime
    task_ids: list[str] = Field(default_factory=list)
    terminal_state: str | None = None
    idempotency: dict[str, Any] = Field(default_factory=dict)
    last_retrieval: str | None = None
    #: How many times the server answered ``tools/call`` with input requests and the call was continued with the
    #: answers (2026-07-28 MRTR): one call, ``input_rounds`` + 1 requests (``operation_attempts`` shows each).
    input_rounds: int = 0


class ResultRef(_Model):
    """A result too large for workflow history, kept in the content-addressed store."""

    digest: str
    size: int
    uri: str
    #: The stored result's ``isError``: the outcome is ``tool_error`` or ``completed`` without reading it back.
    is_error: bool = False


class Stage(str, Enum):
    """*Where* one operation ended: with its outcome and classification, all that
    :func:`~mcp_temporal_tasks.workflows.decisions.replay_reason` needs to say whether a new ``tools/call`` may be
    considered. Every ending names one (there is no default), so a new ending site cannot be replayable by
    accident."""

    #: The request did not validate, or its server could not be resolved: nothing was sent.
    REQUEST = "request"
    #: ``tools/call`` itself: refused, reply lost (``unknown_outcome``) or answered synchronously.
    SUBMITTING = "submitting"
    #: The server said the task is gone (``-32602``), or its session or stdio process is gone.
    GONE = "gone"
    #: Following the task, the server gave no usable answer within the budget (or the wait itself failed):
    #: the task may still exist, so this ``lost`` is never a reason to run the tool again.
    UNREACHABLE = "unreachable"
    #: The server reported the task terminal; its payload could not be read (or was purged before it was).
    RETRIEVING = "retrieving"
    #: The server's stored payload was read: the task's own outcome.
    PAYLOAD = "payload"
    #: A 2025-11-25 ``failed`` task's payload that came as a JSON-RPC error reply to ``tasks/result``: it cannot
    #: be told from a refused read, so it is never a reason to replay.
    ERROR_REPLY = "error_reply"
    #: Input could not be relayed or delivered (the task may still exist).
    INPUT = "input"
    #: A cancel was asked for: whatever the task's real end, never replayed.
    CANCELLING = "cancelling"


class Ending(_Model):
    """How one operation ended, inside the workflow: the outcome-specific fields of :class:`McpTaskOutcome`,
    and the :class:`Stage` it ended at (required: the replay rule reads it).

    Typed (and ``extra="forbid"``) so that a misspelt field is a type error, not a workflow task that fails.
    """

    outcome: Outcome
    stage: Stage
    result: dict[str, Any] | None = None
    result_ref: ResultRef | None = None
    error: RpcErrorInfo | None = None
    classification: Classification | None = None
    retry_after_s: float | None = None
    raw_payload: Any = None
    reason: str | None = None

    def but(self, *, reason: str) -> Ending:
        """The same ending, with another reason."""
        return self.model_copy(update={"reason": reason})

    def outcome_fields(self) -> dict[str, Any]:
        """The fields :class:`McpTaskOutcome` shares with this ending."""
        return self.model_dump(exclude={"outcome", "stage"}, exclude_unset=False)


DeliveredBy = Literal["notification", "poll", "list"]


class McpTaskOutcome(_Model):
    """The end of one MCP task. Also what ``mcp-tasks run --json`` prints."""

    workflow_id: str
    outcome: Outcome
    task_id: str | None = None
    task_status: TaskStatus | None = None
    status_message: str | None = None
    era: Era | None = None
    #: The protocol version the server answered (2025-03-26, 2025-06-18, 2025-11-25 or 2026-07-28; ``era`` is its
    #: handshake family). None in outcomes of histories from before issue 37 (the ledger has it there too).
    protocol_version: str | None = None
    result: dict[str, Any] | None = None
    result_ref: ResultRef | None = None
    error: RpcErrorInfo | None = None
    classification: Classification | None = None
    retry_after_s: float | None = None
    operation_attempts: list[OperationAttempt] = Field(default_factory=list)
    ledger: Ledger
    #: Raw payload of a decode failure, size-capped (the work succeeded; only decoding failed).
    raw_payload: Any = None
    reason: str | None = None
    #: How the task's end was learned while waiting: ``notification`` (the first read after a server's task
    #: notification woke the wait), ``list`` (the first read after a ``tasks/list`` read of the session woke it) or
    #: ``poll`` (a read of the schedule). None when no wait saw it end (a synchronous
    #: result, a cancel, an input relay, a task lost).
    delivered_by: DeliveredBy | None = None


class PendingInput(_Model):
    """An outstanding input request, as the ``status()`` query shows it."""

    key: str
    method: str
    message: str | None = None
    requested_schema: dict[str, Any] | None = None
    params: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def of(cls, key: str, req: InputRequest) -> PendingInput:
        return cls.from_params(key, req.method, req.params)

    @classmethod
    def from_params(cls, key: str, method: str, params: dict[str, Any]) -> PendingInput:
        """From a server's request: a ``message`` that is not text or a ``requestedSchema`` that is not an object is
        left out (kept in ``params``), never a validation error in workflow code (a workflow task failing forever)."""
        message, schema = params.get("message"), params.get("requestedSchema")
        return cls(
            key=key,
            method=method,
            message=message if isinstance(message, str) else None,
            requested_schema=schema if isinstance(schema, dict) else None,
            params=params,
        )


class TaskView(_Model):
    """The ``status()`` query: where the machine is, without waiting."""

    workflow_id: str
    phase: Phase
    tool: str
    server: str
    task_id: str | None = None
    task_status: TaskStatus | None = None
    status_message: str | None = None
    era: Era | None = None
    #: As in the outcome: the protocol version the server answered, once known.
    protocol_version: str | None = None
    pending_inputs: list[PendingInput] = Field(default_factory=list)
    operation_attempts: list[OperationAttempt] = Field(default_factory=list)
    outcome: Outcome | None = None
    ledger: Ledger
    #: As in the outcome, once the end is known: ``notification`` or ``poll``.
    delivered_by: DeliveredBy | None = None
    #: In AWAITING_AUTHORIZATION: the consent the task waits for (the URL a person opens).
    authorization: AuthorizationWait | None = None


class AuthorizationWait(_Model):
    """A consent the task waits for: the URL a person opens (it carries ``state`` and the PKCE challenge, never
    the verifier or a code), the grant's opaque id, and until when it waits."""

    url: str = Field(max_length=8192)
    grant: str = Field(max_length=128)
    state: str = Field(max_length=512)
    until: datetime


class LegacyInputRecord(_Model):
    """A 2025-11-25 input request relayed from a ``tasks/result`` stream: the server's request id, and whether
    our answer reached the server (an answer still owed is delivered by the next relay attempt)."""

    rpc_id: Any
    delivered: bool = False


class MachineState(_Model):
    """Everything ``McpTaskWorkflow`` knows, in one model: what the ``status()`` query shows and the updates'
    validators check. Mutated only by the workflow (deterministically)."""

    phase: Phase = Phase.SUBMITTING
    #: Set when the request did not validate: the task ends ``rejected`` with this text.
    invalid_request: str | None = None
    profile: ServerProfile | None = None
    session: SessionRef | None = None
    #: Task queue of the worker process that owns a stdio task (every later activity runs there).
    owner_queue: str | None = None
    #: The server's view of the task, as of the last poll (``tasks/get``).
    task_state: TaskState | None = None
    attempts: list[OperationAttempt] = Field(default_factory=list)
    pending: dict[str, PendingInput] = Field(default_factory=dict)
    answers: dict[str, dict[str, Any]] = Field(default_factory=dict)
    answered_keys: list[str] = Field(default_factory=list)
    legacy_inputs: dict[str, LegacyInputRecord] = Field(default_factory=dict)
    #: What became of a question asked on a plain tools/call's stream that nobody answered (shown in the outcome).
    call_input_note: str | None = None
    #: Why the task is being cancelled (an update, workflow cancellation, the deadline, an input timeout).
    cancel_reason: str | None = None
    #: The workflow itself was cancelled through Temporal (it then ends as Canceled, not Failed).
    cancel_requested: bool = False
    approved: bool = False
    output_schema: dict[str, Any] | None = None
    outcome: McpTaskOutcome | None = None
    #: The ``McpTaskStatus`` last upserted (each upsert is a history event: only changes are written).
    shown_status: str | None = None
    ledger: Ledger
    #: A notification's status that woke the wait and was not read yet; the wakes acted on (``status#round``).
    wake: str | None = None
    wakes: list[str] = Field(default_factory=list)
    #: How the pending wake was learned (``TaskNotified.via``): None, a notification; ``list``, a tasks/list read;
    #: ``poll``, the worker's own read of an idle wait's task.
    wake_via: str | None = None
    delivered_by: DeliveredBy | None = None
    #: The consent waited for (AWAITING_AUTHORIZATION), the answers handed by ``mcp_task_consent`` not checked yet,
    #: a nudge to look again (a login), and how many consents this task asked.
    authorization: AuthorizationWait | None = None
    consent_refs: list[str] = Field(default_factory=list)
    consent_nudged: bool = False
    consents: int = 0
