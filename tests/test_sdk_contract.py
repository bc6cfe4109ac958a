"""Contract with the official Python SDK (``mcp==2.3.0``): what ``activities/wire/sdk_compat.py`` takes from it
and what it works around. When an SDK upgrade changes any of it, these tests fail with what to do.
"""

from __future__ import annotations

import inspect
import os
from importlib.metadata import version

import mcp_types
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, get_default_environment, stdio_client
from mcp.shared import inbound
from pydantic import ValidationError

from mcp_temporal_tasks.activities.wire import LEGACY, WireSession, parse_task, sdk_compat
from mcp_temporal_tasks.protocol.tasks import TASKS_EXTENSION
from tests.peers.harness import Peer, poll_until_terminal

WORKAROUND_GONE = "SDK now parses CreateTaskResult: remove the workaround in sdk_compat"


def test_sdk_version_is_the_pinned_one() -> None:
    installed = sdk_compat.installed_sdk_version()
    assert installed == sdk_compat.SDK_VERSION == "2.3.0", (
        f"mcp=={installed} is installed but activities/wire/sdk_compat.py was written against "
        f"mcp=={sdk_compat.SDK_VERSION}. Re-check every workaround listed in sdk_compat's docstring, run "
        "tests/test_sdk_contract.py, then bump SDK_VERSION and the pin in pyproject.toml together."
    )
    assert version("mcp-types") == "2.3.0", "mcp-types (the SDK's types package) must move with mcp"


def test_meta_keys_we_send_in_the_envelope() -> None:
    assert mcp_types.PROTOCOL_VERSION_META_KEY == "io.modelcontextprotocol/protocolVersion"
    assert mcp_types.CLIENT_CAPABILITIES_META_KEY == "io.modelcontextprotocol/clientCapabilities"
    assert mcp_types.CLIENT_INFO_META_KEY == "io.modelcontextprotocol/clientInfo"
    meta = sdk_compat.extension_meta()
    assert meta == {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS_EXTENSION: {}}, "elicitation": {}},
        "io.modelcontextprotocol/clientInfo": sdk_compat.CLIENT_INFO,
    }


def test_routing_header_names_are_lowercase() -> None:
    # Lowercase matters: a mixed-case duplicate of mcp-protocol-version reaches TS servers twice (HTTP 400).
    assert inbound.MCP_PROTOCOL_VERSION_HEADER == "mcp-protocol-version"
    assert inbound.MCP_METHOD_HEADER == "mcp-method"
    assert inbound.MCP_NAME_HEADER == "mcp-name"
    assert sdk_compat.extension_headers("tasks/get", "abc-123") == {
        "mcp-protocol-version": "2026-07-28",
        "mcp-method": "tasks/get",
        "mcp-name": "abc-123",
    }
    assert sdk_compat.extension_headers("server/discover", None) == {
        "mcp-protocol-version": "2026-07-28",
        "mcp-method": "server/discover",
    }


def test_encode_header_value() -> None:
    # Task ids and tool names are plain ASCII: they must go out verbatim to match params.taskId/name.
    for value in (
        "abc",
        "rs4EoxCVpPf-LLThpuKYosxpPf1h2uCOrq5pc85tCNM",
        "2c60392051c3e20c953f2d56262c9fec",
        "slow_echo",
        "a.b:c/d",
    ):
        assert inbound.encode_header_value(value) == value
    assert inbound.encode_header_value("grüße").startswith("=?base64?")
    assert inbound.decode_header_value(inbound.encode_header_value("grüße")) == "grüße"


def test_known_protocol_versions() -> None:
    from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, KNOWN_PROTOCOL_VERSIONS

    assert "2025-11-25" in HANDSHAKE_PROTOCOL_VERSIONS
    assert "2026-07-28" in KNOWN_PROTOCOL_VERSIONS and "2026-07-28" not in HANDSHAKE_PROTOCOL_VERSIONS


def test_mcp_types_task_still_requires_ttl() -> None:
    """Why task objects are parsed leniently (parse_task), never through mcp_types.Task."""
    observed = {
        "taskId": "t",
        "status": "working",
        "createdAt": "2025-11-25T00:00:00Z",
        "lastUpdatedAt": "2025-11-25T00:00:00Z",
    }  # ttl omitted, as real runtimes do
    with pytest.raises(ValidationError, match="ttl"):
        mcp_types.Task.model_validate(observed)
    assert mcp_types.Task.model_validate({**observed, "ttl": None}).ttl is None
    assert parse_task(observed, LEGACY).ttl_ms is None


def test_tool_execution_task_support_is_parsed() -> None:
    tool = sdk_compat.tool_info(
        {
            "name": "t",
            "inputSchema": {"type": "object"},
            "execution": {"taskSupport": "required"},
            "annotations": {"readOnlyHint": True, "idempotentHint": False},
            "outputSchema": {"type": "object"},
        }
    )
    assert (tool.task_support, tool.read_only_hint, tool.idempotent_hint) == ("required", True, False)
    assert tool.output_schema == {"type": "object"}
    assert sdk_compat.tool_info({"name": "u", "inputSchema": {"type": "object"}}).task_support is None


def test_call_tool_result_requires_content() -> None:
    """decode_result relies on it: a ``{_meta}``-only payload is not a CallToolResult."""
    with pytest.raises(ValidationError):
        sdk_compat.validate_call_tool_result({"_meta": {}})
    assert sdk_compat.validate_call_tool_result({"content": []}).is_error in (None, False)


def test_default_stdio_environment_has_no_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCP_TEST_FAKE_SECRET", "hunter2")
    env = sdk_compat.default_stdio_environment()
    assert env == get_default_environment()
    assert "MCP_TEST_FAKE_SECRET" not in env
    assert "PATH" in env
    params = inspect.signature(StdioServerParameters).parameters
    assert {"command", "args", "env", "cwd"} <= set(params)
    assert "errlog" in inspect.signature(stdio_client).parameters


# --- the key workaround: legacy task-augmented tools/call -------------------------------------------


async def test_call_tool_result_rejects_a_real_create_task_result(ts_stdio: Peer) -> None:
    client = await WireSession.connect(ts_stdio.endpoint, era=LEGACY)
    try:
        reply = await client.transport.request(
            "tools/call", {"name": "slow_echo", "arguments": {"seconds": 0.05}, "task": {"ttl": 60000}}
        )
        assert isinstance(reply.get("task"), dict) and reply["task"]["ttl"] == 60000  # a genuine CreateTaskResult
        assert mcp_types.CreateTaskResult.model_validate(reply).task.task_id == reply["task"]["taskId"]
        try:
            mcp_types.CallToolResult.model_validate(reply)
        except ValidationError:
            pass
        else:
            pytest.fail(WORKAROUND_GONE)
        await poll_until_terminal(client, reply["task"]["taskId"])
    finally:
        await client.aclose()


async def test_client_session_cannot_make_a_task_augmented_call(ts_stdio: Peer) -> None:
    """Drive the SDK's own ClientSession against the TS peer: the call reaches the server (a task is created
    there) and then the SDK fails to parse the reply, so the caller loses the task id. That is why
    activities/wire sends tools/call itself."""
    env = {"PEER_LOG": os.environ[ts_stdio.endpoint.env_refs["PEER_LOG"]]}
    command = ts_stdio.endpoint.command
    params = StdioServerParameters(command=command[0], args=command[1:], env=env)
    request = mcp_types.CallToolRequest(
        params=mcp_types.CallToolRequestParams(
            name="slow_echo", arguments={"seconds": 0.05}, task=mcp_types.TaskMetadata(ttl=60000)
        )
    )
    mark = ts_stdio.log_mark()
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            assert init.protocol_version == "2025-11-25"
            assert init.capabilities.tasks is not None
            for result_type in (mcp_types.CallToolResult, mcp_types.CreateTaskResult):
                try:
                    await session.send_request(request, result_type)
                except ValidationError:
                    continue
                pytest.fail(f"{WORKAROUND_GONE} (ClientSession.send_request(..., {result_type.__name__}) succeeded)")
            # Both calls did reach the server with params.task: each created a task the SDK could not report.
            calls = [line for line in ts_stdio.log_since(mark) if line["method"] == "tools/call"]
            assert [(c["tool"], c["task"]) for c in calls] == [("slow_echo", True)] * 2


def test_tracing_interceptor_hooks_we_override() -> None:
    """worker/plugin.py's TaskTracing: the workflow-side span hook, its params and the always-create switch of the
    pinned temporalio. When this fails after an upgrade, re-check which workflow spans an untraced start gets."""
    import dataclasses
    import inspect

    from temporalio.contrib.opentelemetry import TracingInterceptor, _interceptor

    assert "always_create_workflow_spans" in inspect.signature(TracingInterceptor.__init__).parameters
    assert callable(getattr(TracingInterceptor, "_completed_workflow_span", None))
    fields = {f.name for f in dataclasses.fields(_interceptor._CompletedWorkflowSpanParams)}
    assert {"name", "parent_missing"} <= fields, fields
