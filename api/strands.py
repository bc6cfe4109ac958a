"""``McpTasksToolProvider`` for Strands agents on Temporal (``[strands]``, then the two packages with ``--no-deps``).

In place of ``temporalio-strands-agents``' ``TemporalMCPClient`` (and so of Strands' ``MCPClient``) in
``TemporalAgent(tools=[...])``: each call one child ``McpTaskWorkflow``, started from the workflow. No Strands tool can
end an agent run by raising (Strands shows the model any exception and goes on): an outcome other than ``completed``
/ ``tool_error`` stops the run after the current tools (``agent.cancel``) and is kept for ``raise_for_failures()``.
The one-line change, and why the install is two commands: docs/agents.md.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping, Sequence
from typing import Any

from temporalio import workflow

_PIN = (
    "'mcp-temporal-tasks[strands]' and then, with --no-deps (they require mcp<2, which this package's mcp==2.3.0 "
    "replaces; docs/agents.md), strands-agents==1.62.0 temporalio-strands-agents==0.1.0"
)

try:
    from strands.types._events import ToolResultEvent
    from strands.types.tools import AgentTool, ToolResult, ToolSpec, ToolUse
    from temporalio.strands_agents import TemporalMCPClient
except ImportError as _missing:  # pragma: no cover - exercised by tests/test_agents_packaging.py
    raise ImportError(f"mcp_temporal_tasks.strands needs Strands on Temporal: pip install {_PIN}") from _missing

with workflow.unsafe.imports_passed_through():
    import mcp_types

    from mcp_temporal_tasks._agent_tools import (
        AgentMcpTools,
        ArgumentsRejected,
        OtherOutcomes,
        in_workflow_only,
        outcome_message,
        require_hooks,
    )
    from mcp_temporal_tasks.protocol.tasks import Endpoint, Era
    from mcp_temporal_tasks.workflows.records import Outcome, Timeouts
    from mcp_temporal_tasks.workflows.task_error import McpTaskError
    from mcp_temporal_tasks.workflows.tasks_client import call_tool_result

# What this adapter relies on, checked at import (tests/test_agents_packaging.py removes each in turn): TemporalAgent
# lists a TemporalMCPClient's tools from a hook before each model call (its _refresh, which sets _tools and _fetched;
# Strands' own load_tools runs on a thread without the workflow).
require_hooks(
    "mcp_temporal_tasks.strands",
    _PIN,
    {
        "temporalio.strands_agents.TemporalMCPClient._refresh": hasattr(TemporalMCPClient, "_refresh"),
    },
)

__all__ = ["McpTasksToolProvider"]

_FAILURES_ATTR = "_mcp_tasks_strands_failures"


def _result(tool_use_id: str, result: mcp_types.CallToolResult) -> ToolResult:
    """A ``CallToolResult`` as Strands' ``MCPClient`` maps it: text blocks as text, the others as JSON, the structured
    content beside them, ``status="error"`` for ``isError``."""
    content: list[Any] = [
        {"text": part.text}
        if isinstance(part, mcp_types.TextContent)
        else {"json": part.model_dump(mode="json", by_alias=True, exclude_none=True)}
        for part in result.content
    ]
    mapped: dict[str, Any] = {
        "toolUseId": tool_use_id,
        "status": "error" if result.is_error else "success",
        "content": content,
    }
    if result.structured_content is not None:
        mapped["structuredContent"] = result.structured_content
    if result.is_error:
        mapped["isError"] = True
    return mapped  # type: ignore[return-value]


def _error(tool_use_id: str, text: str) -> ToolResult:
    return {"toolUseId": tool_use_id, "status": "error", "content": [{"text": text}]}


class McpTasksToolProvider(TemporalMCPClient):
    """The tools of one MCP server for a Strands ``TemporalAgent``, each call one durable child ``McpTaskWorkflow``.

    ``server``: a name from the worker's configuration (``[servers.NAME]`` / ``McpTasksPlugin(servers=...)``), or an
    inline :class:`Endpoint` the worker allows. ``key``: names these tools' children (default: the server's name).
    ``tools``: only these tools (each must be listed by the server). ``tool_definitions``: the tools as MCP ``Tool``
    objects or dicts, instead of a ``list_tools`` activity. ``task_queue``, ``principal``, ``era``, ``timeouts``: as
    for :class:`~mcp_temporal_tasks.McpTasksClient`. ``other_outcomes``: ``"raise"`` (default) or ``"tell_model"``.

    **How Strands on Temporal treats it.** It *is* a ``TemporalMCPClient`` (``temporalio-strands-agents``' workflow-side
    tool provider), so ``TemporalAgent`` lists its tools from its ``BeforeModelCallEvent`` hook, on the workflow's loop:
    here one ``list_tools`` activity per workflow run (cached), not ``{server}-list-tools``. Each tool's ``stream`` is
    workflow code that starts the ``resolve`` activity and a child workflow through
    :class:`~mcp_temporal_tasks.McpTasksClient`; nothing registers ``{server}-call-tool``, so the plugin needs no
    ``mcp_clients`` entry for it. Built once (at module level, as ``TemporalMCPClient`` is); one workflow is one agent
    run (child ids ``{workflow id}/mcp/{key}/r1/...``; a repeated identical call of a tool that is not idempotent
    re-attaches to the first one's child).

    What the model sees: ``completed`` and ``tool_error`` are the ``ToolResult`` Strands' ``MCPClient`` makes (status
    ``"error"`` with the server's text for a ``tool_error``); arguments that fail the input schema are an error result
    naming the field, with no ``tools/call``. Any other outcome is an error result stating the outcome and that the
    tool may already have run, and (``other_outcomes="raise"``) the run stops after the current tools
    (``agent.cancel(after_current_tools=True)``: ``stop_reason="cancelled"``, no further model call) and
    :meth:`raise_for_failures` after the agent call raises :class:`~mcp_temporal_tasks.McpTaskError`.
    """

    def __init__(
        self,
        server: str | Endpoint,
        *,
        key: str | None = None,
        tools: Sequence[str] | None = None,
        tool_definitions: Sequence[mcp_types.Tool | Mapping[str, Any]] | None = None,
        task_queue: str | None = None,
        principal: str | None = None,
        era: Era | None = None,
        timeouts: Timeouts | None = None,
        other_outcomes: OtherOutcomes = "raise",
    ) -> None:
        self._mcp = AgentMcpTools(
            server,
            key=key,
            tools=tools,
            tool_definitions=tool_definitions,
            task_queue=task_queue,
            principal=principal,
            era=era,
            timeouts=timeouts,
            other_outcomes=other_outcomes,
        )
        # Listed again before each model call (cache_tools=False): the list is kept per workflow run by _run().
        super().__init__(self._mcp.name, cache_tools=False)
        self.other_outcomes: OtherOutcomes = other_outcomes

    def _run(self) -> AgentMcpTools:
        in_workflow_only("McpTasksToolProvider")
        return self._mcp.for_run("")

    async def _refresh(self) -> None:
        listed = await self._run().list_tools()
        self._tools = [_McpTaskTool(self, tool) for tool in listed]
        self._fetched = True

    @property
    def failures(self) -> list[McpTaskError]:
        """With ``other_outcomes="raise"``: this workflow run's calls that ended other than ``completed`` /
        ``tool_error``, in order."""
        in_workflow_only("McpTasksToolProvider")
        instance = workflow.instance()
        kept: dict[int, list[McpTaskError]] | None = getattr(instance, _FAILURES_ATTR, None)
        if kept is None:
            kept = {}
            setattr(instance, _FAILURES_ATTR, kept)
        return kept.setdefault(id(self), [])

    def raise_for_failures(self) -> None:
        """Raise :class:`~mcp_temporal_tasks.McpTaskError` for this workflow run's first call that ended other than
        ``completed`` / ``tool_error``; nothing when there was none."""
        if self.failures:
            raise McpTaskError(self.failures[0].outcome)

    async def call(self, name: str, tool_use: ToolUse, invocation_state: dict[str, Any]) -> ToolResult:
        tool_use_id = str(tool_use["toolUseId"])
        arguments = tool_use.get("input")
        try:
            outcome = await self._run().run(name, dict(arguments) if isinstance(arguments, Mapping) else {})
        except ArgumentsRejected as err:
            return _error(tool_use_id, str(err))
        if outcome.outcome in (Outcome.COMPLETED, Outcome.TOOL_ERROR):
            return _result(tool_use_id, call_tool_result(outcome))
        message = outcome_message(outcome)
        if self.other_outcomes == "raise":
            self.failures.append(McpTaskError(outcome))
            agent = invocation_state.get("agent")
            if agent is not None:
                agent.cancel(message=message, after_current_tools=True)
        return _error(tool_use_id, message)


class _McpTaskTool(AgentTool):
    """One tool of a :class:`McpTasksToolProvider`; its ``stream`` is a child ``McpTaskWorkflow``."""

    def __init__(self, provider: McpTasksToolProvider, tool: mcp_types.Tool) -> None:
        super().__init__()
        self._provider = provider
        self._tool = tool

    @property
    def tool_name(self) -> str:
        return self._tool.name

    @property
    def tool_spec(self) -> ToolSpec:
        schema = dict(self._tool.input_schema) if isinstance(self._tool.input_schema, dict) else {}
        schema.setdefault("type", "object")
        spec: dict[str, Any] = {
            "name": self._tool.name,
            "description": self._tool.description or f"Tool which performs {self._tool.name}",
            "inputSchema": {"json": schema},
        }
        if isinstance(self._tool.output_schema, dict):
            spec["outputSchema"] = {"json": dict(self._tool.output_schema)}
        return spec  # type: ignore[return-value]

    @property
    def tool_type(self) -> str:
        return "mcp_tasks"

    async def stream(
        self, tool_use: ToolUse, invocation_state: dict[str, Any], **kwargs: Any
    ) -> AsyncGenerator[Any, None]:
        yield ToolResultEvent(await self._provider.call(self._tool.name, tool_use, invocation_state))
