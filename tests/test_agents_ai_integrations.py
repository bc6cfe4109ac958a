"""The three frameworks of Temporal's ai-integrations packages with this project's tools, on a real Temporal dev server
and real MCP peers (the TypeScript SDK's 2025-11-25 runtime and fastmcp's 2026-07-28 extension), each with a scripted
model (no LLM, no network):

* ``langgraph``: a ``StateGraph`` on ``temporalio-langgraph`` (model node an activity, ``ToolNode`` in the workflow),
  :class:`McpTasksTools`, tests/fixtures/langgraph_app.py;
* ``deepagents``: ``create_deep_agent`` on ``temporalio-deepagents`` (the model through its ``TemporalModel``
  activity), the same tools, tests/fixtures/deepagents_app.py (both with tests/fixtures/langchain_scripted.py);
* ``strands``: a ``TemporalAgent`` on ``temporalio-strands-agents`` with :class:`McpTasksToolProvider`,
  tests/fixtures/strands_app.py (with tests/fixtures/strands_scripted.py).

What each framework's model sees is its own shape (a LangChain ``ToolMessage``, a Strands ``ToolResult``), and each
fixture app reports it in one form (``tests.agents_common.seen``), so one test body holds for all three. The
frameworks' own MCP paths (``langchain-mcp-adapters``; ``TemporalMCPClient`` over Strands' ``MCPClient``; both need
``mcp<2``) run from the peer venv of tests/peers/agents_own in the kill test. The servers' own request logs count every
``tools/call``.
"""

from __future__ import annotations

import asyncio
import importlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from mcp_temporal_tasks import McpTaskError, Outcome
from tests.agents_common import child_id, input_relayed, killed_once, seen, servers, settled_calls, tool_calls
from tests.faults.proxy import FaultProxy, ResetAfterSend
from tests.fixtures.agent_scripts import script
from tests.peers.harness import Peer, ts_http_peer
from tests.temporal_harness import address_of, unique

AGENT_TIMEOUT_S = 90


@dataclass(frozen=True)
class Framework:
    name: str
    module: str
    #: tests/peers/agents_own/MODULE: the framework's own MCP path, run from that venv, and its workflow type.
    own_module: str
    own_type: str

    @property
    def app(self) -> Any:
        return importlib.import_module(self.module)

    @property
    def workflow(self) -> Any:
        return self.app.AGENT_WORKFLOW

    def plugins(self, servers_: dict[str, Any]) -> list[Any]:
        return list(self.app.plugins(servers_))


LANGGRAPH = Framework(
    "langgraph", "tests.fixtures.langgraph_app", "tests.peers.agents_own.langgraph_own", "LangGraphOwnMcpWorkflow"
)
DEEPAGENTS = Framework(
    "deepagents", "tests.fixtures.deepagents_app", "tests.peers.agents_own.deepagents_own", "DeepAgentOwnMcpWorkflow"
)
STRANDS = Framework(
    "strands", "tests.fixtures.strands_app", "tests.peers.agents_own.strands_own", "StrandsOwnMcpWorkflow"
)


@pytest.fixture(params=[LANGGRAPH, DEEPAGENTS, STRANDS], ids=lambda f: f.name)
def framework(request: pytest.FixtureRequest) -> Framework:
    return request.param


class App:
    def __init__(self, framework: Framework, client: Client, queue: str) -> None:
        self.framework, self.client, self.queue = framework, client, queue
        self.wids: list[str] = []

    async def run(self, prompt: str, *, wid: str | None = None) -> tuple[str, str]:
        wid = wid or unique(self.framework.name)
        self.wids.append(wid)
        out = await asyncio.wait_for(
            self.client.execute_workflow(self.framework.workflow.run, prompt, id=wid, task_queue=self.queue),
            AGENT_TIMEOUT_S,
        )
        return wid, out

    async def settled(self, peer: Peer, mark: int, tool: str) -> int:
        return await settled_calls(peer, mark, tool, client=self.client, workflows=self.wids)


async def connect(temporal_env: Any, plugins_: list[Any]) -> Client:
    return await Client.connect(address_of(temporal_env), namespace=temporal_env.client.namespace, plugins=plugins_)


@pytest.fixture
async def app(
    framework: Framework, temporal_env: Any, ts_http_stateful: Peer, fastmcp_server: Peer
) -> AsyncIterator[App]:
    client = await connect(temporal_env, framework.plugins(servers(ts_http_stateful, fastmcp_server)))
    queue = unique(f"{framework.name}-q")
    async with Worker(client, task_queue=queue, workflows=[framework.workflow]):
        yield App(framework, client, queue)


def echoed(text: str) -> list[dict[str, Any]]:
    return [{"tool": "slow_echo", "kind": "return", "content": {"echo": text}}]


async def test_completed_and_tool_error_reach_the_model(app: App, fastmcp_server: Peer, ts_http_stateful: Peer) -> None:
    fm_mark, ts_mark = fastmcp_server.log_mark(), ts_http_stateful.log_mark()
    text = unique("echo")
    wid, out = await app.run(script("fm", [("slow_echo", {"seconds": 0.3, "text": text})], [("rate_limited", {})]))
    echo, error = seen(out)
    assert [echo] == echoed(text), echo
    # tool_error: LangChain's ToolException (a ToolMessage with status="error"), Strands' error ToolResult: the server's
    # text either way
    assert error == {
        "tool": "rate_limited",
        "kind": "tool_error",
        "content": "HTTP 429 Too Many Requests: rate limit exceeded; retry-after=30",
    }, error
    desc = await app.client.get_workflow_handle(
        child_id(wid, "fm", "slow_echo", {"seconds": 0.3, "text": text})
    ).describe()
    assert desc.workflow_type == "McpTaskWorkflow" and desc.parent_id == wid
    assert await app.settled(fastmcp_server, fm_mark, "slow_echo") == 1
    assert len(tool_calls(fastmcp_server, fm_mark, "rate_limited")) == 1
    _, out2 = await app.run(script("ts", [("slow_echo", {"seconds": 0.3, "text": text})]))
    assert seen(out2) == echoed(text)
    assert await app.settled(ts_http_stateful, ts_mark, "slow_echo") == 1


async def test_other_outcome_ends_the_run_with_mcp_task_error(app: App, fastmcp_server: Peer) -> None:
    mark = fastmcp_server.log_mark()
    with pytest.raises(WorkflowFailureError) as failed:
        await app.run(script("fm", [("rpc_error", {})]))
    outcome = McpTaskError.outcome_of(failed.value)
    assert outcome is not None and outcome.outcome == Outcome.FAILED, failed.value
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "McpTaskFailed", cause
    assert len(tool_calls(fastmcp_server, mark, "rpc_error")) == 1
    _, out = await app.run(script("fm_tell", [("rpc_error", {})]))
    (told,) = seen(out)
    assert told["kind"] == "tool_error" and "ended failed" in told["content"], told
    assert "may already have run" in told["content"], told


async def test_worker_killed_mid_call_one_tools_call(
    framework: Framework, temporal_env: Any, peer_logs: Path, ts_http_stateful: Peer, fastmcp_server: Peer
) -> None:
    """kill -9 of the worker process (the graph, its model activity and the child task all on it) 3 s into an 18 s
    task tool, then a new one; in the same moment the framework's own MCP path (``langchain-mcp-adapters``, from the
    peer venv) on a server of its own, killed and replaced the same way."""
    servers_ = servers(ts_http_stateful, fastmcp_server)
    client = await connect(temporal_env, framework.plugins(servers_))
    with ts_http_peer(peer_logs, name=f"own-{framework.name}") as own_peer:
        got = await killed_once(
            client,
            framework.module,
            framework.workflow.run,
            address_of(temporal_env),
            servers_,
            ts_http_stateful,
            own=(framework.own_module, framework.own_type, own_peer),
        )
    ended, texts = got["ended"], got["texts"]
    kind, out = ended["ours"]
    assert kind == "ok", out
    assert seen(out) == echoed(texts["ours"]), out
    assert got["counts"]["ours"] == 1, got["counts"]
    # the framework's own path: the activity that sent it is retried once its start-to-close runs out: sent again
    assert got["counts"]["own"] == 2, got["counts"]
    assert ended["own"][0] == "ok" and texts["own"] in ended["own"][1], ended["own"]


async def test_refused_replay_ends_the_run_with_mcp_task_error(
    framework: Framework, temporal_env: Any, ts_http_stateful: Peer, fastmcp_server: Peer
) -> None:
    """A ``tools/call`` whose reply is lost (the connection reset after the server got it) of a tool that is not
    idempotent: the replay is refused, the child ends ``unknown_outcome``, and the workflow fails with ``McpTaskError``:
    LangGraph and Deep Agents because the tool raises it out of the ``ToolNode`` (not a ``ToolException``); Strands,
    which turns any tool exception into an error result, because the model sees an error result saying the tool may
    already have run, the run stops after the current tools (``agent.cancel``) and ``raise_for_failures()`` raises."""
    mark = fastmcp_server.log_mark()
    args = {"seconds": 0.3, "text": unique("lost")}
    with FaultProxy(fastmcp_server.url or "") as proxy:
        proxy.add("tools/call", ResetAfterSend(), times=1)
        lossy = {"url": proxy.url, "tools": {"slow_echo": {"idempotent": False}}}
        client = await connect(temporal_env, framework.plugins(servers(ts_http_stateful, fastmcp_server, lossy=lossy)))
        queue = unique(f"{framework.name}-lossy")
        async with Worker(client, task_queue=queue, workflows=[framework.workflow]):
            lost = App(framework, client, queue)
            with pytest.raises(WorkflowFailureError) as failed:
                await lost.run(script("lossy", [("slow_echo", args)]))
            calls = await lost.settled(fastmcp_server, mark, "slow_echo")
    outcome = McpTaskError.outcome_of(failed.value)
    assert outcome is not None and outcome.outcome == Outcome.UNKNOWN_OUTCOME, failed.value
    assert [a.reason for a in outcome.operation_attempts] == ["initial"], outcome.operation_attempts
    assert isinstance(failed.value.cause, ApplicationError), failed.value.cause
    assert calls == 1


async def test_a_question_mid_task_is_answered_on_the_child(app: App, fastmcp_server: Peer) -> None:
    """Human input as for every adapter: the child asks, anyone answers it (``mcp-tasks answer``), the agent waits."""
    got = await input_relayed(app.client, app.framework.workflow.run, app.queue, fastmcp_server)
    assert got["question"] == "Approve payment of 10 EUR?" and got["agent_while_asking"] == "RUNNING", got
    (answered,) = seen(got["output"])
    assert answered["tool"] == "ask_user" and answered["kind"] == "return", answered
    assert "approved account=acct-7" in json.dumps(answered["content"]), answered
    assert got["calls"] == 1, got
