"""Running the workflows and activities: Temporal connection, search attributes, workers, metrics, shutdown.

Two workers share one process:
* the **shared** task queue (default ``mcp-tasks``) runs workflows and every activity;
* a **per-process** task queue (named after this process) runs activities only. Tasks on stdio servers
  live in the child process this worker spawned, so the workflow pins all their later activities to
  this queue; if this process dies, those activities time out waiting for a worker and the task ends
  ``lost`` instead of hanging.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import json
import logging
import signal
import sys
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.envconfig import ClientConfigProfile
from temporalio.runtime import LoggingConfig, PrometheusConfig, Runtime, TelemetryConfig, TelemetryFilter
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from mcp_temporal_tasks.activities.mcp_activities import McpActivities
from mcp_temporal_tasks.activities.wire.redact import install_log_redaction
from mcp_temporal_tasks.worker.config import ConfigError, WorkerConfig, WorkerSettings
from mcp_temporal_tasks.worker.plugin import McpTasksPlugin
from mcp_temporal_tasks.worker.registry import make_activities
from mcp_temporal_tasks.workflows.errors import McpTaskFailureConverter

log = logging.getLogger("mcp_tasks.worker")
#: The pydantic converter our models need, whose failures of a task that did not complete carry no stack trace.
DATA_CONVERTER = dataclasses.replace(pydantic_data_converter, failure_converter_class=McpTaskFailureConverter)
#: How long a stopping worker lets running activities finish before it cancels them (Worker's
#: ``graceful_shutdown_timeout``).
GRACEFUL_SHUTDOWN_S = 5.0
#: After that, how long cancelled activities and MCP sessions get to wind down before the worker leaves anyway:
#: a stop never waits on a task that ignores cancellation (a SIGTERM'd worker once hung > 70 s in asyncio).
SHUTDOWN_GRACE_S = 2.0

_runtime: Runtime | None = None


class JsonFormatter(logging.Formatter):
    """One JSON object per line: what log shippers expect. Never logs arguments or headers.

    Exception text is the record's ``exc_text`` when set: the redacting filter leaves it scrubbed there.
    """

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {"ts": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"), "level": record.levelname,
                               "logger": record.name, "msg": record.getMessage()}
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


def setup_logging(level: str = "INFO", *, json_logs: bool = True) -> None:
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


def runtime(metrics_port: int = 0) -> Runtime:
    """The process-wide Temporal runtime; with a port, Prometheus metrics (SDK + ours) are served there.

    Core logs are kept at ERROR: after a cancel, the waiting activity's late completion is reported by
    the core as a WARN although it is the expected end of a cancelled poll.
    """
    global _runtime
    if _runtime is None:
        metrics = PrometheusConfig(bind_address=f"0.0.0.0:{metrics_port}") if metrics_port else None
        _runtime = Runtime(telemetry=TelemetryConfig(
            metrics=metrics, logging=LoggingConfig(filter=TelemetryFilter(core_level="ERROR", other_level="ERROR"))))
    return _runtime


# A server that is starting (or restarting) refuses connections, then answers UNAVAILABLE ("Frontend is not
# healthy yet") for a moment after its port opens. Those are worth waiting out; TLS, auth and DNS errors are not.
_TRANSIENT_CONNECT = ("Unavailable", "not healthy yet", "tcp connect error", "Connection refused", "Connection reset")


def transient_connect_error(exc: BaseException) -> bool:
    """True when a failed Client.connect means "not up yet" rather than "misconfigured"."""
    if isinstance(exc, RPCError):
        return exc.status == RPCStatusCode.UNAVAILABLE
    return isinstance(exc, RuntimeError) and any(marker in str(exc) for marker in _TRANSIENT_CONNECT)


def connect_options(*, address: str | None = None, namespace: str | None = None,
                    cfg: WorkerConfig | None = None) -> tuple[dict[str, Any], bool]:
    """``Client.connect`` keyword arguments and whether an address was given (not defaulted).

    Follows Temporal's own environment configuration (``temporalio.envconfig``: ``TEMPORAL_ADDRESS``,
    ``TEMPORAL_NAMESPACE``, ``TEMPORAL_API_KEY``, ``TEMPORAL_TLS*``, ``TEMPORAL_PROFILE`` and the profiles of
    ``temporal.toml``), then the ``[temporal]`` table of our configuration where it sets a key, then the
    explicit arguments (CLI flags).
    """
    try:
        options: dict[str, Any] = dict(ClientConfigProfile.load().to_client_connect_config())
    except Exception as exc:  # a malformed temporal.toml or TEMPORAL_* value
        raise ConfigError(f"Temporal client configuration (temporal.toml / TEMPORAL_* variables): {exc}") from None
    given = "target_host" in options
    if cfg is not None:
        table = cfg.temporal
        if "address" in table.model_fields_set:
            options["target_host"], given = table.address, True
        if "namespace" in table.model_fields_set:
            options["namespace"] = table.namespace
        legacy_tls = cfg.tls_config()  # TEMPORAL_TLS_CERT/KEY, tls = true: kept from earlier releases
        if legacy_tls and not options.get("tls"):
            options["tls"] = legacy_tls
    if address:
        options["target_host"], given = address, True
    if namespace:
        options["namespace"] = namespace
    options.setdefault("target_host", "localhost:7233")
    options.setdefault("namespace", "default")
    if options.get("api_key") and "tls" not in options:
        options["tls"] = True  # Temporal Cloud: an API key always travels over TLS
    return options, given


async def connect(address: str | None = None, namespace: str | None = None, *, cfg: WorkerConfig | None = None,
                  metrics_port: int = 0, wait_s: float = 0.0) -> Client:
    """Connect to Temporal (see :func:`connect_options`); with ``wait_s``, keep retrying for that long while
    the server is not up yet. The last error is raised unchanged once the wait is over, and at once when it is
    not transient."""
    options, _ = connect_options(address=address, namespace=namespace, cfg=cfg)
    target = options.pop("target_host")
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    delay = 0.1
    while True:
        try:
            return await Client.connect(target, data_converter=DATA_CONVERTER, runtime=runtime(metrics_port),
                                        **options)
        except Exception as exc:
            if not transient_connect_error(exc) or loop.time() + delay > deadline:
                raise
        await asyncio.sleep(delay)
        delay = min(delay * 2, 1.0)


def workflow_runner() -> SandboxedWorkflowRunner:
    """The sandbox, with our own packages passed through.

    By default the sandbox re-executes ``workflows/mcp_task.py`` for every workflow run (~220 KB and
    several ms of CPU each, measured in ``bench/``). Our workflow packages hold no mutable module state
    (constants, pydantic models, pure functions), so sharing them is safe; determinism is still guarded
    by the replay tests over committed histories.
    """
    return SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules("mcp_temporal_tasks"))


def build_workers(client: Client, task_queue: str, activities: McpActivities,
                  settings: WorkerSettings | None = None, **shared_overrides: Any) -> list[Worker]:
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
        max_concurrent_workflow_tasks=s.max_concurrent_workflow_tasks, max_cached_workflows=s.max_cached_workflows,
        workflow_task_executor=concurrent.futures.ThreadPoolExecutor(
            s.workflow_threads, thread_name_prefix="mcp_tasks_workflow_"),
        # A workflow task waits this long on a dead worker's sticky queue before any worker may take it: with the
        # SDK's 10 s default, recovery from a killed worker took heartbeat + 10 s (tests/test_fault_recovery.py).
        sticky_queue_schedule_to_start_timeout=timedelta(seconds=s.sticky_schedule_to_start_s),
        # The SDK sends one heartbeat per min(0.8 × timeout, this): at its 60 s default, a long wait's 120 s
        # heartbeat timeout would still cost 60 heartbeats per task-hour instead of 37.5 (bench/README.md).
        max_heartbeat_throttle_interval=timedelta(seconds=s.max_heartbeat_throttle_s),
        workflow_runner=workflow_runner())
    return [Worker(client, task_queue=task_queue, plugins=[plugin], **{**options, **shared_overrides})]


def shutdown_executors(workers: list[Worker]) -> None:
    """Stop the workflow thread pool build_workers gave the shared worker (the SDK stops only its own pools)."""
    for w in workers:
        executor = w.config().get("workflow_task_executor")
        if executor is not None:
            executor.shutdown(wait=False)


async def wait_until_polling(client: Client, task_queue: str, identity: str, timeout_s: float = 15.0) -> bool:
    """True once the server lists ``identity`` among the workflow pollers of ``task_queue``."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout_s
    while loop.time() < end:
        try:
            resp = await client.workflow_service.describe_task_queue(DescribeTaskQueueRequest(
                namespace=client.namespace, task_queue=TaskQueue(name=task_queue)))
        except RPCError as exc:
            if exc.status != RPCStatusCode.UNIMPLEMENTED:
                raise
            # The time-skipping test server cannot list pollers: give the pollers a moment instead.
            await asyncio.sleep(0.5)
            return True
        if any(p.identity == identity for p in resp.pollers):
            return True
        await asyncio.sleep(0.2)
    return False


async def run_workers(client: Client, cfg: WorkerConfig, *, stop: asyncio.Event | None = None,
                      on_ready: Callable[[], None] | None = None, activities: McpActivities | None = None,
                      handle_signals: bool = True) -> None:
    """Run until ``stop`` is set (or, with ``handle_signals``, SIGTERM/SIGINT), then shut down gracefully and
    close MCP sessions, within ``GRACEFUL_SHUTDOWN_S + 2 * SHUTDOWN_GRACE_S`` whatever the activities do."""
    activities = activities or make_activities(cfg)
    workers = build_workers(client, cfg.temporal.task_queue, activities, cfg.worker)
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
    try:
        if await wait_until_polling(client, cfg.temporal.task_queue, client.identity):
            if on_ready:
                on_ready()
        stopper = asyncio.create_task(stop.wait())
        done, _ = await asyncio.wait([stopper, *tasks], return_when=asyncio.FIRST_COMPLETED)
        for t in done:
            if t is not stopper and t.exception():
                raise t.exception()  # type: ignore[misc]
        stopper.cancel()
    finally:
        # Bounded: the SDK waits GRACEFUL_SHUTDOWN_S for running activities, then cancels them and waits for
        # them again, without limit; an activity (or an MCP session) that ignores cancellation must not hold
        # the process.
        with contextlib.suppress(TimeoutError, Exception):
            await asyncio.wait_for(asyncio.gather(*(w.shutdown() for w in workers), return_exceptions=True),
                                   GRACEFUL_SHUTDOWN_S + SHUTDOWN_GRACE_S)
        shutdown_executors(workers)
        with contextlib.suppress(TimeoutError, Exception):
            await asyncio.wait_for(activities.push.aclose(), SHUTDOWN_GRACE_S)
        with contextlib.suppress(TimeoutError, Exception):
            await asyncio.wait_for(activities.pool.aclose(), SHUTDOWN_GRACE_S)
        for sig in installed:
            loop.remove_signal_handler(sig)
