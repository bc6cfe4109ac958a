"""What differs between the MCP task eras, said once: each era's rules as data, for workflows, activities and the wire.

Code above the wire asks ``era_rules(era).<fact>`` instead of comparing era names, so a new revision is a new row here
(and a new module in ``activities/wire/eras/``), not a branch in every caller.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from mcp_temporal_tasks.protocol.tasks import EXTENSION, LEGACY, Era


@dataclass(frozen=True)
class EraRules:
    era: Era
    #: A task's questions arrive on a held ``tasks/result`` stream and are answered there, by the input relay (True);
    #: or they arrive in the task's state and are answered with ``tasks/update`` (False).
    input_on_result_stream: bool
    #: A failed task's stored error may arrive as the JSON-RPC error reply to ``tasks/result``, which a read refused by
    #: the server or a gateway looks like too: such a payload never justifies a replay by itself.
    error_reply_payload: bool
    #: The client asks for a task per call, from ``tools/list``'s ``execution.taskSupport`` (True); or the server
    #: decides per call whether a ``tools/call`` becomes a task (False).
    client_asks_for_task: bool
    #: How a session's task notifications reach a client: its HTTP GET stream, or ``subscriptions/listen``.
    notified_by: Literal["get stream", "subscriptions/listen"]
    #: A tool's ``x-mcp-header`` declarations (SEP-2243) are mirrored as ``Mcp-Param-*`` headers on HTTP, and a tool
    #: whose declaration is invalid is never called (True); or the annotation means nothing in this era (False).
    param_headers: bool = False


RULES: dict[str, EraRules] = {
    LEGACY: EraRules(
        era=LEGACY,
        input_on_result_stream=True,
        error_reply_payload=True,
        client_asks_for_task=True,
        notified_by="get stream",
    ),
    EXTENSION: EraRules(
        era=EXTENSION,
        input_on_result_stream=False,
        error_reply_payload=False,
        client_asks_for_task=False,
        notified_by="subscriptions/listen",
        param_headers=True,
    ),
}


def era_rules(era: str) -> EraRules:
    """The rules of ``era`` (a ``SessionRef``'s, a ``TaskState``'s or a ledger's)."""
    return RULES[era]


#: How each protocol version shows beside its number (``status``, the outcome, the UI).
_VERSION_NOTES = {
    "2026-07-28": "tasks extension, no handshake",
    "2025-11-25": "initialize handshake",
}
_OLDER_NOTE = "initialize handshake, no tasks in this version"


def protocol_label(era: str | None, protocol_version: str | None) -> str | None:
    """How a task's protocol shows in ``status``, the outcome and the UI: the version the server answered and what it
    means, e.g. ``2025-06-18 (initialize handshake, no tasks in this version)``. None when not known yet."""
    if protocol_version is None:
        return era
    return f"{protocol_version} ({_VERSION_NOTES.get(protocol_version, _OLDER_NOTE)})"


__all__ = ["EraRules", "RULES", "era_rules", "protocol_label"]
