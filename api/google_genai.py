"""``McpTasksClientSession`` for Gemini's automatic function calling on Temporal (``[google-genai]``).

No tool can end a ``generate_content`` call (google-genai shows the model any exception a tool raises, and goes on):
an outcome other than ``completed`` / ``tool_error`` is kept in ``failures``, and ``raise_for_failures()`` after the
call ends the workflow code with the first. One session object is one agent run's scope of child ids. The one-line
change and what the model sees of each outcome: docs/agents.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError

_PIN = "'mcp-temporal-tasks[google-genai]' (google-genai==2.34.0, temporalio-google-genai==0.1.0)"

try:
    import google.genai._adapters as _genai_adapters
    import google.genai._extra_utils as _genai_afc
    import google.genai._mcp_utils as _genai_mcp
    import temporalio.google_genai  # noqa: F401  (the plugin and TemporalAsyncClient this session runs under)
    from mcp import ClientSession
except ImportError as _missing:  # pragma: no cover - exercised by tests/test_agents_packaging.py
    raise ImportError(
        f"mcp_temporal_tasks.google_genai needs google-genai on Temporal: pip install {_PIN}"
    ) from _missing

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

# What this adapter relies on, checked at import (tests/test_agents_packaging.py removes each in turn): AFC turns an
# mcp.ClientSession in `tools` into function declarations (list_tools) and calls (call_tool) through these two.
require_hooks(
    "mcp_temporal_tasks.google_genai",
    _PIN,
    {
        "google.genai._extra_utils.parse_config_for_mcp_sessions": hasattr(_genai_afc, "parse_config_for_mcp_sessions"),
        "google.genai._adapters.McpToGenAiToolAdapter.call_tool": hasattr(
            getattr(_genai_adapters, "McpToGenAiToolAdapter", None), "call_tool"
        ),
        "google.genai._mcp_utils.mcp_to_gemini_tool": hasattr(_genai_mcp, "mcp_to_gemini_tool"),
    },
)

__all__ = ["McpTasksClientSession"]

#: Where google-genai's schema filter (``_mcp_utils._filter_to_supported_schema``) expects a subschema object.
_ONE_SCHEMA = ("items", "additionalProperties", "additional_properties")
_SCHEMA_LISTS = ("anyOf", "any_of", "oneOf", "one_of")
_SCHEMA_MAPS = ("properties", "defs", "$defs")


def _for_gemini(schema: Any) -> Any:
    """``schema`` without the boolean subschemas (``additionalProperties: false``, ``items: true``, a property
    ``true``) that google-genai's MCP conversion crashes on (it calls ``.items()`` on them, inside the workflow: a
    workflow task that fails forever). Dropped where one stands alone, ``{}`` in a list or map: only the model's
    view loses them; the arguments are still checked against the server's own schema before any ``tools/call``."""
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _ONE_SCHEMA:
            if isinstance(value, dict):
                out[key] = _for_gemini(value)
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            out[key] = [_for_gemini(v) if isinstance(v, dict) else {} for v in value]
        elif key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {k: _for_gemini(v) if isinstance(v, dict) else {} for k, v in value.items()}
        else:
            out[key] = value
    return out


class _Tool(mcp_types.Tool):
    """A tool as this session hands it to google-genai, which reads ``inputSchema`` (its 1.x name) before
    ``input_schema``. Answered here: fastmcp, wherever a worker loads it (Pydantic AI's Temporal support does),
    patches that name onto ``mcp_types.Tool`` with a getter that imports fastmcp, which inside the workflow sandbox
    would be a fresh, refused import (the plugin does not pass fastmcp through)."""

    @property
    def inputSchema(self) -> dict[str, Any]:  # noqa: N802  (the 1.x name google-genai reads)
        return self.input_schema


class _CallToolResult(mcp_types.CallToolResult):
    """A result as this session hands it to google-genai, which reads ``isError`` (see :class:`_Tool`)."""

    @property
    def isError(self) -> bool | None:  # noqa: N802  (the 1.x name google-genai reads)
        return self.is_error


def _for_genai(result: mcp_types.CallToolResult) -> _CallToolResult:
    return _CallToolResult.model_validate(result.model_dump(by_alias=True, exclude_unset=True))


def _declarable(tool: mcp_types.Tool, server: str) -> mcp_types.Tool:
    """The tool as google-genai will turn it into a function declaration, or one clear error naming it (rather than
    google-genai's own exception inside the workflow, which fails the workflow task again and again)."""
    shown = _Tool.model_validate(
        tool.model_dump(by_alias=True, exclude_unset=True) | {"inputSchema": _for_gemini(tool.input_schema)}
    )
    try:
        _genai_mcp.mcp_to_gemini_tool(shown)
    except Exception as err:  # noqa: BLE001  (whatever google-genai raises on a schema it cannot convert)
        raise ApplicationError(
            f"google-genai cannot declare tool {tool.name!r} of MCP server {server!r} to the model: "
            f"{type(err).__name__}: {err}",
            type="McpToolSchemaUnsupported",
            non_retryable=True,
        ) from None
    return shown


class McpTasksClientSession(ClientSession):
    """An ``mcp.ClientSession`` for ``GenerateContentConfig(tools=[...])`` whose calls are durable child workflows.

    ``server``: a name from the worker's configuration, or an inline :class:`Endpoint` the worker allows.
    ``tools``: only these tools (each must be listed by the server). ``tool_definitions``: the tools, instead of a
    ``list_tools`` activity. ``task_queue``, ``principal``, ``era``, ``timeouts``: as for
    :class:`~mcp_temporal_tasks.McpTasksClient`. ``other_outcomes``: ``"raise"`` (default) or ``"tell_model"``.
    ``key``: names this session's children (default: the server's name).

    For ``TemporalAsyncClient().models.generate_content(...)`` inside a workflow, on a worker whose client has
    ``GoogleGenAIPlugin(genai_client)`` and :class:`~mcp_temporal_tasks.McpTasksPlugin`.

    **How google-genai treats it.** ``generate_content`` runs in the workflow (``TemporalAsyncClient`` sends each
    model request through an activity) and its automatic function calling (AFC) recognises any ``mcp.ClientSession``
    in ``tools``: it calls ``list_tools()`` once per ``generate_content`` and ``call_tool(name, arguments)`` for each
    function call of the model (``_extra_utils.parse_config_for_mcp_sessions``, ``_adapters.McpToGenAiToolAdapter``).
    This class is such a session that speaks no MCP itself: ``list_tools`` is one activity per session object (cached
    on it, so per workflow when the session is kept) and ``call_tool`` one child ``McpTaskWorkflow``, both workflow
    code through :class:`~mcp_temporal_tasks.McpTasksClient`. google-genai deep-copies the request config on every
    call; a copy of this session is the session itself, so its tool list and its scope of child ids outlive the copy.
    One object is one agent run's scope of child ids (as ``mcp_tasks_server`` for the OpenAI Agents SDK). Outside a
    workflow it refuses to run.

    With ``other_outcomes="raise"`` (the default) ``call_tool`` raises :class:`~mcp_temporal_tasks.McpTaskError` for
    any other outcome: called from workflow code it ends that code as for ``McpTasksClient``; inside AFC google-genai
    shows the model ``{"error": "MCP task … ended unknown_outcome: …"}`` and goes on, so every such error is kept in
    :attr:`failures` for :meth:`raise_for_failures`.
    """

    def __init__(  # no ClientSession.__init__: there are no streams, this session sends no MCP message itself
        self,
        server: str | Endpoint,
        *,
        tools: Sequence[str] | None = None,
        tool_definitions: Sequence[mcp_types.Tool | Mapping[str, Any]] | None = None,
        task_queue: str | None = None,
        principal: str | None = None,
        era: Era | None = None,
        timeouts: Timeouts | None = None,
        other_outcomes: OtherOutcomes = "raise",
        key: str | None = None,
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
        #: With ``other_outcomes="raise"``: the calls that ended other than ``completed``/``tool_error``, in order.
        self.failures: list[McpTaskError] = []

    def __copy__(self) -> McpTasksClientSession:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> McpTasksClientSession:
        # google-genai deep-copies the config (tools included) on each generate_content and each AFC turn: the copy
        # must keep this session's cached tools, running calls and scope, so it is this session.
        return self

    @property
    def name(self) -> str:
        return self._mcp.name

    async def __aenter__(self) -> McpTasksClientSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def list_tools(
        self, cursor: str | None = None, *, params: mcp_types.PaginatedRequestParams | None = None
    ) -> mcp_types.ListToolsResult:
        """The server's tools (one ``list_tools`` activity for this session; none with ``tool_definitions``)."""
        in_workflow_only("McpTasksClientSession")
        return mcp_types.ListToolsResult(tools=[_declarable(t, self.name) for t in await self._mcp.list_tools()])

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        read_timeout_seconds: float | timedelta | None = None,
        progress_callback: Any = None,
        **_: Any,
    ) -> mcp_types.CallToolResult:
        """Call ``name`` as one child ``McpTaskWorkflow`` (or re-attach to this session's identical earlier call of a
        tool that is not idempotent). ``read_timeout_seconds``/``progress_callback`` do not apply: the child's
        ``timeouts`` bound it, and its progress is in its ``status`` query."""
        try:
            outcome = await self._mcp.run(name, dict(arguments or {}))
        except ArgumentsRejected as err:
            raise ValueError(str(err)) from None
        if outcome.outcome in (Outcome.COMPLETED, Outcome.TOOL_ERROR):
            return _for_genai(call_tool_result(outcome))
        if self.other_outcomes == "raise":
            self.failures.append(McpTaskError(outcome))
            raise McpTaskError(outcome)
        return _CallToolResult(
            content=[mcp_types.TextContent(type="text", text=outcome_message(outcome))], is_error=True
        )

    def raise_for_failures(self) -> None:
        """Raise :class:`~mcp_temporal_tasks.McpTaskError` for the first call that ended other than ``completed`` /
        ``tool_error`` (google-genai showed it to the model and went on); nothing when there was none."""
        if self.failures:
            raise McpTaskError(self.failures[0].outcome)

    async def send_request(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(
            f"McpTasksClientSession {self.name!r} offers list_tools and call_tool only, each "
            "run by a Temporal activity or child workflow; it sends no MCP request itself"
        )
