"""The two transports of an MCP session, one interface: ``request``, ``notify`` and ``aclose``.

Streamable HTTP is ours (:mod:`.http_transport`: the SDK's folds every HTTP status ≥ 400 into ``-32603`` and cannot
adopt a persisted ``Mcp-Session-Id``), stdio the SDK's framing on a child of ours (:mod:`.stdio_transport`). A server's
request while one of ours is open goes to ``on_server_request``; without a handler it is refused with ``-32601``.
"""

from __future__ import annotations

from mcp_temporal_tasks.activities.wire.http_transport import HttpTransport
from mcp_temporal_tasks.activities.wire.stdio_transport import StdioTransport

Transport = HttpTransport | StdioTransport
