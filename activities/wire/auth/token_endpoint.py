"""The token request: the one request that carries a client's credentials, the same POST whatever the grant.

It always names the resource (RFC 8707) and the scope; the grant adds its ``grant_type`` and its client authentication.
Every token in the answer is registered for scrubbing (:mod:`~mcp_temporal_tasks.activities.wire.redact`) the moment
it is read, for as long as it can be used.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

import httpx2

from mcp_temporal_tasks.activities.wire import redact
from mcp_temporal_tasks.activities.wire.auth.base import NoToken, client, read_body
from mcp_temporal_tasks.protocol.tasks import redact_url

if TYPE_CHECKING:
    from mcp.shared.auth import OAuthToken

#: How long a refresh token (its lifetime is not told) stays in the log scrubber's registry.
REFRESH_TOKEN_SCRUB_S = 7 * 86400.0


@dataclass(frozen=True)
class TokenRequest:
    """What a grant puts in a token request: its ``grant_type``, its own form fields (its client authentication
    among them), and the Basic credentials of ``client_secret_basic``."""

    grant_type: str
    fields: dict[str, str]
    basic: httpx2.BasicAuth | None = None


def refusal(status: int, body: bytes) -> str:
    """The authorization server's reason (RFC 6749 §5.2 ``error`` and ``error_description``), bounded."""
    try:
        parsed = json.loads(body[:4096])
    except ValueError:
        parsed = None
    if isinstance(parsed, dict) and isinstance(parsed.get("error"), str):
        desc = parsed.get("error_description")
        return f"{parsed['error'][:100]}" + (f" ({str(desc)[:200]})" if desc else "")
    return f"HTTP {status}"


def error_code(body: bytes) -> str | None:
    """The ``error`` code of a token error response, if it has one (bounded)."""
    try:
        parsed = json.loads(body[:4096])
    except ValueError:
        return None
    code = parsed.get("error") if isinstance(parsed, dict) else None
    return code[:100] if isinstance(code, str) else None


def lifetime_s(tokens: OAuthToken) -> float:
    """How long an access token can be used: its ``expires_in``, else an hour."""
    return float(tokens.expires_in) if tokens.expires_in and tokens.expires_in > 0 else 3600.0


async def post_form(endpoint: str, data: dict[str, str], basic: httpx2.BasicAuth | None, who: str) -> bytes:
    """The body of a successful token-endpoint POST of ``data`` (at ``endpoint``, ``who``'s); a refusal, an
    unreachable endpoint or a body over the bound is :class:`NoToken` naming ``who`` and the RFC 6749 §5.2 error."""
    where = redact_url(endpoint)
    try:
        async with client() as http:
            async with http.stream(
                "POST", endpoint, data=data, auth=basic, headers={"accept": "application/json"}
            ) as response:
                body = await read_body(response, "the token response")
    except httpx2.HTTPError as exc:
        raise NoToken(f"cannot reach {where}: {type(exc).__name__}") from None
    if response.status_code not in (200, 201):
        raise NoToken(
            f"{who} at {where} refused the token request: {refusal(response.status_code, body)}",
            oauth_error=error_code(body),
        )
    return body


async def request_token(endpoint: str, resource: str, scope: str | None, grant: TokenRequest) -> OAuthToken:
    """A bearer token from the token endpoint at ``endpoint`` (found by discovery), for ``resource`` and ``scope``."""
    from mcp.shared.auth import OAuthToken
    from pydantic import ValidationError

    data = {"grant_type": grant.grant_type, "resource": resource}
    if scope:
        data["scope"] = scope
    data.update(grant.fields)
    where = redact_url(endpoint)
    body = await post_form(endpoint, data, grant.basic, "the authorization server")
    try:
        tokens = OAuthToken.model_validate_json(body)
    except ValidationError:
        raise NoToken(
            f"the authorization server at {where} answered the token request with something "
            "that is not a bearer token response"
        ) from None
    if not tokens.access_token:
        raise NoToken(f"the authorization server at {where} answered with an empty access token")
    lifetime = lifetime_s(tokens)
    # Scrubbed from logs while it can be used (and a grace after): then it leaves the registry (bounded).
    redact.register([tokens.access_token], lifetime_s=lifetime)
    if tokens.refresh_token:
        redact.register([tokens.refresh_token], lifetime_s=max(lifetime, REFRESH_TOKEN_SCRUB_S))
    return tokens
