"""The two transports of an MCP session, one interface: streamable HTTP (:mod:`.http_transport`, our own: the SDK's
folds every HTTP status ≥ 400 into ``-32603`` and cannot adopt a persisted ``Mcp-Session-Id``) and stdio
(:mod:`.stdio_transport`, the SDK's framing on a child process of ours); JSON-RPC framing in :mod:`.jsonrpc`.

Both expose the same three calls: ``request`` (returns the JSON-RPC ``result`` object),
``notify`` and ``aclose``. Server→client requests that arrive while a request is open (elicitation on
a legacy ``tasks/result`` stream) go to ``on_server_request``; without a handler they are refused
with ``-32601`` so the server is never left waiting.
"""

from __future__ import annotations

from mcp_temporal_tasks.activities.wire.http_transport import HttpTransport
from mcp_temporal_tasks.activities.wire.stdio_transport import StdioTransport

Transport = HttpTransport | StdioTransport
