"""2025-11-25: tasks in the core protocol, asked for per call where the server and the tool allow it.

``initialize``; ``tools/call`` with ``params.task``; ``tasks/get``; ``tasks/result``, which blocks until the task
ends; ``tasks/cancel``; ``tasks/list``. Tasks are bound to their session (``Mcp-Session-Id`` on HTTP).
"""

from __future__ import annotations

from typing import Any

from mcp_temporal_tasks.activities.wire.eras.base import CallOptions, Room, Speaker
from mcp_temporal_tasks.activities.wire.jsonrpc import ServerRequestHandler
from mcp_temporal_tasks.activities.wire.replies import parse_task, payload_from_error
from mcp_temporal_tasks.protocol.tasks import LEGACY, SessionRef, StartResult, TaskPayload, TaskState
from mcp_temporal_tasks.protocol.wire_errors import (
    CapabilityUnavailable,
    JsonRpcError,
    ProtocolViolation,
    ReadMeaning,
    TaskNotFound,
    read_error_meaning,
)


class CoreTasks(Room):
    era = LEGACY
    versions = ("2025-11-25",)
    opens_with = "initialize"
    lacks = {
        "tasks/update": "tasks/update exists only with the 2026-07-28 tasks extension",
        "subscriptions/listen": "subscriptions/listen exists only on 2026-07-28",
    }

    def offers_tasks(self, capabilities: dict[str, Any]) -> bool:
        requests = (capabilities.get("tasks") or {}).get("requests") or {}
        return bool(requests.get("tools", {}).get("call") is not None)

    async def shape_call(self, session: Speaker, tool: str, params: dict[str, Any], options: CallOptions) -> bool:
        # The client asks for a task per call, where both the server (capabilities.tasks) and the tool allow it.
        info = (await session.list_tools()).get(tool)
        support = info.task_support if info else None
        if session.tasks_offered and support in ("optional", "required"):
            params["task"] = {"ttl": options.ttl_ms} if options.ttl_ms is not None else {}
            return True
        if support == "required":
            raise CapabilityUnavailable(f"tool {tool!r} requires task execution but the server does not offer tasks")
        return False

    def started(self, reply: dict[str, Any], ref: SessionRef, *, task_requested: bool) -> StartResult:
        if isinstance(reply.get("task"), dict):
            return StartResult(
                era=self.era,
                session=ref,
                task=parse_task(reply["task"], self.era, raw=reply),
                task_requested=task_requested,
            )
        return self.ran(reply, ref, task_requested=task_requested)

    def task_in(self, reply: dict[str, Any]) -> dict[str, Any]:
        return reply

    async def payload(
        self,
        session: Speaker,
        state: TaskState,
        *,
        on_server_request: ServerRequestHandler | None,
        timeout_s: float | None,
    ) -> TaskPayload:
        """``tasks/result``, also for ``failed``: the stored ``isError`` result, or the original JSON-RPC error as the
        payload (never raised). ``-32603`` or a ``{_meta}``-only reply after a cancel give ``empty``. It blocks until
        the task ends: the session asks it only of a terminal task, or of one its relay answers."""
        try:
            reply = await session.request(
                "tasks/result",
                {"taskId": state.task_id},
                name=state.task_id,
                on_server_request=on_server_request,
                timeout_s=timeout_s,
            )
        except JsonRpcError as exc:
            meaning = read_error_meaning("tasks/result", exc.code, era=session.era, status=state.status)
            if meaning == ReadMeaning.EMPTY:
                return TaskPayload(empty=True)
            if meaning != ReadMeaning.PAYLOAD:
                raise  # gone (TaskNotFound) or a retrieval fault: the caller's budget decides
            if isinstance(exc, TaskNotFound):
                # -32602 is ambiguous here: "task not found", or the tool's own invalid-params error
                # stored as the failed task's payload. The task answering tasks/get settles it.
                try:
                    await session.get(state.task_id)
                except TaskNotFound:
                    raise exc from None
            return payload_from_error(exc)
        if "content" not in reply and "structuredContent" not in reply and "isError" not in reply:
            if set(reply) <= {"_meta", "resultType"}:
                return TaskPayload(empty=True)
            raise ProtocolViolation("tasks/result reply is not a CallToolResult", raw=reply)
        return TaskPayload(result=reply)

    def cancelled(self, reply: dict[str, Any]) -> TaskState | None:
        return parse_task(reply, self.era, raw=reply)

    def may_reconcile(self, capabilities: dict[str, Any]) -> bool:
        return bool((capabilities.get("tasks") or {}).get("list") is not None)
