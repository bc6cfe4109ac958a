"""``mcp_tasks_server`` for OpenAI Agents SDK agents on Temporal (``[openai-agents]``).

One object is one scope of child ids: build the agent (and this server) inside the workflow, once per agent run. An
outcome other than ``completed`` / ``tool_error`` ends the run: its ``McpTaskError`` goes through the SDK's
``failure_error_function``, never turned into an invitation to call again. The one-line change and what the model
sees of each outcome: docs/agents.md.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from temporalio import workflow

try:
    from agents import RunContextWrapper
    from agents.mcp import MCPServer
    from agents.tool import default_tool_error_function
    from temporalio.openai_agents._temporal_mcp_server import _TemporalMCPServer
except ImportError as _missing:  # pragma: no cover - exercised by tests/test_agents_packaging.py
    raise ImportError(
        "mcp_temporal_tasks.openai_agents needs the OpenAI Agents SDK on Temporal: "
        "pip install 'mcp-temporal-tasks[openai-agents]' (temporalio-openai-agents[mcp]==1.1.0)"
    ) from _missing

with workflow.unsafe.imports_passed_through():
    import mcp_types

    from mcp_temporal_tasks._agent_tools import AgentMcpTools, ArgumentsRejected, OtherOutcomes, ends_run
    from mcp_temporal_tasks.protocol.tasks import Endpoint, Era
    from mcp_temporal_tasks.workflows.records import Outcome, Timeouts
    from mcp_temporal_tasks.workflows.task_error import McpTaskError
    from mcp_temporal_tasks.workflows.tasks_client import call_tool_result

__all__ = ["mcp_tasks_server", "McpTasksServerClient"]

ToolErrorFunction = Callable[[RunContextWrapper[Any], Exception], "str | Awaitable[str]"]


def _typed_task_error(err: BaseException | None) -> McpTaskError | None:
    seen = 0
    while err is not None and seen < 10:
        if isinstance(err, McpTaskError):
            return err
        err = err.__cause__ or err.__context__
        seen += 1
    return None


def _letting_task_errors_through(format_error: ToolErrorFunction | None) -> ToolErrorFunction:
    """A ``failure_error_function`` that re-raises our :class:`McpTaskError` (ending the run) and formats any
    other tool error as ``format_error`` (default: the SDK's) would.

    The SDK's default formats any tool exception as "An error occurred while running the tool. Please try again.":
    an invitation to call again, which a tool that may already have run must not get."""

    async def failure(ctx: RunContextWrapper[Any], error: Exception) -> str:
        typed = _typed_task_error(error)
        if typed is not None:
            # A fresh error without context: the SDK's wrappers chain back to `typed`, and Temporal's failure
            # converter follows __context__ too, so re-raising `typed` itself would make a cycle.
            raise McpTaskError(typed.outcome) from None
        formatted = (format_error or default_tool_error_function)(ctx, error)
        if inspect.isawaitable(formatted):
            formatted = await formatted
        return str(formatted)

    return failure


class McpTasksServerClient:
    """What ``temporalio-openai-agents``' own workflow-side server (``_TemporalMCPServer``) asks of its client, done
    with durable tasks: ``list_tools`` (one activity, cached), ``call_tool`` (one child workflow per call)."""

    def __init__(self, mcp: AgentMcpTools, *, other_outcomes: OtherOutcomes = "raise") -> None:
        self._mcp = mcp
        self.other_outcomes: OtherOutcomes = other_outcomes

    @property
    def name(self) -> str:
        return self._mcp.name

    @property
    def cached_tools(self) -> mcp_types.ListToolsResult | None:
        tools = self._mcp.cached
        return None if tools is None else mcp_types.ListToolsResult(tools=tools)

    async def list_tools(self) -> mcp_types.ListToolsResult:
        if not workflow.in_workflow():
            raise RuntimeError(
                "mcp_tasks_server() runs its MCP tool calls as child workflows: use it in an agent "
                "run inside a Temporal workflow (with McpTasksPlugin on the worker)"
            )
        return mcp_types.ListToolsResult(tools=await self._mcp.list_tools())

    async def call_tool(
        self, tool_name: str, arguments: dict[str, Any] | None, meta: Any = None
    ) -> mcp_types.CallToolResult:
        try:
            outcome = await self._mcp.run(tool_name, arguments)
        except ArgumentsRejected as err:
            # A model's mistake: the SDK's tool-error path tells it (no tools/call was sent).
            raise ValueError(str(err)) from None
        if outcome.outcome in (Outcome.COMPLETED, Outcome.TOOL_ERROR):
            return call_tool_result(outcome)
        message = ends_run(outcome, self.other_outcomes)
        return mcp_types.CallToolResult(content=[mcp_types.TextContent(type="text", text=message)], is_error=True)

    async def list_prompts(self) -> mcp_types.ListPromptsResult:
        return mcp_types.ListPromptsResult(prompts=[])

    async def get_prompt(self, name: str, arguments: dict[str, str] | None = None) -> mcp_types.GetPromptResult:
        raise NotImplementedError(f"MCP server {self.name!r} through mcp_tasks_server() offers tools only")

    async def list_resources(self) -> mcp_types.ListResourcesResult:
        return mcp_types.ListResourcesResult(resources=[])

    async def list_resource_templates(self) -> mcp_types.ListResourceTemplatesResult:
        return mcp_types.ListResourceTemplatesResult(resource_templates=[])

    async def read_resource(self, uri: str) -> mcp_types.ReadResourceResult:
        raise NotImplementedError(f"MCP server {self.name!r} through mcp_tasks_server() offers tools only")


def mcp_tasks_server(
    server: str | Endpoint,
    *,
    tools: Sequence[str] | None = None,
    tool_definitions: Sequence[mcp_types.Tool | Mapping[str, Any]] | None = None,
    task_queue: str | None = None,
    principal: str | None = None,
    era: Era | None = None,
    timeouts: Timeouts | None = None,
    other_outcomes: OtherOutcomes = "raise",
    use_structured_content: bool = False,
    failure_error_function: ToolErrorFunction | None = None,
    key: str | None = None,
    **server_kwargs: Any,
) -> MCPServer:
    """An ``agents.mcp.MCPServer`` for ``Agent(mcp_servers=[...])`` whose calls are durable child workflows.

    ``server``: a name from the worker's configuration, or an inline :class:`Endpoint` the worker allows.
    ``tools``: only these tools (each must be listed by the server). ``tool_definitions``: the tools, instead of
    a ``list_tools`` activity. ``task_queue``, ``principal``, ``era``, ``timeouts``: as for
    :class:`~mcp_temporal_tasks.McpTasksClient`. ``other_outcomes``: ``"raise"`` (default) or ``"tell_model"``.
    ``failure_error_function``: how other tool errors are shown to the model (default: the SDK's).
    ``key``: names this server in child ids (default: its name). Other keyword arguments (``require_approval``,
    guardrails...) go to ``MCPServer``.

    For an agent run with ``Runner.run`` inside a workflow, on a worker whose client has ``OpenAIAgentsPlugin(...)``
    and :class:`~mcp_temporal_tasks.McpTasksPlugin`.

    **How the framework treats it.** ``Runner.run`` in a workflow refuses any ``MCPServer`` but its own references
    and its own workflow-side server class (``temporalio.openai_agents._temporal_mcp_server._TemporalMCPServer``:
    "Unknown mcp_server type ... may not work durably"). So the returned object *is* that class, built around
    :class:`McpTasksServerClient` instead of ``temporalio.mcp.TemporalMCPClient`` (the class takes any client of that
    shape; this is why the extra installs ``temporalio-openai-agents[mcp]``): its ``list_tools`` and ``call_tool``
    are workflow code that start activities (``list_tools``, ``resolve``) and child workflows through
    :class:`~mcp_temporal_tasks.McpTasksClient`; ``connect``/``cleanup`` do nothing.

    An outcome other than ``completed`` / ``tool_error`` ends the run: the SDK wraps the tool's exception
    (``UserError("Error running tool …")``) and ``temporalio-openai-agents`` re-raises it from ``Runner.run`` as
    ``AgentsWorkflowError`` whose ``__cause__`` is our :class:`~mcp_temporal_tasks.McpTaskError`; the workflow fails
    with both, and ``McpTaskError.outcome_of(err)`` reads the outcome from either.
    """
    mcp = AgentMcpTools(
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
    client = McpTasksServerClient(mcp, other_outcomes=other_outcomes)
    # The framework's own workflow-side server class: Runner.run in a workflow accepts no other MCPServer type
    # ("Unknown mcp_server type ... may not work durably"); it takes any client of TemporalMCPClient's shape.
    return _TemporalMCPServer(
        client,  # type: ignore[arg-type]
        failure_error_function=_letting_task_errors_through(failure_error_function),
        use_structured_content=use_structured_content,
        **server_kwargs,
    )
