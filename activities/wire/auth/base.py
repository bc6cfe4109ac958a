"""What every request for a token shares: one request's timeout, a bounded body, and why no token can be had.

Metadata endpoints and authorization servers are strangers until discovery has checked them: each request gets
:data:`AUTH_SERVER_TIMEOUT_S`, follows no redirect (the credentials go only where discovery checked) and is read up to
:data:`MAX_AUTH_BODY` only.
"""

from __future__ import annotations

import httpx2

from mcp_temporal_tasks.protocol.tasks import redact_url

#: Each request to the authorization server (and the metadata endpoints) gets this long.
AUTH_SERVER_TIMEOUT_S = 10.0
#: Metadata and token responses larger than this are garbage.
MAX_AUTH_BODY = 64 * 1024


class NoToken(Exception):
    """Why no token can be had: the reason alone (the token source names the server and the client, and scrubs it)."""

    def __init__(self, reason: str, *, oauth_error: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        #: The authorization server's RFC 6749 §5.2 ``error`` code when it answered one (``invalid_grant``...).
        self.oauth_error = oauth_error


def client() -> httpx2.AsyncClient:
    """The HTTP client of one discovery or one token request."""
    return httpx2.AsyncClient(timeout=AUTH_SERVER_TIMEOUT_S, follow_redirects=False)


async def read_body(response: httpx2.Response, what: str) -> bytes:
    """The body of a metadata or token response, at most :data:`MAX_AUTH_BODY`."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > MAX_AUTH_BODY:
            raise NoToken(f"{what} at {redact_url(str(response.request.url))} is larger than {MAX_AUTH_BODY} bytes")
        chunks.append(chunk)
    return b"".join(chunks)
