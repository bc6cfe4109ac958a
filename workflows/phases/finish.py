"""DONE: the outcome, once: the last attempt's end, the ledger, search attributes, memo, details, metrics."""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from mcp_temporal_tasks.protocol.eras import protocol_label
    from mcp_temporal_tasks.workflows import decisions
    from mcp_temporal_tasks.workflows.phases.machine import TaskMachine
    from mcp_temporal_tasks.workflows.phases.patches import ENDING_MEMO, SEARCHABLE_PHASES
    from mcp_temporal_tasks.workflows.records import SA_OUTCOME, SA_STATUS, Ending, McpTaskOutcome, Phase
    from mcp_temporal_tasks.workflows.task_error import ENDING_MEMO as ENDING_MEMO_KEY
    from mcp_temporal_tasks.workflows.task_error import ending_memo, finished_details

#: Server task statuses that already say how a task ended (kept as ``McpTaskStatus`` at the end).
_TERMINAL_STATUSES = ("completed", "failed", "cancelled")


def finish(mc: TaskMachine, ending: Ending) -> McpTaskOutcome:
    """The task's outcome from its last operation's ending; the machine moves to DONE."""
    outcome = ending.outcome
    if mc.state.attempts and mc.state.attempts[-1].ended == "in_flight":
        mc.state.attempts[-1].ended = outcome.value
    mc.state.ledger.terminal_state = outcome.value
    mc.move(Phase.DONE)
    mc.state.outcome = McpTaskOutcome(
        workflow_id=workflow.info().workflow_id,
        outcome=outcome,
        task_id=mc.state.task_state.task_id
        if mc.state.task_state
        else (mc.state.attempts[-1].task_id if mc.state.attempts else None),
        task_status=mc.state.task_state.status if mc.state.task_state else None,
        status_message=mc.state.task_state.status_message if mc.state.task_state else None,
        era=mc.state.ledger.era,
        protocol_version=mc.state.ledger.protocol_version,
        operation_attempts=mc.state.attempts,
        ledger=mc.state.ledger,
        delivered_by=mc.state.delivered_by,
        **ending.outcome_fields(),
    )
    final_status = mc.state.task_state.status if mc.state.task_state else outcome.value
    if final_status not in _TERMINAL_STATUSES and final_status != outcome.value and workflow.patched(SEARCHABLE_PHASES):
        final_status = outcome.value  # a finished task is not listed as `working`
    workflow.upsert_search_attributes([SA_OUTCOME.value_set(outcome.value), SA_STATUS.value_set(final_status)])
    memo: dict[str, object] = {"ledger": mc.state.ledger.model_dump(mode="json")}
    if workflow.patched(ENDING_MEMO):
        memo[ENDING_MEMO_KEY] = ending_memo(mc.state.outcome)
    workflow.upsert_memo(memo)
    # Not a command (the UI reads it by query): every ending readable on the workflow's page, a Canceled one's
    # too, whose cancellation carries no failure to show (issue 43); and the protocol the task ran on.
    how = {
        "notification": "its end was learned from a notification",
        "poll": "its end was learned by a poll",
        "list": "its end was learned from the server's tasks/list",
    }
    protocol = protocol_label(mc.state.ledger.era, mc.state.ledger.protocol_version)
    workflow.set_current_details(
        finished_details(mc.state.outcome)
        + (f"\n\nprotocol {protocol}" if protocol else "")
        + (f"\n\n{how[mc.state.delivered_by]}" if mc.state.delivered_by in how else "")
    )
    workflow.metric_meter().create_counter("mcp_tasks_outcomes", "MCP tasks by outcome").add(
        1, {"outcome": outcome.value, "tool": mc.req.tool}
    )
    if mc.state.delivered_by is not None:
        workflow.metric_meter().create_counter(
            "mcp_tasks_deliveries", "task ends learned, by a server's notification or by a poll"
        ).add(1, {"server": mc.state.ledger.server, "delivered_by": mc.state.delivered_by})
    replays = decisions.replays_used([a.reason for a in mc.state.attempts])
    if replays:
        workflow.metric_meter().create_counter("mcp_tasks_replays", "tools/call replays").add(
            replays, {"tool": mc.req.tool}
        )
    return mc.state.outcome
