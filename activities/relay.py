"""The relay's protocol with its workflow: the signal and query names and the key of a question.

Shared by ``relay_input`` (2025-11-25 input on a held ``tasks/result`` stream) and ``McpTaskWorkflow``; the key makes a
re-sent question the same one. Strings recorded in histories: they never change.
"""

from __future__ import annotations

import hashlib
from typing import Any

#: Workflow messages the relay uses (defined by McpTaskWorkflow).
INPUT_REQUESTED_SIGNAL = "legacy_input_requested"
INPUT_DELIVERED_SIGNAL = "legacy_input_delivered"
RELAY_STATE_QUERY = "legacy_relay_state"


def legacy_input_key(method: str, params: dict[str, Any]) -> str:
    """Stable key of an input request: a re-sent identical question maps to the same key (asked once)."""
    from mcp_temporal_tasks.protocol.contract import canonical_json

    body = canonical_json({"method": method, "params": {k: v for k, v in params.items() if k != "_meta"}})
    return "legacy-" + hashlib.sha256(body.encode()).hexdigest()[:16]
