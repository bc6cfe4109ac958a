"""``worker``, ``dev-server``, ``demo``, ``demo-server``; an in-process worker's configuration and logs.

What an in-process worker needs (its configuration checked up front, its logs in a file) is here, and ``run`` uses it
as well. Only ``demo-server`` imports the demo server, lazily, after checking the ``[demo]`` extra.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import importlib.util
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from temporalio.client import Client

from mcp_temporal_tasks.activities.mcp_activities import McpActivities
from mcp_temporal_tasks.activities.result_store import state_dir
from mcp_temporal_tasks.activities.wire.redact import install_log_redaction
from mcp_temporal_tasks.protocol.tasks import Endpoint
from mcp_temporal_tasks.worker.cli.connection import (
    DEFAULT_ADDRESS,
    check_namespace,
    split_address,
    ui_base,
    ui_link,
    why,
)
from mcp_temporal_tasks.worker.cli.following import follow
from mcp_temporal_tasks.worker.cli.parser import (
    EXIT_ENDED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    CliError,
    at_exit,
    err,
    prog,
)
from mcp_temporal_tasks.worker.cli.plan import address_source, check_address, check_env_refs, configuration
from mcp_temporal_tasks.worker.config import ConfigError, WorkerConfig
from mcp_temporal_tasks.worker.demo_scenario import EXPECTED, demo_config, demo_requests, detail, start_demo_server
from mcp_temporal_tasks.worker.devserver import (
    DevServer,
    DevServerError,
    PortInUse,
    StateInUse,
    free_port,
    port_open,
    state_holder,
)
from mcp_temporal_tasks.worker.printable import printable
from mcp_temporal_tasks.worker.registry import ensure_search_attributes, make_activities
from mcp_temporal_tasks.worker.runner import (
    JsonFormatter,
    connect,
    connect_options,
    connect_to,
    install_typed_failure_filter,
    run_workers,
    runtime,
    setup_logging,
)
from mcp_temporal_tasks.worker.telemetry import Tracing, setup_tracing
from mcp_temporal_tasks.worker.temporal_client import tracing_interceptor
from mcp_temporal_tasks.workflows.client import start_mcp_task

WORKER_CONNECT_WAIT_S = 60.0  # how long `mcp-tasks worker` waits for Temporal to come up


def prepare_worker(
    cfg: WorkerConfig,
    *,
    inline_allowlist: Iterable[Endpoint] = (),
    live_sink: Callable[[str, dict[str, Any]], None] | None = None,
) -> tuple[McpActivities, Tracing | None]:
    """Everything a worker of this process needs that can be wrong in its configuration, checked before anything
    connects (exit 2, one line): the result store, and with ``[worker] tracing`` the OpenTelemetry SDK set up from
    the ``OTEL_*`` environment (``worker.telemetry``; a provider the process already has is kept)."""
    try:
        activities = make_activities(cfg, inline_allowlist=inline_allowlist, live_sink=live_sink)
        tracing = None
        if cfg.worker.tracing:
            tracing_interceptor()  # the interceptor's SDK: the [tracing] extra
            tracing = setup_tracing()
            at_exit(tracing.flush)  # `mcp-tasks` leaves with os._exit: the last spans are sent first
    except ConfigError as exc:
        raise CliError(f"configuration: {exc}", EXIT_USAGE, kind="config") from None
    return activities, tracing


def run_logging() -> Path | None:
    """``run``'s (and ``demo``'s) in-process worker logs (activity failures with their tracebacks) go to a log file;
    the user gets the outcome. Errors still reach stderr as one line each, naming the file."""
    install_typed_failure_filter()
    root = logging.getLogger()
    path: Path | None = state_dir() / "run.log"
    handlers: list[logging.Handler] = []
    try:
        assert path is not None
        path.parent.mkdir(parents=True, exist_ok=True)
        file_handler = logging.FileHandler(path, encoding="utf-8")
        file_handler.setFormatter(JsonFormatter())
        install_log_redaction(file_handler)
        handlers.append(file_handler)
    except OSError:
        path = None

    class OneLine(logging.Formatter):
        def format(self, record: logging.LogRecord) -> str:
            where = f" (details: {path})" if path else ""
            return f"mcp-tasks: {record.levelname.lower()}: {printable(record.getMessage())}{where}"

    console = logging.StreamHandler(sys.stderr)
    console.setLevel(logging.ERROR)
    console.setFormatter(OneLine())
    # For the log file only: asyncio's "Task exception was never retrieved" at shutdown (the SDK's pollers), and the
    # MCP SDK's OAuth flow errors (with a traceback), which the wire turns into the task's own error
    # (AuthorizationRequired: the outcome says it).
    console.addFilter(lambda record: not record.name.startswith(("asyncio", "mcp.client.auth")))
    install_log_redaction(console)
    root.handlers[:] = [*handlers, console]
    root.setLevel(logging.INFO)
    for noisy in ("httpx2", "httpcore2", "mcp"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    return path


# --- worker / dev-server -------------------------------------------------------------------------


async def cmd_worker(args: argparse.Namespace) -> int:
    setup_logging(args.log_level, json_logs=not args.plain_logs)
    log = logging.getLogger("mcp_tasks.worker")
    cfg = configuration(args)
    if args.task_queue:
        cfg.temporal.task_queue = args.task_queue
    if args.allow_mixed_servers:
        cfg.worker.allow_mixed_servers = True
    check_env_refs(cfg)  # a credential reference to an unset variable: named now, not as each task's failure
    # The result store, tracing: refused before anything connects.
    activities, tracing = prepare_worker(cfg)
    try:
        # The one address rule (runner.connect_options): --address, TEMPORAL_ADDRESS, temporal.toml, [temporal].
        options, _ = connect_options(address=args.address, namespace=args.namespace, cfg=cfg)
        runtime(cfg.worker.metrics_port)  # the metrics endpoint's port: a port in use is named, not "unreachable"
    except ConfigError as exc:
        raise CliError(f"configuration: {exc}", EXIT_USAGE, kind="config") from None
    check_address(options["target_host"], address_source(args))
    # What the logs below name: the effective address and namespace, wherever they came from.
    address, namespace = options["target_host"], options["namespace"]
    cfg.temporal.address, cfg.temporal.namespace = address, namespace
    if tracing is not None:
        log.info("tracing: %s", tracing.where)
    # A worker is a service: it may come up before Temporal does (compose, Kubernetes), so with an address from
    # the environment or configuration it waits, and says so at once. An address typed with --address is
    # expected to serve: nothing there fails at once.
    wait_s = 0.0 if args.address else WORKER_CONNECT_WAIT_S
    if wait_s:
        log.info("connecting to Temporal at %s (waiting up to %.0f s for it to come up)", cfg.temporal.address, wait_s)
    try:
        client = await asyncio.wait_for(
            connect_to(options, cfg=cfg, metrics_port=cfg.worker.metrics_port, wait_s=wait_s), timeout=wait_s + 15
        )
    except Exception as exc:
        waited = f" (waited {wait_s:.0f} s)" if wait_s else ""
        raise CliError(
            f"Temporal is unreachable at {cfg.temporal.address}{waited}: {why(exc)}", EXIT_UNREACHABLE
        ) from None
    await check_namespace(client, cfg.temporal.namespace, cfg.temporal.address)
    added = await ensure_search_attributes(client, cfg.temporal.namespace)
    if added:
        log.info("registered search attributes %s in namespace %s", ", ".join(added), cfg.temporal.namespace)
    else:
        log.info("search attributes already registered in namespace %s", cfg.temporal.namespace)
    if cfg.worker.metrics_port:
        log.info("Prometheus metrics on :%d/metrics", cfg.worker.metrics_port)
    await run_workers(
        client,
        cfg,
        activities=activities,
        refuse_mixed=True,
        on_ready=lambda: log.info(
            "ready: polling task queue %s on %s (namespace %s; servers: %s)",
            cfg.temporal.task_queue,
            cfg.temporal.address,
            cfg.temporal.namespace,
            ", ".join(sorted(cfg.servers)) or "none",
            extra={"event": "ready", "task_queue": cfg.temporal.task_queue},
        ),
    )
    log.info("stopped")
    return EXIT_OK


async def cmd_dev_server(args: argparse.Namespace) -> int:
    codec = ["--ui-codec-endpoint", args.ui_codec_endpoint] if args.ui_codec_endpoint else []
    server = DevServer(db=args.db, port=args.port, ui_port=args.ui_port, ip=args.ip, extra_args=codec)
    # SIGINT and SIGTERM stop the server (terminated, killed after 10 s) and release the state file; the server
    # is in our process group and dies with us even if we are killed (DevServer). Installed before it starts:
    # a signal during the start is acted on once it serves.
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stopping.set)
    try:
        await server.start_async(foreground=True)
    except StateInUse as exc:
        raise CliError(str(exc), EXIT_USAGE, kind="state_in_use") from None
    except PortInUse as exc:
        raise CliError(str(exc), EXIT_USAGE, kind="port_in_use") from None
    except DevServerError as exc:
        raise CliError(str(exc), EXIT_UNREACHABLE) from None
    err(f"Temporal dev server at {server.address} · UI {server.ui_url or 'off'} · state {server.db} (Ctrl-C stops)")
    try:
        while server.proc and server.proc.poll() is None and not stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), 0.5)
        code = server.proc.returncode if server.proc and not stopping.is_set() else None
    finally:
        await asyncio.to_thread(server.stop)
    if code is not None:
        raise CliError(f"the Temporal dev server exited by itself (code {code}); state {server.db}", EXIT_ENDED)
    err("stopped")
    return EXIT_OK


# --- demo / demo-server --------------------------------------------------------------------------


def _require_demo_extra() -> None:
    """The demo server's fastmcp is an extra: a worker image does not carry it."""
    if importlib.util.find_spec("fastmcp") is None:
        raise CliError(
            "the demo needs the [demo] extra: pip install 'mcp-temporal-tasks[demo]' "
            "(from a checkout: pip install '.[demo]')",
            EXIT_USAGE,
        )


async def _demo_temporal(ui_url: str | None = None) -> tuple[Client, DevServer | None, str, str | None]:
    """(client, the server we started or None, its address, UI base or None): reuse what serves, else start the
    embedded one."""
    try:
        options, explicit = connect_options()
    except ConfigError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    address, namespace = options["target_host"], options["namespace"]
    check_address(address, "the Temporal address (TEMPORAL_ADDRESS or temporal.toml)")
    host, port = split_address(address)
    holder = state_holder()
    if explicit or port_open(host, port):
        client: Client | None
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
            held = await connect(str(holder["address"]), "default", wait_s=5.0)
            ui = ui_base(str(holder["address"]), given=ui_url, started=str(holder["ui"]) if holder.get("ui") else None)
            err(
                f"▶ using the Temporal already serving the default state at {holder['address']}"
                + (f" · UI {ui}" if ui else "")
            )
            return held, None, str(holder["address"]), ui
        except Exception:
            pass
    port_n = port if not port_open("127.0.0.1", port) else free_port()
    ui_port = 8233 if not port_open("127.0.0.1", 8233) else free_port()
    try:
        server = await DevServer(port=port_n, ui_port=ui_port).start_async()
    except StateInUse as exc:
        raise CliError(str(exc), EXIT_USAGE, kind="state_in_use") from None
    except DevServerError as exc:
        raise CliError(f"cannot start the embedded Temporal: {exc}", EXIT_UNREACHABLE) from None
    err(f"▶ embedded Temporal at {server.address} (state {server.db}) · UI {server.ui_url}")
    try:
        started = await connect(server.address, "default")
    except Exception:
        server.stop()
        raise
    return started, server, server.address, ui_base(server.address, given=ui_url, started=server.ui_url)


async def cmd_demo(args: argparse.Namespace) -> int:
    _require_demo_extra()
    run_logging()  # the worker's logs go to the log file; the demo prints what it shows
    client, server, address, ui = await _demo_temporal(getattr(args, "ui_url", None))
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
        cfg = demo_config(url, queue)
        worker_task = asyncio.create_task(run_workers(client, cfg, stop=stop, handle_signals=False))
        handles = {
            name: await start_mcp_task(client, req, workflow_id=f"demo-{name}-{run}", task_queue=queue)
            for name, req in demo_requests().items()
        }
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
            print(f"{name:<9} {o.ledger.tool:<15} {o.outcome.value:<11} {detail(o)}")
        print(
            f"\nall four in {time.monotonic() - t0:.1f}s; each is a workflow you can inspect"
            + (":" if ui else f" (mcp-tasks status ID): {', '.join(h.id for h in handles.values())}")
        )
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


def cmd_demo_server(args: argparse.Namespace) -> int:
    _require_demo_extra()
    # Imported only here: it needs fastmcp, the [demo] extra, which a worker image does not carry.
    from mcp_temporal_tasks.demo import server as demo_server

    family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
    try:  # what uvicorn would fail on, said in one line
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((args.host, args.port))
    except OSError as exc:
        raise CliError(
            f"demo-server: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}"
            + (" (pick another with --port, or --port 0 for a free one)" if exc.errno == errno.EADDRINUSE else ""),
            EXIT_USAGE,
        ) from None
    argv = ["--host", args.host, "--port", str(args.port), "--poll-interval-ms", str(args.poll_interval_ms)]
    demo_server.main(argv)
    return 0


async def cmd_codec_server(args: argparse.Namespace) -> int:
    """Temporal's remote codec endpoint (worker/codec_server.py) until SIGINT/SIGTERM."""
    from mcp_temporal_tasks.worker.codec_server import DEFAULT_ORIGINS, CodecSettings, load_codec, serve
    from mcp_temporal_tasks.worker.service import service_storage

    settings = CodecSettings(
        codec=load_codec(args.codec) if args.codec else None,
        storage=service_storage(args.config),
        auth=os.environ.get(args.auth_env) or None,
        origins=args.cors_origin or DEFAULT_ORIGINS,
        preserve=not args.read_stored_on_decode,
    )
    family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
    try:  # what uvicorn would fail on, said in one line
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((args.host, args.port))
    except OSError as exc:
        raise CliError(f"codec-server: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}", EXIT_USAGE)
    store = settings.storage.kind if settings.storage is not None else "none"

    def ready(url: str) -> None:
        print(f"LISTENING {url}", flush=True)
        err(
            f"codec server: store {store}, codec {args.codec or 'none'}, authorization "
            f"{'checked' if settings.auth else 'not checked'}, CORS {', '.join(settings.origins)}; "
            f"the UI: --ui-codec-endpoint {url} (mcp-tasks dev-server) or its Data Encoder setting; "
            f"the CLI: temporal workflow show --codec-endpoint {url} (Ctrl-C stops)"
        )

    await serve(settings, args.host, args.port, on_ready=ready)
    return 0
