"""Everything this project takes from the official ``mcp`` SDK (``mcp==2.3.0``), and its workarounds, in one place.

Taken: the reserved ``_meta`` keys and routing-header names and encoding (our extension envelope is byte-for-byte
the SDK's), the stdio framing and safe environment, ``mcp_types`` for results and tool listings. Worked around: a
task-augmented 2025-11-25 ``tools/call`` through ``ClientSession`` (it raises on ``CreateTaskResult``: upstream PR
3161), ``mcp_types.Task`` requiring ``ttl``, and the SDK's HTTP transport hiding statuses.
``tests/test_sdk_contract.py`` pins each to ``SDK_VERSION`` and fails when an upgrade changes one.
"""

from __future__ import annotations

import asyncio
import threading
from importlib.metadata import version
from typing import Any

import mcp_types
from mcp_types import CLIENT_CAPABILITIES_META_KEY, CLIENT_INFO_META_KEY, PROTOCOL_VERSION_META_KEY
from pydantic import ValidationError

from mcp_temporal_tasks.protocol.elicitation import ELICITATION_CAPABILITY
from mcp_temporal_tasks.protocol.sdk_types import SDK_VERSION, validate_call_tool_result
from mcp_temporal_tasks.protocol.tasks import EXTENSION, TASKS_EXTENSION, ToolInfo
from mcp_temporal_tasks.protocol.wire_errors import ProtocolViolation

__all__ = [
    "CLIENT_INFO",
    "SDK_VERSION",
    "default_stdio_environment",
    "extension_headers",
    "load_sdk",
    "param_headers",
    "param_headers_of",
    "extension_meta",
    "installed_sdk_version",
    "tool_info",
    "validate_call_tool_result",
]


CLIENT_INFO = {"name": "mcp-temporal-tasks", "version": "0.1.0"}


def installed_sdk_version() -> str:
    return version("mcp")


def extension_meta() -> dict[str, Any]:
    """The per-request ``_meta`` envelope of 2026-07-28, declaring the tasks extension and form elicitation.

    Sent on *every* request, ``tasks/*`` included: servers answer ``-32021`` otherwise. Form elicitation: the
    questions of a task (``tasks/update``) and of a call itself (MRTR ``inputResponses``) are put to a person.
    """
    return {
        PROTOCOL_VERSION_META_KEY: EXTENSION,
        CLIENT_CAPABILITIES_META_KEY: {
            "extensions": {TASKS_EXTENSION: {}},
            "elicitation": dict(ELICITATION_CAPABILITY),
        },
        CLIENT_INFO_META_KEY: CLIENT_INFO,
    }


_SDK_LOADED = threading.Event()


def _import_sdk() -> None:
    import mcp.client.auth.utils
    import mcp.client.stdio
    import mcp.shared.auth
    import mcp.shared.auth_utils
    import mcp.shared.inbound  # noqa: F401

    _SDK_LOADED.set()


async def load_sdk() -> None:
    """Import the ``mcp`` SDK, where a connection first needs it, in a thread. Its package imports the SDK's whole
    client and server, about a second of CPU (more on a loaded machine): on the event loop, that second stalls every
    heartbeat, read and wake of the worker, and a start whose heartbeat timeout is short times out while its first
    stdio child spawns. Awaited before each use below (stdio, OAuth, 2026-07-28 over HTTP); free once loaded."""
    if not _SDK_LOADED.is_set():
        await asyncio.to_thread(_import_sdk)


def extension_headers(method: str, name: str | None) -> dict[str, str]:
    """Routing headers of 2026-07-28 over HTTP. ``Mcp-Name`` is the tool name or the task id."""
    # Imported where first used, as below (after load_sdk, off the event loop): ``mcp``'s package imports its whole
    # client and server (about a second of CPU: a worker's imports went from 1.8 to 0.7 s), which a worker or
    # `mcp-tasks run` on a 2025-11-25 HTTP server never needs.
    from mcp.shared.inbound import MCP_METHOD_HEADER, MCP_NAME_HEADER, MCP_PROTOCOL_VERSION_HEADER, encode_header_value

    headers = {MCP_PROTOCOL_VERSION_HEADER: EXTENSION, MCP_METHOD_HEADER: method}
    if name is not None:
        headers[MCP_NAME_HEADER] = encode_header_value(name)
    return headers


def param_headers_of(input_schema: Any) -> tuple[dict[tuple[str, ...], str], str | None]:
    """A tool's ``x-mcp-header`` declarations (SEP-2243), read by the SDK's own walker: the property paths it mirrors
    and their header tokens, or why the declaration is invalid (then the tool must not be called). Only after
    :func:`load_sdk`."""
    from mcp.shared.inbound import find_invalid_x_mcp_header, x_mcp_header_map

    problem = find_invalid_x_mcp_header(input_schema)
    if problem is not None:
        return {}, problem
    return (x_mcp_header_map(input_schema) if isinstance(input_schema, dict) else {}), None


def param_headers(header_map: dict[tuple[str, ...], str], arguments: dict[str, Any]) -> dict[str, str]:
    """The ``Mcp-Param-*`` headers a ``tools/call`` with ``arguments`` carries: the SDK's encoding (``true``/``false``,
    numbers as text, base64 for a value a header cannot carry as is), a null or absent value omitted."""
    from mcp.shared.inbound import mcp_param_headers

    return mcp_param_headers(header_map, arguments) if header_map else {}


def default_stdio_environment() -> dict[str, str]:
    """The environment a stdio child inherits: the SDK's safe subset (PATH, HOME, ...), no secrets."""
    from mcp.client.stdio import get_default_environment

    return get_default_environment()


def tool_info(raw: Any) -> ToolInfo:
    """Parse one ``tools/list`` entry with the SDK's ``Tool`` model (extra fields tolerated)."""
    try:
        tool = mcp_types.Tool.model_validate(raw)
    except ValidationError as exc:
        raise ProtocolViolation(f"tools/list entry is not a Tool: {exc.errors()[0]['msg']}", raw=raw) from exc
    annotations = tool.annotations
    return ToolInfo(
        name=tool.name,
        task_support=tool.execution.task_support if tool.execution else None,
        output_schema=tool.output_schema,
        read_only_hint=annotations.read_only_hint if annotations else None,
        idempotent_hint=annotations.idempotent_hint if annotations else None,
        destructive_hint=annotations.destructive_hint if annotations else None,
    )
