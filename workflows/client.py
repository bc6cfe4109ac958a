"""Starting and reading MCP task workflows from application services.

``start_mcp_task`` is idempotent: the same ``workflow_id`` (derive it from your own request id) always
returns the same workflow, running or finished, and never sends a second ``tools/call``.
"""

from __future__ import annotations

import hashlib

from typing import Any

from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError

from mcp_temporal_tasks.activities.wire.contract import canonical_json
from mcp_temporal_tasks.workflows.errors import McpTaskError
from mcp_temporal_tasks.workflows.mcp_task import McpTaskWorkflow, initial_search_attributes
from mcp_temporal_tasks.workflows.models import DEFAULT_TASK_QUEUE, McpTaskOutcome, McpTaskRequest, check_request_size


def default_workflow_id(request: McpTaskRequest) -> str:
    """A deterministic id: the idempotency key when given, else a digest of the whole request."""
    if request.idempotency_key:
        return f"mcp-task-{request.idempotency_key}"
    body = canonical_json(request.model_dump(mode="json", exclude={"timeouts"}))
    return f"mcp-task-{hashlib.sha256(body.encode()).hexdigest()[:32]}"


async def start_mcp_task(
    client: Client,
    request: McpTaskRequest,
    *,
    workflow_id: str | None = None,
    task_queue: str = DEFAULT_TASK_QUEUE,
) -> WorkflowHandle[McpTaskWorkflow, McpTaskOutcome]:
    """Start (or attach to) the workflow for ``request``. Safe to call again with the same id.

    A running workflow with this id is reused (``USE_EXISTING``); a finished one is never re-run
    (``REJECT_DUPLICATE``): its handle is returned so the caller reads the stored outcome.

    Raises :class:`~mcp_temporal_tasks.workflows.models.RequestTooLarge` (naming the limit) before anything starts when the
    arguments are too large to carry through Temporal.
    """
    check_request_size(request.arguments)
    wid = workflow_id or default_workflow_id(request)
    try:
        return await client.start_workflow(
            McpTaskWorkflow.run, request, id=wid, task_queue=task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
            search_attributes=initial_search_attributes(request),
            static_summary=f"MCP {request.tool} on {request.server_label()}",
            static_details=f"tool `{request.tool}` · server `{request.server_label()}` · "
                           f"replay `{(request.replay.value if request.replay else 'configured')}`",
        )
    except WorkflowAlreadyStartedError:
        return client.get_workflow_handle_for(McpTaskWorkflow.run, wid)


async def get_outcome(client: Client, workflow_id: str) -> McpTaskOutcome:
    """Wait for and return the outcome of an MCP task workflow, whatever it is (see :func:`outcome_of`)."""
    return await outcome_of(client.get_workflow_handle_for(McpTaskWorkflow.run, workflow_id))


async def outcome_of(handle: WorkflowHandle[Any, Any]) -> McpTaskOutcome:
    """Wait for the task's end and return its outcome, whatever it is.

    ``handle.result()`` returns the outcome of a ``completed`` task only: every other outcome fails the
    workflow with :class:`~mcp_temporal_tasks.workflows.errors.McpTaskError` (so Temporal shows it as failed);
    this unwraps it. A workflow that failed for another reason (terminated, timed out) still raises.
    """
    try:
        return await handle.result()
    except WorkflowFailureError as err:
        outcome = McpTaskError.outcome_of(err)
        if outcome is None:
            raise
        return outcome


async def is_running(client: Client, workflow_id: str) -> bool:
    desc = await client.get_workflow_handle(workflow_id).describe()
    return desc.status == WorkflowExecutionStatus.RUNNING
