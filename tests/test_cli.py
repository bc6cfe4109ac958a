"""`mcp-tasks` as a user runs it: real processes, real Temporal, real peers; exit codes and --json contracts."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from mcp_temporal_tasks.workflows.records import McpTaskOutcome, Phase
from tests.peers.harness import Peer
from tests.temporal_harness import (
    REPO_ROOT,
    address_of,
    cli,
    in_process_worker,
    listed_under,
    one_json,
    unique,
    wait_for_view,
)

COMMANDS = [
    "run",
    "status",
    "result",
    "cancel",
    "approve",
    "answer",
    "list",
    "worker",
    "dev-server",
    "demo",
    "demo-server",
]


#: The workers' configuration `run --detach --url` is given: they take inline URLs (else it is refused up front).
TRUSTED_TOML = "[worker]\nallow_inline_endpoints = true\nallow_inline_commands = true\n"


def trusted_env(tmp_dir: Path) -> dict[str, str]:
    path = tmp_dir / "trusted-workers.toml"
    path.write_text(TRUSTED_TOML)
    return {"MCP_TASKS_CONFIG": str(path)}


async def start_detached(tool: str, peer: Peer, wid: str, queue: str, address: str) -> None:
    """`run --detach`: exits 0 as soon as the workflow is started."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        rc, _, err = await cli(
            "run",
            tool,
            "--url",
            peer.url or "",
            "--id",
            wid,
            "--detach",
            "--task-queue",
            queue,
            "--address",
            address,
            env=trusted_env(Path(tmp)),
        )
    assert rc == 0, err


async def test_help_on_every_command() -> None:
    code, out, _ = await cli("--help")
    assert code == 0 and all(c in out for c in COMMANDS)
    results = await asyncio.gather(*(cli(c, "--help") for c in COMMANDS))
    for command, (code, out, _) in zip(COMMANDS, results):
        assert code == 0 and "usage: mcp-tasks" in out, command


@pytest.mark.parametrize(
    "args, message",
    [
        (["run", "slow_echo", "--url", "http://127.0.0.1:9/mcp", "--args", "{not json"], "--args is not valid JSON"),
        (["run", "slow_echo", "--url", "http://127.0.0.1:9/mcp", "--args", "[1]"], "--args must be a JSON object"),
        (["run", "slow_echo", "--url", "ftp://x/mcp"], "must be http(s)"),
        (["run", "slow_echo", "--server", "nope"], "unknown server 'nope'"),
        (
            ["run", "slow_echo", "--url", "http://127.0.0.1:9/mcp", "--args", '{"api_key": "s3cr3t"}'],
            "looks like a credential",
        ),
        (["run", "slow_echo"], "one of the arguments --server --url --command is required"),
    ],
)
async def test_bad_input_exits_2(args: list[str], message: str) -> None:
    code, out, err = await cli(*args)
    assert code == 2, err
    assert message in err and out == ""


async def test_mcp_server_unreachable_exits_3(temporal_env: Any) -> None:
    code, _, err = await cli(
        "run", "slow_echo", "--url", "http://127.0.0.1:9/mcp", "--address", address_of(temporal_env)
    )
    assert code == 3 and "MCP server unreachable" in err


async def test_temporal_unreachable_exits_3(fastmcp_server: Peer) -> None:
    code, _, err = await cli("status", "x", "--address", "127.0.0.1:9")
    assert code == 3 and "Temporal is unreachable at 127.0.0.1:9" in err


@pytest.mark.parametrize(
    "peer_name, tool, args, expected, code",
    [
        ("fastmcp_server", "slow_echo", {"seconds": 1, "text": "cli"}, "completed", 0),
        ("fastmcp_server", "rate_limited", {}, "tool_error", 1),
        ("ts_http_stateful", "slow_echo", {"seconds": 0.5, "text": "cli"}, "completed", 0),
        ("ts_http_stateful", "rpc_error", {}, "failed", 1),
        ("ts_stdio", "slow_echo", {"seconds": 0.5, "text": "cli"}, "completed", 0),
    ],
)
async def test_run_json_outcome(
    request: pytest.FixtureRequest,
    temporal_env: Any,
    queue: str,
    peer_name: str,
    tool: str,
    args: dict[str, Any],
    expected: str,
    code: int,
) -> None:
    peer: Peer = request.getfixturevalue(peer_name)
    target = ["--url", peer.url] if peer.url else ["--command", " ".join(peer.endpoint.command or [])]
    rc, out, err = await cli(
        "run",
        tool,
        *target,
        "--args",
        json.dumps(args),
        "--json",
        "--task-queue",
        queue,
        "--address",
        address_of(temporal_env),
    )
    assert rc == code, err[-2000:]
    outcome = McpTaskOutcome.model_validate(one_json(out))
    assert outcome.outcome.value == expected
    if expected == "completed":
        assert outcome.result is not None and outcome.result["content"][0]["text"] == "cli"
    # Live progress; the test Temporal has no UI, so no link (never a guessed, dead one).
    assert "following " in err and "/namespaces/default/workflows/" not in err


async def test_detach_then_result_status_list(
    client: Client, temporal_env: Any, fastmcp_server: Peer, queue: str, tmp_path: Path
) -> None:
    address = address_of(temporal_env)
    wid = unique("detached")
    rc, out, err = await cli(
        "run",
        "slow_echo",
        "--url",
        fastmcp_server.url or "",
        "--args",
        '{"seconds": 1, "text": "later"}',
        "--id",
        wid,
        "--detach",
        "--json",
        "--task-queue",
        queue,
        "--address",
        address,
        env=trusted_env(tmp_path),
    )
    assert rc == 0, err
    assert one_json(out) == {"workflow_id": wid}
    rc, out, _ = await cli("result", wid, "--address", address, "--json")
    assert rc == 1  # still waiting for a worker, and no --wait
    async with in_process_worker(client, task_queue=queue):
        rc, out, err = await cli("result", wid, "--wait", "--json", "--address", address)
        assert rc == 0, err
        assert McpTaskOutcome.model_validate(one_json(out)).result["content"][0]["text"] == "later"  # type: ignore[index]
        rc, out, _ = await cli("status", wid, "--json", "--address", address)
        assert rc == 0 and one_json(out)["outcome"] == "completed"
        for _ in range(50):
            rc, out, _ = await cli(
                "list", "--outcome", "completed", "--tool", "slow_echo", "--json", "--address", address
            )
            rows = one_json(out)["workflows"]
            if any(r["workflow_id"] == wid for r in rows):
                break
            await asyncio.sleep(0.2)
        row = next(r for r in rows if r["workflow_id"] == wid)
        assert row["outcome"] == "completed" and row["task_status"] == "completed" and row["task_id"]


async def test_cancel_command(client: Client, temporal_env: Any, fastmcp_server: Peer, queue: str) -> None:
    address = address_of(temporal_env)
    wid = unique("cancel")
    async with in_process_worker(client, task_queue=queue):
        await start_detached("cancellable", fastmcp_server, wid, queue, address)
        # The task runs at the server: the cancel is one of a working task, not of a call not yet sent.
        await wait_for_view(client.get_workflow_handle(wid), lambda v: v.phase == Phase.WORKING and v.task_id)
        # It waits for how the task really ended and prints it (issue 43: what the README says).
        rc, out, err = await cli("cancel", wid, "--json", "--address", address)
        ended = one_json(out)
        assert rc == 0 and ended["cancel_requested"] is True, err
        assert (ended["workflow_id"], ended["outcome"], ended["task_status"]) == (wid, "cancelled", "cancelled"), err
        rc, out, _ = await cli("result", wid, "--wait", "--json", "--address", address)
        assert rc == 1 and (one_json(out)["outcome"], one_json(out)["task_status"]) == ("cancelled", "cancelled")
        rc, _, err = await cli("approve", wid, "--address", address)
        assert rc == 1 and "refused" in err


async def test_worker_rejects_bad_config(tmp_path: Path) -> None:
    bad = tmp_path / "w.toml"
    bad.write_text('[servers.x]\nurl = "http://127.0.0.1:9/mcp"\ncolour = "blue"\n')
    rc, _, err = await cli("worker", "--config", str(bad))
    assert rc == 2 and "servers.x.colour: unknown key" in err
    bad.write_text(
        '[servers.x]\nurl = "http://127.0.0.1:9/mcp"\n[servers.x.headers]\nAuthorization = "Bearer s3cr3t"\n'
    )
    rc, _, err = await cli("worker", "--config", str(bad))
    assert rc == 2 and "servers.x.headers.Authorization" in err and "s3cr3t" not in err


async def test_answer_and_list_waiting(client: Client, temporal_env: Any, fastmcp_server: Peer, queue: str) -> None:
    address = address_of(temporal_env)
    wid = unique("answer")
    async with in_process_worker(client, task_queue=queue):
        await start_detached("ask_user", fastmcp_server, wid, queue, address)
        await listed_under("input_required", wid, address)
        rc, out, err = await cli("status", wid, "--address", address)
        assert rc == 1 and "needs input" in out and f"mcp-tasks answer {wid}" in out
        rc, _, err = await cli(
            "answer", wid, "--response", '{"action": "accept", "content": {"approve": "nope"}}', "--address", address
        )
        assert rc == 2 and "'nope' is not of type 'boolean'" in err  # bad input
        rc, out, err = await cli(
            "answer",
            wid,
            "--response",
            '{"action": "accept", "content": {"account": "acct-9", "approve": true}}',
            "--address",
            address,
        )
        assert rc == 0, err
        rc, out, _ = await cli("result", wid, "--wait", "--json", "--address", address)
        assert rc == 0 and one_json(out)["result"]["content"][0]["text"] == "approved account=acct-9"


async def test_dev_server_keeps_state_across_restarts(tmp_path: Path) -> None:
    from mcp_temporal_tasks.worker.devserver import free_port, port_open

    port, ui = free_port(), free_port()
    db = tmp_path / "state.db"
    for round_ in range(2):
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "mcp_temporal_tasks.worker.cli",
            "dev-server",
            "--db",
            str(db),
            "--port",
            str(port),
            "--ui-port",
            str(ui),
            cwd=REPO_ROOT,
            stderr=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.DEVNULL,
            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        )
        assert proc.stderr is not None
        # Our line naming the address and the file, after whatever the server's own log says while it starts (on a
        # loaded machine: "Frontend is not healthy yet", at level ERROR, before it is).
        seen: list[str] = []
        deadline = time.monotonic() + 30
        while not any(f"127.0.0.1:{port}" in x for x in seen) and time.monotonic() < deadline and len(seen) < 50:
            seen.append(
                (await asyncio.wait_for(proc.stderr.readline(), max(0.1, deadline - time.monotonic()))).decode()
            )
        line = next((x for x in seen if f"127.0.0.1:{port}" in x), "")
        assert str(db) in line, seen
        assert port_open("127.0.0.1", port)
        for _ in range(100):  # the UI comes up a moment after the frontend
            if port_open("127.0.0.1", ui):
                break
            await asyncio.sleep(0.1)
        assert port_open("127.0.0.1", ui), "the UI never listened"
        c = await Client.connect(f"127.0.0.1:{port}")
        if round_ == 0:
            await c.start_workflow("Anything", id="survives-restart", task_queue="nobody")
        else:
            desc = await c.get_workflow_handle("survives-restart").describe()
            assert desc.id == "survives-restart"  # SQLite state outlived the first server
        proc.send_signal(2)
        await asyncio.wait_for(proc.wait(), 30)


@pytest.mark.xdist_group("embedded-temporal")  # localhost:7233: one such test at a time (tests/conftest.py)
async def test_run_starts_the_embedded_default(fastmcp_server: Peer, tmp_path: Path) -> None:
    from mcp_temporal_tasks.worker.devserver import port_open

    if port_open("127.0.0.1", 7233):
        pytest.fail(
            "something already listens on localhost:7233; this test needs it free to check the embedded default"
        )
    env = {"MCP_TASKS_STATE_DIR": str(tmp_path), "TEMPORAL_ADDRESS": ""}
    rc, out, err = await cli(
        "run", "slow_echo", "--url", fastmcp_server.url or "", "--args", '{"seconds": 0.2}', "--json", env=env
    )
    assert rc == 0, err
    assert "started the embedded Temporal at localhost:7233" in err and (tmp_path / "temporal.db").exists()
    assert McpTaskOutcome.model_validate(one_json(out)).outcome.value == "completed"
    assert not port_open("127.0.0.1", 7233)  # stopped on exit, since we started it
    # ... and said so (issue 57: it stopped without a word, so the UI link it printed went dead unexplained).
    assert f"stopped the embedded Temporal this command started at localhost:7233 (its state stays in {tmp_path}" in err


# Prompting on a terminal (and refusing a non-terminal stdin): tests/test_cli_ux.py, in a real pty.
