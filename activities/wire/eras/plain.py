"""2025-03-26 and 2025-06-18: ``initialize``, then every tool a plain synchronous ``tools/call``; no tasks.

The server declares no tasks, so none is asked for (``tasks_offered`` is False). All else goes as 2025-11-25 has it
(the room it is given, ``tasks``): a task such a server makes unasked is still read, a method it lacks refuses.
"""

from __future__ import annotations

from typing import Any

from mcp_temporal_tasks.activities.wire.eras.base import CallOptions, Room, Speaker
from mcp_temporal_tasks.activities.wire.jsonrpc import ServerRequestHandler
from mcp_temporal_tasks.protocol.tasks import LEGACY, SessionRef, StartResult, TaskPayload, TaskState


class PlainCalls(Room):
    era = LEGACY
    versions = ("2025-06-18", "2025-03-26")
    opens_with = "initialize"

    def __init__(self, tasks: Room) -> None:
        self.tasks = tasks

    def offers_tasks(self, capabilities: dict[str, Any]) -> bool:
        return False

    async def shape_call(self, session: Speaker, tool: str, params: dict[str, Any], options: CallOptions) -> bool:
        return await self.tasks.shape_call(session, tool, params, options)

    def started(self, reply: dict[str, Any], ref: SessionRef, *, task_requested: bool) -> StartResult:
        return self.tasks.started(reply, ref, task_requested=task_requested)

    def task_in(self, reply: dict[str, Any]) -> dict[str, Any]:
        return self.tasks.task_in(reply)

    async def payload(
        self,
        session: Speaker,
        state: TaskState,
        *,
        on_server_request: ServerRequestHandler | None,
        timeout_s: float | None,
    ) -> TaskPayload:
        return await self.tasks.payload(session, state, on_server_request=on_server_request, timeout_s=timeout_s)

    def cancelled(self, reply: dict[str, Any]) -> TaskState | None:
        return self.tasks.cancelled(reply)

    def may_reconcile(self, capabilities: dict[str, Any]) -> bool:
        return self.tasks.may_reconcile(capabilities)

    def check(self, method: str) -> None:
        self.tasks.check(method)
