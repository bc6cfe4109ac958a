"""RETRIEVING: a terminal task's payload, read again and again (never re-calling the tool), and the ending it makes.

Retried alone, bounded by the task's TTL or the deadline; a retrieval that fails never justifies a replay.
"""

from __future__ import annotations

from datetime import datetime

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from mcp_temporal_tasks.activities.activity_io import RetrieveInput
    from mcp_temporal_tasks.activities.defs import McpActivityDefs
    from mcp_temporal_tasks.protocol.limits import short_id
    from mcp_temporal_tasks.protocol.tasks import TaskState
    from mcp_temporal_tasks.workflows import decisions
    from mcp_temporal_tasks.workflows.failure_decoding import attempts_text, last_read_failure
    from mcp_temporal_tasks.workflows.options import RETRIEVE, read_budget
    from mcp_temporal_tasks.workflows.phases import endings
    from mcp_temporal_tasks.workflows.phases.machine import TaskMachine, bug
    from mcp_temporal_tasks.workflows.phases.patches import RETRIEVAL_NEVER_REPLAYS
    from mcp_temporal_tasks.workflows.phases.steps import Ended, Retrieve, Step
    from mcp_temporal_tasks.workflows.records import Ending, Outcome, Phase, Stage


async def retrieve(mc: TaskMachine, step: Retrieve) -> Step:
    """Read the payload of the task ``mc.state.task_state`` shows terminal, within its budget; the ending it makes."""
    task = mc.state.task_state
    if task is None or mc.state.session is None:
        raise bug("retrieve without a task or a session")
    mc.enter(Phase.RETRIEVING)
    started = workflow.now()
    budget = decisions.retrieval_budget_s(task.created_at, task.ttl_ms, workflow.now(), mc.req.deadline)
    try:
        out = await workflow.execute_activity_method(
            McpActivityDefs.retrieve_result,
            RetrieveInput(
                session=mc.state.session,
                job=mc.job(),
                state=task,
                principal=mc.principal(),
                output_schema=mc.state.output_schema,
            ),
            **mc.config(
                RETRIEVE, **read_budget(budget, max_interval_s=60.0), summary=f"tasks/result {short_id(task.task_id)}"
            ),
        )
    except ActivityError as err:
        return Ended(_gave_up(mc, task, err, started, budget))
    if out.payload is None:
        mc.state.ledger.last_retrieval = "not_found" if out.not_found else "unreachable"
        outcome = (
            decisions.not_found_outcome(task.created_at, task.ttl_ms, workflow.now()) if out.not_found else Outcome.LOST
        )
        # The operation is done whatever became of its payload: never a reason for a second tools/call.
        stage = Stage.RETRIEVING if workflow.patched(RETRIEVAL_NEVER_REPLAYS) else Stage.GONE
        return Ended(
            Ending(
                outcome=outcome,
                stage=stage,
                reason=(out.unreachable or "payload purged before it was read")
                + f" (the server had reported the task {task.status})",
            )
        )
    ending = endings.from_payload(mc, task.status, out.payload, step.stage)
    if step.stage == Stage.CANCELLING:
        endings.found_ended(mc, ending)
    return Ended(ending)


def _gave_up(mc: TaskMachine, task: TaskState, err: ActivityError, started: datetime, budget: float) -> Ending:
    """The retrieval's budget ran out: the server's own outcome for the task (or ``result_unavailable``), never lost."""
    kind, info, last = last_read_failure(err)
    mc.state.ledger.last_retrieval = f"gave up: {kind}"
    why = (
        f"reading its payload failed ({attempts_text(info, started)} of a {budget:.0f}s budget; last: "
        f"{kind}: {info.get('message', '')})"
    )
    if workflow.patched(RETRIEVAL_NEVER_REPLAYS):
        outcome, error = decisions.unretrieved_outcome(task.status, task.status_message)
        return Ending(
            outcome=outcome,
            stage=Stage.RETRIEVING,
            error=error or last,
            reason=f"the server reported the task {task.status}, but {why}; not replayed",
        )
    # Histories from before the patch: a retrieval failure was taken for a task gone.
    return Ending(
        outcome=Outcome.LOST,
        stage=Stage.GONE,
        reason=f"the task ended {task.status} but its payload could not be retrieved ({kind}) within {budget:.0f}s",
    )


__all__ = ["retrieve"]
