"""Helpers shared by tests/test_agents_*.py (not a test module: no fixtures are defined here)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from temporalio.client import Client

from mcp_temporal_tasks._agent_tools import argument_digest
from mcp_temporal_tasks.workflows.mcp_task import McpTaskWorkflow
from tests.peers.harness import Peer
from tests.temporal_harness import (
    ProcessUnderTest,
    child_view,
    cli,
    closed_with_nothing_running,
    settled_calls,
    tool_calls,
)

HEARTBEAT_S = 2.0


def servers(ts: Peer, fm: Peer, **extra: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The plugin's servers: trusted per-tool policies, as a user's configuration gives them."""
    return {
        "ts": {"url": ts.url, "tools": {"slow_echo": {"idempotent": False}, "slow_sync": {"idempotent": False}}},
        "fm": {"url": fm.url, "tools": {"slow_echo": {"idempotent": False}, "quick_sync": {"idempotent": True}}},
        **extra,
    }


def child_id(parent: str, key: str, tool: str, arguments: dict[str, Any], *, scope: int = 1, n: int = 1) -> str:
    base = f"{parent}/mcp/{key}/r{scope}/{tool}/{argument_digest(arguments)}"
    return base if n == 1 else f"{base}.{n}"


def seen(output: str) -> list[dict[str, Any]]:
    """The scripted model's final answer: what each tool call returned, as the model saw it."""
    value = json.loads(output)
    assert isinstance(value, list), output
    return value


class AgentWorkerProcess(ProcessUnderTest):
    """``python -m MODULE``: an agent application's worker (both plugins on its client), in its own process.
    ``own_url``: the MCP server of the framework's own MCP integration in that application (``AGENT_APP_OWN_URL``)."""

    def __init__(
        self, module: str, address: str, queue: str, servers_: dict[str, Any], own_url: str | None = None
    ) -> None:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env.update(TEMPORAL_ADDRESS=address, AGENT_APP_QUEUE=queue, AGENT_APP_SERVERS=json.dumps(servers_))
        if own_url is not None:
            env["AGENT_APP_OWN_URL"] = own_url
        super().__init__([sys.executable, "-m", module], ready="READY", env=env, name=f"{module} worker")


@contextlib.contextmanager
def agent_worker(
    module: str, address: str, queue: str, servers_: dict[str, Any], own_url: str | None = None
) -> Iterator[AgentWorkerProcess]:
    proc = AgentWorkerProcess(module, address, queue, servers_, own_url)
    try:
        proc.wait_ready(60)
        yield proc
    finally:
        proc.stop()


#: The measured scenario of the README: a worker killed (kill -9) a few seconds into a 20 s tool call.
KILL_TOOL_S = 20


async def killed_mid_call(
    client: Client,
    module: str,
    run: Any,
    address: str,
    servers_: dict[str, Any],
    ts: Peer,
    fm: Peer,
    *,
    own: tuple[str, Peer] | None = None,
) -> dict[str, Any]:
    """Three agent runs on one worker *process* of ``module``: a 20 s task tool on each era and a 20 s synchronous
    tool; the process is SIGKILLed once each call is under way, then replaced. Returns what each run ended with
    (``("ok", output)`` or ``("failed", WorkflowFailureError)``), the calls each server counted, and the time to the
    last ending after the kill.

    ``own=(agent, peer)``: two more runs in the same process and the same kill, through the framework's *own* MCP
    integration (the script's agent ``agent``) against ``peer`` (a server of their own, so the counts stay apart):
    the same 20 s task tool and 20 s synchronous tool, counted as ``own/slow_echo`` and ``own/slow_sync``, their
    time to end as ``own_elapsed``."""
    import time

    from temporalio.client import WorkflowFailureError

    from tests.fixtures.agent_scripts import script
    from tests.temporal_harness import unique

    queue = unique("kill-q")
    texts = {era: unique(f"kill-{era}") for era in ("ts", "fm", "own")}
    runs = {
        "ts": script("ts", [("slow_echo", {"seconds": KILL_TOOL_S, "text": texts["ts"]})]),
        "fm": script("fm", [("slow_echo", {"seconds": KILL_TOOL_S, "text": texts["fm"]})]),
        "sync": script("ts", [("slow_sync", {"seconds": KILL_TOOL_S})]),
    }
    peers = {"ts": ts, "fm": fm}
    if own is not None:
        runs["own"] = script(own[0], [("slow_echo", {"seconds": KILL_TOOL_S, "text": texts["own"]})])
        runs["own_sync"] = script(own[0], [("slow_sync", {"seconds": KILL_TOOL_S})])
        peers["own"] = own[1]
    marks = {name: peer.log_mark() for name, peer in peers.items()}
    wids = {name: unique(f"kill-{name}") for name in runs}
    children = {
        "ts": child_id(wids["ts"], "ts", "slow_echo", {"seconds": KILL_TOOL_S, "text": texts["ts"]}),
        "fm": child_id(wids["fm"], "fm", "slow_echo", {"seconds": KILL_TOOL_S, "text": texts["fm"]}),
    }
    sent = [("ts", "slow_sync")] + ([("own", "slow_echo"), ("own", "slow_sync")] if own is not None else [])
    own_url = own[1].url if own is not None else None
    with agent_worker(module, address, queue, servers_, own_url) as first:
        handles = {
            name: await client.start_workflow(run, prompt, id=wids[name], task_queue=queue)
            for name, prompt in runs.items()
        }
        for cid in children.values():
            await child_view(client, cid, lambda v: v.task_id, timeout_s=60)
        deadline = time.monotonic() + 30
        while not all(tool_calls(peers[p], marks[p], tool) for p, tool in sent) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        for p, tool in sent:
            assert tool_calls(peers[p], marks[p], tool), f"the tools/call of {tool} never reached {p}"
        await asyncio.sleep(3)
        first.kill()
        assert first.proc.returncode == -9
    t0 = time.monotonic()
    ended: dict[str, Any] = {}
    took: dict[str, float] = {}

    async def outcome(name: str, handle: Any) -> None:
        try:
            ended[name] = ("ok", await asyncio.wait_for(handle.result(), 150))
        except WorkflowFailureError as err:
            ended[name] = ("failed", err)
        took[name] = time.monotonic() - t0

    with agent_worker(module, address, queue, servers_, own_url):
        await asyncio.gather(*(outcome(name, handle) for name, handle in handles.items()))
    elapsed = max(t for name, t in took.items() if not name.startswith("own"))
    print(f"{module}: every run ended {elapsed:.1f}s after the replacement worker started", flush=True)
    for wid in wids.values():  # both workers are gone: nothing of these runs can send a request any more
        await closed_with_nothing_running(client, wid, workers_stopped=True)
    counts = {
        "ts/slow_echo": len(tool_calls(ts, marks["ts"], "slow_echo")),
        "fm/slow_echo": len(tool_calls(fm, marks["fm"], "slow_echo")),
        "ts/slow_sync": len(tool_calls(ts, marks["ts"], "slow_sync")),
    }
    got: dict[str, Any] = {"ended": ended, "counts": counts, "elapsed": elapsed, "texts": texts, "wids": wids}
    if own is not None:
        got["own_counts"] = {
            f"own/{tool}": len(tool_calls(own[1], marks["own"], tool)) for tool in ("slow_echo", "slow_sync")
        }
        got["own_elapsed"] = max(took["own"], took["own_sync"])
        print(
            f"{module}: its framework's own MCP integration counted {got['own_counts']}, ended "
            f"{got['own_elapsed']:.1f}s after the replacement worker started",
            flush=True,
        )
    return got


async def parked_until_approved(
    client: Client, run: Any, address: str, queue: str, prompt_of: Any, fm: Peer, proxy: Any
) -> dict[str, Any]:
    """An agent calls a ``with_approval`` tool whose ``tools/call`` reply is lost (reset after the server got it):
    the agent waits while the child is AWAITING_APPROVAL; ``mcp-tasks approve CHILD`` lets it replay and finish."""
    from mcp_temporal_tasks.workflows.records import Phase
    from tests.fixtures.agent_scripts import script
    from tests.temporal_harness import unique

    mark = fm.log_mark()
    text = unique("approved")
    args = {"seconds": 0.3, "text": text}
    wid = unique("approval")
    handle = await client.start_workflow(
        run, prompt_of(script("lossy", [("slow_echo", args)])), id=wid, task_queue=queue
    )
    cid = child_id(wid, "lossy", "slow_echo", args)
    view = await child_view(client, cid, lambda v: v.phase == Phase.AWAITING_APPROVAL, timeout_s=60)
    await asyncio.sleep(2)  # parked: nothing else happens while nobody approves
    parked = {
        "agent_running": (await handle.describe()).status.name,
        "calls_while_parked": len(tool_calls(fm, mark, "slow_echo")),
        "attempts": [a.reason for a in view.operation_attempts],
    }
    # the operator's view while the agent waits: the child's live status
    _, out, err = await cli("status", cid, "--address", address, "--json")
    parked["status_phase"] = json.loads(out).get("phase") if out.strip() else err
    rc, out, err = await cli("approve", cid, "--address", address)
    assert rc == 0, (out, err)
    output = await asyncio.wait_for(handle.result(), 60)
    await closed_with_nothing_running(client, wid)  # the run and its child: no late tools/call can come
    child = await client.get_workflow_handle_for(McpTaskWorkflow.run, cid).query(McpTaskWorkflow.status)
    return {
        "parked": parked,
        "output": output,
        "text": text,
        "calls": len(tool_calls(fm, mark, "slow_echo")),
        "attempts": [a.reason for a in child.operation_attempts],
        "proxy_calls": proxy.forwarded("tools/call"),
    }


async def reset_reattaches(client: Client, run: Any, queue: str, fm: Peer) -> dict[str, Any]:
    """An agent run that called a tool, reset to its first workflow task: the new run calls the tool again, finds
    the child its first run started (same deterministic id) and reads its outcome; the server counts one call."""
    from temporalio.api.enums.v1 import EventType

    from mcp_temporal_tasks.activities.mcp_activities import FETCH_OUTCOME
    from tests.fixtures.agent_scripts import script
    from tests.temporal_harness import reset_to_first_workflow_task, unique

    mark = fm.log_mark()
    args = {"seconds": 0.3, "text": unique("reset")}
    wid = unique("agent-reset")
    first = await asyncio.wait_for(
        client.execute_workflow(run, script("fm", [("slow_echo", args)]), id=wid, task_queue=queue), 90
    )
    _, new_run = await reset_to_first_workflow_task(client, wid, "test: re-run the agent")
    again = client.get_workflow_handle(wid, run_id=new_run)
    second = await asyncio.wait_for(again.result(), 90)
    new_events = [e async for e in again.fetch_history_events()]
    refused = [
        e.start_child_workflow_execution_failed_event_attributes.workflow_id
        for e in new_events
        if e.event_type == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_FAILED
    ]
    fetched = [
        e
        for e in new_events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == FETCH_OUTCOME
    ]
    return {
        "same": first == second,
        "refused": refused,
        "expected_child": child_id(wid, "fm", "slow_echo", args),
        "fetched": len(fetched),
        "calls": await settled_calls(fm, mark, "slow_echo", client=client, workflows=[wid]),
        "output": second,
        "text": args["text"],
    }


#: The venv of the frameworks' own MCP paths that need ``mcp<2`` (tests/peers/agents_own/requirements.txt).
OWN_PYTHON = Path(__file__).resolve().parent / "peers" / "agents_own" / ".venv" / "bin" / "python"
#: The lighter kill scenario of the frameworks added in issue 56: one task tool of 18 s, killed 3 s in.
KILL_TASK_S = 18


def own_worker(module: str, address: str, queue: str, own_url: str) -> contextlib.AbstractContextManager[Any]:
    """``OWN_PYTHON -m MODULE``: a framework's own MCP path in the peer venv (no mcp_temporal_tasks there)."""

    @contextlib.contextmanager
    def running() -> Iterator[ProcessUnderTest]:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        env.update(TEMPORAL_ADDRESS=address, AGENT_APP_QUEUE=queue, AGENT_APP_OWN_URL=own_url)
        proc = ProcessUnderTest([str(OWN_PYTHON), "-m", module], ready="READY", env=env, name=f"{module} worker")
        try:
            proc.wait_ready(60)
            yield proc
        finally:
            proc.stop()

    return running()


async def killed_once(
    client: Client,
    module: str,
    run: Any,
    address: str,
    servers_: dict[str, Any],
    ts: Peer,
    own: tuple[str, str, Peer],
) -> dict[str, Any]:
    """One agent run of ``module`` (our adapter) calling the TypeScript SDK's 2025-11-25 task tool for 18 s, and in
    the same moment one run of the framework's own MCP path (``own=(module, workflow type, peer)``, from the peer
    venv) calling the same tool on a server of its own; both worker processes SIGKILLed 3 s after each call reached
    its server, then both replaced. Returns what each run ended with, the calls each server counted, and the time
    from the replacement to each ending."""
    import time

    from temporalio.client import WorkflowFailureError

    from tests.fixtures.agent_scripts import script
    from tests.temporal_harness import unique

    own_module, own_type, own_peer = own
    queue, own_queue = unique("kill-q"), unique("kill-own-q")
    args = {"seconds": KILL_TASK_S, "text": unique("kill")}
    own_args = {"seconds": KILL_TASK_S, "text": unique("kill-own")}
    wid, own_wid = unique("kill"), unique("kill-own")
    mark, own_mark = ts.log_mark(), own_peer.log_mark()
    with (
        agent_worker(module, address, queue, servers_) as first,
        own_worker(own_module, address, own_queue, own_peer.url or "") as own_first,
    ):
        handle = await client.start_workflow(run, script("ts", [("slow_echo", args)]), id=wid, task_queue=queue)
        own_handle = await client.start_workflow(
            own_type, script("own", [("slow_echo", own_args)]), id=own_wid, task_queue=own_queue, result_type=str
        )
        await child_view(client, child_id(wid, "ts", "slow_echo", args), lambda v: v.task_id, timeout_s=60)
        deadline = time.monotonic() + 60
        while not tool_calls(own_peer, own_mark, "slow_echo") and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert tool_calls(own_peer, own_mark, "slow_echo"), "the own path's tools/call never reached its server:\n" + (
            "\n".join(own_first.lines[-40:])
        )
        await asyncio.sleep(3)
        first.kill()
        own_first.kill()
        assert first.proc.returncode == -9 and own_first.proc.returncode == -9
    t0 = time.monotonic()
    ended: dict[str, Any] = {}
    took: dict[str, float] = {}

    async def outcome(name: str, h: Any) -> None:
        try:
            ended[name] = ("ok", await asyncio.wait_for(h.result(), 150))
        except WorkflowFailureError as err:
            ended[name] = ("failed", err)
        took[name] = time.monotonic() - t0

    with (
        agent_worker(module, address, queue, servers_),
        own_worker(own_module, address, own_queue, own_peer.url or ""),
    ):
        await asyncio.gather(outcome("ours", handle), outcome("own", own_handle))
    for w in (wid, own_wid):
        await closed_with_nothing_running(client, w, workers_stopped=True)
    got = {
        "ended": ended,
        "took": took,
        "counts": {
            "ours": len(tool_calls(ts, mark, "slow_echo")),
            "own": len(tool_calls(own_peer, own_mark, "slow_echo")),
        },
        "texts": {"ours": args["text"], "own": own_args["text"]},
    }
    print(f"{module}: tools/call counted {got['counts']}; ended {took} s after the replacement workers started")
    return got


async def input_relayed(client: Client, run: Any, queue: str, fm: Peer) -> dict[str, Any]:
    """An agent calls a tool that asks for input mid-task (fastmcp's ``ask_user``, 2026-07-28 ``inputRequests``): the
    child waits in INPUT_REQUIRED with the question, as for any ``McpTaskWorkflow`` (``mcp-tasks answer``); the agent
    waits on it; the answer (the child's ``provide_input`` update) lets the call complete and the agent go on."""
    from mcp_temporal_tasks.workflows.records import Phase
    from tests.fixtures.agent_scripts import script
    from tests.temporal_harness import unique

    mark = fm.log_mark()
    wid = unique("agent-ask")
    handle = await client.start_workflow(run, script("fm", [("ask_user", {})]), id=wid, task_queue=queue)
    cid = child_id(wid, "fm", "ask_user", {})
    view = await child_view(client, cid, lambda v: v.phase == Phase.INPUT_REQUIRED and v.pending_inputs, timeout_s=60)
    (pending,) = view.pending_inputs
    waiting = (await handle.describe()).status.name
    child = client.get_workflow_handle_for(McpTaskWorkflow.run, cid)
    answer = {"action": "accept", "content": {"account": "acct-7", "approve": True}}
    await child.execute_update(McpTaskWorkflow.provide_input, {pending.key: answer})
    output = await asyncio.wait_for(handle.result(), 60)
    return {
        "question": pending.message,
        "agent_while_asking": waiting,
        "output": output,
        "calls": await settled_calls(fm, mark, "ask_user", client=client, workflows=[wid]),
    }
