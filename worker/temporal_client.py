"""Connecting to Temporal, for every process of ours: the address rule, our data converter and runtime, tracing.

The one address rule is :func:`connect_options`; the client carries our data converter (pydantic, typed failures,
External Storage), runtime (metrics) and the tracing interceptor. Light on purpose: the CLI's commands on existing
tasks (``status``, ``result``, ...) connect through it without loading the worker, the activities or the MCP wire
(:mod:`.runner` and :mod:`.plugin`, which build workers, import these from here)."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import signal
from collections.abc import Mapping
from typing import Any

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.envconfig import ClientConfigProfile
from temporalio.runtime import LoggingConfig, PrometheusConfig, Runtime, TelemetryConfig, TelemetryFilter
from temporalio.service import RPCError, RPCStatusCode

from mcp_temporal_tasks.worker.config import ConfigError, WorkerConfig
from mcp_temporal_tasks.worker.storage import settings_of, with_storage
from mcp_temporal_tasks.workflows.task_error import McpTaskFailureConverter

#: The pydantic converter our models need, whose failures of a task that did not complete carry no stack trace.
DATA_CONVERTER = dataclasses.replace(pydantic_data_converter, failure_converter_class=McpTaskFailureConverter)

_runtime: Runtime | None = None


def runtime(metrics_port: int = 0) -> Runtime:
    """The process-wide Temporal runtime; with a port, Prometheus metrics (SDK + ours) are served there.

    Core logs are kept at ERROR: after a cancel, the waiting activity's late completion is reported by
    the core as a WARN although it is the expected end of a cancelled poll.
    """
    global _runtime
    if _runtime is None:
        metrics = PrometheusConfig(bind_address=f"0.0.0.0:{metrics_port}") if metrics_port else None
        # The core's threads are made with a person's signals blocked (a new thread inherits its creator's mask).
        # The kernel hands a process-directed SIGINT to any thread that does not block it; one of the core's threads
        # taking a Ctrl-C left `mcp-tasks answer` waiting in input() on the main thread, whose read() the signal never
        # interrupted (seen: 1 run in 2 of tests/test_cli_ux.py's Ctrl-C test, the prompt alive 140 s later).
        person = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT}
        blocked_before = signal.pthread_sigmask(signal.SIG_BLOCK, person)
        try:
            _runtime = Runtime(
                telemetry=TelemetryConfig(
                    metrics=metrics,
                    logging=LoggingConfig(filter=TelemetryFilter(core_level="ERROR", other_level="ERROR")),
                )
            )
        except Exception as exc:  # the Prometheus endpoint cannot listen (port in use, no permission)
            if not metrics_port:
                raise
            in_use = "in use" in str(exc).lower()
            raise ConfigError(
                f"worker.metrics_port: port {metrics_port} "
                f"{'is already in use' if in_use else 'cannot be opened'} (this worker's Prometheus "
                f"metrics endpoint wanted it: {' '.join(str(exc).split())}); set [worker] metrics_port or "
                "MCP_TASKS_METRICS_PORT to a free port, or 0 for no metrics"
            ) from None
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked_before)
    return _runtime


# A server that is starting (or restarting) refuses connections, then answers UNAVAILABLE ("Frontend is not
# healthy yet") for a moment after its port opens. Those are worth waiting out; TLS, auth and DNS errors are not.
_TRANSIENT_CONNECT = (
    "Unavailable",
    "not healthy yet",
    "tcp connect error",
    "Connection refused",
    "Connection reset",
    "ConnectionReset",
)  # hyper's Kind(ConnectionReset): the frontend dropped us while starting


def transient_connect_error(exc: BaseException) -> bool:
    """True when a failed Client.connect means "not up yet" rather than "misconfigured"."""
    if isinstance(exc, RPCError):
        return exc.status == RPCStatusCode.UNAVAILABLE
    return isinstance(exc, RuntimeError) and any(marker in str(exc) for marker in _TRANSIENT_CONNECT)


def connect_options(
    *, address: str | None = None, namespace: str | None = None, cfg: WorkerConfig | None = None
) -> tuple[dict[str, Any], bool]:
    """``Client.connect`` keyword arguments and whether an address was given (not defaulted).

    The one address rule of every command and of ``mcp-tasks worker``, first that says wins (the namespace
    likewise): the explicit arguments (CLI flags); ``TEMPORAL_ADDRESS``; the profile of ``temporal.toml``
    (``TEMPORAL_PROFILE``, else ``default``): both are Temporal's own environment configuration
    (``temporalio.envconfig``, with ``TEMPORAL_API_KEY`` and ``TEMPORAL_TLS*``), which every Temporal tool reads the
    same way; then the ``[temporal]`` table of our configuration (``--config``, ``$MCP_TASKS_CONFIG``); then
    ``localhost:7233``, where the CLI may start the embedded Temporal. Why Temporal's configuration before ours: a
    profile's address, TLS and API key belong together, and are never split so that a profile's API key goes to
    an address from another source; our table fills in what Temporal's configuration leaves unsaid.
    """
    try:
        options: dict[str, Any] = dict(ClientConfigProfile.load().to_client_connect_config())
    except Exception as exc:  # a malformed temporal.toml or TEMPORAL_* value
        raise ConfigError(f"Temporal client configuration (temporal.toml / TEMPORAL_* variables): {exc}") from None
    given = "target_host" in options
    if cfg is not None:
        table = cfg.temporal
        if not given and "address" in table.model_fields_set:
            options["target_host"], given = table.address, True
        if "namespace" not in options and "namespace" in table.model_fields_set:
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


async def connect(
    address: str | None = None,
    namespace: str | None = None,
    *,
    cfg: WorkerConfig | None = None,
    metrics_port: int = 0,
    wait_s: float = 0.0,
    interceptors: list[Any] | None = None,
) -> Client:
    """Connect to Temporal (see :func:`connect_options`); with ``wait_s``, keep retrying for that long while
    the server is not up yet. The last error is raised unchanged once the wait is over, and at once when it is
    not transient."""
    options, _ = connect_options(address=address, namespace=namespace, cfg=cfg)
    return await connect_to(options, cfg=cfg, metrics_port=metrics_port, wait_s=wait_s, interceptors=interceptors)


async def connect_to(
    options: Mapping[str, Any],
    *,
    cfg: WorkerConfig | None = None,
    metrics_port: int = 0,
    wait_s: float = 0.0,
    interceptors: list[Any] | None = None,
) -> Client:
    """:func:`connect` with the rule applied already: ``options`` are what :func:`connect_options` gave (a CLI
    command works them out once, at its start), used as they are."""
    given = dict(options)
    target = given.pop("target_host")
    # Large payloads through Temporal's External Storage, as [temporal.storage] says (default: the embedded store).
    data_converter = with_storage(
        DATA_CONVERTER, settings_of(cfg.temporal.storage, cfg.worker.state_dir) if cfg is not None else None
    )
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    delay = 0.1
    while True:
        try:
            return await Client.connect(
                target,
                data_converter=data_converter,
                runtime=runtime(metrics_port),
                interceptors=interceptors or [],
                **given,
            )
        except Exception as exc:
            if not transient_connect_error(exc) or loop.time() + delay > deadline:
                raise
        await asyncio.sleep(delay)
        delay = min(delay * 2, 1.0)


def tracing_interceptor() -> Any:
    """Temporal's OpenTelemetry interceptor (``temporalio.contrib.opentelemetry``), or one error naming the extra.

    A task is one trace (its ``tools/call``, every ``tasks/get``, its ``tasks/result``) whether or not its starter
    traces. With a traced starter (``McpTasksPlugin`` given to ``Client.connect``; ``mcp-tasks run`` with ``[worker]
    tracing``) the trace is the starter's. A workflow started without one (``run --no-worker``, another SDK, a
    schedule, the UI) would get no workflow spans from the SDK, and each activity a trace of its own; here its
    spans instead hang off a parent derived from its run id (:func:`run_trace_parent`): one trace per run, the same
    on every worker and after a replay (the SDK does not recreate a replayed workflow's span, so a parent it made
    would be lost on the next worker). Queries without a trace (the UI, ``status``, a live view) are not traced:
    each would be a trace of its own."""
    try:
        from temporalio.contrib.opentelemetry import TracingInterceptor
    except ImportError as exc:  # pragma: no cover - opentelemetry-api comes with mcp; the SDK with [tracing]
        raise ConfigError(f"tracing needs OpenTelemetry: pip install 'mcp-temporal-tasks[tracing]' ({exc})") from exc

    class TaskTracing(TracingInterceptor):
        # _completed_workflow_span is where the pinned SDK (temporalio==1.35.0) makes every workflow-side span, outside
        # the sandbox, from the workflow's current context; tests/test_sdk_contract.py holds its shape.
        def _completed_workflow_span(self, params: Any) -> Any:
            if params.parent_missing:
                if params.name.startswith("HandleQuery:"):
                    return None
                run_id = str((params.attributes or {}).get("temporalRunID") or "")
                if run_id:
                    params = dataclasses.replace(
                        params, context={"traceparent": run_trace_parent(run_id)}, parent_missing=False
                    )
            return super()._completed_workflow_span(params)

    return TaskTracing()


def run_trace_parent(run_id: str) -> str:
    """A W3C ``traceparent`` (sampled) whose trace and span ids are derived from ``run_id``: the remote parent of an
    untraced run's spans. Deterministic, so every worker and every replay finds the same trace."""
    digest = hashlib.sha256(f"mcp-tasks trace {run_id}".encode()).digest()
    trace_id, span_id = digest[:16].hex(), digest[16:24].hex()
    return f"00-{trace_id}-{span_id}-01"
