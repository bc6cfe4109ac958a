"""``mcp_tasks_server`` in an OpenAI Agents SDK agent on Temporal (``temporalio-openai-agents``), on a real
Temporal dev server and real MCP peers, with a scripted model through ``TestModelProvider``
(tests/fixtures/oai_app.py). The servers' own request logs count every ``tools/call``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError
from temporalio.contrib.pydantic import PydanticPayloadConverter
from temporalio.openai_agents import OpenAIAgentsPlugin, OpenAIPayloadConverter
from temporalio.openai_agents.testing import TestModelProvider
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
from tests.fixtures.oai_app import OaiAgentWorkflow, ScriptedModel, plugins
from tests.peers.harness import Peer
from tests.temporal_harness import address_of, unique

AGENT_TIMEOUT_S = 90


async def connect(temporal_env: Any, plugins_: list[Any]) -> Client:
    return await Client.connect(address_of(temporal_env), namespace=temporal_env.client.namespace, plugins=plugins_)


class App:
    def __init__(self, client: Client, queue: str) -> None:
        self.client, self.queue = client, queue

    async def run(self, prompt: str, *, wid: str | None = None) -> tuple[str, str]:
        wid = wid or unique("oai")
        out = await asyncio.wait_for(
            self.client.execute_workflow(OaiAgentWorkflow.run, prompt, id=wid, task_queue=self.queue), AGENT_TIMEOUT_S
        )
        return wid, out


@pytest.fixture
async def app(temporal_env: Any, ts_http_stateful: Peer, fastmcp_server: Peer) -> AsyncIterator[App]:
    """``OpenAIAgentsPlugin`` first, then ours, on one client; a plain Worker inherits both."""
    client = await connect(temporal_env, plugins(servers(ts_http_stateful, fastmcp_server)))
    queue = unique("oai-q")
    async with Worker(client, task_queue=queue, workflows=[OaiAgentWorkflow]):
        yield App(client, queue)


async def test_completed_and_tool_error_reach_the_model(app: App, fastmcp_server: Peer, ts_http_stateful: Peer) -> None:
    fm_mark, ts_mark = fastmcp_server.log_mark(), ts_http_stateful.log_mark()
    text = unique("oai-echo")
    wid, out = await app.run(script("fm", [("slow_echo", {"seconds": 0.3, "text": text})], [("rate_limited", {})]))
    echo, error = seen(out)
    # completed: the tool's content, as the SDK hands an MCP result to the model
    assert echo == {"tool": "slow_echo", "kind": "return", "content": text}, echo
    # tool_error: the isError result's text is the tool's output, as with any SDK MCP server
    assert error == {
        "tool": "rate_limited",
        "kind": "return",
        "content": "HTTP 429 Too Many Requests: rate limit exceeded; retry-after=30",
    }, error
    desc = await app.client.get_workflow_handle(
        child_id(wid, "fm", "slow_echo", {"seconds": 0.3, "text": text})
    ).describe()
    assert desc.workflow_type == "McpTaskWorkflow" and desc.parent_id == wid
    assert await settled_calls(fastmcp_server, fm_mark, "slow_echo", client=app.client, workflows=[wid]) == 1
    assert len(tool_calls(fastmcp_server, fm_mark, "rate_limited")) == 1
    wid2, out2 = await app.run(script("ts", [("slow_echo", {"seconds": 0.3, "text": text})]))
    assert seen(out2) == [{"tool": "slow_echo", "kind": "return", "content": text}]
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
    assert [r["content"] for r in results if r["tool"] == "slow_echo"] == [text] * 3, results
    assert len([r for r in results if r["tool"] == "quick_sync"]) == 2, results
    assert await settled_calls(fastmcp_server, mark, "slow_echo", client=app.client, workflows=[wid]) == 1
    assert len(tool_calls(fastmcp_server, mark, "quick_sync")) == 2
    for n in (1, 2):
        desc = await app.client.get_workflow_handle(child_id(wid, "fm", "quick_sync", idem, n=n)).describe()
        assert desc.parent_id == wid


async def test_other_outcome_ends_the_run_with_mcp_task_error(app: App, fastmcp_server: Peer) -> None:
    mark = fastmcp_server.log_mark()
    with pytest.raises(WorkflowFailureError) as failed:
        await app.run(script("fm", [("rpc_error", {})]))
    outcome = McpTaskError.outcome_of(failed.value)
    assert outcome is not None and outcome.outcome == Outcome.FAILED, failed.value
    assert len(tool_calls(fastmcp_server, mark, "rpc_error")) == 1
    _, out = await app.run(script("fm_tell", [("rpc_error", {})]))
    (told,) = seen(out)
    assert "ended failed" in told["content"] and "may already have run" in told["content"], told


async def test_bad_input_is_one_clear_error(app: App, fastmcp_server: Peer) -> None:
    mark = fastmcp_server.log_mark()
    wids = [unique("oai-bad") for _ in range(3)]
    _, out = await app.run(script("fm", [("slow_echo", {"seconds": "soon"})]), wid=wids[0])
    (bad,) = seen(out)
    assert "input schema" in bad["content"] and "seconds" in bad["content"], bad
    with pytest.raises(WorkflowFailureError) as err:
        await app.run(script("filtered", [("slow_echo", {"seconds": 0.1})]), wid=wids[1])
    assert "no_such_tool" in repr(err.value.cause) + str(err.value.cause.__cause__), err.value.cause
    with pytest.raises(WorkflowFailureError) as err:
        await app.run(script("nowhere", [("slow_echo", {"seconds": 0.1})]), wid=wids[2])
    assert "nowhere" in repr(err.value.cause) + str(err.value.cause.__cause__), err.value.cause
    assert await settled_calls(fastmcp_server, mark, "slow_echo", client=app.client, workflows=wids) == 0


async def test_plugins_compose_in_either_order(temporal_env: Any, ts_http_stateful: Peer, fastmcp_server: Peer) -> None:
    for order in ("openai-first", "ours-first"):
        oai = OpenAIAgentsPlugin(model_provider=TestModelProvider(ScriptedModel()))
        ours = McpTasksPlugin(servers=servers(ts_http_stateful, fastmcp_server))
        client = await connect(temporal_env, [oai, ours] if order == "openai-first" else [ours, oai])
        converter = client.data_converter.payload_converter_class
        assert converter is OpenAIPayloadConverter and not issubclass(converter, PydanticPayloadConverter), order
        queue = unique("oai-order")
        mark = fastmcp_server.log_mark()
        text = unique(order)
        async with Worker(client, task_queue=queue, workflows=[OaiAgentWorkflow]):
            wid, out = await App(client, queue).run(script("fm", [("slow_echo", {"seconds": 0.2, "text": text})]))
        assert seen(out) == [{"tool": "slow_echo", "kind": "return", "content": text}], order
        assert await settled_calls(fastmcp_server, mark, "slow_echo", client=client, workflows=[wid]) == 1


async def test_worker_killed_mid_call_one_tools_call(
    temporal_env: Any, ts_http_stateful: Peer, fastmcp_server: Peer
) -> None:
    """kill -9 of the worker process (agent, model activity and child tasks all on it) mid-call, then a new one."""
    client = await connect(temporal_env, plugins(servers(ts_http_stateful, fastmcp_server)))
    got = await killed_mid_call(
        client,
        "tests.fixtures.oai_app",
        OaiAgentWorkflow.run,
        address_of(temporal_env),
        servers(ts_http_stateful, fastmcp_server),
        ts_http_stateful,
        fastmcp_server,
    )
    ended, texts = got["ended"], got["texts"]
    for era in ("ts", "fm"):
        kind, out = ended[era]
        assert kind == "ok", (era, out)
        assert seen(out) == [{"tool": "slow_echo", "kind": "return", "content": texts[era]}], out
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
        client = await connect(temporal_env, plugins(servers(ts_http_stateful, fastmcp_server, lossy=lossy)))
        queue = unique("oai-approve")
        async with Worker(client, task_queue=queue, workflows=[OaiAgentWorkflow]):
            got = await parked_until_approved(
                client, OaiAgentWorkflow.run, address_of(temporal_env), queue, lambda p: p, fastmcp_server, proxy
            )
    assert got["parked"] == {
        "agent_running": "RUNNING",
        "calls_while_parked": 1,
        "attempts": ["initial"],
        "status_phase": "AWAITING_APPROVAL",
    }, got
    assert seen(got["output"]) == [{"tool": "slow_echo", "kind": "return", "content": got["text"]}]
    assert got["calls"] == 2 and got["attempts"] == ["initial", "replay_unknown_outcome"], got


async def test_reset_agent_reattaches_to_its_child(app: App, fastmcp_server: Peer) -> None:
    got = await reset_reattaches(app.client, OaiAgentWorkflow.run, app.queue, fastmcp_server)
    assert got["same"] and seen(got["output"]) == [{"tool": "slow_echo", "kind": "return", "content": got["text"]}], got
    assert got["refused"] == [got["expected_child"]] and got["fetched"] == 1, got
    assert got["calls"] == 1, got
