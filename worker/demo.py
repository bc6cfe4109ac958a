"""``mcp-tasks demo``: the embedded Temporal, the bundled demo MCP server and a worker, in one command.

Runs three tasks that show what the project is for:
1. a slow tool that completes (``slow_echo``);
2. a tool that fails with a stored ``429 … retry-after=30`` diagnostic, recovered and classified
   ``retryable`` with ``retry_after_s = 30`` instead of a generic "task failed";
3. a long tool cancelled mid-flight (``tasks/cancel`` reaches the server; outcome ``cancelled``).
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time
import uuid
from typing import Any

from mcp_temporal_tasks.activities.models import ServerConfig, ToolPolicy
from mcp_temporal_tasks.worker.cli import EXIT_ENDED, EXIT_OK, err, follow, ui_link
from mcp_temporal_tasks.worker.config import WorkerConfig
from mcp_temporal_tasks.worker.devserver import DevServer, free_port, port_open
from mcp_temporal_tasks.worker.runner import connect, ensure_search_attributes, run_workers
from mcp_temporal_tasks.workflows.client import start_mcp_task
from mcp_temporal_tasks.workflows.models import McpTaskRequest

EXPECTED = {"build": "completed", "export": "tool_error", "payment": "cancelled"}


def start_demo_server() -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, "-m", "mcp_temporal_tasks.worker.demo_server", "--host", "127.0.0.1", "--port", "0",
                             "--poll-interval-ms", "250"], stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    line = proc.stderr.readline()
    if not line.startswith("LISTENING "):
        proc.kill()
        raise RuntimeError(f"demo MCP server did not start: {line.strip() or 'no output'}")
    return proc, line.split()[1]


async def run_demo(args: argparse.Namespace) -> int:
    port = 7233 if not port_open("127.0.0.1", 7233) else free_port()
    ui_port = 8233 if not port_open("127.0.0.1", 8233) else free_port()
    server = DevServer(port=port, ui_port=ui_port).start()
    err(f"▶ embedded Temporal at {server.address} (state {server.db}) · UI {server.ui_url}")
    mcp_proc, url = start_demo_server()
    err(f"▶ demo MCP server (fastmcp, tasks extension 2026-07-28) at {url}")
    try:
        client = await connect(server.address, "default")
        await ensure_search_attributes(client, "default")
        cfg = WorkerConfig(servers={"demo": ServerConfig(url=url, principal="demo", tools={
            "slow_echo": ToolPolicy(idempotent=True, replay="if_idempotent"),
            "charge_card": ToolPolicy(idempotent=False, replay="with_approval")})})
        stop = asyncio.Event()
        worker_task = asyncio.create_task(run_workers(client, cfg, stop=stop))
        run = uuid.uuid4().hex[:6]
        jobs: dict[str, McpTaskRequest] = {
            "build": McpTaskRequest(server="demo", tool="slow_echo",
                                    arguments={"seconds": 3, "text": "build #42: 118 tests passed"}),
            "export": McpTaskRequest(server="demo", tool="rate_limited"),
            "payment": McpTaskRequest(server="demo", tool="cancellable", arguments={"seconds": 60}),
        }
        handles = {name: await start_mcp_task(client, req, workflow_id=f"demo-{name}-{run}") for name, req in jobs.items()}
        links = {name: ui_link(server.ui_url or "", "default", h.id) for name, h in handles.items()}

        async def cancel_payment() -> None:
            await asyncio.sleep(2.5)
            err("▶ cancelling the payment task (the workflow sends tasks/cancel)")
            await handles["payment"].cancel()

        t0 = time.monotonic()
        canceller = asyncio.create_task(cancel_payment())
        outcomes = dict(zip(handles, await asyncio.gather(
            *(follow(h, ui=links[n], quiet=n != "build") for n, h in handles.items()))))
        await canceller
        print(f"\n{'task':<9} {'tool':<13} {'outcome':<11} {'detail'}")
        for name, o in outcomes.items():
            print(f"{name:<9} {o.ledger.tool:<13} {o.outcome.value:<11} {_detail(o)}")
        print(f"\nall three in {time.monotonic() - t0:.1f}s; each is a workflow you can inspect:")
        for name, link in links.items():
            print(f"  {name:<9} {link}")
        print(f"  list:     mcp-tasks list --address {server.address}")
        print("the history is kept in SQLite; `mcp-tasks dev-server` serves it again (UI http://localhost:8233)")
        ok = all(outcomes[n].outcome.value == want for n, want in EXPECTED.items())
        if args.keep:
            err("▶ --keep: Temporal, the demo server and the worker keep running; Ctrl-C stops them")
            await asyncio.Event().wait()
        stop.set()
        await worker_task
        return EXIT_OK if ok else EXIT_ENDED
    finally:
        mcp_proc.terminate()
        server.stop()


def _detail(o: Any) -> str:
    if o.outcome.value == "completed" and o.result:
        return "result: " + " ".join(b.get("text", "") for b in o.result.get("content", []))
    if o.classification is not None:
        text = " ".join(b.get("text", "") for b in (o.result or {}).get("content", []))
        return (f"{o.classification.value}, retry after {o.retry_after_s:g}s — stored diagnostic recovered: “{text}”"
                if o.retry_after_s is not None else f"{o.classification.value}: {text}")
    return o.reason or ""
