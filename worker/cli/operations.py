"""The operations on tasks: ``run`` (start or re-attach, follow, Ctrl-C cancels), ``status``, ``result``,
``cancel``, ``approve``, ``answer`` and ``list``."""

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
import uuid
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

from mcp_temporal_tasks.activities.result_store import ResultStore
from mcp_temporal_tasks.activities.wire import McpTaskClient, TaskUnreachable, TransportError, stdio
from mcp_temporal_tasks.activities.wire.models import Endpoint
from mcp_temporal_tasks.worker.cli.connection import check_ui_url, resolve_address, temporal, ui_link, why
from mcp_temporal_tasks.worker.cli.following import (
    TaskHandle,
    exit_code,
    follow,
    live_view,
    outcome_summary,
    view_line,
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
    check_id,
    emit,
    err,
    outcome_values,
    prog,
    report,
    status_values,
)
from mcp_temporal_tasks.worker.cli.serving import check_env_refs, configuration, run_logging
from mcp_temporal_tasks.worker.config import WorkerConfig
from mcp_temporal_tasks.worker.printable import printable
from mcp_temporal_tasks.worker.registry import ensure_search_attributes, make_activities
from mcp_temporal_tasks.worker.runner import run_workers
from mcp_temporal_tasks.workflows.client import RequestMismatch, default_workflow_id, outcome_of, start_mcp_task
from mcp_temporal_tasks.workflows.mcp_task import McpTaskWorkflow, validate_input_response
from mcp_temporal_tasks.workflows.models import (
    McpTaskOutcome,
    McpTaskRequest,
    RequestTooLarge,
    TaskView,
    check_request_size,
)

#: After the first Ctrl-C (or SIGTERM) of a foreground `run`: how long the task has to report how it ended.
CANCEL_WAIT_S = 4.0
#: After the first Ctrl-C (or SIGTERM), `run` has left by then whatever anything does: its stdio children are
#: killed (their process groups) and it exits 130 (or with the outcome's code, once that is printed).
INTERRUPT_EXIT_S = 4.5
#: Once the outcome is printed: how long the in-process worker and its MCP sessions get to stop (run_workers is
#: bounded by itself; this is the second fence).
WORKER_STOP_S = 15.0
#: `status`: how long a worker has to answer the status query.
STATUS_QUERY_S = 5.0


# --- run -----------------------------------------------------------------------------------------


def _request(args: argparse.Namespace) -> McpTaskRequest:
    text = _read_args(args.args)
    try:
        arguments = json.loads(text) if text else {}
    except json.JSONDecodeError as exc:
        raise CliError(f"--args is not valid JSON: {exc}", EXIT_USAGE) from None
    except RecursionError:
        raise CliError("--args is nested too deeply", EXIT_USAGE) from None
    if not isinstance(arguments, dict):
        raise CliError("--args must be a JSON object, e.g. '{\"seconds\": 3}'", EXIT_USAGE)
    try:
        server: str | Endpoint
        if args.server:
            server = args.server
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


def _read_args(spec: str | None) -> str:
    """``--args``: inline JSON, ``@FILE`` (a file's contents) or ``-`` (stdin): large arguments need not pass
    through the command line, which the OS caps (~128 KiB per argument)."""
    if not spec:
        return ""
    if spec == "-":
        raw, where = sys.stdin.buffer.read(), "--args - (stdin)"
    elif spec.startswith("@"):
        path = spec[1:]
        try:
            raw, where = Path(path).read_bytes(), f"--args @{path}"
        except OSError as exc:
            raise CliError(f"--args @{path}: cannot read the file: {exc.strerror or exc}", EXIT_USAGE) from None
    else:
        return spec
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CliError(f"{where}: not UTF-8 text (byte {exc.start})", EXIT_USAGE) from None


def _plain_errors(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'request'}: {e['msg']}" for e in exc.errors())
    return str(exc)


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
    except Exception as exc:  # it answered: the workflow will report precisely what is wrong
        err(f"note: MCP server at {endpoint.identity()} answered the handshake with: {printable(exc)}")


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


def check_inline_for_workers(request: McpTaskRequest, cfg: WorkerConfig, how: str) -> None:
    """``--detach``/``--no-worker`` with ``--url``/``--command``: the running workers decide, and a worker refuses an
    inline endpoint unless its ``[worker]`` table allows that kind. Refused here (exit 2) unless the configuration
    this command was given (``--config``/``$MCP_TASKS_CONFIG``, the workers' own) allows it."""
    server = request.server
    if not isinstance(server, Endpoint):
        return
    w = cfg.worker
    if server.url is not None and not w.allow_inline_endpoints:
        key, flag = "allow_inline_endpoints", "--url"
    elif server.command is not None and not w.allow_inline_commands:
        key, flag = "allow_inline_commands", "--command"
    else:
        return
    raise CliError(f"{how} {flag}: a worker refuses an inline endpoint unless its [worker] {key} = true (see "
                   f"Trust model), so no worker would run this task; use --server NAME (a configured server), run "
                   f"without {how} (this command's own worker takes the endpoint you typed), or give --config with "
                   f"the workers' configuration if it allows it", EXIT_USAGE)


async def cmd_run(args: argparse.Namespace) -> int:
    request = _request(args)
    cfg = configuration(args)
    if args.ui_url:
        check_ui_url(args.ui_url, "--ui-url")
    if isinstance(request.server, str) and request.server not in cfg.servers and not args.no_worker:
        known = ", ".join(sorted(cfg.servers)) or "none"
        raise CliError(f"unknown server {request.server!r} (configured: {known}); use --config, --url or --command",
                       EXIT_USAGE)
    in_process = not args.no_worker and not args.detach
    if in_process:  # this process is the worker: its configuration must be complete
        check_env_refs(cfg, only=[request.server] if isinstance(request.server, str) else [],
                       inline=request.server if isinstance(request.server, Endpoint) else None)
    else:
        check_inline_for_workers(request, cfg, "--detach" if args.detach else "--no-worker")
    wid = args.id or default_workflow_id(request)
    check_id(wid, "--id")
    resolve_address(args)  # a malformed address is bad input (exit 2), whatever the MCP server does
    # The queue: a private one for a task this command's own worker runs (no other worker, with another
    # configuration, may take it); --task-queue when given; else the configured one the running workers poll.
    queue = args.task_queue or (f"{RUN_QUEUE_PREFIX}{uuid.uuid4().hex[:12]}" if in_process else cfg.temporal.task_queue)
    await _preflight(request, cfg, stdio=in_process)
    if in_process:
        run_logging()
    loop = asyncio.get_running_loop()
    interrupts = _Interrupts()
    installed: list[int] = []
    async with temporal(args, allow_embedded=True, detached=args.detach, configured_ui=cfg.temporal.ui_url) \
            as (client, ui):
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
            # The in-process worker may reach the one endpoint its user typed (--url/--command), and nothing
            # else inline beyond what the configuration allows. --no-worker: the running workers decide.
            typed = [request.server] if isinstance(request.server, Endpoint) else []
            worker_task = asyncio.create_task(run_workers(
                client, cfg, stop=stop, activities=make_activities(cfg, inline_allowlist=typed), handle_signals=False))
        interrupted = False
        try:
            try:
                # Again: only a run refused before anything was sent (a failed one) is replaced.
                await start_mcp_task(client, request, workflow_id=wid, task_queue=queue, replace_failed=again)
            except RequestMismatch as exc:
                raise CliError(f"{exc} (mcp-tasks run ... --id NEW)", EXIT_USAGE, kind="request_mismatch") from None
            handle = client.get_workflow_handle_for(McpTaskWorkflow.run, wid)
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
                err(f"started; a worker on task queue {queue!r} runs it (mcp-tasks worker --task-queue {queue}).{at}")
                return EXIT_OK
            if in_process:
                left = (f"{wid} has no worker now (it ran in this command, on task queue {queue}); resume it with "
                        f"the same command: {_resume_command(wid)}")
            else:
                left = (f"the workers on task queue {queue} finish it; follow it with: {prog()} result "
                        f"{shlex.quote(wid)} --wait")
            cancel_sent = False
            interrupts.leave = lambda: _leave_now(
                args, f"interrupted twice: left {wid} ({'cancel requested' if cancel_sent else 'not cancelled'}); {left}")
            interrupts.overdue = lambda: _leave_now(
                args, f"interrupted: {wid} did not end within {INTERRUPT_EXIT_S:g} s; left it "
                      f"({'cancel requested' if cancel_sent else 'not cancelled'}); {left}")
            following = asyncio.create_task(follow(handle, ui=link))
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
                    raise CliError(f"interrupted: {wid} did not end within {CANCEL_WAIT_S:g} s of the cancel; {left}",
                                   EXIT_INTERRUPTED)
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
    async with temporal(args) as (client, _):
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
        await query_status(client, handle, desc)
        view = await live_view(handle)
        if view is None:
            raise CliError(f"{args.id} is running but no worker answered the status query", EXIT_UNREACHABLE)
        # The JSON and the text show the same view (live status and statusMessage included).
        emit(args, view.model_dump(mode="json"), f"{printable(args.id)}: {view_line(view, args.id)}")
        return EXIT_ENDED


async def _pollers(client: Client, queue: str) -> int | None:
    """How many workers the server has seen polling ``queue`` for workflow tasks lately (None: unknown)."""
    try:
        resp = await asyncio.wait_for(client.workflow_service.describe_task_queue(DescribeTaskQueueRequest(
            namespace=client.namespace, task_queue=TaskQueue(name=queue))), 5)
    except Exception:
        return None
    return len(resp.pollers)


def _no_worker_hint(queue: str, wid: str) -> str:
    if queue.startswith(RUN_QUEUE_PREFIX):
        return (f"it was started by `mcp-tasks run` with its own worker, which is gone: run that same command again "
                f"with --id {shlex.quote(wid)} to resume it (its worker runs a cancel too)")
    return f"start one: {prog()} worker --task-queue {shlex.quote(queue)}"


async def query_status(client: Client, handle: TaskHandle, desc: WorkflowExecutionDescription) -> TaskView:
    """The ``status()`` query's answer, or exit 3 at once naming why: no worker polls the task's queue, or none
    answered within STATUS_QUERY_S."""
    queue = desc.task_queue
    if await _pollers(client, queue) == 0:
        raise CliError(f"{handle.id} is running but no worker polls its task queue {queue!r}: "
                       f"{_no_worker_hint(queue, handle.id)}",
                       EXIT_UNREACHABLE, kind="no_worker")
    try:
        return await asyncio.wait_for(handle.query(McpTaskWorkflow.status), timeout=STATUS_QUERY_S)
    except Exception as exc:
        raise CliError(f"{handle.id} is running but no worker answered the status query within {STATUS_QUERY_S:g} s "
                       f"(task queue {queue!r}; {why(exc)}); if its workers have stopped: "
                       f"{_no_worker_hint(queue, handle.id)}",
                       EXIT_UNREACHABLE, kind="no_worker") from None


async def _ended(handle: TaskHandle, desc: WorkflowExecutionDescription) -> str:
    """How a finished task ended, for messages: its outcome (``cancelled``), else the workflow's status."""
    try:
        outcome = await asyncio.wait_for(outcome_of(handle), 10)
    except Exception:
        return f"workflow {desc.status.name.lower() if desc.status else 'unknown'}"
    return outcome.outcome.value


async def cmd_result(args: argparse.Namespace) -> int:
    async with temporal(args) as (client, ui):
        handle, desc = await _handle(client, args.id)
        if desc.status == WorkflowExecutionStatus.RUNNING and not args.wait:
            raise CliError(f"{args.id} is still running; add --wait to wait for it", EXIT_ENDED)
        if desc.status == WorkflowExecutionStatus.RUNNING and await _pollers(client, desc.task_queue) == 0:
            err(f"note: no worker polls task queue {desc.task_queue!r}, so {args.id} cannot end until one does: "
                f"{_no_worker_hint(desc.task_queue, args.id)}")
        try:
            outcome = await follow(handle, ui=ui_link(ui, client.namespace, args.id), quiet=not args.wait)
        except Exception as exc:
            raise CliError(f"{args.id}: workflow did not produce an outcome: {exc}", EXIT_ENDED) from None
    outcome = _resolve_ref(outcome)
    emit(args, outcome.model_dump(mode="json"), outcome_summary(outcome))
    return exit_code(outcome)


async def cmd_cancel(args: argparse.Namespace) -> int:
    async with temporal(args) as (client, _):
        handle, desc = await _handle(client, args.id)
        if desc.status != WorkflowExecutionStatus.RUNNING:
            raise CliError(f"{args.id} has already ended: {await _ended(handle, desc)}; nothing to cancel", EXIT_ENDED)
        # Workflow cancellation is accepted by the server even while no worker runs; the workflow then
        # sends tasks/cancel and keeps the true outcome if the task had already finished.
        await handle.cancel()
    emit(args, {"workflow_id": args.id, "cancel_requested": True}, f"cancel requested for {args.id}")
    return EXIT_OK


async def _update(args: argparse.Namespace, name: str, *update_args: object, what: str | None = None,
                  refused_code: int = EXIT_ENDED) -> Any:
    what = what or name
    async with temporal(args) as (client, _):
        handle, desc = await _handle(client, args.id)
        if desc.status != WorkflowExecutionStatus.RUNNING:
            raise CliError(f"{what} refused: {args.id} has already ended: {await _ended(handle, desc)}", EXIT_ENDED)
        if await _pollers(client, desc.task_queue) == 0:
            raise CliError(f"{what}: {args.id} is running but no worker polls its task queue {desc.task_queue!r}: "
                           f"{_no_worker_hint(desc.task_queue, args.id)}", EXIT_UNREACHABLE, kind="no_worker")
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
    attempt = await _update(args, "approve_replay", what="approve")
    emit(args, {"workflow_id": args.id, "approved": True, "attempt": attempt},
         f"replay approved for {args.id} (tools/call #{attempt} will be sent)")
    return EXIT_OK


async def _view_to_answer(args: argparse.Namespace) -> TaskView:
    async with temporal(args) as (client, _):
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
    view = asyncio.run(_view_to_answer(args))
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
    accepted = asyncio.run(_update(args, "provide_input", responses, what="answer", refused_code=EXIT_USAGE))
    emit(args, {"workflow_id": args.id, "answered": sorted(responses), "still_outstanding": accepted},
         f"answered {printable(', '.join(sorted(responses)))}"
         + (f"; still outstanding: {printable(accepted)}" if accepted else ""))
    return EXIT_OK


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
    async with temporal(args) as (client, _):
        async for wf in client.list_workflows(query, limit=args.limit):
            sa = {k.name: v for k, v in wf.typed_search_attributes}
            rows.append({"workflow_id": wf.id, "workflow_status": wf.status.name if wf.status else None,
                         "server": sa.get("McpServer"), "tool": sa.get("McpTool"), "task_id": sa.get("McpTaskId"),
                         "task_status": sa.get("McpTaskStatus"), "outcome": sa.get("McpOutcome"),
                         "started": wf.start_time.isoformat() if wf.start_time else None})
    p = printable

    def shown_status(r: dict[str, Any]) -> str:
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
