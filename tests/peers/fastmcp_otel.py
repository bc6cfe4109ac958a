"""The fastmcp demo server with the official SDK's own server span per request, exported to a file.

Run from the repository root (same arguments as ``python -m mcp_temporal_tasks.demo.server``)::

    PEER_SPANS=/path/spans.jsonl python -m tests.peers.fastmcp_otel --host 127.0.0.1 --port 0

Why not the demo server as it is: fastmcp 4.1.4 runs on mcp 2.3.0's low-level ``Server`` (its
``LowLevelServer`` subclasses it, and every request, ``tasks/get`` included, goes through the SDK's
``ServerRunner`` middleware chain), but ``LowLevelServer.__init__`` *removes* the SDK's
``mcp.server._otel.OpenTelemetryMiddleware`` from ``Server.middleware`` and opens its own span instead
(``fastmcp.server.telemetry.seam_span``, parented by ``fastmcp.telemetry.extract_trace_context``). mcp 2.3.0's
own servers (``Server``, ``MCPServer``) have no tasks, so a tasks peer on the SDK alone does not exist; this
peer puts the SDK's middleware back, outermost, so the SDK's extraction of ``params._meta`` runs on every
request and its SERVER span (instrumentation scope ``mcp-python-sdk``) is recorded next to fastmcp's
(scope ``fastmcp``).

``PEER_SPANS`` (optional): installs an OpenTelemetry SDK ``TracerProvider`` in this process that appends one
JSON line per finished span: ``name``, ``scope``, ``kind``, ``trace_id`` (32 hex), ``span_id`` (16 hex),
``parent_span_id`` (16 hex or null), ``parent_remote``, ``method`` (``mcp.method.name``) and ``attributes``.
``PEER_LOG`` works as in the demo server.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Sequence
from typing import Any

from mcp.server._otel import OpenTelemetryMiddleware
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from mcp_temporal_tasks.demo import server as demo_server


def _jsonable(value: Any) -> Any:
    return list(value) if isinstance(value, (tuple, list)) else value


def span_line(span: ReadableSpan) -> dict[str, Any]:
    """One finished span as a JSON-able dict (ids in the W3C hex form)."""
    ctx = span.get_span_context()
    attributes = dict(span.attributes or {})
    parent = span.parent
    return {
        "name": span.name,
        "scope": span.instrumentation_scope.name if span.instrumentation_scope else None,
        "kind": span.kind.name,
        "trace_id": format(ctx.trace_id, "032x") if ctx else None,
        "span_id": format(ctx.span_id, "016x") if ctx else None,
        "parent_span_id": format(parent.span_id, "016x") if parent else None,
        "parent_remote": parent.is_remote if parent else None,
        "method": attributes.get("mcp.method.name"),
        "attributes": {k: _jsonable(v) for k, v in attributes.items()},
    }


class JsonLinesSpanExporter(SpanExporter):
    """Appends one JSON line per span to ``path`` (flushed per batch, so a reader sees ended spans at once)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        text = "".join(json.dumps(span_line(span)) + "\n" for span in spans)
        try:
            with self._lock, open(self.path, "a", encoding="utf-8") as fh:
                fh.write(text)
        except OSError as exc:  # exporting must never break the server
            print(f"PEER_SPANS write failed: {exc}", file=sys.stderr, flush=True)
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def install_span_file(path: str) -> None:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(JsonLinesSpanExporter(path)))
    trace.set_tracer_provider(provider)


def build_server(*args: Any, **kwargs: Any) -> Any:
    """The demo server, with the SDK's ``OpenTelemetryMiddleware`` back at the front of its low-level chain."""
    server = _build_demo_server(*args, **kwargs)
    low_level = server._mcp_server
    if not any(isinstance(mw, OpenTelemetryMiddleware) for mw in low_level.middleware):
        low_level.middleware.insert(0, OpenTelemetryMiddleware())
    return server


_build_demo_server = demo_server.build_server


def main(argv: list[str] | None = None) -> None:
    spans = os.environ.get("PEER_SPANS")
    if spans:
        install_span_file(spans)
    # The demo server's runner looks ``build_server`` up in its module when it starts.
    demo_server.build_server = build_server
    demo_server.main(argv)


if __name__ == "__main__":
    main()
