"""Google's two agent stacks on Temporal, each with our adapter, on a real Temporal dev server and real MCP peers (the
TypeScript SDK's 2025-11-25 runtime and fastmcp's 2026-07-28 extension), each with its own scripted model:

* ``google-adk``: :class:`McpTasksToolset` in an ADK agent (``temporalio-google-adk``), a scripted ``BaseLlm``
  behind ``TemporalModel`` (tests/fixtures/adk_app.py);
* ``google-genai``: :class:`McpTasksClientSession` in Gemini's automatic function calling
  (``temporalio-google-genai``), the integration's ``GeminiTestServer`` answering from each request
  (tests/fixtures/genai_app.py).

Each test of the shared contract runs once per framework; the servers' own request logs count every ``tools/call``.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError
from temporalio.contrib.pydantic import PydanticPayloadConverter
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from mcp_temporal_tasks import McpTaskError, Outcome
from mcp_temporal_tasks.worker.config import ConfigError
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
from tests.peers.harness import Peer, ts_http_peer
from tests.temporal_harness import address_of, listings, unique

AGENT_TIMEOUT_S = 90


@dataclass(frozen=True)
class Framework:
    """One framework's application (tests/fixtures/*_app.py), imported when a test first needs it: collecting this
    module (as ``pytest -m fast`` does) imports neither framework."""

    name: str
    #: The application module (its worker runs as ``python -m MODULE`` in the kill test).
    module: str
    #: How an answer of ``other_outcomes="tell_model"`` reaches the model: ADK's ``{"error": ...}``, or (genai) an
    #: ``isError`` result.
    told: str

    @property
    def app(self) -> Any:
        return importlib.import_module(self.module)

    @property
    def workflow(self) -> Any:
        return self.app.AGENT_WORKFLOW

    def plugins(self, servers_: dict[str, Any]) -> list[Any]:
        """The framework's plugin first, then ours."""
        return list(self.app.plugins(servers_))

    @property
    def own(self) -> str:
        """The script's agent that uses the framework's own MCP integration."""
        return str(self.app.OWN)


ADK = Framework("google-adk", "tests.fixtures.adk_app", told="error")
GENAI = Framework("google-genai", "tests.fixtures.genai_app", told="tool_error")


@pytest.fixture(params=[ADK, GENAI], ids=lambda f: f.name)
def framework(request: pytest.FixtureRequest) -> Framework:
    return request.param


async def connect(temporal_env: Any, plugins_: list[Any]) -> Client:
    return await Client.connect(address_of(temporal_env), namespace=temporal_env.client.namespace, plugins=plugins_)


class App:
    def __init__(self, framework: Framework, client: Client, queue: str) -> None:
        self.framework, self.client, self.queue = framework, client, queue
        #: Every agent workflow this app started: what "no late tools/call" waits on (settled).
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
        """``tool``'s calls at ``peer`` since ``mark``, once this app's workflows are closed with nothing running."""
        return await settled_calls(peer, mark, tool, client=self.client, workflows=self.wids)


async def started(framework: Framework, temporal_env: Any, servers_: dict[str, Any]) -> tuple[Client, str]:
    return await connect(temporal_env, framework.plugins(servers_)), unique(f"{framework.name}-q")


@pytest.fixture
async def app(
    framework: Framework, temporal_env: Any, ts_http_stateful: Peer, fastmcp_server: Peer
) -> AsyncIterator[App]:
    """The framework's plugin first, then ours, on one client; a plain Worker inherits both."""
    client, queue = await started(framework, temporal_env, servers(ts_http_stateful, fastmcp_server))
    async with Worker(client, task_queue=queue, workflows=[framework.workflow]):
        yield App(framework, client, queue)


def echoed(text: str) -> list[dict[str, Any]]:
    """What the model saw of one completed ``slow_echo``: its structured content (both frameworks' shapes reduce to
    it in the scripted models)."""
    return [{"tool": "slow_echo", "kind": "return", "content": {"echo": text}}]


async def test_completed_and_tool_error_reach_the_model(app: App, fastmcp_server: Peer, ts_http_stateful: Peer) -> None:
    fm_mark, ts_mark = fastmcp_server.log_mark(), ts_http_stateful.log_mark()
    text = unique("echo")
    wid, out = await app.run(script("fm", [("slow_echo", {"seconds": 0.3, "text": text})], [("rate_limited", {})]))
    echo, error = seen(out)
    # completed: the CallToolResult (ADK: as a dict, as its McpTool gives it; genai: {"result": CallToolResult})
    assert [echo] == echoed(text), echo
    # tool_error: the isError result, with the server's text (genai: {"error": CallToolResult})
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
    assert [r for r in results if r["tool"] == "slow_echo"] == echoed(text) * 3, results
    quick = [r for r in results if r["tool"] == "quick_sync"]
    assert len(quick) == 2 and all(r["kind"] == "return" for r in quick), results
    # idempotent=false (configuration): three calls by the model (two of them in one response), one tools/call
    assert await app.settled(fastmcp_server, mark, "slow_echo") == 1
    # idempotent=true: called again as asked, under ….2
    assert len(tool_calls(fastmcp_server, mark, "quick_sync")) == 2
    for n in (1, 2):
        desc = await app.client.get_workflow_handle(child_id(wid, "fm", "quick_sync", idem, n=n)).describe()
        assert desc.parent_id == wid


async def test_other_outcome_ends_the_run_with_mcp_task_error(app: App, fastmcp_server: Peer) -> None:
    """ADK lets the tool's McpTaskError end the run; google-genai shows it to the model and goes on, and the
    session's ``raise_for_failures()`` after ``generate_content`` ends the workflow code with it."""
    mark = fastmcp_server.log_mark()
    with pytest.raises(WorkflowFailureError) as failed:
        await app.run(script("fm", [("rpc_error", {})]))
    outcome = McpTaskError.outcome_of(failed.value)
    assert outcome is not None and outcome.outcome == Outcome.FAILED, failed.value
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "McpTaskFailed", cause
    assert len(tool_calls(fastmcp_server, mark, "rpc_error")) == 1
    # the option: the model is told, and the run goes on
    _, out = await app.run(script("fm_tell", [("rpc_error", {})]))
    (told,) = seen(out)
    assert told["kind"] == app.framework.told and "ended failed" in told["content"], told
    assert "may already have run" in told["content"], told


async def test_bad_input_is_one_clear_error(app: App, fastmcp_server: Peer) -> None:
    mark = fastmcp_server.log_mark()
    # arguments that fail the input schema: the model is told to fix them; no tools/call
    _, out = await app.run(script("fm", [("slow_echo", {"seconds": "soon"})]))
    (bad,) = seen(out)
    assert bad["kind"] == "error" and "input schema" in bad["content"] and "seconds" in bad["content"], bad
    # a tool the server does not list, named in tools= (ADK alone would run the agent without the toolset)
    with pytest.raises(WorkflowFailureError) as err:
        await app.run(script("filtered", [("slow_echo", {"seconds": 0.1})]))
    assert isinstance(err.value.cause, ApplicationError) and err.value.cause.type == "McpToolNotListed"
    assert "no_such_tool" in str(err.value.cause), err.value.cause
    # an unknown server name
    with pytest.raises(WorkflowFailureError) as err:
        await app.run(script("nowhere", [("slow_echo", {"seconds": 0.1})]))
    assert "nowhere" in str(err.value.cause) and "UnknownServer" in repr(err.value.cause), err.value.cause
    assert await app.settled(fastmcp_server, mark, "slow_echo") == 0


async def test_plugins_compose_in_either_order(
    framework: Framework, temporal_env: Any, ts_http_stateful: Peer, fastmcp_server: Peer
) -> None:
    """Both orders on ``Client.connect``: each of the two framework plugins sets a pydantic converter only over the
    default one, as ours does, and keeps one already there. Ours given to a worker of a client without one is
    refused with one message."""
    for order in ("framework-first", "ours-first"):
        theirs, ours = framework.plugins(servers(ts_http_stateful, fastmcp_server))
        client = await connect(temporal_env, [theirs, ours] if order == "framework-first" else [ours, theirs])
        assert issubclass(client.data_converter.payload_converter_class, PydanticPayloadConverter), order
        queue = unique(f"{framework.name}-order")
        mark = fastmcp_server.log_mark()
        text = unique(order)
        composed = App(framework, client, queue)
        async with Worker(client, task_queue=queue, workflows=[framework.workflow]):
            _, out = await composed.run(script("fm", [("slow_echo", {"seconds": 0.2, "text": text})]))
            assert await composed.settled(fastmcp_server, mark, "slow_echo") == 1
        assert seen(out) == echoed(text), order
    plain = await connect(temporal_env, [])
    with pytest.raises(ConfigError) as refused:
        Worker(
            plain,
            task_queue=unique(f"{framework.name}-refused"),
            workflows=[framework.workflow],
            plugins=framework.plugins(servers(ts_http_stateful, fastmcp_server)),
        )
    assert "McpTasksPlugin" in str(refused.value) and "pydantic payload converter" in str(refused.value)


async def test_worker_killed_mid_call_one_tools_call(
    framework: Framework, temporal_env: Any, peer_logs: Path, ts_http_stateful: Peer, fastmcp_server: Peer
) -> None:
    """kill -9 of the worker process (agent, model activity and child tasks all on it) mid-call, then a new one; in
    the same process and kill, the framework's own MCP integration calls the same tools on a server of its own."""
    client = await connect(temporal_env, framework.plugins(servers(ts_http_stateful, fastmcp_server)))
    with ts_http_peer(peer_logs, name=f"own-{framework.name}") as own_peer:
        got = await killed_mid_call(
            client,
            framework.module,
            framework.workflow.run,
            address_of(temporal_env),
            servers(ts_http_stateful, fastmcp_server),
            ts_http_stateful,
            fastmcp_server,
            own=(framework.own, own_peer),
        )
    ended, texts = got["ended"], got["texts"]
    print(
        f"{framework.name}: tools/call counted by the servers, ours {got['counts']}, its own MCP integration "
        f"{got['own_counts']}; sync tool: {ended['sync'][0]}; {got['elapsed']:.1f} s"
    )
    for era in ("ts", "fm"):
        kind, out = ended[era]
        assert kind == "ok", (era, out)
        assert seen(out) == echoed(texts[era]), out
    kind, err = ended["sync"]
    assert kind == "failed", err
    outcome = McpTaskError.outcome_of(err)
    assert outcome is not None and outcome.outcome == Outcome.UNKNOWN_OUTCOME, err
    assert got["counts"] == {"ts/slow_echo": 1, "fm/slow_echo": 1, "ts/slow_sync": 1}, got["counts"]
    assert got["elapsed"] < 90, got["elapsed"]
    # the framework's own MCP integration (an activity per call, retried): both tools sent twice; the runs complete
    assert got["own_counts"] == {"own/slow_echo": 2, "own/slow_sync": 2}, got["own_counts"]
    assert ended["own"][0] == "ok" and texts["own"] in ended["own"][1], ended["own"]
    assert ended["own_sync"][0] == "ok", ended["own_sync"]


async def test_with_approval_tool_parks_the_agent_until_approved(
    framework: Framework, temporal_env: Any, ts_http_stateful: Peer, fastmcp_server: Peer
) -> None:
    with FaultProxy(fastmcp_server.url or "") as proxy:
        proxy.add("tools/call", ResetAfterSend(), times=1)
        lossy = {"url": proxy.url, "tools": {"slow_echo": {"replay": "with_approval"}}}
        client, queue = await started(framework, temporal_env, servers(ts_http_stateful, fastmcp_server, lossy=lossy))
        async with Worker(client, task_queue=queue, workflows=[framework.workflow]):
            got = await parked_until_approved(
                client, framework.workflow.run, address_of(temporal_env), queue, lambda p: p, fastmcp_server, proxy
            )
    assert got["parked"] == {
        "agent_running": "RUNNING",
        "calls_while_parked": 1,
        "attempts": ["initial"],
        "status_phase": "AWAITING_APPROVAL",
    }, got
    assert seen(got["output"]) == echoed(got["text"])
    # the lost call reached the server; the approved replay is the second and last
    assert got["calls"] == 2 and got["attempts"] == ["initial", "replay_unknown_outcome"], got


async def test_reset_agent_reattaches_to_its_child(app: App, fastmcp_server: Peer) -> None:
    got = await reset_reattaches(app.client, app.framework.workflow.run, app.queue, fastmcp_server)
    assert got["same"] and seen(got["output"]) == echoed(got["text"]), got
    assert got["refused"] == [got["expected_child"]] and got["fetched"] == 1, got
    assert got["calls"] == 1, got


# --- what each framework does its own way ----------------------------------------------------------------------


@pytest.fixture
async def adk(temporal_env: Any, ts_http_stateful: Peer, fastmcp_server: Peer) -> AsyncIterator[App]:
    client, queue = await started(ADK, temporal_env, servers(ts_http_stateful, fastmcp_server))
    async with Worker(client, task_queue=queue, workflows=[ADK.workflow]):
        yield App(ADK, client, queue)


@pytest.fixture
async def genai(temporal_env: Any, ts_http_stateful: Peer, fastmcp_server: Peer) -> AsyncIterator[App]:
    client, queue = await started(GENAI, temporal_env, servers(ts_http_stateful, fastmcp_server))
    async with Worker(client, task_queue=queue, workflows=[GENAI.workflow]):
        yield App(GENAI, client, queue)


async def test_adk_one_toolset_two_invocations_two_agent_runs(adk: App, fastmcp_server: Peer) -> None:
    """ADK keeps one toolset object across ``Runner.run_async`` calls: each invocation is its own agent run (its own
    tool list and scope of child ids), as two ``agent.run`` calls are for Pydantic AI."""
    mark = fastmcp_server.log_mark()
    args = {"seconds": 0.2, "text": unique("twice-run")}
    wid, out = await adk.run(script("fm_twice", [("slow_echo", args)]))
    assert seen(out) == echoed(args["text"]), out
    for scope in (1, 2):
        desc = await adk.client.get_workflow_handle(child_id(wid, "fm", "slow_echo", args, scope=scope)).describe()
        assert desc.parent_id == wid
    assert await adk.settled(fastmcp_server, mark, "slow_echo") == 2
    assert listings(fastmcp_server, mark) == 2


async def test_genai_one_session_two_generate_content_calls(genai: App, fastmcp_server: Peer) -> None:
    """google-genai deep-copies the config on every call: the copy is the session itself, so a session kept across
    ``generate_content`` calls lists its tools once and is one scope: the same call again re-attaches."""
    mark = fastmcp_server.log_mark()
    args = {"seconds": 0.2, "text": unique("twice-call")}
    wid, out = await genai.run(script("fm_twice", [("slow_echo", args)]))
    assert seen(out) == echoed(args["text"]), out
    desc = await genai.client.get_workflow_handle(child_id(wid, "fm", "slow_echo", args)).describe()
    assert desc.parent_id == wid
    assert await genai.settled(fastmcp_server, mark, "slow_echo") == 1
    assert listings(fastmcp_server, mark) == 1


async def test_genai_schema_it_cannot_declare_is_one_clear_error(genai: App, fastmcp_server: Peer) -> None:
    """google-genai's own conversion of an MCP schema it cannot handle raises inside the workflow, a workflow task
    that fails again and again; the session names the tool in one error instead, before any model call."""
    mark = fastmcp_server.log_mark()
    with pytest.raises(WorkflowFailureError) as err:
        await genai.run(script("badschema", [("slow_echo", {"seconds": 0.1})]))
    assert isinstance(err.value.cause, ApplicationError) and err.value.cause.type == "McpToolSchemaUnsupported"
    assert "'slow_echo'" in str(err.value.cause) and "'fm'" in str(err.value.cause), err.value.cause
    assert await genai.settled(fastmcp_server, mark, "slow_echo") == 0


async def test_adk_plugin_from_the_sdk_contrib_path(
    temporal_env: Any, ts_http_stateful: Peer, fastmcp_server: Peer
) -> None:
    """An application that still builds ``GoogleAdkPlugin`` from temporalio's ``contrib.google_adk_agents`` (temporalio
    1.35 forwards it to ``temporalio-google-adk``) runs ``McpTasksToolset`` as one on ``temporalio.google_adk``."""
    from temporalio.contrib.google_adk_agents import GoogleAdkPlugin

    from mcp_temporal_tasks import McpTasksPlugin

    client = await connect(
        temporal_env, [GoogleAdkPlugin(), McpTasksPlugin(servers=servers(ts_http_stateful, fastmcp_server))]
    )
    queue = unique("adk-contrib")
    mark = fastmcp_server.log_mark()
    text = unique("contrib")
    async with Worker(client, task_queue=queue, workflows=[ADK.workflow]):
        old_path = App(ADK, client, queue)
        _, out = await old_path.run(script("fm", [("slow_echo", {"seconds": 0.2, "text": text})]))
        assert await old_path.settled(fastmcp_server, mark, "slow_echo") == 1
    assert seen(out) == echoed(text)
