"""Job tools and long synchronous tools, on servers written with others' SDKs.

The job tools (``start_export`` / ``get_export_status`` / ``download_export`` / ``cancel_export``) and the
synchronous ``slow_progress`` are fixture tools of ours on the TypeScript SDK peer (2025-11-25 era) and on
fastmcp (2026-07-28 era); neither runs them as MCP tasks. A job runs through the same ``McpTaskWorkflow`` as a
task: the assertions are on its outcome, on what the *server* counted, and on the history it left.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from mcp_temporal_tasks.activities.activity_io import JobBinding, ServerConfig, ToolPolicy
from mcp_temporal_tasks.workflows.client import outcome_of, start_mcp_task
from mcp_temporal_tasks.workflows.records import McpTaskOutcome, McpTaskRequest, Outcome, Phase, Timeouts
from tests.faults import FaultProxy, ResetAfterSend, Rewrite
from tests.peers.harness import Peer
from tests.temporal_harness import (
    address_of,
    cli,
    heartbeat_says,
    in_process_worker,
    keep_history,
    settled_calls,
    tool_calls,
    unique,
    until,
    wait_for_view,
    worker_process,
    write_config,
)

EXPORT: dict[str, Any] = {
    "submit": "start_export",
    "job_id": "/jobId",
    "status": "get_export_status",
    "state": "/state",
    "states": {"running": "working", "succeeded": "completed", "failed": "failed", "cancelled": "cancelled"},
    "message": "/message",
    "error": "/error",
    "result": "download_export",
    "cancel": "cancel_export",
    "poll_interval_s": 0.2,
}
FAST = Timeouts(heartbeat_s=2.0, poll_floor_s=0.05, owner_pickup_s=4, submit_s=30)


@pytest.fixture(params=["ts_http_stateful", "fastmcp_server"])
def job_peer(request: pytest.FixtureRequest) -> Peer:
    peer: Peer = request.getfixturevalue(request.param)
    return peer


def servers(peer: Peer, url: str | None = None, **jobs: dict[str, Any]) -> dict[str, ServerConfig]:
    bindings = {name: JobBinding.model_validate(b) for name, b in (jobs or {"export": EXPORT}).items()}
    return {"exports": ServerConfig(url=url or peer.url, jobs=bindings)}


async def run_job(
    client: Client,
    servers_cfg: dict[str, ServerConfig],
    arguments: dict[str, Any],
    job: str = "export",
    record: str | None = None,
    **request: Any,
) -> McpTaskOutcome:
    queue = unique("jobs")
    async with in_process_worker(client, task_queue=queue, servers=servers_cfg):
        handle = await start_mcp_task(
            client,
            McpTaskRequest(server="exports", tool=job, arguments=arguments, timeouts=FAST, **request),
            workflow_id=unique("job"),
            task_queue=queue,
        )
        out = await asyncio.wait_for(outcome_of(handle), 60)
    # A job's history joins the committed ones (tests/test_replay.py) when recording is asked for.
    if record:
        await keep_history(handle, record)
    return out


async def test_a_job_completes_with_its_result_tools_reply(job_peer: Peer, client: Client) -> None:
    mark = job_peer.log_mark()
    out = await run_job(
        client, servers(job_peer), {"seconds": 1, "rows": 4}, record=f"job_completed_{job_peer.flavour}"
    )
    assert out.outcome == Outcome.COMPLETED, (out.outcome, out.reason, out.error)
    assert out.task_id is not None and out.task_id.startswith("exp-")
    assert out.task_status == "completed"
    assert out.result is not None and [r["n"] for r in out.result["structuredContent"]["rows"]] == [1, 2, 3, 4]
    assert out.ledger.tool == "export" and out.ledger.task_ids == [out.task_id]
    assert [a.reason for a in out.operation_attempts] == ["initial"]
    assert len(tool_calls(job_peer, mark, "start_export")) == 1
    assert len(tool_calls(job_peer, mark, "get_export_status")) >= 2
    assert len(tool_calls(job_peer, mark, "download_export")) == 1


async def test_a_job_done_before_its_id_came_back_completes_on_the_first_status_read(
    job_peer: Peer, client: Client
) -> None:
    mark = job_peer.log_mark()
    out = await run_job(client, servers(job_peer), {"seconds": 0, "rows": 1})
    assert out.outcome == Outcome.COMPLETED, (out.outcome, out.reason)
    assert out.result is not None and out.result["structuredContent"]["rows"] == [{"n": 1}]
    assert len(tool_calls(job_peer, mark, "get_export_status")) == 1


async def test_without_a_result_tool_the_last_status_reply_is_the_result(job_peer: Peer, client: Client) -> None:
    binding = {k: v for k, v in EXPORT.items() if k != "result"}
    mark = job_peer.log_mark()
    out = await run_job(client, servers(job_peer, export=binding), {"seconds": 0.5})
    assert out.outcome == Outcome.COMPLETED, (out.outcome, out.reason)
    assert out.result is not None and out.result["structuredContent"]["state"] == "succeeded"
    assert len(tool_calls(job_peer, mark, "download_export")) == 0


async def test_a_failed_job_keeps_the_servers_error_text(job_peer: Peer, client: Client) -> None:
    mark = job_peer.log_mark()
    out = await run_job(
        client, servers(job_peer), {"seconds": 0.5, "fail": True}, record=f"job_failed_{job_peer.flavour}"
    )
    assert out.outcome == Outcome.FAILED, (out.outcome, out.reason)
    assert out.error is not None and "disk quota exceeded on volume exports-1" in out.error.message
    assert out.status_message is not None and "disk quota exceeded" in out.status_message
    assert len(tool_calls(job_peer, mark, "start_export")) == 1, "a failed job is not submitted again"


async def test_a_job_is_cancelled_through_its_cancel_tool(job_peer: Peer, client: Client) -> None:
    mark = job_peer.log_mark()
    queue = unique("jobs")
    async with in_process_worker(client, task_queue=queue, servers=servers(job_peer)):
        handle = await start_mcp_task(
            client,
            McpTaskRequest(server="exports", tool="export", arguments={"seconds": 120}, timeouts=FAST),
            workflow_id=unique("job"),
            task_queue=queue,
        )
        view = await wait_for_view(handle, lambda v: v.phase == Phase.WORKING and v.task_id)
        await handle.cancel()
        out = await asyncio.wait_for(outcome_of(handle), 60)
    assert out.outcome == Outcome.CANCELLED, (out.outcome, out.reason)
    assert out.task_id == view.task_id and out.task_status == "cancelled"
    assert len(tool_calls(job_peer, mark, "cancel_export")) == 1
    assert len(tool_calls(job_peer, mark, "start_export")) == 1


async def test_a_status_reply_that_does_not_match_the_binding_is_decode_failed(job_peer: Peer, client: Client) -> None:
    mark = job_peer.log_mark()
    out = await run_job(client, servers(job_peer), {"seconds": 30, "garble": True})
    assert out.outcome == Outcome.DECODE_FAILED, (out.outcome, out.reason)
    assert out.reason is not None and "without a state at /state" in out.reason
    raw = json.dumps(out.raw_payload)
    assert '"phase"' in raw and "??" in raw, f"the status reply was not kept: {raw[:300]}"
    assert len(tool_calls(job_peer, mark, "start_export")) == 1, "decode_failed is never replayed"
    # A state the binding does not map is the same: nothing guesses what "running" means without it.
    unmapped = {**EXPORT, "states": {"succeeded": "completed", "failed": "failed"}}
    out = await run_job(client, servers(job_peer, export=unmapped), {"seconds": 30})
    assert out.outcome == Outcome.DECODE_FAILED and out.reason and "'running'" in out.reason, out.reason


async def test_a_submit_reply_without_a_job_id_is_decode_failed_and_never_resubmitted(
    job_peer: Peer, client: Client
) -> None:
    mark = job_peer.log_mark()
    binding = {**EXPORT, "job_id": "/id"}
    out = await run_job(client, servers(job_peer, export=binding), {"seconds": 1}, replay="always", idempotent=True)
    assert out.outcome == Outcome.DECODE_FAILED, (out.outcome, out.reason)
    assert out.reason is not None and "structuredContent/id" in out.reason
    assert len(tool_calls(job_peer, mark, "start_export")) == 1


async def test_a_job_id_can_be_taken_from_text_by_pattern(job_peer: Peer, client: Client) -> None:
    binding = {**EXPORT, "job_id_pattern": r"started export job (\S+)"}
    out = await run_job(client, servers(job_peer, export=binding), {"seconds": 0.5})
    assert out.outcome == Outcome.COMPLETED and out.task_id and out.task_id.startswith("exp-"), out.reason


async def test_submit_reply_lost_is_unknown_outcome_and_counted_once(job_peer: Peer, client: Client) -> None:
    mark = job_peer.log_mark()
    with FaultProxy(job_peer.url or "") as proxy:
        proxy.add("tools/call", ResetAfterSend(), times=1)  # the first tools/call is the submit
        out = await run_job(client, servers(job_peer, url=proxy.url), {"seconds": 1})
    assert out.outcome == Outcome.UNKNOWN_OUTCOME, (out.outcome, out.reason)
    assert (
        await settled_calls(
            job_peer, mark, "start_export", client=client, workflows=[out.workflow_id], workers_stopped=True
        )
        == 1
    )


TRANSIENT = {"code": -32603, "message": "temporarily unavailable, try again"}


def fail_first(matches: Any) -> Rewrite:
    """Answers the first reply that ``matches`` with a JSON-RPC error instead (the server did answer it)."""
    state = {"left": 1}

    def fn(message: dict[str, Any]) -> dict[str, Any]:
        if state["left"] and matches(message.get("result") or {}):
            state["left"] -= 1
            return {"jsonrpc": "2.0", "id": message.get("id"), "error": TRANSIENT}
        return message

    return Rewrite(fn)


@pytest.mark.parametrize("read", ["status", "result"])
async def test_a_json_rpc_error_from_a_read_tool_is_retried_never_resubmitted(
    job_peer: Peer, client: Client, read: str
) -> None:
    """A job's status and result tools are reads: a JSON-RPC error from one is asked again, even where the binding
    would allow a replay; the job completes with one submit."""
    mark = job_peer.log_mark()
    binding = {**EXPORT, "idempotent": True, "replay": "always", "max_replays": 1}
    is_status = (
        (lambda r: "state" in (r.get("structuredContent") or {}))
        if read == "status"
        else (lambda r: "rows" in (r.get("structuredContent") or {}))
    )
    with FaultProxy(job_peer.url or "") as proxy:
        proxy.add("tools/call", fail_first(is_status), times=10_000)
        out = await run_job(client, servers(job_peer, url=proxy.url, export=binding), {"seconds": 1, "rows": 2})
    assert out.outcome == Outcome.COMPLETED, (out.outcome, out.reason, out.error)
    assert out.result is not None and out.result["structuredContent"]["rows"] == [{"n": 1}, {"n": 2}]
    assert [a.reason for a in out.operation_attempts] == ["initial"]
    assert (
        await settled_calls(
            job_peer, mark, "start_export", client=client, workflows=[out.workflow_id], workers_stopped=True
        )
        == 1
    )
    assert len(tool_calls(job_peer, mark, "get_export_status" if read == "status" else "download_export")) >= 2


async def test_a_binding_that_allows_replay_resubmits_after_a_lost_reply(job_peer: Peer, client: Client) -> None:
    """The binding's own replay policy gates the submit, exactly like a tool's: here it may run twice."""
    mark = job_peer.log_mark()
    binding = {**EXPORT, "idempotent": True, "replay": "always", "max_replays": 1}
    with FaultProxy(job_peer.url or "") as proxy:
        proxy.add("tools/call", ResetAfterSend(), times=1)
        out = await run_job(client, servers(job_peer, url=proxy.url, export=binding), {"seconds": 0.5})
    assert out.outcome == Outcome.COMPLETED, (out.outcome, out.reason)
    assert [a.reason for a in out.operation_attempts] == ["initial", "replay_unknown_outcome"]
    assert len(tool_calls(job_peer, mark, "start_export")) == 2


async def test_worker_killed_while_polling_a_job(job_peer: Peer, temporal_env: Any, tmp_path: Path) -> None:
    """kill -9 while the job runs: the next worker goes on polling it; completed, one submit on the server."""
    address, queue = address_of(temporal_env), unique("job-kill")
    mark = job_peer.log_mark()
    cfg = write_config(tmp_path / "w.toml", {"exports": {"url": job_peer.url, "jobs": {"export": EXPORT}}})
    with worker_process(address, queue, cfg) as first:
        handle = await start_mcp_task(
            temporal_env.client,
            McpTaskRequest(server="exports", tool="export", arguments={"seconds": 6, "rows": 2}, timeouts=FAST),
            workflow_id=unique("jk"),
            task_queue=queue,
        )
        view = await wait_for_view(handle, lambda v: v.phase == Phase.WORKING and v.task_id)
        await until(lambda: tool_calls(job_peer, mark, "get_export_status"), 20, "a first status read of the job")
        first.kill()
    polls_before = len(tool_calls(job_peer, mark, "get_export_status"))
    with worker_process(address, queue, cfg):
        out = await asyncio.wait_for(outcome_of(handle), 90)
    assert out.outcome == Outcome.COMPLETED, (out.outcome, out.reason)
    assert out.task_id == view.task_id
    assert out.result is not None and len(out.result["structuredContent"]["rows"]) == 2
    assert len(tool_calls(job_peer, mark, "start_export")) == 1
    assert len(tool_calls(job_peer, mark, "get_export_status")) > polls_before, "the new worker never polled the job"
    events = [e async for e in handle.fetch_history_events()]
    # O(1) whatever the polls: 21 for an undisturbed job, a few more when the kill strands workflow tasks on the
    # dead worker's sticky queue; the activities are the submit and one wait.
    scheduled = [e for e in events if e.HasField("activity_task_scheduled_event_attributes")]
    assert len(scheduled) == 2 and len(events) <= 30, f"{len(events)} history events, {len(scheduled)} activities"


def test_a_binding_is_checked_when_the_configuration_is_loaded() -> None:
    from mcp_temporal_tasks.worker.config import ConfigError, server_config

    base = {"url": "https://mcp.example.com/mcp"}
    cfg = server_config("x", {**base, "jobs": {"export": EXPORT}})
    assert cfg.jobs["export"].states["succeeded"] == "completed"
    for bad, why in [
        ({"state": "state"}, "JSON pointer"),
        ({"states": {"done": "finished"}}, "states"),
        ({"states": {"running": "working"}}, "'completed'"),
        ({"job_id_pattern": "job \\S+"}, "group"),
        ({"submit": ""}, "submit"),
    ]:
        with pytest.raises(ConfigError, match=why):
            server_config("x", {**base, "jobs": {"export": {**EXPORT, **bad}}})


# --- long synchronous tools --------------------------------------------------------------------------

SYNC_S, BOUND_S = 60, 90
SLOW_REQUEST = McpTaskRequest(
    server="slow", tool="slow_progress", arguments={"seconds": SYNC_S, "every": 5}, timeouts=Timeouts(heartbeat_s=3.0)
)


def slow_config(tmp_path: Path, peer: Peer) -> Path:
    """A worker whose ``slow_progress`` may run up to ``BOUND_S`` (its own bound, not the global 300 s)."""
    return write_config(
        tmp_path / "w.toml", {"slow": {"url": peer.url, "tools": {"slow_progress": {"max_call_s": BOUND_S}}}}
    )


async def test_a_60s_synchronous_tool_completes_within_its_own_bound_with_live_progress(
    ts_http_stateful: Peer, temporal_env: Any, tmp_path: Path
) -> None:
    peer = ts_http_stateful
    address, queue = address_of(temporal_env), unique("sync")
    mark = peer.log_mark()
    cfg = slow_config(tmp_path, peer)
    seen: list[str] = []
    last = ""
    with worker_process(address, queue, cfg):
        handle = await start_mcp_task(temporal_env.client, SLOW_REQUEST, workflow_id=unique("sync"), task_queue=queue)
        result = asyncio.ensure_future(outcome_of(handle))
        while not result.done():
            rc, out, _ = await cli("status", handle.id, "--json", "--address", address, timeout=60)
            last = out
            if rc in (0, 1):  # 1: still running (`status` exits 0 only for a completed task)
                message = json.loads(out).get("status_message")
                if message and (not seen or seen[-1] != message):
                    seen.append(message)
            await asyncio.wait({result}, timeout=4)
        out_ = await result
    assert out_.outcome == Outcome.COMPLETED, (out_.outcome, out_.reason)
    assert out_.result is not None and f"done after {SYNC_S}s" in out_.result["content"][0]["text"]
    steps = [m for m in seen if m.startswith("step ")]
    assert len(steps) >= 3, f"progress seen by `mcp-tasks status`: {seen}; last: {last[:600]}"
    assert len(tool_calls(peer, mark, "slow_progress")) == 1


async def test_a_synchronous_tool_whose_worker_dies_is_unknown_outcome_not_called_again(
    ts_http_stateful: Peer, temporal_env: Any, tmp_path: Path
) -> None:
    peer = ts_http_stateful
    address, queue = address_of(temporal_env), unique("sync-kill")
    mark = peer.log_mark()
    cfg = slow_config(tmp_path, peer)
    with worker_process(address, queue, cfg) as first:
        handle = await start_mcp_task(temporal_env.client, SLOW_REQUEST, workflow_id=unique("sk"), task_queue=queue)
        await until(lambda: tool_calls(peer, mark, "slow_progress"), 10, "the slow_progress call")
        # The call runs at the server and its worker has told Temporal so: the next attempt knows it was sent.
        await heartbeat_says(handle, "tools/call sent")
        first.kill()
        killed = time.monotonic()
    with worker_process(address, queue, cfg):
        out = await asyncio.wait_for(outcome_of(handle), 60)
        elapsed = time.monotonic() - killed
    assert out.outcome == Outcome.UNKNOWN_OUTCOME, (out.outcome, out.reason)
    assert elapsed < SYNC_S - 10, f"{elapsed:.0f}s after the kill: the call's bound was waited out"
    assert (
        await settled_calls(
            peer, mark, "slow_progress", client=temporal_env.client, workflows=[handle.id], workers_stopped=True
        )
        == 1
    ), "called again after the worker died"
    # The default policy never replays: the ledger shows one attempt, ended unknown_outcome.
    assert [a.ended for a in out.operation_attempts] == ["unknown_outcome"]


def test_a_tools_own_bound_is_configuration() -> None:
    assert ToolPolicy.model_validate({"max_call_s": 90}).max_call_s == 90
    with pytest.raises(ValueError):
        ToolPolicy.model_validate({"max_call_s": 0})


async def test_mcp_tasks_run_runs_a_job_like_a_task(ts_http_stateful: Peer, temporal_env: Any, tmp_path: Path) -> None:
    peer = ts_http_stateful
    mark = peer.log_mark()
    cfg = write_config(tmp_path / "w.toml", {"exports": {"url": peer.url, "jobs": {"export": EXPORT}}})
    rc, out, _ = await cli(
        "run",
        "export",
        "--server",
        "exports",
        "--config",
        str(cfg),
        "--args",
        '{"seconds": 1}',
        "--address",
        address_of(temporal_env),
        "--task-queue",
        unique("cli-job"),
        "--json",
    )
    assert rc == 0, out
    outcome = json.loads(out)
    assert outcome["outcome"] == "completed" and outcome["task_id"].startswith("exp-"), out[:500]
    assert outcome["ledger"]["tool"] == "export"
    assert len(tool_calls(peer, mark, "start_export")) == 1
