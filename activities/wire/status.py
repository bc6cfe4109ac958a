"""What an HTTP status ≥ 400 from an MCP server means, as a typed wire error.

429 with its ``Retry-After``, 401/403, a session gone (404), a server fault (5xx), or a JSON-RPC error in the body.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from mcp_temporal_tasks.protocol.limits import cap_text
from mcp_temporal_tasks.protocol.wire_errors import (
    AuthorizationRequired,
    HttpRefusal,
    McpWireError,
    NotMcpEndpoint,
    ProtocolViolation,
    RateLimited,
    SessionGone,
    TransportError,
    error_from_rpc,
    read_retry_after,
)


def http_error(
    method: str,
    status: int,
    ctype: str,
    header: Callable[[str], str | None],
    raw: str,
    *,
    url: str,
    session_id: str | None,
) -> McpWireError:
    """What an HTTP status ≥ 400 means, whichever path read it (``raw``: the body, at most 64 KiB)."""
    if status == 429:
        after = read_retry_after(header("retry-after"))
        return RateLimited(
            f"{method}: HTTP 429 from {url}", retry_after_s=after.seconds, retry_after_note=after.note, raw=raw
        )
    if status in (401, 403):
        return AuthorizationRequired(f"{method}: HTTP {status} from {url}", status=status, raw=raw)
    rpc_error = None
    if ctype.startswith("application/json"):
        try:
            parsed = json.loads(raw)
            rpc_error = parsed.get("error") if isinstance(parsed, dict) else None
        except ValueError:
            pass
    # 404 with a session is "session gone" unless the body says which method is missing.
    if (
        status == 404
        and session_id
        and method != "initialize"
        and (rpc_error is None or rpc_error.get("code") not in (-32601, -32602))
    ):
        return SessionGone(f"{method}: session {session_id} is gone (HTTP 404)", raw=raw)
    if status >= 500:
        # A 503's Retry-After says how long the server is away (activities/wire/backpressure.py holds it).
        later = read_retry_after(header("retry-after")) if status == 503 else None
        return TransportError(
            f"{method}: HTTP {status} from {url}" + (f" ({later.note})" if later and later.note else ""),
            sent=True,
            status=status,
            retry_after_s=later.seconds if later else None,
            raw=raw,
        )
    if rpc_error is not None:
        return error_from_rpc(rpc_error, method=method, raw=raw)
    return HttpRefusal(f"{method}: HTTP {status} without a JSON-RPC error", code=None, raw=raw)


_TITLE = re.compile(r"<title[^>]*>(?P<title>[^<]{1,200})", re.I)
#: HTTP statuses that say the server does not do what was asked at all (never a passing fault of an MCP server).
_NOT_IMPLEMENTED = (501, 505)


def answered(status: int, ctype: str, header: Callable[[str], str | None], raw: str) -> str:
    """What answered an HTTP request, in a few words a person reads: status, content type, ``Server`` header, and the
    page's title or first words (bounded; control characters dropped)."""
    words = f"HTTP {status} {ctype.split(';')[0].strip() or 'without a content type'}"
    server = header("server")
    if server:
        words += f" from server {cap_text(server, 80)!r}"
    title = _TITLE.search(raw)
    text = title["title"] if title else raw
    text = " ".join("".join(c if c.isprintable() else " " for c in text[:400]).split())[:120]
    return f"{words}: {text!r}" if text else words


def not_mcp_endpoint(exc: BaseException, url: str) -> NotMcpEndpoint | None:
    """:class:`NotMcpEndpoint` when ``exc``, the end of a handshake, was an answer that is no MCP at all: a reply
    whose content type is neither JSON nor SSE, an HTTP 4xx without a JSON-RPC error (not 401/403/429, which say
    something of their own), 501 or 505. None for anything an MCP server may answer (a JSON-RPC error, a 5xx other
    than those: a passing fault), and for a transport failure."""
    seen = getattr(exc, "answered", None)
    if not isinstance(seen, str):
        return None
    if (
        (type(exc) is HttpRefusal and exc.code is None)
        or type(exc) is ProtocolViolation
        or (isinstance(exc, TransportError) and exc.status in _NOT_IMPLEMENTED)
    ):
        return NotMcpEndpoint(f"{url} is not an MCP endpoint: the handshake was answered {seen}")
    return None
