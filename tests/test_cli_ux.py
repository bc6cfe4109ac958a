"""The CLI and the embedded Temporal as a person meets them: every check runs the real ``mcp-tasks``
as a process against the real dev server and real MCP peers, and asserts the exit code and the one-line message
(never a traceback), or the corrected behaviour."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import re
import signal
import subprocess
import termios
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from mcp_temporal_tasks.workflows.client import RequestMismatch, start_mcp_task
from mcp_temporal_tasks.workflows.records import McpTaskRequest
from tests.faults.proxy import FaultProxy, Status
from tests.peers.harness import TS_SERVER, Peer, require_ts_peer
from tests.temporal_harness import (
    CLI,
    ENV,
    REPO_ROOT,
    address_of,
    cli,
    in_process_worker,
    line_with,
    listed_under,
    one_json,
    stop_process,
    unique,
)


def one_line(stderr: str, *, code: int, rc: int, message: str) -> str:
    """The run failed with ``code`` and said so in exactly one line containing ``message``; no traceback."""
    assert rc == code, f"exit {rc}, wanted {code}: {stderr[-2000:]}"
    assert "Traceback" not in stderr, stderr[-3000:]
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, f"wanted one line, got {len(lines)}: {stderr[-2000:]}"
    assert lines[0].startswith("mcp-tasks: ") and message in lines[0], lines[0]
    return lines[0]


async def wait_status(wid: str, address: str, needle: str, timeout_s: float = 30) -> str:
    deadline = time.monotonic() + timeout_s
    out = ""
    while time.monotonic() < deadline:
        _, out, _ = await cli("status", wid, "--address", address)
        if needle in out:
            return out
        await asyncio.sleep(0.3)
    raise AssertionError(f"{wid} never showed {needle!r}; last: {out!r}")


#: The workers' configuration `run --detach --url` is given: they take inline URLs (else it is refused up front).
TRUSTED_TOML = "[worker]\nallow_inline_endpoints = true\nallow_inline_commands = true\n"


def trusted_env() -> dict[str, str]:
    import atexit
    import tempfile

    fd, path = tempfile.mkstemp(prefix="mcp-tasks-trusted-", suffix=".toml")
    os.write(fd, TRUSTED_TOML.encode())
    os.close(fd)
    atexit.register(os.unlink, path)  # the file outlives the detached run's start, not the test session
    return {"MCP_TASKS_CONFIG": path}


async def detach(tool: str, url: str, wid: str, queue: str, address: str, args: str = "{}") -> None:
    rc, _, err = await cli(
        "run",
        tool,
        "--url",
        url,
        "--args",
        args,
        "--id",
        wid,
        "--detach",
        "--task-queue",
        queue,
        "--address",
        address,
        env=trusted_env(),
    )
    assert rc == 0, err


# --- bad input: one line, the right exit code, never a traceback ------------------------------------------------


@pytest.mark.parametrize(
    "argv, message",
    [
        (["run", "slow_echo", "--url", "@URL", "--args", b'{"text": "\xff\xfe"}'], "--args: not valid UTF-8"),
        (["run", "slow_echo", "--url", "@URL", "--id", b"id-\xff"], "--id: not valid UTF-8"),
        (["status", b"id-\xc3"], "ID: not valid UTF-8"),
        (["run", "slow_echo", "--url", "@URL", "--address", "localhost"], "--address 'localhost' is not HOST:PORT"),
        (["run", "slow_echo", "--url", "@URL", "--address", "not an address"], "is not HOST:PORT"),
        (["list", "--address", "localhost"], "--address 'localhost' is not HOST:PORT"),
        (["run", "slow_echo", "--url", "@URL", "--id", "x" * 2000], "--id: a workflow id is at most 255 characters"),
        (["status", "x" * 2000, "--address", "@ADDR"], "ID: a workflow id is at most 255 characters"),
        (
            ["list", "--outcome", "bogus", "--address", "@ADDR"],
            "--outcome 'bogus' is not one of: completed, tool_error",
        ),
        (["list", "--status", "bogus", "--address", "@ADDR"], "awaiting_approval"),
        (["list", "--limit", "0", "--address", "@ADDR"], "argument --limit: 0 is not at least 1"),
        (
            ["run", "slow_echo", "--url", "@URL", "--args", "@/nonexistent/args.json", "--address", "@ADDR"],
            "--args @/nonexistent/args.json: cannot read the file",
        ),
    ],
)
async def test_bad_input_is_one_line_exit_2(
    temporal_env: Any, fastmcp_server: Peer, argv: list[str | bytes], message: str
) -> None:
    swap = {"@URL": fastmcp_server.url or "", "@ADDR": address_of(temporal_env)}
    args = [swap.get(a, a) if isinstance(a, str) else a for a in argv]
    rc, out, err = await cli(*args)
    one_line(err, code=2, rc=rc, message=message)
    assert out == ""
    rc, out, err = await cli(*args, "--json")  # --json: the same error, as the one JSON object on stdout
    assert (
        rc == 2
        and one_json(out)["error"]["kind"] in ("usage", "namespace")
        and message in one_json(out)["error"]["message"]
    ), (out, err)


async def test_unknown_namespace_is_named(temporal_env: Any, fastmcp_server: Peer, tmp_path: Path) -> None:
    address = address_of(temporal_env)
    env = {"MCP_TASKS_STATE_DIR": str(tmp_path)}
    for argv in (["run", "slow_echo", "--url", fastmcp_server.url or ""], ["list"], ["status", "x"], ["worker"]):
        rc, out, err = await cli(*argv, "--namespace", "nosuchns", "--address", address, env=env, timeout=60)
        one_line(err, code=2, rc=rc, message="namespace 'nosuchns' does not exist")
    rc, out, _ = await cli("list", "--namespace", "nosuchns", "--address", address, "--json")
    assert rc == 2 and one_json(out)["error"]["kind"] == "namespace"


async def test_no_such_task_is_exit_2(temporal_env: Any) -> None:
    address = address_of(temporal_env)
    wid = unique("nothing-here")
    for argv in (
        ["status", wid],
        ["result", wid],
        ["result", wid, "--wait"],
        ["cancel", wid],
        ["approve", wid],
        ["answer", wid, "--response", '{"action": "decline"}'],
    ):
        rc, out, err = await cli(*argv, "--address", address)
        one_line(err, code=2, rc=rc, message=f"no such task: '{wid}'")
        rc, out, err = await cli(*argv, "--address", address, "--json")
        assert rc == 2 and one_json(out)["error"]["kind"] == "not_found", (argv, out, err)


async def test_json_error_object_on_every_exit(
    client: Client, temporal_env: Any, fastmcp_server: Peer, queue: str
) -> None:
    address = address_of(temporal_env)
    rc, out, _ = await cli("run", "slow_echo", "--json")  # usage (argparse)
    assert rc == 2 and "one of the arguments --server --url --command is required" in one_json(out)["error"]["message"]
    rc, out, _ = await cli("run", "slow_echo", "--url", "http://127.0.0.1:9/mcp", "--json", "--address", address)
    assert rc == 3 and one_json(out)["error"]["kind"] == "unreachable"
    rc, out, _ = await cli("status", "x", "--json", "--address", "127.0.0.1:9")
    assert rc == 3 and one_json(out)["error"]["kind"] == "unreachable"
    wid = unique("done")
    async with in_process_worker(client, task_queue=queue):
        await detach("slow_echo", fastmcp_server.url or "", wid, queue, address, '{"seconds": 0.1}')
        rc, _, err = await cli("result", wid, "--wait", "--address", address)
        assert rc == 0, err
    rc, out, err = await cli("cancel", wid, "--json", "--address", address)  # a finished task: exit 1, still JSON
    assert rc == 1 and "has already ended" in one_json(out)["error"]["message"] and "Traceback" not in err


async def test_status_json_agrees_with_text(
    client: Client, temporal_env: Any, fastmcp_server: Peer, queue: str
) -> None:
    address = address_of(temporal_env)
    wid = unique("status-view")
    async with in_process_worker(client, task_queue=queue):
        # Longer than any wait for two CLI runs on a loaded machine (6 s once ended first): cancelled below.
        await detach("slow_echo", fastmcp_server.url or "", wid, queue, address, '{"seconds": 120, "text": "x"}')
        text = await wait_status(wid, address, "“sleeping")
        rc, out, _ = await cli("status", wid, "--json", "--address", address)
        view = one_json(out)
        assert rc == 1 and view["status_message"] and f"“{view['status_message']}”" in text
        assert view["task_status"] in text
        await client.get_workflow_handle(wid).cancel()


# --- --args from a file or stdin; the size limit -------------------------------------------------------------------


async def test_args_from_file_and_stdin(temporal_env: Any, fastmcp_server: Peer, queue: str, tmp_path: Path) -> None:
    address = address_of(temporal_env)
    common = ["--url", fastmcp_server.url or "", "--json", "--task-queue", queue, "--address", address]
    args_file = tmp_path / "args.json"
    args_file.write_text(json.dumps({"seconds": 0.1, "text": f"from-file-{unique('f')}"}))
    rc, out, err = await cli("run", "slow_echo", "--args", f"@{args_file}", *common)
    assert rc == 0, err
    assert one_json(out)["result"]["content"][0]["text"].startswith("from-file-")
    text = f"from-stdin-{unique('s')}"
    rc, out, err = await cli(
        "run", "slow_echo", "--args", "-", *common, stdin=json.dumps({"seconds": 0.1, "text": text}).encode()
    )
    assert rc == 0, err
    assert one_json(out)["result"]["content"][0]["text"] == text
    # Over what the OS lets through argv (~128 KiB), and over the 512 KiB the task carries: refused before any
    # workflow starts, naming the limit.
    big = tmp_path / "big.json"
    big.write_text(json.dumps({"text": "x" * 600_000}))
    tool = unique("big_tool")
    rc, out, err = await cli("run", tool, "--url", fastmcp_server.url or "", "--args", f"@{big}", "--address", address)
    one_line(err, code=2, rc=rc, message="over the 524288-byte limit")
    rc, out, _ = await cli("list", "--tool", tool, "--json", "--address", address)
    assert one_json(out)["workflows"] == []


# --- servers that cannot be reached; configuration errors; activity logs --------------------------------------------


@pytest.mark.parametrize("command", ["/nonexistent/bin/server", "true"])
async def test_stdio_command_unreachable_at_start(temporal_env: Any, command: str) -> None:
    address = address_of(temporal_env)
    tool = unique("never_called")
    started = time.monotonic()
    rc, out, err = await cli("run", tool, "--command", command, "--address", address)
    line = one_line(err, code=3, rc=rc, message="MCP server unreachable at start")
    assert "no tools/call was sent" in line and time.monotonic() - started < 20
    rc, out, _ = await cli("list", "--tool", tool, "--json", "--address", address)
    assert one_json(out)["workflows"] == []  # nothing was started, so nothing can have been called


class _NotMcp(BaseHTTPRequestHandler):
    """What may answer at a URL that is not an MCP endpoint: a web page, a 404 page, a 405, a 501."""

    PAGES = {
        "/html": (200, "text/html", b"<!doctype html><html><head><title>Acme Billing Portal</title></head></html>"),
        "/missing": (404, "text/html", b"<html><head><title>404 Not Found</title></head></html>"),
        "/static": (405, "text/plain", b"Method Not Allowed"),
        "/unimplemented": (501, "text/plain", b"Not Implemented"),
    }

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        status, ctype, body = self.PAGES.get(self.path, (404, "text/plain", b"no"))
        self.send_response(status)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


async def test_a_url_that_is_not_mcp_is_refused_before_anything_starts(temporal_env: Any) -> None:
    """Issue 57: an HTML page, a 404 page, a 405 or a 501 at --url: exit 3 naming what answered, no workflow (it was
    `still SUBMITTING` for 15 s, then `rejected`, exit 1; 501 was called unreachable)."""
    address = address_of(temporal_env)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _NotMcp)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    tool = unique("never_called")
    lines = {}
    try:
        # `run` refuses before it connects to Temporal; `tools` says the same (each a few seconds of CLI start-up).
        for command, path, words in (
            ("run", "/html", "HTTP 200 text/html"),
            ("tools", "/missing", "HTTP 404 text/html"),
            ("tools", "/static", "HTTP 405 text/plain"),
            ("run", "/unimplemented", "HTTP 501 text/plain"),
        ):
            url = f"http://127.0.0.1:{server.server_address[1]}{path}"
            args = ("run", tool, "--url", url, "--address", address) if command == "run" else ("tools", "--url", url)
            rc, out, err = await cli(*args)
            lines[path] = line = one_line(err, code=3, rc=rc, message=f"{url} is not an MCP endpoint")
            print(line)
            assert f"the handshake was answered {words}" in line
            assert command == "tools" or "nothing was started" in line
        assert "'Acme Billing Portal'" in lines["/html"]  # the page's title: what answered, in its own words
    finally:
        server.shutdown()
        server.server_close()
    rc, out, _ = await cli("list", "--tool", tool, "--json", "--address", address)
    assert one_json(out)["workflows"] == []  # nothing was started, so nothing can have been called


async def test_activity_failures_stay_out_of_runs_stderr(
    temporal_env: Any, fastmcp_server: Peer, queue: str, tmp_path: Path
) -> None:
    """tools/call answered with HTTP 500: the activity fails (one line in the log), the user gets the outcome."""
    with FaultProxy(fastmcp_server.url or "") as proxy:
        proxy.add("tools/call", Status(500))
        rc, out, err = await cli(
            "run",
            "slow_echo",
            "--url",
            proxy.url,
            "--args",
            '{"seconds": 0.1}',
            "--json",
            "--task-queue",
            queue,
            "--address",
            address_of(temporal_env),
            env={"MCP_TASKS_STATE_DIR": str(tmp_path)},
        )
    assert rc == 1 and one_json(out)["outcome"] == "unknown_outcome", err[-2000:]
    assert "Traceback" not in err and "activity" not in err.lower(), err[-3000:]
    log = (tmp_path / "run.log").read_text()
    # The activity's failure is in the log file, in one line naming its type: an expected ending, not a bug
    # (issue 43; a bug keeps its traceback: tests/test_log_lines.py).
    assert "Completing activity as failed: " in log and "Traceback" not in log, log[-3000:]


async def test_unset_credential_variable_is_a_configuration_error(
    temporal_env: Any, fastmcp_server: Peer, tmp_path: Path
) -> None:
    var = "MCP_TASKS_TEST_SURELY_UNSET_TOKEN"
    env = {k: v for k, v in ENV.items() if k != var}
    config = tmp_path / "w.toml"
    config.write_text(
        f'[servers.billing]\nurl = "{fastmcp_server.url}"\n'
        f'[servers.billing.headers]\nAuthorization = {{ env = "{var}" }}\n'
    )
    address = address_of(temporal_env)
    for argv in (
        ["worker", "--config", str(config)],
        ["run", "slow_echo", "--server", "billing", "--config", str(config)],
    ):
        proc = await asyncio.create_subprocess_exec(
            *CLI,
            *argv,
            "--address",
            address,
            cwd=REPO_ROOT,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={**env, "MCP_TASKS_STATE_DIR": str(tmp_path)},
        )
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        one_line(
            err.decode(),
            code=2,
            rc=proc.returncode or 0,
            message=f'servers.billing.headers.Authorization = {{ env = "{var}" }}: ${var} is not set',
        )


# --- no silent surprises ------------------------------------------------------------------------------------------


async def test_same_command_again_says_it_is_a_stored_outcome(
    temporal_env: Any, fastmcp_server: Peer, queue: str
) -> None:
    address = address_of(temporal_env)
    argv = [
        "run",
        "slow_echo",
        "--url",
        fastmcp_server.url or "",
        "--args",
        json.dumps({"seconds": 0.1, "text": unique("again")}),
        "--task-queue",
        queue,
        "--address",
        address,
    ]
    rc, _, err = await cli(*argv)
    assert rc == 0 and "STORED" not in err, err
    rc, out, err = await cli(*argv, "--json")
    assert rc == 0 and one_json(out)["outcome"] == "completed"
    assert "this is its STORED outcome, no new tools/call was sent" in err and "--id NEW" in err
    # The same id for a different request: refused, never answered with the first request's outcome.
    wid = one_json(out)["workflow_id"]
    rc, out, err = await cli(
        "run",
        "slow_echo",
        "--url",
        fastmcp_server.url or "",
        "--args",
        '{"seconds": 999999}',
        "--id",
        wid,
        "--json",
        "--task-queue",
        queue,
        "--address",
        address,
    )
    one_line(err, code=2, rc=rc, message=f"workflow id '{wid}' is already used by a different request")
    assert one_json(out)["error"]["kind"] == "request_mismatch"


async def test_request_mismatch_is_a_typed_error(client: Client, fastmcp_server: Peer) -> None:
    queue = unique("nobody")  # no worker: the running task's request is read from its start event
    wid = unique("mismatch")
    request = McpTaskRequest(server=fastmcp_server.endpoint, tool="charge_card", arguments={"amount_cents": 1000})
    handle = await start_mcp_task(client, request, workflow_id=wid, task_queue=queue)
    assert (await start_mcp_task(client, request, workflow_id=wid, task_queue=queue)).id == wid  # same: attaches
    with pytest.raises(RequestMismatch) as info:
        await start_mcp_task(
            client,
            request.model_copy(update={"arguments": {"amount_cents": 999999}}),
            workflow_id=wid,
            task_queue=queue,
        )
    assert info.value.workflow_id == wid and info.value.existing_digest != info.value.request_digest
    with pytest.raises(RequestMismatch):
        await start_mcp_task(
            client, request.model_copy(update={"tool": "slow_echo"}), workflow_id=wid, task_queue=queue
        )
    await handle.terminate()


async def test_idempotency_key_help_and_behaviour_agree(
    client: Client, temporal_env: Any, fastmcp_server: Peer
) -> None:
    address = address_of(temporal_env)
    rc, out, _ = await cli("run", "--help")
    assert rc == 0 and "mcp-task-KEY" in re.sub(r"\s+", " ", out)
    key = unique("order")
    rc, out, err = await cli(
        "run",
        "slow_echo",
        "--url",
        fastmcp_server.url or "",
        "--idempotency-key",
        key,
        "--detach",
        "--json",
        "--task-queue",
        unique("nobody"),
        "--address",
        address,
        env=trusted_env(),
    )
    assert rc == 0 and one_json(out) == {"workflow_id": f"mcp-task-{key}"}, err
    rc, _, err = await cli("status", key, "--address", address)
    one_line(err, code=2, rc=rc, message=f"did you mean mcp-task-{key}")
    rc, _, err = await cli("result", f"mcp-task-{key}", "--address", address)
    assert rc == 1 and "still running" in err
    await client.get_workflow_handle(f"mcp-task-{key}").terminate()


# --- answer: a terminal session -------------------------------------------------------------------------------------


class Pty:
    """``mcp-tasks ARGS`` on a pseudo-terminal of its own (its controlling terminal, so Ctrl-C is a real SIGINT)."""

    def __init__(self, *args: str) -> None:
        import pty

        self.master, slave = pty.openpty()

        def controlling_tty() -> None:
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        self.proc = subprocess.Popen(
            [*CLI, *args],
            cwd=REPO_ROOT,
            env=ENV,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            start_new_session=True,
            preexec_fn=controlling_tty,
        )
        os.close(slave)
        self.seen = ""

    def expect(self, pattern: str, timeout_s: float = 30) -> str:
        """Read until ``pattern`` (a regex) appears in what came after the last match."""
        import select

        deadline = time.monotonic() + timeout_s
        while True:
            match = re.search(pattern, self.seen)
            if match:
                before, self.seen = self.seen[: match.end()], self.seen[match.end() :]
                return before
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {pattern!r} within {timeout_s}s; got: {self.seen[-2000:]!r}")
            ready, _, _ = select.select([self.master], [], [], min(left, 0.5))
            if ready:
                try:
                    chunk = os.read(self.master, 4096)
                except OSError:  # the process exited and closed the terminal
                    chunk = b""
                if not chunk and self.proc.poll() is not None:
                    raise AssertionError(f"exited {self.proc.returncode} before {pattern!r}: {self.seen[-2000:]!r}")
                self.seen += chunk.decode("utf-8", "replace")

    def send(self, text: str) -> None:
        os.write(self.master, text.encode())

    def wait(self, timeout_s: float = 30) -> int:
        """The exit code; a process still running ``timeout_s`` later is killed and fails the test."""
        try:
            code = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            self.rest()
            printed = self.seen[-2000:]
            raise AssertionError(f"still running {timeout_s}s later (killed); it printed {printed!r}") from None
        finally:
            self.rest()
            with contextlib.suppress(OSError):
                os.close(self.master)
        return code

    def rest(self) -> None:
        """What is left to read; bounded, since a process that lives on keeps the terminal open."""
        import select

        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                ready, _, _ = select.select([self.master], [], [], 0.5)
                chunk = os.read(self.master, 4096) if ready else b""
            except (OSError, ValueError):
                return
            if not chunk:
                return
            self.seen += chunk.decode("utf-8", "replace")


async def test_answer_reprompts_a_required_boolean(
    client: Client, temporal_env: Any, fastmcp_server: Peer, queue: str
) -> None:
    address = address_of(temporal_env)
    wid = unique("pty")
    async with in_process_worker(client, task_queue=queue):
        await detach("ask_user", fastmcp_server.url or "", wid, queue, address)
        status = await wait_status(wid, address, "needs input")
        assert not any(line.endswith(" · ") or line.endswith(" ·") for line in status.splitlines()), status
        # Without a terminal and without --response: refused, pointing at --response.
        rc, _, err = await cli("answer", wid, "--address", address, stdin=b"accept\nacct\nmaybe\n")
        one_line(err, code=2, rc=rc, message="give the answer with --response")

        def dialog() -> None:  # blocking terminal I/O: in a thread, so this loop's worker keeps running
            term = Pty("answer", wid, "--address", address)
            try:
                term.expect(r"Approve payment of 10 EUR\?")
                term.expect(r"action \[accept/decline/cancel\]")
                term.send("\r")
                term.expect(r"Account: Account to charge")  # the field's description
                term.expect(r"Account \(string\) \(optional, Enter skips\): ")
                term.send("acct-7\r")
                term.expect(r"Approve \[y/n\] \(required\): ")
                term.send("maybe\r")
                term.expect(r"'maybe': answer y or n")
                term.expect(r"Approve \[y/n\] \(required\): ")  # asked again
                term.send("\r")
                term.expect(r"Approve is required")
                term.expect(r"Approve \[y/n\] \(required\): ")  # and again
                term.send("y\r")
                term.expect(r"answered ")
                assert term.wait() == 0, term.seen
            finally:
                if term.proc.poll() is None:
                    term.proc.kill()

        await asyncio.to_thread(dialog)
        rc, out, _ = await cli("result", wid, "--wait", "--json", "--address", address)
        assert rc == 0 and one_json(out)["result"]["content"][0]["text"] == "approved account=acct-7"


async def test_answer_stops_on_the_first_ctrl_c(
    client: Client, temporal_env: Any, fastmcp_server: Peer, queue: str
) -> None:
    address = address_of(temporal_env)
    wid = unique("ctrlc")
    async with in_process_worker(client, task_queue=queue):
        await detach("ask_user", fastmcp_server.url or "", wid, queue, address)
        await wait_status(wid, address, "needs input")

        def dialog() -> str:  # in a thread, so this loop's worker keeps running
            term = Pty("answer", wid, "--address", address)
            try:
                term.expect(r"action \[accept/decline/cancel\]")
                term.send("\r")
                term.expect(r"Account \(string\)")
                term.send("\x03")  # one Ctrl-C
                assert term.wait(10) == 130, term.seen
                return term.seen
            finally:
                if term.proc.poll() is None:
                    term.proc.kill()

        seen = await asyncio.to_thread(dialog)
        assert "Traceback" not in seen and "interrupted; nothing more was sent" in seen
        assert "needs input" in await wait_status(wid, address, "needs input")  # nothing was answered
        rc, _, err = await cli("answer", wid, "--response", '{"action": "decline"}', "--address", address)
        assert rc == 0, err
        rc, out, _ = await cli("result", wid, "--wait", "--json", "--address", address)
        assert rc == 0 and one_json(out)["result"]["content"][0]["text"] == "declined"


# --- approval and finished tasks are searchable -------------------------------------------------------------------


async def test_awaiting_approval_is_visible_and_searchable(temporal_env: Any, fastmcp_server: Peer, queue: str) -> None:
    address = address_of(temporal_env)
    wid = unique("approval")
    proc = await asyncio.create_subprocess_exec(
        *CLI,
        "run",
        "rate_limited",
        "--url",
        fastmcp_server.url or "",
        "--replay",
        "with_approval",
        "--id",
        wid,
        "--json",
        "--task-queue",
        queue,
        "--address",
        address,
        cwd=REPO_ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=ENV,
    )
    assert proc.stderr is not None and proc.stdout is not None
    seen = ""
    try:
        # The hint carries the options this command was given, so it works as printed (issue 43).
        while f"mcp-tasks approve {wid} --address {address}" not in seen:
            line = await asyncio.wait_for(proc.stderr.readline(), 60)
            assert line, f"run ended before waiting for approval: {seen}"
            seen += line.decode()
        assert "AWAITING_APPROVAL" in seen and "the last call ended tool_error" in seen
        await listed_under("awaiting_approval", wid, address, timeout_s=10)
        rc, out, _ = await cli("status", wid, "--address", address)
        assert rc == 1 and f"mcp-tasks approve {wid} --address {address}" in out
        rc, _, err = await cli("cancel", wid, "--address", address)
        assert rc == 0, err
        out_b, err_b = await asyncio.wait_for(proc.communicate(), 60)
    finally:
        if proc.returncode is None:
            proc.kill()
    assert proc.returncode == 1 and one_json(out_b.decode())["outcome"] == "tool_error"
    assert "Traceback" not in seen + err_b.decode()


async def test_a_finished_task_is_listed_under_its_outcome(temporal_env: Any, queue: str) -> None:
    """A stdio server killed mid-task: the task ends `lost` with the server's last status `working`; it is found
    under `lost`, never under `working`."""
    node = require_ts_peer()
    address = address_of(temporal_env)
    wid = unique("lost")
    proc = await asyncio.create_subprocess_exec(
        *CLI,
        "run",
        "cancellable",
        "--command",
        f"{node} {TS_SERVER} --transport stdio",
        "--args",
        '{"seconds": 60}',
        "--id",
        wid,
        "--task-queue",
        queue,
        "--address",
        address,
        cwd=REPO_ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=ENV,
    )
    assert proc.stderr is not None
    try:
        seen = ""
        while "WORKING" not in seen:
            line = await asyncio.wait_for(proc.stderr.readline(), 60)
            assert line, seen
            seen += line.decode()
        children = set()
        for task in Path(f"/proc/{proc.pid}/task").iterdir():
            children |= {int(c) for c in (task / "children").read_text().split()}
        # The stdio server the in-process worker spawned (the pre-flight handshake's own child has ended).
        children = {
            c
            for c in children
            if b"server.mjs" in Path(f"/proc/{c}/cmdline").read_bytes()
            and ") Z " not in Path(f"/proc/{c}/stat").read_text()
        }
        assert len(children) == 1, children
        os.kill(children.pop(), signal.SIGKILL)
        out_b, err_b = await asyncio.wait_for(proc.communicate(), 60)
    finally:
        if proc.returncode is None:
            proc.kill()
    assert proc.returncode == 1 and b"lost:" in out_b, (out_b, err_b)
    for status, found in (("lost", True), ("working", False)):
        rc, out, _ = await cli("list", "--status", status, "--json", "--address", address)
        assert rc == 0 and any(r["workflow_id"] == wid for r in one_json(out)["workflows"]) is found, status
    rc, out, _ = await cli("list", "--address", address)
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["WORKFLOW", "ID", "SERVER", "TOOL"] and "STATUS" in lines[0]
    row = next(line for line in lines if line.startswith(wid))
    assert row.split()[1] == node and row.split()[3] == "lost"  # the server column, then the outcome as status


# --- help ------------------------------------------------------------------------------------------------------------


async def test_help_is_plain_and_complete() -> None:
    from mcp_temporal_tasks.worker.cli import build_parser

    commands = [
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
    results = await asyncio.gather(cli("--help"), *(cli(c, "--help") for c in commands))
    for (rc, out, _), name in zip(results, ["(top)", *commands]):
        assert rc == 0 and "``" not in out and ":class:" not in out, name
    parser = build_parser()
    sub = next(a for a in parser._actions if a.choices and isinstance(a.choices, dict))
    for name, p in sub.choices.items():
        for action in p._actions:
            assert action.help, f"mcp-tasks {name} {'/'.join(action.option_strings) or action.dest} has no help text"
    rc, out, _ = await cli("answer", "--help")
    assert "--response JSON" in out and "--json" in out


async def test_demo_server_prints_listening_with_a_newline() -> None:
    proc = await asyncio.create_subprocess_exec(
        *CLI,
        "demo-server",
        "--port",
        "0",
        cwd=REPO_ROOT,
        env=ENV,
        stderr=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.DEVNULL,
    )
    assert proc.stderr is not None
    try:
        line = await asyncio.wait_for(proc.stderr.readline(), 30)
        assert re.fullmatch(rb"LISTENING http://127\.0\.0\.1:\d+/mcp\n", line), line
    finally:
        proc.terminate()
        await proc.wait()


# --- the embedded Temporal --------------------------------------------------------------------------------------


def _default_port_free() -> None:
    from mcp_temporal_tasks.worker.devserver import port_open

    if port_open("127.0.0.1", 7233) or port_open("127.0.0.1", 8233):
        pytest.fail("something already listens on localhost:7233/8233; these tests need the default address free")


@pytest.mark.xdist_group("embedded-temporal")  # localhost:7233/8233: one such test at a time (tests/conftest.py)
async def test_detach_refuses_an_embedded_server(fastmcp_server: Peer, tmp_path: Path) -> None:
    _default_port_free()
    rc, out, err = await cli(
        "run",
        "slow_echo",
        "--url",
        fastmcp_server.url or "",
        "--detach",
        env={"MCP_TASKS_STATE_DIR": str(tmp_path), "TEMPORAL_ADDRESS": "", **trusted_env()},
    )
    one_line(err, code=2, rc=rc, message="--detach needs a Temporal that outlives this command")
    assert "mcp-tasks dev-server" in err and not (tmp_path / "temporal.db").exists()


@pytest.mark.xdist_group("embedded-temporal")
async def test_demo_and_dev_server_share_one_state(tmp_path: Path) -> None:
    """The demo alone: its hints work after it exits. With `dev-server` up: the demo (twice) uses it, and a second
    dev-server on the same state file is refused naming the holder."""
    _default_port_free()
    env = {"MCP_TASKS_STATE_DIR": str(tmp_path), "TEMPORAL_ADDRESS": ""}
    rc, out, err = await cli("demo", env=env, timeout=180)
    assert rc == 0, err[-3000:]
    assert "mcp-tasks dev-server" in out and "mcp-tasks demo --keep" in out and "Traceback" not in err
    assert re.search(r"report +monthly_report +completed +job exp-\S+: 3 rows", out), out
    first_ids = set(re.findall(r"/workflows/(demo-build-\w+)", out))
    assert len(first_ids) == 1

    server = subprocess.Popen(
        [*CLI, "dev-server"], cwd=REPO_ROOT, env={**ENV, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        assert server.stderr is not None
        line = await asyncio.wait_for(asyncio.to_thread(line_with, server.stderr, "Temporal dev server at "), 60)
        assert "Temporal dev server at 127.0.0.1:7233" in line, line
        # The hint printed by the demo that has exited works now: its tasks are there.
        rc, listed, err = await cli("list", "--json", env=env)
        assert rc == 0 and first_ids <= {r["workflow_id"] for r in one_json(listed)["workflows"]}, err
        for _ in range(2):
            rc, out, err = await cli("demo", env=env, timeout=180)
            assert rc == 0, err[-3000:]
            assert "using the Temporal already serving at localhost:7233" in err and "embedded Temporal at" not in err
            assert re.search(r"list: +\S*mcp-tasks list\n", out), out
            ids = set(re.findall(r"/workflows/(demo-build-\w+)", out))
            rc, listed, _ = await cli("list", "--json", env=env)  # the hint, after the demo exited
            assert ids <= {r["workflow_id"] for r in one_json(listed)["workflows"]}
        rc, out, err = await cli("dev-server", "--port", "17299", "--ui-port", "17298", env=env)
        line = one_line(err, code=2, rc=rc, message=f"the state file {tmp_path / 'temporal.db'} is in use")
        assert f"pid {server.pid}" in line and "127.0.0.1:7233" in line
    finally:
        stop_process(server, signal.SIGINT)


# --- the docs agree with behaviour -----------------------------------------------------------------------------------


async def test_unknown_tool_is_what_the_docs_say(temporal_env: Any, fastmcp_server: Peer, queue: str) -> None:
    rc, out, err = await cli(
        "run",
        unique("no_such_tool"),
        "--url",
        fastmcp_server.url or "",
        "--json",
        "--task-queue",
        queue,
        "--address",
        address_of(temporal_env),
    )
    outcome = one_json(out)
    # The server's tools/list does not list it: refused before tools/call was sent, nothing counted; bad input.
    assert rc == 2 and (outcome["outcome"], outcome["classification"]) == ("rejected", "permanent"), err[-2000:]
    assert outcome["operation_attempts"] == [] and "UnknownTool" in outcome["reason"]
    from tests.doc_pages import page

    row = next(line for line in page("faults.md").splitlines() if line.startswith("| `rejected` |"))
    assert "`tools/list` does not list (`UnknownTool`, `permanent`)" in row and "`tools/call sent: 0`" in row
    # Every option of every command is on the CLI page.
    from mcp_temporal_tasks.worker.cli import build_parser

    cli_section = page("cli.md")
    sub = next(a for a in build_parser()._actions if isinstance(a.choices, dict))
    for name, parser in sub.choices.items():
        assert re.search(rf"(mcp-tasks|\||·) {name}\b", cli_section), name
        for action in parser._actions:
            for option in action.option_strings:
                if option not in ("-h", "--help"):
                    assert option in cli_section, f"mcp-tasks {name} {option} is not documented in docs/cli.md"
