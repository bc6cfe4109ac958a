"""DONE: the outcome, once. The last attempt's end, the ledger's terminal state, search attributes, memo, the
workflow's details and the outcome metrics."""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from mcp_temporal_tasks.protocol.eras import protocol_label
    from mcp_temporal_tasks.workflows.phases.base import TaskMachine
    from mcp_temporal_tasks.workflows.phases.patches import SEARCHABLE_PHASES
    from mcp_temporal_tasks.workflows.records import SA_OUTCOME, SA_STATUS, Ending, McpTaskOutcome, Phase
    from mcp_temporal_tasks.workflows.task_error import finished_details

#: Server task statuses that already say how a task ended (kept as ``McpTaskStatus`` at the end).
_TERMINAL_STATUSES = ("completed", "failed", "cancelled")


class FinishPhase(TaskMachine):
    """DONE."""

    def _finish(self, ending: Ending) -> McpTaskOutcome:
        outcome = ending.outcome
        if self.m.attempts and self.m.attempts[-1].ended == "in_flight":
            self.m.attempts[-1].ended = outcome.value
        self.m.ledger.terminal_state = outcome.value
        self._move(Phase.DONE)
        self.m.outcome = McpTaskOutcome(
            workflow_id=workflow.info().workflow_id,
            outcome=outcome,
            task_id=self.m.task_state.task_id
            if self.m.task_state
            else (self.m.attempts[-1].task_id if self.m.attempts else None),
            task_status=self.m.task_state.status if self.m.task_state else None,
            status_message=self.m.task_state.status_message if self.m.task_state else None,
            era=self.m.ledger.era,
            protocol_version=self.m.ledger.protocol_version,
            operation_attempts=self.m.attempts,
            ledger=self.m.ledger,
            delivered_by=self.m.delivered_by,
            **ending.outcome_fields(),
        )
        final_status = self.m.task_state.status if self.m.task_state else outcome.value
        if (
            final_status not in _TERMINAL_STATUSES
            and final_status != outcome.value
            and workflow.patched(SEARCHABLE_PHASES)
        ):
            final_status = outcome.value  # a finished task is not listed as `working`
        workflow.upsert_search_attributes([SA_OUTCOME.value_set(outcome.value), SA_STATUS.value_set(final_status)])
        workflow.upsert_memo({"ledger": self.m.ledger.model_dump(mode="json")})
        # Not a command (the UI reads it by query): every ending readable on the workflow's page, a Canceled one's
        # too, whose cancellation carries no failure to show (issue 43); and the protocol the task ran on.
        how = {
            "notification": "its end was learned from a notification",
            "poll": "its end was learned by a poll",
            "list": "its end was learned from the server's tasks/list",
        }
        protocol = protocol_label(self.m.ledger.era, self.m.ledger.protocol_version)
        workflow.set_current_details(
            finished_details(self.m.outcome)
            + (f"\n\nprotocol {protocol}" if protocol else "")
            + (f"\n\n{how[self.m.delivered_by]}" if self.m.delivered_by in how else "")
        )
        workflow.metric_meter().create_counter("mcp_tasks_outcomes", "MCP tasks by outcome").add(
            1, {"outcome": outcome.value, "tool": self.req.tool}
        )
        if self.m.delivered_by is not None:
            workflow.metric_meter().create_counter(
                "mcp_tasks_deliveries", "task ends learned, by a server's notification or by a poll"
            ).add(1, {"server": self.m.ledger.server, "delivered_by": self.m.delivered_by})
        replays = max(0, len(self.m.attempts) - 1)
        if replays:
            workflow.metric_meter().create_counter("mcp_tasks_replays", "tools/call replays").add(
                replays, {"tool": self.req.tool}
            )
        return self.m.outcome
