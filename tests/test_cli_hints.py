"""Issue 43: every command the CLI prints works when typed as printed (it carries --config, --address and
--task-queue), and a command that finds no Temporal says where it looked, why in words, and how to start one."""

from __future__ import annotations

import asyncio
import re
import shlex
import signal
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from mcp_temporal_tasks.workflows.client import outcome_of
from mcp_temporal_tasks.workflows.mcp_task import McpTaskWorkflow
from mcp_temporal_tasks.workflows.records import Outcome
from tests.faults.proxy import FaultProxy, ResetAfterSend
from tests.peers.harness import Peer
from tests.temporal_harness import (
    CLI,
    ENV,
    address_of,
    cli,
    in_process_worker,
    one_json,
    stop_process,
    tool_calls,
    unique,
)


async def test_the_worker_hint_of_a_detached_run_completes_the_task(
    temporal_env: Any, fastmcp_server: Peer, tmp_path: Path
) -> None:
    """`run … --server demo --config good.toml --detach`, then `status` with no worker: its hint names the
    configuration the task was started with; typed as printed, that worker completes the task."""
    address, queue, wid = address_of(temporal_env), unique("hints"), unique("hint")
    good = tmp_path / "good.toml"
    good.write_text(f'[temporal]\ntask_queue = "{queue}"\n[servers.demo]\nurl = "{fastmcp_server.url}"\n')
    rc, _, err = await cli(
        "run",
        "slow_echo",
        "--server",
        "demo",
        "--config",
        str(good),
        "--detach",
        "--id",
        wid,
        "--args",
        '{"seconds": 0.2, "text": "hint"}',
        "--address",
        address,
    )
    assert rc == 0, err
    wanted = f"worker --task-queue {queue} --address {address} --config {good}"
    assert wanted in err, err
    rc, _, err = await cli("status", wid, "--address", address)  # another shell: no --config
    assert rc == 3 and wanted in err and "Traceback" not in err, err
    command = re.search(r"start one: (.+)$", err.strip()).group(1)  # type: ignore[union-attr]
    worker = subprocess.Popen(
        shlex.split(command), cwd=tmp_path, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        rc, out, err = await cli("result", wid, "--wait", "--json", "--address", address, timeout=60)
        assert rc == 0 and one_json(out)["outcome"] == "completed", err[-2000:]
    finally:
        stop_process(worker)


async def test_no_temporal_says_where_why_and_how_to_start_one() -> None:
    from mcp_temporal_tasks.worker.devserver import free_port

    address = f"127.0.0.1:{free_port()}"
    # status, result, list and cancel connect through one function (worker/cli/connection.py: temporal()).
    for argv in (["status", "x"], ["list"]):
        rc, _, err = await cli(*argv, "--address", address)
        assert rc == 3 and "Traceback" not in err, err
        assert f"Temporal is unreachable at {address}: nothing listens there (connection refused); " in err, err
        assert "tonic" not in err and "dev-server" in err and "--address localhost:7233" in err, err


# --- every other hint, followed literally ---------------------------------------------------------------------------
# The CLI prints: `approve with: …   (or stop with: …)` for a task AWAITING_APPROVAL, `answer with: …` for a task in
# INPUT_REQUIRED (worker/cli/following.py: view_line), and `follow it with: … result ID --wait` when `run` is left
# (worker/cli/calling.py). Each is taken from the real output and run as printed (shlex.split, the test's own
# environment), and must do what it says.

TRUSTED_TOML = "[worker]\nallow_inline_endpoints = true\nallow_inline_commands = true\n"


async def printed_hint(wid: str, address: str, pattern: str, timeout_s: float = 40) -> re.Match[str]:
    """`status ID` until its output shows ``pattern`` (a hint line); the match."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    out = ""
    while asyncio.get_running_loop().time() < deadline:
        _, out, err = await cli("status", wid, "--address", address)
        assert "Traceback" not in err, err
        found = re.search(pattern, out, re.MULTILINE)
        if found:
            return found
        await asyncio.sleep(0.3)
    raise AssertionError(f"{wid}: status never printed {pattern!r}; last: {out!r}")


async def follow(command: str, *extra: str, env: dict[str, str]) -> tuple[int, str, str]:
    """Run a printed command as a person pastes it (plus ``extra`` words the hint leaves to the person)."""
    proc = await asyncio.create_subprocess_exec(
        *shlex.split(command),
        *extra,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    print(
        f"hint: {command}{' ' + shlex.join(extra) if extra else ''}\n  -> exit {proc.returncode}: "
        f"{(out.strip() or err.strip())[:300].decode(errors='replace')}"
    )
    assert "Traceback" not in err.decode(), err.decode()[-2000:]
    return proc.returncode if proc.returncode is not None else -1, out.decode(), err.decode()


async def test_the_approve_cancel_answer_and_result_hints_work_as_printed(
    client: Client, temporal_env: Any, fastmcp_server: Peer, queue: str, tmp_path: Path
) -> None:
    address = address_of(temporal_env)
    trusted = tmp_path / "trusted.toml"
    trusted.write_text(TRUSTED_TOML)
    env = {**ENV, "MCP_TASKS_CONFIG": str(trusted)}
    mark = fastmcp_server.log_mark()

    def task(wid: str) -> Any:
        return client.get_workflow_handle_for(McpTaskWorkflow.run, wid)

    async def detach(tool: str, url: str, wid: str, *more: str) -> None:
        rc, _, err = await cli(
            "run",
            tool,
            "--url",
            url,
            "--id",
            wid,
            "--detach",
            "--task-queue",
            queue,
            "--address",
            address,
            *more,
            env=env,
        )
        assert rc == 0, err

    async def approve(url: str) -> None:
        """The reply of the first tools/call is lost (reset after the server got it): with_approval parks the task;
        the printed approve command lets it send tools/call again, and it completes."""
        wid = unique("hint-approve")
        await detach("slow_echo", url, wid, "--replay", "with_approval", "--args", '{"seconds": 0.1, "text": "ok"}')
        found = await printed_hint(wid, address, r"approve with: (.+?)   \(or stop with: (.+)\)$")
        assert found.group(2).split()[-3:] == [wid, "--address", address], found.group(0)
        rc, out, err = await follow(found.group(1), env=env)
        assert rc == 0, err
        outcome = await asyncio.wait_for(outcome_of(task(wid)), 40)
        assert outcome.outcome == Outcome.COMPLETED, outcome
        assert [a.reason for a in outcome.operation_attempts] == ["initial", "replay_unknown_outcome"]

    async def stop() -> None:
        """A tool error parks a with_approval task; the printed stop command ends it, and no tools/call is sent
        again (a task awaiting approval keeps the ending of its last call: tool_error, not approved)."""
        wid = unique("hint-stop")
        await detach("rate_limited", fastmcp_server.url or "", wid, "--replay", "with_approval")
        found = await printed_hint(wid, address, r"\(or stop with: (.+)\)$")
        rc, out, err = await follow(found.group(1), env=env)
        assert rc == 0 and f"cancel requested for {wid}; it ended tool_error" in out, (out, err)
        outcome = await outcome_of(task(wid))
        assert outcome.outcome == Outcome.TOOL_ERROR and len(outcome.operation_attempts) == 1, outcome
        assert "not approved" in (outcome.reason or ""), outcome.reason

    async def answer() -> None:
        """The answer hint leaves the answer to the person (a terminal asks for it; elsewhere it needs
        --response): the test adds --response, as the refusal without one says."""
        wid = unique("hint-answer")
        await detach("ask_user", fastmcp_server.url or "", wid)
        found = await printed_hint(wid, address, r"answer with: (.+)$")
        rc, _, err = await follow(found.group(1), env=env)
        assert rc == 2 and "give the answer with --response" in err, err
        rc, _, err = await follow(
            found.group(1),
            "--response",
            '{"action": "accept", "content": {"account": "acct-43", "approve": true}}',
            env=env,
        )
        assert rc == 0, err
        outcome = await asyncio.wait_for(outcome_of(task(wid)), 40)
        assert outcome.outcome == Outcome.COMPLETED and outcome.result is not None, outcome
        assert outcome.result["content"][0]["text"] == "approved account=acct-43", outcome.result

    async def interrupted_twice(wid: str, seconds: int, *more: str) -> str:
        """A foreground `run` of a task of ``seconds``, left with two Ctrl-C once it is WORKING: what it said."""
        proc = await asyncio.create_subprocess_exec(
            *CLI,
            "run",
            "cancellable",
            "--url",
            fastmcp_server.url or "",
            "--args",
            f'{{"seconds": {seconds}}}',
            "--id",
            wid,
            "--address",
            address,
            *more,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
        )
        assert proc.stderr is not None
        try:
            seen = ""
            while "WORKING" not in seen:
                line = await asyncio.wait_for(proc.stderr.readline(), 40)
                assert line, f"run ended before WORKING: {seen}"
                seen += line.decode()
            proc.send_signal(signal.SIGINT)
            await asyncio.sleep(0.05)
            proc.send_signal(signal.SIGINT)
            _, err_b = await asyncio.wait_for(proc.communicate(), 30)
        finally:
            if proc.returncode is None:
                proc.kill()
        said = seen + err_b.decode()
        assert proc.returncode == 130 and "Traceback" not in said, said[-2000:]
        return said

    async def left() -> None:
        """`run --no-worker` (the workers of its queue run the task) left with two Ctrl-C prints `follow it with:
        … result ID --wait`; that prints how the task ended (cancelled: the first Ctrl-C asked for it)."""
        wid = unique("hint-left")
        said = await interrupted_twice(wid, 30, "--no-worker", "--task-queue", queue)
        found = re.search(r"follow it with: (.+)$", said, re.MULTILINE)
        assert found, said[-2000:]
        rc, out, err = await follow(found.group(1), env=env)
        assert rc == 1 and out.startswith("cancelled: ") and f"(workflow {wid})" in out, (out, err)

    async def resume() -> None:
        """`run` with its own worker left with two Ctrl-C prints `resume it with the same command: …`; that command
        re-attaches (no new tools/call), runs the task's worker and prints how it ended. (The cancel the first Ctrl-C
        asked for may have left with the killed worker: Temporal retries it after its timeout, by which time a 4 s
        task has usually finished first; either ending is the true one.)"""
        wid = unique("hint-resume")
        said = await interrupted_twice(wid, 4)
        found = re.search(r"resume it with the same command: (.+)$", said, re.MULTILINE)
        assert found, said[-2000:]
        rc, out, err = await follow(found.group(1), env=env)
        assert "following it; no new tools/call is sent" in err, err
        assert (rc, out.split(":")[0]) in ((0, "completed"), (1, "cancelled")) and f"(workflow {wid})" in out, out
        assert "tools/call sent: 1" in out

    async def timed(name: str, scenario: Any) -> None:
        started = asyncio.get_running_loop().time()
        await scenario
        print(f"{name}: {asyncio.get_running_loop().time() - started:.1f} s")

    with FaultProxy(fastmcp_server.url or "") as proxy:
        proxy.add("tools/call", ResetAfterSend(), times=1)
        async with in_process_worker(client, task_queue=queue):
            await asyncio.gather(
                *(
                    timed(name, scenario)
                    for name, scenario in (
                        ("approve", approve(proxy.url)),
                        ("stop", stop()),
                        ("answer", answer()),
                        ("left", left()),
                        ("resume", resume()),
                    )
                )
            )
    assert len(tool_calls(fastmcp_server, mark, "rate_limited")) == 1  # the stopped task was not replayed
    assert len(tool_calls(fastmcp_server, mark, "cancellable")) == 2  # left's and resume's: none sent again


@pytest.mark.fast
def test_the_answer_hint_parses_a_key_that_begins_with_a_dash() -> None:
    """Input keys are random base64url (the demo's: ``secrets.token_urlsafe``): one in 64 begins with '-', which
    `--key KEY` made argparse read as another option ("expected one argument"); the hint prints ``--key=KEY``."""
    from mcp_temporal_tasks.worker.cli.following import view_line
    from mcp_temporal_tasks.worker.cli.parser import build_parser
    from mcp_temporal_tasks.workflows.records import Ledger, PendingInput, Phase, TaskView

    key = "-IP-Ch0WE4ECKxOI7M2:f2362018"  # as a run of the test above printed it
    view = TaskView(
        workflow_id="w-1",
        phase=Phase.INPUT_REQUIRED,
        tool="ask_user",
        server="s",
        pending_inputs=[PendingInput(key=key, method="elicitation/create", message="ok?")],
        ledger=Ledger(server="s", tool="ask_user", request_digest="x", created_at=datetime.now(UTC)),
    )
    command = re.search(r"answer with: (.+)$", view_line(view, "w-1"), re.MULTILINE).group(1)  # type: ignore[union-attr]
    args = build_parser().parse_args(shlex.split(command)[1:])
    assert (args.subcommand, args.id, args.key) == ("answer", "w-1", key), command
