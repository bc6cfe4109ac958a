"""The cheapest durable design Temporal allows: the lower bound any durable MCP task client pays here.

One workflow, one activity: ``tools/call``, then ``tasks/get`` at the server's ``pollInterval`` with a heartbeat
per poll, result inline (2026-07-28). Nothing else: no resolve step, no search attributes, no memo, no separate
submit step. Its history is 11 events (started, 2 workflow tasks, 1 activity, completed) whatever the duration.

It is here to price our features, not to be used: it is *unsafe*. A worker that dies after ``tools/call`` and
before its first heartbeat reaches the server leaves a retry that cannot tell whether the tool ran (ours records
the task id as a completed step first and reports ``unknown_outcome`` instead of guessing), operators cannot
find the task by id or status while it runs, there is no cancel, input, expiry or large-result handling.
So: ours − minimal = what those features cost; minimal vs naive = what Temporal itself costs on this machine.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from activities.wire import Endpoint, McpTaskClient
    from activities.wire.models import EXTENSION, TERMINAL_STATUSES

CALL_AND_WAIT = "bench-minimal.call-and-wait.v1"


@dataclass
class MinimalRequest:
    url: str
    tool: str
    arguments: dict[str, Any]
    default_poll_ms: int = 500


@dataclass
class MinimalOutcome:
    task_id: str | None
    status: str
    polls: int
    result: dict[str, Any] | None = None


class MinimalActivities:
    def __init__(self) -> None:
        self._clients: dict[str, McpTaskClient] = {}
        self._lock = asyncio.Lock()

    async def _client(self, url: str) -> McpTaskClient:
        async with self._lock:
            client = self._clients.get(url)
            if client is None or not client.alive:
                client = await McpTaskClient.connect(Endpoint(url=url), era=EXTENSION)
                self._clients[url] = client
            return client

    @activity.defn(name=CALL_AND_WAIT)
    async def call_and_wait(self, req: MinimalRequest) -> MinimalOutcome:
        client = await self._client(req.url)
        out = await client.start(req.tool, req.arguments)
        if out.task is None:
            return MinimalOutcome(task_id=None, status="completed", polls=0, result=out.result)
        task, polls = out.task, 0
        activity.heartbeat(task.task_id)
        while task.status not in TERMINAL_STATUSES:
            await asyncio.sleep((task.poll_interval_ms or req.default_poll_ms) / 1000)
            task = await client.get(task.task_id)
            polls += 1
            activity.heartbeat(task.task_id)
        return MinimalOutcome(task_id=task.task_id, status=task.status, polls=polls, result=task.result)

    def all(self) -> list[Any]:
        return [self.call_and_wait]

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.aclose()


@workflow.defn(name="BenchMinimalWorkflow")
class MinimalWorkflow:
    @workflow.run
    async def run(self, req: MinimalRequest) -> MinimalOutcome:
        return await workflow.execute_activity(
            CALL_AND_WAIT, req, result_type=MinimalOutcome, start_to_close_timeout=timedelta(hours=2),
            heartbeat_timeout=timedelta(seconds=30), retry_policy=RetryPolicy(maximum_attempts=1))
