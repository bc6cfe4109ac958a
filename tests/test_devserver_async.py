"""``DevServer.start_async``: the CLI's async commands (``run``'s embedded Temporal, ``dev-server``, ``demo``) start
Temporal without blocking their event loop; the server serves when it returns, as with ``start``."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from temporalio.client import Client

from mcp_temporal_tasks.worker.devserver import DevServer, free_port
from tests.temporal_harness import unique


async def test_start_async_keeps_the_loop_running_and_returns_once_it_serves(tmp_path: Path) -> None:
    gaps: list[float] = []
    stop = asyncio.Event()

    async def ticker() -> None:
        last = time.monotonic()
        while not stop.is_set():
            await asyncio.sleep(0.02)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    ticking = asyncio.create_task(ticker())
    server = DevServer(db=tmp_path / "async.db", port=free_port(), ui_port=None)
    began = time.monotonic()
    try:
        await server.start_async(timeout_s=120)
        took = time.monotonic() - began
        stop.set()
        await ticking
        # It served at once: no retries on our side.
        client = await Client.connect(server.address)
        handle = await client.start_workflow("Anything", id=unique("async-ready"), task_queue="nobody")
        assert (await handle.describe()).id == handle.id
    finally:
        stop.set()
        server.stop()
    print(f"start_async took {took:.1f} s; {len(gaps)} ticks, longest gap {max(gaps):.3f} s")
    # Blocking starts held the loop for the whole start (seconds: each probe a `temporal` process run to its end).
    # Loose bound for a loaded machine: the loop turned over many times, never stalled near a probe's length.
    # On a quiet machine the start takes under half a second: a few ticks are still owed, a blocked loop makes one.
    assert len(gaps) >= max(3, took / 0.5)
    assert max(gaps) < 0.5 * took
