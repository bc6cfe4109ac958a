"""The "job tool" fixtures of the peers, through the official Python SDK client (``mcp`` ``ClientSession``).

Both the TS SDK peer (``tests/peers/ts/server.mjs``) and the fastmcp demo server (``demo/server.py``) serve
the same plain (non-task) tools with the same arguments and reply shapes: ``start_export`` / ``get_export_status``
/ ``download_export`` / ``cancel_export`` (a job API a client has to poll) and ``slow_progress`` (a long synchronous
call that reports ``notifications/progress``). Every test runs against both peers.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import mcp_types
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from tests.peers.harness import Peer

JOB_TOOLS = ("start_export", "get_export_status", "download_export", "cancel_export", "slow_progress")
JOB_ID = re.compile(r"^exp-\d+-[0-9a-f]{6}$")
FAILURE = "export failed: disk quota exceeded on volume exports-1"
UNKNOWN = "exp-0-zzzzzz"


@pytest.fixture(scope="module", params=["ts_http_stateful", "fastmcp_server"])
def peer(request: pytest.FixtureRequest) -> Peer:
    """The TS SDK peer (stateful HTTP) and the fastmcp demo server."""
    return request.getfixturevalue(request.param)


@asynccontextmanager
async def _session(peer: Peer) -> AsyncIterator[ClientSession]:
    assert peer.url is not None
    async with streamable_http_client(peer.url) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


def _text(result: mcp_types.CallToolResult) -> str:
    assert len(result.content) == 1 and isinstance(result.content[0], mcp_types.TextContent), result
    return result.content[0].text


async def _call(session: ClientSession, name: str, **arguments: Any) -> mcp_types.CallToolResult:
    return await session.call_tool(name, arguments)


async def _ok(session: ClientSession, name: str, **arguments: Any) -> dict[str, Any]:
    """A successful call's structuredContent."""
    result = await _call(session, name, **arguments)
    assert not result.is_error, f"{name}: {_text(result)}"
    assert isinstance(result.structured_content, dict), result
    return result.structured_content


async def _status(session: ClientSession, job_id: str) -> dict[str, Any]:
    result = await _call(session, "get_export_status", jobId=job_id)
    assert not result.is_error, _text(result)
    status = result.structured_content
    assert isinstance(status, dict)
    assert json.loads(_text(result)) == status  # the same JSON as text
    assert set(status) == {"jobId", "state", "progress", "message", "error"}, status
    assert status["jobId"] == job_id
    assert isinstance(status["progress"], int | float) and 0 <= status["progress"] <= 1
    return status


async def _start(session: ClientSession, **arguments: Any) -> str:
    result = await _call(session, "start_export", **arguments)
    assert not result.is_error, _text(result)
    assert isinstance(result.structured_content, dict) and set(result.structured_content) == {"jobId"}
    job_id = result.structured_content["jobId"]
    assert JOB_ID.match(job_id), job_id
    assert _text(result) == f"started export job {job_id}"
    return job_id


async def _until_done(session: ClientSession, job_id: str, timeout_s: float = 15.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        status = await _status(session, job_id)
        if status["state"] != "running":
            return status
        if time.monotonic() > deadline:
            pytest.fail(f"job {job_id} still running after {timeout_s}s: {status}")
        await asyncio.sleep(0.1)


async def _error_text(session: ClientSession, name: str, **arguments: Any) -> str:
    result = await _call(session, name, **arguments)
    assert result.is_error, f"{name} should have failed: {result}"
    return _text(result)


async def test_job_tools_are_plain_tools(peer: Peer) -> None:
    async with _session(peer) as session:
        tools = {tool.name: tool for tool in (await session.list_tools()).tools}
    for name in JOB_TOOLS:
        assert name in tools, f"{peer.name} lacks {name}"
        tool = tools[name]
        assert tool.description, f"{name} has no description"
        support = tool.execution.task_support if tool.execution is not None else None
        assert support in (None, "forbidden"), f"{name}: taskSupport {support!r}"
    props = {name: set(tools[name].input_schema.get("properties") or {}) for name in JOB_TOOLS}
    assert props == {
        "start_export": {"seconds", "fail", "garble", "rows"},
        "get_export_status": {"jobId"},
        "download_export": {"jobId"},
        "cancel_export": {"jobId"},
        "slow_progress": {"seconds", "every"},
    }


async def test_export_runs_then_succeeds_and_downloads(peer: Peer) -> None:
    async with _session(peer) as session:
        job_id = await _start(session, seconds=1, rows=3)
        running = await _status(session, job_id)
        assert running["state"] == "running"
        assert running["progress"] < 1
        assert re.fullmatch(r"exported [0-3]/3 rows", running["message"]), running
        assert running["error"] is None
        assert await _error_text(session, "download_export", jobId=job_id) == f"job {job_id} is running"

        done = await _until_done(session, job_id)
        assert done == {
            "jobId": job_id,
            "state": "succeeded",
            "progress": 1,
            "message": "exported 3/3 rows",
            "error": None,
        }
        download = await _call(session, "download_export", jobId=job_id)
        assert not download.is_error
        assert download.structured_content == {"jobId": job_id, "rows": [{"n": 1}, {"n": 2}, {"n": 3}]}
        assert json.loads(_text(download)) == download.structured_content

        # A second job gets a fresh id; the rows follow the argument.
        other = await _start(session, seconds=0, rows=5)
        assert other != job_id
        assert (await _until_done(session, other))["message"] == "exported 5/5 rows"
        assert (await _ok(session, "download_export", jobId=other))["rows"] == [{"n": n} for n in range(1, 6)]


async def test_export_fails_with_the_error_text(peer: Peer) -> None:
    async with _session(peer) as session:
        job_id = await _start(session, seconds=0.3, fail=True)
        done = await _until_done(session, job_id)
        assert done["state"] == "failed"
        assert done["message"] == FAILURE
        assert done["error"] == FAILURE
        assert await _error_text(session, "download_export", jobId=job_id) == f"job {job_id} is failed"


async def test_cancel_marks_a_running_job_cancelled(peer: Peer) -> None:
    async with _session(peer) as session:
        job_id = await _start(session, seconds=60)
        assert await _ok(session, "cancel_export", jobId=job_id) == {"jobId": job_id, "state": "cancelled"}
        status = await _status(session, job_id)
        assert status["state"] == "cancelled" and status["error"] is None
        assert status["progress"] < 1
        assert await _error_text(session, "download_export", jobId=job_id) == f"job {job_id} is cancelled"
        # Cancelling again, or cancelling a finished job, changes nothing.
        assert await _ok(session, "cancel_export", jobId=job_id) == {"jobId": job_id, "state": "cancelled"}
        finished = await _start(session, seconds=0)
        assert (await _until_done(session, finished))["state"] == "succeeded"
        assert await _ok(session, "cancel_export", jobId=finished) == {"jobId": finished, "state": "succeeded"}
        assert (await _status(session, finished))["state"] == "succeeded"


async def test_garbled_status_has_no_state(peer: Peer) -> None:
    async with _session(peer) as session:
        job_id = await _start(session, seconds=0.2, garble=True)
        result = await _call(session, "get_export_status", jobId=job_id)
        assert not result.is_error
        assert result.structured_content == {"jobId": job_id, "phase": "??"}
        assert "state" not in result.structured_content
        assert _text(result) == "garbled"


async def test_unknown_job_is_a_tool_error(peer: Peer) -> None:
    async with _session(peer) as session:
        for name in ("get_export_status", "download_export", "cancel_export"):
            assert await _error_text(session, name, jobId=UNKNOWN) == f"no such job: {UNKNOWN}"


async def test_slow_progress_reports_steps(peer: Peer) -> None:
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    async with _session(peer) as session:
        started = time.monotonic()
        result = await session.call_tool("slow_progress", {"seconds": 3, "every": 1}, progress_callback=on_progress)
        elapsed = time.monotonic() - started
    assert not result.is_error
    assert _text(result) == "slow_progress done after 3s"
    assert result.structured_content is None
    assert elapsed >= 2.9, elapsed
    assert len(seen) >= 2, seen
    for progress, total, message in seen:
        assert total == 3
        assert message == f"step {int(progress)}/3"
    assert [int(p) for p, _, _ in seen] == list(range(1, len(seen) + 1))


async def test_tools_call_is_counted_per_tool(peer: Peer) -> None:
    mark = peer.log_mark()
    async with _session(peer) as session:
        job_id = await _start(session, seconds=0)
        await _status(session, job_id)
        await _status(session, job_id)
        await _ok(session, "cancel_export", jobId=job_id)
    calls = [line["tool"] for line in peer.log_since(mark) if line.get("method") == "tools/call"]
    counts = {name: calls.count(name) for name in JOB_TOOLS}
    assert counts == {
        "start_export": 1,
        "get_export_status": 2,
        "download_export": 0,
        "cancel_export": 1,
        "slow_progress": 0,
    }, calls
