"""``run`` and ``tools``: the commands that reach an MCP server.

``run`` starts (or re-attaches to) a task, follows it, and cancels it on Ctrl-C; ``tools`` shows what a server offers
and the policy a worker applies. What they share with the operations on existing tasks (the status query, the queue
watch, the no-worker hint) is :mod:`.operations`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shlex
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from temporalio.client import (
    WorkflowExecutionStatus,
)

from mcp_temporal_tasks.activities.activity_io import ServerConfig, ToolPolicy
from mcp_temporal_tasks.activities.result_store import state_dir
from mcp_temporal_tasks.activities.wire import (
    McpWireError,
    NotMcpEndpoint,
    TaskUnreachable,
    TransportError,
    WireSession,
    stdio,
)
from mcp_temporal_tasks.activities.wire.auth import for_subject
from mcp_temporal_tasks.protocol.eras import era_rules, protocol_label
from mcp_temporal_tasks.protocol.tasks import Endpoint, ToolInfo
from mcp_temporal_tasks.worker.cli.connection import temporal, ui_link, untraced, why
from mcp_temporal_tasks.worker.cli.following import (
    LiveBoard,
    exit_code,
    follow,
    outcome_summary,
)
from mcp_temporal_tasks.worker.cli.operations import (
    CONFIG_MEMO,
    _existing,
    _no_worker_hint,
    _QueueWatch,
)
from mcp_temporal_tasks.worker.cli.parser import (
    EXIT_ENDED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    RUN_QUEUE_PREFIX,
    CliError,
    emit,
    err,
    hint,
    prog,
    report,
)
from mcp_temporal_tasks.worker.cli.plan import (
    check_env_refs,
    configuration,
    plain_errors,
    run_plan,
)
from mcp_temporal_tasks.worker.cli.serving import prepare_worker, run_logging
from mcp_temporal_tasks.worker.config import ConfigError, WorkerConfig
from mcp_temporal_tasks.worker.printable import printable
from mcp_temporal_tasks.worker.registry import ensure_search_attributes
from mcp_temporal_tasks.worker.runner import run_workers
from mcp_temporal_tasks.workflows.client import RequestMismatch, outcome_of, start_mcp_task
from mcp_temporal_tasks.workflows.mcp_task import McpTaskWorkflow
from mcp_temporal_tasks.workflows.records import (
    McpTaskOutcome,
    McpTaskRequest,
)

# --- run -----------------------------------------------------------------------------------------


#: After the first Ctrl-C (or SIGTERM) of a foreground `run`: how long the task has to report how it ended.
CANCEL_WAIT_S = 4.0


#: After the first Ctrl-C (or SIGTERM), `run` has left by then whatever anything does: its stdio children are
#: killed (their process groups) and it exits 130 (or with the outcome's code, once that is printed).
INTERRUPT_EXIT_S = 4.5


#: Once the outcome is printed: how long the in-process worker and its MCP sessions get to stop (run_workers is
#: bounded by itself; this is the second fence).
WORKER_STOP_S = 15.0


def _endpoint_of(request: McpTaskRequest, cfg: WorkerConfig) -> Endpoint | None:
    return (
        request.server
        if isinstance(request.server, Endpoint)
        else (cfg.servers[request.server].endpoint() if request.server in cfg.servers else None)
    )


async def _preflight(request: McpTaskRequest, cfg: WorkerConfig, *, stdio: bool) -> None:
    """Fail fast (exit 3) when the MCP server cannot be reached: an HTTP server not listening, or (``stdio``:
    only where this process's worker would spawn it) a command that cannot start or exits before the
    handshake. Never sends ``tools/call``."""
    endpoint = _endpoint_of(request, cfg)
    if endpoint is None or (endpoint.url is None and not stdio):
        return
    try:
        # As the task's worker opens it: a subject's server with the task's principal's grant.
        subject_endpoint = for_subject(endpoint, request.principal)
        client = await asyncio.wait_for(WireSession.connect(subject_endpoint, era=request.era), timeout=15)
        await client.aclose()
    except (TimeoutError, TransportError, TaskUnreachable) as exc:
        raise CliError(
            f"MCP server unreachable at start ({printable(endpoint.identity())}): "
            f"{printable(exc) or 'no answer to initialize within 15 s'}; no tools/call was sent",
            EXIT_UNREACHABLE,
        ) from None
    except NotMcpEndpoint as exc:  # nothing to run a task on: refused before any workflow starts
        raise CliError(f"{printable(exc)}; nothing was started", EXIT_UNREACHABLE, kind="not_mcp") from None
    except Exception as exc:  # refused (by the server, or no OAuth token): the workflow reports precisely why
        err(f"note: the handshake with MCP server at {printable(endpoint.identity())} failed: {printable(exc)}")


def _resume_command(wid: str) -> str:
    """The command line of this `run`, with ``--id``: typed again, it re-attaches to the task and runs its worker."""
    argv = sys.argv[1:]
    if "--id" not in argv and not any(a.startswith("--id=") for a in argv):
        argv = [*argv, "--id", wid]
    return f"{prog()} {shlex.join(argv)}"


class _Interrupts:
    """SIGINT/SIGTERM while a foreground `run` follows its task. The first asks the workflow to cancel the task
    (``first`` is set) and arms the deadline: ``overdue`` is called (from a timer thread: it must exit the
    process) ``INTERRUPT_EXIT_S`` later if `run` is still there; the second calls ``leave`` (which exits at once)."""

    def __init__(self) -> None:
        self.first = asyncio.Event()
        self.count = 0
        self.leave: Callable[[], None] = lambda: None
        self.overdue: Callable[[], None] = lambda: _exit_now(EXIT_INTERRUPTED, "interrupted; nothing more was sent")
        self.deadline: float | None = None

    def __call__(self) -> None:
        self.count += 1
        if self.count == 1:
            self.first.set()
            self.deadline = time.monotonic() + INTERRUPT_EXIT_S
            timer = threading.Timer(INTERRUPT_EXIT_S, lambda: self.overdue())
            timer.daemon = True
            timer.start()
        else:
            self.leave()

    def left_s(self, default: float) -> float:
        """What is left before the deadline (``default`` when not interrupted), at least a moment."""
        return default if self.deadline is None else max(0.1, self.deadline - time.monotonic() - 0.3)

    def install(self, loop: asyncio.AbstractEventLoop) -> list[int]:
        installed: list[int] = []
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, self)
                installed.append(sig)
        return installed


def _leave_now(args: argparse.Namespace, message: str) -> None:
    """The second Ctrl-C (or the interrupt deadline): say where the task stands and how to follow it, then exit 130
    at once, leaving no stdio child behind."""
    report(CliError(message, EXIT_INTERRUPTED), getattr(args, "json", False))
    _exit_now(EXIT_INTERRUPTED)


def _exit_now(code: int, message: str | None = None) -> None:
    """Leave the process now (any thread): stdio children killed, output flushed."""
    if message:
        report(CliError(message, code), False)
    stdio.kill_all()
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


def _refused_before_sending(outcome: McpTaskOutcome) -> bool:
    """``rejected`` with no tools/call sent (unknown server, inline endpoint refused, invalid request, server
    unreachable before the call): nothing happened that running it again could repeat."""
    return outcome.outcome.value == "rejected" and not outcome.operation_attempts


#: How long this command's own worker may take to poll its queue before `run` gives up (nothing started yet).
WORKER_START_S = 30.0


def _worker_error(task: asyncio.Task[None]) -> CliError:
    """Why this command's worker stopped, as the command's end: a configuration error is exit 2, anything else 3."""
    exc = None if task.cancelled() else task.exception()
    if isinstance(exc, ConfigError):
        return CliError(f"configuration: {exc}", EXIT_USAGE, kind="config")
    return CliError(
        f"this command's worker stopped: {why(exc) if exc is not None else 'it ended by itself'}",
        EXIT_UNREACHABLE,
        kind="worker_failed",
    )


async def _worker_started(task: asyncio.Task[None], polling: asyncio.Event, queue: str) -> None:
    """Return once this command's worker polls ``queue``; its start failure ends the command at once with its own
    error, and so does a worker that does not poll within WORKER_START_S (nothing was started)."""
    ready = asyncio.ensure_future(polling.wait())
    try:
        await asyncio.wait({task, ready}, timeout=WORKER_START_S, return_when=asyncio.FIRST_COMPLETED)
    finally:
        ready.cancel()
    if task.done():
        raise _worker_error(task) from None
    if not polling.is_set():
        raise CliError(
            f"this command's worker did not start polling task queue {queue!r} within "
            f"{WORKER_START_S:g} s; nothing was started (details in {state_dir() / 'run.log'})",
            EXIT_UNREACHABLE,
            kind="worker_failed",
        )


class _WorkerWatch:
    """``follow``'s check for a task this command's own worker runs: that worker stopping ends the command at once
    with its error (exit 3, or 2 for a configuration error), naming how to resume the task."""

    def __init__(self, task: asyncio.Task[None], wid: str) -> None:
        self.task, self.wid = task, wid

    async def __call__(self) -> str | None:
        if self.task.done():
            error = _worker_error(self.task)
            raise CliError(
                f"{error}; {self.wid} has no worker now: resume it with the same command: {_resume_command(self.wid)}",
                error.code,
                kind=error.kind,
            )
        return None


async def cmd_run(args: argparse.Namespace) -> int:
    plan = run_plan(args)  # everything checked before anything connects (exit 2), worked out once
    request = plan.request
    cfg = plan.cfg
    wid = plan.wid
    in_process = plan.in_process
    queue = plan.queue
    board = LiveBoard()
    # The in-process worker may reach the one endpoint its user typed (--url/--command), and nothing
    # else inline beyond what the configuration allows. --no-worker: the running workers decide.
    if in_process:  # its configuration (result store, tracing) is checked before anything connects
        activities, tracing = prepare_worker(cfg, inline_allowlist=plan.typed, live_sink=board)
        if tracing is not None:
            err(f"note: tracing: {tracing.where}")
    # Library logs (the MCP SDK's OAuth flow logs its failures with a traceback) go to the log file from here on,
    # the handshake below included; its errors reach stderr as one line.
    run_logging()
    await _preflight(request, cfg, stdio=in_process)
    loop = asyncio.get_running_loop()
    interrupts = _Interrupts()
    installed: list[int] = []
    async with temporal(plan.target, allow_embedded=True, detached=args.detach) as (client, ui):
        existing = await _existing(client, wid)
        again = False
        if existing is not None and existing.status == WorkflowExecutionStatus.RUNNING:
            if in_process and not args.task_queue:
                if existing.task_queue.startswith(RUN_QUEUE_PREFIX):
                    queue = existing.task_queue  # left by an earlier `run`: this command is its worker now
                else:
                    in_process = False  # the workers of its queue run it; ours would take nothing
                    queue = existing.task_queue
        elif existing is not None:
            with contextlib.suppress(Exception):
                again = _refused_before_sending(await asyncio.wait_for(outcome_of(client.get_workflow_handle(wid)), 10))
        stop = asyncio.Event()
        worker_task = None
        if not args.detach:
            installed = interrupts.install(loop)
        if in_process:
            await ensure_search_attributes(client, client.namespace)
            cfg.temporal.task_queue = queue
            polling = asyncio.Event()
            worker_task = asyncio.create_task(
                run_workers(client, cfg, stop=stop, activities=activities, handle_signals=False, on_ready=polling.set)
            )
            # Nothing is started before this command's worker polls: a worker that cannot start ends the command
            # at once with its own error, instead of a task that waits for it forever.
            await _worker_started(worker_task, polling, queue)
        interrupted = False
        try:
            try:
                # Again: only a run refused before anything was sent (a failed one) is replaced.
                await start_mcp_task(
                    client,
                    request,
                    workflow_id=wid,
                    task_queue=queue,
                    replace_failed=again,
                    memo={CONFIG_MEMO: str(Path(args.config).absolute())} if args.config else None,
                )
            except RequestMismatch as exc:
                raise CliError(f"{exc} (mcp-tasks run ... --id NEW)", EXIT_USAGE, kind="request_mismatch") from None
            handle = untraced(client).get_workflow_handle_for(McpTaskWorkflow.run, wid)
            link = ui_link(ui, client.namespace, wid)
            at = f" (UI: {link})" if link else ""
            if again:
                err(
                    f"note: {wid} was refused before anything was sent (rejected, no tools/call): running it again "
                    "with the same id"
                )
            elif existing is not None:
                when = existing.start_time.strftime("%Y-%m-%d %H:%M:%S UTC") if existing.start_time else "earlier"
                if existing.status == WorkflowExecutionStatus.RUNNING:
                    err(
                        f"note: {wid} is already running (started {when}): following it; no new tools/call is sent. "
                        "To run the tool again as a new task: --id NEW"
                    )
                else:
                    err(
                        f"note: {wid} already ran (started {when}): this is its STORED outcome, no new tools/call "
                        f"was sent. To run the tool again: mcp-tasks run ... --id NEW (any new workflow id)"
                    )
            if args.detach:
                emit(args, {"workflow_id": wid}, wid)
                err(
                    f"started; a worker on task queue {queue!r} runs it "
                    f"({hint('worker', '--task-queue', queue, config=args.config)}).{at}"
                )
                return EXIT_OK
            watch = (
                _WorkerWatch(worker_task, wid)
                if worker_task is not None
                else _QueueWatch(client, queue, wid, on_interrupt="Ctrl-C cancels the task", config=args.config)
            )

            def left() -> str:
                if in_process:
                    return (
                        f"{wid} has no worker now (it ran in this command, on task queue {queue}); resume it "
                        f"with the same command: {_resume_command(wid)}"
                    )
                if isinstance(watch, _QueueWatch) and watch.none:
                    return (
                        f"no worker polls task queue {queue}: the task waits (a cancel asked for included) "
                        f"until one does: {_no_worker_hint(queue, wid, args.config)}; then follow it with: "
                        f"{hint('result', wid, '--wait')}"
                    )
                return f"the workers on task queue {queue} finish it; follow it with: {hint('result', wid, '--wait')}"

            cancel_sent = False
            interrupts.leave = lambda: _leave_now(
                args,
                f"interrupted twice: left {wid} ({'cancel requested' if cancel_sent else 'not cancelled'}); {left()}",
            )
            interrupts.overdue = lambda: _leave_now(
                args,
                f"interrupted: {wid} did not end within {INTERRUPT_EXIT_S:g} s; left it "
                f"({'cancel requested' if cancel_sent else 'not cancelled'}); {left()}",
            )
            following = asyncio.create_task(follow(handle, ui=link, check=watch, board=board if in_process else None))
            first = asyncio.create_task(interrupts.first.wait())
            await asyncio.wait({following, first}, return_when=asyncio.FIRST_COMPLETED)
            if not following.done():
                interrupted = True
                err(
                    f"interrupted: cancelling {wid} through its workflow (tasks/cancel); waiting up to "
                    f"{CANCEL_WAIT_S:g} s for how it ends. Ctrl-C again to leave at once"
                )
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(handle.cancel(), CANCEL_WAIT_S)
                    cancel_sent = True
                await asyncio.wait({following}, timeout=max(0.1, CANCEL_WAIT_S - 0.5))
                if not following.done():
                    following.cancel()
                    raise CliError(
                        f"interrupted: {wid} did not end within {CANCEL_WAIT_S:g} s of the cancel; {left()}",
                        EXIT_INTERRUPTED,
                    )
            first.cancel()
            outcome = following.result()
            # Said as soon as it is known, before the worker and its MCP sessions (stdio children) wind down.
            emit(args, outcome.model_dump(mode="json"), outcome_summary(outcome))
            code = exit_code(outcome)
            if interrupted:
                err(f"mcp-tasks: interrupted: {wid} ended {outcome.outcome.value} after the cancel")
                code = EXIT_INTERRUPTED
            interrupts.overdue = interrupts.leave = lambda: _exit_now(code)
        finally:
            stop.set()
            if worker_task is not None:
                # Bounded (run_workers is, by itself): after an interrupt, by what is left of INTERRUPT_EXIT_S.
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(asyncio.shield(worker_task), interrupts.left_s(WORKER_STOP_S))
            for sig in installed:
                loop.remove_signal_handler(sig)
    return code


def tool_policy(name: str, info: ToolInfo | None, server: ServerConfig | None) -> dict[str, Any]:
    """The replay policy a worker of this configuration applies to ``name`` when the request says nothing (the
    workflow's order: the request, then configuration, then annotations of a server whose annotations it trusts)."""
    from mcp_temporal_tasks.workflows import decisions

    policy = (server.tools.get(name) if server else None) or ToolPolicy()
    annotated = decisions.annotation_idempotent(
        trusted=bool(server and server.trust_annotations),
        idempotent_hint=info.idempotent_hint if info else None,
        read_only_hint=info.read_only_hint if info else None,
    )
    rule = decisions.replay_rule(
        configured_policy=policy.replay,
        configured_idempotent=policy.idempotent,
        annotated_idempotent=annotated,
        configured_max=policy.max_replays,
    )
    source = (
        "configuration"
        if policy.idempotent is not None
        else "annotations (trusted)"
        if annotated is not None
        else "default"
    )
    return {
        "replay": rule.policy.value,
        "idempotent": rule.idempotent,
        "idempotent_from": source,
        "max_replays": rule.max_replays,
        "output_schema": "configured"
        if policy.output_schema is not None
        else ("server's" if info is not None and info.output_schema is not None else None),
        "max_call_s": policy.max_call_s,
    }


def _runs_as(era: str, tasks_offered: bool, support: str | None) -> str:
    if not era_rules(era).client_asks_for_task:
        if not tasks_offered:
            return "synchronous (the server offers no tasks extension)"
        if support == "required":
            return "task (the server requires one)"
        if support == "forbidden":
            return "synchronous"
        return "task or synchronous (the server decides per call)"
    if tasks_offered and support in ("optional", "required"):
        return "task"
    return "refused: task required, not offered" if support == "required" else "synchronous"


def _arguments_line(schema: Any) -> str:
    """A tool's input schema in one line: ``seconds: number = 60, text: string (required)``; "" for none."""
    if not isinstance(schema, dict) or not isinstance(schema.get("properties"), dict):
        return ""
    required = set(schema.get("required") or []) if isinstance(schema.get("required"), list) else set()
    parts = []
    for name, prop in schema["properties"].items():
        prop = prop if isinstance(prop, dict) else {}
        kind = prop.get("type") or (
            "|".join(str(a.get("type")) for a in prop.get("anyOf", []) if isinstance(a, dict)) or "any"
        )
        text = f"{name}: {'|'.join(kind) if isinstance(kind, list) else kind}"
        if "default" in prop:
            text += f" = {json.dumps(prop['default'])[:40]}"
        if name in required:
            text += " (required)"
        parts.append(text)
    return ", ".join(parts) or "none"


async def cmd_tools(args: argparse.Namespace) -> int:
    """A server's tools as this worker configuration sees them: task support, the server's idempotency hints (and
    whether they count), and the replay policy a worker applies. Sends ``initialize``/``server/discover`` and
    ``tools/list`` only, never ``tools/call``."""
    cfg = configuration(args)
    server: ServerConfig | None = None
    try:
        if args.server:
            if args.server not in cfg.servers:
                known = ", ".join(sorted(cfg.servers)) or "none"
                raise CliError(
                    f"unknown server {args.server!r} (configured: {known}); use --config, --url or --command",
                    EXIT_USAGE,
                )
            server = cfg.servers[args.server]
            check_env_refs(cfg, only=[args.server])
            endpoint = server.endpoint()
        elif args.url:
            endpoint = Endpoint(url=args.url)
        else:
            endpoint = Endpoint(command=shlex.split(args.command))
    except (ValidationError, ValueError) as exc:
        raise CliError(f"invalid endpoint: {plain_errors(exc)}", EXIT_USAGE) from None
    run_logging()
    where = printable(endpoint.identity())
    try:
        client = await asyncio.wait_for(
            WireSession.connect(endpoint, era=args.era or (server.era if server else None)), timeout=15
        )
    except (TimeoutError, TransportError, TaskUnreachable) as exc:
        raise CliError(
            f"MCP server unreachable ({where}): {printable(exc) or 'no answer within 15 s'}", EXIT_UNREACHABLE
        ) from None
    except NotMcpEndpoint as exc:
        raise CliError(printable(exc), EXIT_UNREACHABLE, kind="not_mcp") from None
    except McpWireError as exc:
        raise CliError(
            f"the handshake with MCP server at {where} failed: {printable(exc)}", EXIT_ENDED, kind="refused"
        ) from None
    try:
        tools = await asyncio.wait_for(client.list_tools(), timeout=15)
        raw = {t.get("name"): t for t in client.raw_tools if isinstance(t, dict)}
    except (TimeoutError, McpWireError) as exc:
        raise CliError(f"MCP server at {where}: tools/list failed: {why(exc)}", EXIT_ENDED, kind="refused") from None
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(client.aclose(), 5)
    rows: list[dict[str, Any]] = []
    for name, info in sorted(tools.items()):
        description = raw.get(name, {}).get("description")
        schema = raw.get(name, {}).get("inputSchema")
        rows.append(
            {
                "name": name,
                "description": description if isinstance(description, str) else None,
                "input_schema": schema if isinstance(schema, dict) else None,
                "arguments": _arguments_line(schema),
                "task_support": info.task_support,
                "runs_as": f"refused: invalid x-mcp-header ({problem})"
                if (problem := client.header_problem(name)) is not None
                else _runs_as(client.era, client.tasks_offered, info.task_support),
                "annotations": {
                    "readOnlyHint": info.read_only_hint,
                    "idempotentHint": info.idempotent_hint,
                    "destructiveHint": info.destructive_hint,
                },
                "policy": tool_policy(name, info, server),
            }
        )
    jobs: list[dict[str, Any]] = []
    for name, job in sorted((server.jobs if server else {}).items()):
        jobs.append(
            {
                "name": name,
                "submit": job.submit,
                "status": job.status,
                "result": job.result,
                "cancel": job.cancel,
                "missing": sorted(t for t in (job.submit, job.status, job.result, job.cancel) if t and t not in tools),
                "policy": {
                    "replay": job.replay or "never",
                    "idempotent": bool(job.idempotent),
                    "max_replays": job.max_replays if job.max_replays is not None else 1,
                },
            }
        )
    label = args.server or endpoint.identity()
    obj = {
        "server": label,
        "identity": endpoint.identity(),
        "era": client.era,
        "protocol_version": client.protocol_version,
        "tasks": client.tasks_offered,
        "trust_annotations": bool(server and server.trust_annotations),
        "tools": rows,
        "jobs": jobs,
    }
    p = printable
    named = p(label) if label == endpoint.identity() else f"{p(label)} ({where})"  # a URL said once
    lines = [
        f"{named} · era {client.era} · protocol {p(protocol_label(client.era, client.protocol_version))}"
        f" · tasks {'offered' if client.tasks_offered else 'not offered'}"
        f" · annotations {'trusted' if obj['trust_annotations'] else 'not trusted (trust_annotations = false)'}"
    ]
    for r in rows:
        pol, ann = r["policy"], r["annotations"]
        hints = (
            ", ".join(
                k
                for k, v in (
                    ("read-only", ann["readOnlyHint"]),
                    ("idempotent", ann["idempotentHint"]),
                    ("destructive", ann["destructiveHint"]),
                )
                if v
            )
            or "none"
        )
        lines.append(
            f"  {p(r['name'])}: runs as {r['runs_as']}"
            + (f" (taskSupport {r['task_support']})" if r["task_support"] else "")
            + f" · hints: {hints} · replay {pol['replay']}, "
            f"{'idempotent' if pol['idempotent'] else 'not idempotent'} ({pol['idempotent_from']}), "
            f"max_replays {pol['max_replays']}"
            + (f", output schema {pol['output_schema']}" if pol["output_schema"] else "")
            + (f", max_call_s {pol['max_call_s']:g}" if pol["max_call_s"] else "")
        )
        if r["description"]:
            lines.append(f"      {p(' '.join(r['description'].split())[:200])}")
        if r["arguments"]:
            lines.append(f"      arguments: {p(r['arguments'][:300])}")
    for j in jobs:
        lines.append(
            f"  job {p(j['name'])}: submit {p(j['submit'])}, status {p(j['status'])}"
            + (f", result {p(j['result'])}" if j["result"] else "")
            + (f", cancel {p(j['cancel'])}" if j["cancel"] else "")
            + f" · replay {j['policy']['replay']}"
            + (f" · NOT LISTED by the server: {p(', '.join(j['missing']))}" if j["missing"] else "")
        )
    if not rows:
        lines.append("  (no tools)")
    emit(args, obj, "\n".join(lines))
    return EXIT_OK
