"""Following a task: the live view (the ``status()`` query with the waiting activity's latest heartbeat), the
progress lines on stderr, and the human summary of an outcome.

Every server-originated string shown here goes through ``printable``: server text is untrusted display text.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import time

from temporalio.client import WorkflowHandle

from mcp_temporal_tasks.activities.models import STILL_WORKING
from mcp_temporal_tasks.worker.cli.parser import EXIT_ENDED, EXIT_OK, err
from mcp_temporal_tasks.worker.printable import printable
from mcp_temporal_tasks.workflows.client import outcome_of
from mcp_temporal_tasks.workflows.mcp_task import McpTaskWorkflow
from mcp_temporal_tasks.workflows.models import McpTaskOutcome, TaskView

TaskHandle = WorkflowHandle[McpTaskWorkflow, McpTaskOutcome]
#: How the end was learned (``delivered_by``), as the live view and the summary say it.
_LEARNED = {"notification": "notified", "poll": "polled"}


async def follow(handle: TaskHandle, *, ui: str | None, quiet: bool = False) -> McpTaskOutcome:
    """Print live progress to stderr until the workflow ends; return its outcome."""
    start = time.monotonic()
    result = asyncio.create_task(outcome_of(handle))
    last = ""
    if not quiet:
        err(f"following {handle.id}" + (f"  ·  UI: {ui}" if ui else ""))
    while not result.done():
        line = await _progress_line(handle)
        if line and line != last and not quiet:
            err(f"[{time.monotonic() - start:6.1f}s] {line}")
            last = line
        await asyncio.wait({result}, timeout=0.5)
    return result.result()


async def live_view(handle: TaskHandle) -> TaskView | None:
    """The ``status()`` query's view with the live MCP status and ``statusMessage`` of the waiting activity's
    heartbeat (the workflow's own copy is as of its last transition). None when no worker answers."""
    try:
        view = await asyncio.wait_for(handle.query(McpTaskWorkflow.status), timeout=2)
    except Exception:
        return None
    live = None
    try:
        desc = await asyncio.wait_for(handle.describe(), timeout=2)
        for act in desc.raw_description.pending_activities:
            if act.heartbeat_details.payloads:
                live = json.loads(act.heartbeat_details.payloads[0].data)
            # A wait idle between polls sends no heartbeats: its last attempt's benign failure says what it saw.
            still = act.last_failure.application_failure_info
            if still.type == STILL_WORKING and still.details.payloads:
                live = json.loads(still.details.payloads[0].data)
    except Exception:
        pass
    if isinstance(live, dict):
        if live.get("status") in ("working", "input_required", "completed", "failed", "cancelled"):
            view.task_status = live["status"]
        if isinstance(live.get("statusMessage"), str):
            view.status_message = live["statusMessage"]
    return view


def view_line(view: TaskView, workflow_id: str) -> str:
    """One progress line (and, for each input request or a pending approval, how to answer it)."""
    parts = [view.phase.value]
    # Server text: shown escaped (control and bidi characters), one line per field.
    if view.task_status:
        parts.append(printable(view.task_status))
    if view.status_message:
        parts.append(f"“{printable(view.status_message)}”")
    if view.task_id:
        parts.append(f"task {printable(view.task_id)}")
    if view.delivered_by:
        parts.append(_LEARNED[view.delivered_by])
    line = " · ".join(parts)
    wid = shlex.quote(printable(workflow_id))
    if view.phase.value == "AWAITING_APPROVAL":
        ended = view.operation_attempts[-1].ended if view.operation_attempts else None
        line += (f"\n    waiting for approval to send tools/call again: the last call ended {printable(ended or 'unknown')}"
                 f"\n    approve with: mcp-tasks approve {wid}   (or stop with: mcp-tasks cancel {wid})")
    for p in view.pending_inputs:
        key = printable(p.key)
        line += (f"\n    needs input [{key}]: {printable(p.message or p.method)}\n"
                 f"    answer with: mcp-tasks answer {wid} --key {shlex.quote(key)}")
    return line


async def _progress_line(handle: TaskHandle) -> str:
    view = await live_view(handle)
    return view_line(view, handle.id) if view is not None else ""


def outcome_summary(o: McpTaskOutcome) -> str:
    """The human view of an outcome. Every server-originated string goes through ``printable``."""
    p = printable
    lines = [f"{o.outcome.value}: {p(o.ledger.tool)} on {p(o.ledger.server)} (workflow {p(o.workflow_id)})"]
    if o.task_id:
        learned = f" · {_LEARNED[o.delivered_by]}" if o.delivered_by else ""
        lines.append(f"  task {p(o.task_id)} · last status {p(o.task_status)} · era {p(o.era)}{learned}")
    if o.result is not None:
        texts = [p(b.get("text", ""), multiline=True) for b in o.result.get("content", []) if b.get("type") == "text"]
        lines.append("  result: " + (" | ".join(texts) if texts else json.dumps(o.result)[:500]))
    if o.result_ref is not None:
        lines.append(f"  result stored outside history ({o.result_ref.size} bytes): {o.result_ref.uri}")
    if o.error is not None:
        lines.append(f"  error {o.error.code}: {p(o.error.message)}")
    if o.classification is not None:
        lines.append(f"  classification: {o.classification.value}"
                     + (f" · retry after {o.retry_after_s:g}s" if o.retry_after_s is not None else ""))
    if o.reason:
        lines.append(f"  reason: {p(o.reason)}")
    lines.append(f"  tools/call sent: {len(o.operation_attempts)}")
    return "\n".join(lines)


def exit_code(outcome: McpTaskOutcome) -> int:
    return EXIT_OK if outcome.outcome.value == "completed" else EXIT_ENDED
