"""McpTasksPlugin and McpTasksClient in a user's own application, on a real Temporal dev server and real peers.

Nothing is mocked: the user's workflow (``tests/fixtures/user_app.py``) runs on a plain ``temporalio`` Worker
with the plugin, calls the TypeScript SDK peer (2025-11-25) and the fastmcp peer (2026-07-28) by the names the
plugin was configured with, and the server's own request log counts every ``tools/call``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError
from temporalio.contrib.pydantic import PydanticPayloadConverter
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from mcp_temporal_tasks import (
    McpTaskRequest,
    McpTasksPlugin,
    Outcome,
    Timeouts,
    start_mcp_task,
)
from mcp_temporal_tasks.activities.mcp_activities import FETCH_OUTCOME, LIST_TOOLS
from mcp_temporal_tasks.activities.wire import Endpoint
from mcp_temporal_tasks.worker.config import ConfigError
from mcp_temporal_tasks.workflows.client import outcome_of
from mcp_temporal_tasks.workflows.mcp_task import McpTaskWorkflow
from tests.faults.proxy import FaultProxy, ResetAfterSend
from tests.fixtures.user_app import Plan, Step, UserAgent
from tests.peers.harness import Peer
from tests.temporal_harness import (
    ProcessUnderTest,
    address_of,
    child_view,
    listings,
    reset_to_first_workflow_task,
    settled_calls,
    tool_calls,
    unique,
    until,
)

HEARTBEAT_S = 2.0
UNREACHABLE_S = 4.0
#: Tools offered by both peers (the TS peer has more).
COMMON_TOOLS = {"slow_echo", "rate_limited", "rpc_error", "cancellable", "ask_user"}
TOOLS_OF = {"ts": "ts_http_stateful", "fm": "fastmcp_server"}


async def activity_types(client: Client, workflow_id: str, run_id: str | None = None) -> list[str]:
    handle = client.get_workflow_handle(workflow_id, run_id=run_id)
    return [
        e.activity_task_scheduled_event_attributes.activity_type.name
        async for e in handle.fetch_history_events()
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]


def servers(ts: Peer, fm: Peer, **extra: str) -> dict[str, dict[str, Any]]:
    """The plugin's ``servers``: the peers by name, as a user configures them."""
    return {"ts": {"url": ts.url}, "fm": {"url": fm.url}, **{name: {"url": url} for name, url in extra.items()}}


async def run_plan(
    client: Client, queue: str, plan: Plan, *, wid: str | None = None, timeout_s: float = 90
) -> tuple[str, list[dict[str, Any]]]:
    wid = wid or unique("user")
    result = await asyncio.wait_for(client.execute_workflow(UserAgent.run, plan, id=wid, task_queue=queue), timeout_s)
    return wid, result


def outcome_steps(server: str, text: str) -> list[Step]:
    return [
        Step("call", server, "slow_echo", {"seconds": 0.3, "text": text}),
        Step("call", server, "rate_limited"),
        Step("call", server, "rpc_error"),
        Step("run", server, "slow_echo", {"seconds": 0.3, "text": text}),
        Step("run", server, "rate_limited"),
        Step("run", server, "rpc_error"),
    ]


def check_outcome_steps(result: list[dict[str, Any]], text: str) -> None:
    completed, tool_error, failed, run_completed, run_tool_error, run_failed = result
    # completed: the CallToolResult itself
    assert completed == {
        "kind": "call",
        "type": "CallToolResult",
        "is_error": False,
        "text": text,
        "structured": {"echo": text},
    }, completed
    # tool_error: a normal CallToolResult with isError true, as in temporalio.mcp
    assert tool_error["type"] == "CallToolResult" and tool_error["is_error"] is True, tool_error
    assert tool_error["text"] == "HTTP 429 Too Many Requests: rate limit exceeded; retry-after=30"
    # failed: call_tool raises McpTaskError itself (not a ChildWorkflowError), carrying the outcome
    assert failed["raised"] == "McpTaskError" and failed["is_child_workflow_error"] is False, failed
    assert failed["error_type"] == "McpTaskFailed" and failed["outcome"] == "failed", failed
    assert failed["non_retryable"] is True and failed["error_code"] == -32602
    assert "rpc_error" in failed["message"] and "ended failed" in failed["message"], failed["message"]
    # run(): the McpTaskOutcome of each, never raising
    assert run_completed["type"] == "McpTaskOutcome" and run_completed["outcome"] == "completed", run_completed
    assert run_tool_error["outcome"] == "tool_error" and run_tool_error["is_error"] is True, run_tool_error
    assert run_failed["outcome"] == "failed", run_failed
    assert all(r["task_id"] for r in (run_completed, run_tool_error, run_failed))


@contextlib.asynccontextmanager
async def started(worker: Worker) -> AsyncIterator[Worker]:
    async with worker:
        yield worker


# --- 1. the plugin on a plain Worker ---------------------------------------------------------------


@pytest.mark.parametrize("server", ["ts", "fm"])
async def test_worker_plugin_call_tool_and_run(
    request: pytest.FixtureRequest, server: str, client: Client, ts_http_stateful: Peer, fastmcp_server: Peer
) -> None:
    peer: Peer = request.getfixturevalue(TOOLS_OF[server])
    queue = unique("plug-w")
    plugin = McpTasksPlugin(servers=servers(ts_http_stateful, fastmcp_server))
    mark = peer.log_mark()
    text = unique(f"echo-{server}")
    async with started(Worker(client, task_queue=queue, workflows=[UserAgent], plugins=[plugin])):
        wid, result = await run_plan(client, queue, Plan(outcome_steps(server, text), heartbeat_s=HEARTBEAT_S))
    check_outcome_steps(result, text)
    # One child McpTaskWorkflow per call, with the parent's deterministic ids; Temporal shows which failed.
    statuses = []
    for n in range(1, 7):
        desc = await client.get_workflow_handle(f"{wid}/mcp/{n}").describe()
        assert desc.workflow_type == "McpTaskWorkflow" and desc.parent_id == wid
        statuses.append(desc.status)
    ok, bad = WorkflowExecutionStatus.COMPLETED, WorkflowExecutionStatus.FAILED
    assert statuses == [ok, bad, bad, ok, bad, bad]
    # Each call sent exactly one tools/call, to the server the name designates.
    assert await settled_calls(peer, mark, tool="slow_echo", client=client, workflows=[wid]) == 2
    assert len(tool_calls(peer, mark, tool="rate_limited")) == 2 and len(tool_calls(peer, mark, tool="rpc_error")) == 2


async def test_list_tools_cached_per_client_object(
    client: Client, ts_http_stateful: Peer, fastmcp_server: Peer
) -> None:
    queue = unique("plug-list")
    plugin = McpTasksPlugin(servers=servers(ts_http_stateful, fastmcp_server))
    marks = {"ts": ts_http_stateful.log_mark(), "fm": fastmcp_server.log_mark()}
    steps = [
        Step("list", "ts", client="a"),
        Step("list", "ts", client="a"),
        Step("list", "ts", client="a"),
        Step("list", "ts", client="b"),
        Step("list", "ts", client="b"),
        Step("list", "fm", client="c"),
        Step("list", "fm", client="c"),
    ]
    async with started(Worker(client, task_queue=queue, workflows=[UserAgent], plugins=[plugin])):
        wid, result = await run_plan(client, queue, Plan(steps))
    assert all(r["type"] == "ListToolsResult" for r in result)
    for r, step in zip(result, steps):
        assert COMMON_TOOLS <= set(r["tools"]), r
        assert ("forbidden_tool" in r["tools"]) == (step.server == "ts")
    # Three client objects: three activities, three tools/list on the wire (two to ts, one to fm).
    assert (await activity_types(client, wid)).count(LIST_TOOLS) == 3
    assert await settled_calls(ts_http_stateful, marks["ts"], method="tools/list", client=client, workflows=[wid]) == 2
    assert listings(fastmcp_server, marks["fm"]) == 1


async def test_lost_and_unknown_outcome_raise_mcp_task_error(
    client: Client, ts_http_stateful: Peer, fastmcp_server: Peer
) -> None:
    """``lost``: the legacy task's server is down past ``unreachable_s``; ``unknown_outcome``: the reply to the
    extension's ``tools/call`` is reset after the server got it (2026-07-28 has no tasks/list to reconcile)."""
    queue = unique("plug-lost")
    ts_mark, fm_mark = ts_http_stateful.log_mark(), fastmcp_server.log_mark()
    with FaultProxy(ts_http_stateful.url or "") as ts_proxy, FaultProxy(fastmcp_server.url or "") as fm_proxy:
        fm_proxy.add("tools/call", ResetAfterSend(), times=2)
        plugin = McpTasksPlugin(
            servers=servers(ts_http_stateful, fastmcp_server, ts_down=ts_proxy.url, fm_reset=fm_proxy.url)
        )
        steps = [
            Step("call", "ts_down", "slow_echo", {"seconds": 30}, unreachable_s=UNREACHABLE_S),
            Step("run", "ts_down", "slow_echo", {"seconds": 30}, unreachable_s=UNREACHABLE_S),
            Step("call", "fm_reset", "slow_echo", {"seconds": 0.3}),
            Step("run", "fm_reset", "slow_echo", {"seconds": 0.3}),
        ]
        wid = unique("lost")
        async with started(Worker(client, task_queue=queue, workflows=[UserAgent], plugins=[plugin])):
            handle = await client.start_workflow(
                UserAgent.run, Plan(steps, parallel=True, heartbeat_s=HEARTBEAT_S), id=wid, task_queue=queue
            )
            # Both legacy tasks exist and are being polled: then their server goes away for 3x unreachable_s.
            for n in (1, 2):
                await child_view(client, f"{wid}/mcp/{n}", lambda v: v.task_id)
            await until(lambda: ts_proxy.forwarded("tasks/get") >= 2, 20, "tasks/get of both tasks")
            ts_proxy.down(3 * UNREACHABLE_S)
            t0 = time.monotonic()
            result = await asyncio.wait_for(handle.result(), 90)
            elapsed = time.monotonic() - t0
        assert ts_proxy.forwarded("tools/call") == 2 and fm_proxy.forwarded("tools/call") == 2
    call_lost, run_lost, call_unknown, run_unknown = result
    assert call_lost["raised"] == "McpTaskError" and call_lost["is_child_workflow_error"] is False, call_lost
    assert call_lost["error_type"] == "McpTaskLost" and call_lost["outcome"] == "lost", call_lost
    assert run_lost["type"] == "McpTaskOutcome" and run_lost["outcome"] == "lost", run_lost
    assert run_lost["reason"] and "not replayed" in run_lost["reason"], run_lost["reason"]
    assert call_unknown["raised"] == "McpTaskError", call_unknown
    assert call_unknown["error_type"] == "McpTaskUnknownOutcome" and call_unknown["outcome"] == "unknown_outcome"
    assert run_unknown["type"] == "McpTaskOutcome" and run_unknown["outcome"] == "unknown_outcome", run_unknown
    assert UNREACHABLE_S <= elapsed < UNREACHABLE_S + 20, f"{elapsed:.1f}s"
    # Nothing was sent twice: two calls reached each server, none was replayed.
    assert await settled_calls(ts_http_stateful, ts_mark, tool="slow_echo", client=client, workflows=[wid]) == 2
    assert len(tool_calls(fastmcp_server, fm_mark, tool="slow_echo")) == 2


async def test_uncaught_mcp_task_error_fails_the_parent_with_its_outcome(
    client: Client, ts_http_stateful: Peer, fastmcp_server: Peer
) -> None:
    queue = unique("plug-raise")
    plugin = McpTasksPlugin(servers=servers(ts_http_stateful, fastmcp_server))
    wid = unique("raise")
    async with started(Worker(client, task_queue=queue, workflows=[UserAgent], plugins=[plugin])):
        handle = await client.start_workflow(
            UserAgent.run, Plan([Step("call", "fm", "rpc_error", reraise=True)]), id=wid, task_queue=queue
        )
        with pytest.raises(WorkflowFailureError) as failed:
            await asyncio.wait_for(handle.result(), 60)
        out = await outcome_of(handle)  # the parent's failure carries the outcome too
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "McpTaskFailed" and cause.non_retryable
    assert out.outcome == Outcome.FAILED and out.workflow_id == f"{wid}/mcp/1"
    assert (await handle.describe()).status == WorkflowExecutionStatus.FAILED


# --- 2. the plugin on Client.connect -----------------------------------------------------------------


async def test_client_plugin_is_inherited_by_workers(
    temporal_env: Any, ts_http_stateful: Peer, fastmcp_server: Peer
) -> None:
    plugin = McpTasksPlugin(servers=servers(ts_http_stateful, fastmcp_server))
    client = await Client.connect(address_of(temporal_env), namespace=temporal_env.client.namespace, plugins=[plugin])
    assert issubclass(client.data_converter.payload_converter_class, PydanticPayloadConverter)
    queue = unique("plug-c")
    ts_mark, fm_mark = ts_http_stateful.log_mark(), fastmcp_server.log_mark()
    texts = {"ts": unique("c-ts"), "fm": unique("c-fm")}
    async with started(Worker(client, task_queue=queue, workflows=[UserAgent])):  # no plugins= here
        results = await asyncio.gather(
            *(
                run_plan(
                    client,
                    queue,
                    Plan(outcome_steps(s, texts[s]) + [Step("list", s), Step("list", s)], heartbeat_s=HEARTBEAT_S),
                )
                for s in ("ts", "fm")
            )
        )
        # A service on the same client starts a task by the worker's configured name.
        handle = await start_mcp_task(
            client,
            McpTaskRequest(server="fm", tool="slow_echo", arguments={"seconds": 0.2, "text": "svc"}),
            workflow_id=unique("svc"),
            task_queue=queue,
        )
        svc = await asyncio.wait_for(outcome_of(handle), 60)
    for (wid, result), s in zip(results, ("ts", "fm")):
        check_outcome_steps(result[:6], texts[s])
        assert result[6]["type"] == "ListToolsResult" and COMMON_TOOLS <= set(result[6]["tools"])
        assert result[7] == result[6]
        assert (await activity_types(client, wid)).count(LIST_TOOLS) == 1
    assert svc.outcome == Outcome.COMPLETED and svc.result and svc.result["content"][0]["text"] == "svc"
    assert (
        await settled_calls(
            ts_http_stateful,
            ts_mark,
            tool="slow_echo",
            client=client,
            workflows=[wid for wid, _ in results] + [handle.id],
        )
        == 2
    )
    assert len(tool_calls(fastmcp_server, fm_mark, tool="slow_echo")) == 3


async def test_worker_plugin_without_pydantic_converter_is_a_config_error(
    temporal_env: Any, fastmcp_server: Peer
) -> None:
    plain = await Client.connect(address_of(temporal_env), namespace=temporal_env.client.namespace)
    assert not issubclass(plain.data_converter.payload_converter_class, PydanticPayloadConverter)
    plugin = McpTasksPlugin(servers={"fm": {"url": fastmcp_server.url}})
    with pytest.raises(ConfigError) as err:
        Worker(plain, task_queue=unique("plug-bad"), workflows=[UserAgent], plugins=[plugin])
    message = str(err.value)
    assert "McpTasksPlugin" in message and "pydantic payload converter" in message, message
    assert "Client.connect(..., plugins=[plugin])" in message and "pydantic_data_converter" in message


# --- 3. a worker killed mid-task; a parent reset after its child completed ---------------------------


class UserWorkerProcess(ProcessUnderTest):
    """``python -m tests.fixtures.user_app``: the user's worker with the plugin, in its own process."""

    def __init__(self, address: str, queue: str, servers_: dict[str, Any]) -> None:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env.update(TEMPORAL_ADDRESS=address, USER_APP_QUEUE=queue, USER_APP_SERVERS=json.dumps(servers_))
        super().__init__([sys.executable, "-m", "tests.fixtures.user_app"], ready="READY", env=env, name="user worker")


@contextlib.contextmanager
def user_worker(address: str, queue: str, servers_: dict[str, Any]) -> Iterator[UserWorkerProcess]:
    proc = UserWorkerProcess(address, queue, servers_)
    try:
        proc.wait_ready()
        yield proc
    finally:
        proc.stop()


async def test_worker_killed_mid_task_parent_completes_with_one_call(
    temporal_env: Any, client: Client, ts_http_stateful: Peer, fastmcp_server: Peer
) -> None:
    address = address_of(temporal_env)
    queue = unique("plug-kill")
    cfg = servers(ts_http_stateful, fastmcp_server)
    mark = ts_http_stateful.log_mark()
    text = unique("survives")
    wid = unique("kill")
    with user_worker(address, queue, cfg) as first:
        handle = await client.start_workflow(
            UserAgent.run,
            Plan([Step("call", "ts", "slow_echo", {"seconds": 6, "text": text})], heartbeat_s=HEARTBEAT_S),
            id=wid,
            task_queue=queue,
        )
        view = await child_view(client, f"{wid}/mcp/1", lambda v: v.task_id)
        await until(
            lambda: [
                ln
                for ln in ts_http_stateful.log_since(mark)
                if ln["method"] == "tasks/get" and ln.get("taskId") == view.task_id
            ],
            15,
            "a first tasks/get",
        )
        first.kill()
        assert first.proc.returncode == -9
    t0 = time.monotonic()
    with user_worker(address, queue, cfg):
        result = await asyncio.wait_for(handle.result(), 90)
    elapsed = time.monotonic() - t0
    assert result == [
        {"kind": "call", "type": "CallToolResult", "is_error": False, "text": text, "structured": {"echo": text}}
    ]
    child = await outcome_of(client.get_workflow_handle_for(McpTaskWorkflow.run, f"{wid}/mcp/1"))
    assert child.outcome == Outcome.COMPLETED and child.task_id == view.task_id
    assert [a.reason for a in child.operation_attempts] == ["initial"]
    assert await settled_calls(ts_http_stateful, mark, tool="slow_echo", client=client, workflows=[wid]) == 1
    assert elapsed < 60, f"{elapsed:.1f}s"


async def test_reset_parent_reattaches_to_its_child(
    client: Client, ts_http_stateful: Peer, fastmcp_server: Peer
) -> None:
    queue = unique("plug-reset")
    plugin = McpTasksPlugin(servers=servers(ts_http_stateful, fastmcp_server))
    mark = fastmcp_server.log_mark()
    text = unique("once")
    plan = Plan([Step("call", "fm", "slow_echo", {"seconds": 0.3, "text": text}), Step("run", "fm", "rpc_error")])
    async with started(Worker(client, task_queue=queue, workflows=[UserAgent], plugins=[plugin])):
        wid, first = await run_plan(client, queue, plan)
        assert await settled_calls(fastmcp_server, mark, tool="slow_echo", client=client, workflows=[wid]) == 1
        first_run, new_run = await reset_to_first_workflow_task(client, wid, "test: re-run the parent")
        assert new_run and new_run != first_run
        second = await asyncio.wait_for(client.get_workflow_handle(wid, run_id=new_run).result(), 60)
    assert second == first
    assert first[0]["text"] == text and first[1]["outcome"] == "failed"
    # The reset run found both children already started (REJECT_DUPLICATE) and read their outcomes.
    new_events = [e async for e in client.get_workflow_handle(wid, run_id=new_run).fetch_history_events()]
    refused = [e for e in new_events if e.event_type == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_FAILED]
    assert [e.start_child_workflow_execution_failed_event_attributes.workflow_id for e in refused] == [
        f"{wid}/mcp/1",
        f"{wid}/mcp/2",
    ]
    assert (await activity_types(client, wid, new_run)).count(FETCH_OUTCOME) == 2
    # No second tools/call reached the server.
    assert await settled_calls(fastmcp_server, mark, tool="slow_echo", client=client, workflows=[wid]) == 1
    assert len(tool_calls(fastmcp_server, mark, tool="rpc_error")) == 1


async def test_reset_parent_reattaches_to_children_on_another_queue(
    client: Client, ts_http_stateful: Peer, fastmcp_server: Peer
) -> None:
    """``McpTasksClient(task_queue=...)``: the children (and the plugin) live on another queue than the parent,
    whose own worker has no plugin. The reset parent reads the existing child's outcome there too."""
    parent_queue, mcp_queue = unique("plug-parent"), unique("plug-mcp")
    plugin = McpTasksPlugin(servers=servers(ts_http_stateful, fastmcp_server))
    mark = fastmcp_server.log_mark()
    plan = Plan([Step("call", "fm", "slow_echo", {"seconds": 0.2, "text": "elsewhere"}, task_queue=mcp_queue)])
    async with (
        started(Worker(client, task_queue=mcp_queue, plugins=[plugin])),
        started(Worker(client, task_queue=parent_queue, workflows=[UserAgent])),
    ):
        wid, first = await run_plan(client, parent_queue, plan)
        assert (await client.get_workflow_handle(f"{wid}/mcp/1").describe()).task_queue == mcp_queue
        _, new_run = await reset_to_first_workflow_task(client, wid, "test: re-run the parent")
        second = await asyncio.wait_for(client.get_workflow_handle(wid, run_id=new_run).result(), 30)
    assert second == first and first[0]["text"] == "elsewhere"
    assert await settled_calls(fastmcp_server, mark, tool="slow_echo", client=client, workflows=[wid]) == 1


async def test_client_plugin_shared_by_two_workers_one_stops(
    temporal_env: Any, ts_stdio: Peer, ts_http_stateful: Peer, fastmcp_server: Peer
) -> None:
    """Two workers inherit one plugin from their client; stopping one must not close the MCP sessions (here a
    stdio server holding a running task) that the other still uses."""
    plugin = McpTasksPlugin(
        servers={
            **servers(ts_http_stateful, fastmcp_server),
            "local": {"command": ts_stdio.endpoint.command, "env": {"PEER_LOG": {"env": "MCP_TEST_PEER_LOG_TS_STDIO"}}},
        }
    )
    client = await Client.connect(address_of(temporal_env), namespace=temporal_env.client.namespace, plugins=[plugin])
    queue_a, queue_b = unique("plug-a"), unique("plug-b")
    mark = ts_stdio.log_mark()
    wid = unique("two")
    async with asyncio.timeout(90), started(Worker(client, task_queue=queue_b, workflows=[UserAgent])):
        async with started(Worker(client, task_queue=queue_a, workflows=[UserAgent])):
            handle = await client.start_workflow(
                UserAgent.run,
                Plan([Step("call", "local", "slow_echo", {"seconds": 4, "text": "kept"})], heartbeat_s=HEARTBEAT_S),
                id=wid,
                task_queue=queue_b,
            )
            await child_view(client, f"{wid}/mcp/1", lambda v: v.task_id)
        result = await asyncio.wait_for(handle.result(), 60)  # worker A has stopped meanwhile
    assert result[0].get("text") == "kept", result
    assert await settled_calls(ts_stdio, mark, tool="slow_echo", client=client, workflows=[wid]) == 1


# --- 4. what the Temporal UI reads ---------------------------------------------------------------------


async def count_until(client: Client, query: str, expected: int, timeout_s: float = 15) -> int:
    """``count_workflows(query)`` once it reaches ``expected`` (visibility is eventually consistent)."""
    deadline = time.monotonic() + timeout_s
    while True:
        n = (await client.count_workflows(query)).count
        if n == expected or time.monotonic() > deadline:
            return n
        await asyncio.sleep(0.2)


async def test_ui_tells_outcomes_apart(
    client: Client, queue: str, worker: Any, ts_http_stateful: Peer, fastmcp_server: Peer
) -> None:
    timeouts = Timeouts(
        heartbeat_s=HEARTBEAT_S, poll_floor_s=0.05, owner_pickup_s=4, submit_s=60, unreachable_s=UNREACHABLE_S
    )
    tag = unique("ui")
    with FaultProxy(ts_http_stateful.url or "") as proxy:
        requests = {
            "completed": McpTaskRequest(
                server=fastmcp_server.endpoint,
                tool="slow_echo",
                arguments={"seconds": 0.2, "text": tag},
                timeouts=timeouts,
            ),
            "tool_error": McpTaskRequest(server=fastmcp_server.endpoint, tool="rate_limited", timeouts=timeouts),
            "failed": McpTaskRequest(server=ts_http_stateful.endpoint, tool="rpc_error", timeouts=timeouts),
            "lost": McpTaskRequest(
                server=Endpoint(url=proxy.url), tool="slow_echo", arguments={"seconds": 30}, timeouts=timeouts
            ),
        }
        handles = {
            name: await start_mcp_task(client, r, workflow_id=f"{tag}-{name}", task_queue=queue)
            for name, r in requests.items()
        }
        await child_view(client, handles["lost"].id, lambda v: v.task_id)
        await until(lambda: proxy.forwarded("tasks/get") >= 1, 20, "a first tasks/get")
        proxy.down(3 * UNREACHABLE_S)
        outcomes = {name: await asyncio.wait_for(outcome_of(h), 60) for name, h in handles.items()}
    assert {name: o.outcome.value for name, o in outcomes.items()} == {n: n for n in requests}
    expected_type = {"tool_error": "McpTaskToolError", "failed": "McpTaskFailed", "lost": "McpTaskLost"}
    for name, handle in handles.items():
        wid = handle.id
        status = "Completed" if name == "completed" else "Failed"
        other = "Failed" if name == "completed" else "Completed"
        # The list view's status filter and the search attribute the project adds.
        assert (
            await count_until(
                client, f"WorkflowId = '{wid}' AND ExecutionStatus = '{status}' AND McpOutcome = '{name}'", 1
            )
            == 1
        ), (name, status)
        assert await count_until(client, f"WorkflowId = '{wid}' AND ExecutionStatus = '{other}'", 0, 0) == 0
        rows = [r async for r in client.list_workflows(f"WorkflowId = '{wid}'")]
        assert [r.status for r in rows] == [WorkflowExecutionStatus[status.upper()]], name
        # The detail view: the close event, and for a failure its type names the outcome.
        events = [e async for e in handle.fetch_history_events()]
        last = events[-1]
        if name == "completed":
            assert last.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED
            assert (await handle.result()).result["content"][0]["text"] == tag  # type: ignore[index]
            continue
        assert last.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED, name
        failure = last.workflow_execution_failed_event_attributes.failure
        assert failure.application_failure_info.type == expected_type[name], failure
        assert failure.application_failure_info.non_retryable
        assert f"ended {name}" in failure.message, failure.message
        with pytest.raises(WorkflowFailureError) as err:
            await handle.result()
        assert isinstance(err.value.cause, ApplicationError) and err.value.cause.type == expected_type[name]
    # The whole set, as the UI's query box would ask it.
    ids = " OR ".join(f"WorkflowId = '{h.id}'" for h in handles.values())
    assert await count_until(client, f"ExecutionStatus = 'Failed' AND ({ids})", 3) == 3
    assert await count_until(client, f"ExecutionStatus = 'Completed' AND ({ids})", 1) == 1


# --- 5. the folder case: a user's own workflows.py, activities.py and worker.py ----------------------


USER_FILES = {
    "workflows.py": '''
        """The user's own workflows module (same name as a folder of mcp-temporal-tasks' repository)."""
        from datetime import timedelta

        from temporalio import workflow

        with workflow.unsafe.imports_passed_through():
            from mcp_temporal_tasks import McpTasksClient, Timeouts

        MARKER = "the user's workflows.py"


        @workflow.defn
        class FolderAgent:
            @workflow.run
            async def run(self, text: str) -> dict:
                greeting = await workflow.execute_activity(
                    "user_greeting", text, start_to_close_timeout=timedelta(seconds=30), result_type=str)
                result = await McpTasksClient("fm", timeouts=Timeouts(heartbeat_s=2, poll_floor_s=0.05)).call_tool(
                    "slow_echo", {"seconds": 0.2, "text": greeting})
                return {"type": type(result).__name__, "text": result.content[0].text,
                        "is_error": bool(result.is_error)}
    ''',
    "activities.py": '''
        """The user's own activities module."""
        from temporalio import activity

        MARKER = "the user's activities.py"


        @activity.defn(name="user_greeting")
        async def user_greeting(text: str) -> str:
            return f"hello {text}"
    ''',
    "worker.py": '''
        """The user's own worker module."""
        MARKER = "the user's worker.py"
        TASK_QUEUE_PREFIX = "folder"
    ''',
    "main.py": """
        import asyncio
        import json
        import os
        import sys
        from pathlib import Path

        from temporalio.client import Client
        from temporalio.contrib.pydantic import pydantic_data_converter
        from temporalio.worker import Worker

        from mcp_temporal_tasks import McpTaskRequest, McpTasksClient, McpTasksPlugin, get_outcome, start_mcp_task

        import activities
        import worker
        import workflows

        HERE = Path(__file__).resolve().parent
        for module in (workflows, activities, worker):
            assert Path(module.__file__).resolve().parent == HERE, (module.__name__, module.__file__)
            assert module.MARKER == f"the user's {module.__name__}.py"
        import mcp_temporal_tasks
        assert Path(mcp_temporal_tasks.__file__).resolve().parent != HERE
        assert McpTasksClient.__module__ == "mcp_temporal_tasks.workflows.tasks_client"


        async def main() -> None:
            queue = f"{worker.TASK_QUEUE_PREFIX}-{os.getpid()}"
            plugin = McpTasksPlugin(servers={"fm": {"url": os.environ["FM_URL"]}})
            client = await Client.connect(os.environ["TEMPORAL_ADDRESS"], data_converter=pydantic_data_converter)
            async with Worker(client, task_queue=queue, workflows=[workflows.FolderAgent],
                              activities=[activities.user_greeting], plugins=[plugin]):
                parent = await client.execute_workflow(workflows.FolderAgent.run, "folder", id=f"folder-{os.getpid()}",
                                                       task_queue=queue)
                handle = await start_mcp_task(client, McpTaskRequest(
                    server="fm", tool="slow_echo", arguments={"seconds": 0.1, "text": "service"}),
                    workflow_id=f"folder-svc-{os.getpid()}", task_queue=queue)
                outcome = await get_outcome(client, handle.id)
            print("RESULT " + json.dumps({"parent": parent, "outcome": outcome.outcome.value,
                                          "text": outcome.result["content"][0]["text"]}), flush=True)


        asyncio.run(main())
        # The Temporal runtime's threads can abort a finished short-lived process at interpreter shutdown
        # (temporalio/sdk-python#300): leave without it, as `mcp-tasks` does; the result is flushed.
        sys.stdout.flush()
        os._exit(0)
    """,
}


def test_folder_case_user_modules_named_like_ours(tmp_path: Path, temporal_env: Any, fastmcp_server: Peer) -> None:
    for name, body in USER_FILES.items():
        (tmp_path / name).write_text(textwrap.dedent(body).lstrip())
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(TEMPORAL_ADDRESS=address_of(temporal_env), FM_URL=fastmcp_server.url or "")
    mark = fastmcp_server.log_mark()
    proc = subprocess.run(
        [sys.executable, "main.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-5000:]}"
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert line, proc.stdout
    assert json.loads(line.removeprefix("RESULT ")) == {
        "parent": {"type": "CallToolResult", "text": "hello folder", "is_error": False},
        "outcome": "completed",
        "text": "service",
    }
    assert len(tool_calls(fastmcp_server, mark, tool="slow_echo")) == 2
