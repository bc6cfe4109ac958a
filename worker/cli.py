"""``mcp-tasks``: run, follow and operate MCP tasks as Temporal workflows.

Exit codes: 0 the task completed without tool error · 1 it ended otherwise (or is not finished) ·
2 bad input or usage · 3 Temporal or the MCP server unreachable at start.
With ``--json`` stdout carries exactly one JSON object; progress and logs go to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shlex
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

from pydantic import ValidationError

from mcp_temporal_tasks.worker.printable import printable

EXIT_OK, EXIT_ENDED, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3
DEFAULT_ADDRESS = "localhost:7233"
WORKER_CONNECT_WAIT_S = 60.0  # how long `mcp-tasks worker` waits for Temporal to come up


class CliError(Exception):
    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def err(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def emit(args: argparse.Namespace, obj: Any, human: str) -> None:
    """The one place that writes results to stdout."""
    if getattr(args, "json", False):
        print(json.dumps(obj, default=str), flush=True)
    else:
        print(human, flush=True)


# --- Temporal connection -------------------------------------------------------------------------


def _address(args: argparse.Namespace) -> tuple[str, str, bool]:
    """(address, namespace, explicit): explicit when given by flag, TEMPORAL_ADDRESS or a temporal.toml profile
    (Temporal's environment configuration); otherwise the default, where the embedded Temporal may start."""
    from mcp_temporal_tasks.worker.config import ConfigError
    from mcp_temporal_tasks.worker.runner import connect_options

    try:
        options, explicit = connect_options(address=args.address, namespace=getattr(args, "namespace", None))
    except ConfigError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    return options["target_host"], options["namespace"], explicit


def _ui_base(address: str) -> str:
    if os.environ.get("MCP_TASKS_UI_URL"):
        return os.environ["MCP_TASKS_UI_URL"].rstrip("/")
    host = address.rsplit(":", 1)[0]
    return f"http://{'localhost' if host in ('127.0.0.1', '0.0.0.0') else host}:8233"


def ui_link(base: str, namespace: str, workflow_id: str) -> str:
    from urllib.parse import quote

    return f"{base}/namespaces/{namespace}/workflows/{quote(workflow_id, safe='')}"


@contextlib.asynccontextmanager
async def temporal(args: argparse.Namespace, *, allow_embedded: bool = False) -> AsyncIterator[tuple[Any, str]]:
    """Yield (client, ui_base). Starts the embedded default when allowed and nothing listens at the default."""
    from mcp_temporal_tasks.worker.devserver import DevServer, DevServerError, port_open
    from mcp_temporal_tasks.worker.runner import connect

    address, namespace, explicit = _address(args)
    server = None
    host, port = address.rsplit(":", 1)
    if not explicit and allow_embedded and not port_open(host, int(port)):
        try:
            server = DevServer(port=int(port)).start()
        except DevServerError as exc:
            raise CliError(f"cannot start the embedded Temporal: {exc}", EXIT_UNREACHABLE) from None
        err(f"started the embedded Temporal at {address} (state: {server.db}; UI {server.ui_url})")
    try:
        try:
            # An embedded server we started already serves (DevServer.start waits for that). Another that
            # listens may still be starting: it gets time to become healthy; nothing listening fails at once.
            wait_s = 5.0 if server is None and port_open(host, int(port)) else 0.0
            client = await asyncio.wait_for(connect(address, namespace, wait_s=wait_s), timeout=wait_s + 15)
        except Exception as exc:
            raise CliError(f"Temporal is unreachable at {address}: {exc}", EXIT_UNREACHABLE) from None
        yield client, (server.ui_url if server and server.ui_url else _ui_base(address))
    finally:
        if server is not None:
            server.stop()


# --- run -----------------------------------------------------------------------------------------


def _request(args: argparse.Namespace) -> Any:
    from mcp_temporal_tasks.activities.wire.models import Endpoint
    from mcp_temporal_tasks.workflows.models import McpTaskRequest, RequestTooLarge, check_request_size

    try:
        arguments = json.loads(args.args) if args.args else {}
    except json.JSONDecodeError as exc:
        raise CliError(f"--args is not valid JSON: {exc}", EXIT_USAGE) from None
    if not isinstance(arguments, dict):
        raise CliError("--args must be a JSON object, e.g. '{\"seconds\": 3}'", EXIT_USAGE)
    try:
        if args.server:
            server: Any = args.server
        elif args.url:
            server = Endpoint(url=args.url)
        else:
            server = Endpoint(command=shlex.split(args.command))
        request = McpTaskRequest(server=server, tool=args.tool, arguments=arguments, era=args.era,
                                 ttl_s=args.ttl, replay=args.replay, idempotent=True if args.idempotent else None,
                                 idempotency_key=args.idempotency_key, principal=args.principal)
        check_request_size(request.arguments)  # refused here, before any workflow starts
        return request
    except RequestTooLarge as exc:
        raise CliError(f"--args: {exc}", EXIT_USAGE) from None
    except (ValidationError, ValueError) as exc:
        raise CliError(f"invalid request: {_plain_errors(exc)}", EXIT_USAGE) from None


def _plain_errors(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'request'}: {e['msg']}" for e in exc.errors())
    return str(exc)


async def _preflight(request: Any, cfg: Any) -> None:
    """Fail fast (exit 3) when an HTTP MCP server is not even listening; never sends tools/call."""
    from mcp_temporal_tasks.activities.wire import McpTaskClient, TransportError
    from mcp_temporal_tasks.activities.wire.models import Endpoint

    endpoint = request.server if isinstance(request.server, Endpoint) else (
        cfg.servers[request.server].endpoint() if request.server in cfg.servers else None)
    if endpoint is None or endpoint.url is None:
        return
    try:
        client = await asyncio.wait_for(McpTaskClient.connect(endpoint, era=request.era), timeout=15)
        await client.aclose()
    except (TransportError, asyncio.TimeoutError) as exc:
        raise CliError(f"MCP server unreachable at {endpoint.identity()}: {exc}", EXIT_UNREACHABLE) from None
    except Exception as exc:  # it answered: the workflow will report precisely what is wrong
        err(f"note: MCP server at {endpoint.identity()} answered the handshake with: {printable(exc)}")


async def follow(handle: Any, *, ui: str, quiet: bool = False) -> Any:
    """Print live progress to stderr until the workflow ends; return its outcome."""
    from mcp_temporal_tasks.workflows.mcp_task import McpTaskWorkflow

    start = time.monotonic()
    from mcp_temporal_tasks.workflows.client import outcome_of

    result = asyncio.create_task(outcome_of(handle))
    last = ""
    if not quiet:
        err(f"following {handle.id}  ·  UI: {ui}")
    while not result.done():
        line = await _progress_line(handle, McpTaskWorkflow)
        if line and line != last and not quiet:
            err(f"[{time.monotonic() - start:6.1f}s] {line}")
            last = line
        await asyncio.wait({result}, timeout=0.5)
    return result.result()


async def _progress_line(handle: Any, wf: Any) -> str:
    try:
        view = await asyncio.wait_for(handle.query(wf.status), timeout=2)
    except Exception:
        return ""
    parts = [view.phase.value]
    live = None
    try:
        desc = await asyncio.wait_for(handle.describe(), timeout=2)
        for act in desc.raw_description.pending_activities:
            if act.heartbeat_details.payloads:
                live = json.loads(act.heartbeat_details.payloads[0].data)
    except Exception:
        pass
    status = (live or {}).get("status") or view.task_status
    message = (live or {}).get("statusMessage") or view.status_message
    # Server text: shown escaped (control and bidi characters), one line per field.
    if status:
        parts.append(printable(status))
    if message:
        parts.append(f"“{printable(message)}”")
    if view.task_id:
        parts.append(f"task {printable(view.task_id)}")
    for p in view.pending_inputs:
        key = printable(p.key)
        parts.append(f"\n    needs input [{key}]: {printable(p.message or p.method)}\n"
                     f"    answer with: mcp-tasks answer {printable(handle.id)} --key '{key}'")
    return " · ".join(parts)


def outcome_summary(o: Any) -> str:
    """The human view of an outcome. Every server-originated string goes through ``printable``."""
    p = printable
    lines = [f"{o.outcome.value}: {p(o.ledger.tool)} on {p(o.ledger.server)} (workflow {p(o.workflow_id)})"]
    if o.task_id:
        lines.append(f"  task {p(o.task_id)} · last status {p(o.task_status)} · era {p(o.era)}")
    if o.result is not None:
        texts = [p(b.get("text", ""), multiline=True) for b in o.result.get("content", []) if b.get("type") == "text"]
        lines.append("  result: " + (" | ".join(texts) if texts else json.dumps(o.result)[:500]))
    if o.result_ref is not None:
        lines.append(f"  result stored outside history ({o.result_ref.size} bytes): {o.result_ref.uri}")
    if o.error is not None:
        lines.append(f"  error {o.error.code}: {p(o.error.message)}")
    if o.classification is not None:
        lines.append(f"  classification: {o.classification.value}"
                     + (f" · retry after {o.retry_after_s:g}s" if o.retry_after_s is not None else ""))
    if o.reason:
        lines.append(f"  reason: {p(o.reason)}")
    lines.append(f"  tools/call sent: {len(o.operation_attempts)}")
    return "\n".join(lines)


def exit_code(outcome: Any) -> int:
    return EXIT_OK if outcome.outcome.value == "completed" else EXIT_ENDED


def _load_config(args: argparse.Namespace) -> Any:
    from mcp_temporal_tasks.worker.config import ConfigError, load_config

    try:
        return load_config(getattr(args, "config", None))
    except ConfigError as exc:
        raise CliError(f"configuration: {exc}", EXIT_USAGE) from None


async def cmd_run(args: argparse.Namespace) -> int:
    from mcp_temporal_tasks.activities.wire.models import Endpoint
    from mcp_temporal_tasks.workflows.client import default_workflow_id, start_mcp_task
    from mcp_temporal_tasks.worker.runner import make_activities, run_workers

    request = _request(args)
    cfg = _load_config(args)
    if isinstance(request.server, str) and request.server not in cfg.servers and not args.no_worker:
        known = ", ".join(sorted(cfg.servers)) or "none"
        raise CliError(f"unknown server {request.server!r} (configured: {known}); use --config, --url or --command",
                       EXIT_USAGE)
    await _preflight(request, cfg)
    async with temporal(args, allow_embedded=True) as (client, ui_base):
        wid = args.id or default_workflow_id(request)
        stop = asyncio.Event()
        worker_task = None
        if not args.no_worker and not args.detach:
            from mcp_temporal_tasks.worker.runner import ensure_search_attributes

            await ensure_search_attributes(client, client.namespace)
            cfg.temporal.task_queue = args.task_queue
            # The in-process worker may reach the one endpoint its user typed (--url/--command), and nothing
            # else inline beyond what the configuration allows. --no-worker: the running workers decide.
            typed = [request.server] if isinstance(request.server, Endpoint) else []
            worker_task = asyncio.create_task(run_workers(
                client, cfg, stop=stop, activities=make_activities(cfg, inline_allowlist=typed)))
        try:
            handle = await start_mcp_task(client, request, workflow_id=wid, task_queue=args.task_queue)
            link = ui_link(ui_base, client.namespace, wid)
            if args.detach:
                emit(args, {"workflow_id": wid}, wid)
                err(f"started; a worker on task queue {args.task_queue!r} runs it (mcp-tasks worker). UI: {link}")
                return EXIT_OK
            outcome = await follow(handle, ui=link)
        finally:
            stop.set()
            if worker_task is not None:
                await worker_task
    emit(args, outcome.model_dump(mode="json"), outcome_summary(outcome))
    return exit_code(outcome)


# --- status / result / cancel / approve / answer / list ------------------------------------------


async def _handle(client: Any, wid: str) -> tuple[Any, Any]:
    from temporalio.service import RPCError

    from mcp_temporal_tasks.workflows.mcp_task import McpTaskWorkflow

    handle = client.get_workflow_handle_for(McpTaskWorkflow.run, wid)
    try:
        desc = await handle.describe()
    except RPCError as exc:
        raise CliError(f"no workflow {wid!r}: {exc.message}", EXIT_ENDED) from None
    return handle, desc


def _resolve_ref(outcome: Any) -> Any:
    if outcome.result is None and outcome.result_ref is not None:
        from mcp_temporal_tasks.activities.result_store import ResultStore

        try:
            outcome.result = ResultStore.get(outcome.result_ref.model_dump())
        except (OSError, ValueError) as exc:
            err(f"warning: cannot read the stored result {outcome.result_ref.uri}: {exc}")
    return outcome


async def cmd_status(args: argparse.Namespace) -> int:
    from temporalio.client import WorkflowExecutionStatus

    from mcp_temporal_tasks.workflows.client import outcome_of
    from mcp_temporal_tasks.workflows.mcp_task import McpTaskWorkflow

    async with temporal(args) as (client, _):
        handle, desc = await _handle(client, args.id)
        if desc.status != WorkflowExecutionStatus.RUNNING:
            try:
                outcome = await outcome_of(handle)
            except Exception as exc:
                emit(args, {"workflow_id": args.id, "workflow_status": desc.status.name, "error": str(exc)},
                     f"{printable(args.id)}: workflow {desc.status.name}: {printable(exc)}")
                return EXIT_ENDED
            emit(args, outcome.model_dump(mode="json"), outcome_summary(outcome))
            return exit_code(outcome)
        try:
            view = await asyncio.wait_for(handle.query(McpTaskWorkflow.status), timeout=10)
        except Exception as exc:
            raise CliError(f"{args.id} is running but no worker answered the status query: {exc}", EXIT_UNREACHABLE) from None
        line = await _progress_line(handle, McpTaskWorkflow)
        emit(args, view.model_dump(mode="json"), f"{printable(args.id)}: {line}")
        return EXIT_ENDED


async def cmd_result(args: argparse.Namespace) -> int:
    from temporalio.client import WorkflowExecutionStatus

    async with temporal(args) as (client, ui_base):
        handle, desc = await _handle(client, args.id)
        if desc.status == WorkflowExecutionStatus.RUNNING and not args.wait:
            raise CliError(f"{args.id} is still running; add --wait to wait for it", EXIT_ENDED)
        try:
            outcome = await follow(handle, ui=ui_link(ui_base, client.namespace, args.id), quiet=not args.wait)
        except Exception as exc:
            raise CliError(f"{args.id}: workflow did not produce an outcome: {exc}", EXIT_ENDED) from None
    outcome = _resolve_ref(outcome)
    emit(args, outcome.model_dump(mode="json"), outcome_summary(outcome))
    return exit_code(outcome)


async def cmd_cancel(args: argparse.Namespace) -> int:
    from temporalio.client import WorkflowExecutionStatus

    async with temporal(args) as (client, _):
        handle, desc = await _handle(client, args.id)
        if desc.status != WorkflowExecutionStatus.RUNNING:
            raise CliError(f"{args.id} has already ended ({desc.status.name})", EXIT_ENDED)
        # Workflow cancellation is accepted by the server even while no worker runs; the workflow then
        # sends tasks/cancel and keeps the true outcome if the task had already finished.
        await handle.cancel()
    emit(args, {"workflow_id": args.id, "cancel_requested": True}, f"cancel requested for {args.id}")
    return EXIT_OK


async def _update(args: argparse.Namespace, name: str, *update_args: Any) -> Any:
    from temporalio.client import WorkflowUpdateFailedError

    from temporalio.client import WorkflowExecutionStatus
    from temporalio.service import RPCError

    async with temporal(args) as (client, _):
        handle, desc = await _handle(client, args.id)
        if desc.status != WorkflowExecutionStatus.RUNNING:
            raise CliError(f"{name} refused: {args.id} has already ended ({desc.status.name})", EXIT_ENDED)
        try:
            return await asyncio.wait_for(handle.execute_update(name, *update_args), timeout=30)
        except WorkflowUpdateFailedError as exc:
            raise CliError(f"{name} refused: {exc.cause.message if exc.cause else exc}", EXIT_ENDED) from None
        except RPCError as exc:
            raise CliError(f"{name} refused: {exc.message}", EXIT_ENDED) from None
        except asyncio.TimeoutError:
            raise CliError(f"{name}: no worker processed the update within 30 s", EXIT_UNREACHABLE) from None


async def cmd_approve(args: argparse.Namespace) -> int:
    attempt = await _update(args, "approve_replay")
    emit(args, {"workflow_id": args.id, "approved": True, "attempt": attempt},
         f"replay approved for {args.id} (tools/call #{attempt} will be sent)")
    return EXIT_OK


async def cmd_answer(args: argparse.Namespace) -> int:
    from mcp_temporal_tasks.workflows.mcp_task import McpTaskWorkflow

    async with temporal(args) as (client, _):
        handle, _ = await _handle(client, args.id)
        view = await asyncio.wait_for(handle.query(McpTaskWorkflow.status), timeout=10)
    pending = {p.key: p for p in view.pending_inputs}
    if not pending:
        raise CliError(f"{args.id} is not waiting for input (phase {view.phase.value})", EXIT_ENDED)
    if args.key and args.key not in pending:
        raise CliError(f"input {args.key!r} is not outstanding; outstanding: {', '.join(pending)}", EXIT_USAGE)
    keys = [args.key] if args.key else list(pending)
    responses: dict[str, Any] = {}
    if args.response is not None:
        try:
            given = json.loads(args.response)
        except json.JSONDecodeError as exc:
            raise CliError(f"--json is not valid JSON: {exc}", EXIT_USAGE) from None
        if not isinstance(given, dict):
            raise CliError("--json must be an object: an ElicitResult, or {key: ElicitResult}", EXIT_USAGE)
        responses = given if set(given) <= set(pending) and given else {k: given for k in keys}
    else:
        for key in keys:
            responses[key] = prompt_elicitation(pending[key])
    accepted = await _update(args, "provide_input", responses)
    emit(args, {"workflow_id": args.id, "answered": sorted(responses), "still_outstanding": accepted},
         f"answered {printable(', '.join(sorted(responses)))}"
         + (f"; still outstanding: {printable(accepted)}" if accepted else ""))
    return EXIT_OK


def prompt_elicitation(p: Any) -> dict[str, Any]:
    """Ask a human on the terminal for each field of the requested schema."""
    err(f"\n{printable(p.message or p.method, multiline=True)}")
    action = input("accept / decline / cancel [accept]: ").strip() or "accept"
    if action not in ("accept", "decline", "cancel"):
        raise CliError(f"unknown action {action!r}", EXIT_USAGE)
    if action != "accept":
        return {"action": action}
    schema = p.requested_schema or {}
    required = set(schema.get("required", []))
    content: dict[str, Any] = {}
    for name, prop in (schema.get("properties") or {}).items():
        label = printable(prop.get("title") or name)
        kind = prop.get("type", "string")
        raw = input(f"{label} ({printable(kind)}{', required' if name in required else ''}): ").strip()
        if not raw and name not in required:
            continue
        if kind == "boolean":
            content[name] = raw.lower() in ("y", "yes", "true", "1")
        elif kind == "integer":
            content[name] = int(raw)
        elif kind == "number":
            content[name] = float(raw)
        else:
            content[name] = raw
    return {"action": "accept", "content": content}


async def cmd_list(args: argparse.Namespace) -> int:
    clauses = ["WorkflowType = 'McpTaskWorkflow'"]
    for attr, value in (("McpOutcome", args.outcome), ("McpTaskStatus", args.status), ("McpServer", args.server),
                        ("McpTool", args.tool)):
        if value:
            if "'" in value:
                raise CliError(f"invalid value {value!r}", EXIT_USAGE)
            clauses.append(f"{attr} = '{value}'")
    query = " AND ".join(clauses)
    rows = []
    async with temporal(args) as (client, _):
        async for wf in client.list_workflows(query, limit=args.limit):
            sa = {k.name: v for k, v in wf.typed_search_attributes}
            rows.append({"workflow_id": wf.id, "workflow_status": wf.status.name if wf.status else None,
                         "server": sa.get("McpServer"), "tool": sa.get("McpTool"), "task_id": sa.get("McpTaskId"),
                         "task_status": sa.get("McpTaskStatus"), "outcome": sa.get("McpOutcome"),
                         "started": wf.start_time.isoformat() if wf.start_time else None})
    p = printable
    human = "\n".join(f"{p(r['workflow_id']):<48} {p(r['workflow_status']):<10} {p(r['tool']):<16} "
                      f"{p(r['task_status']):<15} {p(r['outcome'])}" for r in rows) or "(none)"
    emit(args, {"query": query, "workflows": rows}, human)
    return EXIT_OK


# --- worker / dev-server / demo ------------------------------------------------------------------


async def cmd_worker(args: argparse.Namespace) -> int:
    import logging

    from mcp_temporal_tasks.worker.runner import connect, ensure_search_attributes, run_workers, setup_logging

    setup_logging(args.log_level, json_logs=not args.plain_logs)
    log = logging.getLogger("mcp_tasks.worker")
    cfg = _load_config(args)
    if args.address:
        cfg.temporal.address = args.address
    if args.namespace:
        cfg.temporal.namespace = args.namespace
    if args.task_queue:
        cfg.temporal.task_queue = args.task_queue
    from mcp_temporal_tasks.worker.config import ConfigError
    from mcp_temporal_tasks.worker.runner import make_activities

    try:
        activities = make_activities(cfg)  # refuses an unwritable result store before anything runs
    except ConfigError as exc:
        raise CliError(f"configuration: {exc}", EXIT_USAGE) from None
    from mcp_temporal_tasks.worker.runner import connect_options

    try:
        options, _ = connect_options(cfg=cfg)
    except ConfigError as exc:
        raise CliError(f"configuration: {exc}", EXIT_USAGE) from None
    # What the logs below name: the effective address and namespace, wherever they came from.
    cfg.temporal.address, cfg.temporal.namespace = options["target_host"], options["namespace"]
    try:
        # A worker is a service: it may come up before Temporal does (compose, Kubernetes), so it waits.
        client = await asyncio.wait_for(connect(cfg=cfg, metrics_port=cfg.worker.metrics_port,
                                                wait_s=WORKER_CONNECT_WAIT_S),
                                        timeout=WORKER_CONNECT_WAIT_S + 15)
    except Exception as exc:
        raise CliError(f"Temporal is unreachable at {cfg.temporal.address}: {exc}", EXIT_UNREACHABLE) from None
    added = await ensure_search_attributes(client, cfg.temporal.namespace)
    if added:
        log.info("registered search attributes %s in namespace %s", ", ".join(added), cfg.temporal.namespace)
    else:
        log.info("search attributes already registered in namespace %s", cfg.temporal.namespace)
    if cfg.worker.metrics_port:
        log.info("Prometheus metrics on :%d/metrics", cfg.worker.metrics_port)
    await run_workers(client, cfg, activities=activities, on_ready=lambda: log.info(
        "ready: polling task queue %s on %s (namespace %s; servers: %s)", cfg.temporal.task_queue,
        cfg.temporal.address, cfg.temporal.namespace, ", ".join(sorted(cfg.servers)) or "none",
        extra={"event": "ready", "task_queue": cfg.temporal.task_queue}))
    log.info("stopped")
    return EXIT_OK


async def cmd_dev_server(args: argparse.Namespace) -> int:
    from mcp_temporal_tasks.worker.devserver import DevServer, DevServerError

    server = DevServer(db=args.db, port=args.port, ui_port=args.ui_port, ip=args.ip)
    try:
        server.start(foreground=True)
    except DevServerError as exc:
        raise CliError(str(exc), EXIT_UNREACHABLE) from None
    err(f"Temporal dev server at {server.address} · UI {server.ui_url} · state {server.db} (Ctrl-C stops)")
    try:
        while server.proc and server.proc.poll() is None:
            await asyncio.sleep(0.5)
    finally:
        server.stop()
    return EXIT_OK


def _require_demo_extra() -> None:
    """The demo server's fastmcp is an extra: a worker image does not carry it."""
    import importlib.util

    if importlib.util.find_spec("fastmcp") is None:
        raise CliError("the demo needs the [demo] extra: pip install 'mcp-temporal-tasks[demo]' "
                       "(from a checkout: pip install '.[demo]')", EXIT_USAGE)


async def cmd_demo(args: argparse.Namespace) -> int:
    _require_demo_extra()
    from mcp_temporal_tasks.worker.demo import run_demo

    return await run_demo(args)


def cmd_demo_server(args: argparse.Namespace) -> int:
    _require_demo_extra()
    from mcp_temporal_tasks.worker import demo_server

    argv = ["--host", args.host, "--port", str(args.port), "--poll-interval-ms", str(args.poll_interval_ms)]
    return demo_server.main(argv) or 0


# --- parser --------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mcp-tasks", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def temporal_opts(p: argparse.ArgumentParser) -> None:
        p.add_argument("--address", help="Temporal frontend HOST:PORT (default: $TEMPORAL_ADDRESS or localhost:7233)")
        p.add_argument("--namespace", help="Temporal namespace (default: $TEMPORAL_NAMESPACE or default)")

    def json_opt(p: argparse.ArgumentParser) -> None:
        p.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")

    p = sub.add_parser("run", help="run one MCP tool call as a durable task and follow it to its outcome")
    p.add_argument("tool", help="tool name")
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--server", help="a server name from the worker configuration")
    target.add_argument("--url", help="streamable HTTP endpoint of the MCP server")
    target.add_argument("--command", help="stdio MCP server command line, e.g. \"node server.mjs\"")
    p.add_argument("--args", help="tool arguments as a JSON object")
    p.add_argument("--id", help="workflow id (idempotent: the same id never runs the tool twice)")
    p.add_argument("--replay", choices=["never", "if_idempotent", "always", "with_approval"],
                   help="when a new tools/call may be sent after a lost or failed one (default: configured, else never)")
    p.add_argument("--idempotent", action="store_true", help="declare the tool idempotent (trusted: you say so)")
    p.add_argument("--idempotency-key", help="your key for this operation (also the default workflow id)")
    p.add_argument("--ttl", type=float, help="requested task TTL in seconds (2025-11-25 servers)")
    p.add_argument("--era", choices=["2025-11-25", "2026-07-28"], help="pin the protocol era")
    p.add_argument("--principal", help="who the call is made for (pool and ledger key)")
    p.add_argument("--detach", action="store_true", help="exit once the workflow is started; print its id")
    p.add_argument("--no-worker", action="store_true", help="do not run an in-process worker; rely on running ones")
    p.add_argument("--config", help="worker TOML configuration (default: $MCP_TASKS_CONFIG)")
    p.add_argument("--task-queue", default=os.environ.get("MCP_TASKS_TASK_QUEUE", "mcp-tasks"))
    temporal_opts(p)
    json_opt(p)
    p.set_defaults(func=cmd_run)

    for name, helptext, fn in (("status", "show where a task is", cmd_status),
                               ("result", "print a task's outcome", cmd_result),
                               ("cancel", "cancel a task (tasks/cancel); a finished task keeps its outcome", cmd_cancel),
                               ("approve", "approve the pending replay of a task (policy with_approval)", cmd_approve)):
        p = sub.add_parser(name, help=helptext)
        p.add_argument("id", help="workflow id")
        if name == "result":
            p.add_argument("--wait", action="store_true", help="wait for the outcome (exits like run)")
        temporal_opts(p)
        json_opt(p)
        p.set_defaults(func=fn)

    p = sub.add_parser("answer", help="answer a task's outstanding input request")
    p.add_argument("id", help="workflow id")
    p.add_argument("--key", help="which input request (default: all outstanding)")
    p.add_argument("--json", dest="response", metavar="RESPONSE",
                   help='ElicitResult as JSON, e.g. \'{"action":"accept","content":{"approve":true}}\'')
    temporal_opts(p)
    p.set_defaults(func=cmd_answer, json=False)

    p = sub.add_parser("list", help="list MCP task workflows")
    p.add_argument("--outcome", help="completed, tool_error, failed, cancelled, expired, lost, ...")
    p.add_argument("--status", help="last MCP task status: working, input_required, completed, ...")
    p.add_argument("--server", help="configured server name")
    p.add_argument("--tool", help="tool name")
    p.add_argument("--limit", type=int, default=50)
    temporal_opts(p)
    json_opt(p)
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("worker", help="run workflows and activities on a task queue")
    p.add_argument("--config", help="TOML configuration (default: $MCP_TASKS_CONFIG)")
    p.add_argument("--task-queue", help="task queue (default from config, else mcp-tasks)")
    p.add_argument("--log-level", default=os.environ.get("MCP_TASKS_LOG_LEVEL", "INFO"))
    p.add_argument("--plain-logs", action="store_true", help="human-readable logs instead of JSON lines")
    temporal_opts(p)
    p.set_defaults(func=cmd_worker)

    p = sub.add_parser("dev-server", help="the embedded Temporal dev server, in the foreground")
    p.add_argument("--db", help="SQLite file (default: <state dir>/temporal.db)")
    p.add_argument("--port", type=int, default=7233)
    p.add_argument("--ui-port", type=int, default=8233)
    p.add_argument("--ip", default="127.0.0.1")
    p.set_defaults(func=cmd_dev_server)

    p = sub.add_parser("demo", help="embedded Temporal + demo MCP server + worker: see the point in a minute")
    p.add_argument("--keep", action="store_true", help="keep everything running after the demo (Ctrl-C stops)")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("demo-server", help="the bundled task-capable demo MCP server (streamable HTTP)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--poll-interval-ms", type=int, default=500)
    p.set_defaults(func=cmd_demo_server)
    return parser


def main(argv: list[str] | None = None) -> int:
    from mcp_temporal_tasks.activities.wire.redact import install_log_redaction

    args = build_parser().parse_args(argv)
    install_log_redaction()  # `worker` replaces the handlers with its own, redacting as well (setup_logging)
    try:
        if asyncio.iscoroutinefunction(args.func):
            code = asyncio.run(args.func(args))
        else:
            code = args.func(args)
    except CliError as exc:
        err(f"mcp-tasks: {printable(exc)}")  # may quote server text
        code = exc.code
    except KeyboardInterrupt:
        code = 130
    sys.stdout.flush()
    sys.stderr.flush()
    # The Temporal runtime's threads can abort a normal interpreter shutdown; our work is flushed.
    os._exit(code)


if __name__ == "__main__":
    main()
