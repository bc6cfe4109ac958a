"""``McpTasksClient``: MCP tools as durable tasks from inside any workflow.

Each call is a child ``McpTaskWorkflow`` whose id is derived from the parent's workflow id and a per-parent sequence
number (or the idempotency key), so a parent that is replayed, recovers from a crash or is reset re-attaches to the
same child and never sends a second ``tools/call``. How to use it, and the switch from ``temporalio.mcp``:
docs/temporal-apps.md.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import CancelledError, ChildWorkflowError, WorkflowAlreadyStartedError

with workflow.unsafe.imports_passed_through():
    import mcp_types

    from mcp_temporal_tasks.activities.activity_io import FetchOutcomeInput, ListToolsInput
    from mcp_temporal_tasks.activities.defs import FETCH_OUTCOME, LIST_TOOLS
    from mcp_temporal_tasks.protocol.tasks import Endpoint, Era
    from mcp_temporal_tasks.workflows.mcp_task import McpTaskWorkflow
    from mcp_temporal_tasks.workflows.records import McpTaskOutcome, McpTaskRequest, Outcome, ReplayPolicy, Timeouts
    from mcp_temporal_tasks.workflows.task_error import McpTaskError

RESULT_REF_META = "io.github.mcp-temporal-tasks/result-ref"
_SEQ_ATTR = "_mcp_tasks_client_seq"


class McpTasksClient:
    """A workflow-side proxy for one MCP server (a name from the workers' configuration, or an Endpoint).

    The child runs on the parent's task queue unless told otherwise: register the workflows there with
    :class:`~mcp_temporal_tasks.McpTasksPlugin`. :meth:`call_tool` returns the ``CallToolResult`` for ``completed``
    and ``tool_error`` (a tool error is a normal result with ``isError`` true, as in ``temporalio.mcp``) and raises
    :class:`McpTaskError` (an ``ApplicationError`` whose ``outcome`` is the whole :class:`McpTaskOutcome`) for every
    other outcome; :meth:`run` returns the :class:`McpTaskOutcome` whatever it is, and never raises for an MCP
    outcome; :meth:`list_tools` runs one activity and caches the answer on this object.
    """

    def __init__(
        self,
        server: str | Endpoint,
        *,
        task_queue: str | None = None,
        principal: str | None = None,
        era: Era | None = None,
        timeouts: Timeouts | None = None,
        cache_tools_list: bool = True,
    ) -> None:
        self._server = server
        self._task_queue = task_queue
        self._principal = principal
        self._era = era
        self._timeouts = timeouts
        self._cache_tools_list = cache_tools_list
        self._tools: mcp_types.ListToolsResult | None = None

    @property
    def name(self) -> str:
        return self._server if isinstance(self._server, str) else self._server.identity()

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        *,
        idempotency_key: str | None = None,
        replay: ReplayPolicy | str | None = None,
        idempotent: bool | None = None,
        ttl_s: float | None = None,
        deadline: datetime | None = None,
        child_id: str | None = None,
    ) -> mcp_types.CallToolResult:
        """Call a tool as a durable task. ``completed``/``tool_error`` → the result; else :class:`McpTaskError`."""
        outcome = await self.run(
            name,
            arguments,
            idempotency_key=idempotency_key,
            replay=replay,
            idempotent=idempotent,
            ttl_s=ttl_s,
            deadline=deadline,
            child_id=child_id,
        )
        return call_tool_result(outcome)

    async def run(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        *,
        idempotency_key: str | None = None,
        replay: ReplayPolicy | str | None = None,
        idempotent: bool | None = None,
        ttl_s: float | None = None,
        deadline: datetime | None = None,
        child_id: str | None = None,
    ) -> McpTaskOutcome:
        """Run a tool as a child ``McpTaskWorkflow`` and return its outcome, whatever it is.

        ``child_id``: the child's workflow id, when the caller derives its own deterministic one (the agent
        adapters use the parent's id, the tool and an argument digest); default: the parent's id and a sequence
        number (or the idempotency key)."""
        request = McpTaskRequest(
            server=self._server,
            tool=name,
            arguments=arguments or {},
            era=self._era,
            ttl_s=ttl_s,
            deadline=deadline,
            idempotency_key=idempotency_key,
            replay=ReplayPolicy(replay) if replay is not None else None,
            idempotent=idempotent,
            principal=self._principal,
            timeouts=self._timeouts or Timeouts(),
        )
        child_id = child_id or self._child_id(idempotency_key)
        try:
            # REJECT_DUPLICATE: a reset parent must find the child its earlier run started, never start another.
            return await workflow.execute_child_workflow(
                McpTaskWorkflow.run,
                request,
                id=child_id,
                task_queue=self._task_queue,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                static_summary=f"MCP {name} on {request.server_label()}"[:200],
            )
        except ChildWorkflowError as err:
            outcome = McpTaskError.outcome_of(err)
            if outcome is None and isinstance(err.cause, CancelledError):
                # Cancelled on purpose, the child ended Canceled: its outcome is in its memo.
                return await self._fetch_outcome(child_id)
            if outcome is None:
                raise
            return outcome
        except WorkflowAlreadyStartedError:
            return await self._fetch_outcome(child_id)

    async def _fetch_outcome(self, child_id: str) -> McpTaskOutcome:
        """An existing child's outcome, through the ``fetch_outcome`` activity (it waits for the child's end)."""
        # On the children's queue: that is where the plugin (and this activity) is registered.
        return await workflow.execute_activity(
            FETCH_OUTCOME,
            FetchOutcomeInput(workflow_id=child_id),
            result_type=McpTaskOutcome,
            start_to_close_timeout=timedelta(days=30),
            heartbeat_timeout=timedelta(seconds=60),
            task_queue=self._task_queue,
            summary=f"outcome of {child_id}",
        )

    async def list_tools(self) -> mcp_types.ListToolsResult:
        """The server's tools (one activity, every page), cached on this object."""
        if self._cache_tools_list and self._tools is not None:
            return self._tools
        value = await workflow.execute_activity(
            LIST_TOOLS,
            ListToolsInput(server=self._server, principal=self._principal, era=self._era),
            result_type=dict[str, Any],
            start_to_close_timeout=timedelta(minutes=1),
            task_queue=self._task_queue,
            summary=f"tools/list {self.name}"[:200],
        )
        tools = mcp_types.ListToolsResult.model_validate(value)
        if self._cache_tools_list:
            self._tools = tools
        return tools

    @staticmethod
    def _child_id(idempotency_key: str | None) -> str:
        """The parent's id plus a sequence number kept on the workflow instance: deterministic on replay and
        after a reset (the calls happen again in the same order), unique within the parent."""
        parent = workflow.info().workflow_id
        if idempotency_key:
            return f"{parent}/mcp/{idempotency_key}"
        instance = workflow.instance()
        seq = getattr(instance, _SEQ_ATTR, 0) + 1
        setattr(instance, _SEQ_ATTR, seq)
        return f"{parent}/mcp/{seq}"


def call_tool_result(outcome: McpTaskOutcome) -> mcp_types.CallToolResult:
    """The ``CallToolResult`` of a ``completed`` or ``tool_error`` outcome; :class:`McpTaskError` for any other.

    A result kept in the worker's result store (over ``inline_result_bytes``) comes back as a text block naming the
    reference, with the reference in ``_meta`` under :data:`RESULT_REF_META`: workflow code cannot read files, and the
    body must not enter this workflow's history."""
    if outcome.outcome not in (Outcome.COMPLETED, Outcome.TOOL_ERROR):
        raise McpTaskError(outcome)
    if outcome.result is not None:
        return mcp_types.CallToolResult.model_validate(outcome.result)
    ref = outcome.result_ref
    assert ref is not None, "a completed task carries a result or a reference to it"
    return mcp_types.CallToolResult.model_validate(
        {
            "content": [{"type": "text", "text": f"result of {ref.size} bytes kept by reference: {ref.uri}"}],
            "isError": ref.is_error,
            "_meta": {RESULT_REF_META: ref.model_dump(mode="json")},
        }
    )
