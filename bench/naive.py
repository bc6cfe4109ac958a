"""The naive durable design: the common way to poll an external job from Temporal.

One short activity per ``tasks/get`` and a durable timer (``workflow.sleep(pollInterval)``) between polls,
after a start activity that sends ``tools/call``. It speaks the same wire client
(``mcp_temporal_tasks.activities.wire.WireSession``) to the same server as our worker, so the only difference measured
is where the poll loop lives: in workflow history (here) or inside one heartbeating activity (ours).

On the 2026-07-28 extension the result is inline in the terminal ``tasks/get``, so the design returns it
from the last poll and needs no separate result activity (a legacy-era version would add one: +6 events
and +1 activity per task, which would only make this design look worse).

History per poll: ActivityTaskScheduled/Started/Completed, WorkflowTask Scheduled/Started/Completed,
TimerStarted/Fired, WorkflowTask Scheduled/Started/Completed = 11 events.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from mcp_temporal_tasks.activities.wire import Endpoint, TransportError, WireSession
    from mcp_temporal_tasks.protocol.tasks import EXTENSION, TERMINAL_STATUSES

START = "bench-naive.start.v1"
GET = "bench-naive.get.v1"


@dataclass
class NaiveRequest:
    url: str
    tool: str
    arguments: dict[str, Any]
    #: Used when the server does not advertise pollIntervalMs.
    default_poll_ms: int = 500


@dataclass
class NaiveState:
    task_id: str | None
    status: str
    poll_interval_ms: int | None = None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


@dataclass
class NaiveGet:
    url: str
    task_id: str


@dataclass
class NaiveOutcome:
    task_id: str | None
    status: str
    polls: int
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


class NaiveActivities:
    """Activities with one shared MCP session per server URL (the extension is stateless)."""

    def __init__(self) -> None:
        self._clients: dict[str, WireSession] = {}
        self._lock = asyncio.Lock()

    async def _client(self, url: str) -> WireSession:
        client = self._clients.get(url)
        if client is not None and client.alive:
            return client
        async with self._lock:
            client = self._clients.get(url)
            if client is None or not client.alive:
                client = await WireSession.connect(Endpoint(url=url), era=EXTENSION)
                self._clients[url] = client
            return client

    @staticmethod
    def _state(task: Any) -> NaiveState:
        return NaiveState(
            task_id=task.task_id,
            status=task.status,
            poll_interval_ms=task.poll_interval_ms,
            result=task.result,
            error=task.error.model_dump() if task.error else None,
        )

    @activity.defn(name=START)
    async def start(self, req: NaiveRequest) -> NaiveState:
        client = await self._client(req.url)
        out = await client.start(req.tool, req.arguments)
        if out.task is None:
            return NaiveState(task_id=None, status="completed", result=out.result)
        return self._state(out.task)

    @activity.defn(name=GET)
    async def get(self, inp: NaiveGet) -> NaiveState:
        client = await self._client(inp.url)
        try:
            return self._state(await client.get(inp.task_id))
        except TransportError:
            raise  # retried by the activity retry policy

    def all(self) -> list[Any]:
        return [self.start, self.get]

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.aclose()


@workflow.defn(name="BenchNaivePollWorkflow")
class NaivePollWorkflow:
    @workflow.run
    async def run(self, req: NaiveRequest) -> NaiveOutcome:
        state = await workflow.execute_activity(
            START,
            req,
            result_type=NaiveState,
            start_to_close_timeout=timedelta(seconds=60),
            retry_policy=RetryPolicy(maximum_attempts=1),
        )  # tools/call is not idempotent
        polls = 0
        while state.status not in TERMINAL_STATUSES:
            await workflow.sleep(timedelta(milliseconds=state.poll_interval_ms or req.default_poll_ms))
            assert state.task_id is not None
            state = await workflow.execute_activity(
                GET,
                NaiveGet(url=req.url, task_id=state.task_id),
                result_type=NaiveState,
                start_to_close_timeout=timedelta(seconds=30),
                retry_policy=RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=10)),
            )
            polls += 1
        return NaiveOutcome(
            task_id=state.task_id, status=state.status, polls=polls, result=state.result, error=state.error
        )
