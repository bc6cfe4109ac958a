"""2026-07-28, with the ``io.modelcontextprotocol/tasks`` extension where offered: the server decides what is a task.

``server/discover`` instead of a handshake; the extension's ``_meta`` envelope on every request (``Mcp-Method`` and
``Mcp-Name`` headers on HTTP); the payload inline in ``tasks/get``; ``tasks/update`` answers a task's questions;
``subscriptions/listen`` carries task events. Stateless: any session reaches any task.
"""

from __future__ import annotations

from typing import Any

from mcp_temporal_tasks.activities.wire import sdk_compat
from mcp_temporal_tasks.activities.wire.eras.base import CallOptions, Room, Speaker
from mcp_temporal_tasks.activities.wire.http_transport import HttpTransport
from mcp_temporal_tasks.activities.wire.jsonrpc import ServerRequestHandler
from mcp_temporal_tasks.activities.wire.replies import input_requests_of, parse_task
from mcp_temporal_tasks.activities.wire.transport import Transport
from mcp_temporal_tasks.protocol.tasks import (
    EXTENSION,
    TASKS_EXTENSION,
    SessionRef,
    StartResult,
    TaskPayload,
    TaskState,
)


class TasksExtension(Room):
    era = EXTENSION
    versions = (EXTENSION,)
    opens_with = "server/discover"
    lacks = {"tasks/list": "tasks/list does not exist with the 2026-07-28 tasks extension"}

    def offers_tasks(self, capabilities: dict[str, Any]) -> bool:
        # A server of 2026-07-28 without the extension is spoken in this room too: its calls are plain (or MRTR).
        extensions = capabilities.get("extensions")
        return isinstance(extensions, dict) and TASKS_EXTENSION in extensions

    async def envelope(
        self, transport: Transport, method: str, params: dict[str, Any], name: str | None
    ) -> tuple[dict[str, Any], dict[str, str] | None]:
        # Servers answer -32021 to any request, tasks/* included, that does not declare the extension.
        params = {**params, "_meta": {**(params.get("_meta") or {}), **sdk_compat.extension_meta()}}
        if not isinstance(transport, HttpTransport):
            return params, None
        await sdk_compat.load_sdk()
        return params, sdk_compat.extension_headers(method, name)

    async def shape_call(self, session: Speaker, tool: str, params: dict[str, Any], options: CallOptions) -> bool:
        if options.input_responses is not None:
            params["inputResponses"] = options.input_responses
        if options.request_state is not None:
            params["requestState"] = options.request_state
        # No TTL asked for: the server alone decides a task's lifetime, and whether the call becomes one.
        return True

    def started(self, reply: dict[str, Any], ref: SessionRef, *, task_requested: bool) -> StartResult:
        kind = reply.get("resultType")
        if kind == "task":
            return StartResult(
                era=self.era, session=ref, task=parse_task(reply, self.era, raw=reply), task_requested=task_requested
            )
        if kind == "input_required":
            requests = reply.get("inputRequests")
            return StartResult(
                era=self.era,
                session=ref,
                task_requested=task_requested,
                input_requests=input_requests_of(requests) if isinstance(requests, dict) else {},
                request_state=reply.get("requestState"),
            )
        return self.ran(reply, ref, task_requested=task_requested)

    def task_in(self, reply: dict[str, Any]) -> dict[str, Any]:
        # The task's fields at the top, or under "task" beside the reply's own (_meta, resultType).
        if isinstance(reply.get("task"), dict):
            return {**reply["task"], **{k: v for k, v in reply.items() if k != "task"}}
        return reply

    async def payload(
        self,
        session: Speaker,
        state: TaskState,
        *,
        on_server_request: ServerRequestHandler | None,
        timeout_s: float | None,
    ) -> TaskPayload:
        """Inline in the terminal ``state``: no request, unless the state kept no payload (``tasks/get`` again)."""
        if state.result is None and state.error is None and state.status != "cancelled":
            state = await session.get(state.task_id)  # a state whose inline payload was dropped once stored
        if state.result is not None:
            return TaskPayload(result=state.result)
        if state.error is not None:
            return TaskPayload(error=state.error)
        return TaskPayload(empty=True)

    def cancelled(self, reply: dict[str, Any]) -> TaskState | None:
        # The ack may be empty.
        return parse_task(reply, self.era, raw=reply) if "taskId" in reply else None
