"""Inputs and outputs of the MCP activities, and the server configuration they resolve from.

Pure pydantic: the workflow imports these through the sandbox. Nothing here holds a secret: header and
environment values are references to the worker's environment variables.
"""

from __future__ import annotations

import hashlib
from typing import Any, Literal

from pydantic import Field, StrictBool, field_validator

from mcp_temporal_tasks.protocol.limits import cap_text
from mcp_temporal_tasks.protocol.tasks import (
    Endpoint,
    Era,
    InputRequest,
    OAuthClient,
    RpcErrorInfo,
    SessionRef,
    StartResult,
    TaskState,
    TaskStatus,
    ToolInfo,
)
from mcp_temporal_tasks.protocol.tasks import StrictModel as _Model

ReplayName = Literal["never", "if_idempotent", "always", "with_approval"]


class PollSchedule(_Model):
    """How often a waiting task is polled, by its age (the cost of waiting).

    During a task's first ``after_s`` the server's ``pollInterval`` is used as is; after that the gap
    between two polls grows to ``age_fraction`` of the task's age (5 %: a task that ends after 40 minutes
    is seen within 2), at most ``max_interval_s``. Never shorter than the server's ``pollInterval``.
    ``age_fraction = 0`` polls at ``pollInterval`` for a task's whole life.
    """

    after_s: float = Field(60.0, ge=0)
    age_fraction: float = Field(0.05, ge=0, le=1)
    max_interval_s: float = Field(600.0, gt=0, le=24 * 3600)


class ToolPolicy(_Model):
    """Trusted, per-tool facts from configuration. Booleans are booleans (``idempotent = "yes"`` is refused, not
    taken for true)."""

    idempotent: StrictBool | None = None
    replay: ReplayName | None = None
    max_replays: int | None = Field(None, ge=0, le=10)
    #: Pinned result contract: ``structuredContent`` must match this schema.
    output_schema: dict[str, Any] | None = None
    #: Overrides the server's ``polling`` for this tool.
    polling: PollSchedule | None = None
    #: How long one synchronous ``tools/call`` of this tool may run (a tool without task support, held open
    #: in a heartbeating activity); default: the request's ``timeouts.submit_s`` (300 s).
    max_call_s: float | None = Field(None, gt=0, le=7 * 24 * 3600)


JobState = Literal["working", "completed", "failed", "cancelled"]


class JobBinding(ToolPolicy):
    """Tools of a server that does not speak MCP tasks, bound into one durable job (``[servers.NAME.jobs.JOB]``).

    ``submit`` starts the work (the one step that is not safe to repeat: gated like any ``tools/call``); its
    reply names the job by ``job_id`` (a JSON pointer into ``structuredContent``) or ``job_id_pattern`` (a
    regular expression whose first group is taken from the text content). ``status`` reads the job; ``state``
    points at its state in the reply, which ``states`` maps to a task status (a state not listed there is a
    reply that does not match the binding: ``decode_failed``). ``result`` reads the payload of a completed
    job (without it, the last status reply is the result); ``cancel`` stops it. Argument templates substitute
    ``"{job_id}"`` in string values. Status and result reads are retrievals: retried, never a replay.
    """

    submit: str = Field(min_length=1, max_length=256)
    job_id: str = "/jobId"
    job_id_pattern: str | None = Field(None, max_length=1024)
    status: str = Field(min_length=1, max_length=256)
    status_arguments: dict[str, Any] = Field(default_factory=lambda: {"jobId": "{job_id}"})
    state: str = "/state"
    states: dict[str, JobState] = Field(min_length=1)
    message: str | None = "/message"
    error: str | None = "/error"
    result: str | None = Field(None, min_length=1, max_length=256)
    result_arguments: dict[str, Any] = Field(default_factory=lambda: {"jobId": "{job_id}"})
    cancel: str | None = Field(None, min_length=1, max_length=256)
    cancel_arguments: dict[str, Any] = Field(default_factory=lambda: {"jobId": "{job_id}"})
    poll_interval_s: float = Field(5.0, gt=0, le=3600)

    def model_post_init(self, _ctx: Any) -> None:
        import re

        for name in ("job_id", "state", "message", "error"):
            value = getattr(self, name)
            if value is not None and value != "" and not value.startswith("/"):
                raise ValueError(f"{name} must be a JSON pointer starting with '/', got {value!r}")
        if self.job_id_pattern is not None:
            try:
                if re.compile(self.job_id_pattern).groups < 1:
                    raise ValueError(f"job_id_pattern {self.job_id_pattern!r} needs one capturing group")
            except re.error as exc:
                raise ValueError(f"job_id_pattern {self.job_id_pattern!r}: {exc}") from None
        if "completed" not in self.states.values():
            raise ValueError("states must map at least one server state to 'completed'")


#: The longest ``[servers.NAME] subjects`` pattern.
MAX_SUBJECTS_PATTERN = 500


class ServerConfig(_Model):
    """One entry of the worker's server registry."""

    url: str | None = None
    command: list[str] | None = None
    cwd: str | None = None
    env: dict[str, str] = Field(default_factory=dict, description="child env var -> worker env var name")
    headers: dict[str, str] = Field(default_factory=dict, description="header -> worker env var name")
    auth: OAuthClient | None = Field(None, description="OAuth client credentials, by reference")
    principal: str | None = None
    #: The subjects tasks may act for on this server (a regular expression a task's principal must match in full):
    #: a caller is trusted to name the subject, this says which subjects exist here at all.
    subjects: str | None = Field(None, min_length=1, max_length=MAX_SUBJECTS_PATTERN)
    era: Era | None = None
    trust_annotations: StrictBool = False
    tools: dict[str, ToolPolicy] = Field(default_factory=dict)
    polling: PollSchedule = Field(default_factory=PollSchedule)
    jobs: dict[str, JobBinding] = Field(default_factory=dict)

    @field_validator("subjects")
    @classmethod
    def _subjects_pattern(cls, v: str | None) -> str | None:
        import re

        if v is not None:
            try:
                re.compile(v)
            except re.error as exc:
                raise ValueError(f"{v!r} is not a regular expression: {exc}") from None
        return v

    def subject_refusal(self, principal: str | None) -> str | None:
        """Why a task for ``principal`` must not run on this server (its ``subjects`` do not include it), else None."""
        import re

        if self.subjects is None:
            return None
        if principal is None:
            return "the task names no subject, and this server's tasks act for one (its subjects are configured)"
        if re.fullmatch(self.subjects, principal) is None:
            return f"subject {cap_text(principal, 100)!r} is not one of this server's subjects ({self.subjects!r})"
        return None

    def endpoint(self) -> Endpoint:
        return Endpoint(
            url=self.url,
            command=self.command,
            cwd=self.cwd,
            env_refs=self.env,
            header_refs=self.headers,
            auth=self.auth,
        )


class ServerProfile(_Model):
    """A resolved server for one call: where it is, who we are to it, and what we trust about the tool."""

    name: str
    endpoint: Endpoint
    identity: str
    principal: str | None = None
    era: Era | None = None
    trust_annotations: bool = False
    policy: ToolPolicy = Field(default_factory=ToolPolicy)
    polling: PollSchedule = Field(default_factory=PollSchedule)
    #: Set when the requested "tool" is a job bound in configuration.
    job: JobBinding | None = None


class ResolveInput(_Model):
    server: str | Endpoint
    tool: str
    principal: str | None = None
    era: Era | None = None


class DecodedPayload(_Model):
    """A retrieved payload after decoding against the contract."""

    result: dict[str, Any] | None = None
    result_ref: dict[str, Any] | None = None
    error: RpcErrorInfo | None = None
    empty: bool = False
    decode_error: str | None = None
    raw: Any = None


class StartCallInput(_Model):
    profile: ServerProfile
    tool: str
    arguments: dict[str, Any]
    ttl_ms: int | None = None
    input_responses: dict[str, Any] | None = None
    request_state: str | None = None
    #: How long the reply to tools/call may take (a synchronous tool runs that long); None: the transport's.
    call_timeout_s: float | None = None
    #: How long an ``elicitation/create`` on the call's own stream waits for the workflow's answer
    #: (``decisions.call_input_bound_s``); None (a workflow from before): answered ``decline`` at once.
    input_wait_s: float | None = None
    #: The answer when nobody gave one within ``input_wait_s``: ``decline`` or ``cancel``.
    input_timeout_action: str = "decline"
    #: How long a subject's consent asked by this call stays open for the task that waits for it (``consent-wait``);
    #: None (a workflow from before): the store's own bound.
    consent_wait_s: float | None = None


class StartCallOutput(_Model):
    start: StartResult
    tool: ToolInfo | None = None
    #: Set when the server answered synchronously.
    payload: DecodedPayload | None = None
    #: Task queue that must run every later activity of this task (stdio: the owning process).
    owner_queue: str | None = None
    sdk_version: str
    #: The reply to tools/call was lost and the task was found with tasks/list instead (why, in words).
    reconciled: str | None = None


class AwaitInput(_Model):
    session: SessionRef
    task_id: str
    principal: str | None = None
    poll_floor_s: float = 0.1
    poll_ceiling_s: float = 30.0
    output_schema: dict[str, Any] | None = None
    #: Input keys already answered: their reappearance is ignored (servers acknowledge lazily); their count is the
    #: wait's input round (a wake-up per status and round).
    answered_keys: list[str] = Field(default_factory=list)
    #: How long the server may stay unreachable (refused, reset, garbled, 5xx) before the wait gives up.
    unreachable_s: float = 600.0
    schedule: PollSchedule = Field(default_factory=PollSchedule)
    job: JobBinding | None = None
    #: Return (``long_wait``) once the working task is this old, so the workflow can wait on with a longer
    #: heartbeat timeout (fewer heartbeats). None: wait to the end.
    return_after_age_s: float | None = None
    #: When tools/call was sent (epoch seconds): the task's age when the server gives no ``createdAt``.
    submitted_at: float | None = None
    #: Return (``idle``) as soon as the next poll is at least this far away, so the workflow can wait for it
    #: without an activity running (``poll_task``). None: wait here to the end.
    hand_over_gap_s: float | None = Field(None, gt=0)
    #: ``poll_task``: no poll before this (epoch seconds): the gap the wait that handed over had scheduled.
    first_poll_at: float | None = None
    #: How long a subject's consent asked by a failed read stays open for the task that waits for it
    #: (``consent-read``): such a read then ends the wait with ``consent`` instead of being retried. None (a workflow
    #: from before, or no subject): a read fault like any other.
    consent_wait_s: float | None = None


class AwaitOutput(_Model):
    state: TaskState | None = None
    #: ``tasks/get`` said -32602: the task is unknown, expired or purged.
    not_found: bool = False
    #: The session cannot be reached any more (stdio child died, HTTP session gone).
    unreachable: str | None = None
    #: No usable answer for ``unreachable_s``: the task may still exist, we cannot reach it.
    no_answer: str | None = None
    #: With ``no_answer``: the server's last answer (a JSON-RPC error, or the transport failure), for the outcome.
    last_error: RpcErrorInfo | None = None
    #: Filled when the task ended and its payload could be read in the same activity.
    payload: DecodedPayload | None = None
    #: Why the payload could not be read yet (the workflow then retries retrieval alone).
    retrieval_error: str | None = None
    #: The task is still working and older than ``return_after_age_s``.
    long_wait: bool = False
    #: The task is still working and its next poll is at least ``hand_over_gap_s`` away.
    idle: bool = False
    #: With ``idle``: when the schedule wants the next poll (epoch seconds).
    next_poll_at: float | None = None
    polls: int = 0
    #: A read needs the subject's consent (``ConsentRequired``'s ``consent``: URL, grant id, state; never a verifier
    #: or a code): the workflow waits for it, then reads the same task again (``consent-read``).
    consent: dict[str, Any] | None = None


class RetrieveInput(_Model):
    session: SessionRef
    job: JobBinding | None = None
    state: TaskState
    principal: str | None = None
    output_schema: dict[str, Any] | None = None


class RetrieveOutput(_Model):
    payload: DecodedPayload | None = None
    not_found: bool = False
    unreachable: str | None = None


class CancelInput(_Model):
    session: SessionRef
    job: JobBinding | None = None
    task_id: str
    principal: str | None = None


class CancelOutput(_Model):
    state: TaskState | None = None
    not_found: bool = False
    unreachable: str | None = None


class AnswerInput(_Model):
    session: SessionRef
    task_id: str
    principal: str | None = None
    responses: dict[str, Any]


class RelayInput(_Model):
    """Hold a legacy ``tasks/result`` open on the task's session and relay its input requests."""

    session: SessionRef
    state: TaskState
    principal: str | None = None
    output_schema: dict[str, Any] | None = None
    #: How long the stream may stay open (the human's answer time plus the task's).
    hold_s: float = 24 * 3600.0


class RelayOutput(_Model):
    state: TaskState | None = None
    payload: DecodedPayload | None = None
    not_found: bool = False
    unreachable: str | None = None
    #: The end was learned from a server's notification (the held ``tasks/result`` was then read anew).
    notified: bool = False


class ListToolsInput(_Model):
    server: str | Endpoint
    principal: str | None = None
    era: Era | None = None


class FetchOutcomeInput(_Model):
    workflow_id: str


class LegacyInputRequest(_Model):
    """A server→client request that arrived on a legacy ``tasks/result`` stream."""

    key: str
    rpc_id: Any
    method: str
    params: dict[str, Any] = Field(default_factory=dict)


__all__ = [
    "ListToolsInput",
    "FetchOutcomeInput",
    "RelayInput",
    "RelayOutput",
    "LegacyInputRequest",
    "InputRequest",
    "ServerConfig",
    "ToolPolicy",
    "ServerProfile",
    "ResolveInput",
    "DecodedPayload",
    "StartCallInput",
    "StartCallOutput",
    "AwaitInput",
    "AwaitOutput",
    "RetrieveInput",
    "RetrieveOutput",
    "CancelInput",
    "CancelOutput",
    "AnswerInput",
]


#: ``ApplicationError.type`` prefix of a task that did not complete (``McpTaskToolError``, ``McpTaskLost``...).
OUTCOME_FAILURE_PREFIX = "McpTask"
#: ``ApplicationError.type`` of a ``poll_task`` attempt that found the task still working (benign, retried after the
#: schedule's gap: the idle wait's every poll ends so).
STILL_WORKING = "TaskStillWorking"
#: ``ApplicationError.type`` of a wait handed to another worker because this one is shutting down (benign).
WORKER_SHUTDOWN = "WorkerShutdown"
#: The benign failures the activities end attempts with by design: expected, not crashes, so they carry no stack
#: trace (formatting one costs more worker CPU than the ``tasks/get`` the attempt made; see
#: ``McpTaskFailureConverter``).
EXPECTED_ATTEMPT_ENDS = frozenset({STILL_WORKING, WORKER_SHUTDOWN})
#: Memo key of the outcome of a task that ended Canceled (a cancellation carries no details).
OUTCOME_MEMO = "outcome"


def outcome_in_failure(err: BaseException | None) -> dict[str, Any] | None:
    """The outcome (JSON) a task's failure carries as its first detail, from ``err`` or any of its causes; None
    when there is none. The one reader of that shape: ``workflows.task_error.McpTaskError.outcome_of`` types it, the
    ``fetch_outcome`` activity passes it on."""
    from temporalio.exceptions import ApplicationError

    for _ in range(10):
        if err is None:
            return None
        if isinstance(err, ApplicationError) and (err.type or "").startswith(OUTCOME_FAILURE_PREFIX) and err.details:
            detail = err.details[0]
            if isinstance(detail, dict):
                return detail
            if hasattr(detail, "model_dump"):
                return detail.model_dump(mode="json")
        err = getattr(err, "cause", None) or err.__cause__
    return None


def failed_read_error(kind: str, code: Any, message: str, data: Any = None) -> RpcErrorInfo:
    """The server's last answer to a read that kept failing, as an outcome's ``error``: its JSON-RPC error as
    is, or ``-32000`` with the failure's kind when it gave none (a transport fault, a garbled reply). Built from a
    wire error in the activity, or from the failure's details in the workflow: the same rule for both."""
    if isinstance(code, int) and not isinstance(code, bool):
        return RpcErrorInfo(code=code, message=message, data=data)
    return RpcErrorInfo(code=-32000, message=f"{kind}: {message}"[:1024], data=data)


#: The workflow type of one MCP task, and the Keyword search attribute holding its task id (as
#: :func:`search_attribute_value` writes it): how a worker holding a session's notifications finds the workflow
#: of a task it was not told about (``activities/push/``). Defined here, below the workflow that sets them.
TASK_WORKFLOW_TYPE = "McpTaskWorkflow"
TASK_ID_SEARCH_ATTRIBUTE = "McpTaskId"
#: Temporal refuses a Keyword search attribute over 2,048 bytes (and terminates the workflow that upserts it).
MAX_SEARCH_ATTRIBUTE_BYTES = 256


def search_attribute_value(value: str) -> str:
    """``value`` as a Keyword search attribute: itself when short, else a stable digest (Temporal refuses
    values over 2,048 bytes by terminating the workflow)."""
    if len(value.encode("utf-8", "replace")) <= MAX_SEARCH_ATTRIBUTE_BYTES:
        return value
    return "sha256:" + hashlib.sha256(value.encode("utf-8", "replace")).hexdigest()


#: Signal from a worker that heard the server say a task changed (``activities/push/``); its handler only wakes
#: the wait, the read that follows decides (``McpTaskWorkflow``).
TASK_NOTIFIED_SIGNAL = "mcp_task_notified"


class TaskNotified(_Model):
    """What :data:`TASK_NOTIFIED_SIGNAL` carries: the task a server notified about, and the status it claimed."""

    task_id: str = Field(max_length=16 * 1024)
    status: TaskStatus
    #: How the worker learned it: None, a server's notification; ``list``, a ``tasks/list`` read (list_reader.py);
    #: ``poll``, the worker's own ``tasks/get`` of an idle wait's task (poller.py).
    via: Literal["list", "poll"] | None = None


#: Signal to a task that waits for a subject's consent (AWAITING_AUTHORIZATION): a callback accepted an answer and
#: kept it under ``ref`` (the code stays in the token store), or, with no ``ref``, a grant may have been given
#: (``mcp-tasks login SERVER --subject S``). Its handler only wakes the wait; the ``consent_check`` activity decides.
CONSENT_SIGNAL = "mcp_task_consent"
#: The memo key of the consent a task waits for (URL, grant id, until): the UI shows it with no worker running;
#: None once the wait is over.
AUTHORIZATION_MEMO = "mcp_task_authorization"


class ConsentAnswered(_Model):
    """What :data:`CONSENT_SIGNAL` carries: an answer's opaque id, or nothing (look again)."""

    ref: str | None = Field(None, max_length=128)


class ConsentCheckInput(_Model):
    """A waiting task's consent: its ``state`` (also in the URL the task shows), the grant's opaque id, and the
    answer a callback handed the task, if any."""

    state: str = Field(max_length=512)
    grant: str = Field(max_length=128)
    ref: str | None = Field(None, max_length=128)


class ConsentCheckOutput(_Model):
    """``ready``: the grant is there (exchanged now, or given meanwhile): send ``tools/call``. ``refused``: the consent
    ended without a grant (the authorization server refused it, the code was refused), in words. Neither: wait on."""

    ready: bool = False
    refused: str | None = None
