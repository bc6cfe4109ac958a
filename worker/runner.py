"""Running a worker process: its workers (shared and owner task queues), logging, shutdown.

Two workers share one process:
* the **shared** task queue (default ``mcp-tasks``) runs workflows and every activity;
* a **per-process** task queue (named after this process) runs activities only. Tasks on stdio servers
  live in the child process this worker spawned, so the workflow pins all their later activities to
  this queue; if this process dies, those activities time out waiting for a worker and the task ends
  ``lost`` instead of hanging.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import hashlib
import json
import logging
import os
import re
import signal
import socket
import sys
import time
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from mcp_temporal_tasks.activities.mcp_activities import McpActivities
from mcp_temporal_tasks.activities.wire.redact import install_log_redaction
from mcp_temporal_tasks.activities.wire.stdio import SHUTDOWN_BOUND_S
from mcp_temporal_tasks.worker.config import ConfigError, WorkerConfig, WorkerSettings
from mcp_temporal_tasks.worker.plugin import PASSTHROUGH, McpTasksPlugin
from mcp_temporal_tasks.worker.registry import make_activities
from mcp_temporal_tasks.worker.temporal_client import (  # noqa: F401  (re-exported: runner.connect & co. stay)
    DATA_CONVERTER,
    connect,
    connect_options,
    connect_to,
    runtime,
    transient_connect_error,
)

log = logging.getLogger("mcp_tasks.worker")
#: How long a stopping worker lets running activities finish before it cancels them (Worker's
#: ``graceful_shutdown_timeout``).
GRACEFUL_SHUTDOWN_S = 5.0
#: After that, how long cancelled activities and MCP sessions get to wind down before the worker leaves anyway:
#: a stop never waits on a task that ignores cancellation (a SIGTERM'd worker once hung > 70 s in asyncio).
SHUTDOWN_GRACE_S = 2.0
#: How long the MCP sessions get to close: a stdio child's whole shutdown (stdin closed, SIGTERM, SIGKILL).
STDIO_SHUTDOWN_S = SHUTDOWN_BOUND_S + 0.5


class JsonFormatter(logging.Formatter):
    """One JSON object per line: what log shippers expect. Never logs arguments or headers.

    Exception text is the record's ``exc_text`` when set: the redacting filter leaves it scrubbed there.
    """

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key in ("workflow_id", "task_queue", "event"):
            if hasattr(record, key):
                out[key] = getattr(record, key)
        if record.exc_text:
            out["exc"] = record.exc_text
        elif record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def _not_poll_shutdown(record: logging.LogRecord) -> bool:
    """Drop asyncio's "Task exception was never retrieved" for the SDK's own pollers ended by a shutdown
    (``PollShutdownError``): the expected end of a worker that stops, not an error."""
    exc = record.exc_info[1] if record.exc_info else None
    return not (record.name == "asyncio" and exc is not None and type(exc).__name__ == "PollShutdownError")


class TypedFailureOneLine(logging.Filter):
    """The SDK's "Completing activity as failed" for an ``ApplicationError`` our activities raise on purpose (it has
    a ``type``: ``UnknownServer``, ``McpTaskRejected``...), or for an attempt the server cancelled (a heartbeat timed
    out), as one line: an expected ending, not a bug. Anything else (a bug: ``KeyError``...) keeps its traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if (
            isinstance(exc, ApplicationError)
            and exc.type
            and isinstance(record.msg, str)
            and record.msg.startswith("Completing activity as failed")
        ):
            words = " ".join(str(exc.message).split())[:500]
            record.msg = record.msg.replace(
                "Completing activity as failed", f"Completing activity as failed: {exc.type}: {words}", 1
            )
            record.exc_info, record.exc_text = None, None
        elif (
            isinstance(exc, asyncio.CancelledError)
            and isinstance(record.msg, str)
            and record.msg.startswith("Completing activity as failed")
        ):
            # The server cancelled the attempt without a request of the workflow (its heartbeat timed out: a worker
            # too busy to beat in time); the workflow's retry policy takes it from here. An expected ending of an
            # attempt, said in one line, not a traceback.
            record.msg = record.msg.replace(
                "Completing activity as failed", "Completing activity as failed: cancelled by the server", 1
            )
            record.exc_info, record.exc_text = None, None
        return True


_TYPED_FAILURES = TypedFailureOneLine()


def install_typed_failure_filter() -> None:
    """On the ``temporalio.activity`` logger, so every handler (stderr, run.log) gets the one line; idempotent."""
    logging.getLogger("temporalio.activity").addFilter(_TYPED_FAILURES)


def setup_logging(level: str = "INFO", *, json_logs: bool = True) -> None:
    install_typed_failure_filter()
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(_not_poll_shutdown)
    handler.setFormatter(JsonFormatter() if json_logs else logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    # Resolved secret values (credential references) never reach a log line, whatever echoed them.
    install_log_redaction(handler)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for noisy in ("httpx2", "httpcore2", "mcp", "temporalio.activity", "temporalio.workflow"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def workflow_runner() -> SandboxedWorkflowRunner:
    """The sandbox, with what our workflow code imports passed through (``plugin.PASSTHROUGH``).

    By default the sandbox re-executes ``workflows/mcp_task.py`` for every workflow run (~220 KB and
    several ms of CPU each, measured in ``bench/``). Our workflow packages hold no mutable module state
    (constants, pydantic models, pure functions), so sharing them is safe; determinism is still guarded
    by the replay tests over committed histories.
    """
    return SandboxedWorkflowRunner(restrictions=SandboxRestrictions.default.with_passthrough_modules(*PASSTHROUGH))


def build_workers(
    client: Client,
    task_queue: str,
    activities: McpActivities,
    settings: WorkerSettings | None = None,
    **shared_overrides: Any,
) -> list[Worker]:
    """The worker of ``mcp-tasks worker``: a plain ``Worker`` with :class:`McpTasksPlugin`, which registers
    the workflows and activities and runs this process's owner queue beside it (stdio tasks live here).

    Memory is bounded by ``max_cached_workflows`` rather than by the tasks in flight (see WorkerSettings).
    ``shared_overrides`` replace Worker options (the benchmark's experiments use it).
    """
    s = settings or WorkerSettings()
    plugin = McpTasksPlugin(activities.servers, settings=s, activities=activities)
    # Waiting activities are coroutines parked in a poll loop: thousands per process cost little memory.
    options: dict[str, Any] = dict(
        max_concurrent_activities=s.max_concurrent_activities,
        graceful_shutdown_timeout=timedelta(seconds=GRACEFUL_SHUTDOWN_S),
        max_concurrent_workflow_tasks=s.max_concurrent_workflow_tasks,
        max_cached_workflows=s.max_cached_workflows,
        workflow_task_executor=concurrent.futures.ThreadPoolExecutor(
            s.workflow_threads, thread_name_prefix="mcp_tasks_workflow_"
        ),
        # A workflow task waits this long on a dead worker's sticky queue before any worker may take it: with the
        # SDK's 10 s default, recovery from a killed worker took heartbeat + 10 s (tests/test_fault_recovery.py).
        sticky_queue_schedule_to_start_timeout=timedelta(seconds=s.sticky_schedule_to_start_s),
        # The SDK sends one heartbeat per min(0.8 × timeout, this): at its 60 s default, a long wait's 120 s
        # heartbeat timeout would still cost 60 heartbeats per task-hour instead of 37.5 (bench/README.md).
        max_heartbeat_throttle_interval=timedelta(seconds=s.max_heartbeat_throttle_s),
        workflow_runner=workflow_runner(),
    )
    return [Worker(client, task_queue=task_queue, plugins=[plugin], **{**options, **shared_overrides})]


#: What a worker's identity says of its configuration: ``<pid>@<host> mcp-tasks servers=a,b#<digest>``.
_SERVERS_TAG = re.compile(r"mcp-tasks servers=(?P<names>\S*)#(?P<digest>[0-9a-f]{8})")


def servers_digest(servers: Mapping[str, Any]) -> str:
    """8 hex digits of the server set a worker serves (names, endpoints, tool policies, jobs; references to
    variables, never their values): two workers on one queue with different digests split its tasks."""
    body = json.dumps(
        {
            name: cfg.model_dump(mode="json") if hasattr(cfg, "model_dump") else cfg
            for name, cfg in sorted(servers.items())
        },
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(body.encode()).hexdigest()[:8]


def worker_identity(base: str, servers: Mapping[str, Any]) -> str:
    """The identity a worker polls with: the client's (``pid@host``) and its server set, so every other worker on
    the queue (and an operator, in the UI's Workers tab) can tell it serves other servers."""
    names = ",".join(sorted(servers))
    if len(names) > 160:
        names = names[:157] + "..."
    return f"{base} mcp-tasks servers={names or '-'}#{servers_digest(servers)}"


#: A poller the server last saw longer ago than this is gone: a live one polls again at once after each long poll
#: (at most ~70 s), while the server lists a dead one for minutes.
POLLER_LIVE_S = 75.0


#: The identities of the workers this process runs now (run_workers), to tell them from ones it ran before.
_RUNNING: collections.Counter[str] = collections.Counter()


def _gone(identity: str, seen_s_ago: float | None) -> bool:
    """A listed poller that no longer runs: not seen for :data:`POLLER_LIVE_S`, or a process of this host (its
    identity's ``pid@host``) that has exited, e.g. this worker's predecessor, restarted with a new configuration."""
    if seen_s_ago is not None and seen_s_ago > POLLER_LIVE_S:
        return True
    pid, _, host = identity.split(" ", 1)[0].partition("@")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    if int(pid) == os.getpid():  # this process: its workers that run are the ones run_workers has not ended
        return _RUNNING[identity] == 0
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:  # e.g. another user's process: it runs
        return False
    return False


async def foreign_workers(client: Client, task_queue: str, identity: str, *, mixed_only: bool = False) -> list[str]:
    """One line per other live worker polling ``task_queue`` whose server set differs from ours (by the digest in its
    identity), or (unless ``mixed_only``) that does not say its set (another program, an older mcp-tasks)."""
    ours = _SERVERS_TAG.search(identity)
    try:
        resp = await asyncio.wait_for(
            client.workflow_service.describe_task_queue(
                DescribeTaskQueueRequest(namespace=client.namespace, task_queue=TaskQueue(name=task_queue))
            ),
            10,
        )
    except Exception:  # noqa: BLE001  (a check at start; the worker runs either way)
        return []
    lines = []
    now = time.time()
    for poller in resp.pollers:
        seen = now - poller.last_access_time.ToSeconds() if poller.HasField("last_access_time") else None
        if poller.identity == identity or _gone(poller.identity, seen):
            continue
        theirs = _SERVERS_TAG.search(poller.identity)
        if theirs is None:
            if mixed_only:
                continue
            lines.append(
                f"worker {poller.identity!r} does not say which servers it has (not mcp-tasks, or an older one)"
            )
        elif ours is None or theirs["digest"] != ours["digest"]:
            lines.append(
                f"worker {poller.identity.split(' mcp-tasks', 1)[0]!r} serves "
                f"{theirs['names'].replace(',', ', ') if theirs['names'] != '-' else 'no servers'} "
                f"(configuration {theirs['digest']})"
            )
    return lines


def shutdown_executors(workers: list[Worker]) -> None:
    """Stop the workflow thread pool build_workers gave the shared worker (the SDK stops only its own pools)."""
    for w in workers:
        executor = w.config().get("workflow_task_executor")
        if executor is not None:
            executor.shutdown(wait=False)


#: Answers of a busy or briefly unavailable server to ``DescribeTaskQueue``: asked again within the wait's bound.
_TRANSIENT = frozenset(
    {
        RPCStatusCode.CANCELLED,
        RPCStatusCode.DEADLINE_EXCEEDED,
        RPCStatusCode.UNAVAILABLE,
        RPCStatusCode.RESOURCE_EXHAUSTED,
    }
)


async def wait_until_polling(
    client: Client,
    task_queue: str,
    identity: str,
    timeout_s: float = 15.0,
    *,
    tasks: list[asyncio.Task[None]] | None = None,
) -> bool:
    """True once the server lists ``identity`` among the workflow pollers of ``task_queue``; False after
    ``timeout_s``, or at once when one of the workers' ``tasks`` has ended (it failed to start: the caller raises
    its error). Each ``DescribeTaskQueue`` is bounded by what is left of ``timeout_s``; one that a loaded server
    cancels or times out is asked again (an overloaded dev server answered ``CANCELLED`` once, which ended a
    starting worker with a traceback); any other error is raised."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout_s
    while loop.time() < end:
        if tasks and any(t.done() for t in tasks):
            return False
        try:
            resp = await client.workflow_service.describe_task_queue(
                DescribeTaskQueueRequest(namespace=client.namespace, task_queue=TaskQueue(name=task_queue)),
                timeout=timedelta(seconds=max(1.0, min(5.0, end - loop.time()))),
            )
        except RPCError as exc:
            if exc.status in _TRANSIENT:
                await asyncio.sleep(0.5)
                continue
            if exc.status != RPCStatusCode.UNIMPLEMENTED:
                raise
            # The time-skipping test server cannot list pollers: give the pollers a moment instead.
            await asyncio.sleep(0.5)
            return True
        if any(p.identity == identity for p in resp.pollers):
            return True
        await asyncio.sleep(0.2)
    return False


async def run_workers(
    client: Client,
    cfg: WorkerConfig,
    *,
    stop: asyncio.Event | None = None,
    on_ready: Callable[[], None] | None = None,
    activities: McpActivities | None = None,
    handle_signals: bool = True,
    refuse_mixed: bool = False,
) -> None:
    """Run until ``stop`` is set (or, with ``handle_signals``, SIGTERM/SIGINT), then shut down gracefully and
    close MCP sessions, within ``GRACEFUL_SHUTDOWN_S + SHUTDOWN_GRACE_S + STDIO_SHUTDOWN_S`` (+ 1 s) whatever the
    activities and the stdio children do. ``refuse_mixed`` (``mcp-tasks worker``): raise ``ConfigError`` before polling
    when a live worker on the queue serves other ``[servers]``, unless ``[worker] allow_mixed_servers``; otherwise
    (``run``'s own worker, a program's) such workers are warned about once polling."""
    activities = activities or make_activities(cfg)
    identity = worker_identity(client.identity, activities.servers)
    activities.identity = identity
    # Before polling, so that a refused worker never takes a task: how workers know each other's [servers] is the
    # digest each one's identity carries (worker_identity), which DescribeTaskQueue lists for every live poller.
    mixed = await foreign_workers(client, cfg.temporal.task_queue, identity, mixed_only=True) if refuse_mixed else []
    if mixed and not cfg.worker.allow_mixed_servers:
        raise ConfigError(
            f"task queue {cfg.temporal.task_queue!r} is served by workers with other [servers]: {'; '.join(mixed)}; "
            f"ours: {', '.join(sorted(activities.servers)) or 'no servers'} (configuration "
            f"{servers_digest(activities.servers)}). They would split its tasks, and a task naming a server only one "
            "of them has would end rejected: UnknownServer on the other. Give every worker on a queue the same "
            "[servers], or this one its own --task-queue; or, to run side by side on purpose (a rollout), pass "
            "--allow-mixed-servers ([worker] allow_mixed_servers = true)"
        )
    workers = build_workers(client, cfg.temporal.task_queue, activities, cfg.worker, identity=identity)
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    installed = []
    for sig in (signal.SIGTERM, signal.SIGINT) if handle_signals else ():
        try:
            loop.add_signal_handler(sig, stop.set)
            installed.append(sig)
        except (NotImplementedError, RuntimeError, ValueError):
            pass  # not the main thread: the caller owns signals
    tasks = [asyncio.create_task(w.run()) for w in workers]
    _RUNNING[identity] += 1
    try:
        if await wait_until_polling(client, cfg.temporal.task_queue, identity, tasks=tasks):
            if on_ready:
                on_ready()
            others = await foreign_workers(client, cfg.temporal.task_queue, identity)
            if others:
                log.warning(
                    "task queue %s has workers with another server set, so they split its tasks and a task "
                    "naming a server only one of them has ends rejected: UnknownServer on the other: %s; ours: "
                    "%s (configuration %s). Give every worker on a queue the same [servers], or each "
                    "configuration its own --task-queue",
                    cfg.temporal.task_queue,
                    "; ".join(others),
                    ", ".join(sorted(activities.servers)) or "no servers",
                    servers_digest(activities.servers),
                    extra={"event": "foreign_workers", "task_queue": cfg.temporal.task_queue},
                )
        stopper = asyncio.create_task(stop.wait())
        done, _ = await asyncio.wait([stopper, *tasks], return_when=asyncio.FIRST_COMPLETED)
        for t in done:
            if t is not stopper and t.exception():
                raise t.exception()  # type: ignore[misc]
        stopper.cancel()
    finally:
        _RUNNING[identity] -= 1
        # Bounded: the SDK waits GRACEFUL_SHUTDOWN_S for running activities, then cancels them and waits for
        # them again, without limit; an activity (or an MCP session) that ignores cancellation must not hold
        # the process. Not asyncio.wait_for: on its timeout it waits for the cancelled work to end, unbounded.
        await _within(
            asyncio.gather(*(w.shutdown() for w in workers), return_exceptions=True),
            GRACEFUL_SHUTDOWN_S + SHUTDOWN_GRACE_S,
        )
        shutdown_executors(workers)
        # The notification listeners first (their streams hold the sessions' connections), bounded.
        await _within(activities.push.aclose(), SHUTDOWN_GRACE_S)
        # Stdio children end by the spec's shutdown, side by side (SessionPool.aclose), within STDIO_SHUTDOWN_S;
        # a close cancelled at the bound kills its child before it returns.
        await _within(activities.pool.aclose(), STDIO_SHUTDOWN_S)
        for sig in installed:
            loop.remove_signal_handler(sig)


async def _within(awaitable: Any, seconds: float) -> None:
    """Await ``awaitable`` for at most ``seconds``; then cancel it and give it a moment (never more) to end."""
    task = asyncio.ensure_future(awaitable)
    done, _ = await asyncio.wait({task}, timeout=seconds)
    if not done:
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=0.5)
    if done and not task.cancelled():
        task.exception()  # retrieved: a failure to stop is not this shutdown's error
