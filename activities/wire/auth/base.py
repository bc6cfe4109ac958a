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


#: A platform token or an identity-provider ID token larger than this is not one (they are a few KiB at most).
MAX_JWT = 16 * 1024


def jwt_claims(token: str, what: str) -> dict[str, object]:
    """The claims of ``token`` (``what`` it is, for the error), read without checking its signature (the
    authorization server or identity provider it goes to does): it must be a compact JWT no larger than
    :data:`MAX_JWT` that has not expired. Anything else is :class:`NoToken` saying which: a wrong file or
    variable is never sent on."""
    import jwt

    if len(token) > MAX_JWT:
        raise NoToken(f"{what} is larger than {MAX_JWT} bytes: not a JWT")
    try:
        claims = jwt.decode(token, options={"verify_signature": False, "verify_exp": True})
    except jwt.ExpiredSignatureError:
        raise NoToken(f"{what} has expired (its exp is past)") from None
    except jwt.PyJWTError as exc:
        raise NoToken(f"{what} is not a JWT ({type(exc).__name__})") from None
    if not isinstance(claims, dict):
        raise NoToken(f"{what} is not a JWT (its payload is not an object)")
    return claims
