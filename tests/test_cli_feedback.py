"""Never silent, never a false count (issue 30): every check runs the real ``mcp-tasks`` as a process against the
real dev server and real MCP peers, and asserts what an operator reads (the one line, the exit code, no traceback)
or what the server itself counted.

* the attempts ledger: a refusal before ``tools/call`` left is ``rejected`` with ``tools/call sent: 0`` (the server
  counted none) and the same id runs again, for each pre-send failure;
* no silent wait: ``run`` whose own worker cannot start, ``run --no-worker`` / ``result --wait`` on a queue nobody
  polls, ``cancel`` without a worker;
* the live view: a synchronous tool's progress at once and CALLING, ``still`` lines in a log, a redrawn line on a
  terminal;
* one address rule: ``--config``'s ``[temporal]`` for ``run``, ``result``, ``list`` (no embedded Temporal);
* ``mcp-tasks tools``; workers on one queue with other server sets; one-line errors (closed stdout, ports in use).

None of these needs the embedded default Temporal on 7233 (the address rule's default is checked in
tests/test_cli.py::test_run_starts_the_embedded_default, the one place that uses it).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from mcp_temporal_tasks.worker.devserver import free_port
from mcp_temporal_tasks.workflows.client import outcome_of, start_mcp_task
from mcp_temporal_tasks.workflows.records import McpTaskRequest, Outcome
from tests.peers.harness import Peer
from tests.scripted_mcp import ScriptedMcp, scripted_mcp
from tests.temporal_harness import (
    CLI,
    ENV,
    REPO_ROOT,
    ProcessUnderTest,
    address_of,
    cli,
    in_process_worker,
    one_json,
    tool_calls,
    unique,
)
from tests.test_cli_ux import Pty, one_line
from tests.test_operator import RunProcess


def _no_traceback(*texts: str) -> None:
    for text in texts:
        assert "Traceback" not in text, text[-3000:]


# --- the attempts ledger: nothing sent, nothing counted, runs again ------------------------------------------------


@contextmanager
def _protected_by_unreachable_as(tmp_path: Path) -> Iterator[tuple[ScriptedMcp, Path]]:
    """A server that demands a token (its 401 names an authorization server at a closed port on this machine), and
    a configuration with client credentials for it: the token cannot be had, so nothing can be sent."""
    issuer = f"http://127.0.0.1:{free_port()}"
    with scripted_mcp() as server:
        server.challenge = issuer
        path = tmp_path / "oauth.toml"
        path.write_text(
            f'[servers.pay]\nurl = "{server.url}"\n[servers.pay.auth]\ntype = "client_credentials"\n'
            f'client_id = "svc"\nclient_secret = {{ env = "MCP_TEST_PAY_SECRET" }}\n'
            f'issuer = "{issuer}"\n'
        )
        yield server, path


@pytest.mark.parametrize("case", ["initialize_404", "oauth_unreachable", "unknown_tool", "schema_mismatch"])
async def test_a_call_refused_before_sending_counts_none_and_runs_again(
    temporal_env: Any, fastmcp_server: Peer, tmp_path: Path, case: str
) -> None:
    with ExitStack() as stack:
        await _refused_before_sending(temporal_env, fastmcp_server, tmp_path, case, stack)


async def _refused_before_sending(
    temporal_env: Any, fastmcp_server: Peer, tmp_path: Path, case: str, stack: ExitStack
) -> None:
    protected: ScriptedMcp | None = None
    address = address_of(temporal_env)
    url = fastmcp_server.url or ""
    tool, args, target = "slow_echo", '{"seconds": 0.1}', ["--url", url]
    env: dict[str, str] = {}
    want = {
        "initialize_404": ("HttpRefusal", None),
        "oauth_unreachable": ("AuthorizationRequired", "authorization_required"),
        "unknown_tool": ("UnknownTool", "permanent"),
        "schema_mismatch": ("InvalidArguments", "input_correctable"),
    }
    if case == "initialize_404":
        target = ["--url", url.rsplit("/", 1)[0] + "/nope"]  # the server answers 404 to initialize
    elif case == "oauth_unreachable":
        protected, config = stack.enter_context(_protected_by_unreachable_as(tmp_path))
        target = ["--server", "pay", "--config", str(config)]
        env = {"MCP_TEST_PAY_SECRET": unique("secret")}
    elif case == "unknown_tool":
        tool = unique("no_such_tool")
    else:
        args = '{"seconds": "soon"}'  # slow_echo's inputSchema: seconds is a number
    wid = unique(f"presend-{case}")
    mark = fastmcp_server.log_mark()
    for attempt in (1, 2):
        rc, out, err = await cli(
            "run", tool, *target, "--args", args, "--id", wid, "--json", "--address", address, env=env
        )
        _no_traceback(err)
        if case == "initialize_404":
            # Issue 57: a 404 page is no MCP endpoint: refused before any workflow starts (exit 3), both times.
            refused = one_json(out)["error"]
            assert rc == 3 and refused["kind"] == "not_mcp", (rc, out, err[-2000:])
            assert "is not an MCP endpoint: the handshake was answered HTTP 404" in refused["message"], refused
            continue
        outcome = one_json(out)
        # What was typed (a tool not listed, arguments against its schema) is bad input: exit 2 (issue 43).
        bad_input = case in ("unknown_tool", "schema_mismatch")
        assert rc == (2 if bad_input else 1) and outcome["outcome"] == "rejected", (rc, out, err[-2000:])
        assert outcome["operation_attempts"] == [], outcome["operation_attempts"]
        assert outcome["reason"] == f"refused before tools/call was sent ({want[case][0]})", outcome
        assert outcome["error"]["message"].startswith("tools/call was never sent"), outcome["error"]
        if want[case][1]:
            assert outcome["classification"] == want[case][1], outcome
        if case in ("initialize_404", "oauth_unreachable"):  # the preflight handshake failed: said so, not "answered"
            assert "note: the handshake with MCP server at " in err and "answered the handshake" not in err, err
        if attempt == 2:  # the same id ran again (it was refused before anything was sent), it did not replay
            assert f"note: {wid} was refused before anything was sent" in err and "STORED" not in err, err
    assert tool_calls(fastmcp_server, mark) == []  # what the server counted: no tools/call at all
    if case == "initialize_404":
        rc, _, err = await cli("status", wid, "--address", address)
        assert rc == 2 and "no such task" in err, err  # nothing was started
        return
    if protected is not None:
        assert protected.calls == 0 and protected.asked == [], protected.asked  # refused unauthenticated, nothing run
    rc, out, _ = await cli("run", tool, *target, "--args", args, "--id", wid, "--address", address, env=env)
    assert "  tools/call sent: 0" in out.splitlines(), out


async def test_args_from_an_empty_stdin_is_refused_not_taken_for_none(temporal_env: Any, fastmcp_server: Peer) -> None:
    rc, _, err = await cli(
        "run",
        "slow_echo",
        "--url",
        fastmcp_server.url or "",
        "--args",
        "-",
        "--address",
        address_of(temporal_env),
        stdin=b"  \n",
    )
    one_line(err, code=2, rc=rc, message="--args -: standard input was empty")


# --- no silent wait -------------------------------------------------------------------------------------------------


async def test_run_whose_worker_cannot_start_ends_at_once_naming_why(
    temporal_env: Any, fastmcp_server: Peer, tmp_path: Path
) -> None:
    """`[worker] tracing = true` without the OpenTelemetry SDK (hidden from this process): the worker's own error,
    one line, exit 2, before anything connects; no task is left waiting for it."""
    hide = tmp_path / "hide" / "opentelemetry" / "sdk"
    hide.mkdir(parents=True)
    (hide / "__init__.py").write_text("raise ImportError('No module named opentelemetry.sdk (hidden by the test)')\n")
    config = tmp_path / "tracing.toml"
    config.write_text(f'[worker]\ntracing = true\n[servers.demo]\nurl = "{fastmcp_server.url}"\n')
    wid = unique("nosdk")
    env = {"PYTHONPATH": f"{tmp_path / 'hide'}{os.pathsep}{REPO_ROOT}"}
    # The bound counts from when the command is up: its imports alone (`--help`) take seconds on a loaded machine.
    started = time.monotonic()
    await cli("--help", env=env)
    up_s = time.monotonic() - started
    started = time.monotonic()
    rc, _, err = await cli(
        "run",
        "slow_echo",
        "--server",
        "demo",
        "--config",
        str(config),
        "--args",
        '{"seconds": 2}',
        "--id",
        wid,
        "--address",
        address_of(temporal_env),
        env=env,
    )
    took = time.monotonic() - started
    assert took < up_s + 5, f"it took {took:.1f} s to say so (the command's imports: {up_s:.1f} s)"
    one_line(err, code=2, rc=rc, message="tracing needs OpenTelemetry")
    # At start, before connecting: with nothing at the address it says the same, not "unreachable".
    rc, _, err = await cli(
        "run",
        "slow_echo",
        "--server",
        "demo",
        "--config",
        str(config),
        "--address",
        f"127.0.0.1:{free_port()}",
        env=env,
    )
    one_line(err, code=2, rc=rc, message="tracing needs OpenTelemetry")
    rc, _, err = await cli("status", wid, "--address", address_of(temporal_env))
    assert rc == 2 and "no such task" in err  # nothing was started


async def test_run_ends_when_its_own_worker_fails_to_start() -> None:
    """The mechanism under the case above, for a failure only the worker meets: the worker task's own error ends the
    wait at once (exit 3, kind worker_failed), and a configuration error is exit 2."""
    from mcp_temporal_tasks.worker.cli import CliError
    from mcp_temporal_tasks.worker.cli.calling import _worker_started
    from mcp_temporal_tasks.worker.config import ConfigError

    for error, code, text in (
        (
            RuntimeError("Failed validating workflow McpTaskWorkflow"),
            3,
            "this command's worker stopped: Failed validating workflow",
        ),
        (ConfigError("worker.metrics_port: port 9464 is already in use"), 2, "configuration: worker.metrics_port"),
    ):

        async def fail(exc: BaseException = error) -> None:
            await asyncio.sleep(0.05)
            raise exc

        task = asyncio.create_task(fail())
        started = time.monotonic()
        with pytest.raises(CliError) as raised:
            await _worker_started(task, asyncio.Event(), "q")
        assert time.monotonic() - started < 1 and raised.value.code == code and text in str(raised.value)
    # Stopping later, while `run` follows its task: the next tick ends the command, naming how to resume it.
    from mcp_temporal_tasks.worker.cli.calling import _WorkerWatch

    async def dies() -> None:
        raise RuntimeError("Worker shut down: the poller failed")

    task = asyncio.create_task(dies())
    await asyncio.sleep(0)
    await asyncio.wait({task})
    with pytest.raises(CliError) as raised:
        await _WorkerWatch(task, "wid-1")()
    assert raised.value.code == 3 and raised.value.kind == "worker_failed"
    assert "the poller failed; wid-1 has no worker now: resume it with the same command:" in str(raised.value)


async def test_no_worker_run_says_within_10_s_that_nothing_polls_and_ctrl_c_says_so(
    temporal_env: Any, fastmcp_server: Peer
) -> None:
    queue = unique("nobody-here")
    run = RunProcess(
        "slow_echo",
        "--server",
        "demo",
        "--no-worker",
        "--task-queue",
        queue,
        "--args",
        '{"seconds": 2}',
        "--address",
        address_of(temporal_env),
        "--id",
        unique("nobody"),
    )
    try:
        started = time.monotonic()
        await run.wait_for(f"no worker polls task queue '{queue}'", timeout_s=10)
        assert time.monotonic() - started < 10
        assert f"worker --task-queue {queue}" in run.err  # the command that serves it
        assert "(Ctrl-C cancels the task)" in run.err, run.err  # as the interrupt below does
        run.proc.send_signal(signal.SIGINT)
        rc, _, _ = await run.finish(15)
    finally:
        run.kill()
    assert rc == 130, run.err[-2000:]
    last = run.err.strip().splitlines()[-1]
    assert f"no worker polls task queue {queue}" in last and "the workers on task queue" not in last, last
    _no_traceback(run.err)


async def test_result_wait_and_cancel_without_a_worker_say_so(
    client: Client, temporal_env: Any, fastmcp_server: Peer
) -> None:
    address = address_of(temporal_env)
    queue, wid = unique("q-empty"), unique("waits")
    await start_mcp_task(
        client, McpTaskRequest(server=fastmcp_server.endpoint, tool="slow_echo"), workflow_id=wid, task_queue=queue
    )
    proc = await asyncio.create_subprocess_exec(
        *CLI,
        "result",
        wid,
        "--wait",
        "--address",
        address,
        cwd=REPO_ROOT,
        env=ENV,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stderr is not None
        seen = ""
        deadline = time.monotonic() + 10
        while f"no worker polls task queue '{queue}'" not in seen:
            line = await asyncio.wait_for(proc.stderr.readline(), max(0.1, deadline - time.monotonic()))
            assert line, seen
            seen += line.decode()
    finally:
        proc.kill()
        await proc.wait()
    assert "Ctrl-C stops following it; the task waits on" in seen and "Ctrl-C cancels" not in seen, seen
    rc, out, err = await cli("cancel", wid, "--json", "--address", address)
    assert rc == 3 and one_json(out)["error"]["kind"] == "no_worker", (rc, out, err)
    one_line(err, code=3, rc=rc, message=f"cancel requested for {wid}, but no worker polls its task queue")
    await client.get_workflow_handle(wid).terminate()


# --- the live view -------------------------------------------------------------------------------------------------


async def test_a_synchronous_tools_progress_is_live_and_it_shows_calling(
    temporal_env: Any, fastmcp_server: Peer
) -> None:
    """slow_progress is a plain synchronous tool sending 'step i/n' every 2 s: each step shows within a few seconds
    of when it was sent (no heartbeat throttle between), as CALLING; in a log a 'still' line follows a quiet
    stretch."""
    rc, out, err = await cli(
        "run",
        "slow_progress",
        "--url",
        fastmcp_server.url or "",
        "--args",
        '{"seconds": 6, "every": 2}',
        "--id",
        unique("progress"),
        "--address",
        address_of(temporal_env),
        timeout=60,
    )
    assert rc == 0, err[-2000:]
    lines = re.findall(r"\[\s*([\d.]+)s\] (\S+)(?: · “step (\d)/3”)?", err)
    steps = {int(n): float(t) for t, phase, n in lines if n}
    assert {1, 2} <= set(steps), err  # step 3/3 and the result may arrive together
    calling = [float(t) for t, phase, _ in lines if phase == "CALLING"]
    assert calling and calling[0] < steps[1], err
    # Step n is sent n × 2 s after tools/call: each shows within 2 s of that (heartbeats would take up to 24 s).
    assert all(steps[n] - calling[0] < 2 * n + 2 for n in steps), err
    rc, out, err = await cli(
        "run",
        "slow_progress",
        "--url",
        fastmcp_server.url or "",
        "--args",
        '{"seconds": 14, "every": 20}',
        "--id",
        unique("quiet"),
        "--address",
        address_of(temporal_env),
        timeout=60,
    )
    assert rc == 0 and re.search(r"\[\s*1\d\.\ds\] still CALLING", err), err


async def test_on_a_terminal_the_last_line_is_redrawn_with_the_clock_moving(
    temporal_env: Any, fastmcp_server: Peer
) -> None:
    term = Pty(
        "run",
        "slow_echo",
        "--url",
        fastmcp_server.url or "",
        "--args",
        '{"seconds": 6}',
        "--id",
        unique("tty"),
        "--address",
        address_of(temporal_env),
    )
    term.expect(r"WORKING · working · “sleeping 6s”", timeout_s=30)
    seen = term.expect(r"\r\x1b\[K  … \d+s · WORKING · “sleeping 6s” [1-9]s ago", timeout_s=10)
    code = term.wait(30)
    redraws = [int(n) for n in re.findall(r"\r\x1b\[K  … (\d+)s · WORKING", seen + term.seen)]
    assert code == 0 and len(set(redraws)) >= 3 and redraws == sorted(redraws), redraws
    assert "completed: slow_echo" in term.seen


# --- one address rule ----------------------------------------------------------------------------------------------


async def test_a_configs_temporal_address_is_used_by_run_result_and_list(
    client: Client, temporal_env: Any, fastmcp_server: Peer, tmp_path: Path
) -> None:
    config = tmp_path / "worker.toml"
    config.write_text(
        f'[temporal]\naddress = "{address_of(temporal_env)}"\n[servers.demo]\nurl = "{fastmcp_server.url}"\n'
    )
    env = {
        "TEMPORAL_ADDRESS": "",
        "TEMPORAL_CONFIG_FILE": str(tmp_path / "no-temporal.toml"),
        "MCP_TASKS_STATE_DIR": str(tmp_path),
    }
    wid = unique("by-config")
    rc, out, err = await cli(
        "run",
        "slow_echo",
        "--server",
        "demo",
        "--config",
        str(config),
        "--args",
        '{"seconds": 0.1}',
        "--id",
        wid,
        "--json",
        env=env,
    )
    assert rc == 0 and one_json(out)["outcome"] == "completed", err[-2000:]
    assert "embedded" not in err and not (tmp_path / "temporal.db").exists(), err
    assert (await client.get_workflow_handle(wid).describe()).status is not None  # on the server the file names
    rc, out, err = await cli("result", wid, "--config", str(config), "--json", env=env)
    assert rc == 0 and one_json(out)["workflow_id"] == wid, err
    for _ in range(50):  # visibility is eventually consistent
        rc, out, err = await cli("list", "--config", str(config), "--json", "--limit", "200", env=env)
        if any(r["workflow_id"] == wid for r in one_json(out)["workflows"]):
            break
        await asyncio.sleep(0.2)
    else:
        raise AssertionError(f"`list --config` never showed {wid}")
    # The flag still wins over the file: nothing listens where it points.
    rc, _, err = await cli("status", wid, "--config", str(config), "--address", f"127.0.0.1:{free_port()}", env=env)
    one_line(err, code=3, rc=rc, message="Temporal is unreachable at 127.0.0.1:")


def test_the_address_rule_orders_flag_env_profile_then_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mcp_temporal_tasks.worker.config import load_config
    from mcp_temporal_tasks.worker.runner import connect_options

    config = tmp_path / "worker.toml"
    config.write_text('[temporal]\naddress = "from-config:1"\nnamespace = "ns-config"\n')
    profile = tmp_path / "temporal.toml"
    profile.write_text('[profile.default]\naddress = "from-profile:2"\n')
    for var in ("TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE", "TEMPORAL_PROFILE", "MCP_TASKS_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("TEMPORAL_CONFIG_FILE", str(tmp_path / "absent.toml"))

    def address(flag: str | None = None) -> tuple[str, str, bool]:
        options, given = connect_options(address=flag, cfg=load_config(config))
        return options["target_host"], options["namespace"], given

    assert address() == ("from-config:1", "ns-config", True)
    monkeypatch.setenv("TEMPORAL_CONFIG_FILE", str(profile))
    assert address() == ("from-profile:2", "ns-config", True)
    monkeypatch.setenv("TEMPORAL_ADDRESS", "from-env:3")
    assert address() == ("from-env:3", "ns-config", True)
    assert address("from-flag:4") == ("from-flag:4", "ns-config", True)
    monkeypatch.delenv("TEMPORAL_ADDRESS")
    monkeypatch.setenv("TEMPORAL_CONFIG_FILE", str(tmp_path / "absent.toml"))
    options, given = connect_options(cfg=None)
    assert (options["target_host"], given) == ("localhost:7233", False)


# --- mcp-tasks tools -----------------------------------------------------------------------------------------------


async def test_tools_lists_task_support_hints_and_the_policy_a_worker_applies(
    fastmcp_server: Peer, ts_http_stateful: Peer, tmp_path: Path
) -> None:
    config = tmp_path / "worker.toml"
    config.write_text(
        f'[servers.demo]\nurl = "{fastmcp_server.url}"\n[servers.demo.tools.charge_card]\n'
        'replay = "with_approval"\nmax_replays = 2\n[servers.demo.jobs.export]\nsubmit = "start_export"\n'
        'status = "get_export_status"\nstates = { running = "working", succeeded = "completed" }\n'
        f'[servers.ts]\nurl = "{ts_http_stateful.url}"\n'
    )
    mark = fastmcp_server.log_mark()
    rc, out, err = await cli("tools", "--server", "demo", "--config", str(config), "--json")
    assert rc == 0, err
    listed = one_json(out)
    by_name = {t["name"]: t for t in listed["tools"]}
    assert listed["era"] == "2026-07-28" and listed["tasks"] is True and {"slow_echo", "charge_card"} <= set(by_name)
    assert by_name["charge_card"]["policy"] == {
        "replay": "with_approval",
        "idempotent": False,
        "idempotent_from": "default",
        "max_replays": 2,
        "output_schema": "server's",
        "max_call_s": None,
    }
    assert listed["jobs"][0]["name"] == "export" and listed["jobs"][0]["missing"] == []
    # Each tool's arguments, from its inputSchema (issue 43).
    assert "seconds: number" in by_name["slow_echo"]["arguments"], by_name["slow_echo"]
    assert by_name["slow_echo"]["input_schema"]["type"] == "object"
    assert tool_calls(fastmcp_server, mark) == []  # it lists, it never calls
    rc, out, err = await cli("tools", "--server", "ts", "--config", str(config))
    assert rc == 0 and "era 2025-11-25" in out and re.search(r"slow_echo: runs as task \(taskSupport \w+\)", out), out
    rc, _, err = await cli("tools", "--url", f"http://127.0.0.1:{free_port()}/mcp")
    one_line(err, code=3, rc=rc, message="MCP server unreachable")
    with _protected_by_unreachable_as(tmp_path) as (protected, config):
        rc, _, err = await cli(
            "tools", "--server", "pay", "--config", str(config), env={"MCP_TEST_PAY_SECRET": unique("secret")}
        )
    line = one_line(
        err, code=1, rc=rc, message=f"the handshake with MCP server at {protected.url} failed: no access token for"
    )
    assert "refused" not in line, line


# --- workers on one queue -------------------------------------------------------------------------------------------


async def test_a_worker_refuses_a_queue_whose_workers_serve_other_servers(
    client: Client, temporal_env: Any, fastmcp_server: Peer, tmp_path: Path
) -> None:
    """Issue 57: a second worker with other [servers] on the queue refuses to start (it only warned, and 5 of 6 tasks
    then ended `rejected: UnknownServer`); told to (--allow-mixed-servers), it starts and warns."""
    address = address_of(temporal_env)
    queue = unique("q-mixed")
    first, second = tmp_path / "first.toml", tmp_path / "second.toml"
    first.write_text(f'[servers.demo]\nurl = "{fastmcp_server.url}"\n')
    second.write_text(f'[servers.billing]\nurl = "{fastmcp_server.url}"\n')
    cmd = [*CLI, "worker", "--address", address, "--task-queue", queue, "--plain-logs", "--config"]
    env = {**ENV, "MCP_TASKS_STATE_DIR": str(tmp_path)}
    one = ProcessUnderTest([*cmd, str(first)], ready="ready: polling task queue", env=env, name="first")
    try:
        one.wait_ready()
        assert not any("another server set" in line for line in one.lines)
        rc, _, err = await cli(
            "worker", "--address", address, "--task-queue", queue, "--config", str(second), env={**env}, timeout=60
        )
        # Its log lines before it (JSON), then the refusal as one line, exit 2; no traceback.
        assert rc == 2 and "Traceback" not in err, err
        line = next(x for x in err.splitlines() if f"task queue {queue!r} is served by workers with other" in x)
        print(line)
        assert "serves demo" in line and "ours: billing" in line and "--allow-mixed-servers" in line, line
        two = ProcessUnderTest(
            [*cmd, str(second), "--allow-mixed-servers"], ready="ready: polling task queue", env=env, name="second"
        )
        try:
            two.wait_ready()
            deadline = time.monotonic() + 15
            while not any("another server set" in line for line in two.lines) and time.monotonic() < deadline:
                await asyncio.sleep(0.2)
            warning = next(line for line in two.lines if "another server set" in line)
            assert f"task queue {queue}" in warning and "serves demo" in warning and "ours: billing" in warning, warning
        finally:
            two.stop()
    finally:
        one.stop()


async def test_unknown_server_names_the_worker_and_its_queue(client: Client) -> None:
    queue = unique("q-lacks")
    async with in_process_worker(client, task_queue=queue):
        out = await outcome_of(
            await start_mcp_task(
                client, McpTaskRequest(server="billing", tool="charge"), workflow_id=unique("lacks"), task_queue=queue
            )
        )
    assert out.outcome == Outcome.REJECTED and out.error is not None
    assert f"on task queue {queue!r}" in out.error.message and f"{os.getpid()}@" in out.error.message, out.error
    assert "mcp-tasks servers=" in out.error.message


# --- one-line errors ----------------------------------------------------------------------------------------------


async def test_a_closed_stdout_ends_quietly(client: Client, temporal_env: Any, fastmcp_server: Peer) -> None:
    address = address_of(temporal_env)
    wid = unique("piped")
    rc, _, err = await cli(
        "run",
        "slow_echo",
        "--url",
        fastmcp_server.url or "",
        "--args",
        '{"seconds": 0.1}',
        "--id",
        wid,
        "--address",
        address,
    )
    assert rc == 0, err
    proc = subprocess.run(
        [
            "bash",
            "-c",
            '"$@" | head -c 10; exit "${PIPESTATUS[0]}"',
            "bash",
            *CLI,
            "result",
            wid,
            "--json",
            "--address",
            address,
        ],
        cwd=REPO_ROOT,
        env=ENV,
        capture_output=True,
        timeout=60,
    )
    assert proc.stdout == b'{"workflow', proc.stdout
    assert proc.stderr == b"", proc.stderr.decode()[-2000:]
    assert proc.returncode == 0  # the command's own exit code: the task completed


async def test_a_metrics_port_in_use_is_named(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = tmp_path / "worker.toml"
        config.write_text(f"[worker]\nmetrics_port = {port}\n")
        started = time.monotonic()
        rc, _, err = await cli(
            "worker",
            "--config",
            str(config),
            "--address",
            f"127.0.0.1:{free_port()}",
            env={"MCP_TASKS_STATE_DIR": str(tmp_path)},
        )
    line = one_line(err, code=2, rc=rc, message=f"worker.metrics_port: port {port} is already in use")
    assert "Prometheus metrics endpoint" in line and "unreachable" not in line and time.monotonic() - started < 10


async def test_the_dev_servers_ui_port_in_use_is_named(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        ui = taken.getsockname()[1]
        rc, _, err = await cli(
            "dev-server", "--port", str(free_port()), "--ui-port", str(ui), "--db", str(tmp_path / "t.db")
        )
    line = one_line(err, code=2, rc=rc, message=f"port {ui} is already in use")
    assert "for its UI" in line and "--ui-port" in line and "start-dev" not in line, line


def test_tracing_refuses_what_it_cannot_honour_and_leaves_a_hosts_provider_alone(tmp_path: Path) -> None:
    """In a process of its own (a TracerProvider can be set once per process)."""
    script = """
import json, sys
from mcp_temporal_tasks.worker.config import ConfigError
from mcp_temporal_tasks.worker.telemetry import setup_tracing
out = {}
for name, env in [("zipkin", {"OTEL_TRACES_EXPORTER": "zipkin"}),
                  ("json", {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}),
                  ("sampler", {"OTEL_TRACES_SAMPLER": "sometimes"}),
                  ("ratio", {"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "2"}),
                  ("endpoint", {"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318"})]:
    try:
        setup_tracing(env); out[name] = "accepted"
    except ConfigError as exc:
        out[name] = str(exc)
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
host = TracerProvider(); trace.set_tracer_provider(host)
out["host"] = setup_tracing({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}).where
out["kept"] = trace.get_tracer_provider() is host
print(json.dumps(out))
"""
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert "OTEL_TRACES_EXPORTER='zipkin'" in out["zipkin"] and "otlp, console, none" in out["zipkin"]
    assert "http/json" in out["json"] and "sometimes" in out["sampler"] and "ratio from 0 to 1" in out["ratio"]
    assert "is not an http(s) URL" in out["endpoint"]
    assert "already has" in out["host"] and out["kept"] is True


async def test_the_readmes_run_against_the_demo_server_runs_as_written(temporal_env: Any, fastmcp_server: Peer) -> None:
    """The quick start's `tools` and `run` lines against the bundled demo server (this fixture is that server), with
    only its address and Temporal's put in. The site's home (docs/index.md) repeats the quick start: the same lines."""
    import shlex

    from tests.doc_pages import page, readme, section

    def commands(text: str) -> dict[str, str]:
        block = section(text, "## Quick start").replace(" \\\n", " ")  # a line continued with a backslash
        return {
            cmd.split()[1]: cmd
            for cmd in (line.split("#")[0].strip() for line in block.splitlines())
            if cmd.startswith(".venv/bin/mcp-tasks ")
        }

    lines = commands(readme())
    assert {"demo-server", "tools", "run"} <= set(lines), lines
    assert commands(page("index.md")) == lines
    for name, expect in (("tools", "slow_echo"), ("run", "completed: slow_echo")):
        argv = shlex.split(lines[name].replace("http://127.0.0.1:8000/mcp", fastmcp_server.url or ""))[1:]
        rc, out, err = await cli(*argv, "--address", address_of(temporal_env)) if name == "run" else await cli(*argv)
        assert rc == 0 and expect in out, (name, out, err[-2000:])
