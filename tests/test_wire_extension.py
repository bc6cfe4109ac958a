"""The wire layer against the fastmcp 4.1.4 tasks-extension server (2026-07-28, ``demo/server.py``).

On this era the payload is inline in ``tasks/get`` (``result()`` sends nothing), ``tasks/cancel`` is an empty
ack, a tool's ``isError`` ends ``completed``, and every request carries the ``_meta`` envelope and, on
``tasks/*``, ``Mcp-Name: <taskId>``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from mcp_temporal_tasks.activities.wire import (
    EXTENSION,
    LEGACY,
    CapabilityUnavailable,
    HeaderMismatch,
    MethodNotFound,
    ResultDecodeError,
    TaskNotFound,
    TaskPayload,
    UnsupportedProtocolVersion,
    WireSession,
    decode_result,
    sdk_compat,
)
from mcp_temporal_tasks.activities.wire.http_transport import HttpTransport
from mcp_temporal_tasks.protocol.tasks import TASKS_EXTENSION
from tests.peers.harness import Peer, poll_until_terminal, read_peer_log

RATE_LIMIT_TEXT = "HTTP 429 Too Many Requests: rate limit exceeded; retry-after=30"


@pytest.fixture(scope="module")
async def ext_client(fastmcp_server: Peer) -> AsyncIterator[WireSession]:
    client = await WireSession.connect(fastmcp_server.endpoint)
    yield client
    await client.aclose()


# --- era detection ---------------------------------------------------------------------------------


@pytest.mark.parametrize("pin", [None, EXTENSION])
async def test_era_detected_as_extension(fastmcp_server: Peer, pin: str | None) -> None:
    mark = fastmcp_server.log_mark()
    client = await WireSession.connect(fastmcp_server.endpoint, era=pin)
    try:
        assert client.era == EXTENSION == "2026-07-28"
        assert client.tasks_offered is True
        assert TASKS_EXTENSION in client.capabilities["extensions"]
        assert client.transport.session_id is None  # the extension era is stateless
        # Pinned or not, the same: server/discover alone (the 2026-07-28 probe comes first on every transport, and
        # fastmcp answers it with the tasks extension; no initialize session is ever opened).
        assert [line["method"] for line in fastmcp_server.log_since(mark)] == ["server/discover"]
    finally:
        await client.aclose()


async def test_pinned_legacy_on_fastmcp_has_no_tasks(fastmcp_server: Peer) -> None:
    """fastmcp answers a 2025-11-25 initialize but offers no legacy tasks (no capabilities.tasks), although
    its tools/list still shows execution.taskSupport. So a legacy client runs tools synchronously."""
    mark = fastmcp_server.log_mark()
    client = await WireSession.connect(fastmcp_server.endpoint, era=LEGACY)
    try:
        assert client.era == LEGACY
        assert client.tasks_offered is False
        assert "tasks" not in client.capabilities
        assert client.transport.session_id  # a stateful legacy session
        assert "server/discover" not in [line["method"] for line in fastmcp_server.log_since(mark)]

        tools = await client.list_tools()
        assert tools["slow_echo"].task_support == "optional"
        started = await client.start("slow_echo", {"seconds": 0.05, "text": "plain"})
        assert started.task is None and started.task_requested is False
        assert started.result["structuredContent"] == {"echo": "plain"}
        assert decode_result(started.result, tools["slow_echo"].output_schema)["structuredContent"] == {"echo": "plain"}

        # A task-required tool cannot run on a server that offers no tasks: refused before sending.
        assert tools["cancellable"].task_support == "required"
        before = fastmcp_server.log_mark()
        with pytest.raises(CapabilityUnavailable, match="requires task execution"):
            await client.start("cancellable", {"seconds": 1})
        assert fastmcp_server.log_since(before) == []
    finally:
        await client.aclose()


# --- outcomes ----------------------------------------------------------------------------------------


async def test_completed_slow_echo_inline_payload(fastmcp_server: Peer, ext_client: WireSession) -> None:
    started = await ext_client.start("slow_echo", {"seconds": 0.2, "text": "ext"})
    task = started.task
    assert task is not None and started.result is None
    assert task.era == EXTENSION and task.status == "working"
    assert task.ttl_ms == 900_000  # the server-wide default: the extension takes no client TTL
    assert task.poll_interval_ms == 100

    state = await poll_until_terminal(ext_client, task.task_id)
    assert state.status == "completed"
    assert state.result is not None  # inline in tasks/get

    mark = fastmcp_server.log_mark()
    payload = await ext_client.result(state)
    assert fastmcp_server.log_since(mark) == [], "result() must not send anything on the extension"
    assert payload.result["structuredContent"] == {"echo": "ext"}

    schema = (await ext_client.list_tools())["slow_echo"].output_schema
    assert decode_result(payload.result, schema)["structuredContent"] == {"echo": "ext"}
    with pytest.raises(ResultDecodeError) as info:
        decode_result(payload.result, {"type": "object", "required": ["echo", "missing"]})
    assert info.value.raw == payload.result


async def test_tool_error_is_completed_with_is_error(ext_client: WireSession) -> None:
    started = await ext_client.start("rate_limited", {})
    state = await poll_until_terminal(ext_client, started.task.task_id)
    assert state.status == "completed"  # the extension: isError is a completed task
    payload = await ext_client.result(state)
    assert payload.error is None
    assert payload.result["isError"] is True
    assert payload.result["content"][0]["text"] == RATE_LIMIT_TEXT


async def test_jsonrpc_error_is_failed_with_inline_error(fastmcp_server: Peer, ext_client: WireSession) -> None:
    started = await ext_client.start("rpc_error", {})
    state = await poll_until_terminal(ext_client, started.task.task_id)
    assert state.status == "failed"
    assert state.error is not None and state.error.code == -32602
    mark = fastmcp_server.log_mark()
    payload = await ext_client.result(state)
    assert fastmcp_server.log_since(mark) == []
    assert payload.result is None
    assert (payload.error.code, payload.error.message) == (-32602, "invalid account id: acct-0")


async def test_quick_sync_completes_inline(fastmcp_server: Peer, ext_client: WireSession) -> None:
    # The session lists the tools once, before its first call (SEP-2243's mirrored parameters): whether this test is
    # the first of the module on its xdist worker must not change what it sees.
    await ext_client.list_tools()
    mark = fastmcp_server.log_mark()
    started = await ext_client.start("quick_sync", {"text": "now"})
    assert started.task is None
    assert started.result["content"] == [{"type": "text", "text": "now"}]
    assert started.result["resultType"] == "complete"
    assert [line["method"] for line in fastmcp_server.log_since(mark)] == ["tools/call"]


# --- cancel ------------------------------------------------------------------------------------------


async def test_cancel_working_task(ext_client: WireSession) -> None:
    started = await ext_client.start("cancellable", {"seconds": 60})
    assert started.task.status == "working"
    assert await ext_client.cancel(started.task.task_id) is None  # the extension's empty ack
    state = await poll_until_terminal(ext_client, started.task.task_id, timeout_s=10)
    assert state.status == "cancelled"
    assert await ext_client.cancel(started.task.task_id) is None  # already terminal: still an ack
    assert (await ext_client.get(started.task.task_id)).status == "cancelled"
    assert await ext_client.result(state) == TaskPayload(empty=True)


async def test_cancel_completed_task_is_acked_and_outcome_kept(ext_client: WireSession) -> None:
    started = await ext_client.start("slow_echo", {"seconds": 0.05, "text": "kept"})
    state = await poll_until_terminal(ext_client, started.task.task_id)
    assert state.status == "completed"
    assert await ext_client.cancel(state.task_id) is None
    after = await ext_client.get(state.task_id)
    assert after.status == "completed"  # terminal never changes
    assert (await ext_client.result(after)).result["structuredContent"] == {"echo": "kept"}


async def test_unknown_task_is_task_not_found(ext_client: WireSession) -> None:
    for call in (ext_client.get, ext_client.cancel):
        with pytest.raises(TaskNotFound) as info:
            await call("no-such-task-ext")
        assert info.value.code == -32602


# --- expiry ------------------------------------------------------------------------------------------


async def test_expiry_with_short_ttl(fastmcp_short_ttl: Peer) -> None:
    client = await WireSession.connect(fastmcp_short_ttl.endpoint)
    try:
        started = await client.start("slow_echo", {"seconds": 0.1})
        assert started.task.ttl_ms == 1000
        state = await poll_until_terminal(client, started.task.task_id)
        assert state.status == "completed"
        t0 = time.monotonic()  # the extension's TTL clock starts when the task stops running
        while time.monotonic() - t0 < 3.0:
            try:
                await client.get(started.task.task_id)
            except TaskNotFound:
                break
            await asyncio.sleep(0.1)
        else:
            pytest.fail("task still there 3 s after it completed with ttlMs 1000")
    finally:
        await client.aclose()


# --- the envelope ------------------------------------------------------------------------------------


async def test_envelope_on_every_request(fastmcp_server: Peer) -> None:
    """After discovery, every request names its target in Mcp-Name: the task id on tasks/*, the tool on
    tools/call. (fastmcp answers -32020 on a mismatch, so a wrong one would also fail the calls.)"""
    mark = fastmcp_server.log_mark()
    client = await WireSession.connect(fastmcp_server.endpoint)
    try:
        await client.list_tools()
        started = await client.start("cancellable", {"seconds": 60})
        await client.get(started.task.task_id)
        await client.cancel(started.task.task_id)
        await poll_until_terminal(client, started.task.task_id)
    finally:
        await client.aclose()
    lines = fastmcp_server.log_since(mark)
    # The initialize handshake that chose the era (initialize, notifications/initialized, tools/list), then the
    # extension.
    lines = lines[[line["method"] for line in lines].index("server/discover") :]
    assert lines[0]["method"] == "server/discover"
    assert {line["method"] for line in lines} >= {"tools/list", "tools/call", "tasks/get", "tasks/cancel"}
    for line in lines[1:]:
        if line["method"].startswith("tasks/"):
            assert line["mcpName"] == line["taskId"] == started.task.task_id, line
        elif line["method"] == "tools/call":
            assert line["mcpName"] == line["tool"] == "cancellable", line


async def test_every_tasks_request_in_all_fastmcp_logs_carries_mcp_name(
    peer_logs: Path, fastmcp_server: Peer, ext_client: WireSession
) -> None:
    started = await ext_client.start("slow_echo", {"seconds": 0.05})
    await poll_until_terminal(ext_client, started.task.task_id)
    checked = 0
    for log in sorted(peer_logs.glob("fastmcp*.jsonl")):
        for line in read_peer_log(log):
            if str(line["method"]).startswith("tasks/"):
                checked += 1
                assert line["mcpName"] == line["taskId"], (log.name, line)
    assert checked >= 2


async def test_real_server_refusals_are_typed(fastmcp_server: Peer) -> None:
    """What the real extension server answers when the envelope is wrong, through our error mapping."""
    transport = HttpTransport(fastmcp_server.url, protocol_version=EXTENSION)
    meta = {"_meta": sdk_compat.extension_meta()}
    try:
        with pytest.raises(HeaderMismatch) as info:  # Mcp-Name disagrees with params.taskId
            await transport.request(
                "tasks/get", {"taskId": "a", **meta}, headers=sdk_compat.extension_headers("tasks/get", "b")
            )
        assert info.value.code == -32020
        with pytest.raises(MethodNotFound):  # the extension has no tasks/result
            await transport.request(
                "tasks/result", {"taskId": "a", **meta}, headers=sdk_compat.extension_headers("tasks/result", "a")
            )
        bad = {"_meta": {**sdk_compat.extension_meta(), "io.modelcontextprotocol/protocolVersion": "2099-01-01"}}
        with pytest.raises(UnsupportedProtocolVersion) as unsupported:
            await transport.request(
                "tasks/get",
                {"taskId": "a", **bad},
                headers={**sdk_compat.extension_headers("tasks/get", "a"), "mcp-protocol-version": "2099-01-01"},
            )
        assert EXTENSION in unsupported.value.data["supported"]
    finally:
        await transport.aclose()
