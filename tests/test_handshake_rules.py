"""The handshake's rules (``activities/wire/handshake.py``, issue 54) against a scripted transport, without a server:
what each answer to the ``server/discover`` probe leads to, per the 2026-07-28 revision's backward-compatibility
rules; and SEP-2243's header mirroring and invalid-tool gate on a session. Real servers: tests/test_handshake_order.py,
the conformance suite's 2026-07-28 scenarios (tests/test_conformance.py)."""

from __future__ import annotations

from typing import Any

import pytest

from mcp_temporal_tasks.activities.wire import handshake, sdk_compat
from mcp_temporal_tasks.activities.wire.session import WireSession
from mcp_temporal_tasks.protocol.tasks import EXTENSION, LEGACY, Endpoint
from mcp_temporal_tasks.protocol.wire_errors import (
    CapabilityUnavailable,
    MissingCapability,
    TransportError,
    UnknownProtocolVersion,
    error_from_rpc,
)

pytestmark = pytest.mark.fast

DISCOVERED = {"supportedVersions": [EXTENSION], "capabilities": {"tools": {}}}
INITIALIZED = {"protocolVersion": LEGACY, "capabilities": {"tasks": {"requests": {"tools": {"call": {}}}}}}


def refusal(code: int, method: str = "server/discover", **data: Any) -> Exception:
    return error_from_rpc({"code": code, "message": "no", "data": data or None}, method=method)


class Scripted:
    """A transport (stdio-like: not HTTP) answering each method from a list, in order; every request is logged."""

    def __init__(self, **answers: list[Any]) -> None:
        self.answers = answers
        self.asked: list[str] = []
        self.sent: list[tuple[str, dict[str, Any] | None]] = []
        self.alive = True
        self.closed = False
        self.session_id: str | None = None

    async def request(self, method: str, params: dict[str, Any] | None, **_: Any) -> dict[str, Any]:
        self.asked.append(method)
        self.sent.append((method, params))
        answer = self.answers[method].pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def notify(self, method: str, params: dict[str, Any] | None = None, **_: Any) -> None:
        self.asked.append(method)

    async def aclose(self, *, terminate: bool = False) -> None:
        self.closed = True


def opened(transport: Any, **kw: Any) -> dict[str, Any]:
    return {"transport": transport, **kw}


async def negotiate(transport: Scripted, era: Any = None) -> Any:
    async def open_transport() -> Any:
        return transport

    return await handshake.negotiate(era=era, open_transport=open_transport, opened=opened)


async def test_a_modern_server_without_tasks_is_met_not_refused() -> None:
    t = Scripted(**{"server/discover": [DISCOVERED]})
    s = await negotiate(t)
    assert (s["era"], s["protocol_version"], s["tasks_offered"]) == (EXTENSION, EXTENSION, False)
    assert t.asked == ["server/discover"]
    meta = t.sent[0][1]["_meta"]  # type: ignore[index]
    assert meta["io.modelcontextprotocol/protocolVersion"] == EXTENSION
    assert "io.modelcontextprotocol/clientInfo" in meta and "io.modelcontextprotocol/clientCapabilities" in meta


async def test_unsupported_version_is_retried_once_with_a_listed_one() -> None:
    t = Scripted(**{"server/discover": [refusal(-32022, supported=[EXTENSION]), DISCOVERED]})
    assert (await negotiate(t))["era"] == EXTENSION
    assert t.asked == ["server/discover", "server/discover"]
    twice = Scripted(**{"server/discover": [refusal(-32022, supported=[EXTENSION])] * 2})
    with pytest.raises(UnknownProtocolVersion, match="twice"):
        await negotiate(twice)
    assert twice.asked == ["server/discover", "server/discover"] and twice.closed


async def test_a_dual_era_server_listing_only_our_legacy_versions_gets_initialize() -> None:
    t = Scripted(**{"server/discover": [refusal(-32022, supported=["2025-11-25"])], "initialize": [INITIALIZED]})
    s = await negotiate(t)
    assert (s["era"], s["tasks_offered"]) == (LEGACY, True)
    assert t.asked == ["server/discover", "initialize", "notifications/initialized"]


@pytest.mark.parametrize(
    "answer",
    [
        refusal(-32601),  # method not found
        refusal(-32602),  # invalid params
        refusal(-32000),  # the TS SDK's "Server not initialized"
        {},  # a legacy server answering any method with an empty result: no DiscoverResult
        TransportError("server/discover: no reply from stdio server in time", sent=True),  # silent on stdio
    ],
    ids=["-32601", "-32602", "-32000", "empty-result", "stdio-silence"],
)
async def test_any_other_answer_means_a_legacy_server(answer: Any) -> None:
    t = Scripted(**{"server/discover": [answer], "initialize": [INITIALIZED]})
    s = await negotiate(t)
    assert (s["era"], s["protocol_version"]) == (LEGACY, LEGACY)
    assert t.asked == ["server/discover", "initialize", "notifications/initialized"]


async def test_a_child_that_died_on_the_probe_is_no_legacy_server() -> None:
    t = Scripted(**{"server/discover": [TransportError("server/discover: stdio server exited", sent=True)]})
    t.alive = False
    with pytest.raises(TransportError):
        await negotiate(t)
    assert t.asked == ["server/discover"]


async def test_a_recognised_modern_error_is_never_a_fallback() -> None:
    t = Scripted(**{"server/discover": [refusal(-32021)]})
    with pytest.raises(MissingCapability):
        await negotiate(t)
    assert t.asked == ["server/discover"]


async def test_initialize_answered_with_2026_07_28_is_spoken_not_refused() -> None:
    t = Scripted(
        **{"server/discover": [refusal(-32601)], "initialize": [{"protocolVersion": EXTENSION, "capabilities": {}}]}
    )
    s = await negotiate(t)
    assert (s["era"], s["protocol_version"]) == (EXTENSION, EXTENSION)
    assert t.asked == ["server/discover", "initialize"]  # no notifications/initialized: no legacy session kept


async def test_pinned_eras_send_only_their_own_opening() -> None:
    legacy = Scripted(**{"initialize": [INITIALIZED]})
    assert (await negotiate(legacy, era=LEGACY))["era"] == LEGACY and legacy.asked[0] == "initialize"
    modern = Scripted(**{"server/discover": [DISCOVERED]})
    with pytest.raises(CapabilityUnavailable, match="extension"):
        await negotiate(modern, era=EXTENSION)  # pinned 2026-07-28 needs the tasks extension
    assert modern.asked == ["server/discover"]


# --- SEP-2243 -----------------------------------------------------------------------------------------------------

SCHEMA = {
    "type": "object",
    "properties": {
        "region": {"type": "string", "x-mcp-header": "Region"},
        "verbose": {"type": "boolean", "x-mcp-header": "Verbose"},
        "n": {"type": "integer", "x-mcp-header": "N"},
        "query": {"type": "string"},
    },
}


async def test_designated_parameters_are_mirrored_null_omitted_unsafe_in_base64() -> None:
    await sdk_compat.load_sdk()
    header_map, problem = sdk_compat.param_headers_of(SCHEMA)
    assert problem is None
    headers = sdk_compat.param_headers(header_map, {"region": " us ", "verbose": None, "n": 42, "query": "x"})
    assert headers == {"Mcp-Param-Region": "=?base64?IHVzIA==?=", "Mcp-Param-N": "42"}
    assert sdk_compat.param_headers(header_map, {"region": "us-west1", "verbose": False}) == {
        "Mcp-Param-Region": "us-west1",
        "Mcp-Param-Verbose": "false",
    }


async def test_a_tool_with_an_invalid_header_declaration_is_never_called() -> None:
    invalid = {"type": "object", "properties": {"score": {"type": "number", "x-mcp-header": "Score"}}}
    tools = [{"name": "bad", "inputSchema": invalid}, {"name": "good", "inputSchema": SCHEMA}]
    t = Scripted(**{"tools/list": [{"tools": tools}], "tools/call": [{"content": [], "resultType": "complete"}]})
    session = WireSession(t, Endpoint(command=["x"]), era=EXTENSION, protocol_version=EXTENSION)  # type: ignore[arg-type]
    await session.list_tools()
    assert session.header_problem("bad") and session.header_problem("good") is None
    with pytest.raises(CapabilityUnavailable, match="x-mcp-header"):
        await session.start("bad", {"score": 1.5})
    out = await session.start("good", {"region": "eu"})
    assert out.result is not None
    assert t.asked == ["tools/list", "tools/call"]  # the bad tool's call never left
