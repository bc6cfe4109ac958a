"""``mcp-tasks demo``: the embedded Temporal, the bundled demo MCP server and a worker, in one command.

Runs four tasks that show what the project is for:
1. a slow tool that completes (``slow_echo``);
2. a tool that fails with a stored ``429 … retry-after=30`` diagnostic, recovered and classified
   ``retryable`` with ``retry_after_s = 30`` instead of a generic "task failed";
3. a long tool cancelled mid-flight (``tasks/cancel`` reaches the server; outcome ``cancelled``);
4. a job of plain tools (``start_export`` → ``get_export_status`` → ``download_export``) bound in configuration
   and run as a task, for servers without MCP tasks.

Temporal: a server already serving at the default address (``mcp-tasks dev-server``, or the one
``TEMPORAL_ADDRESS`` / temporal.toml names) is used as it is; otherwise the embedded one is started on the default
state file, never on a state file another server holds. Its closing hints work after it exits, typed as they are
printed (the path of ``mcp-tasks`` when its venv is not activated).

Its tasks go to a task queue of this demo alone (``mcp-tasks-demo-<run>``): a worker it did not start (another
``mcp-tasks worker`` on that Temporal, with another configuration) never takes them. Ctrl-C (or SIGTERM) cancels
its tasks through their workflows, waits a few seconds for their outcomes, and stops what it started.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import subprocess
import sys
import time
import uuid
from typing import Any

from mcp_temporal_tasks.activities.models import JobBinding, ServerConfig, ToolPolicy
from mcp_temporal_tasks.worker.cli import (
    DEFAULT_ADDRESS,
    EXIT_ENDED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    CliError,
    check_address,
    err,
    follow,
    prog,
    ui_base,
    ui_link,
)
from mcp_temporal_tasks.worker.config import ConfigError, WorkerConfig
from mcp_temporal_tasks.worker.devserver import (
    DevServer,
    DevServerError,
    StateInUse,
    die_with_parent,
    free_port,
    port_open,
    state_holder,
)
from mcp_temporal_tasks.worker.registry import ensure_search_attributes
from mcp_temporal_tasks.worker.runner import connect, connect_options, run_workers
from mcp_temporal_tasks.workflows.client import start_mcp_task
from mcp_temporal_tasks.workflows.models import McpTaskRequest

EXPECTED = {"build": "completed", "export": "tool_error", "payment": "cancelled", "report": "completed"}
#: The demo server's job tools, bound as one job (README "Three shapes of long work").
REPORT_JOB = JobBinding(submit="start_export", status="get_export_status", result="download_export",
                        cancel="cancel_export", poll_interval_s=0.5,
                        states={"running": "working", "succeeded": "completed", "failed": "failed",
                                "cancelled": "cancelled"})


def start_demo_server() -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, "-m", "mcp_temporal_tasks.worker.demo_server", "--host", "127.0.0.1", "--port", "0",
                             "--poll-interval-ms", "250"], stderr=subprocess.PIPE, text=True,
                            preexec_fn=die_with_parent)
    assert proc.stderr is not None
    line = proc.stderr.readline()
    if not line.startswith("LISTENING "):
        proc.kill()
        raise RuntimeError(f"demo MCP server did not start: {line.strip() or 'no output'}")
    return proc, line.split()[1]


async def _temporal(ui_url: str | None = None) -> tuple[Any, DevServer | None, str, str | None]:
    """(client, the server we started or None, its address, UI base or None): reuse what serves, else start the
    embedded one."""
    try:
        options, explicit = connect_options()
    except ConfigError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    address, namespace = options["target_host"], options["namespace"]
    check_address(address, "the Temporal address (TEMPORAL_ADDRESS or temporal.toml)")
    host, port = address.rsplit(":", 1)
    holder = state_holder()
    if explicit or port_open(host.strip("[]"), int(port)):
        try:
            client = await connect(address, namespace, wait_s=5.0)
        except Exception as exc:
            if explicit:
                raise CliError(f"Temporal is unreachable at {address}: {exc}", EXIT_UNREACHABLE) from None
            client = None  # something else listens on the default port: start our own beside it
        if client is not None:
            ui = ui_base(address, given=ui_url)
            err(f"▶ using the Temporal already serving at {address}" + (f" · UI {ui}" if ui else ""))
            return client, None, address, ui
    if holder and holder.get("address"):
        # The default state file is held by a server elsewhere (another port): use it rather than open the file.
        try:
            client = await connect(str(holder["address"]), "default", wait_s=5.0)
            ui = ui_base(str(holder["address"]), given=ui_url, started=str(holder["ui"]) if holder.get("ui") else None)
            err(f"▶ using the Temporal already serving the default state at {holder['address']}"
                + (f" · UI {ui}" if ui else ""))
            return client, None, str(holder["address"]), ui
        except Exception:
            pass
    port_n = int(port) if not port_open("127.0.0.1", int(port)) else free_port()
    ui_port = 8233 if not port_open("127.0.0.1", 8233) else free_port()
    try:
        server = DevServer(port=port_n, ui_port=ui_port).start()
    except StateInUse as exc:
        raise CliError(str(exc), EXIT_USAGE, kind="state_in_use") from None
    except DevServerError as exc:
        raise CliError(f"cannot start the embedded Temporal: {exc}", EXIT_UNREACHABLE) from None
    err(f"▶ embedded Temporal at {server.address} (state {server.db}) · UI {server.ui_url}")
    try:
        client = await connect(server.address, "default")
    except Exception:
        server.stop()
        raise
    return client, server, server.address, ui_base(server.address, given=ui_url, started=server.ui_url)


async def run_demo(args: argparse.Namespace) -> int:
    from mcp_temporal_tasks.worker.cli import _run_logging

    _run_logging()  # the worker's logs go to the log file; the demo prints what it shows
    client, server, address, ui = await _temporal(getattr(args, "ui_url", None))
    try:
        mcp_proc, url = start_demo_server()
    except Exception:
        if server is not None:
            server.stop()
        raise
    err(f"▶ demo MCP server (fastmcp, tasks extension 2026-07-28) at {url}")
    loop = asyncio.get_running_loop()
    interrupted = asyncio.Event()
    installed: list[int] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, interrupted.set)
            installed.append(sig)
    stop = asyncio.Event()
    worker_task: asyncio.Task[None] | None = None
    try:
        await ensure_search_attributes(client, client.namespace)
        run = uuid.uuid4().hex[:6]
        # A queue of this demo alone: a worker it did not start never takes its tasks.
        queue = f"mcp-tasks-demo-{run}"
        cfg = WorkerConfig(servers={"demo": ServerConfig(url=url, principal="demo", tools={
            "slow_echo": ToolPolicy(idempotent=True, replay="if_idempotent"),
            "charge_card": ToolPolicy(idempotent=False, replay="with_approval")}, jobs={"monthly_report": REPORT_JOB})})
        cfg.temporal.task_queue = queue
        worker_task = asyncio.create_task(run_workers(client, cfg, stop=stop, handle_signals=False))
        jobs: dict[str, McpTaskRequest] = {
            "build": McpTaskRequest(server="demo", tool="slow_echo",
                                    arguments={"seconds": 3, "text": "build #42: 118 tests passed"}),
            "export": McpTaskRequest(server="demo", tool="rate_limited"),
            "payment": McpTaskRequest(server="demo", tool="cancellable", arguments={"seconds": 60}),
            "report": McpTaskRequest(server="demo", tool="monthly_report", arguments={"seconds": 2, "rows": 3}),
        }
        handles = {name: await start_mcp_task(client, req, workflow_id=f"demo-{name}-{run}", task_queue=queue)
                   for name, req in jobs.items()}
        links = {name: ui_link(ui, client.namespace, h.id) for name, h in handles.items()}

        async def cancel_payment() -> None:
            await asyncio.sleep(2.5)
            err("▶ cancelling the payment task (the workflow sends tasks/cancel)")
            await handles["payment"].cancel()

        t0 = time.monotonic()
        canceller = asyncio.create_task(cancel_payment())
        gathered = asyncio.gather(*(follow(h, ui=links[n], quiet=n != "build") for n, h in handles.items()))
        waiters: set[asyncio.Future[Any]] = {gathered, asyncio.ensure_future(interrupted.wait())}
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        if not gathered.done():
            # Ctrl-C: the demo's tasks are cancelled through their workflows while its worker still runs, so none
            # is left running with no worker.
            err("▶ interrupted: cancelling the demo's tasks (tasks/cancel through each workflow)")
            canceller.cancel()
            for h in handles.values():
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(h.cancel(), 2)
            await asyncio.wait({gathered}, timeout=4)
            if not gathered.done():
                gathered.cancel()
            raise CliError("interrupted: the demo's tasks were cancelled", EXIT_INTERRUPTED)
        outcomes = dict(zip(handles, gathered.result()))
        await canceller
        print(f"\n{'task':<9} {'tool':<15} {'outcome':<11} {'detail'}")
        for name, o in outcomes.items():
            print(f"{name:<9} {o.ledger.tool:<15} {o.outcome.value:<11} {_detail(o)}")
        print(f"\nall four in {time.monotonic() - t0:.1f}s; each is a workflow you can inspect"
              + (":" if ui else f" (mcp-tasks status ID): {', '.join(h.id for h in handles.values())}"))
        for name, link in links.items():
            if link:
                print(f"  {name:<9} {link}")
        me = prog()
        at = "" if address in (DEFAULT_ADDRESS, "127.0.0.1:7233") else f" --address {address}"
        if server is None or args.keep:
            # The server outlives the demo (it was running already, or --keep): the hints work as printed.
            print(f"  list:     {me} list{at}")
        else:
            # We started Temporal and stop it on exit: say how to serve this state again, and the flag that keeps it.
            port = "" if server.port == 7233 else f" --port {server.port}"
            ui_port = "" if server.ui_port in (None, 8233) else f" --ui-port {server.ui_port}"
            print(f"Temporal stops with the demo; its history stays in {server.db}. To look again:")
            print(f"  serve it: {me} dev-server{port}{ui_port}   (it prints its UI address)")
            print(f"  list:     {me} list{at}   (while dev-server runs)")
            print(f"  or keep everything running after the demo: {me} demo --keep")
        ok = all(outcomes[n].outcome.value == want for n, want in EXPECTED.items())
        if args.keep:
            err("▶ --keep: Temporal, the demo server and the worker keep running; Ctrl-C stops them")
            await interrupted.wait()
        return EXIT_OK if ok else EXIT_ENDED
    finally:
        stop.set()
        if worker_task is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(worker_task), 10)
        for signum in installed:
            loop.remove_signal_handler(signum)
        mcp_proc.terminate()
        try:
            await asyncio.to_thread(mcp_proc.wait, 5)
        except subprocess.TimeoutExpired:
            mcp_proc.kill()
        if server is not None:
            server.stop()


def _detail(o: Any) -> str:
    if o.outcome.value == "completed" and o.result and o.task_id and o.task_id.startswith("exp-"):
        rows = (o.result.get("structuredContent") or {}).get("rows") or []
        return f"job {o.task_id}: {len(rows)} rows (job tools on a server without MCP tasks)"
    if o.outcome.value == "completed" and o.result:
        return "result: " + " ".join(b.get("text", "") for b in o.result.get("content", []))
    if o.classification is not None:
        text = " ".join(b.get("text", "") for b in (o.result or {}).get("content", []))
        return (f"{o.classification.value}, retry after {o.retry_after_s:g}s — stored diagnostic recovered: “{text}”"
                if o.retry_after_s is not None else f"{o.classification.value}: {text}")
    return o.reason or ""
