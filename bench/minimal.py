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
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from bench.naive import NaiveActivities, NaiveOutcome, NaiveRequest
    from mcp_temporal_tasks.protocol.tasks import TERMINAL_STATUSES

CALL_AND_WAIT = "bench-minimal.call-and-wait.v1"


class MinimalActivities(NaiveActivities):
    """Naive's per-URL session cache; one activity instead of naive's two."""

    @activity.defn(name=CALL_AND_WAIT)
    async def call_and_wait(self, req: NaiveRequest) -> NaiveOutcome:
        client = await self._client(req.url)
        out = await client.start(req.tool, req.arguments)
        if out.task is None:
            return NaiveOutcome(task_id=None, status="completed", polls=0, result=out.result)
        task, polls = out.task, 0
        activity.heartbeat(task.task_id)
        while task.status not in TERMINAL_STATUSES:
            await asyncio.sleep((task.poll_interval_ms or req.default_poll_ms) / 1000)
            task = await client.get(task.task_id)
            polls += 1
            activity.heartbeat(task.task_id)
        return NaiveOutcome(
            task_id=task.task_id,
            status=task.status,
            polls=polls,
            result=task.result,
            error=task.error.model_dump() if task.error else None,
        )

    def all(self) -> list[Any]:
        return [self.call_and_wait]


@workflow.defn(name="BenchMinimalWorkflow")
class MinimalWorkflow:
    @workflow.run
    async def run(self, req: NaiveRequest) -> NaiveOutcome:
        return await workflow.execute_activity(
            CALL_AND_WAIT,
            req,
            result_type=NaiveOutcome,
            start_to_close_timeout=timedelta(hours=2),
            heartbeat_timeout=timedelta(seconds=30),
            retry_policy=RetryPolicy(maximum_attempts=1),
        )
