"""The workflow's query, updates (with their validators) and signals.

The ``status`` query; the ``cancel``, ``approve_replay`` and ``provide_input`` updates; the 2025-11-25 input relay's
signals and query; the push hub's ``mcp_task_notified`` signal; ``mcp_task_consent`` (a consent's answer, or a
nudge). A handler only records (in :class:`~mcp_temporal_tasks.workflows.records.MachineState`); the phase waiting on
it acts.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    import jsonschema
    from pydantic import ValidationError

    from mcp_temporal_tasks.activities.activity_io import (
        CONSENT_SIGNAL,
        TASK_NOTIFIED_SIGNAL,
        ConsentAnswered,
        LegacyInputRequest,
        TaskNotified,
    )
    from mcp_temporal_tasks.activities.relay import INPUT_DELIVERED_SIGNAL, INPUT_REQUESTED_SIGNAL, RELAY_STATE_QUERY
    from mcp_temporal_tasks.protocol.elicitation import with_defaults
    from mcp_temporal_tasks.workflows.phases.machine import TaskMachine
    from mcp_temporal_tasks.workflows.phases.patches import NOTIFIED_WAKES
    from mcp_temporal_tasks.workflows.records import LegacyInputRecord, PendingInput, Phase, TaskView

#: Statuses a notification may wake a wait for (never ``working``).
_WAKE_STATUSES = ("input_required", "completed", "failed", "cancelled")
#: Wakes one task may act on: one per status and input round, whatever a server repeats.
_MAX_WAKES = 16
#: Consent answers one wait keeps before it looks at them (each is one ``consent_check``).
_MAX_CONSENT_REFS = 4


class Messages(TaskMachine):
    """The query, updates and signals (names as in ``activities.activity_io``, ``activities.relay`` and the schemas)."""

    @workflow.query
    def status(self) -> TaskView:
        return TaskView(
            workflow_id=workflow.info().workflow_id,
            phase=self.state.phase,
            tool=self.req.tool,
            server=self.state.ledger.server,
            task_id=self.state.task_state.task_id if self.state.task_state else None,
            task_status=self.state.task_state.status if self.state.task_state else None,
            status_message=self.state.task_state.status_message if self.state.task_state else None,
            era=self.state.task_state.era if self.state.task_state else self.state.ledger.era,
            pending_inputs=list(self.state.pending.values()),
            protocol_version=self.state.ledger.protocol_version,
            operation_attempts=self.state.attempts,
            outcome=self.state.outcome.outcome if self.state.outcome else None,
            ledger=self.state.ledger,
            delivered_by=self.state.delivered_by,
            authorization=self.state.authorization,
        )

    @workflow.update
    def cancel(self, reason: str = "cancelled by request") -> str:
        self.state.cancel_reason = reason
        return self.state.phase.value

    @cancel.validator
    def _validate_cancel(self, reason: str = "cancelled by request") -> None:
        if self.state.phase == Phase.DONE:
            raise ValueError("the task has already ended")

    @workflow.update
    def approve_replay(self) -> int:
        self.state.approved = True
        return len(self.state.attempts) + 1

    @approve_replay.validator
    def _validate_approve(self) -> None:
        if self.state.phase != Phase.AWAITING_APPROVAL:
            raise ValueError(f"nothing to approve: the task is {self.state.phase.value}, not AWAITING_APPROVAL")

    @workflow.update
    def provide_input(self, responses: dict[str, dict[str, Any]]) -> list[str]:
        # SEP-1034: an accept that omits a property with a default in the form gets the default.
        self.state.answers.update(
            {
                k: with_defaults(v, self.state.pending[k].requested_schema) if k in self.state.pending else v
                for k, v in responses.items()
            }
        )
        return sorted(k for k in self.state.pending if k not in self.state.answers)

    @workflow.signal(name=INPUT_REQUESTED_SIGNAL)
    def _legacy_input_requested(self, req: LegacyInputRequest) -> None:
        # A re-sent request (same content) keeps its first record and, if answered, its answer.
        self.state.legacy_inputs[req.key] = LegacyInputRecord(rpc_id=req.rpc_id)
        if req.key not in self.state.answers:
            self.state.pending[req.key] = PendingInput.from_params(req.key, req.method, req.params)

    @workflow.signal(name=INPUT_DELIVERED_SIGNAL)
    def _legacy_input_delivered(self, key: str) -> None:
        if key in self.state.legacy_inputs:
            self.state.legacy_inputs[key].delivered = True

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
        task = self.state.task_state
        if (
            task is None
            or n.task_id != task.task_id
            or self.state.phase != Phase.WORKING
            or n.status not in _WAKE_STATUSES
        ):
            return
        key = f"{n.status}#{len(self.state.answered_keys)}"
        if key in self.state.wakes or len(self.state.wakes) >= _MAX_WAKES or not workflow.patched(NOTIFIED_WAKES):
            return
        self.state.wakes.append(key)
        self.state.wake, self.state.wake_via = n.status, n.via

    @workflow.signal(name=CONSENT_SIGNAL)
    def _consent_answered(self, answer: Any) -> None:
        """A callback kept a consent's answer under an opaque id (``ref``), or a grant may have been given (no
        ``ref``): the wait looks (``consent_check`` decides). Only in AWAITING_AUTHORIZATION, bounded, decoded here:
        a malformed, repeated or late signal changes nothing."""
        try:
            a = answer if isinstance(answer, ConsentAnswered) else ConsentAnswered.model_validate(answer or {})
        except ValidationError:
            return
        if self.state.phase != Phase.AWAITING_AUTHORIZATION:
            return
        if a.ref is None:
            self.state.consent_nudged = True
        elif a.ref not in self.state.consent_refs and len(self.state.consent_refs) < _MAX_CONSENT_REFS:
            self.state.consent_refs.append(a.ref)

    @workflow.query(name=RELAY_STATE_QUERY)
    def _legacy_relay_state(self) -> dict[str, dict[str, Any]]:
        return {
            k: {**v.model_dump(mode="json"), "answer": self.state.answers.get(k)}
            for k, v in self.state.legacy_inputs.items()
        }

    @provide_input.validator
    def _validate_input(self, responses: dict[str, dict[str, Any]]) -> None:
        if self.state.phase != Phase.INPUT_REQUIRED or not self.state.pending:
            raise ValueError("no input is outstanding")
        if not responses:
            raise ValueError("no responses given")
        for key, response in responses.items():
            pending = self.state.pending.get(key)
            if pending is None:
                raise ValueError(f"input {key!r} is not outstanding (outstanding: {sorted(self.state.pending)})")
            validate_input_response(pending, response)


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
            raise ValueError(
                f"input {pending.key!r}: the server's requestedSchema is unusable "
                f"({type(exc).__name__}); answer decline or cancel"
            ) from None
