"""A lost reply to tools/call, reconciled with tasks/list where that is sound (2025-11-25 only).

Real peers of two SDKs (TypeScript 1.32.2 and the official Python SDK mcp==1.30.0), reached through the fault
proxy, which forwards tools/call to the server and then resets the connection instead of replying: the server
ran the call and made a task, the client never heard of it.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from temporalio.client import Client

from mcp_temporal_tasks.activities.wire import Endpoint
from mcp_temporal_tasks.workflows.client import outcome_of, start_mcp_task
from mcp_temporal_tasks.workflows.records import McpTaskRequest, Outcome, ReplayPolicy, Timeouts
from tests.faults import FaultProxy, ResetAfterSend
from tests.peers.harness import Peer
from tests.temporal_harness import tool_calls, unique

FAST = Timeouts(heartbeat_s=2, poll_floor_s=0.05, submit_s=60)


async def run_through(proxy: FaultProxy, client: Client, queue: str, **kw: Any) -> Any:
    request = McpTaskRequest(
        server=Endpoint(url=proxy.url),
        tool="slow_echo",
        arguments={"seconds": 0.5, "text": "reconciled"},
        timeouts=FAST,
        **kw,
    )
    handle = await start_mcp_task(client, request, workflow_id=unique("rec"), task_queue=queue)
    return await asyncio.wait_for(outcome_of(handle), 60)


@pytest.mark.parametrize("peer_name", ["ts_http_stateful", "py1_http"])
async def test_lost_tools_call_reply_is_reconciled_on_a_session_of_our_own(
    request: pytest.FixtureRequest, peer_name: str, client: Client, queue: str, worker: Any
) -> None:
    peer: Peer = request.getfixturevalue(peer_name)
    mark = peer.log_mark()
    with FaultProxy(peer.url or "") as proxy:  # a fresh URL: the worker opens a session that carried no call
        proxy.add("tools/call", ResetAfterSend())
        started = time.monotonic()
        # replay=always: were the lost reply taken for unknown_outcome, a second tools/call would go out.
        out = await run_through(proxy, client, queue, replay=ReplayPolicy.ALWAYS, idempotent=True)
        elapsed = time.monotonic() - started
        assert proxy.forwarded("tools/call") == 1 and proxy.seen("tasks/list") >= 1
    assert out.outcome == Outcome.COMPLETED, out.reason
    assert out.result is not None and out.result["structuredContent"] == {"echo": "reconciled"}
    assert len(tool_calls(peer, mark, "slow_echo")) == 1
    assert len(out.operation_attempts) == 1 and out.operation_attempts[0].reconciled
    assert out.operation_attempts[0].task_id == out.task_id
    assert elapsed < 30


async def test_stateless_server_is_not_reconciled(
    ts_http_stateless: Peer, client: Client, queue: str, worker: Any
) -> None:
    """Without a session, tasks/list shows every client's tasks: adopting one would not be sound."""
    mark = ts_http_stateless.log_mark()
    with FaultProxy(ts_http_stateless.url or "") as proxy:
        proxy.add("tools/call", ResetAfterSend())
        out = await run_through(proxy, client, queue)
    assert out.outcome == Outcome.UNKNOWN_OUTCOME
    assert "may have reached the server" in (out.reason or "")
    assert len(tool_calls(ts_http_stateless, mark, "slow_echo")) == 1


async def test_extension_era_has_no_reconciliation(
    fastmcp_server: Peer, client: Client, queue: str, worker: Any
) -> None:
    mark = fastmcp_server.log_mark()
    with FaultProxy(fastmcp_server.url or "") as proxy:
        proxy.add("tools/call", ResetAfterSend())
        out = await run_through(proxy, client, queue)
        assert proxy.seen("tasks/list") == 0
    assert out.outcome == Outcome.UNKNOWN_OUTCOME
    assert len(tool_calls(fastmcp_server, mark, "slow_echo")) == 1
