"""``McpTasksTools``: MCP tools as LangChain tools, for LangGraph and Deep Agents on Temporal (``[langgraph]``).

In place of the tool list ``langchain-mcp-adapters`` makes (``await MultiServerMCPClient(...).get_tools()``): the same
LangChain ``StructuredTool`` shapes (``content_and_artifact``, a ``tool_error`` as a ``ToolMessage`` with
``status="error"``), each call one child ``McpTaskWorkflow`` started from the workflow, never from an activity that a
retry sends again. The one-line change and what the model sees of each outcome: docs/agents.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from temporalio import workflow

_PIN = "'mcp-temporal-tasks[langgraph]' (langgraph==1.2.22, temporalio-langgraph==0.1.0), or [deepagents]"

try:
    from langchain_core.messages.content import (
        FileContentBlock,
        ImageContentBlock,
        TextContentBlock,
        create_file_block,
        create_image_block,
        create_text_block,
    )
    from langchain_core.tools import BaseTool, StructuredTool, ToolException
except ImportError as _missing:  # pragma: no cover - exercised by tests/test_agents_packaging.py
    raise ImportError(f"mcp_temporal_tasks.langgraph needs LangChain on Temporal: pip install {_PIN}") from _missing

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

__all__ = ["McpTasksTools", "McpToolError"]

ContentBlock = TextContentBlock | ImageContentBlock | FileContentBlock


class McpToolError(ToolException):
    """A call that ended ``tool_error`` (the server's ``isError`` result), or arguments the tool's input schema refuses
    (no ``tools/call`` sent): LangChain's ``ToolException``, which each tool turns into a ``ToolMessage`` with
    ``status="error"`` the model sees, as ``langchain-mcp-adapters`` does with ``handle_tool_errors=True``.
    ``content``: the blocks the model gets."""

    def __init__(self, message: str, content: list[ContentBlock] | None = None) -> None:
        super().__init__(message)
        self.content: list[ContentBlock] = content or [create_text_block(text=message)]


def _shown_to_model(error: ToolException) -> list[ContentBlock] | str:
    # Only our McpToolError is answered; any other ToolException keeps LangChain's own handling (its message).
    return error.content if isinstance(error, McpToolError) else str(error)


def _block(part: mcp_types.ContentBlock) -> ContentBlock:
    """One MCP content block as ``langchain-mcp-adapters`` converts it (audio, which it refuses, as a file block)."""
    if isinstance(part, mcp_types.TextContent):
        return create_text_block(text=part.text)
    if isinstance(part, mcp_types.ImageContent):
        return create_image_block(base64=part.data, mime_type=part.mime_type)
    if isinstance(part, mcp_types.AudioContent):
        return create_file_block(base64=part.data, mime_type=part.mime_type)
    if isinstance(part, mcp_types.ResourceLink):
        if part.mime_type and part.mime_type.startswith("image/"):
            return create_image_block(url=str(part.uri), mime_type=part.mime_type)
        return create_file_block(url=str(part.uri), mime_type=part.mime_type or None)
    resource = part.resource
    if isinstance(resource, mcp_types.TextResourceContents):
        return create_text_block(text=resource.text)
    if resource.mime_type and resource.mime_type.startswith("image/"):
        return create_image_block(base64=resource.blob, mime_type=resource.mime_type)
    return create_file_block(base64=resource.blob, mime_type=resource.mime_type or None)


def _error_message(blocks: list[ContentBlock], name: str) -> str:
    texts = [str(b.get("text")) for b in blocks if b.get("type") == "text" and b.get("text")]
    return "\n".join(texts) if texts else f"MCP tool {name!r} returned an error"


class McpTasksTools:
    """One MCP server's tools as LangChain tools, each call one durable child ``McpTaskWorkflow``.

    ``server``: a name from the worker's configuration (``[servers.NAME]`` / ``McpTasksPlugin(servers=...)``), or an
    inline :class:`Endpoint` the worker allows. ``key``: names these tools' children (default: the server's name).
    ``tools``: only these tools (each must be listed by the server). ``tool_definitions``: the tools as MCP ``Tool``
    objects or dicts, instead of a ``list_tools`` activity (then :meth:`get_tools` works outside a workflow too, e.g.
    where a graph is built at worker start). ``task_queue``, ``principal``, ``era``, ``timeouts``: as for
    :class:`~mcp_temporal_tasks.McpTasksClient`. ``other_outcomes``: ``"raise"`` (default) or ``"tell_model"``.
    ``tool_name_prefix``: the model sees ``{server}_{tool}`` (``langchain-mcp-adapters``' option of that name).

    **Where the calls run.** A tool's coroutine is workflow code: it starts the ``resolve`` activity and a child
    workflow through :class:`~mcp_temporal_tasks.McpTasksClient`, and refuses to run outside a workflow. In LangGraph
    on Temporal (``temporalio-langgraph``) the node that runs the tools is ``execute_in: "workflow"`` (an async node:
    ``await ToolNode(tools).ainvoke(state)``); in Deep Agents (``temporalio-deepagents``) tools handed to
    ``create_deep_agent`` run in the workflow unless wrapped with ``tool_as_activity``, which these must not be.

    **One agent run per workflow.** The tools (and one object's listing) are kept per workflow run: child ids are
    ``{workflow id}/mcp/{key}/r1/{tool}/{digest}``, and a repeated identical call of a tool that is not idempotent
    re-attaches to the first one's child, within one graph invocation or across several in the same workflow.

    What the model sees: ``completed`` is the content blocks, with ``{"structured_content": ...}`` as the
    ``ToolMessage``'s artifact; ``tool_error`` and arguments that fail the input schema are :class:`McpToolError`,
    a ``ToolMessage`` with ``status="error"``; any other outcome raises
    :class:`~mcp_temporal_tasks.McpTaskError` out of the tool node (LangGraph's ``ToolNode`` handles only invocation
    errors by default), which ends the graph run and fails the workflow unless it catches it.
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
        tool_name_prefix: bool = False,
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
        self.other_outcomes: OtherOutcomes = other_outcomes
        self.tool_name_prefix = tool_name_prefix

    @property
    def name(self) -> str:
        return self._mcp.name

    def _run(self) -> AgentMcpTools:
        in_workflow_only("McpTasksTools")
        return self._mcp.for_run("")

    async def get_tools(self) -> list[BaseTool]:
        """The server's tools as LangChain tools: in a workflow, one ``list_tools`` activity per workflow run (none
        with ``tool_definitions``); outside a workflow, only from ``tool_definitions``."""
        if workflow.in_workflow():
            listed = await self._run().list_tools()
        elif self._mcp.static is not None:
            listed = await self._mcp.fresh().list_tools()  # the static list, filtered: no activity
        else:
            raise RuntimeError(
                "McpTasksTools lists its server's tools with an activity: call get_tools() inside a workflow, "
                "or give tool_definitions= to build the tools outside one"
            )
        return [self._tool(tool) for tool in listed]

    def _tool(self, tool: mcp_types.Tool) -> BaseTool:
        schema = dict(tool.input_schema) if isinstance(tool.input_schema, dict) else {}
        schema.setdefault("type", "object")
        schema.setdefault("properties", {})
        annotations = tool.annotations.model_dump(by_alias=True, exclude_none=True) if tool.annotations else {}
        name = tool.name

        async def call(**arguments: Any) -> tuple[list[ContentBlock], dict[str, Any] | None]:
            return await self._call(name, arguments)

        return StructuredTool(
            name=f"{self.name}_{name}" if self.tool_name_prefix else name,
            description=tool.description or "",
            args_schema=schema,
            coroutine=call,
            response_format="content_and_artifact",
            metadata={**annotations, "mcp_tasks": True},
            handle_tool_error=_shown_to_model,  # type: ignore[arg-type]  # blocks, as langchain-mcp-adapters returns
        )

    async def _call(self, name: str, arguments: dict[str, Any]) -> tuple[list[ContentBlock], dict[str, Any] | None]:
        try:
            outcome = await self._run().run(name, arguments)
        except ArgumentsRejected as err:
            raise McpToolError(str(err)) from None
        if outcome.outcome in (Outcome.COMPLETED, Outcome.TOOL_ERROR):
            result = call_tool_result(outcome)
            blocks = [_block(part) for part in result.content]
            if result.is_error:
                raise McpToolError(_error_message(blocks, name), blocks)
            structured = result.structured_content
            return blocks, ({"structured_content": structured} if structured is not None else None)
        message = ends_run(outcome, self.other_outcomes)
        raise McpToolError(message)
