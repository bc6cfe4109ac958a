"""``status``, ``result``, ``cancel``, ``approve``, ``answer``, ``list``: Temporal only, no MCP wire.

Nothing here imports the MCP wire or the worker (``run`` and ``tools``, which reach an MCP server, are
:mod:`.calling`), so these commands start without loading the MCP SDK.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shlex
import sys
import time
from typing import Any

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
from mcp_temporal_tasks.worker.cli.connection import temporal, ui_link, why
from mcp_temporal_tasks.worker.cli.following import (
    TROUBLE,
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
    status_values,
)
from mcp_temporal_tasks.worker.cli.plan import (
    Target,
    temporal_target,
)
from mcp_temporal_tasks.worker.printable import printable
from mcp_temporal_tasks.workflows.client import outcome_of
from mcp_temporal_tasks.workflows.mcp_task import McpTaskWorkflow, validate_input_response
from mcp_temporal_tasks.workflows.records import (
    McpTaskOutcome,
    TaskView,
)

#: `cancel`: how long it waits for the task to report how it ended before it says it has not yet.
CANCEL_COMMAND_WAIT_S = 30.0


#: `status`: how long a worker has to answer the status query.
STATUS_QUERY_S = 5.0


async def _existing(client: Client, wid: str) -> WorkflowExecutionDescription | None:
    """The description of workflow ``wid``, or None when there is none."""
    try:
        return await client.get_workflow_handle(wid).describe()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return None
        raise


#: How often a command that waits looks at the task queue's pollers (as `status` does).
QUEUE_CHECK_S = 5.0


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
            return (
                f"note: no worker polls task queue {self.queue!r}, so {self.wid} waits until one does: "
                f"{_no_worker_hint(self.queue, self.wid, self.config)} ({self.on_interrupt})"
            )
        if pollers and self.none:
            self.none = False
            return f"note: a worker polls task queue {self.queue!r} now"
        return None


async def _handle(client: Client, wid: str) -> tuple[TaskHandle, WorkflowExecutionDescription]:
    handle = client.get_workflow_handle_for(McpTaskWorkflow.run, wid)
    try:
        desc = await handle.describe()
    except RPCError as exc:
        if exc.status != RPCStatusCode.NOT_FOUND:
            raise CliError(f"cannot read task {wid!r}: {exc.message}", EXIT_USAGE) from None
        hint = ""
        if (
            not wid.startswith("mcp-task-")
            and len(wid) + 9 <= MAX_ID_CHARS
            and await _existing(client, f"mcp-task-{wid}") is not None
        ):
            hint = f"; did you mean mcp-task-{wid} (the workflow id of --idempotency-key {wid})?"
        raise CliError(
            f"no such task: {wid!r} in namespace {client.namespace!r}{hint}", EXIT_USAGE, kind="not_found"
        ) from None
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
                emit(
                    args,
                    {"workflow_id": args.id, "workflow_status": name, "error": reason},
                    f"{printable(args.id)}: workflow {name}, no outcome recorded: {reason}",
                )
                return EXIT_ENDED
            emit(args, outcome.model_dump(mode="json"), outcome_summary(outcome))
            return exit_code(outcome)
        stuck = await workflow_trouble(handle, desc.raw_description)
        if stuck is None:
            await query_status(client, handle, desc)
        view, live = await live_state(handle)
        if view is None and stuck:  # its workflow task fails and no query is answered: say that, not "no worker"
            emit(
                args,
                {"workflow_id": args.id, "workflow_status": "RUNNING", TROUBLE: stuck},
                f"{printable(args.id)}: {stuck}",
            )
            return EXIT_ENDED
        if view is None:
            raise CliError(f"{args.id} is running but no worker answered the status query", EXIT_UNREACHABLE)
        if live.get(TROUBLE):  # the JSON says it too (the text says it in place of the phase)
            emit(
                args,
                {**view.model_dump(mode="json"), TROUBLE: live[TROUBLE]},
                f"{printable(args.id)}: {view_line(view, args.id, live)}",
            )
            return EXIT_ENDED
        # The JSON and the text show the same view (live status and statusMessage included).
        emit(
            args, view.model_dump(mode="json"), f"{printable(args.id)}: {view_line(view, args.id, live, protocol=True)}"
        )
        return EXIT_ENDED


#: A poller whose last poll began longer ago than this is gone: a live one that waits on an idle queue starts a new
#: long poll at least every ~70 s (measured: its last access ages to 60-70 s, then renews).
POLLER_GONE_S = 100.0


async def _pollers(client: Client, queue: str) -> int | None:
    """How many workers poll ``queue`` for workflow tasks (None: unknown). The server lists a worker for minutes
    after it died; one whose last poll began over POLLER_GONE_S ago is not counted."""
    try:
        resp = await asyncio.wait_for(
            client.workflow_service.describe_task_queue(
                DescribeTaskQueueRequest(namespace=client.namespace, task_queue=TaskQueue(name=queue))
            ),
            5,
        )
    except Exception:
        return None
    now = time.time()
    return sum(
        1
        for p in resp.pollers
        if not p.HasField("last_access_time") or now - p.last_access_time.ToSeconds() < POLLER_GONE_S
    )


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
        return (
            f"it was started by `mcp-tasks run` with its own worker, which is gone: run that same command again "
            f"with --id {shlex.quote(wid)} to resume it (its worker runs a cancel too)"
        )
    return f"start one: {hint('worker', '--task-queue', queue, config=config)}"


async def query_status(client: Client, handle: TaskHandle, desc: WorkflowExecutionDescription) -> TaskView:
    """The ``status()`` query's answer, or exit 3 at once naming why: no worker polls the task's queue, or none
    answered within STATUS_QUERY_S."""
    queue = desc.task_queue
    if await _pollers(client, queue) == 0:
        raise CliError(
            f"{handle.id} is running but no worker polls its task queue {queue!r}: "
            f"{_no_worker_hint(queue, handle.id, await started_with(desc))}",
            EXIT_UNREACHABLE,
            kind="no_worker",
        )
    try:
        return await asyncio.wait_for(handle.query(McpTaskWorkflow.status), timeout=STATUS_QUERY_S)
    except Exception as exc:
        raise CliError(
            f"{handle.id} is running but no worker answered the status query within {STATUS_QUERY_S:g} s "
            f"(task queue {queue!r}; {why(exc)}); if its workers have stopped: "
            f"{_no_worker_hint(queue, handle.id, await started_with(desc))}",
            EXIT_UNREACHABLE,
            kind="no_worker",
        ) from None


async def _ended(handle: TaskHandle, desc: WorkflowExecutionDescription) -> str:
    """How a finished task ended, for messages: its outcome (``cancelled``), else the workflow's status."""
    try:
        outcome = await asyncio.wait_for(outcome_of(handle), 10)
    except Exception:
        return f"workflow {desc.status.name.lower() if desc.status else 'unknown'}"
    return outcome.outcome.value


def _unread(wid: str, exc: BaseException) -> str:
    """Why a finished task's outcome could not be read: a stored payload that is gone or unreadable is said as such
    (the task did end; its outcome is what cannot be read), anything else as the workflow's failure."""
    from mcp_temporal_tasks.worker.storage import PayloadStoreError
    from mcp_temporal_tasks.workflows.client import NoPayloadStore

    if isinstance(exc, PayloadStoreError | NoPayloadStore):
        return f"{wid} ended, but its outcome, stored outside the history, cannot be read: {exc}"
    return f"{wid}: workflow did not produce an outcome: {exc}"


async def cmd_result(args: argparse.Namespace) -> int:
    async with temporal(temporal_target(args)) as (client, ui):
        handle, desc = await _handle(client, args.id)
        if desc.status == WorkflowExecutionStatus.RUNNING and not args.wait:
            raise CliError(f"{args.id} is still running; add --wait to wait for it", EXIT_ENDED)
        watch = (
            _QueueWatch(
                client,
                desc.task_queue,
                args.id,
                on_interrupt="Ctrl-C stops following it; the task waits on",
                config=await started_with(desc),
            )
            if desc.status == WorkflowExecutionStatus.RUNNING
            else None
        )
        try:
            outcome = await follow(handle, ui=ui_link(ui, client.namespace, args.id), quiet=not args.wait, check=watch)
        except CliError:
            raise
        except Exception as exc:
            raise CliError(_unread(args.id, exc), EXIT_ENDED) from None
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
            raise CliError(
                f"cancel requested for {args.id}, but no worker polls its task queue {desc.task_queue!r}, "
                f"so tasks/cancel is sent only once one does: "
                f"{_no_worker_hint(desc.task_queue, args.id, await started_with(desc))}",
                EXIT_UNREACHABLE,
                kind="no_worker",
            )
        # How the task really ended: the workflow sends tasks/cancel and reads the server's answer (a task that
        # finished first keeps its true outcome).
        try:
            outcome = await asyncio.wait_for(outcome_of(handle), CANCEL_COMMAND_WAIT_S)
        except TimeoutError:
            raise CliError(
                f"cancel requested for {args.id}; it has not ended within {CANCEL_COMMAND_WAIT_S:g} s "
                f"(the server may take longer to stop it): follow it with: {hint('result', args.id, '--wait')}",
                EXIT_ENDED,
                kind="not_ended",
            ) from None
        except Exception as exc:  # ended without an outcome (terminated meanwhile)
            raise CliError(
                f"cancel requested for {args.id}; it ended without an outcome: {why(exc)}", EXIT_ENDED
            ) from None
    outcome = _resolve_ref(outcome)
    ended = outcome.outcome.value
    # Exit 0: the cancel was carried out; how the task ended is the outcome (`cancelled`, or its true end when it had
    # finished first or was not running a call: a task awaiting approval keeps the end of its last call).
    emit(
        args,
        {**outcome.model_dump(mode="json"), "cancel_requested": True},
        f"cancel requested for {args.id}; it ended {ended}\n{outcome_summary(outcome)}",
    )
    return EXIT_OK


async def _update(
    args: argparse.Namespace,
    target: Target,
    name: str,
    *update_args: object,
    what: str | None = None,
    refused_code: int = EXIT_ENDED,
) -> Any:
    what = what or name
    async with temporal(target) as (client, _):
        handle, desc = await _handle(client, args.id)
        if desc.status != WorkflowExecutionStatus.RUNNING:
            raise CliError(f"{what} refused: {args.id} has already ended: {await _ended(handle, desc)}", EXIT_ENDED)
        if await _pollers(client, desc.task_queue) == 0:
            raise CliError(
                f"{what}: {args.id} is running but no worker polls its task queue {desc.task_queue!r}: "
                f"{_no_worker_hint(desc.task_queue, args.id, await started_with(desc))}",
                EXIT_UNREACHABLE,
                kind="no_worker",
            )
        try:
            return await asyncio.wait_for(handle.execute_update(name, *update_args), timeout=30)
        except WorkflowUpdateFailedError as exc:
            # The task runs but is not in a state that takes this (nothing to approve, the answer does not fit).
            raise CliError(
                f"{what} refused: {getattr(exc.cause, 'message', None) or exc}", refused_code, kind="refused"
            ) from None
        except RPCError as exc:
            raise CliError(f"{what} refused: {exc.message}", EXIT_ENDED, kind="refused") from None
        except TimeoutError:
            raise CliError(
                f"{what}: no worker processed the update within 30 s (task queue {desc.task_queue!r})",
                EXIT_UNREACHABLE,
                kind="no_worker",
            ) from None


async def cmd_approve(args: argparse.Namespace) -> int:
    attempt = await _update(args, temporal_target(args), "approve_replay", what="approve")
    emit(
        args,
        {"workflow_id": args.id, "approved": True, "attempt": attempt},
        f"replay approved for {args.id} (tools/call #{attempt} will be sent)",
    )
    return EXIT_OK


async def _view_to_answer(args: argparse.Namespace, target: Target) -> TaskView:
    async with temporal(target) as (client, _):
        handle, desc = await _handle(client, args.id)
        if desc.status != WorkflowExecutionStatus.RUNNING:
            raise CliError(f"{args.id} has already ended: {await _ended(handle, desc)}; nothing to answer", EXIT_ENDED)
        return await query_status(client, handle, desc)


def cmd_answer(args: argparse.Namespace) -> int:
    """Synchronous on purpose: the prompts run outside the event loop, so the first Ctrl-C stops at once
    (``asyncio.run`` would turn it into a task cancellation that a blocked ``input()`` never sees)."""
    if args.response is None and not sys.stdin.isatty():
        raise CliError(
            "answer: standard input is not a terminal, so there is nobody to prompt: give the answer "
            'with --response, e.g. --response \'{"action": "accept", "content": {...}}\'',
            EXIT_USAGE,
        )
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
    emit(
        args,
        {"workflow_id": args.id, "answered": sorted(responses), "still_outstanding": accepted},
        f"answered {printable(', '.join(sorted(responses)))}"
        + (f"; still outstanding: {printable(accepted)}" if accepted else ""),
    )
    return EXIT_OK


#: ``list`` asks describe for at most this many running workflows (whether their workflow task fails).
LIST_DESCRIBE = 50


async def cmd_list(args: argparse.Namespace) -> int:
    for option, value, allowed in (
        ("--outcome", args.outcome, outcome_values()),
        ("--status", args.status, status_values()),
    ):
        if value is not None and value not in allowed:
            raise CliError(f"{option} {value!r} is not one of: {', '.join(allowed)}", EXIT_USAGE)
    clauses = ["WorkflowType = 'McpTaskWorkflow'"]
    for attr, value in (
        ("McpOutcome", args.outcome),
        ("McpTaskStatus", args.status),
        ("McpServer", args.server),
        ("McpTool", args.tool),
    ):
        if value:
            if "'" in value or "\\" in value:
                raise CliError(f"invalid value {value!r}: quotes and backslashes cannot be searched", EXIT_USAGE)
            clauses.append(f"{attr} = '{value}'")
    query = " AND ".join(clauses)
    rows = []
    async with temporal(temporal_target(args)) as (client, _):
        async for wf in client.list_workflows(query, limit=args.limit):
            sa = {k.name: v for k, v in wf.typed_search_attributes}
            rows.append(
                {
                    "workflow_id": wf.id,
                    "workflow_status": wf.status.name if wf.status else None,
                    "server": sa.get("McpServer"),
                    "tool": sa.get("McpTool"),
                    "task_id": sa.get("McpTaskId"),
                    "task_status": sa.get("McpTaskStatus"),
                    "outcome": sa.get("McpOutcome"),
                    "started": wf.start_time.isoformat() if wf.start_time else None,
                }
            )
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
        (
            p(r["workflow_id"]),
            p(r["server"]),
            p(r["tool"]),
            p(shown_status(r)),
            p(r["outcome"] or "-"),
            (r["started"] or "")[:19].replace("T", " "),
        )
        for r in rows
    ]
    widths = [min(48, max(len(row[i]) for row in table)) for i in range(5)]
    human = "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)) + "  " + row[5] for row in table)
    if not rows:
        human += "\n(none)"
    emit(args, {"query": query, "workflows": rows}, human)
    return EXIT_OK
