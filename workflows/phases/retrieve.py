"""RETRIEVING: a terminal task's payload, read again and again (never re-calling the tool), and the ending it makes.

Retried alone, bounded by the task's TTL or the deadline; a retrieval that fails never justifies a replay. The
payload, wherever it was read (a synchronous answer, a wait's own read, a relay, a settled cancel), becomes the
task's ending in one place: :meth:`RetrievePhase._ended_from_payload`.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from mcp_temporal_tasks.activities.activity_io import DecodedPayload, RetrieveInput
    from mcp_temporal_tasks.activities.defs import McpActivityDefs as McpActivities  # stubs: names, no wire
    from mcp_temporal_tasks.protocol.tasks import LEGACY
    from mcp_temporal_tasks.workflows import decisions
    from mcp_temporal_tasks.workflows.failure_decoding import attempts_text, last_read_failure
    from mcp_temporal_tasks.workflows.options import RETRIEVE, read_budget
    from mcp_temporal_tasks.workflows.phases.base import TaskMachine, _bug, _Ended, _short
    from mcp_temporal_tasks.workflows.phases.patches import ERROR_REPLY_NEVER_REPLAYS, RETRIEVAL_NEVER_REPLAYS
    from mcp_temporal_tasks.workflows.records import Ending, Outcome, Phase, ResultRef, Stage


class RetrievePhase(TaskMachine):
    """RETRIEVING, and the ending a payload makes."""

    async def _retrieve(self) -> DecodedPayload:
        """RETRIEVING: read the payload again and again, never re-calling the tool."""
        if self.m.task_state is None or self.m.session is None:
            raise _bug("_retrieve without a task or a session")
        self._enter(Phase.RETRIEVING)
        started = workflow.now()
        budget = decisions.retrieval_budget_s(
            self.m.task_state.created_at, self.m.task_state.ttl_ms, workflow.now(), self.req.deadline
        )
        try:
            out = await workflow.execute_activity_method(
                McpActivities.retrieve_result,
                RetrieveInput(
                    session=self.m.session,
                    job=self._job(),
                    state=self.m.task_state,
                    principal=self._principal(),
                    output_schema=self.m.output_schema,
                ),
                **self._config(
                    RETRIEVE,
                    **read_budget(budget, max_interval_s=60.0),
                    summary=f"tasks/result {_short(self.m.task_state.task_id)}",
                ),
            )
        except ActivityError as err:
            kind, info, last = last_read_failure(err)
            self.m.ledger.last_retrieval = f"gave up: {kind}"
            why = (
                f"reading its payload failed ({attempts_text(info, started)} of a {budget:.0f}s budget; last: "
                f"{kind}: {info.get('message', '')})"
            )
            if workflow.patched(RETRIEVAL_NEVER_REPLAYS):
                outcome, error = decisions.unretrieved_outcome(
                    self.m.task_state.status, self.m.task_state.status_message
                )
                raise _Ended(
                    Ending(
                        outcome=outcome,
                        stage=Stage.RETRIEVING,
                        error=error or last,
                        reason=f"the server reported the task {self.m.task_state.status}, but {why}; not replayed",
                    )
                )
            # Histories from before the patch: a retrieval failure was taken for a task gone.
            raise _Ended(
                Ending(
                    outcome=Outcome.LOST,
                    stage=Stage.GONE,
                    reason=f"the task ended {self.m.task_state.status} but its payload could not be "
                    f"retrieved ({kind}) within {budget:.0f}s",
                )
            )
        if out.payload is None:
            self.m.ledger.last_retrieval = "not_found" if out.not_found else "unreachable"
            outcome = (
                decisions.not_found_outcome(self.m.task_state.created_at, self.m.task_state.ttl_ms, workflow.now())
                if out.not_found
                else Outcome.LOST
            )
            # The operation is done whatever became of its payload: never a reason for a second tools/call.
            stage = Stage.RETRIEVING if workflow.patched(RETRIEVAL_NEVER_REPLAYS) else Stage.GONE
            raise _Ended(
                Ending(
                    outcome=outcome,
                    stage=stage,
                    reason=(out.unreachable or "payload purged before it was read")
                    + f" (the server had reported the task {self.m.task_state.status})",
                )
            )
        return out.payload

    def _ended_from_payload(self, status: str, payload: DecodedPayload, stage: Stage) -> _Ended:
        """The task's own end, from the payload read at ``stage`` (SUBMITTING for a synchronous answer, PAYLOAD for
        a task's stored payload, CANCELLING when a cancel found the task already ended)."""
        self.m.ledger.last_retrieval = "ok" if not payload.decode_error else "decode_failed"
        outcome, error = decisions.terminal_outcome(
            status,
            result=payload.result
            if payload.result is not None
            else ({"content": [], "isError": bool(payload.result_ref.get("is_error"))} if payload.result_ref else None),
            error=payload.error,
            empty=payload.empty,
            decode_error=payload.decode_error,
            status_message=self.m.task_state.status_message if self.m.task_state else None,
        )
        ending = Ending(
            outcome=outcome,
            stage=stage,
            result=payload.result,
            error=error,
            result_ref=ResultRef(**payload.result_ref) if payload.result_ref else None,
        )
        if payload.decode_error:
            ending.raw_payload, ending.reason = payload.raw, payload.decode_error
        if outcome in (Outcome.TOOL_ERROR, Outcome.FAILED):
            ending.classification, ending.retry_after_s = decisions.classify_failure(
                payload.result, error, self.m.task_state.status_message if self.m.task_state else None
            )
            from_error_reply = (
                payload.error is not None
                and self._job() is None
                and self.m.task_state is not None
                and self.m.task_state.era == LEGACY
            )
            if (
                from_error_reply
                and decisions.replay_reason(stage, outcome, ending.classification) is not None
                and workflow.patched(ERROR_REPLY_NEVER_REPLAYS)
            ):
                ending.stage = Stage.ERROR_REPLY
        return _Ended(ending)
