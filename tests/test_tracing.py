"""One trace from the caller to the MCP server: ``McpTasksPlugin(tracing=True)`` adds Temporal's OpenTelemetry
interceptor, and every MCP request we send carries the current ``traceparent`` in ``params._meta`` (SEP-414).

Spans are collected in memory (the OpenTelemetry SDK's own exporter); the peers log the ``traceparent`` each
request arrived with: the TypeScript SDK peer (2025-11-25) and the fastmcp peer (2026-07-28). The server's own
spans come from ``tests/peers/fastmcp_otel.py``: the fastmcp peer with mcp 2.3.0's ``OpenTelemetryMiddleware``
(which fastmcp removes; it opens its own span instead) and a span file, so the official SDK's extraction of
``params._meta`` is what parents the server's ``tools/call`` and ``tasks/get`` spans."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
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
from mcp_temporal_tasks.workflows.records import McpTaskRequest, Outcome
from tests.peers.harness import Peer, fastmcp_otel_peer
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


@pytest.fixture(scope="module")
def fastmcp_otel(peer_logs: Path) -> Iterator[Peer]:
    with fastmcp_otel_peer(peer_logs) as peer:
        yield peer


def trace_id_of(traceparent: str | None) -> int | None:
    """The trace id of a W3C ``traceparent`` (``00-<32 hex>-<16 hex>-<2 hex>``)."""
    parts = (traceparent or "").split("-")
    return int(parts[1], 16) if len(parts) == 4 and len(parts[1]) == 32 else None


async def run_traced_task(peer: Peer, temporal_env: Any) -> Any:
    """One ``slow_echo`` task on ``peer`` through a worker with ``McpTasksPlugin(tracing=True)``; its outcome."""
    plugin = McpTasksPlugin(servers={"peer": ServerConfig(url=peer.url)}, tracing=True)
    client = await Client.connect(address_of(temporal_env), plugins=[plugin])
    queue = unique("trace")
    async with Worker(client, task_queue=queue):
        handle = await start_mcp_task(
            client,
            McpTaskRequest(
                server="peer", tool="slow_echo", arguments={"seconds": 1, "text": unique("traced")}, timeouts=FAST
            ),
            workflow_id=unique("traced"),
            task_queue=queue,
        )
        out = await asyncio.wait_for(outcome_of(handle), 60)
    assert out.outcome == Outcome.COMPLETED, out.reason
    return out


@pytest.mark.parametrize("peer_name", ["ts_http_stateful", "fastmcp_server"])
async def test_one_trace_from_the_starter_through_the_workflow_and_activities_to_the_server(
    request: pytest.FixtureRequest, peer_name: str, temporal_env: Any
) -> None:
    peer: Peer = request.getfixturevalue(peer_name)
    EXPORTER.clear()
    mark = peer.log_mark()
    out = await run_traced_task(peer, temporal_env)
    spans = EXPORTER.get_finished_spans()
    starter = [s for s in spans if s.name == "StartWorkflow:McpTaskWorkflow"]
    assert len(starter) == 1, [s.name for s in spans]
    trace_id = starter[0].context.trace_id
    in_trace = {s.name for s in spans if s.context.trace_id == trace_id}
    for name in (
        "RunWorkflow:McpTaskWorkflow",
        "RunActivity:mcp-tasks.start_call.v1",
        "RunActivity:mcp-tasks.await_task.v1",
    ):
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
    # So did the handshake this worker's fresh session opened with (initialize, or server/discover).
    opened = [x for x in peer.log_since(mark) if x.get("method") in ("initialize", "server/discover")]
    assert opened and {trace_id_of(x.get("traceparent")) for x in opened} == {trace_id}, opened


async def test_the_sdk_server_records_the_callers_trace_for_tools_call_and_every_tasks_get(
    fastmcp_otel: Peer, temporal_env: Any
) -> None:
    """The server's own spans. mcp 2.3.0's ``OpenTelemetryMiddleware`` (scope ``mcp-python-sdk``) opens one SERVER
    span per request, parented by the context it extracts from ``params._meta``: each is in the starter's trace
    and its (remote) parent is the span of the activity that sent the request. fastmcp's own span (scope
    ``fastmcp``) keeps an active span rather than extracting ``_meta``, so here it nests under the SDK's."""
    EXPORTER.clear()
    log_mark, span_mark = fastmcp_otel.log_mark(), len(fastmcp_otel.spans())
    await run_traced_task(fastmcp_otel, temporal_env)
    ours = EXPORTER.get_finished_spans()
    starter = [s for s in ours if s.name == "StartWorkflow:McpTaskWorkflow"]
    assert len(starter) == 1, [s.name for s in ours]
    trace_id = format(starter[0].context.trace_id, "032x")
    activity = {format(s.context.span_id, "016x"): s.name for s in ours if s.name.startswith("RunActivity:")}
    received = [x["method"] for x in fastmcp_otel.log_since(log_mark) if x.get("method") in ("tools/call", "tasks/get")]
    assert received.count("tools/call") == 1 and "tasks/get" in received, received
    server = [
        x
        for x in fastmcp_otel.spans()[span_mark:]
        if x["kind"] == "SERVER" and x["method"] in ("tools/call", "tasks/get")
    ]
    sdk = [x for x in server if x["scope"] == "mcp-python-sdk"]
    # One SDK span per request the peer received, every tasks/get included, all in the starter's trace.
    assert sorted(x["method"] for x in sdk) == sorted(received), (received, server)
    assert {x["trace_id"] for x in sdk} == {trace_id}, sdk
    assert all(x["parent_remote"] for x in sdk), sdk
    parents = {m: {activity.get(x["parent_span_id"]) for x in sdk if x["method"] == m} for m in set(received)}
    assert parents == {
        "tools/call": {"RunActivity:mcp-tasks.start_call.v1"},
        "tasks/get": {"RunActivity:mcp-tasks.await_task.v1"},
    }, parents
    call = next(x for x in sdk if x["method"] == "tools/call")
    assert call["name"] == "tools/call slow_echo" and call["attributes"]["gen_ai.tool.name"] == "slow_echo", call
    # fastmcp's span of each request: same trace, child of the SDK's span of that request.
    sdk_ids = {x["span_id"]: x["method"] for x in sdk}
    own = [x for x in server if x["scope"] == "fastmcp"]
    assert sorted(x["method"] for x in own) == sorted(received), (received, server)
    assert {x["trace_id"] for x in own} == {trace_id}, own
    assert all(sdk_ids.get(x["parent_span_id"]) == x["method"] for x in own), (own, sdk)


async def test_without_tracing_requests_carry_no_trace_context(
    ts_http_stateful: Peer, client: Client, queue: str, worker: Any
) -> None:
    mark = ts_http_stateful.log_mark()
    out = await outcome_of(
        await start_mcp_task(
            client,
            McpTaskRequest(
                server=ts_http_stateful.endpoint,
                tool="slow_echo",
                arguments={"seconds": 0.2, "text": unique("plain")},
                timeouts=FAST,
            ),
            workflow_id=unique("plain"),
            task_queue=queue,
        )
    )
    assert out.outcome == Outcome.COMPLETED
    lines = [x for x in ts_http_stateful.log_since(mark) if x.get("method") in ("tools/call", "tasks/get")]
    assert lines and all(x.get("traceparent") is None for x in lines), lines


async def test_a_cli_worker_with_tracing_exports_over_otlp_one_trace_per_task(
    ts_http_stateful: Peer, temporal_env: Any, tmp_path: Path
) -> None:
    """`[worker] tracing = true` and the standard OTEL_* environment, no Python of the user's: `mcp-tasks run` sets up
    the SDK itself, says where spans go, and an OTLP/HTTP receiver (what a collector gets, decoded with
    opentelemetry-proto) receives them; the MCP peer sees each task's trace id on its tools/call, every tasks/get
    and its tasks/result, a different one per task."""
    from tests.peers.otlp_receiver import OtlpReceiver
    from tests.temporal_harness import cli, one_json

    config = tmp_path / "worker.toml"
    config.write_text(f'[worker]\ntracing = true\n[servers.peer]\nurl = "{ts_http_stateful.url}"\n')
    service = unique("svc")
    mark = ts_http_stateful.log_mark()
    with OtlpReceiver() as receiver:
        env = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
            "OTEL_SERVICE_NAME": service,
            "MCP_TASKS_STATE_DIR": str(tmp_path),
        }
        outcomes = []
        for _ in range(2):
            rc, out, err = await cli(
                "run",
                "slow_echo",
                "--server",
                "peer",
                "--config",
                str(config),
                "--args",
                json.dumps({"seconds": 0.5, "text": unique("traced")}),
                "--id",
                unique("otlp"),
                "--json",
                "--address",
                address_of(temporal_env),
                env=env,
            )
            assert rc == 0, err[-2000:]
            assert f"note: tracing: spans go to OTLP/HTTP {receiver.url}/v1/traces as service '{service}'" in err, err
            outcomes.append(one_json(out))
        spans = list(receiver.spans)
    log = ts_http_stateful.log_since(mark)
    traces = []
    for outcome in outcomes:
        reads = [x for x in log if x.get("taskId") == outcome["task_id"]]
        methods = {x["method"] for x in reads}
        assert {"tasks/get", "tasks/result"} <= methods, reads
        ids = {trace_id_of(x.get("traceparent")) for x in reads}
        assert len(ids) == 1 and None not in ids, reads
        trace_id = ids.pop()
        calls = [x for x in log if x.get("method") == "tools/call" and trace_id_of(x.get("traceparent")) == trace_id]
        assert len(calls) == 1, calls
        traces.append(format(trace_id, "032x"))
        # What the receiver got: the task's spans in that trace, from the service OTEL_SERVICE_NAME named.
        names = {s["name"] for s in spans if s["trace_id"] == traces[-1]}
        assert {
            "StartWorkflow:McpTaskWorkflow",
            "RunWorkflow:McpTaskWorkflow",
            "RunActivity:mcp-tasks.start_call.v1",
            "RunActivity:mcp-tasks.await_task.v1",
        } <= names, sorted(names)
    assert traces[0] != traces[1]
    assert {s["service"] for s in spans} == {service}
    # The live view's status queries are not traced (they would be a trace each, twice a second).
    assert not any(s["name"].startswith(("QueryWorkflow", "HandleQuery")) for s in spans), sorted(
        {s["name"] for s in spans}
    )


async def test_a_cli_worker_traces_a_task_whose_starter_does_not_as_one_trace(
    ts_http_stateful: Peer, temporal_env: Any, tmp_path: Path
) -> None:
    """`mcp-tasks worker` with `[worker] tracing = true`, the task started by `run --no-worker` without tracing (as
    another SDK, a schedule or the UI would): still one trace per task, rooted at the workflow, on its tools/call,
    every tasks/get and its tasks/result; and no trace for the status queries nobody traced."""
    from tests.peers.otlp_receiver import OtlpReceiver
    from tests.temporal_harness import cli, one_json, worker_process

    traced = tmp_path / "worker.toml"
    traced.write_text(f'[worker]\ntracing = true\n[servers.peer]\nurl = "{ts_http_stateful.url}"\n')
    plain = tmp_path / "starter.toml"
    plain.write_text(f'[servers.peer]\nurl = "{ts_http_stateful.url}"\n')
    queue, mark = unique("untraced-start"), ts_http_stateful.log_mark()
    with OtlpReceiver() as receiver:
        env = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
            "OTEL_SERVICE_NAME": unique("svc"),
            "OTEL_BSP_SCHEDULE_DELAY": "200",
        }
        with worker_process(address_of(temporal_env), queue, traced, env=env):
            outcomes = []
            for _ in range(2):
                rc, out, err = await cli(
                    "run",
                    "slow_echo",
                    "--server",
                    "peer",
                    "--config",
                    str(plain),
                    "--no-worker",
                    "--task-queue",
                    queue,
                    "--args",
                    json.dumps({"seconds": 0.5, "text": unique("untraced")}),
                    "--id",
                    unique("untraced"),
                    "--json",
                    "--address",
                    address_of(temporal_env),
                    env={"MCP_TASKS_STATE_DIR": str(tmp_path)},
                )
                assert rc == 0, err[-2000:]
                outcomes.append(one_json(out))
        spans = list(receiver.spans)  # the worker flushed them on its way out
    log = ts_http_stateful.log_since(mark)
    traces = []
    for outcome in outcomes:
        reads = [x for x in log if x.get("taskId") == outcome["task_id"]]
        assert {"tasks/get", "tasks/result"} <= {x["method"] for x in reads}, reads
        ids = {trace_id_of(x.get("traceparent")) for x in reads}
        assert len(ids) == 1 and None not in ids, [(x["method"], x.get("traceparent")) for x in reads]
        trace_id = ids.pop()
        calls = [x for x in log if x.get("method") == "tools/call" and trace_id_of(x.get("traceparent")) == trace_id]
        assert len(calls) == 1, calls
        traces.append(format(trace_id, "032x"))
        names = {s["name"] for s in spans if s["trace_id"] == traces[-1]}
        assert {"RunWorkflow:McpTaskWorkflow", "RunActivity:mcp-tasks.start_call.v1"} <= names, sorted(names)
    assert traces[0] != traces[1]
    assert not any(s["name"].startswith("HandleQuery") for s in spans), sorted({s["name"] for s in spans})


def test_an_untraced_runs_parent_is_its_run_ids_alone() -> None:
    from mcp_temporal_tasks.worker.plugin import run_trace_parent

    a, again, b = run_trace_parent("run-a"), run_trace_parent("run-a"), run_trace_parent("run-b")
    assert a == again and a != b
    version, trace_id, span_id, flags = a.split("-")
    assert (version, flags, len(trace_id), len(span_id)) == ("00", "01", 32, 16)
    assert int(trace_id, 16) and int(span_id, 16)
