"""W3C trace context on every MCP request we send (SEP-414: ``traceparent``/``tracestate`` in ``params._meta``).

The current OpenTelemetry span is the activity's (Temporal's ``TracingInterceptor``, installed by
``McpTasksPlugin(tracing=True)``), so a server that extracts the context (the official SDK's servers do) parents
its spans under the caller's trace. Without a recording span (tracing not set up) nothing is added: the request
is byte for byte what it was. ``opentelemetry-api`` comes with the ``mcp`` SDK; exporting spans is the
``[tracing]`` extra's business.
"""

from __future__ import annotations

from typing import Any

try:
    from opentelemetry import propagate, trace
except ImportError:  # pragma: no cover - the mcp SDK depends on opentelemetry-api
    propagate = None  # type: ignore[assignment]
    trace = None  # type: ignore[assignment]


def with_trace_context(params: dict[str, Any]) -> dict[str, Any]:
    """``params`` with the current trace context in ``_meta`` (a new dict), or ``params`` itself when there is
    none. A ``_meta`` the request already carries (progress token, protocol version) is kept."""
    if trace is None or not trace.get_current_span().get_span_context().is_valid:
        return params
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    if not carrier:
        return params
    return {**params, "_meta": {**(params.get("_meta") or {}), **carrier}}


def annotate(**attributes: Any) -> None:
    """Set attributes (server, tool, task id, outcome...) on the current span, if one records; never raises."""
    if trace is None:
        return
    span = trace.get_current_span()
    if span.is_recording():
        span.set_attributes(
            {f"mcp_tasks.{k}": v for k, v in attributes.items() if isinstance(v, (str, int, float, bool))}
        )
