"""The public names of mcp-temporal-tasks, imported lazily (workflow code naming one gets the worker's own object).

Every long-running MCP task as a durable Temporal workflow. Lazily, so that workflow code importing
:class:`McpTasksClient` never imports worker-side modules (network clients, the CLI). The agent adapters, each behind
its extra, are never imported from here: ``mcp_temporal_tasks.pydantic_ai``, ``.openai_agents``, ``.google_adk``,
``.google_genai`` and ``.langgraph`` (docs/agents.md).
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
    from mcp_temporal_tasks.worker.service import connect
    from mcp_temporal_tasks.workflows.client import (
        NoPayloadStore,
        NoWorker,
        RequestMismatch,
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
    "connect": "mcp_temporal_tasks.worker.service",
    "NoWorker": "mcp_temporal_tasks.workflows.client",
    "NoPayloadStore": "mcp_temporal_tasks.workflows.client",
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
    # worker side: a temporalio.plugin.SimplePlugin
    "McpTasksPlugin",
    # workflow side
    "McpTasksClient",
    "McpTaskError",
    # services
    "connect",
    "start_mcp_task",
    "get_outcome",
    "outcome_of",
    "RequestMismatch",
    "NoWorker",
    "NoPayloadStore",
    "McpTaskRequest",
    "McpTaskOutcome",
    "Outcome",
    "ReplayPolicy",
    "Timeouts",
    "RequestTooLarge",
    # configuration from Python (McpTasksPlugin(servers=...)); Endpoint: an inline server
    "ServerConfig",
    "ToolPolicy",
    "JobBinding",
    "PollSchedule",
    "Endpoint",
    "WorkerSettings",
    # the machine itself: to register or start it by type, its status query's view, its phases
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
