"""``McpTasksToolset`` in a Pydantic AI agent with ``TemporalDurability``, on a real Temporal dev server and real
MCP peers (the TypeScript SDK's 2025-11-25 runtime and fastmcp's 2026-07-28 extension), with a scripted
``FunctionModel`` (tests/fixtures/pai_agents.py). The servers' own request logs count every ``tools/call``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pydantic_ai.durable_exec.temporal import PydanticAIPayloadConverter, PydanticAIPlugin
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from mcp_temporal_tasks import McpTaskError, McpTasksPlugin, Outcome
from tests.agents_common import (
    child_id,
    killed_mid_call,
    parked_until_approved,
    reset_reattaches,
    seen,
    servers,
    settled_calls,
    tool_calls,
)
from tests.faults.proxy import FaultProxy, ResetAfterSend
from tests.fixtures.agent_scripts import script
from tests.fixtures.pai_app import PaiAgentWorkflow
from tests.peers.harness import Peer
from tests.temporal_harness import address_of, unique

AGENT_TIMEOUT_S = 90


async def connect(temporal_env: Any, *plugins: Any) -> Client:
    return await Client.connect(
        address_of(temporal_env), namespace=temporal_env.client.namespace, plugins=list(plugins)
    )


class App:
    def __init__(self, client: Client, queue: str) -> None:
        self.client, self.queue = client, queue

    async def run(self, prompt: str, *, wid: str | None = None) -> tuple[str, str]:
        wid = wid or unique("pai")
        out = await asyncio.wait_for(
            self.client.execute_workflow(PaiAgentWorkflow.run, prompt, id=wid, task_queue=self.queue), AGENT_TIMEOUT_S
        )
        return wid, out


@pytest.fixture
async def app(temporal_env: Any, ts_http_stateful: Peer, fastmcp_server: Peer) -> AsyncIterator[App]:
    """The framework's plugin first, then ours, on one client; a plain Worker inherits both."""
    client = await connect(
        temporal_env, PydanticAIPlugin(), McpTasksPlugin(servers=servers(ts_http_stateful, fastmcp_server))
    )
    queue = unique("pai-q")
    async with Worker(client, task_queue=queue, workflows=[PaiAgentWorkflow]):
        yield App(client, queue)


async def test_completed_and_tool_error_reach_the_model(app: App, fastmcp_server: Peer, ts_http_stateful: Peer) -> None:
    fm_mark, ts_mark = fastmcp_server.log_mark(), ts_http_stateful.log_mark()
    text = unique("pai-echo")
    wid, out = await app.run(script("fm", [("slow_echo", {"seconds": 0.3, "text": text})], [("rate_limited", {})]))
    echo, error = seen(out)
    # completed: the structured content, as Pydantic AI's MCPToolset gives it to the model
    assert echo == {"tool": "slow_echo", "kind": "return", "content": {"echo": text}}, echo
    # tool_error: the framework's retry prompt carrying the server's text
    assert error["tool"] == "rate_limited" and error["kind"] == "retried", error
    assert "HTTP 429 Too Many Requests: rate limit exceeded; retry-after=30" in error["content"], error
    # each call is one child McpTaskWorkflow with a deterministic id under the agent's workflow
    desc = await app.client.get_workflow_handle(
        child_id(wid, "fm", "slow_echo", {"seconds": 0.3, "text": text})
    ).describe()
    assert desc.workflow_type == "McpTaskWorkflow" and desc.parent_id == wid
    assert await settled_calls(fastmcp_server, fm_mark, "slow_echo", client=app.client, workflows=[wid]) == 1
    assert len(tool_calls(fastmcp_server, fm_mark, "rate_limited")) == 1
    # the legacy era too
    wid2, out2 = await app.run(script("ts", [("slow_echo", {"seconds": 0.3, "text": text})]))
    assert seen(out2) == [{"tool": "slow_echo", "kind": "return", "content": {"echo": text}}]
    assert await settled_calls(ts_http_stateful, ts_mark, "slow_echo", client=app.client, workflows=[wid, wid2]) == 1


async def test_repeated_non_idempotent_call_reattaches(app: App, fastmcp_server: Peer) -> None:
    mark = fastmcp_server.log_mark()
    text = unique("once")
    same = {"seconds": 0.5, "text": text}
    idem = {"text": unique("twice")}
    wid, out = await app.run(
        script(
            "fm",
            [("slow_echo", same), ("slow_echo", same)],
            [("slow_echo", same)],
            [("quick_sync", idem), ("quick_sync", idem)],
        )
    )
    results = seen(out)
    echoes = [r for r in results if r["tool"] == "slow_echo"]
    assert echoes == [{"tool": "slow_echo", "kind": "return", "content": {"echo": text}}] * 3, results
    quick = [r for r in results if r["tool"] == "quick_sync"]
    assert len(quick) == 2 and all(r["kind"] == "return" for r in quick), results
    # idempotent=false (configuration): three calls by the model, one tools/call on the server
    assert await settled_calls(fastmcp_server, mark, "slow_echo", client=app.client, workflows=[wid]) == 1
    # idempotent=true: called again as asked, under ….2
    assert len(tool_calls(fastmcp_server, mark, "quick_sync")) == 2
    for n in (1, 2):
        desc = await app.client.get_workflow_handle(child_id(wid, "fm", "quick_sync", idem, n=n)).describe()
        assert desc.parent_id == wid


async def test_other_outcome_ends_the_run_with_mcp_task_error(app: App, fastmcp_server: Peer) -> None:
    mark = fastmcp_server.log_mark()
    wid = unique("pai-fail")
    with pytest.raises(WorkflowFailureError) as failed:
        await app.run(script("fm", [("rpc_error", {})]), wid=wid)
    outcome = McpTaskError.outcome_of(failed.value)
    assert outcome is not None and outcome.outcome == Outcome.FAILED, failed.value
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "McpTaskFailed", cause
    assert len(tool_calls(fastmcp_server, mark, "rpc_error")) == 1
    # the option: the model is told, and the run goes on
    _, out = await app.run(script("fm_tell", [("rpc_error", {})]))
    (told,) = seen(out)
    assert told["kind"] == "return" and "ended failed" in told["content"], told
    assert "may already have run" in told["content"], told


async def test_bad_input_is_one_clear_error(app: App, fastmcp_server: Peer) -> None:
    mark = fastmcp_server.log_mark()
    # arguments that fail the input schema: the model is asked to fix them; no tools/call
    wids = [unique("pai-bad") for _ in range(3)]
    _, out = await app.run(script("fm", [("slow_echo", {"seconds": "soon"})]), wid=wids[0])
    (bad,) = seen(out)
    assert bad["kind"] == "retried" and "input schema" in bad["content"] and "seconds" in bad["content"], bad
    assert await settled_calls(fastmcp_server, mark, "slow_echo", client=app.client, workflows=wids[:1]) == 0
    # a tool the server does not list, named in tools=
    with pytest.raises(WorkflowFailureError) as err:
        await app.run(script("filtered", [("slow_echo", {"seconds": 0.1})]), wid=wids[1])
    assert "no_such_tool" in str(err.value.cause), err.value.cause
    # an unknown server name
    with pytest.raises(WorkflowFailureError) as err:
        await app.run(script("nowhere", [("slow_echo", {"seconds": 0.1})]), wid=wids[2])
    assert "nowhere" in str(err.value.cause) and "UnknownServer" in repr(err.value.cause), err.value.cause
    assert await settled_calls(fastmcp_server, mark, "slow_echo", client=app.client, workflows=wids) == 0


async def test_plugins_compose_in_either_order(temporal_env: Any, ts_http_stateful: Peer, fastmcp_server: Peer) -> None:
    for order in ("pai-first", "ours-first"):
        ours = McpTasksPlugin(servers=servers(ts_http_stateful, fastmcp_server))
        plugins = [PydanticAIPlugin(), ours] if order == "pai-first" else [ours, PydanticAIPlugin()]
        client = await connect(temporal_env, *plugins)
        assert client.data_converter.payload_converter_class is PydanticAIPayloadConverter, order
        queue = unique("pai-order")
        mark = fastmcp_server.log_mark()
        text = unique(order)
        async with Worker(client, task_queue=queue, workflows=[PaiAgentWorkflow]):
            wid, out = await App(client, queue).run(script("fm", [("slow_echo", {"seconds": 0.2, "text": text})]))
        assert seen(out) == [{"tool": "slow_echo", "kind": "return", "content": {"echo": text}}], order
        assert await settled_calls(fastmcp_server, mark, "slow_echo", client=client, workflows=[wid]) == 1


async def test_worker_killed_mid_call_one_tools_call(
    temporal_env: Any, client: Client, ts_http_stateful: Peer, fastmcp_server: Peer
) -> None:
    """kill -9 of the worker process (agent, model activity and child tasks all on it) mid-call, then a new one."""
    got = await killed_mid_call(
        client,
        "tests.fixtures.pai_app",
        PaiAgentWorkflow.run,
        address_of(temporal_env),
        servers(ts_http_stateful, fastmcp_server),
        ts_http_stateful,
        fastmcp_server,
    )
    ended, texts = got["ended"], got["texts"]
    for era in ("ts", "fm"):
        kind, out = ended[era]
        assert kind == "ok", (era, out)
        assert seen(out) == [{"tool": "slow_echo", "kind": "return", "content": {"echo": texts[era]}}], out
    kind, err = ended["sync"]
    assert kind == "failed", err
    outcome = McpTaskError.outcome_of(err)
    assert outcome is not None and outcome.outcome == Outcome.UNKNOWN_OUTCOME, err
    assert got["counts"] == {"ts/slow_echo": 1, "fm/slow_echo": 1, "ts/slow_sync": 1}, got["counts"]
    assert got["elapsed"] < 90, got["elapsed"]


async def test_with_approval_tool_parks_the_agent_until_approved(
    temporal_env: Any, ts_http_stateful: Peer, fastmcp_server: Peer
) -> None:
    with FaultProxy(fastmcp_server.url or "") as proxy:
        proxy.add("tools/call", ResetAfterSend(), times=1)
        lossy = {"url": proxy.url, "tools": {"slow_echo": {"replay": "with_approval"}}}
        client = await connect(
            temporal_env,
            PydanticAIPlugin(),
            McpTasksPlugin(servers=servers(ts_http_stateful, fastmcp_server, lossy=lossy)),
        )
        queue = unique("pai-approve")
        async with Worker(client, task_queue=queue, workflows=[PaiAgentWorkflow]):
            got = await parked_until_approved(
                client, PaiAgentWorkflow.run, address_of(temporal_env), queue, lambda p: p, fastmcp_server, proxy
            )
    assert got["parked"] == {
        "agent_running": "RUNNING",
        "calls_while_parked": 1,
        "attempts": ["initial"],
        "status_phase": "AWAITING_APPROVAL",
    }, got
    assert seen(got["output"]) == [{"tool": "slow_echo", "kind": "return", "content": {"echo": got["text"]}}]
    # the lost call reached the server; the approved replay is the second and last
    assert got["calls"] == 2 and got["attempts"] == ["initial", "replay_unknown_outcome"], got


async def test_reset_agent_reattaches_to_its_child(app: App, fastmcp_server: Peer) -> None:
    got = await reset_reattaches(app.client, PaiAgentWorkflow.run, app.queue, fastmcp_server)
    assert got["same"] and seen(got["output"]) == [
        {"tool": "slow_echo", "kind": "return", "content": {"echo": got["text"]}}
    ], got
    assert got["refused"] == [got["expected_child"]] and got["fetched"] == 1, got
    assert got["calls"] == 1, got


async def test_deprecated_temporal_agent_runs_the_toolset_in_the_workflow(app: App, fastmcp_server: Peer) -> None:
    mark = fastmcp_server.log_mark()
    text = unique("legacy")
    wid, out = await app.run(script("legacy", [("slow_echo", {"seconds": 0.2, "text": text})]))
    assert seen(out) == [{"tool": "slow_echo", "kind": "return", "content": {"echo": text}}]
    desc = await app.client.get_workflow_handle(
        child_id(wid, "legacy", "slow_echo", {"seconds": 0.2, "text": text})
    ).describe()
    assert desc.workflow_type == "McpTaskWorkflow" and desc.parent_id == wid
    assert await settled_calls(fastmcp_server, mark, "slow_echo", client=app.client, workflows=[wid]) == 1
