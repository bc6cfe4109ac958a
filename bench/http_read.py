"""What one ``tasks/get`` costs the worker's CPU on the wire, by the way it is sent.

Reads a task from the bench's MCP server (the real fastmcp runtime; ``--sse`` for its SSE replies instead of JSON)
through :class:`HttpTransport` ``--reads`` times each way and prints the process CPU per read. No Temporal here:
the part of an idle poll that is ours. The ways:

* ``httpx``: httpx's client on its own transport (httpcore2's pool), as with ``MCP_TASKS_H11_CONNECTIONS=0``;
* ``httpx over h11``: httpx's client on our connection layer (activities/wire/http11.py): how this release sends
  every request it does not send through a proxy;
* ``direct h11`` / ``direct httpcore2``: the two connection layers without httpx's client layer on top (its request
  and reply models, auth flow, cookies): the candidates the shipped way was chosen against (neither is shipped:
  ``direct h11`` saves a few percent over ``httpx over h11``, within the noise of one run, for a second code path).

    python -m bench.http_read [--reads 3000] [--sse] [--rounds 2]
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

import httpx2

from mcp_temporal_tasks.activities.wire import Endpoint, WireSession, sdk_compat
from mcp_temporal_tasks.activities.wire.http_transport import SWITCH, HttpTransport
from mcp_temporal_tasks.protocol.tasks import EXTENSION

WAYS = ("httpx", "httpx over h11", "direct h11", "direct httpcore2")


class _Direct:
    """``tasks/get`` sent on a connection layer without httpx's client on top (bench only)."""

    def __init__(self, client: WireSession, layer: httpx2.AsyncBaseTransport) -> None:
        assert isinstance(client.transport, HttpTransport)
        self.transport, self.layer = client.transport, layer
        self.extension = client.era == EXTENSION

    async def get(self, task_id: str) -> None:
        # What WireSession.request adds to a read on each era (the extension's _meta and routing headers).
        params: dict[str, object] = {"taskId": task_id}
        headers = None
        if self.extension:
            params["_meta"] = sdk_compat.extension_meta()
            headers = sdk_compat.extension_headers("tasks/get", task_id)
        body = {"jsonrpc": "2.0", "id": "bench", "method": "tasks/get", "params": params}
        request = self.transport._client.build_request(
            "POST", self.transport.url, json=body, headers=self.transport._base_headers(headers)
        )
        response = await self.layer.handle_async_request(request)
        try:
            await response.aread()
            assert response.status_code == 200 and b'"working"' in response.content, response.content[:200]
        finally:
            await response.aclose()


async def cpu_per_read(url: str, reads: int, *, way: str) -> float:
    os.environ[SWITCH] = "0" if way == "httpx" else "1"
    client = await WireSession.connect(Endpoint(url=url))
    transport = client.transport
    assert isinstance(transport, HttpTransport)
    try:
        start = await client.start("slow_echo", {"seconds": 600, "text": "bench"})
        assert start.task is not None
        task_id = start.task.task_id
        await client.get(task_id)  # connections open, pools warm
        if way.startswith("direct"):
            layer = transport.connections if way == "direct h11" else httpx2.AsyncHTTPTransport()
            assert layer is not None
            direct = _Direct(client, layer)
            await direct.get(task_id)
            t0 = time.process_time()
            for _ in range(reads):
                await direct.get(task_id)
        else:
            t0 = time.process_time()
            for _ in range(reads):
                state = await client.get(task_id)
                assert state.status == "working", state.status
        return 1000 * (time.process_time() - t0) / reads
    finally:
        await client.aclose(terminate=True)


def start_server(sse: bool) -> tuple[subprocess.Popen[bytes], str]:
    """The demo's fastmcp server on a free port (``--json-response`` unless ``sse``), in our process group."""
    cmd = [
        sys.executable,
        "-m",
        "mcp_temporal_tasks.demo.server",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--poll-interval-ms",
        "100",
        *([] if sse else ["--json-response"]),
    ]
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
    p.add_argument("--rounds", type=int, default=2, help="how many times each way is measured")
    args = p.parse_args()

    def stop(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt  # unwinds to the finally below, which stops the server

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, stop)
    proc, url = start_server(args.sse)
    try:
        for _ in range(args.rounds):  # interleaved, so a slow moment of the machine does not favour one way
            for way in WAYS:
                ms = asyncio.run(cpu_per_read(url, args.reads, way=way))
                print(f"{way:>16}: {ms:.3f} ms of CPU per tasks/get", flush=True)
    except KeyboardInterrupt:
        print("http_read: stopped", file=sys.stderr)
        raise SystemExit(130) from None
    finally:
        proc.kill()
        proc.wait(10)


if __name__ == "__main__":
    main()
