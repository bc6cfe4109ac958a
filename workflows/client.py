"""Starting and reading MCP task workflows from application services.

``start_mcp_task`` is idempotent: the same ``workflow_id`` (derive it from your own request id) always
returns the same workflow, running or finished, and never sends a second ``tools/call``.
"""

from __future__ import annotations

import hashlib
from typing import Any

from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import CancelledError, WorkflowAlreadyStartedError

from mcp_temporal_tasks.activities.models import OUTCOME_MEMO
from mcp_temporal_tasks.activities.wire.contract import canonical_json
from mcp_temporal_tasks.workflows.errors import McpTaskError
from mcp_temporal_tasks.workflows.mcp_task import McpTaskWorkflow, initial_search_attributes
from mcp_temporal_tasks.workflows.models import DEFAULT_TASK_QUEUE, McpTaskOutcome, McpTaskRequest, check_request_size


class RequestMismatch(ValueError):
    """The workflow id is already taken by a task of a *different* request (another tool or other arguments).

    Raised by :func:`start_mcp_task` instead of returning that task's handle: its outcome answers another
    request. ``workflow_id``, ``existing_digest`` and ``request_digest`` say which.
    """

    def __init__(self, workflow_id: str, existing_digest: str, request_digest: str, detail: str) -> None:
        super().__init__(f"workflow id {workflow_id!r} is already used by a different request ({detail}); "
                         "use another workflow id (or idempotency key) for a new request")
        self.workflow_id = workflow_id
        self.existing_digest = existing_digest
        self.request_digest = request_digest


async def _existing_request(handle: WorkflowHandle[Any, Any]) -> tuple[str, str] | None:
    """(tool, request digest) of the task behind ``handle``: from its memo (written when it ends), else from its
    start event (readable while it runs, with or without a worker). None when neither can be read."""
    from mcp_temporal_tasks.activities.wire.contract import digest

    try:
        desc = await handle.describe()
        memo = await desc.memo()
        ledger = memo.get("ledger") if isinstance(memo, dict) else None
        if isinstance(ledger, dict) and ledger.get("request_digest"):
            return str(ledger.get("tool")), str(ledger["request_digest"])
        async for event in handle.fetch_history_events(page_size=1):
            attrs = event.workflow_execution_started_event_attributes
            if not attrs.input.payloads:
                return None
            values = await handle._client.data_converter.decode(attrs.input.payloads, [dict])
            raw = values[0] if values and isinstance(values[0], dict) else {}
            arguments = raw.get("arguments") if isinstance(raw.get("arguments"), dict) else {}
            return str(raw.get("tool")), digest(arguments)
    except Exception:  # unreadable (e.g. not permitted): the id's usual idempotency stands
        return None
    return None


async def _check_same_request(handle: WorkflowHandle[Any, Any], request: McpTaskRequest) -> None:
    from mcp_temporal_tasks.activities.wire.contract import digest

    existing = await _existing_request(handle)
    if existing is None:
        return
    tool, existing_digest = existing
    wanted = digest(request.arguments)
    if tool != request.tool:
        raise RequestMismatch(handle.id, existing_digest, wanted, f"tool {tool!r}, not {request.tool!r}")
    if existing_digest != wanted:
        raise RequestMismatch(handle.id, existing_digest, wanted,
                              f"arguments digest {existing_digest[:19]}…, not {wanted[:19]}…")


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
    replace_failed: bool = False,
) -> WorkflowHandle[McpTaskWorkflow, McpTaskOutcome]:
    """Start (or attach to) the workflow for ``request``. Safe to call again with the same id.

    A running workflow with this id is reused (``USE_EXISTING``); a finished one is never re-run
    (``REJECT_DUPLICATE``): its handle is returned so the caller reads the stored outcome. ``replace_failed``: a
    finished run that *failed* may be replaced (``ALLOW_DUPLICATE_FAILED_ONLY``): for a caller that knows it was
    refused before anything was sent (``rejected``, no ``tools/call``); a completed one still stands.

    Raises :class:`~mcp_temporal_tasks.workflows.models.RequestTooLarge` (naming the limit) before anything starts when the
    arguments are too large to carry through Temporal, and :class:`RequestMismatch` when the id already belongs to
    a task of a different request (another tool, or arguments with another digest): never another request's
    outcome.
    """
    check_request_size(request.arguments)
    wid = workflow_id or default_workflow_id(request)
    try:
        handle = await client.start_workflow(
            McpTaskWorkflow.run, request, id=wid, task_queue=task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            id_reuse_policy=(WorkflowIDReusePolicy.ALLOW_DUPLICATE_FAILED_ONLY if replace_failed
                             else WorkflowIDReusePolicy.REJECT_DUPLICATE),
            search_attributes=initial_search_attributes(request),
            static_summary=f"MCP {request.tool} on {request.server_label()}",
            static_details=f"tool `{request.tool}` · server `{request.server_label()}` · "
                           f"replay `{(request.replay.value if request.replay else 'configured')}`",
        )
    except WorkflowAlreadyStartedError:
        handle = client.get_workflow_handle_for(McpTaskWorkflow.run, wid)
        await _check_same_request(handle, request)
        return handle
    response = getattr(handle, "_start_workflow_response", None)
    if response is None or not getattr(response, "started", True):  # attached to a running one (USE_EXISTING)
        await _check_same_request(handle, request)
    return handle


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
        if outcome is None and isinstance(err.cause, CancelledError):
            # Cancelled on purpose shows as Canceled; its outcome is in the memo.
            memo = await (await handle.describe()).memo()
            outcome = McpTaskOutcome.model_validate(memo[OUTCOME_MEMO]) if OUTCOME_MEMO in memo else None
        if outcome is None:
            raise
        return outcome
