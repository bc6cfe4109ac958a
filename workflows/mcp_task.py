"""``McpTaskWorkflow``: one MCP task, one durable state machine.

Its phases and the moves between them (``models.TRANSITIONS``, checked on every move; a test keeps this copy equal):

    SUBMITTING        ─► SUBMITTING · WORKING · INPUT_REQUIRED · AWAITING_APPROVAL
                         REPLAYING · CANCELLING · DONE
    WORKING           ─► WORKING · INPUT_REQUIRED · RETRIEVING · AWAITING_APPROVAL
                         REPLAYING · CANCELLING · DONE
    INPUT_REQUIRED    ─► SUBMITTING · WORKING · AWAITING_APPROVAL · REPLAYING
                         CANCELLING · DONE
    RETRIEVING        ─► AWAITING_APPROVAL · REPLAYING · CANCELLING · DONE
    AWAITING_APPROVAL ─► REPLAYING · DONE
    REPLAYING         ─► SUBMITTING · DONE
    CANCELLING        ─► RETRIEVING · DONE
    DONE              ─► (end)

Every operation ends with an :class:`~.models.Ending` that names its :class:`~.models.Stage`; one pure function,
``decisions.replay_reason(stage, outcome, classification)``, says whether that ending may justify a new
``tools/call`` (gone at GONE, a lost reply at SUBMITTING, a retryable tool failure at SUBMITTING or PAYLOAD; never
anything else); only then is the replay policy asked (AWAITING_APPROVAL or REPLAYING, else DONE).

* **Submit** is the one dangerous step: ``tools/call`` runs with a single attempt. A failure that surely
  never reached the server is resent; anything else ends ``unknown_outcome`` unless the replay policy
  allows a new call.
* **Wait** is one heartbeating activity per wait (``await_task``) while polls are close together; once the next poll
  is ≥ 0.8 × the heartbeat timeout away, ``poll_task``: one attempt per poll, retried by Temporal at the gap, nothing
  running in between. O(1) history whatever the duration, either way.
  A dead worker is noticed by the heartbeat timeout and the next attempt resumes polling elsewhere.
* **Retrieve** is retried alone (never re-calling the tool), bounded by the task's TTL or the deadline.
* **Replay** is a new ``tools/call``, only through ``decisions.may_replay``, recorded in
  ``operation_attempts`` with its reason; a ``Retry-After`` hint becomes a durable timer.
* **Cancel** (workflow cancellation or the ``cancel`` update) sends ``tasks/cancel`` and then reads the
  task's true end: a task that had already finished keeps its real outcome.

Decision logic lives in :mod:`mcp_temporal_tasks.workflows.decisions` (plain functions, unit tested without Temporal).
"""

from __future__ import annotations

import asyncio
import builtins
from datetime import datetime, timedelta
from typing import Any, NoReturn

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributePair, TypedSearchAttributes
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError, TimeoutError, TimeoutType
from temporalio.workflow import ActivityConfig

with workflow.unsafe.imports_passed_through():
    import jsonschema
    from pydantic import ValidationError

    from mcp_temporal_tasks.activities.defs import McpActivityDefs as McpActivities  # stubs: names, no wire
    from mcp_temporal_tasks.activities.models import (
        OUTCOME_MEMO,
        TASK_NOTIFIED_SIGNAL,
        AnswerInput,
        AwaitInput,
        AwaitOutput,
        CancelInput,
        DecodedPayload,
        JobBinding,
        LegacyInputRequest,
        PollSchedule,
        RelayInput,
        RelayOutput,
        ResolveInput,
        RetrieveInput,
        StartCallInput,
        StartCallOutput,
        TaskNotified,
    )
    from mcp_temporal_tasks.activities.relay import INPUT_DELIVERED_SIGNAL, INPUT_REQUESTED_SIGNAL, RELAY_STATE_QUERY
    from mcp_temporal_tasks.activities.wire.contract import canonical_json, contract_of, digest
    from mcp_temporal_tasks.activities.wire.elicitation import with_defaults
    from mcp_temporal_tasks.activities.wire.models import LEGACY, RpcErrorInfo, TaskState, protocol_label
    from mcp_temporal_tasks.workflows import decisions
    from mcp_temporal_tasks.workflows.errors import McpTaskError, finished_details
    from mcp_temporal_tasks.workflows.failures import attempts_text, failure_info, last_read_failure
    from mcp_temporal_tasks.workflows.models import (
        SA_OUTCOME,
        SA_SERVER,
        SA_STATUS,
        SA_TASK_ID,
        SA_TOOL,
        TRANSITIONS,
        Classification,
        Ending,
        Ledger,
        LegacyInputRecord,
        MachineState,
        McpTaskOutcome,
        McpTaskRequest,
        OperationAttempt,
        Outcome,
        PendingInput,
        Phase,
        ReplayPolicy,
        RequestTooLarge,
        ResultRef,
        Stage,
        TaskView,
        check_request_size,
        search_attribute_value,
        validation_message,
    )
    from mcp_temporal_tasks.workflows.options import (
        IDLE_POLL,
        LONG_WAIT,
        MAX_RESEND_DELAY_S,
        RETRIEVE,
        SUBMIT,
        TASK_STEP,
        WAIT,
        read_budget,
    )


#: Guards the rule "a retrieval failure never leads to a replay": histories recorded before it replayed.
RETRIEVAL_NEVER_REPLAYS = "retrieval-failures-never-replay"
FAIL_UNLESS_COMPLETED = "fail-unless-completed"
#: ``McpTaskStatus`` says ``awaiting_approval`` while a replay waits for an operator, and a finished task whose
#: server status was not terminal is listed under its outcome: histories recorded before it replay unchanged.
SEARCHABLE_PHASES = "searchable-approval-and-outcome"
#: A wait on an old task is handed to a second activity with a longer heartbeat timeout (asked only then).
LONG_WAIT_HEARTBEAT = "long-wait-heartbeat"
#: Once a wait's next poll is far enough away, it goes on in ``poll_task`` (one attempt per poll, nothing running in
#: between) instead of a heartbeating activity. Asked only when a wait hands over that way.
IDLE_WAITS = "idle-waits-between-polls"
#: A 2025-11-25 failed task's payload that arrived as a JSON-RPC error reply to ``tasks/result`` cannot be told
#: from a read refused by the server or a gateway ("temporarily unavailable, try again"): it never justifies a
#: replay by itself. Asked only for such an ending classified retryable; histories from before keep replaying.
ERROR_REPLY_NEVER_REPLAYS = "error-reply-payload-never-replays"
#: A task cancelled through Temporal ends as Canceled (its outcome in the memo) instead of failing with
#: McpTaskCancelled: histories from before keep failing as they did.
CANCELLED_SHOWS_CANCELED = "cancelled-shows-canceled"
#: A server's task notification (signal ``mcp_task_notified``, from a worker's push hub: activities/push.py) wakes the
#: wait: the pending poll is dropped and the task read at once; the read decides. Asked in the signal's handler, only
#: for a notice that would wake the wait, so a task never notified has no marker; a history recorded by a worker from
#: before (which ignored the signal) replays with the wake ignored.
NOTIFIED_WAKES = "notifications-wake-waits"
#: A question the server asks on the stream of a plain ``tools/call`` (``elicitation/create``, relayed by start_call as
#: the relay's signal) moves the task to INPUT_REQUIRED, is answered with ``provide_input`` or declined after
#: ``decisions.call_input_bound_s`` (a timer), and the call goes on. Asked when such a question first arrives: a
#: history from before (whose start_call never relayed one) has none and replays unchanged.
CALL_INPUT = "plain-call-input"
#: Statuses a notification may wake a wait for (never ``working``).
#: A trusted server's ``readOnlyHint: true`` makes a tool idempotent without ``idempotentHint`` (as the agent tools
#: always counted it: ``decisions.annotation_idempotent``). Asked only for such a tool; histories from before replay.
READ_ONLY_IS_IDEMPOTENT = "read-only-hint-is-idempotent"
_WAKE_STATUSES = ("input_required", "completed", "failed", "cancelled")
#: Wakes one task may act on: one per status and input round, whatever a server repeats.
_MAX_WAKES = 16
#: Server task statuses that already say how a task ended (kept as ``McpTaskStatus`` at the end).
_TERMINAL_STATUSES = ("completed", "failed", "cancelled")
LEDGER_CONTRACT_CAP = 16 * 1024


class _Woken:
    """What a wait returns when a notification cut it short (its activity cancelled): read the task now."""


_WOKEN = _Woken()


class _Ended(Exception):
    """Internal: one operation reached its :class:`~mcp_temporal_tasks.workflows.models.Ending`.

    Raised from deep inside a step (a wait, a retrieval, a cancel) and caught once, in ``_run``.
    """

    def __init__(self, ending: Ending) -> None:
        super().__init__(ending.outcome.value)
        self.ending = ending


def _short(task_id: str, n: int = 64) -> str:
    """A task id as labels show it (activity summaries): bounded, whatever the server sent."""
    return task_id if len(task_id) <= n else f"{task_id[:n]}…"


def _explain(exc: ValidationError | RequestTooLarge) -> str:
    if isinstance(exc, RequestTooLarge):
        return str(exc)
    parts = []
    for err in exc.errors()[:10]:
        loc = ".".join(str(p) for p in err["loc"]) or "<input>"
        parts.append(f"{loc}: {'unknown field' if err['type'] == 'extra_forbidden' else validation_message(err)}")
    return "; ".join(parts)


def _bug(what: str) -> RuntimeError:
    """An invariant of our own code broken (never a value a server sent: those end the task with an outcome). It
    fails the workflow *task*, which Temporal retries until fixed code is deployed; the CLI shows it as
    ``workflow task failing``."""
    return RuntimeError(f"McpTaskWorkflow bug: {what}")


def _unusable_note(task: TaskState | None) -> str:
    """What the server's task record held that could not be used as sent (clamped or ignored where it was parsed)."""
    if task is None or not task.unusable:
        return ""
    return " (its task record had unusable " + ", ".join(f"{k}={v}" for k, v in sorted(task.unusable.items())) + ")"


def _placeholder_request(raw: Any) -> McpTaskRequest:
    """A valid stand-in for a request that did not validate, so the rejection has a ledger and labels."""
    raw = raw if isinstance(raw, dict) else {}
    tool = raw.get("tool") if isinstance(raw.get("tool"), str) and raw.get("tool") else "?"
    server = raw.get("server") if isinstance(raw.get("server"), str) and raw.get("server", "").strip() else "?"
    # Labels only: whatever made the request invalid (a lone surrogate too) must not make the stand-in invalid.
    tool, server = (v[:256].encode("utf-8", "replace").decode("utf-8") for v in (tool, server))
    return McpTaskRequest(server=server, tool=tool)






@workflow.defn(name="McpTaskWorkflow")
class McpTaskWorkflow:
    @workflow.init
    def __init__(self, request: Any) -> None:
        # The input is decoded here, not by the data converter: a request that does not validate (a typo'd
        # field from another SDK, arguments too large) must end the task as `rejected`, not fail its
        # workflow task forever.
        invalid: str | None = None
        try:
            request = request if isinstance(request, McpTaskRequest) else McpTaskRequest.model_validate(request)
            check_request_size(request.arguments)
        except (ValidationError, RequestTooLarge) as exc:
            invalid = _explain(exc)
            request = _placeholder_request(request)
        self.req = request
        #: Everything the machine knows, in one typed model (queries read it; nothing else holds state).
        self.m = MachineState(invalid_request=invalid, ledger=Ledger(
            server=request.server_label(), tool=request.tool, principal=request.principal,
            request_digest=digest(request.arguments), created_at=workflow.now(),
            idempotency={"key": request.idempotency_key, "replay": (request.replay or ReplayPolicy.NEVER).value,
                         "max_replays": request.max_replays, "idempotent": request.idempotent},
        ))

    # --- messages --------------------------------------------------------------------------------

    @workflow.query
    def status(self) -> TaskView:
        return TaskView(
            workflow_id=workflow.info().workflow_id, phase=self.m.phase, tool=self.req.tool,
            server=self.m.ledger.server, task_id=self.m.task_state.task_id if self.m.task_state else None,
            task_status=self.m.task_state.status if self.m.task_state else None,
            status_message=self.m.task_state.status_message if self.m.task_state else None,
            era=self.m.task_state.era if self.m.task_state else self.m.ledger.era, pending_inputs=list(self.m.pending.values()),
            protocol_version=self.m.ledger.protocol_version,
            operation_attempts=self.m.attempts, outcome=self.m.outcome.outcome if self.m.outcome else None,
            ledger=self.m.ledger, delivered_by=self.m.delivered_by,
        )

    @workflow.update
    def cancel(self, reason: str = "cancelled by request") -> str:
        self.m.cancel_reason = reason
        return self.m.phase.value

    @cancel.validator
    def _validate_cancel(self, reason: str = "cancelled by request") -> None:
        if self.m.phase == Phase.DONE:
            raise ValueError("the task has already ended")

    @workflow.update
    def approve_replay(self) -> int:
        self.m.approved = True
        return len(self.m.attempts) + 1

    @approve_replay.validator
    def _validate_approve(self) -> None:
        if self.m.phase != Phase.AWAITING_APPROVAL:
            raise ValueError(f"nothing to approve: the task is {self.m.phase.value}, not AWAITING_APPROVAL")

    @workflow.update
    def provide_input(self, responses: dict[str, dict[str, Any]]) -> list[str]:
        # SEP-1034: an accept that omits a property with a default in the form gets the default.
        self.m.answers.update({k: with_defaults(v, self.m.pending[k].requested_schema) if k in self.m.pending else v
                               for k, v in responses.items()})
        return sorted(k for k in self.m.pending if k not in self.m.answers)

    @workflow.signal(name=INPUT_REQUESTED_SIGNAL)
    def _legacy_input_requested(self, req: LegacyInputRequest) -> None:
        # A re-sent request (same content) keeps its first record and, if answered, its answer.
        self.m.legacy_inputs[req.key] = LegacyInputRecord(rpc_id=req.rpc_id)
        if req.key not in self.m.answers:
            self.m.pending[req.key] = PendingInput.from_params(req.key, req.method, req.params)

    @workflow.signal(name=INPUT_DELIVERED_SIGNAL)
    def _legacy_input_delivered(self, key: str) -> None:
        if key in self.m.legacy_inputs:
            self.m.legacy_inputs[key].delivered = True

    @workflow.signal(name=TASK_NOTIFIED_SIGNAL)
    def _task_notified(self, notice: Any) -> None:
        """A worker heard the server say this task changed. It only wakes the wait (the read that follows decides),
        and only for the task being waited on, in WORKING, for a status that can end a wait, once per status and
        input round: a repeated, late or lying notification changes nothing else. Decoded here, not by the data
        converter: a malformed signal is ignored, never a failed workflow task."""
        try:
            n = notice if isinstance(notice, TaskNotified) else TaskNotified.model_validate(notice)
        except ValidationError:
            return
        task = self.m.task_state
        if task is None or n.task_id != task.task_id or self.m.phase != Phase.WORKING or n.status not in _WAKE_STATUSES:
            return
        key = f"{n.status}#{len(self.m.answered_keys)}"
        if key in self.m.wakes or len(self.m.wakes) >= _MAX_WAKES or not workflow.patched(NOTIFIED_WAKES):
            return
        self.m.wakes.append(key)
        self.m.wake, self.m.wake_via = n.status, n.via

    @workflow.query(name=RELAY_STATE_QUERY)
    def _legacy_relay_state(self) -> dict[str, dict[str, Any]]:
        return {k: {**v.model_dump(mode="json"), "answer": self.m.answers.get(k)} for k, v in self.m.legacy_inputs.items()}

    @provide_input.validator
    def _validate_input(self, responses: dict[str, dict[str, Any]]) -> None:
        if self.m.phase != Phase.INPUT_REQUIRED or not self.m.pending:
            raise ValueError("no input is outstanding")
        if not responses:
            raise ValueError("no responses given")
        for key, response in responses.items():
            pending = self.m.pending.get(key)
            if pending is None:
                raise ValueError(f"input {key!r} is not outstanding (outstanding: {sorted(self.m.pending)})")
            validate_input_response(pending, response)

    # --- the machine ---------------------------------------------------------------------------

    @workflow.run
    async def run(self, request: Any) -> McpTaskOutcome:
        """The outcome of a ``completed`` task; every other outcome fails the workflow with
        :class:`~mcp_temporal_tasks.workflows.errors.McpTaskError` carrying the outcome (see that module)."""
        outcome = await self._run()
        # Operators must tell a task that did not complete from one that did (UI status, "Failed" filter, SDK
        # metrics). The patch keeps histories that completed with such an outcome replaying; it is asked only
        # for those outcomes, so a completed task's history does not grow.
        if outcome.outcome != Outcome.COMPLETED and workflow.patched(FAIL_UNLESS_COMPLETED):
            if (outcome.outcome == Outcome.CANCELLED and self.m.cancel_requested
                    and workflow.patched(CANCELLED_SHOWS_CANCELED)):
                # Cancelled on purpose (mcp-tasks cancel, handle.cancel(), a cancelled parent): Temporal shows it
                # as Canceled. A cancellation carries no details, so the outcome goes to the memo, where
                # outcome_of and the fetch_outcome activity read it.
                workflow.upsert_memo({OUTCOME_MEMO: outcome.model_dump(mode="json")})
                raise CancelledError(f"MCP task {self.req.tool} on {outcome.ledger.server} cancelled: "
                                     f"{outcome.reason or 'by request'}")
            raise McpTaskError(outcome)
        return outcome

    async def _run(self) -> McpTaskOutcome:
        request = self.req
        if self.m.invalid_request is not None:
            return self._finish(Ending(outcome=Outcome.REJECTED, stage=Stage.REQUEST, error=RpcErrorInfo(
                code=-32602, message=f"invalid McpTaskRequest: {self.m.invalid_request}"),
                classification=Classification.INPUT_CORRECTABLE, reason=f"invalid request: {self.m.invalid_request}"))
        try:
            self.m.profile = await workflow.execute_local_activity_method(
                McpActivities.resolve, ResolveInput(server=request.server, tool=request.tool,
                                                    principal=request.principal, era=request.era),
                start_to_close_timeout=timedelta(seconds=10), retry_policy=RetryPolicy(maximum_attempts=3),
                summary="resolve server configuration")
        except (asyncio.CancelledError, ActivityError, ApplicationError) as err:
            # Cancelled before anything was sent (the cancel reaches the local activity): a cancelled outcome,
            # readable from the memo, instead of a bare cancel or a "rejected". Histories from before: unchanged.
            cancelled = isinstance(err, asyncio.CancelledError) or isinstance(err.cause, CancelledError)
            if cancelled and workflow.patched(CANCELLED_SHOWS_CANCELED):
                self._cancelled_by_temporal()
                return self._finish(Ending(outcome=Outcome.CANCELLED, stage=Stage.REQUEST,
                                           reason=f"{self.m.cancel_reason} before tools/call was sent"))
            if isinstance(err, asyncio.CancelledError):
                raise
            kind, _, info = failure_info(err)
            return self._finish(Ending(outcome=Outcome.REJECTED, stage=Stage.REQUEST, error=RpcErrorInfo(
                code=-32602, message=info.get("message") or str(err), data={"kind": kind}),
                classification=Classification.INPUT_CORRECTABLE, reason=kind))
        self._apply_profile()
        reason = "initial"
        while True:
            try:
                await self._operation(reason)
            except _Ended as end:
                ending = end.ending
            except asyncio.CancelledError:
                # Cancelled mid-step (retrieving, answering input): settle the task, keep its true end.
                ending = await self._settle_after_cancel()
            replay = decisions.replay_reason(ending.stage, ending.outcome, ending.classification)
            if replay is None or self.m.cancel_reason is not None:
                return self._finish(ending)
            decision = decisions.may_replay(self._rule(), replays_used=len(self.m.attempts) - 1)
            if decision == "stop":
                return self._finish(ending)
            if decision == "await_approval":
                self._enter(Phase.AWAITING_APPROVAL)
                if not await self._interruptible_wait(lambda: self.m.approved):
                    return self._finish(ending.but(reason=f"replay not approved: {self.m.cancel_reason}"))
                self.m.approved = False
            self._enter(Phase.REPLAYING)
            delay = ending.retry_after_s or 0.0
            if self.req.deadline and workflow.now() + timedelta(seconds=delay) >= self.req.deadline:
                return self._finish(ending.but(reason="no replay: Retry-After reaches past the deadline"))
            # A durable timer that a cancel interrupts: the last attempt's outcome then stands.
            if delay and not await self._interruptible_sleep(delay):
                return self._finish(ending.but(reason=f"replay cancelled: {self.m.cancel_reason}"))
            reason = replay

    async def _settle_after_cancel(self) -> Ending:
        self._cancelled_by_temporal()
        if self.m.task_state is None or self.m.session is None:
            return Ending(outcome=Outcome.CANCELLED, stage=Stage.CANCELLING, reason=self.m.cancel_reason)
        try:
            await self._cancel_and_settle(self.m.task_state)
        except _Ended as end:
            return end.ending

    def _cancelled_by_temporal(self) -> None:
        """The workflow itself was cancelled (not the ``cancel`` update): remembered, and shown as Canceled."""
        self.m.cancel_requested = True
        self.m.cancel_reason = self.m.cancel_reason or "workflow cancelled"

    def _rule(self) -> decisions.ReplayRule:
        """Replay policy, idempotency and budget: the request, then configuration, then annotations of a trusted
        server (``decisions.replay_rule``, the one precedence)."""
        configured = self.m.profile.policy if self.m.profile else None
        annotated = self.m.ledger.idempotency.get("annotation_idempotent")
        return decisions.replay_rule(
            requested_policy=self.req.replay, configured_policy=configured.replay if configured else None,
            requested_idempotent=self.req.idempotent, configured_idempotent=configured.idempotent if configured else None,
            annotated_idempotent=bool(annotated) if annotated is not None else None,
            requested_max=self.req.max_replays, configured_max=configured.max_replays if configured else None)

    def _max_replays(self) -> int:
        return self._rule().max_replays

    def _policy(self) -> ReplayPolicy:
        return self._rule().policy

    def _idempotent(self) -> bool:
        return self._rule().idempotent

    def _apply_profile(self) -> None:
        if self.m.profile is None:
            raise _bug("_apply_profile before resolve")
        self.m.output_schema = self.m.profile.policy.output_schema
        self.m.ledger.server = self.m.profile.name
        self.m.ledger.server_identity = self.m.profile.identity
        self.m.ledger.principal = self.m.profile.principal
        self.m.ledger.idempotency.update(replay=self._policy().value, idempotent=self._idempotent(),
                                       max_replays=self._max_replays())
        self._set_contract()
        # Upsert only what the starter did not already set (each upsert is a history event and a
        # visibility write); the ledger goes to the memo once, at the end (live: the status() query).
        current = workflow.info().typed_search_attributes
        wanted = {SA_SERVER: search_attribute_value(self.m.profile.name), SA_TOOL: search_attribute_value(self.req.tool),
                  SA_STATUS: "submitting"}
        changed = [key.value_set(value) for key, value in wanted.items() if current.get(key) != value]
        if changed:
            workflow.upsert_search_attributes(changed)
        self.m.shown_status = "submitting"

    def _set_contract(self) -> None:
        contract = contract_of(self.m.output_schema)
        self.m.ledger.result_contract_digest = digest(contract)
        # The ledger is the memo and part of every outcome: a server's huge outputSchema stays out of it.
        if len(canonical_json(contract)) > LEDGER_CONTRACT_CAP:
            contract = {**contract, "outputSchema": f"[omitted: over {LEDGER_CONTRACT_CAP} bytes; see the digest]"}
        self.m.ledger.result_contract = contract

    def _move(self, phase: Phase) -> None:
        """The one place the phase changes: a move :data:`~.models.TRANSITIONS` does not allow is a bug, and fails
        the workflow *task* (retried until fixed code is deployed), never the task's outcome."""
        if phase not in TRANSITIONS[self.m.phase]:
            raise RuntimeError(f"McpTaskWorkflow: no transition {self.m.phase.value} → {phase.value}")
        self.m.phase = phase

    def _enter(self, phase: Phase, status: str | None = None, *extra: Any) -> None:
        """Move to ``phase``; upsert search attributes only when they change (each upsert is an event)."""
        self._move(phase)
        shown = status or (self.m.task_state.status if self.m.task_state else phase.value.lower())
        if phase == Phase.AWAITING_APPROVAL and shown != "awaiting_approval" and workflow.patched(SEARCHABLE_PHASES):
            shown = "awaiting_approval"  # findable: `McpTaskStatus = 'awaiting_approval'`
        updates = list(extra)
        if shown != self.m.shown_status:
            updates.append(SA_STATUS.value_set(shown))
            self.m.shown_status = shown
        if updates:
            workflow.upsert_search_attributes(updates)
        msg = self.m.task_state.status_message if self.m.task_state and self.m.task_state.status_message else ""
        workflow.set_current_details(f"**{self.req.tool}** — {phase.value}" + (f": {msg}" if msg else ""))

    # --- one tools/call and everything that follows it ---------------------------------------------

    async def _operation(self, reason: str) -> NoReturn:
        """Run one ``tools/call`` to its end; always raises :class:`_Ended`."""
        start = await self._submit(reason)
        attempt = self.m.attempts[-1]
        if start.payload is not None:  # the server ran the tool synchronously
            self.m.task_state = None
            end = self._ended_from_payload("completed", start.payload, Stage.SUBMITTING)
            if self.m.call_input_note:  # (None in every history from before)
                end.ending.reason = "; ".join(filter(None, [end.ending.reason, self.m.call_input_note]))
            raise end
        if start.start.input_requests is not None:
            raise _Ended(Ending(outcome=Outcome.REJECTED, stage=Stage.SUBMITTING, error=RpcErrorInfo(
                code=-32601, message="server asked for input on tools/call itself; answer through a task"),
                classification=Classification.PERMANENT))
        task = start.start.task
        if task is None:
            # The server's reply to tools/call was neither a task, nor a result, nor an input request (the wire
            # refuses such a reply; this guards what a history may hold): the call reached the server and gave
            # nothing to follow, as if its reply had been lost. An outcome, never a failing workflow task.
            attempt.ended = Outcome.UNKNOWN_OUTCOME.value
            raise _Ended(Ending(outcome=Outcome.UNKNOWN_OUTCOME, stage=Stage.SUBMITTING, reason=(
                "tools/call was answered with neither a task, a result nor an input request")))
        self.m.session = start.start.session
        self.m.owner_queue = start.owner_queue
        self.m.task_state = task
        attempt.task_id = task.task_id
        self.m.ledger.task_ids.append(task.task_id)
        attempt.reconciled = start.reconciled
        self._enter(Phase.WORKING, None, SA_TASK_ID.value_set(search_attribute_value(task.task_id)))
        try:
            await self._follow(task)
        except _Ended as end:
            attempt.ended = end.ending.outcome.value
            raise

    async def _submit(self, reason: str) -> StartCallOutput:
        if self.m.profile is None:
            raise _bug("_submit before resolve")
        self._enter(Phase.SUBMITTING, "submitting")
        resends = 0
        while True:
            # operation_attempts[].at is when tools/call was sent, for a task and a synchronous call alike.
            sent_at = workflow.now()
            handle = workflow.start_activity_method(
                McpActivities.start_call,
                StartCallInput(profile=self.m.profile, tool=self.req.tool, arguments=self.req.arguments,
                               ttl_ms=int(self.req.ttl_s * 1000) if self.req.ttl_s else None,
                               # Only a tool with its own bound waits longer than the transport's read timeout.
                               call_timeout_s=self._call_bound_s() if self._job() or self._own_bound() else None,
                               input_wait_s=self._call_input_bound_s(),
                               input_timeout_action="cancel" if self.req.on_input_timeout == "cancel" else "decline"),
                **self._config(SUBMIT, start_to_close_timeout=timedelta(seconds=self._call_bound_s()),
                               summary=f"tools/call {self.req.tool} ({reason})", pinned=False))
            try:
                out = await self._await_call(handle)
            except ActivityError as err:
                kind, reached, info = failure_info(err)
                verdict = decisions.after_submit_failure(kind, may_have_reached_server=reached, resends=resends)
                retry_after = decisions.bounded_delay_s(info.get("retry_after_s")) or 0.0
                if verdict == "resend" and retry_after <= MAX_RESEND_DELAY_S:
                    resends += 1
                    # tools/call never reached the tool: resending is safe, after the server's Retry-After.
                    delay = max(2.0 ** resends, retry_after)
                    if not (self.req.deadline and workflow.now() + timedelta(seconds=delay) >= self.req.deadline):
                        await workflow.sleep(timedelta(seconds=delay),
                                             summary="rate limited; resend" if retry_after else "server unreachable; resend")
                        continue
                    verdict = "unreachable"
                elif verdict == "resend":
                    verdict = "unreachable"
                error = RpcErrorInfo(code=info.get("code") or -32000, message=info.get("message") or str(err.cause),
                                     data={"kind": kind})
                if verdict == "rejected":
                    # operation_attempts holds the calls whose bytes may have left: a refusal before tools/call was
                    # sent (initialize, auth, discovery, tools/list, the input schema) is not one, so the same
                    # request may run again. The commands are the same either way (the workflow fails with the
                    # outcome at once), so histories from before replay unchanged.
                    if reached:
                        self._record(reason, sent_at, ended=Outcome.REJECTED.value)
                    cls, _ = decisions.classify_failure(None, error)
                    cls = decisions.REFUSAL_CLASSES.get(kind, cls)
                    raise _Ended(Ending(outcome=Outcome.REJECTED, stage=Stage.SUBMITTING, error=error, classification=cls,
                                        reason=None if reached else f"refused before tools/call was sent ({kind})"))
                if verdict == "unreachable":
                    raise _Ended(Ending(outcome=Outcome.REJECTED, stage=Stage.SUBMITTING, error=error,
                                 classification=Classification.RETRYABLE,
                                 retry_after_s=retry_after or None,
                                 reason="server unreachable; tools/call was never sent"))
                self._record(reason, sent_at, ended=Outcome.UNKNOWN_OUTCOME.value)
                raise _Ended(Ending(outcome=Outcome.UNKNOWN_OUTCOME, stage=Stage.SUBMITTING, error=error,
                             reason=f"tools/call may have reached the server but its reply was lost ({kind})"))
            self._record(reason, sent_at)
            self.m.ledger.sdk_version = out.sdk_version
            self.m.ledger.era = out.start.era
            self.m.ledger.protocol_version = out.start.session.protocol_version
            if out.tool is not None:
                self._learn_tool(out)
            return out

    def _call_input_bound_s(self) -> float:
        return decisions.call_input_bound_s(self.req.input_timeout_s or self.req.timeouts.input_s, self._call_bound_s())

    async def _await_call(self, handle: Any) -> StartCallOutput:
        """``tools/call`` to its end (never abandoned, a cancel is remembered). A question the server asks on the call's
        own stream (``elicitation/create``, relayed by start_call as the relay's signal) is put to a person as a task's
        input is: INPUT_REQUIRED with the questions, answered with ``provide_input``, or declined (cancelled, with
        ``on_input_timeout = "cancel"`` or once the task is cancelled) after :meth:`_call_input_bound_s`."""
        while True:
            try:
                await workflow.wait_condition(lambda: handle.done() or bool(self._unanswered()))
            except asyncio.CancelledError:
                self._cancelled_by_temporal()
                continue
            if handle.done() or not workflow.patched(CALL_INPUT):
                return await self._uninterruptible(handle)
            bound = self._call_input_bound_s()
            self._enter(Phase.INPUT_REQUIRED, "input_required")
            answered = await self._interruptible_wait(lambda: not self._unanswered() or handle.done(), timeout_s=bound)
            if not answered and not handle.done():
                action = "cancel" if self.m.cancel_reason is not None or self.req.on_input_timeout == "cancel" \
                    else "decline"
                why = f"cancelled ({self.m.cancel_reason})" if self.m.cancel_reason else f"nobody answered within {bound:g}s"
                for key in self._unanswered():
                    self.m.answers[key] = {"action": action}
                    self.m.call_input_note = (f"the server asked for input during tools/call ({self.m.pending[key].message or key!r}): "
                                              f"answered {action}: {why}")[:1024]
            self.m.pending = {}
            self._enter(Phase.SUBMITTING, "submitting")

    def _record(self, reason: str, sent_at: datetime, *, ended: str = "in_flight") -> None:
        self.m.attempts.append(OperationAttempt(n=len(self.m.attempts) + 1, reason=reason,  # type: ignore[arg-type]
                                              at=sent_at, ended=ended))

    def _learn_tool(self, out: StartCallOutput) -> None:
        if out.tool is None or self.m.profile is None:
            raise _bug("_learn_tool without a tool or a profile")
        if self.m.output_schema is None and out.tool.output_schema is not None:
            self.m.output_schema = out.tool.output_schema
            self._set_contract()
        # Annotations count only for servers configuration trusts (decisions.annotation_idempotent, the one rule).
        annotated = decisions.annotation_idempotent(trusted=self.m.profile.trust_annotations,
                                                    idempotent_hint=out.tool.idempotent_hint,
                                                    read_only_hint=out.tool.read_only_hint)
        if annotated is not None and out.tool.idempotent_hint is None and not workflow.patched(READ_ONLY_IS_IDEMPOTENT):
            annotated = None  # recorded before readOnlyHint alone counted
        if annotated is not None:
            self.m.ledger.idempotency["annotation_idempotent"] = annotated
            self.m.ledger.idempotency["idempotent"] = self._idempotent()

    def _config(self, preset: ActivityConfig, *, pinned: bool = True, **overrides: Any) -> ActivityConfig:
        """``preset`` for this task: its heartbeat timeout and, for a stdio task, the owner process's queue
        (``pinned``; a task there whose owner died ends after ``owner_pickup_s`` instead of hanging)."""
        config = ActivityConfig(heartbeat_timeout=timedelta(seconds=self.req.timeouts.heartbeat_s))
        config.update(preset)
        if pinned and self.m.owner_queue:
            config["task_queue"] = self.m.owner_queue
            config["schedule_to_start_timeout"] = timedelta(seconds=self.req.timeouts.owner_pickup_s)
        config.update(overrides)  # type: ignore[typeddict-item]
        return config

    def _principal(self) -> str | None:
        return self.m.profile.principal if self.m.profile else None

    def _job(self) -> JobBinding | None:
        """The job binding when the requested "tool" is a job: its tools stand in for the task methods."""
        return self.m.profile.job if self.m.profile else None

    def _own_bound(self) -> float | None:
        return self.m.profile.policy.max_call_s if self.m.profile else None

    def _call_bound_s(self) -> float:
        """How long one tools/call may take: the tool's own bound from configuration, else ``submit_s``."""
        return self._own_bound() or self.req.timeouts.submit_s

    async def _follow(self, task: TaskState) -> NoReturn:
        """WORKING ⇄ INPUT_REQUIRED → RETRIEVING → terminal. Raises :class:`_Ended`."""
        if self.m.session is None:
            raise _bug("_follow without a session")
        timeouts = self.req.timeouts
        # A wait on an old task goes on under a longer heartbeat timeout: one more activity per task, far fewer
        # heartbeats (billable actions, server writes) for the hours it may still take.
        hand_over = timeouts.long_wait_heartbeat_s > timeouts.heartbeat_s
        # Past this gap a poll as an attempt of its own costs less than the heartbeats that would hold it (the SDK
        # sends one per 0.8 × the heartbeat timeout).
        idle_gap = timeouts.idle_gap_s if timeouts.idle_gap_s is not None else 0.8 * timeouts.heartbeat_s
        long_wait = idle = False
        first_poll_at: float | None = None
        #: The wait that follows reads the task because a notification woke the one before (delivered_by).
        woken_read = False
        woken_via: str | None = None
        while True:
            self._enter(Phase.WORKING)
            arg = AwaitInput(
                session=self.m.session, task_id=task.task_id, principal=self._principal(),
                poll_floor_s=timeouts.poll_floor_s, poll_ceiling_s=timeouts.poll_ceiling_s,
                output_schema=self.m.output_schema, answered_keys=self.m.answered_keys,
                unreachable_s=timeouts.unreachable_s,
                schedule=self.m.profile.polling if self.m.profile else PollSchedule(), job=self._job(),
                submitted_at=self.m.attempts[-1].at.timestamp() if self.m.attempts else None,
                return_after_age_s=timeouts.long_wait_after_s if hand_over and not long_wait else None,
                hand_over_gap_s=idle_gap or None, first_poll_at=first_poll_at)
            first_poll_at = None
            if idle and not woken_read:
                waited = await self._wait_idle(arg, summary=f"poll {_short(task.task_id)} until terminal (idle between polls)")
            else:
                # A woken wait reads at once in the heartbeating activity, which polls on, or hands over to the
                # idle one, as any wait does: a notification that lied costs this one read.
                waited = await self._wait_for_task(
                    arg, summary=(f"read {_short(task.task_id)} (notified)" if woken_read else
                                  f"poll {_short(task.task_id)} until terminal" + (" (long wait)" if long_wait else "")),
                    heartbeat_s=timeouts.long_wait_heartbeat_s if long_wait else None)
            if waited is None:
                await self._cancel_and_settle(task)
            if isinstance(waited, _Woken):
                self.m.wake, woken_read, woken_via = None, True, self.m.wake_via
                continue
            aw = waited
            self._after_wait(aw)
            if self.m.task_state is None:
                raise _bug("a wait ended without a task state")
            if self.m.wake is not None and (self.m.task_state.terminal or self.m.task_state.status == self.m.wake):
                self.m.wake = None  # this read already shows what the notification said
            if self.m.task_state.terminal:
                # How the end was learned: the first read after a wake, or a poll of the schedule.
                self.m.delivered_by = (woken_via or "notification") if woken_read and aw.polls <= 1 else "poll"  # type: ignore[assignment]
            woken_read = False
            if aw.idle and workflow.patched(IDLE_WAITS):
                idle, first_poll_at = True, aw.next_poll_at
                continue
            if aw.long_wait and workflow.patched(LONG_WAIT_HEARTBEAT):
                long_wait = True
                continue
            if self.m.task_state.terminal:
                if aw.payload is None:  # read in the same activity failed: retry the retrieval alone
                    self.m.ledger.last_retrieval = f"retrying: {aw.retrieval_error}"
                payload = aw.payload if aw.payload is not None else await self._retrieve()
                raise self._ended_from_payload(self.m.task_state.status, payload, Stage.PAYLOAD)
            if self.m.task_state.status == "input_required":
                if self.m.task_state.era == LEGACY:
                    await self._legacy_relay(task)  # ends the task: always raises _Ended
                await self._input_required(task)

    def _after_wait(self, aw: AwaitOutput) -> None:
        if aw.state is not None:
            self.m.task_state = aw.state  # the next _enter or _finish shows the new status
            return
        last = self.m.task_state
        if aw.not_found:
            outcome = decisions.not_found_outcome(last.created_at if last else None, last.ttl_ms if last else None,
                                                  workflow.now())
            raise _Ended(Ending(outcome=outcome, stage=Stage.GONE, reason="tasks/get answered -32602: the task is gone"
                         + (" after its TTL" if outcome == Outcome.EXPIRED else "") + _unusable_note(last)))
        if aw.no_answer is not None:
            # The server may still hold the task: we lost sight of it, it is not known to be gone.
            raise _Ended(Ending(outcome=Outcome.LOST, stage=Stage.UNREACHABLE, error=aw.last_error,
                                reason=f"{aw.no_answer}; not replayed: the task may still exist on the server"))
        raise _Ended(Ending(outcome=Outcome.LOST, stage=Stage.GONE, reason=aw.unreachable or "task unreachable"))

    async def _retrieve(self) -> DecodedPayload:
        """RETRIEVING: read the payload again and again, never re-calling the tool."""
        if self.m.task_state is None or self.m.session is None:
            raise _bug("_retrieve without a task or a session")
        self._enter(Phase.RETRIEVING)
        started = workflow.now()
        budget = decisions.retrieval_budget_s(self.m.task_state.created_at, self.m.task_state.ttl_ms, workflow.now(),
                                              self.req.deadline)
        try:
            out = await workflow.execute_activity_method(
                McpActivities.retrieve_result,
                RetrieveInput(session=self.m.session, job=self._job(), state=self.m.task_state, principal=self._principal(),
                              output_schema=self.m.output_schema),
                **self._config(RETRIEVE, **read_budget(budget, max_interval_s=60.0), summary=f"tasks/result {_short(self.m.task_state.task_id)}"))
        except ActivityError as err:
            kind, info, last = last_read_failure(err)
            self.m.ledger.last_retrieval = f"gave up: {kind}"
            why = (f"reading its payload failed ({attempts_text(info, started)} of a {budget:.0f}s budget; last: "
                   f"{kind}: {info.get('message', '')})")
            if workflow.patched(RETRIEVAL_NEVER_REPLAYS):
                outcome, error = decisions.unretrieved_outcome(self.m.task_state.status, self.m.task_state.status_message)
                raise _Ended(Ending(outcome=outcome, stage=Stage.RETRIEVING, error=error or last,
                             reason=f"the server reported the task {self.m.task_state.status}, but {why}; not replayed"))
            # Histories from before the patch: a retrieval failure was taken for a task gone.
            raise _Ended(Ending(outcome=Outcome.LOST, stage=Stage.GONE, reason=f"the task ended {self.m.task_state.status} but its payload could not be "
                                              f"retrieved ({kind}) within {budget:.0f}s"))
        if out.payload is None:
            self.m.ledger.last_retrieval = "not_found" if out.not_found else "unreachable"
            outcome = (decisions.not_found_outcome(self.m.task_state.created_at, self.m.task_state.ttl_ms, workflow.now())
                       if out.not_found else Outcome.LOST)
            # The operation is done whatever became of its payload: never a reason for a second tools/call.
            stage = Stage.RETRIEVING if workflow.patched(RETRIEVAL_NEVER_REPLAYS) else Stage.GONE
            raise _Ended(Ending(outcome=outcome, stage=stage, reason=(out.unreachable or "payload purged before it was read")
                         + f" (the server had reported the task {self.m.task_state.status})"))
        return out.payload

    def _ended_from_payload(self, status: str, payload: DecodedPayload, stage: Stage) -> _Ended:
        """The task's own end, from the payload read at ``stage`` (SUBMITTING for a synchronous answer, PAYLOAD for
        a task's stored payload, CANCELLING when a cancel found the task already ended)."""
        self.m.ledger.last_retrieval = "ok" if not payload.decode_error else "decode_failed"
        outcome, error = decisions.terminal_outcome(
            status, result=payload.result if payload.result is not None else (
                {"content": [], "isError": bool(payload.result_ref.get("is_error"))} if payload.result_ref else None),
            error=payload.error, empty=payload.empty, decode_error=payload.decode_error,
            status_message=self.m.task_state.status_message if self.m.task_state else None)
        ending = Ending(outcome=outcome, stage=stage, result=payload.result, error=error,
                        result_ref=ResultRef(**payload.result_ref) if payload.result_ref else None)
        if payload.decode_error:
            ending.raw_payload, ending.reason = payload.raw, payload.decode_error
        if outcome in (Outcome.TOOL_ERROR, Outcome.FAILED):
            ending.classification, ending.retry_after_s = decisions.classify_failure(
                payload.result, error, self.m.task_state.status_message if self.m.task_state else None)
            from_error_reply = (payload.error is not None and self._job() is None and self.m.task_state is not None
                                and self.m.task_state.era == LEGACY)
            if (from_error_reply and decisions.replay_reason(stage, outcome, ending.classification) is not None
                    and workflow.patched(ERROR_REPLY_NEVER_REPLAYS)):
                ending.stage = Stage.ERROR_REPLY
        return _Ended(ending)

    # --- input (2026-07-28: tasks/update) --------------------------------------------------------

    async def _input_required(self, task: TaskState) -> None:
        if self.m.task_state is None or self.m.session is None:
            raise _bug("_input_required without a task or a session")
        requests = {k: v for k, v in (self.m.task_state.input_requests or {}).items() if k not in self.m.answered_keys}
        if not requests:
            return
        self.m.pending = {k: PendingInput.of(k, r) for k, r in requests.items()}
        self._enter(Phase.INPUT_REQUIRED, "input_required")
        timeout = self.req.input_timeout_s or self.req.timeouts.input_s
        answered = await self._interruptible_wait(lambda: all(k in self.m.answers for k in self.m.pending),
                                                  timeout_s=timeout)
        if self.m.cancel_reason is not None:
            await self._cancel_and_settle(task)
        if not answered:
            if self.req.on_input_timeout == "cancel":
                self.m.cancel_reason = f"no answer to input request within {timeout:g}s"
                await self._cancel_and_settle(task)
            for key in self.m.pending:
                self.m.answers.setdefault(key, {"action": "decline"})
        responses = {k: self.m.answers[k] for k in self.m.pending}
        answering = workflow.now()
        try:
            await workflow.execute_activity_method(
                McpActivities.answer_input,
                AnswerInput(session=self.m.session, task_id=task.task_id, responses=responses, principal=self._principal()),
                # tasks/update is retried on every read fault: bounded like a poll, by unreachable_s.
                **self._config(TASK_STEP, **read_budget(self.req.timeouts.unreachable_s), summary=f"tasks/update {_short(task.task_id)}"))
        except ActivityError as err:
            kind, info, last = last_read_failure(err)
            if kind == "TaskNotFound":
                outcome = decisions.not_found_outcome(task.created_at, task.ttl_ms, workflow.now())
                raise _Ended(Ending(outcome=outcome, stage=Stage.GONE, reason="tasks/update answered -32602: the task is gone"
                             + (" after its TTL" if outcome == Outcome.EXPIRED else "")))
            # The answers may or may not have arrived; the task is not known to be gone: never a replay.
            raise _Ended(Ending(outcome=Outcome.LOST, stage=Stage.INPUT, error=last, reason=(
                f"tasks/update could not deliver the answers ({attempts_text(info, answering)}; last: {kind}: "
                f"{info.get('message', '')}); not replayed: the task may still exist on the server")))
        self.m.answered_keys.extend(responses)
        self.m.pending = {}

    def _unanswered(self) -> list[str]:
        return [k for k in self.m.pending if k not in self.m.answers]

    async def _legacy_relay(self, task: TaskState) -> NoReturn:
        """2025-11-25 input: a relay activity holds tasks/result open until the task ends.

        Input requests arrive by signal; the human answers through ``provide_input``; the relay reads the
        answer by query and replies on the wire. Raises :class:`_Ended`.
        """
        if self.m.task_state is None or self.m.session is None:
            raise _bug("_legacy_relay without a task or a session")
        timeout = self.req.input_timeout_s or self.req.timeouts.input_s
        handle = workflow.start_activity_method(
            McpActivities.relay_input,
            RelayInput(session=self.m.session, state=self.m.task_state, output_schema=self.m.output_schema,
                       principal=self._principal(), hold_s=timeout + 3600),
            **self._config(WAIT, start_to_close_timeout=timedelta(seconds=timeout + 7200),
                           summary=f"tasks/result {_short(task.task_id)} (relaying input)"))
        while not handle.done():
            await self._interruptible_wait(lambda: handle.done() or bool(self._unanswered()))
            if self.m.cancel_reason is None and self._unanswered() and not handle.done():
                self._enter(Phase.INPUT_REQUIRED, "input_required")
                answered = await self._interruptible_wait(lambda: not self._unanswered() or handle.done(),
                                                          timeout_s=timeout)
                if not answered and self.m.cancel_reason is None and self._unanswered():
                    if self.req.on_input_timeout == "cancel":
                        self.m.cancel_reason = f"no answer to input request within {timeout:g}s"
                    else:
                        for key in self._unanswered():
                            self.m.answers[key] = {"action": "decline"}
                self.m.pending = {k: v for k, v in self.m.pending.items() if k not in self.m.answers}
                if self.m.cancel_reason is None:
                    self._enter(Phase.WORKING, "working")
            if self.m.cancel_reason is not None and not handle.done():
                await self._abandon(handle)
                await self._cancel_and_settle(task)
        try:
            out: RelayOutput = await handle
        except ActivityError as err:
            raise self._lost(err, "input relay failed", Stage.INPUT)
        if out.not_found or out.unreachable or out.payload is None:
            self._after_wait(AwaitOutput(not_found=out.not_found, unreachable=out.unreachable or "task unreachable"))
        if out.payload is None:  # (_after_wait raised for every such reply)
            raise _bug("a relay ended without a payload")
        if out.state is not None:
            self.m.task_state = out.state
        if out.notified:  # (False in every history from before: the outcome reads as it did)
            self.m.delivered_by = "notification"
        status = self.m.task_state.status if self.m.task_state.terminal else "completed"
        raise self._ended_from_payload(status, out.payload, Stage.PAYLOAD)

    # --- cancellation ----------------------------------------------------------------------------

    async def _cancel_and_settle(self, task: TaskState) -> NoReturn:
        """Send ``tasks/cancel``, then learn how the task really ended. Always raises :class:`_Ended`."""
        if self.m.session is None:
            raise _bug("_cancel_and_settle without a session")
        self._enter(Phase.CANCELLING, "cancelling")
        principal = self._principal()
        asked = workflow.now()
        try:
            out = await workflow.execute_activity_method(
                McpActivities.cancel_task, CancelInput(session=self.m.session, job=self._job(), task_id=task.task_id,
                                                        principal=principal),
                # Retried on every read fault, for as long as a poll would be (at most 5 minutes).
                **self._config(TASK_STEP, **read_budget(min(300.0, self.req.timeouts.unreachable_s)), summary=f"tasks/cancel {_short(task.task_id)}"))
        except ActivityError as err:
            kind, info, last = last_read_failure(err)
            raise _Ended(Ending(outcome=Outcome.CANCELLED, stage=Stage.CANCELLING, error=last, reason=(
                f"{self.m.cancel_reason}; tasks/cancel got no usable answer ({attempts_text(info, asked)}; last: "
                f"{kind}): the task may still be running on the server")))
        if out.not_found or out.unreachable:
            raise _Ended(Ending(outcome=Outcome.CANCELLED, stage=Stage.CANCELLING,
                                reason=f"{self.m.cancel_reason}; task already gone on the server"))
        # Cancellation is cooperative: the task may still have finished first. Read its real end.
        try:
            aw = await workflow.execute_activity_method(
                McpActivities.await_task,
                AwaitInput(session=self.m.session, task_id=task.task_id, principal=principal,
                           poll_floor_s=self.req.timeouts.poll_floor_s, poll_ceiling_s=2.0,
                           output_schema=self.m.output_schema, answered_keys=list(self.m.pending),
                           unreachable_s=min(60.0, self.req.timeouts.unreachable_s),
                           schedule=PollSchedule(age_fraction=0), job=self._job()),
                **self._config(WAIT, start_to_close_timeout=timedelta(minutes=2),
                               schedule_to_close_timeout=timedelta(minutes=3),
                               summary=f"settle {_short(task.task_id)} after cancel"))
        except ActivityError:
            raise _Ended(Ending(outcome=Outcome.CANCELLED, stage=Stage.CANCELLING,
                                reason=f"{self.m.cancel_reason}; final state unknown"))
        if aw.state is not None and aw.state.terminal:
            self.m.task_state = aw.state
            if aw.state.status != "cancelled":
                payload = aw.payload if aw.payload is not None else await self._retrieve()
                end = self._ended_from_payload(aw.state.status, payload, Stage.CANCELLING)
                end.ending.reason = f"cancel requested ({self.m.cancel_reason}) but the task had already ended"
                raise end
        elif aw.state is not None:
            self.m.task_state = aw.state
        raise _Ended(Ending(outcome=Outcome.CANCELLED, stage=Stage.CANCELLING, reason=self.m.cancel_reason))

    # --- waiting without losing cancellations ------------------------------------------------------

    async def _uninterruptible(self, handle: Any) -> Any:
        """Await an activity to its end even if the workflow is cancelled meanwhile (remembering it).

        Used for ``tools/call``: abandoning it would lose the task id of a call that did reach the server.
        """
        while True:
            try:
                return await asyncio.shield(handle)
            except asyncio.CancelledError:
                if handle.done() and handle.cancelled():
                    raise
                self._cancelled_by_temporal()

    async def _interruptible_wait(self, ready: Any, *, timeout_s: float | None = None) -> bool:
        """Wait for ``ready()``; False on cancellation or timeout. Workflow cancellation is remembered."""
        try:
            # No timeout means no timer: a timer would cost two history events per wait.
            await workflow.wait_condition(lambda: ready() or self.m.cancel_reason is not None,
                                          timeout=timedelta(seconds=timeout_s) if timeout_s else None)
        except builtins.TimeoutError:
            return False
        except asyncio.CancelledError:
            self._cancelled_by_temporal()
            return False
        return self.m.cancel_reason is None and ready()

    async def _interruptible_sleep(self, seconds: float) -> bool:
        """A durable timer that a cancel cuts short: True when it ran its course."""
        await self._interruptible_wait(lambda: False, timeout_s=seconds)
        return self.m.cancel_reason is None

    async def _wait_for_task(self, arg: AwaitInput, *, summary: str,
                             heartbeat_s: float | None = None) -> AwaitOutput | _Woken | None:
        """Poll until the task moves; None if a cancel (or the deadline) came first, :data:`_WOKEN` if a notification
        did (the activity is then cancelled either way)."""
        deadline = self.req.deadline
        budget = (deadline - workflow.now()) if deadline else LONG_WAIT
        config = self._config(WAIT, start_to_close_timeout=max(budget, timedelta(seconds=1)), summary=summary)
        if heartbeat_s:
            config["heartbeat_timeout"] = timedelta(seconds=heartbeat_s)
        handle = workflow.start_activity_method(McpActivities.await_task, arg, **config)
        await self._interruptible_wait(lambda: handle.done() or self.m.wake is not None)
        if self.m.cancel_reason is not None and not handle.done():
            await self._abandon(handle)
            return None
        if self.m.wake is not None and not handle.done():
            await self._abandon(handle)
            return _WOKEN
        try:
            return await handle
        except ActivityError as err:
            if isinstance(err.cause, TimeoutError) and deadline and workflow.now() >= deadline:
                self.m.cancel_reason = "deadline exceeded"
                return None
            raise self._lost(err, "could not follow the task", Stage.UNREACHABLE)

    async def _wait_idle(self, arg: AwaitInput, *, summary: str) -> AwaitOutput | _Woken | None:
        """Poll with nothing running between polls (``poll_task``); None if a cancel or the deadline came first,
        :data:`_WOKEN` if a notification did (the pending attempt is cancelled: Temporal does it at once).

        A cancel cancels the activity wherever it is: between two attempts Temporal cancels it at once, so the cancel
        reaches the server without waiting for the next poll. The deadline is a timer here (two history events),
        not a schedule-to-close: Temporal would refuse a retry scheduled past it, up to a whole gap early.
        """
        deadline = self.req.deadline
        config = self._config(IDLE_POLL, summary=summary)
        if deadline is None:
            config["schedule_to_close_timeout"] = LONG_WAIT
        handle = workflow.start_activity_method(McpActivities.poll_task, arg, **config)
        left = (deadline - workflow.now()).total_seconds() if deadline else None
        await self._interruptible_wait(lambda: handle.done() or self.m.wake is not None,
                                       timeout_s=max(left, 0.001) if left is not None else None)
        if not handle.done() and self.m.cancel_reason is None and self.m.wake is not None:
            await self._abandon(handle)
            return _WOKEN
        if not handle.done():
            if self.m.cancel_reason is None:
                self.m.cancel_reason = "deadline exceeded"
            await self._abandon(handle)
            return None
        try:
            return await handle
        except ActivityError as err:
            raise self._lost(err, "could not follow the task", Stage.UNREACHABLE)

    @staticmethod
    async def _abandon(handle: Any) -> None:
        """Cancel a waiting activity and let it go: its late completion has nothing we still need."""
        handle.cancel()
        try:
            await handle
        except (ActivityError, asyncio.CancelledError):
            pass

    @staticmethod
    def _lost(err: ActivityError, what: str, where: Stage) -> _Ended:
        kind, _, info = failure_info(err)
        timeout = err.cause if isinstance(err.cause, TimeoutError) else None
        if timeout is not None and timeout.type == TimeoutType.SCHEDULE_TO_START:  # the owner's process is gone
            return _Ended(Ending(outcome=Outcome.LOST, stage=Stage.GONE,
                                 reason="the worker process that owns this stdio task is gone"))
        # We could not follow a task the server accepted; it is not known to be gone: never a replay.
        # Histories from before the patch took this for a task gone.
        stage = where if workflow.patched(RETRIEVAL_NEVER_REPLAYS) else Stage.GONE
        return _Ended(Ending(outcome=Outcome.LOST, stage=stage, reason=f"{what}: {kind}: {info.get('message', '')}"))

    # --- the end ---------------------------------------------------------------------------------

    def _finish(self, ending: Ending) -> McpTaskOutcome:
        outcome = ending.outcome
        if self.m.attempts and self.m.attempts[-1].ended == "in_flight":
            self.m.attempts[-1].ended = outcome.value
        self.m.ledger.terminal_state = outcome.value
        self._move(Phase.DONE)
        self.m.outcome = McpTaskOutcome(
            workflow_id=workflow.info().workflow_id, outcome=outcome,
            task_id=self.m.task_state.task_id if self.m.task_state else (self.m.attempts[-1].task_id if self.m.attempts else None),
            task_status=self.m.task_state.status if self.m.task_state else None,
            status_message=self.m.task_state.status_message if self.m.task_state else None,
            era=self.m.ledger.era, protocol_version=self.m.ledger.protocol_version,
            operation_attempts=self.m.attempts, ledger=self.m.ledger,
            delivered_by=self.m.delivered_by, **ending.outcome_fields())
        final_status = self.m.task_state.status if self.m.task_state else outcome.value
        if final_status not in _TERMINAL_STATUSES and final_status != outcome.value \
                and workflow.patched(SEARCHABLE_PHASES):
            final_status = outcome.value  # a finished task is not listed as `working`
        workflow.upsert_search_attributes([SA_OUTCOME.value_set(outcome.value), SA_STATUS.value_set(final_status)])
        workflow.upsert_memo({"ledger": self.m.ledger.model_dump(mode="json")})
        # Not a command (the UI reads it by query): every ending readable on the workflow's page, a Canceled one's
        # too, whose cancellation carries no failure to show (issue 43); and the protocol the task ran on.
        how = {"notification": "its end was learned from a notification", "poll": "its end was learned by a poll",
               "list": "its end was learned from the server's tasks/list"}
        protocol = protocol_label(self.m.ledger.era, self.m.ledger.protocol_version)
        workflow.set_current_details(finished_details(self.m.outcome)
                                     + (f"\n\nprotocol {protocol}" if protocol else "")
                                     + (f"\n\n{how[self.m.delivered_by]}" if self.m.delivered_by in how else ""))
        workflow.metric_meter().create_counter("mcp_tasks_outcomes", "MCP tasks by outcome").add(
            1, {"outcome": outcome.value, "tool": self.req.tool})
        if self.m.delivered_by is not None:
            workflow.metric_meter().create_counter(
                "mcp_tasks_deliveries", "task ends learned, by a server's notification or by a poll").add(
                1, {"server": self.m.ledger.server, "delivered_by": self.m.delivered_by})
        replays = max(0, len(self.m.attempts) - 1)
        if replays:
            workflow.metric_meter().create_counter("mcp_tasks_replays", "tools/call replays").add(
                replays, {"tool": self.req.tool})
        return self.m.outcome


def validate_input_response(pending: PendingInput, response: dict[str, Any]) -> None:
    """Shape check of an answer to an input request (``ElicitResult``), done in the Update validator."""
    if pending.method != "elicitation/create":
        raise ValueError(f"input {pending.key!r} is a {pending.method} request; only elicitation can be answered")
    action = response.get("action")
    if action not in ("accept", "decline", "cancel"):
        raise ValueError(f"input {pending.key!r}: action must be accept, decline or cancel, got {action!r}")
    extra = set(response) - {"action", "content", "_meta"}
    if extra:
        raise ValueError(f"input {pending.key!r}: unexpected fields {sorted(extra)}")
    content = response.get("content")
    if action != "accept":
        if content is not None:
            raise ValueError(f"input {pending.key!r}: content is only allowed with action 'accept'")
        return
    if pending.requested_schema is not None:
        if not isinstance(content, dict):
            raise ValueError(f"input {pending.key!r}: accept needs a content object")
        # Held to the form as it is sent: with the SEP-1034 defaults filled in.
        content = with_defaults(response, pending.requested_schema).get("content")
        try:
            jsonschema.validate(content, pending.requested_schema)
        except jsonschema.ValidationError as exc:
            where = "/".join(str(p) for p in exc.absolute_path) or "content"
            raise ValueError(f"input {pending.key!r}: {where}: {exc.message}") from None
        except (jsonschema.SchemaError, RecursionError, TypeError) as exc:
            raise ValueError(f"input {pending.key!r}: the server's requestedSchema is unusable "
                             f"({type(exc).__name__}); answer decline or cancel") from None


def initial_search_attributes(request: McpTaskRequest) -> TypedSearchAttributes:
    """Set at start so a workflow is findable before its first task runs."""
    return TypedSearchAttributes([SearchAttributePair(SA_SERVER, search_attribute_value(request.server_label())),
                                  SearchAttributePair(SA_TOOL, search_attribute_value(request.tool)),
                                  SearchAttributePair(SA_STATUS, "submitting")])
