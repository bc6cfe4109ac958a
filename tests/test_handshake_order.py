"""How each real server is met (issue 54): the methods its own log shows, in order, when an unpinned client opens a
session and lists its tools. The 2026-07-28 revision's order (``activities/wire/handshake.py``): the
``server/discover`` probe first; a server of 2025 refuses it and gets ``initialize`` and then only what its version
has; a server of 2026-07-28 gets nothing but the probe before ``tools/list``. No server ever sees a ``tools/call``
before the era is known (none is sent here at all).
"""

from __future__ import annotations

import pytest

from mcp_temporal_tasks.activities.wire import EXTENSION, LEGACY, WireSession
from tests.peers.harness import Peer

#: Per server: its era and protocol version as met, and the methods its log shows, in order. The TypeScript SDK's
#: HTTP transport refuses a request before initialize (no session) before its MCP layer logs anything: the probe
#: reaches it (tests/test_fault_proxy.py counts it on the wire) but its log starts at initialize.
EXPECTED = {
    # mcp 1.12.4 FastMCP, protocol 2025-06-18, stateful streamable HTTP.
    "py0618_http": (LEGACY, "2025-06-18", ["server/discover", "initialize", "notifications/initialized", "tools/list"]),
    # The official Python SDK 1.30, 2025-11-25 with tasks, stateful streamable HTTP.
    # Its log records requests only (no notifications).
    "py1_http": (LEGACY, "2025-11-25", ["server/discover", "initialize", "tools/list"]),
    # The TypeScript SDK 1.32, 2025-11-25 with tasks, over stdio (a child per session) and stateful HTTP.
    # Its log records requests only (no notifications).
    "ts_stdio": (LEGACY, "2025-11-25", ["server/discover", "initialize", "tools/list"]),
    "ts_http_stateful": (LEGACY, "2025-11-25", ["initialize", "tools/list"]),
    # The official Python SDK's newest line, mcp 2.3 MCPServer: 2026-07-28 without the tasks extension (MRTR).
    "mcp2_http": (EXTENSION, EXTENSION, ["server/discover", "tools/list"]),
    # fastmcp 4.1.4, dual-era: 2026-07-28 with the tasks extension; no initialize session is ever opened.
    "fastmcp_server": (EXTENSION, EXTENSION, ["server/discover", "tools/list"]),
}


@pytest.mark.parametrize("server", sorted(EXPECTED))
async def test_each_server_sees_the_handshake_its_version_has(server: str, request: pytest.FixtureRequest) -> None:
    peer: Peer = request.getfixturevalue(server)
    era, version, methods = EXPECTED[server]
    mark = peer.log_mark()
    client = await WireSession.connect(peer.endpoint)
    try:
        assert (client.era, client.protocol_version) == (era, version)
        assert await client.list_tools()
    finally:
        await client.aclose(terminate=True)
    seen = [line["method"] for line in peer.log_since(mark) if "method" in line]
    assert seen == methods, seen
