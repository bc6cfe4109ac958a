"""A server's ``Retry-After`` binds every read of the worker, and a wait that has ended sends nothing more: a real
worker and Temporal, the TypeScript SDK's stateful HTTP peer (it notifies, and its ``tasks/list`` is read for the
hub), and the fault proxy's log of every request that reached the server.

Each fault is armed :data:`ARM_S` after the ``tools/call``, once the worker reads for the wait (its hub's
``tasks/list`` reader and notification stream are up), and hits the next ``tasks/get``, whoever sends it.

* After a ``tasks/get`` answered 429 with ``Retry-After`` (seconds, or an HTTP date), no request of any kind reaches
  the server until it has passed, and the task ends as it does without the fault. The hold is
  :data:`RETRY_AFTER_S` here (``MCP_TASKS_TEST_RETRY_AFTER_S`` for a longer run: the note of issue 58 has 45 s).
* After the workflow ends, no read of its task reaches the server for :data:`QUIET_S`, when the ``tasks/get`` around
  the task's end was answered 500, 429, or held (the fault matrix's ``h500_get``, ``h429_get``, ``stall30_get``;
  the stall is :data:`STALL_S` here, ``MCP_TASKS_TEST_STALL_S=30`` for the matrix's): the server notifies the end, the
  workflow is woken and reads the task in a new activity, and the wait it abandoned, in a backoff or a read, sends
  nothing more.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from datetime import UTC, datetime
from email.utils import format_datetime
from typing import Any

import pytest
from temporalio.client import Client

from mcp_temporal_tasks.activities.wire import Endpoint
from mcp_temporal_tasks.workflows.client import outcome_of, start_mcp_task
from mcp_temporal_tasks.workflows.records import McpTaskRequest, Timeouts
from tests.faults import Fault, FaultProxy, RateLimit, Rule, Seen, Stall, Status
from tests.peers.harness import Peer
from tests.temporal_harness import unique, until

RETRY_AFTER_S = float(os.environ.get("MCP_TASKS_TEST_RETRY_AFTER_S", "8"))
#: Long enough that, before issue 58, the abandoned read's reply (and the tasks/result after it) came within QUIET_S.
STALL_S = float(os.environ.get("MCP_TASKS_TEST_STALL_S", "8"))
#: The fault is armed this long after the tools/call (the task runs longer).
ARM_S = 1.5
#: How long after the workflow ended no read of its task may reach the server.
QUIET_S = 10.0
#: As shipped (heartbeat 30 s: a cancel reaches an activity up to 24 s late), with polls close together.
TIMEOUTS = Timeouts(poll_floor_s=0.05, unreachable_s=3 * RETRY_AFTER_S + 60)


async def _run(
    client: Client, queue: str, proxy: FaultProxy, seconds: float, fault: Fault
) -> tuple[str, str, float, Rule]:
    """One task through the proxy, ``fault`` armed :data:`ARM_S` after its ``tools/call`` for the next ``tasks/get``:
    (outcome, task id, when its workflow closed (epoch seconds), the fault's rule)."""
    request = McpTaskRequest(
        server=Endpoint(url=proxy.url),
        tool="slow_echo",
        arguments={"seconds": seconds, "text": unique("ends")},
        timeouts=TIMEOUTS,
    )
    handle = await start_mcp_task(client, request, workflow_id=unique("ends"), task_queue=queue)
    called = await until(lambda: next((r.at for r in proxy.requests if r.method == "tools/call"), None), 60, "a call")
    await asyncio.sleep(max(0.0, called + ARM_S - time.monotonic()))
    rule = proxy.add("tasks/get", fault)
    out = await asyncio.wait_for(outcome_of(handle), 3 * RETRY_AFTER_S + 120)
    closed = (await handle.describe()).close_time
    assert closed is not None and out.task_id is not None
    return out.outcome.value, out.task_id, closed.timestamp(), rule


@pytest.mark.parametrize("form", ["delta-seconds", "http-date"])
async def test_after_a_429_nothing_reaches_the_server_until_retry_after_passed(
    ts_http_stateful: Peer, client: Client, queue: str, worker: Any, form: str
) -> None:
    # The date names the instant the hold ends (whole seconds): about RETRY_AFTER_S after the fault is armed.
    until_wall = float(int(time.time() + ARM_S + RETRY_AFTER_S + 1))
    date = format_datetime(datetime.fromtimestamp(until_wall, UTC), usegmt=True)
    fault = RateLimit(retry_after_s=RETRY_AFTER_S) if form == "delta-seconds" else RateLimit(header=date)
    with FaultProxy(ts_http_stateful.url or "") as proxy:
        outcome, _, _, rule = await _run(client, queue, proxy, 4, fault)
        seen = list(proxy.requests)
    assert rule.fired == 1 and outcome == "completed"
    limited = next(i for i, r in enumerate(seen) if r.method == "tasks/get" and not r.forwarded)
    after = seen[limited + 1 :]
    assert after, "nothing reached the server after the 429: the task cannot have been read to its end"
    first, held = after[0], after[0].at - seen[limited].at
    if form == "delta-seconds":
        assert held >= RETRY_AFTER_S - 0.05, f"{first.http} {first.method} reached the server {held:.2f}s after the 429"
    else:
        assert first.wall >= until_wall - 0.05, (
            f"{first.http} {first.method} reached the server {until_wall - first.wall:.2f}s before {date}"
        )
    print(f"429 ({form}): the next request, {first.http} {first.method}, came {held:.2f}s later")


#: The fault matrix's cases: the first tasks/get of the task answered HTTP 500, 429, or held 30 s.
CASES: dict[str, Callable[[], Fault]] = {
    "h500_get": lambda: Status(500),
    "h429_get": lambda: RateLimit(retry_after_s=3),
    "stall30_get": lambda: Stall(STALL_S),
}


@pytest.mark.parametrize("case", list(CASES))
async def test_after_the_workflow_ends_no_read_of_its_task_reaches_the_server(
    ts_http_stateful: Peer, client: Client, queue: str, worker: Any, case: str
) -> None:
    with FaultProxy(ts_http_stateful.url or "") as proxy:
        outcome, task_id, closed_at, rule = await _run(client, queue, proxy, 2, CASES[case]())
        # The absence of a request over a window is the assertion: watched for QUIET_S after the close.
        await asyncio.sleep(max(0.0, closed_at + QUIET_S - time.time()))
        seen = list(proxy.requests)
    assert rule.fired == 1 and outcome == "completed", outcome
    # Its reads: the requests naming it, and the session's tasks/list (the session is this test's alone).
    late: list[Seen] = [r for r in seen if r.wall > closed_at and (r.task_id == task_id or r.method == "tasks/list")]
    assert not late, [(r.method, round(r.wall - closed_at, 2)) for r in late]
    others = [f"{r.http} {r.method or ''} +{r.wall - closed_at:.2f}s" for r in seen if r.wall > closed_at]
    print(f"{case}: reads of the task in the {QUIET_S:g}s after the workflow closed: 0; other requests: {others}")
