"""``McpTaskWorkflow``: one MCP task, one durable state machine.

Its phases and the moves between them (``records.TRANSITIONS``, checked on every move; a test keeps this copy equal):

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

Every operation ends with an :class:`~.records.Ending` that names its :class:`~.records.Stage`; one pure function,
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

Each phase is one module of :mod:`mcp_temporal_tasks.workflows.phases` (``submit``, ``wait``, ``retrieve``,
``input``, ``cancel``, ``finish``; ``messages`` for the query, updates and signals): a mixin over one shared state
(``phases/base.py``, ``TaskMachine``: the request and :class:`~.records.MachineState`). This module composes them and
runs the operations one after another (resolve, an operation, a replay's approval and ``Retry-After``, the end).
The patch ids are listed in ``phases/patches.py``.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributePair, TypedSearchAttributes
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError

# The phases are this workflow's own code: a sandbox that re-executes this module re-executes them too (each passes
# its own imports through, as this module does below).
from mcp_temporal_tasks.workflows.phases.base import _Ended
from mcp_temporal_tasks.workflows.phases.cancel import CancelPhase
from mcp_temporal_tasks.workflows.phases.finish import FinishPhase
from mcp_temporal_tasks.workflows.phases.input import InputPhase
from mcp_temporal_tasks.workflows.phases.messages import Messages, validate_input_response
from mcp_temporal_tasks.workflows.phases.patches import CANCELLED_SHOWS_CANCELED, FAIL_UNLESS_COMPLETED
from mcp_temporal_tasks.workflows.phases.retrieve import RetrievePhase
from mcp_temporal_tasks.workflows.phases.submit import SubmitPhase
from mcp_temporal_tasks.workflows.phases.wait import WaitPhase

with workflow.unsafe.imports_passed_through():
    from pydantic import ValidationError

    from mcp_temporal_tasks.activities.activity_io import OUTCOME_MEMO, ResolveInput
    from mcp_temporal_tasks.activities.defs import McpActivityDefs as McpActivities  # stubs: names, no wire
    from mcp_temporal_tasks.protocol.contract import digest
    from mcp_temporal_tasks.protocol.tasks import RpcErrorInfo
    from mcp_temporal_tasks.workflows import decisions
    from mcp_temporal_tasks.workflows.failure_decoding import failure_info
    from mcp_temporal_tasks.workflows.records import (
        SA_SERVER,
        SA_STATUS,
        SA_TOOL,
        Classification,
        Ending,
        Ledger,
        MachineState,
        McpTaskOutcome,
        McpTaskRequest,
        Outcome,
        Phase,
        ReplayPolicy,
        RequestTooLarge,
        Stage,
        check_request_size,
        search_attribute_value,
        validation_message,
    )
    from mcp_temporal_tasks.workflows.task_error import McpTaskError

__all__ = ["McpTaskWorkflow", "initial_search_attributes", "validate_input_response"]


def _explain(exc: ValidationError | RequestTooLarge) -> str:
    if isinstance(exc, RequestTooLarge):
        return str(exc)
    parts = []
    for err in exc.errors()[:10]:
        loc = ".".join(str(p) for p in err["loc"]) or "<input>"
        parts.append(f"{loc}: {'unknown field' if err['type'] == 'extra_forbidden' else validation_message(err)}")
    return "; ".join(parts)


def _placeholder_request(raw: Any) -> McpTaskRequest:
    """A valid stand-in for a request that did not validate, so the rejection has a ledger and labels."""
    raw = raw if isinstance(raw, dict) else {}
    tool = raw.get("tool") if isinstance(raw.get("tool"), str) and raw.get("tool") else "?"
    server = raw.get("server") if isinstance(raw.get("server"), str) and raw.get("server", "").strip() else "?"
    # Labels only: whatever made the request invalid (a lone surrogate too) must not make the stand-in invalid.
    tool, server = (v[:256].encode("utf-8", "replace").decode("utf-8") for v in (tool, server))
    return McpTaskRequest(server=server, tool=tool)


@workflow.defn(name="McpTaskWorkflow")
class McpTaskWorkflow(Messages, SubmitPhase, WaitPhase, InputPhase, RetrievePhase, CancelPhase, FinishPhase):
    """One MCP task: its phases (``workflows/phases/``) over one state, and the loop of operations that runs them."""

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
        self.m = MachineState(
            invalid_request=invalid,
            ledger=Ledger(
                server=request.server_label(),
                tool=request.tool,
                principal=request.principal,
                request_digest=digest(request.arguments),
                created_at=workflow.now(),
                idempotency={
                    "key": request.idempotency_key,
                    "replay": (request.replay or ReplayPolicy.NEVER).value,
                    "max_replays": request.max_replays,
                    "idempotent": request.idempotent,
                },
            ),
        )

    @workflow.run
    async def run(self, request: Any) -> McpTaskOutcome:
        """The outcome of a ``completed`` task; every other outcome fails the workflow with
        :class:`~mcp_temporal_tasks.workflows.task_error.McpTaskError` carrying the outcome (see that module)."""
        outcome = await self._run()
        # Operators must tell a task that did not complete from one that did (UI status, "Failed" filter, SDK
        # metrics). The patch keeps histories that completed with such an outcome replaying; it is asked only
        # for those outcomes, so a completed task's history does not grow.
        if outcome.outcome != Outcome.COMPLETED and workflow.patched(FAIL_UNLESS_COMPLETED):
            if (
                outcome.outcome == Outcome.CANCELLED
                and self.m.cancel_requested
                and workflow.patched(CANCELLED_SHOWS_CANCELED)
            ):
                # Cancelled on purpose (mcp-tasks cancel, handle.cancel(), a cancelled parent): Temporal shows it
                # as Canceled. A cancellation carries no details, so the outcome goes to the memo, where
                # outcome_of and the fetch_outcome activity read it.
                workflow.upsert_memo({OUTCOME_MEMO: outcome.model_dump(mode="json")})
                raise CancelledError(
                    f"MCP task {self.req.tool} on {outcome.ledger.server} cancelled: {outcome.reason or 'by request'}"
                )
            raise McpTaskError(outcome)
        return outcome

    async def _run(self) -> McpTaskOutcome:
        request = self.req
        if self.m.invalid_request is not None:
            return self._finish(
                Ending(
                    outcome=Outcome.REJECTED,
                    stage=Stage.REQUEST,
                    error=RpcErrorInfo(code=-32602, message=f"invalid McpTaskRequest: {self.m.invalid_request}"),
                    classification=Classification.INPUT_CORRECTABLE,
                    reason=f"invalid request: {self.m.invalid_request}",
                )
            )
        try:
            self.m.profile = await workflow.execute_local_activity_method(
                McpActivities.resolve,
                ResolveInput(server=request.server, tool=request.tool, principal=request.principal, era=request.era),
                start_to_close_timeout=timedelta(seconds=10),
                retry_policy=RetryPolicy(maximum_attempts=3),
                summary="resolve server configuration",
            )
        except (asyncio.CancelledError, ActivityError, ApplicationError) as err:
            # Cancelled before anything was sent (the cancel reaches the local activity): a cancelled outcome,
            # readable from the memo, instead of a bare cancel or a "rejected". Histories from before: unchanged.
            cancelled = isinstance(err, asyncio.CancelledError) or isinstance(err.cause, CancelledError)
            if cancelled and workflow.patched(CANCELLED_SHOWS_CANCELED):
                self._cancelled_by_temporal()
                return self._finish(
                    Ending(
                        outcome=Outcome.CANCELLED,
                        stage=Stage.REQUEST,
                        reason=f"{self.m.cancel_reason} before tools/call was sent",
                    )
                )
            if isinstance(err, asyncio.CancelledError):
                raise
            kind, _, info = failure_info(err)
            return self._finish(
                Ending(
                    outcome=Outcome.REJECTED,
                    stage=Stage.REQUEST,
                    error=RpcErrorInfo(code=-32602, message=info.get("message") or str(err), data={"kind": kind}),
                    classification=Classification.INPUT_CORRECTABLE,
                    reason=kind,
                )
            )
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


def initial_search_attributes(request: McpTaskRequest) -> TypedSearchAttributes:
    """Set at start so a workflow is findable before its first task runs."""
    return TypedSearchAttributes(
        [
            SearchAttributePair(SA_SERVER, search_attribute_value(request.server_label())),
            SearchAttributePair(SA_TOOL, search_attribute_value(request.tool)),
            SearchAttributePair(SA_STATUS, "submitting"),
        ]
    )
