"""mcp-temporal-tasks: every long-running MCP task as a durable Temporal workflow.

Where data flows, by folder: a request (:class:`McpTaskRequest`) starts ``McpTaskWorkflow``
(``mcp_temporal_tasks.workflows``), whose activities (``mcp_temporal_tasks.activities``, over
``activities.wire``, the one place that speaks MCP on the wire) drive the MCP server to an
:class:`McpTaskOutcome`; ``mcp_temporal_tasks.worker`` runs them (plugin, CLI, embedded Temporal).

Public API, loaded lazily so that workflow code importing :class:`McpTasksClient` never imports worker-side
modules (network clients, the CLI):

* worker side: :class:`McpTasksPlugin` (a ``temporalio.plugin.SimplePlugin``);
* workflow side: :class:`McpTasksClient`, :class:`McpTaskError`;
* services: :func:`connect`, :func:`start_mcp_task`, :func:`get_outcome`, :func:`outcome_of`, :class:`McpTaskRequest`,
  :class:`McpTaskOutcome`, :class:`Outcome`, :class:`ReplayPolicy`, :class:`Timeouts`, :class:`RequestTooLarge`,
  :class:`RequestMismatch`, :class:`NoWorker`;
* configuration from Python (``McpTasksPlugin(servers=...)``): :class:`ServerConfig`, :class:`ToolPolicy`,
  :class:`JobBinding`, :class:`PollSchedule`, :class:`WorkerSettings`, :class:`Endpoint` (an inline server);
* the machine itself: :class:`McpTaskWorkflow` (to register or start it by type), :class:`TaskView` (its
  ``status`` query) and :class:`Phase`;
* agents, each behind its extra and never imported from here: ``mcp_temporal_tasks.pydantic_ai.McpTasksToolset``
  (``[pydantic-ai]``), ``mcp_temporal_tasks.openai_agents.mcp_tasks_server`` (``[openai-agents]``),
  ``mcp_temporal_tasks.google_adk.McpTasksToolset`` (``[google-adk]``) and
  ``mcp_temporal_tasks.google_genai.McpTasksClientSession`` (``[google-genai]``).
"""

from __future__ import annotations

import sys
from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mcp_temporal_tasks.activities.activity_io import JobBinding, PollSchedule, ServerConfig, ToolPolicy
    from mcp_temporal_tasks.protocol.tasks import Endpoint
    from mcp_temporal_tasks.worker.config import WorkerSettings
    from mcp_temporal_tasks.worker.plugin import McpTasksPlugin
    from mcp_temporal_tasks.workflows.client import (
        NoWorker,
        RequestMismatch,
        connect,
        get_outcome,
        outcome_of,
        start_mcp_task,
    )
    from mcp_temporal_tasks.workflows.mcp_task import McpTaskWorkflow
    from mcp_temporal_tasks.workflows.records import (
        McpTaskOutcome,
        McpTaskRequest,
        Outcome,
        Phase,
        ReplayPolicy,
        RequestTooLarge,
        TaskView,
        Timeouts,
    )
    from mcp_temporal_tasks.workflows.task_error import McpTaskError
    from mcp_temporal_tasks.workflows.tasks_client import McpTasksClient

_WHERE = {
    "McpTasksPlugin": "mcp_temporal_tasks.worker.plugin",
    "McpTasksClient": "mcp_temporal_tasks.workflows.tasks_client",
    "McpTaskError": "mcp_temporal_tasks.workflows.task_error",
    "start_mcp_task": "mcp_temporal_tasks.workflows.client",
    "connect": "mcp_temporal_tasks.workflows.client",
    "NoWorker": "mcp_temporal_tasks.workflows.client",
    "get_outcome": "mcp_temporal_tasks.workflows.client",
    "outcome_of": "mcp_temporal_tasks.workflows.client",
    "RequestMismatch": "mcp_temporal_tasks.workflows.client",
    "McpTaskRequest": "mcp_temporal_tasks.workflows.records",
    "McpTaskOutcome": "mcp_temporal_tasks.workflows.records",
    "Outcome": "mcp_temporal_tasks.workflows.records",
    "ReplayPolicy": "mcp_temporal_tasks.workflows.records",
    "Timeouts": "mcp_temporal_tasks.workflows.records",
    "RequestTooLarge": "mcp_temporal_tasks.workflows.records",
    "ServerConfig": "mcp_temporal_tasks.activities.activity_io",
    "ToolPolicy": "mcp_temporal_tasks.activities.activity_io",
    "JobBinding": "mcp_temporal_tasks.activities.activity_io",
    "PollSchedule": "mcp_temporal_tasks.activities.activity_io",
    "Endpoint": "mcp_temporal_tasks.protocol.tasks",
    "WorkerSettings": "mcp_temporal_tasks.worker.config",
    "McpTaskWorkflow": "mcp_temporal_tasks.workflows.mcp_task",
    "TaskView": "mcp_temporal_tasks.workflows.records",
    "Phase": "mcp_temporal_tasks.workflows.records",
}

__all__ = [
    "McpTasksPlugin",
    "McpTasksClient",
    "McpTaskError",
    "connect",
    "start_mcp_task",
    "get_outcome",
    "outcome_of",
    "RequestMismatch",
    "NoWorker",
    "McpTaskRequest",
    "McpTaskOutcome",
    "Outcome",
    "ReplayPolicy",
    "Timeouts",
    "RequestTooLarge",
    "ServerConfig",
    "ToolPolicy",
    "JobBinding",
    "PollSchedule",
    "Endpoint",
    "WorkerSettings",
    "McpTaskWorkflow",
    "TaskView",
    "Phase",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    workflow = sys.modules.get("temporalio.workflow")
    if workflow is not None and workflow.unsafe.in_sandbox():
        # Named from workflow code (a workflow file that also runs its worker imports McpTasksPlugin beside
        # McpTasksClient): every public name is the worker's own object, never a copy the sandbox re-runs (the plugin
        # passes through only what workflows need, and this package itself is re-run in each sandbox).
        with workflow.unsafe.imports_passed_through():
            return getattr(__import__(module, fromlist=[name]), name)
    return getattr(import_module(module), name)
