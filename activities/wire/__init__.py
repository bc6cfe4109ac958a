"""The MCP task wire layer: the one place in this project that speaks MCP tasks on the wire.

Everything above it (activities, workflow, CLI) uses this small typed interface and never sees
JSON-RPC. Both protocol eras are spoken, over stdio and streamable HTTP:

* **2025-11-25** ("legacy"): ``initialize``; task-augmented ``tools/call`` (``params.task``) only when
  the server declares ``capabilities.tasks.requests.tools.call`` and the tool's
  ``execution.taskSupport`` allows it; ``tasks/get``, blocking ``tasks/result``, ``tasks/cancel``,
  ``tasks/list``. Tasks are bound to the HTTP session (``Mcp-Session-Id``).
* **2026-07-28** with the extension ``io.modelcontextprotocol/tasks``: no handshake; every request
  carries the ``_meta`` envelope declaring the extension; ``Mcp-Method``/``Mcp-Name`` headers on HTTP;
  payload inline in ``tasks/get``; ``tasks/update`` answers input requests.

Interface (:class:`WireSession`; get one from :class:`SessionPool` in long-lived processes):

``WireSession.connect(endpoint, era=None)``
    Opens a session. With ``era`` pinned speaks only that era (:class:`CapabilityUnavailable` if the
    server does not offer tasks there). Otherwise ``initialize`` first and its answer decides: servers of
    2025-03-26 / 2025-06-18 (plain tools, no tasks) and 2025-11-25 are spoken as they answer; ``server/discover``
    only where 2026-07-28 is possible (a 2025-11-25 server without tasks whose tools declare ``taskSupport``,
    or one that refuses ``initialize``). A version nobody knows: :class:`UnknownProtocolVersion`.
    ``client.era``, ``client.protocol_version`` and ``client.tasks_offered`` report the choice. Transport
    failures raise :class:`TransportError`.
``WireSession.attach(session_ref)``
    Re-attaches from any process with only a serialised :class:`SessionRef` (no new ``initialize``,
    which on stateful servers would orphan the tasks). Stdio sessions cannot be re-attached
    (:class:`TaskUnreachable`): the task lives in the child process of whoever spawned it.
``start(tool, arguments, ttl_ms=None)`` → :class:`StartResult`
    ``tools/call`` as a task where allowed. Result is a task, a plain ``CallToolResult`` (the server ran
    it synchronously) or, on the extension, ``input_required``. **Never idempotent**: on
    :class:`TransportError` with ``may_have_reached_server`` the tool may be running; do not resend
    unless a replay policy allows it. JSON-RPC refusals (``InvalidParams``, ``MethodNotFound``,
    ``MissingCapability``) mean no work was started.
``get(task_id)`` → :class:`TaskState`
    ``tasks/get``, normalised (missing ``ttl``/``pollInterval`` tolerated). Idempotent: safe to retry on
    :class:`TransportError`. :class:`TaskNotFound` = unknown, expired or purged; not retryable.
``result(state)`` → :class:`TaskPayload`
    Only with a terminal ``state`` (``ValueError`` otherwise; legacy ``tasks/result`` blocks). Legacy
    calls ``tasks/result`` for ``failed`` too: the stored ``isError`` result or the original JSON-RPC
    error is returned as the payload, never raised. ``{_meta}``-only payloads and ``-32603`` after
    cancel give ``TaskPayload(empty=True)``. Extension: read inline from ``state``, no request.
``cancel(task_id)``
    ``tasks/cancel``. Already terminal: returns that terminal state (benign ``-32602``). Extension ack
    is ``None``. Cancellation is cooperative: the task may still end ``completed``; poll to learn.
``update(task_id, responses)``
    Extension ``tasks/update``; retry-safe (servers ignore keys answered twice).
``list_tasks()``
    Legacy ``tasks/list``; may raise :class:`MethodNotFound`.

Errors (all :class:`McpWireError`, with ``kind``, ``retryable``, ``may_have_reached_server``):
``TaskNotFound`` (-32602 on tasks/*), ``InvalidParams`` (-32602 elsewhere), ``MethodNotFound``
(-32601), ``MissingCapability`` (-32021/-32003), ``HeaderMismatch`` (-32020),
``UnsupportedProtocolVersion`` (-32022), ``JsonRpcError`` (other codes), ``TransportError`` (refused,
reset, timeout, 5xx; retryable), ``RateLimited`` (HTTP 429 + ``retry_after_s``),
``AuthorizationRequired`` (401/403), ``ProtocolViolation`` (bad JSON or shape; ``raw`` kept),
``TaskUnreachable`` (``SessionGone``, ``ProcessGone``), ``ResultDecodeError`` (work done, payload
off-contract; ``raw`` kept), ``CapabilityUnavailable``.

Results are decoded by :func:`decode_result` against a pinned contract: the SDK's ``CallToolResult``
and, where an ``outputSchema`` is pinned, ``structuredContent`` validated against it.
"""

from __future__ import annotations

import warnings
from importlib import import_module
from typing import TYPE_CHECKING, Any

from mcp_temporal_tasks.protocol.tasks import (
    EXTENSION,
    INITIALIZE_VERSIONS,
    KNOWN_VERSIONS,
    LEGACY,
    TERMINAL_STATUSES,
    Endpoint,
    Era,
    InputRequest,
    RpcErrorInfo,
    SessionRef,
    StartResult,
    TaskPayload,
    TaskState,
    ToolInfo,
)
from mcp_temporal_tasks.protocol.wire_errors import (
    ERROR_TYPES,
    AuthorizationRequired,
    CapabilityUnavailable,
    HeaderMismatch,
    InvalidParams,
    JsonRpcError,
    McpWireError,
    MethodNotFound,
    MissingCapability,
    ProcessGone,
    ProtocolViolation,
    RateLimited,
    ResultDecodeError,
    SessionGone,
    TaskNotFound,
    TaskUnreachable,
    TransportError,
    UnknownProtocolVersion,
    UnsupportedProtocolVersion,
)

if TYPE_CHECKING:
    from mcp_temporal_tasks.activities.wire.pool import PROCESS_ID, SessionPool
    from mcp_temporal_tasks.activities.wire.session import WireSession, parse_task
    from mcp_temporal_tasks.protocol.contract import contract_of, decode_result, digest

#: Loaded on first use: importing this package for its error and model names (``protocol``'s, re-exported) must not
#: load the connection layers (httpx2, h11, sockets, processes).
_LAZY = {
    "WireSession": "session",
    "parse_task": "session",
    "contract_of": "mcp_temporal_tasks.protocol.contract",
    "decode_result": "mcp_temporal_tasks.protocol.contract",
    "digest": "mcp_temporal_tasks.protocol.contract",
    "PROCESS_ID": "pool",
    "SessionPool": "pool",
}


#: Old names kept for one release (0.1.x), each warning once per use: name -> its replacement.
_DEPRECATED = {"McpTaskClient": "WireSession"}  # old name


def __getattr__(name: str) -> Any:
    if name in _DEPRECATED:
        warnings.warn(
            f"{__name__}.{name} is deprecated: use {_DEPRECATED[name]} (renamed apart from the "
            "workflow-side McpTasksClient)",
            DeprecationWarning,
            stacklevel=2,
        )
        name = _DEPRECATED[name]
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(_LAZY[name] if "." in _LAZY[name] else f"{__name__}.{_LAZY[name]}"), name)


__all__ = [
    "AuthorizationRequired",
    "CapabilityUnavailable",
    "ERROR_TYPES",
    "EXTENSION",
    "Endpoint",
    "Era",
    "HeaderMismatch",
    "InputRequest",
    "InvalidParams",
    "JsonRpcError",
    "LEGACY",
    "WireSession",
    "McpWireError",
    "MethodNotFound",
    "MissingCapability",
    "PROCESS_ID",
    "ProcessGone",
    "ProtocolViolation",
    "RateLimited",
    "ResultDecodeError",
    "RpcErrorInfo",
    "SessionGone",
    "SessionPool",
    "SessionRef",
    "StartResult",
    "TERMINAL_STATUSES",
    "TaskNotFound",
    "TaskPayload",
    "TaskState",
    "TaskUnreachable",
    "ToolInfo",
    "TransportError",
    "UnknownProtocolVersion",
    "UnsupportedProtocolVersion",
    "INITIALIZE_VERSIONS",
    "KNOWN_VERSIONS",
    "contract_of",
    "decode_result",
    "digest",
    "parse_task",
]
