"""SUBMITTING: the one dangerous step, ``tools/call`` (a single attempt), and what its answer starts.

The resolved server profile is applied first (ledger, contract, search attributes). A failure that surely never
reached the server is resent (after its ``Retry-After``); anything else ends ``rejected`` or ``unknown_outcome``
(``decisions.after_submit_failure``). A question the server asks on the call's own stream is put to a person
(INPUT_REQUIRED) while the call goes on. A task the call started is then followed (``wait``).
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any, NoReturn

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from mcp_temporal_tasks.activities.activity_io import StartCallInput, StartCallOutput
    from mcp_temporal_tasks.activities.defs import McpActivityDefs as McpActivities  # stubs: names, no wire
    from mcp_temporal_tasks.protocol.tasks import RpcErrorInfo
    from mcp_temporal_tasks.workflows import decisions
    from mcp_temporal_tasks.workflows.failure_decoding import failure_info
    from mcp_temporal_tasks.workflows.options import MAX_RESEND_DELAY_S, SUBMIT
    from mcp_temporal_tasks.workflows.phases.base import TaskMachine, _bug, _Ended
    from mcp_temporal_tasks.workflows.phases.patches import CALL_INPUT, READ_ONLY_IS_IDEMPOTENT
    from mcp_temporal_tasks.workflows.records import (
        SA_SERVER,
        SA_STATUS,
        SA_TASK_ID,
        SA_TOOL,
        Classification,
        Ending,
        OperationAttempt,
        Outcome,
        Phase,
        Stage,
        search_attribute_value,
    )


class SubmitPhase(TaskMachine):
    """SUBMITTING (and INPUT_REQUIRED while ``tools/call`` itself asks), up to the task's first WORKING."""

    def _apply_profile(self) -> None:
        if self.m.profile is None:
            raise _bug("_apply_profile before resolve")
        self.m.output_schema = self.m.profile.policy.output_schema
        self.m.ledger.server = self.m.profile.name
        self.m.ledger.server_identity = self.m.profile.identity
        self.m.ledger.principal = self.m.profile.principal
        self.m.ledger.idempotency.update(
            replay=self._policy().value, idempotent=self._idempotent(), max_replays=self._max_replays()
        )
        self._set_contract()
        # Upsert only what the starter did not already set (each upsert is a history event and a
        # visibility write); the ledger goes to the memo once, at the end (live: the status() query).
        current = workflow.info().typed_search_attributes
        wanted = {
            SA_SERVER: search_attribute_value(self.m.profile.name),
            SA_TOOL: search_attribute_value(self.req.tool),
            SA_STATUS: "submitting",
        }
        changed = [key.value_set(value) for key, value in wanted.items() if current.get(key) != value]
        if changed:
            workflow.upsert_search_attributes(changed)
        self.m.shown_status = "submitting"

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
            raise _Ended(
                Ending(
                    outcome=Outcome.REJECTED,
                    stage=Stage.SUBMITTING,
                    error=RpcErrorInfo(
                        code=-32601, message="server asked for input on tools/call itself; answer through a task"
                    ),
                    classification=Classification.PERMANENT,
                )
            )
        task = start.start.task
        if task is None:
            # The server's reply to tools/call was neither a task, nor a result, nor an input request (the wire
            # refuses such a reply; this guards what a history may hold): the call reached the server and gave
            # nothing to follow, as if its reply had been lost. An outcome, never a failing workflow task.
            attempt.ended = Outcome.UNKNOWN_OUTCOME.value
            raise _Ended(
                Ending(
                    outcome=Outcome.UNKNOWN_OUTCOME,
                    stage=Stage.SUBMITTING,
                    reason=("tools/call was answered with neither a task, a result nor an input request"),
                )
            )
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
                StartCallInput(
                    profile=self.m.profile,
                    tool=self.req.tool,
                    arguments=self.req.arguments,
                    ttl_ms=int(self.req.ttl_s * 1000) if self.req.ttl_s else None,
                    # Only a tool with its own bound waits longer than the transport's read timeout.
                    call_timeout_s=self._call_bound_s() if self._job() or self._own_bound() else None,
                    input_wait_s=self._call_input_bound_s(),
                    input_timeout_action="cancel" if self.req.on_input_timeout == "cancel" else "decline",
                ),
                **self._config(
                    SUBMIT,
                    start_to_close_timeout=timedelta(seconds=self._call_bound_s()),
                    summary=f"tools/call {self.req.tool} ({reason})",
                    pinned=False,
                ),
            )
            try:
                out = await self._await_call(handle)
            except ActivityError as err:
                kind, reached, info = failure_info(err)
                verdict = decisions.after_submit_failure(kind, may_have_reached_server=reached, resends=resends)
                retry_after = decisions.bounded_delay_s(info.get("retry_after_s")) or 0.0
                if verdict == "resend" and retry_after <= MAX_RESEND_DELAY_S:
                    resends += 1
                    # tools/call never reached the tool: resending is safe, after the server's Retry-After.
                    delay = max(2.0**resends, retry_after)
                    if not (self.req.deadline and workflow.now() + timedelta(seconds=delay) >= self.req.deadline):
                        await workflow.sleep(
                            timedelta(seconds=delay),
                            summary="rate limited; resend" if retry_after else "server unreachable; resend",
                        )
                        continue
                    verdict = "unreachable"
                elif verdict == "resend":
                    verdict = "unreachable"
                error = RpcErrorInfo(
                    code=info.get("code") or -32000, message=info.get("message") or str(err.cause), data={"kind": kind}
                )
                if verdict == "rejected":
                    # operation_attempts holds the calls whose bytes may have left: a refusal before tools/call was
                    # sent (initialize, auth, discovery, tools/list, the input schema) is not one, so the same
                    # request may run again. The commands are the same either way (the workflow fails with the
                    # outcome at once), so histories from before replay unchanged.
                    if reached:
                        self._record(reason, sent_at, ended=Outcome.REJECTED.value)
                    cls, _ = decisions.classify_failure(None, error)
                    cls = decisions.REFUSAL_CLASSES.get(kind, cls)
                    raise _Ended(
                        Ending(
                            outcome=Outcome.REJECTED,
                            stage=Stage.SUBMITTING,
                            error=error,
                            classification=cls,
                            reason=None if reached else f"refused before tools/call was sent ({kind})",
                        )
                    )
                if verdict == "unreachable":
                    raise _Ended(
                        Ending(
                            outcome=Outcome.REJECTED,
                            stage=Stage.SUBMITTING,
                            error=error,
                            classification=Classification.RETRYABLE,
                            retry_after_s=retry_after or None,
                            reason="server unreachable; tools/call was never sent",
                        )
                    )
                self._record(reason, sent_at, ended=Outcome.UNKNOWN_OUTCOME.value)
                raise _Ended(
                    Ending(
                        outcome=Outcome.UNKNOWN_OUTCOME,
                        stage=Stage.SUBMITTING,
                        error=error,
                        reason=f"tools/call may have reached the server but its reply was lost ({kind})",
                    )
                )
            return self._accepted(out, reason, sent_at)

    def _accepted(self, out: StartCallOutput, reason: str, sent_at: datetime) -> StartCallOutput:
        """``tools/call`` answered: the attempt recorded, the session's era in the ledger, the tool's contract."""
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
                action = (
                    "cancel" if self.m.cancel_reason is not None or self.req.on_input_timeout == "cancel" else "decline"
                )
                why = (
                    f"cancelled ({self.m.cancel_reason})"
                    if self.m.cancel_reason
                    else f"nobody answered within {bound:g}s"
                )
                for key in self._unanswered():
                    self.m.answers[key] = {"action": action}
                    asked = self.m.pending[key].message or key
                    self.m.call_input_note = (
                        f"the server asked for input during tools/call ({asked!r}): answered {action}: {why}"
                    )[:1024]
            self.m.pending = {}
            self._enter(Phase.SUBMITTING, "submitting")

    def _record(self, reason: str, sent_at: datetime, *, ended: str = "in_flight") -> None:
        self.m.attempts.append(
            OperationAttempt(
                n=len(self.m.attempts) + 1,
                reason=reason,  # type: ignore[arg-type]
                at=sent_at,
                ended=ended,
            )
        )

    def _learn_tool(self, out: StartCallOutput) -> None:
        if out.tool is None or self.m.profile is None:
            raise _bug("_learn_tool without a tool or a profile")
        if self.m.output_schema is None and out.tool.output_schema is not None:
            self.m.output_schema = out.tool.output_schema
            self._set_contract()
        # Annotations count only for servers configuration trusts (decisions.annotation_idempotent, the one rule).
        annotated = decisions.annotation_idempotent(
            trusted=self.m.profile.trust_annotations,
            idempotent_hint=out.tool.idempotent_hint,
            read_only_hint=out.tool.read_only_hint,
        )
        if annotated is not None and out.tool.idempotent_hint is None and not workflow.patched(READ_ONLY_IS_IDEMPOTENT):
            annotated = None  # recorded before readOnlyHint alone counted
        if annotated is not None:
            self.m.ledger.idempotency["annotation_idempotent"] = annotated
            self.m.ledger.idempotency["idempotent"] = self._idempotent()
