"""The light half of ``sdk_compat``: ``mcp_types`` (the official SDK's models) and the SDK version, no ``mcp`` client.

The wire's ``sdk_compat`` re-exports both. Workflow code reaches this module through :mod:`.contract` (a task's
recorded result contract names the version), so it must stay free of ``mcp`` itself, whose import loads httpx2,
anyio and uvicorn.
"""

from __future__ import annotations

from typing import Any

import mcp_types

#: The SDK version these workarounds were written and tested against (``tests/test_sdk_contract.py`` holds it).
SDK_VERSION = "2.3.0"


def validate_call_tool_result(raw: Any) -> mcp_types.CallToolResult:
    """The SDK's own ``CallToolResult`` validation; raises pydantic's ValidationError."""
    return mcp_types.CallToolResult.model_validate(raw)
