"""Every stdio child we start ends, whatever it does (activities/wire/stdio.py): real processes, real signals, pids.

The MCP spec's shutdown: stdin closed, wait, SIGTERM, wait, SIGKILL (EOF_WAIT_S + TERM_WAIT_S + KILL_WAIT_S). The
children here are servers on the official Python SDK (``MCPServer`` over stdio) made stubborn: one that ignores its
stdin's end (a thread keeps it alive), one that ignores SIGTERM too. And the reference server-everything (the
TypeScript SDK's), which stays alive after EOF on its own (its task store's timers), through ``mcp-tasks run``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from mcp_temporal_tasks.activities.wire import stdio
from mcp_temporal_tasks.activities.wire.stdio import EOF_WAIT_S, SHUTDOWN_BOUND_S, TERM_WAIT_S, StdioChild
from mcp_temporal_tasks.activities.wire.stdio_transport import StdioTransport
from mcp_temporal_tasks.protocol.wire_errors import TransportError
from tests.peers.harness import TS_DIR, require_ts_peer
from tests.temporal_harness import CLI, ENV, REPO_ROOT, address_of, unique

#: A server on the official SDK; argv[1]: "plain" (ends on EOF), "ignore-eof", "ignore-term" (EOF and SIGTERM),
#: "leave-child" (ends on EOF but leaves a `sleep` in its process group, its pid written to argv[2]).
STUBBORN = r"""
import os, signal, subprocess, sys, threading, time
from mcp.server.mcpserver import MCPServer
mode = sys.argv[1]
if mode == "ignore-term":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if mode in ("ignore-eof", "ignore-term"):
    threading.Thread(target=lambda: time.sleep(3600), daemon=False).start()  # alive after stdin's end
if mode == "leave-child":
    left = subprocess.Popen(["sleep", "300"])
    open(sys.argv[2], "w").write(str(left.pid))
app = MCPServer("stubborn")

@app.tool()
def echo(text: str) -> str:
    return text

app.run("stdio")
"""

EVERYTHING = TS_DIR / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie is not: it has ended and waits to be reaped)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


def group_alive(pgid: int) -> bool:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (FileNotFoundError, ProcessLookupError):
                continue
            if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
                return True
    return False


def children_of(pid: int) -> set[int]:
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    found.add(int(entry.name))
            except (FileNotFoundError, ProcessLookupError, ValueError):
                continue
    return found


async def stubborn(tmp_path: Path, mode: str, *extra: str) -> StdioTransport:
    script = tmp_path / "stubborn.py"
    script.write_text(STUBBORN)
    transport = StdioTransport([sys.executable, str(script), mode, *extra])
    await transport.start()
    assert await transport.request("ping", None) == {}  # a live MCP session, answered by the SDK's server
    return transport


def pid_of(transport: StdioTransport) -> int:
    assert transport._child is not None
    return transport._child.pid


async def closed_in(transport: StdioTransport) -> float:
    started = time.monotonic()
    await transport.aclose()
    return time.monotonic() - started


async def test_a_child_that_ends_on_eof_is_not_signalled(tmp_path: Path) -> None:
    transport = await stubborn(tmp_path, "plain")
    pid = pid_of(transport)
    took = await closed_in(transport)
    assert transport._child is not None and transport._child.returncode == 0, transport._child.returncode
    assert took < EOF_WAIT_S and not alive(pid)


async def test_a_child_that_ignores_eof_is_terminated_after_the_grace(tmp_path: Path) -> None:
    transport = await stubborn(tmp_path, "ignore-eof")
    pid = pid_of(transport)
    took = await closed_in(transport)
    # SIGTERM ended it (not SIGKILL: the return code says which); the clock only bounds the whole shutdown, since a
    # loaded machine may take longer than TERM_WAIT_S to reap it.
    assert transport._child is not None and transport._child.returncode == -signal.SIGTERM
    assert EOF_WAIT_S <= took < SHUTDOWN_BOUND_S + 1.0, took
    assert not alive(pid) and not group_alive(pid)


async def test_a_child_that_ignores_eof_and_sigterm_is_killed_within_the_bound(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    transport = await stubborn(tmp_path, "ignore-term")
    pid = pid_of(transport)
    with caplog.at_level(logging.WARNING, logger="mcp_temporal_tasks"):
        took = await closed_in(transport)
    assert transport._child is not None and transport._child.returncode == -signal.SIGKILL
    assert [r for r in caplog.records if "ignored EOF and SIGTERM" in r.getMessage()], caplog.text  # said, once
    assert EOF_WAIT_S + TERM_WAIT_S <= took < SHUTDOWN_BOUND_S, took
    assert not alive(pid) and not group_alive(pid)


async def test_what_a_child_left_in_its_process_group_ends_with_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    marker = tmp_path / "left.pid"
    transport = await stubborn(tmp_path, "leave-child", str(marker))
    pid, left = pid_of(transport), int(marker.read_text())
    assert alive(left)
    with caplog.at_level(logging.WARNING, logger="mcp_temporal_tasks"):
        took = await closed_in(transport)
    # The server ended on EOF; its `sleep` did not, so the group got SIGTERM after the grace, and that was enough:
    # no SIGKILL (which would log "ignored EOF and SIGTERM"). Said by the log, not by the clock: a loaded machine
    # can take longer than TERM_WAIT_S to reap the group, and the bound below is the whole shutdown's.
    assert transport._child is not None and transport._child.returncode == 0
    assert not [r for r in caplog.records if "ignored EOF and SIGTERM" in r.getMessage()], caplog.text
    assert EOF_WAIT_S <= took < SHUTDOWN_BOUND_S + 1.0, took
    assert not alive(left) and not group_alive(pid)


async def test_a_close_cut_short_kills_the_child_at_once(tmp_path: Path) -> None:
    transport = await stubborn(tmp_path, "ignore-term")
    pid = pid_of(transport)
    closing = asyncio.create_task(transport.aclose())
    await asyncio.sleep(0.3)
    closing.cancel()
    started = time.monotonic()
    with pytest.raises(asyncio.CancelledError):
        await closing
    await _until(lambda: not alive(pid), 1.0)
    assert time.monotonic() - started < 1.0 and not group_alive(pid)


async def test_sigkill_of_our_process_leaves_no_child(tmp_path: Path) -> None:
    """A parent process (ours, as a worker would be) starts a child that ignores EOF and SIGTERM, then is SIGKILLed:
    the child goes with it (PR_SET_PDEATHSIG), it is not left under PID 1."""
    script = tmp_path / "stubborn.py"
    script.write_text(STUBBORN)
    parent = (
        f"import asyncio, sys\nfrom mcp_temporal_tasks.activities.wire.stdio import StdioChild\n"
        f"async def main():\n"
        f"    child = await StdioChild.start([sys.executable, {str(script)!r}, 'ignore-term'])\n"
        f"    print(child.pid, flush=True)\n"
        f"    await asyncio.sleep(60)\n"
        f"asyncio.run(main())\n"
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", parent, cwd=REPO_ROOT, env=ENV, stdout=asyncio.subprocess.PIPE
    )
    assert proc.stdout is not None
    child = int(await asyncio.wait_for(proc.stdout.readline(), 20))
    assert alive(child)
    proc.send_signal(signal.SIGKILL)
    await proc.wait()
    await _until(lambda: not alive(child), 2.0)
    assert not alive(child), f"child {child} outlived its parent's SIGKILL"


async def test_a_command_that_cannot_start_is_refused_before_anything_is_sent(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-server")
    transport = StdioTransport([missing])
    with pytest.raises(TransportError) as caught:
        await transport.start()
    assert caught.value.sent is False and "no-such-server" in caught.value.message

    def cmdline(pid: int) -> str:
        try:
            return Path(f"/proc/{pid}/cmdline").read_bytes().decode("utf-8", "replace")
        except OSError:
            return ""

    # The shim that could not become it is not kept (other tests of this worker process may hold children).
    assert not [pid for pid in stdio.live_pids() if missing in cmdline(pid)]


#: In a fresh interpreter: open a stdio transport and say which thread imported the ``mcp`` package.
SDK_IMPORT_PROBE = r"""
import asyncio, sys, threading
where = []
sys.addaudithook(lambda event, args: where.append(threading.current_thread() is threading.main_thread())
                 if event == "import" and args[0] == "mcp" and not where else None)
from mcp_temporal_tasks.activities.wire.session import WireSession
from mcp_temporal_tasks.protocol.tasks import Endpoint
assert "mcp" not in sys.modules, "the wire imported the mcp SDK before a connection needed it"
async def main():
    child = [sys.executable, "-c", "import sys; sys.stdin.read()"]
    transport = await WireSession._open_transport(Endpoint(command=child))
    await transport.aclose()
asyncio.run(main())
print("event loop" if where == [True] else "thread" if where == [False] else "never")
"""


def test_the_first_stdio_child_imports_the_sdk_off_the_event_loop() -> None:
    """``mcp``'s package imports the SDK's whole client and server: a second or more of CPU on a loaded machine. On
    the event loop, every heartbeat of the worker waits for it: a start with a 2 s heartbeat timeout timed out
    spawning its stdio child (ci22). The first stdio connection imports it in a thread instead."""
    out = subprocess.run(
        [sys.executable, "-c", SDK_IMPORT_PROBE], capture_output=True, text=True, timeout=60, cwd=REPO_ROOT, env=ENV
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "thread", out.stdout


async def test_a_line_over_the_bound_is_skipped_and_the_next_one_read(tmp_path: Path) -> None:
    script = (
        "import sys\nsys.stdout.write('x' * (40 << 20))\n"
        'print()\nprint(\'{"jsonrpc": "2.0", "id": 1, "result": {}}\', flush=True)\n'
    )
    child = await StdioChild.start([sys.executable, "-c", script])
    items: list[Any] = [item async for item in child.messages()]
    await child.aclose()
    assert isinstance(items[0], ValueError) and "over" in str(items[0])
    assert len(items) == 2 and items[1].model_dump(exclude_unset=True)["id"] == 1


async def _until(check: Any, within: float) -> None:
    deadline = time.monotonic() + within
    while not check() and time.monotonic() < deadline:
        await asyncio.sleep(0.02)


# --- the reference server through `mcp-tasks run` ----------------------------------------------------------------


class RunProcess:
    """`mcp-tasks run` as a process: its output lines with the time each arrived, and every child it started."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.lines: list[tuple[float, str, str]] = []  # (monotonic, stream, line)
        self.children: set[int] = set()

    async def _pump(self, stream: asyncio.StreamReader, name: str) -> None:
        while line := await stream.readline():
            self.lines.append((time.monotonic(), name, line.decode(errors="replace").rstrip("\n")))

    async def _watch(self) -> None:
        while self.proc.returncode is None:
            self.children |= children_of(self.proc.pid)
            await asyncio.sleep(0.05)

    async def finish(self, timeout: float) -> int:
        assert self.proc.stdout is not None and self.proc.stderr is not None
        await asyncio.wait_for(
            asyncio.gather(
                self._pump(self.proc.stdout, "out"),
                self._pump(self.proc.stderr, "err"),
                self.proc.wait(),
                self._watch(),
            ),
            timeout,
        )
        return self.proc.returncode if self.proc.returncode is not None else -1

    def text(self, stream: str) -> str:
        return "\n".join(line for _, s, line in self.lines if s == stream)

    def first(self, needle: str) -> float:
        return next(t for t, _, line in self.lines if needle in line)


async def start_run(address: str, wid: str, *extra: str) -> RunProcess:
    require_ts_peer()
    assert EVERYTHING.is_file(), f"{EVERYTHING} is missing: run npm ci in tests/peers/ts"
    proc = await asyncio.create_subprocess_exec(
        *CLI,
        "run",
        "simulate-research-query",
        "--command",
        f"node {EVERYTHING} stdio",
        "--args",
        json.dumps({"topic": "x"}),
        "--id",
        wid,
        "--address",
        address,
        *extra,
        cwd=REPO_ROOT,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=ENV,
    )
    return RunProcess(proc)


def no_child_left(run: RunProcess) -> None:
    assert run.children, "`run` started no child: the test saw nothing"
    left = [pid for pid in run.children if alive(pid) or group_alive(pid)]
    assert not left, f"children of `run` still alive after it exited: {left}"


async def test_server_everything_over_stdio_through_run_exits_with_the_outcome(temporal_env: Any) -> None:
    wid = unique("everything")
    run = await start_run(address_of(temporal_env), wid)
    code = await run.finish(60)
    exited = time.monotonic()
    assert code == 0, run.text("err")[-3000:]
    assert "completed: simulate-research-query" in run.text("out") and "Research Report: x" in run.text("out")
    desc = await temporal_env.client.get_workflow_handle(wid).describe()
    assert desc.close_time is not None
    # The task's completion (the workflow's close, by the server's clock = ours) to the outcome on stdout, and exit.
    closed_ago = (datetime.now(UTC) - desc.close_time).total_seconds()
    completed_at = exited - closed_ago
    printed_at = run.first("completed: simulate-research-query")
    assert printed_at - completed_at < 10, printed_at - completed_at
    assert exited - completed_at < 10, exited - completed_at
    no_child_left(run)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
async def test_an_interrupt_mid_task_ends_run_within_5_s_and_leaves_no_child(
    temporal_env: Any, sig: signal.Signals
) -> None:
    run = await start_run(address_of(temporal_env), unique("everything-int"))
    finished = asyncio.create_task(run.finish(60))
    deadline = time.monotonic() + 40
    while not any("WORKING" in line for _, _, line in run.lines) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert any("WORKING" in line for _, _, line in run.lines), run.text("err")[-2000:]
    run.proc.send_signal(sig)
    signalled = time.monotonic()
    code = await finished
    took = time.monotonic() - signalled
    assert code == 130 and took < 5.0, (code, took, run.text("err")[-2000:])
    no_child_left(run)
