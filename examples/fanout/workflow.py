"""Example agent step: run several MCP tasks as child workflows and aggregate their outcomes.

Children are started by *type name* (``McpTaskWorkflow``), exactly as a workflow in any other
Temporal SDK language would start them. Each child id is derived from the parent's id and the step
index, so a parent that is retried or replayed re-attaches to its children instead of re-calling tools.

An example, not part of the package: ``McpTasksPlugin`` and ``mcp-tasks worker`` register ``McpTaskWorkflow`` only.
A worker that wants this one registers it beside the plugin (children run on the parent's task queue)::

    plugin = McpTasksPlugin.from_config("worker.toml")
    client = await Client.connect("localhost:7233", plugins=[plugin])
    worker = Worker(client, task_queue="agents", workflows=[McpFanOutWorkflow])  # + McpTaskWorkflow, the activities

``tests/test_workflow.py`` runs it so, against a real MCP server.
"""

from __future__ import annotations

import asyncio

from pydantic import BaseModel, Field
from temporalio import workflow
from temporalio.exceptions import ChildWorkflowError

with workflow.unsafe.imports_passed_through():
    from mcp_temporal_tasks.workflows.mcp_task import initial_search_attributes
    from mcp_temporal_tasks.workflows.records import WORKFLOW_TYPE, McpTaskOutcome, McpTaskRequest, Outcome
    from mcp_temporal_tasks.workflows.task_error import McpTaskError


class FanOutRequest(BaseModel):
    tasks: list[McpTaskRequest] = Field(min_length=1, max_length=100)


class FanOutResult(BaseModel):
    outcomes: list[McpTaskOutcome]
    counts: dict[str, int]
    all_completed: bool
    #: Children whose workflow itself failed (not an MCP outcome: e.g. terminated by an operator).
    child_failures: list[str] = Field(default_factory=list)


@workflow.defn(name="McpFanOutWorkflow")
class McpFanOutWorkflow:
    @workflow.run
    async def run(self, request: FanOutRequest) -> FanOutResult:
        parent = workflow.info().workflow_id

        async def child(i: int, task: McpTaskRequest) -> McpTaskOutcome | str:
            try:
                return await workflow.execute_child_workflow(
                    WORKFLOW_TYPE,
                    task,
                    id=f"{parent}/step-{i}",
                    result_type=McpTaskOutcome,
                    search_attributes=initial_search_attributes(task),
                    static_summary=f"step {i}: MCP {task.tool}",
                )
            except ChildWorkflowError as err:
                # A task that did not complete fails its workflow with the outcome inside: unwrap it.
                return McpTaskError.outcome_of(err) or f"step {i}: {err.cause or err}"

        results = await asyncio.gather(*(child(i, t) for i, t in enumerate(request.tasks)))
        outcomes = [r for r in results if isinstance(r, McpTaskOutcome)]
        counts: dict[str, int] = {}
        for o in outcomes:
            counts[o.outcome.value] = counts.get(o.outcome.value, 0) + 1
        return FanOutResult(
            outcomes=outcomes,
            counts=counts,
            all_completed=len(outcomes) == len(results) and all(o.outcome == Outcome.COMPLETED for o in outcomes),
            child_failures=[r for r in results if isinstance(r, str)],
        )
