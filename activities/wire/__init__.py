"""The MCP task wire layer: the one place in this project that speaks MCP tasks on the wire.

Everything above it (activities, workflow, CLI) uses this small typed interface and never sees JSON-RPC:
:class:`WireSession` (from :class:`SessionPool` in long-lived processes), the models and failures of ``protocol``.
Every era, over stdio and streamable HTTP; each era's differences in its own room (:mod:`.eras`).
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
    NotMcpEndpoint,
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
    from mcp_temporal_tasks.activities.wire.replies import parse_task
    from mcp_temporal_tasks.activities.wire.session import WireSession
    from mcp_temporal_tasks.protocol.contract import contract_of, decode_result, digest

#: Loaded on first use: importing this package for its error and model names (``protocol``'s, re-exported) must not
#: load the connection layers (httpx2, h11, sockets, processes).
_LAZY = {
    "WireSession": "session",
    "parse_task": "replies",
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
    "NotMcpEndpoint",
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
