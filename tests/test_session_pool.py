"""A session id is the server's to choose: two servers that issue the same one are two sessions.

The worker's session pool once found a legacy HTTP task's session by its ``Mcp-Session-Id`` alone, so a task of one
server was read (``tasks/get``, ``tasks/result``) on another server's session that happened to carry the same id, and
its workflow completed with the other server's result (found by the issue-42 work). Two scripted 2025-11-25 servers
here both call their first session ``s1`` and answer with their own text: each task ends with its own server's
result, each server saw one ``tools/call`` and the reads of its own task only.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from mcp_temporal_tasks.workflows.client import outcome_of, start_mcp_task
from mcp_temporal_tasks.workflows.records import McpTaskRequest, Outcome, Timeouts
from tests.scripted_mcp import ScriptedMcp, task
from tests.temporal_harness import unique
from tests.test_push import in_process


def _server(text: str) -> ScriptedMcp:
    def result(m: str, p: dict[str, Any]) -> dict[str, Any]:
        return {"content": [{"type": "text", "text": text}], "isError": False}

    def get(m: str, p: dict[str, Any]) -> dict[str, Any]:
        # The task works on the first read, so the wait reads again on the pooled session.
        get.n += 1  # type: ignore[attr-defined]
        return task(p.get("taskId", "t-1"), "completed" if get.n > 1 else "working")

    get.n = 0  # type: ignore[attr-defined]
    server = ScriptedMcp({"tasks/get": get, "tasks/result": result})
    assert server.session_prefix == "s"  # both servers issue s1, s2, ...
    return server


@pytest.mark.slow
async def test_two_servers_issuing_the_same_session_id_are_read_apart(temporal_env: Any) -> None:
    servers = {"alpha": _server("from alpha"), "beta": _server("from beta")}
    for s in servers.values():
        threading.Thread(target=s.serve_forever, daemon=True).start()
    queue = unique("pool-sid")
    try:
        async with in_process(temporal_env.client, queue, {k: {"url": s.url} for k, s in servers.items()}):
            handles = {
                k: await start_mcp_task(
                    temporal_env.client,
                    McpTaskRequest(server=k, tool="charge", arguments={}, timeouts=Timeouts(poll_floor_s=0.2)),
                    workflow_id=unique(f"pool-{k}"),
                    task_queue=queue,
                )
                for k in servers
            }
            outs = {k: await asyncio.wait_for(outcome_of(h), 60) for k, h in handles.items()}
    finally:
        for s in servers.values():
            s.shutdown()
            s.server_close()
    for name, srv in servers.items():
        out = outs[name]
        assert out.outcome == Outcome.COMPLETED, (name, out.outcome, out.reason)
        assert f"from {name}" in str(out.result), (name, out.result)
        assert srv.calls == 1, (name, srv.calls)
        assert srv.asked.count("tasks/get") >= 2, (name, srv.asked)
