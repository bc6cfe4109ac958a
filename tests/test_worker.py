"""`mcp-tasks worker` as an operator runs it: search attributes, readiness, metrics, graceful shutdown."""

from __future__ import annotations

import asyncio
import signal
import urllib.request
from pathlib import Path
from typing import Any

from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from mcp_temporal_tasks.worker.devserver import free_port, temporal_binary
from mcp_temporal_tasks.workflows.client import outcome_of, start_mcp_task
from mcp_temporal_tasks.workflows.records import SEARCH_ATTRIBUTE_NAMES, McpTaskRequest, Outcome, Timeouts
from tests.peers.harness import Peer
from tests.temporal_harness import WorkerProcess, unique, write_config


async def test_worker_on_a_bare_namespace(fastmcp_server: Peer, tmp_path: Path) -> None:
    # A server started WITHOUT our search attributes: the worker must register them and say so.
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_binary(),
        ui=False,
        data_converter=pydantic_data_converter,
        dev_server_log_level="error",
    )
    try:
        address = env.client.service_client.config.target_host
        before = await env.client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace="default")
        )
        assert not set(SEARCH_ATTRIBUTE_NAMES) & set(before.custom_attributes)
        port = free_port()
        cfg = write_config(tmp_path / "w.toml", {"demo": {"url": fastmcp_server.url}})
        queue = unique("metrics")
        proc = WorkerProcess(address, queue, cfg, env={"MCP_TASKS_METRICS_PORT": str(port)})
        try:
            proc.wait_ready()
            log = "\n".join(proc.lines)
            assert "registered search attributes McpServer, McpTool, McpTaskId, McpTaskStatus, McpOutcome" in log
            after = await env.client.operator_service.list_search_attributes(
                ListSearchAttributesRequest(namespace="default")
            )
            assert set(SEARCH_ATTRIBUTE_NAMES) <= set(after.custom_attributes)

            handle = await start_mcp_task(
                env.client,
                McpTaskRequest(
                    server="demo", tool="slow_echo", arguments={"seconds": 0.3}, timeouts=Timeouts(heartbeat_s=5)
                ),
                workflow_id=unique("m"),
                task_queue=queue,
            )
            assert (await asyncio.wait_for(outcome_of(handle), 60)).outcome == Outcome.COMPLETED

            metrics = await asyncio.to_thread(_scrape, port)
            assert "mcp_tasks_outcomes{" in metrics and 'outcome="completed"' in metrics
            assert "mcp_tasks_polls" in metrics and "mcp_tasks_tool_calls" in metrics
            assert "temporal_workflow_completed" in metrics or "temporal_activity_execution_latency" in metrics

            proc.proc.send_signal(signal.SIGTERM)
            assert await asyncio.to_thread(proc.proc.wait, 20) == 0
            assert any('"stopped"' in line or "stopped" in line for line in proc.lines[-5:])
        finally:
            proc.stop()
    finally:
        await env.shutdown()


def _scrape(port: int) -> Any:
    for _ in range(50):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as resp:
                body = resp.read().decode()
            if "mcp_tasks_outcomes" in body:
                return body
        except OSError:
            pass
        import time

        time.sleep(0.2)
    raise AssertionError("no mcp_tasks metrics on the metrics endpoint")
