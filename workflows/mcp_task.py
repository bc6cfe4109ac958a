"""``McpTaskWorkflow``: one MCP task, one durable state machine; its steps dispatched in one loop.

Its phases and the moves between them (``records.TRANSITIONS``, checked on every move; a test keeps this copy equal):

    SUBMITTING             ─► SUBMITTING · WORKING · INPUT_REQUIRED
                              AWAITING_AUTHORIZATION · AWAITING_APPROVAL · REPLAYING
                              CANCELLING · DONE
    WORKING                ─► WORKING · INPUT_REQUIRED · AWAITING_AUTHORIZATION
                              RETRIEVING · AWAITING_APPROVAL · REPLAYING
                              CANCELLING · DONE
    INPUT_REQUIRED         ─► SUBMITTING · WORKING · AWAITING_APPROVAL · REPLAYING
                              CANCELLING · DONE
    AWAITING_AUTHORIZATION ─► SUBMITTING · WORKING · DONE
    RETRIEVING             ─► AWAITING_APPROVAL · REPLAYING · CANCELLING · DONE
    AWAITING_APPROVAL      ─► REPLAYING · DONE
    REPLAYING              ─► SUBMITTING · DONE
    CANCELLING             ─► RETRIEVING · DONE
    DONE                   ─► (end)
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any, assert_never

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributePair, TypedSearchAttributes
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError

from mcp_temporal_tasks.workflows.phases import steps

# The phases are this workflow's own code: a sandbox that re-executes this module re-executes them too (each passes
# its own imports through, as this module does below).
from mcp_temporal_tasks.workflows.phases.cancel import after_temporal_cancel, cancel
from mcp_temporal_tasks.workflows.phases.finish import finish
from mcp_temporal_tasks.workflows.phases.input import ask_input, relay
from mcp_temporal_tasks.workflows.phases.messages import Messages, validate_input_response
from mcp_temporal_tasks.workflows.phases.patches import CANCELLED_SHOWS_CANCELED, FAIL_UNLESS_COMPLETED
from mcp_temporal_tasks.workflows.phases.retrieve import retrieve
from mcp_temporal_tasks.workflows.phases.submit import apply_profile, submit
from mcp_temporal_tasks.workflows.phases.wait import follow

with workflow.unsafe.imports_passed_through():
    from pydantic import ValidationError

    from mcp_temporal_tasks.activities.activity_io import OUTCOME_MEMO, ResolveInput
    from mcp_temporal_tasks.activities.defs import McpActivityDefs
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
        OperationAttempt,
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
class McpTaskWorkflow(Messages):
    """One MCP task: its state (``TaskMachine``), its handlers (``Messages``), and the loop that runs its steps.

    An operation is one ``tools/call`` and what it leads to, step by step (``phases/steps.py``: ``Submit`` →
    ``Follow`` ⇄ ``AskInput`` | ``Relay`` → ``Retrieve`` | ``Cancel`` → ``Ended``); each step function returns the
    next step. Its ``Ending`` names a ``Stage``, and only ``decisions.replay_reason`` and the replay policy decide
    whether a new ``tools/call`` follows (AWAITING_APPROVAL, REPLAYING) or the task is DONE.
    """

    @workflow.init
    def __init__(self, request: Any) -> None:
        # The input is decoded here, not by the data converter: a request that does not validate (a typo'd field from
        # another SDK, arguments too large) must end the task as `rejected`, not fail its workflow task forever.
        invalid: str | None = None
        try:
            request = request if isinstance(request, McpTaskRequest) else McpTaskRequest.model_validate(request)
            check_request_size(request.arguments)
        except (ValidationError, RequestTooLarge) as exc:
            invalid = _explain(exc)
            request = _placeholder_request(request)
        self.req = request
        self.state = MachineState(
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
        # metrics). The patch keeps histories that completed with such an outcome replaying; it is asked only for
        # those outcomes, so a completed task's history does not grow.
        if outcome.outcome != Outcome.COMPLETED and workflow.patched(FAIL_UNLESS_COMPLETED):
            if (
                outcome.outcome == Outcome.CANCELLED
                and self.state.cancel_requested
                and workflow.patched(CANCELLED_SHOWS_CANCELED)
            ):
                # Cancelled on purpose (mcp-tasks cancel, handle.cancel(), a cancelled parent): Temporal shows it as
                # Canceled. A cancellation carries no details, so the outcome goes to the memo, where outcome_of and
                # the fetch_outcome activity read it.
                workflow.upsert_memo({OUTCOME_MEMO: outcome.model_dump(mode="json")})
                raise CancelledError(
                    f"MCP task {self.req.tool} on {outcome.ledger.server} cancelled: {outcome.reason or 'by request'}"
                )
            raise McpTaskError(outcome)
        return outcome

    async def _run(self) -> McpTaskOutcome:
        refused = self._invalid() or await self._resolve()
        if refused is not None:
            return finish(self, refused)
        apply_profile(self)
        reason = "initial"
        while True:
            ending = await self._operation(reason)
            replay = decisions.replay_reason(ending.stage, ending.outcome, ending.classification)
            if replay is None or self.state.cancel_reason is not None:
                return finish(self, ending)
            stop = await self._before_replay(ending)
            if stop is not None:
                return finish(self, stop)
            reason = replay

    async def _operation(self, reason: str) -> Ending:
        """One ``tools/call`` and every step it leads to, until it ends. A task the call started gives that attempt
        the operation's end; a workflow cancelled mid-step settles the task and keeps its true end."""
        step: steps.Step = steps.Submit(reason)
        followed: OperationAttempt | None = None
        try:
            while not isinstance(step, steps.Ended):
                step = await self._take(step)
                if followed is None and isinstance(step, steps.Follow):
                    followed = self.state.attempts[-1]
        except asyncio.CancelledError:
            step = after_temporal_cancel(self)
            while not isinstance(step, steps.Ended):
                step = await self._take(step)
            return step.ending
        if followed is not None:
            followed.ended = step.ending.outcome.value
        return step.ending

    async def _take(self, step: steps.Step) -> steps.Step:
        """The one dispatch: each step to its function, which returns the next step."""
        match step:
            case steps.Submit():
                return await submit(self, step)
            case steps.Follow():
                return await follow(self, step)
            case steps.AskInput():
                return await ask_input(self, step)
            case steps.Relay():
                return await relay(self, step)
            case steps.Retrieve():
                return await retrieve(self, step)
            case steps.Cancel():
                return await cancel(self, step)
            case steps.Ended():
                return step
            case _:
                assert_never(step)

    def _invalid(self) -> Ending | None:
        if self.state.invalid_request is None:
            return None
        return Ending(
            outcome=Outcome.REJECTED,
            stage=Stage.REQUEST,
            error=RpcErrorInfo(code=-32602, message=f"invalid McpTaskRequest: {self.state.invalid_request}"),
            classification=Classification.INPUT_CORRECTABLE,
            reason=f"invalid request: {self.state.invalid_request}",
        )

    async def _resolve(self) -> Ending | None:
        """The server's profile from the worker's configuration; the ending when it refuses (nothing was sent)."""
        request = self.req
        try:
            self.state.profile = await workflow.execute_local_activity_method(
                McpActivityDefs.resolve,
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
                self.cancelled_by_temporal()
                return Ending(
                    outcome=Outcome.CANCELLED,
                    stage=Stage.REQUEST,
                    reason=f"{self.state.cancel_reason} before tools/call was sent",
                )
            if isinstance(err, asyncio.CancelledError):
                raise
            kind, _, info = failure_info(err)
            return Ending(
                outcome=Outcome.REJECTED,
                stage=Stage.REQUEST,
                error=RpcErrorInfo(code=-32602, message=info.get("message") or str(err), data={"kind": kind}),
                classification=Classification.INPUT_CORRECTABLE,
                reason=kind,
            )
        return None

    async def _before_replay(self, ending: Ending) -> Ending | None:
        """An ending that may justify a replay: the policy's answer, an operator's approval, the server's
        ``Retry-After`` as a durable timer. None: replay now; else the ending that stands."""
        used = decisions.replays_used([a.reason for a in self.state.attempts])
        decision = decisions.may_replay(self.rule(), replays_used=used)
        if decision == "stop":
            return ending
        if decision == "await_approval":
            self.enter(Phase.AWAITING_APPROVAL)
            if not await self.interruptible_wait(lambda: self.state.approved):
                return ending.but(reason=f"replay not approved: {self.state.cancel_reason}")
            self.state.approved = False
        self.enter(Phase.REPLAYING)
        delay = ending.retry_after_s or 0.0
        if self.req.deadline and workflow.now() + timedelta(seconds=delay) >= self.req.deadline:
            return ending.but(reason="no replay: Retry-After reaches past the deadline")
        # A durable timer that a cancel interrupts: the last attempt's outcome then stands.
        if delay and not await self.interruptible_sleep(delay):
            return ending.but(reason=f"replay cancelled: {self.state.cancel_reason}")
        return None


def initial_search_attributes(request: McpTaskRequest) -> TypedSearchAttributes:
    """Set at start so a workflow is findable before its first task runs."""
    return TypedSearchAttributes(
        [
            SearchAttributePair(SA_SERVER, search_attribute_value(request.server_label())),
            SearchAttributePair(SA_TOOL, search_attribute_value(request.tool)),
            SearchAttributePair(SA_STATUS, "submitting"),
        ]
    )
