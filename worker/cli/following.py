"""Following a task: live view, progress lines on stderr, outcome summary.

The live view is the ``status()`` query with the waiting activity's latest heartbeat, or, for a task this process's
own worker runs, what its activities report at once; a long task is never silent and a log never floods (docs/cli.md,
"Never silent"). Every server-originated string shown here goes through ``printable``: server text is untrusted
display text.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType
from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryReverseRequest
from temporalio.client import WorkflowHandle

from mcp_temporal_tasks.activities.activity_io import STILL_WORKING
from mcp_temporal_tasks.activities.defs import START_CALL
from mcp_temporal_tasks.activities.heartbeats import CALL_SENT, Heartbeat
from mcp_temporal_tasks.protocol.eras import protocol_label
from mcp_temporal_tasks.worker.cli.parser import EXIT_ENDED, EXIT_OK, EXIT_USAGE, LIVE_LINE, err, hint
from mcp_temporal_tasks.worker.printable import printable
from mcp_temporal_tasks.workflows.client import outcome_of
from mcp_temporal_tasks.workflows.mcp_task import McpTaskWorkflow
from mcp_temporal_tasks.workflows.records import McpTaskOutcome, Phase, TaskView

TaskHandle = WorkflowHandle[McpTaskWorkflow, McpTaskOutcome]
#: A check run on every tick of :func:`follow`: returns a line to print (a worker gone, back), or raises to end.
Check = Callable[[], Awaitable[str | None]]
#: How often the view is read and, on a terminal, the last line redrawn.
TICK_S = 0.5
#: Not on a terminal: the first "still …" line after this long without a change; then twice the gap each time.
STILL_FIRST_S, STILL_MAX_S = 10.0, 300.0
#: How the end was learned (``delivered_by``), as the live view and the summary say it.
_LEARNED = {"notification": "notified", "poll": "polled", "list": "seen in tasks/list"}


class LiveBoard:
    """What the activities of this process's own worker report, at once (``McpActivities(live_sink=...)``): a task
    that ``run`` runs itself is shown without waiting for heartbeats, which reach Temporal only every 0.8 × the
    heartbeat timeout (24 s by default)."""

    def __init__(self) -> None:
        self._by_id: dict[str, dict[str, Any]] = {}

    def __call__(self, workflow_id: str, details: dict[str, Any]) -> None:
        self._by_id[workflow_id] = details

    def get(self, workflow_id: str) -> dict[str, Any] | None:
        return self._by_id.get(workflow_id)


def _merge_live(view: TaskView, live: dict[str, Any] | None) -> TaskView:
    beat = Heartbeat.read(live)
    if beat.status is not None:
        view.task_status = beat.status
    if beat.status_message is not None:
        view.status_message = beat.status_message
    return view


#: What the live details say when something is wrong (``live["trouble"]``): shown instead of the phase, never
#: "still WORKING" about a workflow that cannot move or a task that cannot be read.
TROUBLE = "trouble"


async def _last_task_failure(handle: TaskHandle) -> str:
    """The message of the workflow's last ``WorkflowTaskFailed`` event (read from the end of its history)."""
    try:
        execution = WorkflowExecution(workflow_id=handle.id, run_id=handle.result_run_id or "")
        resp = await asyncio.wait_for(
            handle._client.workflow_service.get_workflow_execution_history_reverse(
                GetWorkflowExecutionHistoryReverseRequest(
                    namespace=handle._client.namespace, execution=execution, maximum_page_size=100
                )
            ),
            2,
        )
    except Exception:
        return "(its error could not be read)"
    for event in resp.history.events:
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
            failure = event.workflow_task_failed_event_attributes.failure
            kind = failure.application_failure_info.type if failure.HasField("application_failure_info") else ""
            return f"{kind + ': ' if kind else ''}{failure.message}"
    return "(no failure recorded yet)"


async def workflow_trouble(handle: TaskHandle, raw: Any) -> str | None:
    """``workflow task failing (attempt N): <error>`` when the workflow's own task is being retried (a bug, or a
    value it cannot handle: it does not move until fixed code is deployed), from ``describe``'s pending workflow
    task and the last ``WorkflowTaskFailed`` event; None otherwise."""
    if not raw.HasField("pending_workflow_task") or raw.pending_workflow_task.attempt < 2:
        return None
    error = printable(await _last_task_failure(handle))
    return f"workflow task failing (attempt {raw.pending_workflow_task.attempt}): {error[:300]}"


def read_trouble(live: dict[str, Any], now: float | None = None) -> str | None:
    """``reads failing since …`` when the waiting activity's reads of the task have been failing: since when, how
    many attempts, the last error, and when the read budget runs out (then the task ends ``lost``)."""
    beat = Heartbeat.read(live)
    since = beat.failing_since
    if not since:
        return None
    # Absolute times only: the line changes when the reads do (a new attempt), not on every tick of the live view.
    now = time.time() if now is None else now
    text = f"reads failing since {_clock(since)}"
    text += f" ({beat.faults} attempts" if beat.faults is not None else " ("
    error = beat.transport_error
    text += f"; last: {printable(error)[:200]}" if error is not None else ""
    ends = beat.read_budget_ends_at
    if ends is not None:
        text += f"; gives up at {_clock(ends)}" if ends > now else "; giving up"
    return text + ")"


def _clock(epoch: float) -> str:
    try:
        return time.strftime("%H:%M:%S", time.localtime(epoch))
    except (OverflowError, OSError, ValueError):
        return "?"


async def live_state(handle: TaskHandle, board: LiveBoard | None = None) -> tuple[TaskView | None, dict[str, Any]]:
    """(the ``status()`` query's view with the live MCP status and ``statusMessage``, the live details they came
    from). The workflow's own copy is as of its last transition; the live one is this process's board when it runs
    the task, else the waiting activity's heartbeat (or, idle between polls, its last attempt's benign failure).
    The view is None when no worker answers. ``live[TROUBLE]``: a workflow task failing, or reads failing."""
    trouble: str | None = None
    try:
        desc = await asyncio.wait_for(handle.describe(), timeout=2)
        trouble = await workflow_trouble(handle, desc.raw_description)
    except Exception:
        desc = None
    try:
        view = await asyncio.wait_for(handle.query(McpTaskWorkflow.status), timeout=2)
    except Exception:
        return None, ({TROUBLE: trouble} if trouble else {})
    live: dict[str, Any] | None = None
    try:
        if desc is None:
            raise LookupError
        for act in desc.raw_description.pending_activities:
            if act.heartbeat_details.payloads:
                live = json.loads(act.heartbeat_details.payloads[0].data)
            elif act.activity_type.name == START_CALL:
                live = {"step": "connecting"}
            # A wait idle between polls sends no heartbeats: its last attempt's benign failure says what it saw.
            still = act.last_failure.application_failure_info
            if still.type == STILL_WORKING and still.details.payloads:
                live = json.loads(still.details.payloads[0].data)
    except Exception:
        pass
    local = board.get(handle.id) if board is not None else None
    if local is not None and view.phase in (Phase.SUBMITTING, Phase.WORKING, Phase.INPUT_REQUIRED):
        live = local
    live = dict(live) if isinstance(live, dict) else {}
    trouble = trouble or read_trouble(live)
    if trouble:
        live[TROUBLE] = trouble
    return _merge_live(view, live), live


def shown_phase(view: TaskView, live: dict[str, Any] | None = None) -> str:
    """The phase as a person reads it: a ``tools/call`` that has left and not answered yet (a long synchronous
    tool) is CALLING, not SUBMITTING; a workflow task failing or reads failing say so instead of the phase."""
    trouble = (live or {}).get(TROUBLE)
    if isinstance(trouble, str) and trouble.startswith("workflow task failing"):
        return trouble
    if view.phase == Phase.SUBMITTING and Heartbeat.read(live).step == CALL_SENT:
        return "CALLING"
    return view.phase.value


def view_line(view: TaskView, workflow_id: str, live: dict[str, Any] | None = None, *, protocol: bool = False) -> str:
    """One progress line (and, for each input request or a pending approval, how to answer it). ``protocol``: also
    the protocol version the server answered and its era (``status`` shows it; ``run``'s ticks do not repeat it)."""
    parts = [shown_phase(view, live)]
    # Server text: shown escaped (control and bidi characters), one line per field.
    if view.task_status:
        parts.append(printable(view.task_status))
    if view.status_message:
        parts.append(f"“{printable(view.status_message)}”")
    if view.task_id:
        parts.append(f"task {printable(view.task_id)}")
    if view.delivered_by:
        parts.append(_LEARNED[view.delivered_by])
    trouble = (live or {}).get(TROUBLE)
    if isinstance(trouble, str) and trouble.startswith("reads failing"):
        parts.append(trouble)
    if protocol and view.protocol_version:
        parts.append(f"protocol {printable(protocol_label(view.era, view.protocol_version))}")
    line = " · ".join(parts)
    wid = printable(workflow_id)
    if view.phase.value == "AWAITING_APPROVAL":
        ended = view.operation_attempts[-1].ended if view.operation_attempts else None
        line += (
            f"\n    waiting for approval to send tools/call again: the last call ended {printable(ended or 'unknown')}"
            f"\n    approve with: {hint('approve', wid)}   (or stop with: {hint('cancel', wid)})"
        )
    if view.authorization is not None and view.phase.value == "AWAITING_AUTHORIZATION":
        until = view.authorization.until.strftime("%Y-%m-%d %H:%M:%S UTC")
        line += (
            f"\n    waiting for authorization (grant {printable(view.authorization.grant)}) until {until}: open"
            f"\n    {printable(view.authorization.url)}"
            f"\n    then: mcp-tasks login --callback URL (the URL the browser was sent back to), or the service's "
            f"callback; or {hint('cancel', wid)}"
        )
    for p in view.pending_inputs:
        key = printable(p.key)
        # --key=KEY: a key may begin with '-' (servers make them random, base64url), which `--key KEY` would read
        # as another option (issue 43: the hint must work as printed).
        line += (
            f"\n    needs input [{key}]: {printable(p.message or p.method)}\n"
            f"    answer with: {hint('answer', wid, f'--key={key}')}"
        )
    return line


def _ago(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 90:
        return f"{seconds:.0f}s ago"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min ago"
    return f"{seconds / 3600:.1f} h ago"


class _Lines:
    """Progress on stderr: a line per change; on a terminal the last line redrawn in place, elsewhere a ``still …``
    line at growing intervals."""

    def __init__(self) -> None:
        stream = sys.stderr
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self.drawn = False
        self.next_still = STILL_FIRST_S
        self.gap = STILL_FIRST_S

    def _clear(self) -> None:
        if self.drawn:
            sys.stderr.write("\r\x1b[K")
            self.drawn = False
            if self._clear in LIVE_LINE:
                LIVE_LINE.remove(self._clear)

    def line(self, text: str) -> None:
        err(text)  # clears the live line first (LIVE_LINE), as any other line written meanwhile does

    def changed(self, elapsed: float) -> None:
        self.gap = STILL_FIRST_S
        self.next_still = elapsed + STILL_FIRST_S

    def tick(self, elapsed: float, phase: str, message: str | None, message_age: float | None) -> None:
        about = f"{phase}" + (f" · “{message}” {_ago(message_age)}" if message and message_age is not None else "")
        if self.tty:
            width = max(20, shutil.get_terminal_size((100, 20)).columns - 1)
            text = f"  … {elapsed:.0f}s · {about}"
            if len(text) > width:
                text = text[: width - 1] + "…"
            sys.stderr.write(f"\r\x1b[K{text}")
            sys.stderr.flush()
            if not self.drawn:
                LIVE_LINE.append(self._clear)
            self.drawn = True
        elif elapsed >= self.next_still:
            still = "" if phase.startswith("workflow task failing") else "still "
            err(f"[{elapsed:6.1f}s] {still}{about}")
            self.gap = min(STILL_MAX_S, self.gap * 2)
            self.next_still = elapsed + self.gap

    def close(self) -> None:
        self._clear()
        sys.stderr.flush()


async def follow(
    handle: TaskHandle,
    *,
    ui: str | None,
    quiet: bool = False,
    check: Check | None = None,
    board: LiveBoard | None = None,
) -> McpTaskOutcome:
    """Print live progress to stderr until the workflow ends; return its outcome. ``check`` runs on every tick
    (whether the task still has a worker); a line it returns is printed, what it raises ends the wait."""
    start = time.monotonic()
    result = asyncio.create_task(outcome_of(handle))
    out = _Lines()
    last = ""
    message: str | None = None
    message_since = start
    phase = ""
    if not quiet:
        out.line(f"following {handle.id}" + (f"  ·  UI: {ui}" if ui else ""))
    try:
        while not result.done():
            if check is not None:
                note = await check()
                if note and not quiet:
                    out.line(note)
            view, live = await live_state(handle, board)
            now = time.monotonic()
            if view is None and live.get(TROUBLE):  # no view (the query failed too): the trouble alone
                phase = str(live[TROUBLE])
                if phase != last and not quiet:
                    out.line(f"[{now - start:6.1f}s] {phase}")
                    out.changed(now - start)
                    last = phase
            if view is not None:
                phase = shown_phase(view, live)
                if view.status_message != message:
                    message, message_since = view.status_message, now
                line = view_line(view, handle.id, live)
                if line != last and not quiet:
                    out.line(f"[{now - start:6.1f}s] {line}")
                    out.changed(now - start)
                    last = line
            if not quiet and phase:
                out.tick(
                    now - start,
                    phase,
                    printable(message) if message else None,
                    now - message_since if message else None,
                )
            await asyncio.wait({result}, timeout=TICK_S)
    finally:
        out.close()
        if not result.done():
            result.cancel()
    return result.result()


def outcome_summary(o: McpTaskOutcome) -> str:
    """The human view of an outcome. Every server-originated string goes through ``printable``."""
    p = printable
    lines = [f"{o.outcome.value}: {p(o.ledger.tool)} on {p(o.ledger.server)} (workflow {p(o.workflow_id)})"]
    if o.task_id:
        learned = f" · {_LEARNED[o.delivered_by]}" if o.delivered_by else ""
        lines.append(f"  task {p(o.task_id)} · last status {p(o.task_status)} · era {p(o.era)}{learned}")
    protocol_version = o.protocol_version or o.ledger.protocol_version  # outcomes from before issue 37: the ledger
    if protocol_version:
        lines.append(f"  protocol {p(protocol_label(o.era or o.ledger.era, protocol_version))}")
    if o.result is not None:
        texts = [p(b.get("text", ""), multiline=True) for b in o.result.get("content", []) if b.get("type") == "text"]
        lines.append("  result: " + (" | ".join(texts) if texts else json.dumps(o.result)[:500]))
    if o.result_ref is not None:
        lines.append(f"  result stored outside history ({o.result_ref.size} bytes): {o.result_ref.uri}")
    if o.error is not None:
        lines.append(f"  error {o.error.code}: {p(o.error.message)}")
    if o.classification is not None:
        lines.append(
            f"  classification: {o.classification.value}"
            + (f" · retry after {o.retry_after_s:g}s" if o.retry_after_s is not None else "")
        )
    if o.reason:
        lines.append(f"  reason: {p(o.reason)}")
    lines.append(f"  tools/call sent: {len(o.operation_attempts)}")
    return "\n".join(lines)


#: A task refused before tools/call because of what was typed: a tool the server does not list, arguments that do
#: not match its input schema. Bad input (exit 2), as the docs' exit codes say.
BAD_INPUT_REFUSALS = re.compile(r"\b(UnknownTool|InvalidArguments)\b")


def exit_code(outcome: McpTaskOutcome) -> int:
    if outcome.outcome.value == "rejected" and BAD_INPUT_REFUSALS.search(outcome.reason or ""):
        return EXIT_USAGE
    return EXIT_OK if outcome.outcome.value == "completed" else EXIT_ENDED
