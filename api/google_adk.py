"""``McpTasksToolset`` for Google ADK agents on Temporal (``[google-adk]``).

A listing that fails ends the agent run with one error naming it, before any model call and any ``tools/call``: never
a run without the toolset's tools (:class:`McpTasksToolset` says how). Each ADK invocation is one agent run, with its
own tool list and scope of child ids. The one-line change and what the model sees of each outcome: docs/agents.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError

_PIN = "'mcp-temporal-tasks[google-adk]' (google-adk==2.13.0, temporalio-google-adk==0.0.1)"

try:
    from google.adk.agents.readonly_context import ReadonlyContext
    from google.adk.models.llm_request import LlmRequest
    from google.adk.tools.base_tool import BaseTool
    from google.adk.tools.base_toolset import BaseToolset
    from google.adk.tools.tool_context import ToolContext
    from google.genai import types as genai_types
except ImportError as _missing:  # pragma: no cover - exercised by tests/test_agents_packaging.py
    raise ImportError(f"mcp_temporal_tasks.google_adk needs Google ADK: pip install {_PIN}") from _missing

with workflow.unsafe.imports_passed_through():
    import mcp_types

    from mcp_temporal_tasks._agent_tools import (
        AgentMcpTools,
        ArgumentsRejected,
        OtherOutcomes,
        ends_run,
        in_workflow_only,
        require_hooks,
    )
    from mcp_temporal_tasks.protocol.tasks import Endpoint, Era
    from mcp_temporal_tasks.workflows.records import Outcome, Timeouts
    from mcp_temporal_tasks.workflows.tasks_client import call_tool_result

# What this adapter relies on, checked at import (tests/test_agents_packaging.py removes each in turn):
# ADK calls a toolset's process_llm_request after get_tools and does not isolate it (the listing failure is raised
# there); runs are told apart by the invocation id of the contexts it hands to get_tools and run_async; a tool's
# declaration comes from _get_declaration (BaseTool's default process_llm_request).
require_hooks(
    "mcp_temporal_tasks.google_adk",
    _PIN,
    {
        "google.adk.tools.base_toolset.BaseToolset.process_llm_request": hasattr(BaseToolset, "process_llm_request"),
        "google.adk.agents.readonly_context.ReadonlyContext.invocation_id": hasattr(ReadonlyContext, "invocation_id"),
        "google.adk.tools.base_tool.BaseTool._get_declaration": hasattr(BaseTool, "_get_declaration"),
        "google.genai.types.FunctionDeclaration.parameters_json_schema": "parameters_json_schema"
        in genai_types.FunctionDeclaration.model_fields,
    },
)

__all__ = ["McpTasksToolset"]

#: Model-level ``_meta`` keys are renamed ``meta`` (ADK's ``McpTool`` does); these hold the server's own JSON.
_SERVER_OWNED = frozenset({"structuredContent", "inputSchema", "outputSchema", "_meta"})


def _as_adk_result(result: mcp_types.CallToolResult) -> dict[str, Any]:
    """A ``CallToolResult`` as ADK's ``McpTool`` returns it to the flow: the wire's camelCase names, ``meta`` for
    ``_meta``, no ``resultType``."""

    def walk(value: Any) -> Any:
        if isinstance(value, dict):
            return {
                ("meta" if key == "_meta" else key): (item if key in _SERVER_OWNED else walk(item))
                for key, item in value.items()
            }
        if isinstance(value, list):
            return [walk(item) for item in value]
        return value

    dumped = walk(result.model_dump(mode="json", by_alias=True, exclude_none=True))
    dumped.pop("resultType", None)
    return dumped


class McpTasksToolset(BaseToolset):
    """The tools of one MCP server for an ADK agent, each call one durable child ``McpTaskWorkflow``.

    ``server``: a name from the worker's configuration (``[servers.NAME]`` / ``McpTasksPlugin(servers=...)``), or
    an inline :class:`Endpoint` the worker allows. ``id``: names this toolset's children (default: the server's
    name). ``tools``: only these tools (each must be listed by the server). ``tool_definitions``: the tools as MCP
    ``Tool`` objects or dicts, instead of a ``list_tools`` activity per run. ``task_queue``, ``principal``,
    ``era``, ``timeouts``: as for :class:`~mcp_temporal_tasks.McpTasksClient`. ``other_outcomes``: ``"raise"``
    (default) or ``"tell_model"``. ``tool_name_prefix``: ADK's (the model sees ``PREFIX_tool``; the server is
    called with the tool's own name).

    Run with ADK's ``Runner`` inside a workflow, on a worker whose client has ``GoogleAdkPlugin()`` and
    :class:`~mcp_temporal_tasks.McpTasksPlugin`.

    **How ADK treats it.** ADK's agent loop runs in the workflow (``GoogleAdkPlugin`` makes its clock, ids and
    randomness the workflow's); a toolset's ``get_tools`` and a tool's ``run_async`` are called there. Here they are
    workflow code that start activities (``list_tools``, ``resolve``) and child workflows through
    :class:`~mcp_temporal_tasks.McpTasksClient`; nothing does I/O itself (``TemporalMcpToolSet`` instead sends each
    ``tools/call`` from an activity, which Temporal retries: after a lost worker, the call is sent again). Each ADK
    *invocation* (one ``Runner.run_async``) is one agent run: its own tool list (one ``list_tools`` activity) and its
    own scope of child ids, even when the agent and this toolset are built once and reused. Outside a workflow it
    refuses to run.

    **A listing that fails.** ADK runs an agent whose toolset's ``get_tools`` raises *without* that toolset's tools
    (``llm_agent._convert_tool_union_to_tools`` logs it and carries on), so the model would answer as if it had none.
    This toolset instead raises that error again from its ``process_llm_request``, which ADK calls next and does not
    isolate: an unknown server or a ``tools=`` name the server does not list ends the run with one error naming it,
    before any model call and any ``tools/call``.

    An outcome other than ``completed`` / ``tool_error`` ends the run with :class:`~mcp_temporal_tasks.McpTaskError`
    (ADK lets a tool's exception end the run unless an ``on_tool_error_callback`` answers it; the workflow fails with
    it unless it catches it).
    """

    def __init__(
        self,
        server: str | Endpoint,
        *,
        id: str | None = None,
        tools: Sequence[str] | None = None,
        tool_definitions: Sequence[mcp_types.Tool | Mapping[str, Any]] | None = None,
        task_queue: str | None = None,
        principal: str | None = None,
        era: Era | None = None,
        timeouts: Timeouts | None = None,
        other_outcomes: OtherOutcomes = "raise",
        tool_name_prefix: str | None = None,
    ) -> None:
        super().__init__(tool_name_prefix=tool_name_prefix)
        self._mcp = AgentMcpTools(
            server,
            key=id,
            tools=tools,
            tool_definitions=tool_definitions,
            task_queue=task_queue,
            principal=principal,
            era=era,
            timeouts=timeouts,
            other_outcomes=other_outcomes,
        )
        self.other_outcomes: OtherOutcomes = other_outcomes

    def _run(self, context: ReadonlyContext | None) -> AgentMcpTools:
        in_workflow_only("McpTasksToolset")
        return self._mcp.for_run(context.invocation_id if context is not None else "")

    async def get_tools(self, readonly_context: ReadonlyContext | None = None) -> list[BaseTool]:
        try:
            listed = await self._run(readonly_context).list_tools()
        except ApplicationError:  # kept by this run's AgentMcpTools: process_llm_request raises it where ADK does not
            return []
        return [_McpTaskTool(self, tool) for tool in listed]

    async def process_llm_request(self, *, tool_context: ToolContext, llm_request: LlmRequest) -> None:
        await self._run(tool_context).list_tools()  # the cached list, or the listing's failure raised again
        await super().process_llm_request(tool_context=tool_context, llm_request=llm_request)

    async def call(self, name: str, args: dict[str, Any], tool_context: ToolContext) -> Any:
        try:
            outcome = await self._run(tool_context).run(name, args)
        except ArgumentsRejected as err:  # as ADK's FunctionTool answers missing arguments; no tools/call
            return {"error": str(err)}
        if outcome.outcome in (Outcome.COMPLETED, Outcome.TOOL_ERROR):
            return _as_adk_result(call_tool_result(outcome))
        return {"error": ends_run(outcome, self.other_outcomes)}


class _McpTaskTool(BaseTool):
    """One tool of a :class:`McpTasksToolset`; its ``run_async`` is a child ``McpTaskWorkflow``."""

    def __init__(self, toolset: McpTasksToolset, tool: mcp_types.Tool) -> None:
        annotations = tool.annotations.model_dump(by_alias=True, exclude_none=True) if tool.annotations else None
        super().__init__(
            name=tool.name,
            description=tool.description or "",
            custom_metadata={"mcp_tasks": True, "annotations": annotations},
        )
        self._toolset = toolset
        self._tool = tool

    def _get_declaration(self) -> genai_types.FunctionDeclaration:
        # As ADK's McpTool declares an MCP tool (JSON_SCHEMA_FOR_FUNC_DECL, on by default in 2.13): the schemas as
        # the server gave them.
        schema = dict(self._tool.input_schema) if isinstance(self._tool.input_schema, dict) else {}
        schema.setdefault("type", "object")
        output = self._tool.output_schema
        return genai_types.FunctionDeclaration(
            name=self.name,
            description=self.description,
            parameters_json_schema=schema,
            response_json_schema=dict(output) if isinstance(output, dict) else None,
        )

    async def run_async(self, *, args: dict[str, Any], tool_context: ToolContext) -> Any:
        return await self._toolset.call(self._tool.name, args, tool_context)
