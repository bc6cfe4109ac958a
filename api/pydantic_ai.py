"""``McpTasksToolset`` for Pydantic AI agents on Temporal (``[pydantic-ai]``).

Workflow code, with no I/O of its own: it must never subclass ``MCPToolset`` or ``FunctionToolset``, which
``TemporalDurability`` would wrap into activities (:class:`McpTasksToolset` says why). The one-line change and what
the model sees of each outcome: docs/agents.md.
"""

from __future__ import annotations

import base64
import copy
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from temporalio import workflow

try:
    from pydantic_ai.exceptions import ModelRetry, ToolFailed
    from pydantic_ai.messages import BinaryContent
    from pydantic_ai.tools import AgentDepsT, RunContext, ToolDefinition
    from pydantic_ai.toolsets import AbstractToolset, ToolsetTool
    from pydantic_core import SchemaValidator, core_schema, from_json
except ImportError as _missing:  # pragma: no cover - exercised by tests/test_agents_packaging.py
    raise ImportError(
        "mcp_temporal_tasks.pydantic_ai needs Pydantic AI with Temporal support: "
        "pip install 'mcp-temporal-tasks[pydantic-ai]' (pydantic-ai-slim[temporal]==2.68.0)"
    ) from _missing

with workflow.unsafe.imports_passed_through():
    import mcp_types

    from mcp_temporal_tasks._agent_tools import (
        AgentMcpTools,
        ArgumentsRejected,
        OtherOutcomes,
        ends_run,
        in_workflow_only,
    )
    from mcp_temporal_tasks.protocol.tasks import Endpoint, Era
    from mcp_temporal_tasks.workflows.records import Outcome, Timeouts
    from mcp_temporal_tasks.workflows.tasks_client import call_tool_result

__all__ = ["McpTasksToolset"]

#: The arguments arrive as a JSON object; their schema is checked against the server's inputSchema in call_tool.
_ANY_OBJECT = SchemaValidator(core_schema.dict_schema(core_schema.str_schema(), core_schema.any_schema()))


class McpTasksToolset(AbstractToolset[AgentDepsT]):
    """The tools of one MCP server, each call one durable child ``McpTaskWorkflow``.

    ``server``: a name from the worker's configuration (``[servers.NAME]`` / ``McpTasksPlugin(servers=...)``), or
    an inline :class:`Endpoint` the worker allows. ``id``: the toolset's id (also names its children; default the
    server's name). ``tools``: only these tools (each must be listed by the server). ``tool_definitions``: the
    tools as MCP ``Tool`` objects or dicts, instead of a ``list_tools`` activity per run. ``task_queue``,
    ``principal``, ``era``, ``timeouts``: as for :class:`~mcp_temporal_tasks.McpTasksClient`.
    ``other_outcomes``: ``"raise"`` (default) or ``"tell_model"``; ``tool_error_behavior``: ``"retry"`` or
    ``"failed"``; ``max_retries``: ``ModelRetry`` budget per tool (default: the agent's).

    For an agent with ``capabilities=[TemporalDurability()]`` (or the deprecated ``TemporalAgent``), run from a
    ``PydanticAIWorkflow`` on a worker whose client has ``PydanticAIPlugin()`` and
    :class:`~mcp_temporal_tasks.McpTasksPlugin`.

    **How Pydantic AI's Temporal wrapper treats it.** ``TemporalDurability`` wraps the leaf toolsets it knows
    (``FunctionToolset``, ``DynamicToolset``, ``MCPToolset``) so that their I/O runs in activities; any other leaf
    (``durable_exec/temporal/_durability.py`` ``_wrap_other_leaf_toolset`` → ``temporalize_toolset`` returns it
    unchanged) is left as it is and runs *in the workflow*. That is what this toolset needs: its ``get_tools`` and
    ``call_tool`` are workflow code that start activities (``list_tools``, ``resolve``) and child workflows through
    :class:`~mcp_temporal_tasks.McpTasksClient`; nothing here does I/O itself. Outside a workflow it refuses to run.

    An outcome other than ``completed`` / ``tool_error`` ends the agent run with
    :class:`~mcp_temporal_tasks.McpTaskError` (``.outcome`` is the whole outcome; an ``ApplicationError``, so the
    workflow fails with it unless it catches it).
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
        tool_error_behavior: Literal["retry", "failed"] = "retry",
        max_retries: int | None = None,
    ) -> None:
        if tool_error_behavior not in ("retry", "failed"):
            raise ValueError(f"tool_error_behavior must be 'retry' or 'failed', not {tool_error_behavior!r}")
        self._id = id
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
        self.tool_error_behavior = tool_error_behavior
        self.max_retries = max_retries

    @property
    def id(self) -> str | None:
        return self._id

    @property
    def label(self) -> str:
        return f"McpTasksToolset {self._id or self._mcp.name!r}"

    async def for_run(self, ctx: RunContext[AgentDepsT]) -> AbstractToolset[AgentDepsT]:
        # A fresh copy per agent run: its own tool list (one list_tools activity) and its own scope of child ids.
        run = copy.copy(self)
        run._mcp = self._mcp.fresh()
        return run

    async def get_tools(self, ctx: RunContext[AgentDepsT]) -> dict[str, ToolsetTool[AgentDepsT]]:
        in_workflow_only("McpTasksToolset")
        retries = self.max_retries if self.max_retries is not None else ctx.max_retries
        return {
            tool.name: ToolsetTool[AgentDepsT](
                toolset=self, tool_def=_definition(tool), max_retries=retries, args_validator=_ANY_OBJECT
            )
            for tool in await self._mcp.list_tools()
        }

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[AgentDepsT], tool: ToolsetTool[AgentDepsT]
    ) -> Any:
        try:
            outcome = await self._mcp.run(name, tool_args)
        except ArgumentsRejected as err:
            raise ModelRetry(str(err)) from None
        if outcome.outcome == Outcome.COMPLETED:
            return _to_model(call_tool_result(outcome))
        if outcome.outcome == Outcome.TOOL_ERROR:
            text = _error_text(call_tool_result(outcome), name)
            raise ModelRetry(text) if self.tool_error_behavior == "retry" else ToolFailed(text)
        return ends_run(outcome, self.other_outcomes)


def _definition(tool: mcp_types.Tool) -> ToolDefinition:
    schema = dict(tool.input_schema) if isinstance(tool.input_schema, dict) else {}
    schema.setdefault("type", "object")
    schema.setdefault("properties", {})
    annotations = tool.annotations.model_dump(by_alias=True, exclude_none=True) if tool.annotations else None
    return ToolDefinition(
        name=tool.name,
        description=tool.description,
        parameters_json_schema=schema,
        metadata={"mcp_tasks": True, "annotations": annotations},
        return_schema=dict(tool.output_schema) if isinstance(tool.output_schema, dict) else None,
    )


def _block(part: Any) -> Any:
    if isinstance(part, mcp_types.TextContent):
        text = part.text
        if text.startswith(("[", "{")):
            try:
                return from_json(text)
            except ValueError:
                pass
        return text
    if isinstance(part, (mcp_types.ImageContent, mcp_types.AudioContent)):
        return BinaryContent(data=base64.b64decode(part.data), media_type=part.mime_type)
    return part.model_dump(mode="json", by_alias=True, exclude_none=True)


def _to_model(result: mcp_types.CallToolResult) -> Any:
    """A completed result as Pydantic AI's ``MCPToolset`` hands it to the model: the structured content when every
    block is text, else the blocks (JSON text parsed; images and audio as ``BinaryContent``)."""
    structured = result.structured_content
    if structured is not None and all(isinstance(p, mcp_types.TextContent) for p in result.content):
        if isinstance(structured, dict) and len(structured) == 1 and "result" in structured:
            return structured["result"]
        return structured
    mapped = [_block(p) for p in result.content]
    return mapped[0] if len(mapped) == 1 else mapped


def _error_text(result: mcp_types.CallToolResult, name: str) -> str:
    texts = [p.text for p in result.content if isinstance(p, mcp_types.TextContent) and p.text]
    if texts:
        return "\n".join(texts)
    if result.structured_content is not None:
        return str(result.structured_content)
    return f"Tool {name!r} returned an error"
