"""The operations on tasks: ``run`` (start or re-attach, follow, Ctrl-C cancels), ``tools`` (what a server offers
and the policy a worker applies), ``status``, ``result``, ``cancel``, ``approve``, ``answer`` and ``list``."""

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
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import (
    Client,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowUpdateFailedError,
)
from temporalio.service import RPCError, RPCStatusCode

from mcp_temporal_tasks.activities.models import ServerConfig, ToolPolicy
from mcp_temporal_tasks.activities.result_store import ResultStore, state_dir
from mcp_temporal_tasks.activities.wire import McpTaskClient, McpWireError, TaskUnreachable, TransportError, stdio
from mcp_temporal_tasks.activities.wire.models import Endpoint, ToolInfo, protocol_label
from mcp_temporal_tasks.worker.cli.connection import temporal, ui_link, untraced, why
from mcp_temporal_tasks.worker.cli.following import (
    TROUBLE,
    LiveBoard,
    TaskHandle,
    exit_code,
    follow,
    live_state,
    outcome_summary,
    view_line,
    workflow_trouble,
)
from mcp_temporal_tasks.worker.cli.form import prompt_elicitation
from mcp_temporal_tasks.worker.cli.parser import (
    EXIT_ENDED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    MAX_ID_CHARS,
    RUN_QUEUE_PREFIX,
    CliError,
    emit,
    err,
    hint,
    outcome_values,
    prog,
    report,
    status_values,
)
from mcp_temporal_tasks.worker.cli.plan import (
    Target,
    check_env_refs,
    configuration,
    plain_errors,
    run_plan,
    temporal_target,
)
from mcp_temporal_tasks.worker.cli.serving import prepare_worker, run_logging
from mcp_temporal_tasks.worker.config import ConfigError, WorkerConfig
from mcp_temporal_tasks.worker.printable import printable
from mcp_temporal_tasks.worker.registry import ensure_search_attributes
from mcp_temporal_tasks.worker.runner import run_workers
from mcp_temporal_tasks.workflows.client import RequestMismatch, outcome_of, start_mcp_task
from mcp_temporal_tasks.workflows.mcp_task import McpTaskWorkflow, validate_input_response
from mcp_temporal_tasks.workflows.models import (
    McpTaskOutcome,
    McpTaskRequest,
    TaskView,
)

#: After the first Ctrl-C (or SIGTERM) of a foreground `run`: how long the task has to report how it ended.
CANCEL_WAIT_S = 4.0
#: `cancel`: how long it waits for the task to report how it ended before it says it has not yet.
CANCEL_COMMAND_WAIT_S = 30.0
#: After the first Ctrl-C (or SIGTERM), `run` has left by then whatever anything does: its stdio children are
#: killed (their process groups) and it exits 130 (or with the outcome's code, once that is printed).
INTERRUPT_EXIT_S = 4.5
#: Once the outcome is printed: how long the in-process worker and its MCP sessions get to stop (run_workers is
#: bounded by itself; this is the second fence).
WORKER_STOP_S = 15.0
#: `status`: how long a worker has to answer the status query.
STATUS_QUERY_S = 5.0


# --- run -----------------------------------------------------------------------------------------


def _endpoint_of(request: McpTaskRequest, cfg: WorkerConfig) -> Endpoint | None:
    return request.server if isinstance(request.server, Endpoint) else (
        cfg.servers[request.server].endpoint() if request.server in cfg.servers else None)


async def _preflight(request: McpTaskRequest, cfg: WorkerConfig, *, stdio: bool) -> None:
    """Fail fast (exit 3) when the MCP server cannot be reached: an HTTP server not listening, or (``stdio``:
    only where this process's worker would spawn it) a command that cannot start or exits before the
    handshake. Never sends ``tools/call``."""
    endpoint = _endpoint_of(request, cfg)
    if endpoint is None or (endpoint.url is None and not stdio):
        return
    try:
        client = await asyncio.wait_for(McpTaskClient.connect(endpoint, era=request.era), timeout=15)
        await client.aclose()
    except (TimeoutError, TransportError, TaskUnreachable) as exc:
        raise CliError(f"MCP server unreachable at start ({printable(endpoint.identity())}): "
                       f"{printable(exc) or 'no answer to initialize within 15 s'}; no tools/call was sent",
                       EXIT_UNREACHABLE) from None
    except Exception as exc:  # refused (by the server, or no OAuth token): the workflow reports precisely why
        err(f"note: the handshake with MCP server at {printable(endpoint.identity())} failed: {printable(exc)}")


async def _existing(client: Client, wid: str) -> WorkflowExecutionDescription | None:
    """The description of workflow ``wid``, or None when there is none."""
    try:
        return await client.get_workflow_handle(wid).describe()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return None
        raise


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
#: How often a command that waits looks at the task queue's pollers (as `status` does).
QUEUE_CHECK_S = 5.0


def _worker_error(task: asyncio.Task[None]) -> CliError:
    """Why this command's worker stopped, as the command's end: a configuration error is exit 2, anything else 3."""
    exc = None if task.cancelled() else task.exception()
    if isinstance(exc, ConfigError):
        return CliError(f"configuration: {exc}", EXIT_USAGE, kind="config")
    return CliError(f"this command's worker stopped: {why(exc) if exc is not None else 'it ended by itself'}",
                    EXIT_UNREACHABLE, kind="worker_failed")


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
        raise CliError(f"this command's worker did not start polling task queue {queue!r} within "
                       f"{WORKER_START_S:g} s; nothing was started (details in {state_dir() / 'run.log'})",
                       EXIT_UNREACHABLE, kind="worker_failed")


class _WorkerWatch:
    """``follow``'s check for a task this command's own worker runs: that worker stopping ends the command at once
    with its error (exit 3, or 2 for a configuration error), naming how to resume the task."""

    def __init__(self, task: asyncio.Task[None], wid: str) -> None:
        self.task, self.wid = task, wid

    async def __call__(self) -> str | None:
        if self.task.done():
            error = _worker_error(self.task)
            raise CliError(f"{error}; {self.wid} has no worker now: resume it with the same command: "
                           f"{_resume_command(self.wid)}", error.code, kind=error.kind)
        return None


class _QueueWatch:
    """``follow``'s check for a task other workers run: every QUEUE_CHECK_S whether any polls its task queue (as
    `status` does), one line when none does (and the command that serves it), one when one does again. Waiting goes
    on: a worker that starts picks the task up."""

    def __init__(self, client: Client, queue: str, wid: str, *, on_interrupt: str, config: str | None = None) -> None:
        self.client, self.queue, self.wid, self.config = client, queue, wid, config
        #: What Ctrl-C does in the command that follows: `run` cancels the task, `result --wait` only stops following.
        self.on_interrupt = on_interrupt
        self.none = False
        self.next_at = 0.0

    async def __call__(self) -> str | None:
        now = asyncio.get_running_loop().time()
        if now < self.next_at:
            return None
        self.next_at = now + QUEUE_CHECK_S
        pollers = await _pollers(self.client, self.queue)
        if pollers == 0 and not self.none:
            self.none = True
            return (f"note: no worker polls task queue {self.queue!r}, so {self.wid} waits until one does: "
                    f"{_no_worker_hint(self.queue, self.wid, self.config)} ({self.on_interrupt})")
        if pollers and self.none:
            self.none = False
            return f"note: a worker polls task queue {self.queue!r} now"
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
            worker_task = asyncio.create_task(run_workers(
                client, cfg, stop=stop, activities=activities, handle_signals=False, on_ready=polling.set))
            # Nothing is started before this command's worker polls: a worker that cannot start ends the command
            # at once with its own error, instead of a task that waits for it forever.
            await _worker_started(worker_task, polling, queue)
        interrupted = False
        try:
            try:
                # Again: only a run refused before anything was sent (a failed one) is replaced.
                await start_mcp_task(client, request, workflow_id=wid, task_queue=queue, replace_failed=again,
                                     memo={CONFIG_MEMO: str(Path(args.config).absolute())} if args.config else None)
            except RequestMismatch as exc:
                raise CliError(f"{exc} (mcp-tasks run ... --id NEW)", EXIT_USAGE, kind="request_mismatch") from None
            handle = untraced(client).get_workflow_handle_for(McpTaskWorkflow.run, wid)
            link = ui_link(ui, client.namespace, wid)
            at = f" (UI: {link})" if link else ""
            if again:
                err(f"note: {wid} was refused before anything was sent (rejected, no tools/call): running it again "
                    "with the same id")
            elif existing is not None:
                when = existing.start_time.strftime("%Y-%m-%d %H:%M:%S UTC") if existing.start_time else "earlier"
                if existing.status == WorkflowExecutionStatus.RUNNING:
                    err(f"note: {wid} is already running (started {when}): following it; no new tools/call is sent. "
                        "To run the tool again as a new task: --id NEW")
                else:
                    err(f"note: {wid} already ran (started {when}): this is its STORED outcome, no new tools/call "
                        f"was sent. To run the tool again: mcp-tasks run ... --id NEW (any new workflow id)")
            if args.detach:
                emit(args, {"workflow_id": wid}, wid)
                err(f"started; a worker on task queue {queue!r} runs it "
                    f"({hint('worker', '--task-queue', queue, config=args.config)}).{at}")
                return EXIT_OK
            watch = (_WorkerWatch(worker_task, wid) if worker_task is not None
                     else _QueueWatch(client, queue, wid, on_interrupt="Ctrl-C cancels the task", config=args.config))

            def left() -> str:
                if in_process:
                    return (f"{wid} has no worker now (it ran in this command, on task queue {queue}); resume it "
                            f"with the same command: {_resume_command(wid)}")
                if isinstance(watch, _QueueWatch) and watch.none:
                    return (f"no worker polls task queue {queue}: the task waits (a cancel asked for included) "
                            f"until one does: {_no_worker_hint(queue, wid, args.config)}; then follow it with: "
                            f"{hint('result', wid, '--wait')}")
                return (f"the workers on task queue {queue} finish it; follow it with: {hint('result', wid, '--wait')}")

            cancel_sent = False
            interrupts.leave = lambda: _leave_now(
                args, f"interrupted twice: left {wid} ({'cancel requested' if cancel_sent else 'not cancelled'}); "
                      f"{left()}")
            interrupts.overdue = lambda: _leave_now(
                args, f"interrupted: {wid} did not end within {INTERRUPT_EXIT_S:g} s; left it "
                      f"({'cancel requested' if cancel_sent else 'not cancelled'}); {left()}")
            following = asyncio.create_task(follow(handle, ui=link, check=watch, board=board if in_process else None))
            first = asyncio.create_task(interrupts.first.wait())
            await asyncio.wait({following, first}, return_when=asyncio.FIRST_COMPLETED)
            if not following.done():
                interrupted = True
                err(f"interrupted: cancelling {wid} through its workflow (tasks/cancel); waiting up to "
                    f"{CANCEL_WAIT_S:g} s for how it ends. Ctrl-C again to leave at once")
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(handle.cancel(), CANCEL_WAIT_S)
                    cancel_sent = True
                await asyncio.wait({following}, timeout=max(0.1, CANCEL_WAIT_S - 0.5))
                if not following.done():
                    following.cancel()
                    raise CliError(f"interrupted: {wid} did not end within {CANCEL_WAIT_S:g} s of the cancel; "
                                   f"{left()}", EXIT_INTERRUPTED)
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


# --- tools ---------------------------------------------------------------------------------------


def tool_policy(name: str, info: ToolInfo | None, server: ServerConfig | None) -> dict[str, Any]:
    """The replay policy a worker of this configuration applies to ``name`` when the request says nothing (the
    workflow's order: the request, then configuration, then annotations of a server whose annotations it trusts)."""
    from mcp_temporal_tasks.workflows import decisions

    policy = (server.tools.get(name) if server else None) or ToolPolicy()
    annotated = decisions.annotation_idempotent(trusted=bool(server and server.trust_annotations),
                                                idempotent_hint=info.idempotent_hint if info else None,
                                                read_only_hint=info.read_only_hint if info else None)
    rule = decisions.replay_rule(configured_policy=policy.replay, configured_idempotent=policy.idempotent,
                                 annotated_idempotent=annotated, configured_max=policy.max_replays)
    source = ("configuration" if policy.idempotent is not None else
              "annotations (trusted)" if annotated is not None else "default")
    return {"replay": rule.policy.value, "idempotent": rule.idempotent, "idempotent_from": source,
            "max_replays": rule.max_replays,
            "output_schema": "configured" if policy.output_schema is not None else (
                "server's" if info is not None and info.output_schema is not None else None),
            "max_call_s": policy.max_call_s}


def _runs_as(era: str, tasks_offered: bool, support: str | None) -> str:
    if era != "2025-11-25":
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
        kind = prop.get("type") or ("|".join(str(a.get("type")) for a in prop.get("anyOf", []) if isinstance(a, dict))
                                    or "any")
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
                raise CliError(f"unknown server {args.server!r} (configured: {known}); use --config, --url or "
                               "--command", EXIT_USAGE)
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
        client = await asyncio.wait_for(McpTaskClient.connect(endpoint, era=args.era or (server.era if server else None)),
                                        timeout=15)
    except (TimeoutError, TransportError, TaskUnreachable) as exc:
        raise CliError(f"MCP server unreachable ({where}): {printable(exc) or 'no answer within 15 s'}",
                       EXIT_UNREACHABLE) from None
    except McpWireError as exc:
        raise CliError(f"the handshake with MCP server at {where} failed: {printable(exc)}", EXIT_ENDED,
                       kind="refused") from None
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
        rows.append({"name": name, "description": description if isinstance(description, str) else None,
                     "input_schema": schema if isinstance(schema, dict) else None,
                     "arguments": _arguments_line(schema),
                     "task_support": info.task_support, "runs_as": _runs_as(client.era, client.tasks_offered,
                                                                            info.task_support),
                     "annotations": {"readOnlyHint": info.read_only_hint, "idempotentHint": info.idempotent_hint,
                                     "destructiveHint": info.destructive_hint},
                     "policy": tool_policy(name, info, server)})
    jobs: list[dict[str, Any]] = []
    for name, job in sorted((server.jobs if server else {}).items()):
        jobs.append({"name": name, "submit": job.submit, "status": job.status, "result": job.result,
                     "cancel": job.cancel, "missing": sorted(t for t in (job.submit, job.status, job.result, job.cancel)
                                                             if t and t not in tools),
                     "policy": {"replay": job.replay or "never", "idempotent": bool(job.idempotent),
                                "max_replays": job.max_replays if job.max_replays is not None else 1}})
    label = args.server or endpoint.identity()
    obj = {"server": label, "identity": endpoint.identity(), "era": client.era,
           "protocol_version": client.protocol_version, "tasks": client.tasks_offered,
           "trust_annotations": bool(server and server.trust_annotations), "tools": rows, "jobs": jobs}
    p = printable
    named = p(label) if label == endpoint.identity() else f"{p(label)} ({where})"  # a URL said once
    lines = [f"{named} · era {client.era} · protocol {p(protocol_label(client.era, client.protocol_version))}"
             f" · tasks {'offered' if client.tasks_offered else 'not offered'}"
             f" · annotations {'trusted' if obj['trust_annotations'] else 'not trusted (trust_annotations = false)'}"]
    for r in rows:
        pol, ann = r["policy"], r["annotations"]
        hints = ", ".join(k for k, v in (("read-only", ann["readOnlyHint"]), ("idempotent", ann["idempotentHint"]),
                                         ("destructive", ann["destructiveHint"])) if v) or "none"
        lines.append(f"  {p(r['name'])}: runs as {r['runs_as']}"
                     + (f" (taskSupport {r['task_support']})" if r["task_support"] else "")
                     + f" · hints: {hints} · replay {pol['replay']}, "
                     f"{'idempotent' if pol['idempotent'] else 'not idempotent'} ({pol['idempotent_from']}), "
                     f"max_replays {pol['max_replays']}"
                     + (f", output schema {pol['output_schema']}" if pol["output_schema"] else "")
                     + (f", max_call_s {pol['max_call_s']:g}" if pol["max_call_s"] else ""))
        if r["description"]:
            lines.append(f"      {p(' '.join(r['description'].split())[:200])}")
        if r["arguments"]:
            lines.append(f"      arguments: {p(r['arguments'][:300])}")
    for j in jobs:
        lines.append(f"  job {p(j['name'])}: submit {p(j['submit'])}, status {p(j['status'])}"
                     + (f", result {p(j['result'])}" if j["result"] else "")
                     + (f", cancel {p(j['cancel'])}" if j["cancel"] else "")
                     + f" · replay {j['policy']['replay']}"
                     + (f" · NOT LISTED by the server: {p(', '.join(j['missing']))}" if j["missing"] else ""))
    if not rows:
        lines.append("  (no tools)")
    emit(args, obj, "\n".join(lines))
    return EXIT_OK


# --- status / result / cancel / approve / answer / list ------------------------------------------


async def _handle(client: Client, wid: str) -> tuple[TaskHandle, WorkflowExecutionDescription]:
    handle = client.get_workflow_handle_for(McpTaskWorkflow.run, wid)
    try:
        desc = await handle.describe()
    except RPCError as exc:
        if exc.status != RPCStatusCode.NOT_FOUND:
            raise CliError(f"cannot read task {wid!r}: {exc.message}", EXIT_USAGE) from None
        hint = ""
        if not wid.startswith("mcp-task-") and len(wid) + 9 <= MAX_ID_CHARS \
                and await _existing(client, f"mcp-task-{wid}") is not None:
            hint = f"; did you mean mcp-task-{wid} (the workflow id of --idempotency-key {wid})?"
        raise CliError(f"no such task: {wid!r} in namespace {client.namespace!r}{hint}", EXIT_USAGE,
                       kind="not_found") from None
    return handle, desc


def _resolve_ref(outcome: McpTaskOutcome) -> McpTaskOutcome:
    if outcome.result is None and outcome.result_ref is not None:
        try:
            outcome.result = ResultStore.get(outcome.result_ref.model_dump())
        except (OSError, ValueError) as exc:
            err(f"warning: cannot read the stored result {outcome.result_ref.uri}: {exc}")
    return outcome


async def cmd_status(args: argparse.Namespace) -> int:
    async with temporal(temporal_target(args)) as (client, _):
        handle, desc = await _handle(client, args.id)
        if desc.status != WorkflowExecutionStatus.RUNNING:
            try:
                outcome = await outcome_of(handle)
            except Exception as exc:
                # No outcome (terminated, timed out, cancelled before it could record one): say what Temporal says.
                reason = why(getattr(exc, "cause", None) or exc)
                name = desc.status.name if desc.status else "UNKNOWN"
                emit(args, {"workflow_id": args.id, "workflow_status": name, "error": reason},
                     f"{printable(args.id)}: workflow {name}, no outcome recorded: {reason}")
                return EXIT_ENDED
            emit(args, outcome.model_dump(mode="json"), outcome_summary(outcome))
            return exit_code(outcome)
        stuck = await workflow_trouble(handle, desc.raw_description)
        if stuck is None:
            await query_status(client, handle, desc)
        view, live = await live_state(handle)
        if view is None and stuck:  # its workflow task fails and no query is answered: say that, not "no worker"
            emit(args, {"workflow_id": args.id, "workflow_status": "RUNNING", TROUBLE: stuck},
                 f"{printable(args.id)}: {stuck}")
            return EXIT_ENDED
        if view is None:
            raise CliError(f"{args.id} is running but no worker answered the status query", EXIT_UNREACHABLE)
        if live.get(TROUBLE):  # the JSON says it too (the text says it in place of the phase)
            emit(args, {**view.model_dump(mode="json"), TROUBLE: live[TROUBLE]},
                 f"{printable(args.id)}: {view_line(view, args.id, live)}")
            return EXIT_ENDED
        # The JSON and the text show the same view (live status and statusMessage included).
        emit(args, view.model_dump(mode="json"), f"{printable(args.id)}: {view_line(view, args.id, live, protocol=True)}")
        return EXIT_ENDED


#: A poller whose last poll began longer ago than this is gone: a live one that waits on an idle queue starts a new
#: long poll at least every ~70 s (measured: its last access ages to 60-70 s, then renews).
POLLER_GONE_S = 100.0


async def _pollers(client: Client, queue: str) -> int | None:
    """How many workers poll ``queue`` for workflow tasks (None: unknown). The server lists a worker for minutes
    after it died; one whose last poll began over POLLER_GONE_S ago is not counted."""
    try:
        resp = await asyncio.wait_for(client.workflow_service.describe_task_queue(DescribeTaskQueueRequest(
            namespace=client.namespace, task_queue=TaskQueue(name=queue))), 5)
    except Exception:
        return None
    now = time.time()
    return sum(1 for p in resp.pollers
               if not p.HasField("last_access_time") or now - p.last_access_time.ToSeconds() < POLLER_GONE_S)


#: The memo key where `run` records the configuration it was given (an absolute path: never a secret), so that the
#: worker a hint names later serves the task's server (issue 43).
CONFIG_MEMO = "mcp_tasks_config"


async def started_with(desc: WorkflowExecutionDescription) -> str | None:
    """The ``--config`` the task was started with (`run` records it in the memo), or None."""
    try:
        value = (await desc.memo()).get(CONFIG_MEMO)
    except Exception:  # noqa: BLE001  (an unreadable memo: the hint goes without it)
        return None
    return value if isinstance(value, str) and value else None


def _no_worker_hint(queue: str, wid: str, config: str | None = None) -> str:
    """The command that serves ``queue``: with the configuration the task was started with (``config``), so that
    the worker knows its server."""
    if queue.startswith(RUN_QUEUE_PREFIX):
        return (f"it was started by `mcp-tasks run` with its own worker, which is gone: run that same command again "
                f"with --id {shlex.quote(wid)} to resume it (its worker runs a cancel too)")
    return f"start one: {hint('worker', '--task-queue', queue, config=config)}"


async def query_status(client: Client, handle: TaskHandle, desc: WorkflowExecutionDescription) -> TaskView:
    """The ``status()`` query's answer, or exit 3 at once naming why: no worker polls the task's queue, or none
    answered within STATUS_QUERY_S."""
    queue = desc.task_queue
    if await _pollers(client, queue) == 0:
        raise CliError(f"{handle.id} is running but no worker polls its task queue {queue!r}: "
                       f"{_no_worker_hint(queue, handle.id, await started_with(desc))}",
                       EXIT_UNREACHABLE, kind="no_worker")
    try:
        return await asyncio.wait_for(handle.query(McpTaskWorkflow.status), timeout=STATUS_QUERY_S)
    except Exception as exc:
        raise CliError(f"{handle.id} is running but no worker answered the status query within {STATUS_QUERY_S:g} s "
                       f"(task queue {queue!r}; {why(exc)}); if its workers have stopped: "
                       f"{_no_worker_hint(queue, handle.id, await started_with(desc))}",
                       EXIT_UNREACHABLE, kind="no_worker") from None


async def _ended(handle: TaskHandle, desc: WorkflowExecutionDescription) -> str:
    """How a finished task ended, for messages: its outcome (``cancelled``), else the workflow's status."""
    try:
        outcome = await asyncio.wait_for(outcome_of(handle), 10)
    except Exception:
        return f"workflow {desc.status.name.lower() if desc.status else 'unknown'}"
    return outcome.outcome.value


async def cmd_result(args: argparse.Namespace) -> int:
    async with temporal(temporal_target(args)) as (client, ui):
        handle, desc = await _handle(client, args.id)
        if desc.status == WorkflowExecutionStatus.RUNNING and not args.wait:
            raise CliError(f"{args.id} is still running; add --wait to wait for it", EXIT_ENDED)
        watch = _QueueWatch(client, desc.task_queue, args.id, on_interrupt="Ctrl-C stops following it; the task waits on",
                            config=await started_with(desc)) \
            if desc.status == WorkflowExecutionStatus.RUNNING else None
        try:
            outcome = await follow(handle, ui=ui_link(ui, client.namespace, args.id), quiet=not args.wait, check=watch)
        except CliError:
            raise
        except Exception as exc:
            raise CliError(f"{args.id}: workflow did not produce an outcome: {exc}", EXIT_ENDED) from None
    outcome = _resolve_ref(outcome)
    emit(args, outcome.model_dump(mode="json"), outcome_summary(outcome))
    return exit_code(outcome)


async def cmd_cancel(args: argparse.Namespace) -> int:
    async with temporal(temporal_target(args)) as (client, _):
        handle, desc = await _handle(client, args.id)
        if desc.status != WorkflowExecutionStatus.RUNNING:
            raise CliError(f"{args.id} has already ended: {await _ended(handle, desc)}; nothing to cancel", EXIT_ENDED)
        # Workflow cancellation is accepted by the server even while no worker runs; the workflow then
        # sends tasks/cancel and keeps the true outcome if the task had already finished.
        await handle.cancel()
        if await _pollers(client, desc.task_queue) == 0:
            # Recorded, but nothing carries it out: the MCP task goes on until a worker does (exit 3, kind no_worker).
            raise CliError(f"cancel requested for {args.id}, but no worker polls its task queue {desc.task_queue!r}, "
                           f"so tasks/cancel is sent only once one does: "
                           f"{_no_worker_hint(desc.task_queue, args.id, await started_with(desc))}",
                           EXIT_UNREACHABLE, kind="no_worker")
        # How the task really ended: the workflow sends tasks/cancel and reads the server's answer (a task that
        # finished first keeps its true outcome).
        try:
            outcome = await asyncio.wait_for(outcome_of(handle), CANCEL_COMMAND_WAIT_S)
        except TimeoutError:
            raise CliError(f"cancel requested for {args.id}; it has not ended within {CANCEL_COMMAND_WAIT_S:g} s "
                           f"(the server may take longer to stop it): follow it with: {hint('result', args.id, '--wait')}",
                           EXIT_ENDED, kind="not_ended") from None
        except Exception as exc:  # ended without an outcome (terminated meanwhile)
            raise CliError(f"cancel requested for {args.id}; it ended without an outcome: {why(exc)}",
                           EXIT_ENDED) from None
    outcome = _resolve_ref(outcome)
    ended = outcome.outcome.value
    # Exit 0: the cancel was carried out; how the task ended is the outcome (`cancelled`, or its true end when it had
    # finished first or was not running a call: a task awaiting approval keeps the end of its last call).
    emit(args, {**outcome.model_dump(mode="json"), "cancel_requested": True},
         f"cancel requested for {args.id}; it ended {ended}\n{outcome_summary(outcome)}")
    return EXIT_OK


async def _update(args: argparse.Namespace, target: Target, name: str, *update_args: object, what: str | None = None,
                  refused_code: int = EXIT_ENDED) -> Any:
    what = what or name
    async with temporal(target) as (client, _):
        handle, desc = await _handle(client, args.id)
        if desc.status != WorkflowExecutionStatus.RUNNING:
            raise CliError(f"{what} refused: {args.id} has already ended: {await _ended(handle, desc)}", EXIT_ENDED)
        if await _pollers(client, desc.task_queue) == 0:
            raise CliError(f"{what}: {args.id} is running but no worker polls its task queue {desc.task_queue!r}: "
                           f"{_no_worker_hint(desc.task_queue, args.id, await started_with(desc))}",
                           EXIT_UNREACHABLE, kind="no_worker")
        try:
            return await asyncio.wait_for(handle.execute_update(name, *update_args), timeout=30)
        except WorkflowUpdateFailedError as exc:
            # The task runs but is not in a state that takes this (nothing to approve, the answer does not fit).
            raise CliError(f"{what} refused: {getattr(exc.cause, 'message', None) or exc}", refused_code,
                           kind="refused") from None
        except RPCError as exc:
            raise CliError(f"{what} refused: {exc.message}", EXIT_ENDED, kind="refused") from None
        except TimeoutError:
            raise CliError(f"{what}: no worker processed the update within 30 s (task queue {desc.task_queue!r})",
                           EXIT_UNREACHABLE, kind="no_worker") from None


async def cmd_approve(args: argparse.Namespace) -> int:
    attempt = await _update(args, temporal_target(args), "approve_replay", what="approve")
    emit(args, {"workflow_id": args.id, "approved": True, "attempt": attempt},
         f"replay approved for {args.id} (tools/call #{attempt} will be sent)")
    return EXIT_OK


async def _view_to_answer(args: argparse.Namespace, target: Target) -> TaskView:
    async with temporal(target) as (client, _):
        handle, desc = await _handle(client, args.id)
        if desc.status != WorkflowExecutionStatus.RUNNING:
            raise CliError(f"{args.id} has already ended: {await _ended(handle, desc)}; nothing to answer",
                           EXIT_ENDED)
        return await query_status(client, handle, desc)


def cmd_answer(args: argparse.Namespace) -> int:
    """Synchronous on purpose: the prompts run outside the event loop, so the first Ctrl-C stops at once
    (``asyncio.run`` would turn it into a task cancellation that a blocked ``input()`` never sees)."""
    if args.response is None and not sys.stdin.isatty():
        raise CliError("answer: standard input is not a terminal, so there is nobody to prompt: give the answer "
                       "with --response, e.g. --response '{\"action\": \"accept\", \"content\": {...}}'", EXIT_USAGE)
    target = temporal_target(args)  # one configuration read, one address rule: for the query and the update
    view = asyncio.run(_view_to_answer(args, target))
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
            raise CliError(f"--response is not valid JSON: {exc}", EXIT_USAGE) from None
        if not isinstance(given, dict):
            raise CliError("--response must be an object: an ElicitResult, or {key: ElicitResult}", EXIT_USAGE)
        responses = given if set(given) <= set(pending) and given else {k: given for k in keys}
        for key, response in responses.items():  # what the workflow would refuse, refused here as bad input
            if not isinstance(response, dict):
                raise CliError(f"--response [{printable(key)}]: an ElicitResult must be an object", EXIT_USAGE)
            try:
                validate_input_response(pending[key], response)
            except ValueError as exc:
                raise CliError(f"--response: {printable(exc)}", EXIT_USAGE) from None
    else:
        for key in keys:
            responses[key] = prompt_elicitation(pending[key])
    accepted = asyncio.run(_update(args, target, "provide_input", responses, what="answer", refused_code=EXIT_USAGE))
    emit(args, {"workflow_id": args.id, "answered": sorted(responses), "still_outstanding": accepted},
         f"answered {printable(', '.join(sorted(responses)))}"
         + (f"; still outstanding: {printable(accepted)}" if accepted else ""))
    return EXIT_OK


#: ``list`` asks describe for at most this many running workflows (whether their workflow task fails).
LIST_DESCRIBE = 50


async def cmd_list(args: argparse.Namespace) -> int:
    for option, value, allowed in (("--outcome", args.outcome, outcome_values()),
                                   ("--status", args.status, status_values())):
        if value is not None and value not in allowed:
            raise CliError(f"{option} {value!r} is not one of: {', '.join(allowed)}", EXIT_USAGE)
    clauses = ["WorkflowType = 'McpTaskWorkflow'"]
    for attr, value in (("McpOutcome", args.outcome), ("McpTaskStatus", args.status), ("McpServer", args.server),
                        ("McpTool", args.tool)):
        if value:
            if "'" in value or "\\" in value:
                raise CliError(f"invalid value {value!r}: quotes and backslashes cannot be searched", EXIT_USAGE)
            clauses.append(f"{attr} = '{value}'")
    query = " AND ".join(clauses)
    rows = []
    async with temporal(temporal_target(args)) as (client, _):
        async for wf in client.list_workflows(query, limit=args.limit):
            sa = {k.name: v for k, v in wf.typed_search_attributes}
            rows.append({"workflow_id": wf.id, "workflow_status": wf.status.name if wf.status else None,
                         "server": sa.get("McpServer"), "tool": sa.get("McpTool"), "task_id": sa.get("McpTaskId"),
                         "task_status": sa.get("McpTaskStatus"), "outcome": sa.get("McpOutcome"),
                         "started": wf.start_time.isoformat() if wf.start_time else None})
        # A running workflow whose workflow task fails cannot update its search attributes: ask describe (at most
        # LIST_DESCRIBE of them, at once), so it is never listed as `working`.
        running = [r for r in rows if r["workflow_status"] == "RUNNING"][:LIST_DESCRIBE]

        async def stuck(r: dict[str, Any]) -> None:
            with contextlib.suppress(Exception):
                handle = client.get_workflow_handle_for(McpTaskWorkflow.run, r["workflow_id"])
                desc = await asyncio.wait_for(handle.describe(), 5)
                r[TROUBLE] = await workflow_trouble(handle, desc.raw_description)

        await asyncio.gather(*(stuck(r) for r in running))
    p = printable

    def shown_status(r: dict[str, Any]) -> str:
        if r.get(TROUBLE):
            return str(r[TROUBLE])[:60]
        # A finished task is shown under its outcome (older histories kept their last server status).
        if r["workflow_status"] != "RUNNING" and r["outcome"]:
            return r["outcome"] if r["task_status"] not in ("completed", "failed", "cancelled") else r["task_status"]
        return r["task_status"] or ""

    table = [("WORKFLOW ID", "SERVER", "TOOL", "STATUS", "OUTCOME", "STARTED")] + [
        (p(r["workflow_id"]), p(r["server"]), p(r["tool"]), p(shown_status(r)), p(r["outcome"] or "-"),
         (r["started"] or "")[:19].replace("T", " ")) for r in rows]
    widths = [min(48, max(len(row[i]) for row in table)) for i in range(5)]
    human = "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)) + "  " + row[5] for row in table)
    if not rows:
        human += "\n(none)"
    emit(args, {"query": query, "workflows": rows}, human)
    return EXIT_OK
