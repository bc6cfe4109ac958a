"""Replays on the time-skipping test server: a Retry-After hint is a durable timer (30 s skipped, not
slept), replays respect the policy and `max_replays`, and `with_approval` waits for an operator."""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio.testing import WorkflowEnvironment

from mcp_temporal_tasks.workflows.client import outcome_of, start_mcp_task
from mcp_temporal_tasks.workflows.mcp_task import McpTaskWorkflow
from mcp_temporal_tasks.workflows.records import McpTaskRequest, Outcome, Phase
from tests.peers.harness import Peer
from tests.temporal_harness import FAST, in_process_worker, tool_calls, unique, wait_for_view


async def test_retry_after_is_a_durable_timer(skipping_env: WorkflowEnvironment, fastmcp_server: Peer) -> None:
    queue = unique("skip")
    mark = fastmcp_server.log_mark()
    async with in_process_worker(skipping_env.client, task_queue=queue):
        handle = await start_mcp_task(
            skipping_env.client,
            McpTaskRequest(
                server=fastmcp_server.endpoint, tool="rate_limited", replay="always", max_replays=1, timeouts=FAST
            ),
            workflow_id=unique("ra"),
            task_queue=queue,
        )
        started = asyncio.get_running_loop().time()
        out = await asyncio.wait_for(outcome_of(handle), 60)
        elapsed = asyncio.get_running_loop().time() - started
    assert out.outcome == Outcome.TOOL_ERROR and out.retry_after_s == 30
    assert [a.reason for a in out.operation_attempts] == ["initial", "replay_retryable"]
    assert len(tool_calls(fastmcp_server, mark, "rate_limited")) == 2  # max_replays=1: one replay, then stop
    assert elapsed < 25  # the 30 s were a timer, skipped, not a sleep
    timers = [e async for e in handle.fetch_history_events() if e.HasField("timer_started_event_attributes")]
    assert [t.timer_started_event_attributes.start_to_fire_timeout.seconds for t in timers] == [30]


async def test_never_policy_does_not_replay(skipping_env: WorkflowEnvironment, fastmcp_server: Peer) -> None:
    queue = unique("skip")
    mark = fastmcp_server.log_mark()
    async with in_process_worker(skipping_env.client, task_queue=queue):
        out = await outcome_of(
            await start_mcp_task(
                skipping_env.client,
                McpTaskRequest(server=fastmcp_server.endpoint, tool="rate_limited", timeouts=FAST),
                workflow_id=unique("nv"),
                task_queue=queue,
            )
        )
    assert (
        out.outcome == Outcome.TOOL_ERROR
        and len(out.operation_attempts) == 1
        and len(tool_calls(fastmcp_server, mark, "rate_limited")) == 1
    )


async def test_with_approval_waits_for_an_operator(skipping_env: WorkflowEnvironment, fastmcp_server: Peer) -> None:
    queue = unique("skip")
    mark = fastmcp_server.log_mark()
    async with in_process_worker(skipping_env.client, task_queue=queue):
        handle = await start_mcp_task(
            skipping_env.client,
            McpTaskRequest(server=fastmcp_server.endpoint, tool="rate_limited", replay="with_approval", timeouts=FAST),
            workflow_id=unique("ap"),
            task_queue=queue,
        )
        view: Any = await wait_for_view(handle, lambda v: v.phase == Phase.AWAITING_APPROVAL)
        assert len(view.operation_attempts) == 1 and len(tool_calls(fastmcp_server, mark, "rate_limited")) == 1
        attempt = await handle.execute_update(McpTaskWorkflow.approve_replay)
        assert attempt == 2
        out = await asyncio.wait_for(outcome_of(handle), 60)
    assert [a.reason for a in out.operation_attempts] == ["initial", "replay_retryable"]
    assert len(tool_calls(fastmcp_server, mark, "rate_limited")) == 2
