"""``DevServer.stop_async``: the wait for the server to exit runs on the loop, not in it (no Temporal needed: the child
is a process that takes half a second to exit on SIGTERM, as Temporal takes a moment to stop); and a server not ready
in time is stopped, by either start, with its state file released."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mcp_temporal_tasks.worker.devserver import DevServer, DevServerError, free_port, state_holder

pytestmark = pytest.mark.fast

SLOW_TO_STOP = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, lambda *_: (time.sleep(0.5), sys.exit(0)))\n"
    "print('up', flush=True)\n"
    "time.sleep(60)\n"
)


async def test_stop_async_keeps_the_loop_serving_and_releases_the_state_file(tmp_path: Path) -> None:
    server = DevServer(db=tmp_path / "t.db", port=1, ui_port=None)
    server._lock()  # what start() takes first: the state file, held until the server is stopped
    server.proc = subprocess.Popen([sys.executable, "-c", SLOW_TO_STOP], stdout=subprocess.PIPE)
    assert server.proc.stdout is not None and server.proc.stdout.readline() == b"up\n"
    assert state_holder(server.db) is not None
    proc = server.proc
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.02)

    ticker = asyncio.create_task(tick())
    began = time.monotonic()
    await server.stop_async()
    took = time.monotonic() - began
    ticker.cancel()
    assert proc.returncode == 0  # it was asked to stop (SIGTERM), not killed
    assert took >= 0.4
    # The loop went on: ~25 ticks in 0.5 s; a blocking wait would have let through at most one.
    assert ticks >= 5, ticks
    assert server.proc is None and state_holder(server.db) is None
    await server.stop_async()  # stopping a stopped server is a no-op, as stop() is


@pytest.mark.parametrize("way", ["sync", "async"])
async def test_a_server_not_ready_in_time_is_stopped_and_its_state_file_released(tmp_path: Path, way: str) -> None:
    # timeout_s=0: the first probe finds the port still closed, so the deadline has passed at the first check.
    server = DevServer(db=tmp_path / "t.db", port=free_port(), ui_port=None)
    with pytest.raises(DevServerError, match="did not become ready"):
        if way == "async":
            await server.start_async(timeout_s=0)
        else:
            server.start(timeout_s=0)
    assert server.proc is None and state_holder(server.db) is None
