"""Servers of the protocol versions before tasks (issue 37): a real one, the official Python SDK ``mcp==1.12.4``
FastMCP (protocol 2025-06-18, ``tests/peers/py0618``), through the wire layer, ``mcp-tasks run``/``status``, a
Pydantic AI toolset and a worker SIGKILLed mid-call; and a scripted server answering a protocol version nobody knows.

The era is found as revision 2026-07-28 says (``activities/wire/handshake.py``): one ``server/discover`` probe, which
such a server refuses, then ``initialize``; after that it is asked nothing its version does not have (its own log marks
every method it got as known to 2025-06-18 or not: the probe is the one unknown method, once per session opened).
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.durable_exec.temporal import PydanticAIPlugin
from temporalio.client import Client
from temporalio.worker import Worker

from mcp_temporal_tasks import McpTasksPlugin
from mcp_temporal_tasks.activities.wire import LEGACY, Endpoint, UnknownProtocolVersion, WireSession
from mcp_temporal_tasks.workflows.client import outcome_of, start_mcp_task
from mcp_temporal_tasks.workflows.records import McpTaskOutcome, McpTaskRequest, Outcome
from tests.agents_common import seen
from tests.fixtures.agent_scripts import script
from tests.fixtures.pai_app import PaiAgentWorkflow
from tests.peers.harness import Peer, wait_until
from tests.scripted_mcp import scripted_mcp
from tests.temporal_harness import (
    FAST,
    address_of,
    cli,
    in_process_worker,
    one_json,
    settled_calls,
    tool_calls,
    unique,
    worker_process,
    write_config,
)

OLD = "2025-06-18"


def unknown_methods(peer: Peer, mark: int) -> list[str]:
    """The methods unknown to 2025-06-18 the server got, besides the handshake's probe: each ``server/discover``
    must be followed at once by the ``initialize`` of the same session opening."""
    lines = peer.log_since(mark)
    methods = [line["method"] for line in lines]
    for i, method in enumerate(methods):
        if method == "server/discover":
            assert methods[i + 1 : i + 2] == ["initialize"], methods
    return [line["method"] for line in lines if not line["known"] and line["method"] != "server/discover"]


async def test_wire_plain_tool_on_2025_06_18(py0618_http: Peer) -> None:
    mark = py0618_http.log_mark()
    client = await WireSession.connect(py0618_http.endpoint)
    try:
        assert (client.era, client.protocol_version, client.tasks_offered) == (LEGACY, OLD, False)
        assert client.session_ref().protocol_version == OLD
        tools = await client.list_tools()
        assert tools["slow_echo"].task_support is None
        started = await client.start("slow_echo", {"seconds": 0.05, "text": "old"})
        assert started.task is None and started.task_requested is False
        assert started.result is not None and started.result["structuredContent"] == {"echo": "old"}
    finally:
        await client.aclose(terminate=True)
    methods = [line["method"] for line in py0618_http.log_since(mark)]
    # The probe (refused), initialize (asking for 2025-11-25; the server chose 2025-06-18), then only what 2025-06-18
    # has. The server checks MCP-Protocol-Version on every later request: they carried the version it chose.
    assert methods[:2] == ["server/discover", "initialize"], methods
    assert py0618_http.log_since(mark)[1]["protocolVersion"] == LEGACY
    assert methods.count("server/discover") == 1 and unknown_methods(py0618_http, mark) == [], methods
    assert methods.count("tools/call") == 1


async def test_run_and_status_on_2025_06_18(py0618_http: Peer, temporal_env: Any, queue: str) -> None:
    mark = py0618_http.log_mark()
    address = address_of(temporal_env)
    wid = unique("old-run")
    rc, out, err = await cli(
        "run",
        "slow_echo",
        "--url",
        py0618_http.url or "",
        "--args",
        '{"seconds": 0.2, "text": "from an older server"}',
        "--id",
        wid,
        "--json",
        "--task-queue",
        queue,
        "--address",
        address,
    )
    assert rc == 0, err[-2000:]
    outcome = McpTaskOutcome.model_validate(one_json(out))
    assert outcome.outcome == Outcome.COMPLETED
    assert outcome.result is not None and outcome.result["structuredContent"] == {"echo": "from an older server"}
    assert (outcome.era, outcome.protocol_version, outcome.ledger.protocol_version) == (LEGACY, OLD, OLD)
    rc, out, _ = await cli("status", wid, "--address", address)
    assert rc == 0 and f"protocol {OLD} (initialize handshake, no tasks in this version)" in out, out
    rc, out, _ = await cli("result", wid, "--address", address)
    assert f"protocol {OLD}" in out, out
    assert len(tool_calls(py0618_http, mark, "slow_echo")) == 1
    assert unknown_methods(py0618_http, mark) == []


async def test_pydantic_ai_toolset_on_2025_06_18(py0618_http: Peer, temporal_env: Any) -> None:
    mark = py0618_http.log_mark()
    client = await Client.connect(
        address_of(temporal_env),
        namespace=temporal_env.client.namespace,
        plugins=[PydanticAIPlugin(), McpTasksPlugin(servers={"old": {"url": py0618_http.url}})],
    )
    queue = unique("pai-old")
    text = unique("pai-old-echo")
    async with Worker(client, task_queue=queue, workflows=[PaiAgentWorkflow]):
        out = await asyncio.wait_for(
            client.execute_workflow(
                PaiAgentWorkflow.run,
                script("old", [("slow_echo", {"seconds": 0.1, "text": text})]),
                id=unique("pai-old"),
                task_queue=queue,
            ),
            90,
        )
    [echo] = seen(out)
    assert echo == {"tool": "slow_echo", "kind": "return", "content": {"echo": text}}, echo
    assert len(tool_calls(py0618_http, mark, "slow_echo")) == 1
    assert unknown_methods(py0618_http, mark) == []


async def test_worker_killed_mid_call_on_2025_06_18(py0618_http: Peer, temporal_env: Any, tmp_path: Path) -> None:
    """A long synchronous call on a server without tasks: the worker dies after sending it; the next worker
    must not send it again (replay never): unknown_outcome, exactly one tools/call at the server."""
    cfg = write_config(tmp_path / "w.toml", {"old": {"url": py0618_http.url}})
    queue = unique("kill-old")
    address = address_of(temporal_env)
    mark = py0618_http.log_mark()
    with worker_process(address, queue, cfg) as first:
        handle = await start_mcp_task(
            temporal_env.client,
            McpTaskRequest(
                server="old", tool="slow_echo", arguments={"seconds": 30, "text": "never twice"}, timeouts=FAST
            ),
            workflow_id=unique("kill-old"),
            task_queue=queue,
        )
        await asyncio.to_thread(wait_until, lambda: tool_calls(py0618_http, mark, "slow_echo"), timeout_s=20)
        first.kill()
    with worker_process(address, queue, cfg):
        out = await asyncio.wait_for(outcome_of(handle), 60)
    assert out.outcome == Outcome.UNKNOWN_OUTCOME, out.reason
    assert [a.ended for a in out.operation_attempts] == ["unknown_outcome"]
    assert (
        await settled_calls(
            py0618_http, mark, "slow_echo", client=temporal_env.client, workflows=[handle.id], workers_stopped=True
        )
        == 1
    )


@pytest.mark.parametrize("answered", ["2099-01-01", 20250618, "x" * 100_000])
async def test_unknown_protocol_version_is_one_typed_error(answered: Any) -> None:
    with scripted_mcp() as server:
        server.initialize_version = answered
        started = time.monotonic()
        with pytest.raises(UnknownProtocolVersion) as info:
            await WireSession.connect(Endpoint(url=server.url))
        assert time.monotonic() - started < 5
        assert "protocol version" in info.value.message and "this client does not speak" in info.value.message
        assert len(info.value.message) < 400  # a hostile value is not carried whole
        # Nothing after the answer but ending the session: no tools/list, no notifications/initialized, no call.
        assert server.asked == ["server/discover", "initialize"] and server.calls == 0


async def test_unknown_protocol_version_ends_the_task_bounded(client: Client, queue: str) -> None:
    with scripted_mcp() as server:
        server.initialize_version = "2099-01-01"
        async with in_process_worker(client, task_queue=queue):
            handle = await start_mcp_task(
                client,
                McpTaskRequest(server=Endpoint(url=server.url), tool="charge", timeouts=FAST),
                workflow_id=unique("unknown-version"),
                task_queue=queue,
            )
            out = await asyncio.wait_for(outcome_of(handle), 30)
        assert out.outcome == Outcome.REJECTED, out
        assert out.reason is not None and "2099-01-01" in json.dumps(out.model_dump(mode="json")), out
        assert server.calls == 0 and set(server.asked) == {"server/discover", "initialize"}
