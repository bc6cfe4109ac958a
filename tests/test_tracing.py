"""One trace from the caller to the MCP server: ``McpTasksPlugin(tracing=True)`` adds Temporal's OpenTelemetry
interceptor, and every MCP request we send carries the current ``traceparent`` in ``params._meta`` (SEP-414).

Spans are collected in memory (the OpenTelemetry SDK's own exporter); the peers log the ``traceparent`` each
request arrived with: the TypeScript SDK peer (2025-11-25) and the fastmcp peer (2026-07-28)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio.client import Client
from temporalio.worker import Worker

from mcp_temporal_tasks import McpTasksPlugin, ServerConfig
from mcp_temporal_tasks.workflows.client import outcome_of, start_mcp_task
from mcp_temporal_tasks.workflows.models import McpTaskRequest, Outcome
from tests.peers.harness import Peer
from tests.temporal_harness import FAST, address_of, unique

EXPORTER = InMemorySpanExporter()


@pytest.fixture(scope="module", autouse=True)
def tracer_provider() -> None:
    """The process's one TracerProvider (OpenTelemetry allows setting it once), exporting to memory."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    provider.add_span_processor(SimpleSpanProcessor(EXPORTER))


def trace_id_of(traceparent: str | None) -> int | None:
    """The trace id of a W3C ``traceparent`` (``00-<32 hex>-<16 hex>-<2 hex>``)."""
    parts = (traceparent or "").split("-")
    return int(parts[1], 16) if len(parts) == 4 and len(parts[1]) == 32 else None


@pytest.mark.parametrize("peer_name", ["ts_http_stateful", "fastmcp_server"])
async def test_one_trace_from_the_starter_through_the_workflow_and_activities_to_the_server(
        request: pytest.FixtureRequest, peer_name: str, temporal_env: Any) -> None:
    peer: Peer = request.getfixturevalue(peer_name)
    plugin = McpTasksPlugin(servers={"peer": ServerConfig(url=peer.url)}, tracing=True)
    client = await Client.connect(address_of(temporal_env), plugins=[plugin])
    queue = unique("trace")
    EXPORTER.clear()
    mark = peer.log_mark()
    async with Worker(client, task_queue=queue):
        handle = await start_mcp_task(client, McpTaskRequest(
            server="peer", tool="slow_echo", arguments={"seconds": 1, "text": unique("traced")}, timeouts=FAST),
            workflow_id=unique("traced"), task_queue=queue)
        out = await asyncio.wait_for(outcome_of(handle), 60)
    assert out.outcome == Outcome.COMPLETED, out.reason
    spans = EXPORTER.get_finished_spans()
    starter = [s for s in spans if s.name == "StartWorkflow:McpTaskWorkflow"]
    assert len(starter) == 1, [s.name for s in spans]
    trace_id = starter[0].context.trace_id
    in_trace = {s.name for s in spans if s.context.trace_id == trace_id}
    for name in ("RunWorkflow:McpTaskWorkflow", "RunActivity:mcp-tasks.start_call.v1",
                 "RunActivity:mcp-tasks.await_task.v1"):
        assert name in in_trace, (name, sorted(in_trace))
    submit = next(s for s in spans if s.name == "RunActivity:mcp-tasks.start_call.v1")
    attrs = dict(submit.attributes or {})
    assert attrs.get("mcp_tasks.server") == "peer" and attrs.get("mcp_tasks.tool") == "slow_echo"
    assert attrs.get("mcp_tasks.task_id") == out.task_id
    # The server saw the caller's trace on tools/call and on every tasks/get.
    lines = [x for x in peer.log_since(mark) if x.get("method") in ("tools/call", "tasks/get")]
    calls = [x for x in lines if x["method"] == "tools/call"]
    gets = [x for x in lines if x["method"] == "tasks/get"]
    assert len(calls) == 1 and gets, lines
    assert {trace_id_of(x.get("traceparent")) for x in calls + gets} == {trace_id}, lines


async def test_without_tracing_requests_carry_no_trace_context(ts_http_stateful: Peer, client: Client, queue: str,
                                                               worker: Any) -> None:
    mark = ts_http_stateful.log_mark()
    out = await outcome_of(await start_mcp_task(client, McpTaskRequest(
        server=ts_http_stateful.endpoint, tool="slow_echo", arguments={"seconds": 0.2, "text": unique("plain")},
        timeouts=FAST), workflow_id=unique("plain"), task_queue=queue))
    assert out.outcome == Outcome.COMPLETED
    lines = [x for x in ts_http_stateful.log_since(mark) if x.get("method") in ("tools/call", "tasks/get")]
    assert lines and all(x.get("traceparent") is None for x in lines), lines
