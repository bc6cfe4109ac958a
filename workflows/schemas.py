"""The JSON Schemas of what other languages send and read (``McpTaskRequest``, ``McpTaskOutcome``, updates, signals).

Generated from the pydantic models, never written by hand: ``mcp-tasks schema`` prints or writes them, and the copies
under ``docs/schemas/`` are checked current by ``tests/test_schemas.py``. Our data converter writes plain JSON
(``json/plain``, UTF-8), so any SDK's default converter reads and writes the same bytes (docs/temporal-apps.md).
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import TypeAdapter

from mcp_temporal_tasks.activities.activity_io import LegacyInputRequest
from mcp_temporal_tasks.activities.relay import INPUT_DELIVERED_SIGNAL, INPUT_REQUESTED_SIGNAL
from mcp_temporal_tasks.workflows.records import McpTaskOutcome, McpTaskRequest, TaskView

#: The workflow's interface, by Temporal name: (kind, what goes in, what comes back).
INTERFACE: dict[str, tuple[str, Any, Any]] = {
    "McpTaskWorkflow": ("workflow", McpTaskRequest, McpTaskOutcome),
    "status": ("query", None, TaskView),
    "cancel": ("update", str, str),
    "approve_replay": ("update", None, int),
    "provide_input": ("update", dict[str, dict[str, Any]], list[str]),
    # Sent by our relay activity to its workflow (2025-11-25 input relays); listed for completeness.
    INPUT_REQUESTED_SIGNAL: ("signal", LegacyInputRequest, None),
    INPUT_DELIVERED_SIGNAL: ("signal", str, None),
}

_TITLES = {
    "cancel": "the reason (default: cancelled by request)",
    "provide_input": "answers to pending input requests, by request key: each the requested object",
}


def _schema(tp: Any, title: str) -> dict[str, Any]:
    schema = TypeAdapter(tp).json_schema(mode="serialization" if title.endswith("result") else "validation")
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": title, **schema}


def json_schemas() -> dict[str, dict[str, Any]]:
    """File name → schema: the request, the outcome, and each query's and update's argument and result."""
    out: dict[str, dict[str, Any]] = {
        "McpTaskRequest.json": _schema(McpTaskRequest, "McpTaskRequest"),
        "McpTaskOutcome.json": _schema(McpTaskOutcome, "McpTaskOutcome result"),
        "TaskView.json": _schema(TaskView, "TaskView result (query status)"),
    }
    for name, (kind, arg, result) in INTERFACE.items():
        if kind == "signal":
            out[f"signal.{name}.arg.json"] = _schema(arg, f"{name} signal argument")
            continue
        if kind != "update":
            continue
        if arg is not None:
            schema = _schema(arg, f"{name} update argument")
            schema["description"] = _TITLES[name]
            out[f"update.{name}.arg.json"] = schema
        out[f"update.{name}.result.json"] = _schema(result, f"{name} update result")
    return out


def render(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
