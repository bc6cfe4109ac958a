"""Job tools spoken as if they were an MCP task: the wire side of ``[servers.NAME.jobs.JOB]``.

Everything above the wire (the workflow's steps, outcomes, ledger and replay gate) is the same for a job as for a
task: :class:`JobTasks` answers in :class:`~.session.WireSession`'s task vocabulary, and only ``submit`` starts work.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Protocol

from mcp_temporal_tasks.activities.wire.session import ProgressHandler, WireSession
from mcp_temporal_tasks.protocol.limits import MAX_TASK_ID, STATUS_MESSAGE_CAP, TEXT_CAP, cap_text
from mcp_temporal_tasks.protocol.tasks import RpcErrorInfo, StartResult, TaskPayload, TaskState
from mcp_temporal_tasks.protocol.wire_errors import CapabilityUnavailable, PayloadUnusable, ProtocolViolation


class JobSpec(Protocol):
    """What the wire reads of a job binding. The binding itself is configuration, defined above the wire
    (``activities.activity_io.JobBinding``), which the wire does not import."""

    @property
    def submit(self) -> str: ...
    @property
    def job_id(self) -> str: ...
    @property
    def job_id_pattern(self) -> str | None: ...
    @property
    def status(self) -> str: ...
    @property
    def status_arguments(self) -> Mapping[str, Any]: ...
    @property
    def state(self) -> str: ...
    @property
    def states(self) -> Mapping[str, str]: ...
    @property
    def message(self) -> str | None: ...
    @property
    def error(self) -> str | None: ...
    @property
    def result(self) -> str | None: ...
    @property
    def result_arguments(self) -> Mapping[str, Any]: ...
    @property
    def cancel(self) -> str | None: ...
    @property
    def cancel_arguments(self) -> Mapping[str, Any]: ...
    @property
    def poll_interval_s(self) -> float: ...


_MISSING = object()


class JobReplyMismatch(PayloadUnusable):
    """A job tool answered, but not in the shape its binding describes. Final: asking again gets the same."""

    kind = "JobReplyMismatch"


def pointer(doc: Any, ptr: str) -> Any:
    """RFC 6901 lookup; ``_MISSING`` when the path does not exist. ``""`` is the whole document."""
    if ptr == "":
        return doc
    node = doc
    for raw in ptr.split("/")[1:]:
        key = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and key in node:
            node = node[key]
        elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
            node = node[int(key)]
        else:
            return _MISSING
    return node


def fill(template: Any, job_id: str) -> Any:
    """``template`` with ``{job_id}`` substituted in every string value."""
    if isinstance(template, str):
        return template.replace("{job_id}", job_id)
    if isinstance(template, dict):
        return {k: fill(v, job_id) for k, v in template.items()}
    if isinstance(template, list):
        return [fill(v, job_id) for v in template]
    return template


def text_of(reply: dict[str, Any]) -> str:
    """The concatenated text content of a ``CallToolResult``."""
    parts = [c.get("text") for c in reply.get("content") or [] if isinstance(c, dict) and c.get("type") == "text"]
    return "\n".join(p for p in parts if isinstance(p, str))


def document_of(reply: dict[str, Any]) -> Any:
    """What a binding's pointers look into: ``structuredContent``, else the text content parsed as JSON."""
    structured = reply.get("structuredContent")
    if structured is not None:
        return structured
    try:
        return json.loads(text_of(reply))
    except ValueError:
        return _MISSING


class JobTasks:
    """One server session's job tools, per :class:`JobBinding`, in the interface of :class:`WireSession`.

    Many servers without MCP tasks expose long work as tools: one starts it and returns an id, one reports its state,
    often one returns the result and one cancels. ``get`` → :class:`TaskState`, ``result`` → :class:`TaskPayload`,
    ``cancel``.

    Failure semantics, per call:

    * ``submit`` is a ``tools/call`` that starts work: never idempotent, failures carry ``may_have_reached_server``
      exactly as :meth:`WireSession.start`'s do. A reply without the job id is :class:`JobReplyMismatch` (the work may
      have started: ``decode_failed``, never a replay).
    * ``get``, ``result`` are reads: transport faults and garbled replies are retryable. A status tool answering
      ``isError`` is a :class:`~protocol.wire_errors.ProtocolViolation` (retryable, like a garbled ``tasks/get``: the
      job may be fine). A status reply that does not match the binding (no state where the binding points, or a state it
      does not map) is :class:`JobReplyMismatch`: final, ``decode_failed`` with the reply kept.
    * ``cancel`` without a cancel tool is :class:`~protocol.wire_errors.CapabilityUnavailable`.
    """

    def __init__(self, client: WireSession, binding: JobSpec) -> None:
        self.client = client
        self.binding = binding

    def _state(self, job_id: str, status: Any, message: str | None = None) -> TaskState:
        return TaskState(
            task_id=job_id,
            status=status,
            era=self.client.era,
            status_message=message,
            poll_interval_ms=int(self.binding.poll_interval_s * 1000),
        )

    def job_id(self, reply: dict[str, Any]) -> str:
        """The job id in the submit tool's reply, or :class:`JobReplyMismatch` saying where it was looked for."""
        b = self.binding
        if b.job_id_pattern is not None:
            match = re.search(b.job_id_pattern, text_of(reply))
            found: Any = match.group(1) if match else _MISSING
            where = f"text matching {b.job_id_pattern!r}"
        else:
            found = pointer(document_of(reply), b.job_id)
            where = f"structuredContent{b.job_id}"
        if isinstance(found, (int, float)) and not isinstance(found, bool):
            found = str(found)
        if not isinstance(found, str) or not found or len(found) > MAX_TASK_ID:
            raise JobReplyMismatch(
                f"{b.submit} answered without a job id at {where}: the job may have started but cannot be followed",
                raw=reply,
            )
        return found

    async def submit(
        self, arguments: dict[str, Any], *, timeout_s: float | None = None, on_progress: ProgressHandler | None = None
    ) -> StartResult:
        """Call the submit tool. A tool error is returned as the result (nothing to follow); otherwise a task
        whose id is the job's. **Not idempotent**; raises :class:`JobReplyMismatch` without a job id."""
        reply = await self.client.call(self.binding.submit, arguments, timeout_s=timeout_s, on_progress=on_progress)
        ref = self.client.session_ref()
        if reply.get("isError"):
            return StartResult(era=self.client.era, session=ref, result=reply)
        job_id = self.job_id(reply)
        state = self._state(job_id, "working", cap_text(text_of(reply), STATUS_MESSAGE_CAP) or None)
        state.created_at = datetime.now(UTC).isoformat()
        return StartResult(era=self.client.era, session=ref, task=state)

    async def get(self, task_id: str) -> TaskState:
        """Call the status tool and map its state. Idempotent."""
        b = self.binding
        reply = await self.client.call(b.status, fill(b.status_arguments, task_id))
        if reply.get("isError"):
            raise ProtocolViolation(
                f"{b.status} answered isError for job {task_id}: {cap_text(text_of(reply), 512)}", raw=reply
            )
        doc = document_of(reply)
        state = pointer(doc, b.state)
        if state is _MISSING:
            raise JobReplyMismatch(f"{b.status} answered without a state at {b.state}", raw=reply)
        if not isinstance(state, str) or state not in b.states:
            known = ", ".join(sorted(b.states))
            raise JobReplyMismatch(
                f"{b.status} answered state {cap_text(repr(state), 200)}, which the binding does "
                f"not map (it maps: {known})",
                raw=reply,
            )
        status = b.states[state]
        texts = {name: pointer(doc, p) if p else _MISSING for name, p in (("message", b.message), ("error", b.error))}
        message = next(
            (
                t
                for t in ((texts["error"],) if status == "failed" else ()) + (texts["message"],)
                if isinstance(t, str) and t
            ),
            None,
        )
        return self._state(task_id, status, cap_text(message, STATUS_MESSAGE_CAP) if message else None)

    async def result(self, state: TaskState, **_: Any) -> TaskPayload:
        """The payload of a terminal job: the result tool's reply (or the status tool's, without one) for a
        completed job; the server's error text for a failed one; nothing for a cancelled one. Idempotent."""
        b = self.binding
        if state.status == "cancelled":
            return TaskPayload(empty=True)
        if state.status == "failed":
            text = state.status_message or f"job {state.task_id} failed (the status reply gave no reason)"
            return TaskPayload(error=RpcErrorInfo(code=-32603, message=cap_text(text, TEXT_CAP)))
        if not state.terminal:
            raise ValueError(f"result() needs a terminal job, {state.task_id} is {state.status!r}")
        if b.result is not None:
            return TaskPayload(result=await self.client.call(b.result, fill(b.result_arguments, state.task_id)))
        return TaskPayload(result=await self.client.call(b.status, fill(b.status_arguments, state.task_id)))

    async def cancel(self, task_id: str) -> TaskState | None:
        """Call the cancel tool. The job's real end is learnt by polling its status afterwards."""
        b = self.binding
        if b.cancel is None:
            raise CapabilityUnavailable(f"the job binding of {b.submit} names no cancel tool")
        reply = await self.client.call(b.cancel, fill(b.cancel_arguments, task_id))
        if reply.get("isError"):
            raise ProtocolViolation(
                f"{b.cancel} answered isError for job {task_id}: {cap_text(text_of(reply), 512)}", raw=reply
            )
        return None
