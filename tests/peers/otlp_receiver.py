"""An OTLP/HTTP trace receiver for the tests: what a collector gets, decoded with ``opentelemetry-proto``.

``POST /v1/traces`` with an ``ExportTraceServiceRequest`` (protobuf, optionally gzip), answered as a collector
answers (200, an empty ``ExportTraceServiceResponse``). Binds 127.0.0.1 on a free port; :attr:`spans` holds one dict
per span received: ``trace_id`` (32 hex), ``span_id``, ``name``, ``service`` (the resource's ``service.name``).
"""

from __future__ import annotations

import gzip
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


class OtlpReceiver:
    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.requests = 0
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802  (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                ok = self.path == "/v1/traces" and self.headers.get("Content-Type") == "application/x-protobuf"
                if ok:
                    receiver._take(ExportTraceServiceRequest.FromString(body))
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200 if ok else 404)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def _take(self, request: ExportTraceServiceRequest) -> None:
        with self._lock:
            self.requests += 1
            for resource_spans in request.resource_spans:
                attrs = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        self.spans.append(
                            {
                                "trace_id": span.trace_id.hex(),
                                "span_id": span.span_id.hex(),
                                "name": span.name,
                                "service": attrs.get("service.name"),
                            }
                        )

    def __enter__(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
