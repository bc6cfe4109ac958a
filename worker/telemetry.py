"""The OpenTelemetry SDK a CLI worker sets up from ``OTEL_*``: where its spans go.

``[worker] tracing = true`` makes spans (and every MCP request's ``traceparent``) only once a ``TracerProvider`` is
set. A Python host program sets its own; ``mcp-tasks worker`` and ``run`` have none, so :func:`setup_tracing` sets one
up as the OpenTelemetry specification's environment says, and refuses what it cannot honour rather than trace nothing
in silence. A provider already set is left alone and named. docs/operating.md ("Operating it", traces).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from mcp_temporal_tasks.worker.config import ConfigError

EXPORTERS = ("otlp", "console", "none")
PROTOCOLS = ("http/protobuf", "grpc")
SAMPLERS = (
    "always_on",
    "always_off",
    "traceidratio",
    "parentbased_always_on",
    "parentbased_always_off",
    "parentbased_traceidratio",
)
DEFAULT_SERVICE_NAME = "mcp-tasks"
#: How long the last spans get to leave when the process ends (``run`` exits with ``os._exit``).
FLUSH_S = 5.0


@dataclass
class Tracing:
    """What :func:`setup_tracing` did: ``where`` says it in one line; ``flush`` sends what is still buffered."""

    where: str
    provider: Any = None

    def flush(self) -> None:
        if self.provider is not None:
            try:
                self.provider.force_flush(int(FLUSH_S * 1000))
                self.provider.shutdown()
            except Exception:  # noqa: BLE001  (an exporter that fails at exit must not change how we exit)
                pass


def _flag(env: Mapping[str, str], name: str) -> bool:
    return env.get(name, "").strip().lower() == "true"


def _otlp_exporter(env: Mapping[str, str]) -> tuple[Any, str]:
    protocol = (
        env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf"
    ).strip()
    var = (
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
        if env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        else "OTEL_EXPORTER_OTLP_PROTOCOL"
    )
    if protocol not in PROTOCOLS:
        raise ConfigError(
            f"tracing: {var}={protocol!r} is not supported (one of: {', '.join(PROTOCOLS)}; the "
            "OpenTelemetry Python SDK has no http/json exporter)"
        )
    for name in ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"):
        value = env.get(name)
        if value and (urlsplit(value).scheme not in ("http", "https") or not urlsplit(value).netloc):
            raise ConfigError(f"tracing: {name}={value!r} is not an http(s) URL (e.g. http://otel-collector:4318)")
    try:
        if protocol == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        else:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError as exc:
        package = (
            "opentelemetry-exporter-otlp-proto-grpc==1.44.0" if protocol == "grpc" else "'mcp-temporal-tasks[tracing]'"
        )
        raise ConfigError(f"tracing: OTLP over {protocol} needs its exporter: pip install {package} ({exc})") from None
    try:
        exporter = OTLPSpanExporter()
    except Exception as exc:  # noqa: BLE001  (a header or certificate setting the exporter refuses)
        raise ConfigError(
            f"tracing: the OTLP exporter refuses its OTEL_EXPORTER_OTLP_* settings: {type(exc).__name__}: {exc}"
        ) from None
    endpoint = (
        getattr(exporter, "_endpoint", None)
        or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        or env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        or "the default endpoint"
    )
    kind = "OTLP/gRPC" if protocol == "grpc" else "OTLP/HTTP"
    return exporter, f"{kind} {endpoint}"


def _sampler_text(env: Mapping[str, str]) -> str:
    sampler = (env.get("OTEL_TRACES_SAMPLER") or "parentbased_always_on").strip().lower()
    if sampler not in SAMPLERS:
        raise ConfigError(f"tracing: OTEL_TRACES_SAMPLER={sampler!r} is not one of: {', '.join(SAMPLERS)}")
    if sampler.endswith("traceidratio"):
        arg = env.get("OTEL_TRACES_SAMPLER_ARG", "")
        try:
            ratio = float(arg)
        except ValueError:
            raise ConfigError(
                f"tracing: OTEL_TRACES_SAMPLER={sampler} needs OTEL_TRACES_SAMPLER_ARG, a ratio from 0 "
                f"to 1 (got {arg!r})"
            ) from None
        if not 0.0 <= ratio <= 1.0:
            raise ConfigError(f"tracing: OTEL_TRACES_SAMPLER_ARG={arg!r} is not a ratio from 0 to 1")
        return f"{sampler} {ratio:g}"
    return sampler


def setup_tracing(env: Mapping[str, str] | None = None) -> Tracing:
    """Set up the OpenTelemetry SDK from ``env`` (default: this process's environment) unless a provider is set;
    return what was done. Raises :class:`ConfigError` naming the setting it cannot honour, or the missing extra.

    * ``OTEL_SDK_DISABLED=true``: nothing is set up (requests carry no trace context);
    * ``OTEL_TRACES_EXPORTER``: ``otlp`` (default), ``console``, ``none``, or a comma-separated list of them;
    * ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`` / ``OTEL_EXPORTER_OTLP_PROTOCOL``: ``http/protobuf`` (default; the
      ``[tracing]`` extra) or ``grpc`` (needs ``opentelemetry-exporter-otlp-proto-grpc``);
    * endpoint, headers, timeout, compression, certificates (``OTEL_EXPORTER_OTLP_[TRACES_]*``): read by the exporter;
    * ``OTEL_SERVICE_NAME`` / ``OTEL_RESOURCE_ATTRIBUTES`` (default service name ``mcp-tasks``);
    * ``OTEL_TRACES_SAMPLER`` / ``OTEL_TRACES_SAMPLER_ARG``; ``OTEL_BSP_*`` for the batch processor.
    """
    env = os.environ if env is None else env
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
    except ImportError as exc:
        raise ConfigError(
            f"tracing needs OpenTelemetry's SDK: pip install 'mcp-temporal-tasks[tracing]' ({exc})"
        ) from None
    current = trace.get_tracer_provider()
    if not isinstance(current, trace.ProxyTracerProvider):
        return Tracing(
            f"spans go to the TracerProvider this process already has ({type(current).__module__}."
            f"{type(current).__name__}), left as it is"
        )
    if _flag(env, "OTEL_SDK_DISABLED"):
        return Tracing("OTEL_SDK_DISABLED=true: no spans are recorded, MCP requests carry no trace context")
    names = [n.strip().lower() for n in (env.get("OTEL_TRACES_EXPORTER") or "otlp").split(",") if n.strip()]
    unknown = [n for n in names if n not in EXPORTERS]
    if unknown:
        raise ConfigError(
            f"tracing: OTEL_TRACES_EXPORTER={','.join(names)!r}: {', '.join(unknown)} is not supported "
            f"by mcp-tasks (one or more of: {', '.join(EXPORTERS)})"
        )
    sampler = _sampler_text(env)
    exporters: list[tuple[Any, str]] = []
    for name in dict.fromkeys(names):
        if name == "otlp":
            exporters.append(_otlp_exporter(env))
        elif name == "console":
            exporters.append((ConsoleSpanExporter(), "the console (stdout)"))
    given = env.get("OTEL_SERVICE_NAME") or "service.name=" in (env.get("OTEL_RESOURCE_ATTRIBUTES") or "")
    resource = Resource.create({} if given else {"service.name": DEFAULT_SERVICE_NAME})
    provider = TracerProvider(resource=resource)  # the sampler: OTEL_TRACES_SAMPLER(_ARG), checked above
    for exporter, _ in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    service = resource.attributes.get("service.name", DEFAULT_SERVICE_NAME)
    where = (
        " and ".join(text for _, text in exporters)
        or "nowhere (OTEL_TRACES_EXPORTER=none; MCP requests still carry the trace context)"
    )
    return Tracing(f"spans go to {where} as service {service!r} (sampler {sampler})", provider)
