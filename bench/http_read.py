"""What one ``tasks/get`` costs the worker's CPU on the wire: the kept-alive path against httpx.

Reads a task from the bench's MCP server (the real fastmcp runtime; ``--sse`` for its SSE replies instead of JSON)
through :class:`HttpTransport` ``--reads`` times each way and prints the process CPU per read. No Temporal here:
the part of an idle poll that is ours.

    python -m bench.http_read [--reads 3000] [--sse]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import queue
import signal
import subprocess
import sys
import threading
import time

from mcp_temporal_tasks.activities.wire import Endpoint, McpTaskClient
from mcp_temporal_tasks.activities.wire.keepalive import SWITCH


async def cpu_per_read(url: str, reads: int, *, kept_alive: bool) -> tuple[float, int]:
    os.environ[SWITCH] = "1" if kept_alive else "0"
    client = await McpTaskClient.connect(Endpoint(url=url))
    try:
        start = await client.start("slow_echo", {"seconds": 600, "text": "bench"})
        assert start.task is not None
        await client.get(start.task.task_id)  # the first read is always httpx's
        t0 = time.process_time()
        for _ in range(reads):
            state = await client.get(start.task.task_id)
            assert state.status == "working", state.status
        spent = time.process_time() - t0
        path = getattr(client.transport, "_keepalive", None)
        return 1000 * spent / reads, path.replies if path is not None else 0
    finally:
        await client.aclose(terminate=True)


def start_server(sse: bool) -> tuple[subprocess.Popen[bytes], str]:
    """The demo's fastmcp server on a free port (``--json-response`` unless ``sse``), in our process group."""
    cmd = [sys.executable, "-m", "mcp_temporal_tasks.worker.demo_server", "--host", "127.0.0.1", "--port", "0",
           "--poll-interval-ms", "100", *([] if sse else ["--json-response"])]
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    lines: queue.Queue[str] = queue.Queue()

    def drain() -> None:  # for the server's whole life: a chatty server never blocks on a full pipe
        for raw in proc.stderr or ():
            lines.put(raw.decode("utf-8", "replace").strip())

    threading.Thread(target=drain, daemon=True).start()
    deadline = time.monotonic() + 60
    while (left := deadline - time.monotonic()) > 0:
        try:
            line = lines.get(timeout=left)
        except queue.Empty:
            break
        if line.startswith("LISTENING "):
            return proc, line.split(" ", 1)[1]
    proc.kill()
    raise SystemExit(f"http_read: the MCP server did not print LISTENING within 60 s (exit {proc.poll()})")


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.http_read", description=__doc__.split("\n\n")[0])
    p.add_argument("--reads", type=int, default=3000)
    p.add_argument("--sse", action="store_true", help="the server answers with SSE streams (fastmcp's default)")
    args = p.parse_args()

    def stop(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt  # unwinds to the finally below, which stops the server

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, stop)
    proc, url = start_server(args.sse)
    try:
        for kept_alive in (False, True, False, True):
            ms, replies = asyncio.run(cpu_per_read(url, args.reads, kept_alive=kept_alive))
            print(f"{'kept-alive' if kept_alive else 'httpx     '}: {ms:.3f} ms of CPU per tasks/get "
                  f"({replies} replies on the kept-alive path)", flush=True)
    except KeyboardInterrupt:
        print("http_read: stopped", file=sys.stderr)
        raise SystemExit(130) from None
    finally:
        proc.kill()
        proc.wait(10)


if __name__ == "__main__":
    main()
