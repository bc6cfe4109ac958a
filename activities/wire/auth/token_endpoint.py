"""The token request: the one request that carries a client's credentials, the same POST whatever the grant.

It always names the resource (RFC 8707) and the scope; the grant adds its ``grant_type`` and its client authentication.
Every token in the answer is registered for scrubbing (:mod:`~mcp_temporal_tasks.activities.wire.redact`) the moment
it is read, for as long as it can be used. A DPoP client (:mod:`.dpop`) sends a proof with it, answers the
authorization server's ``use_dpop_nonce`` once, and takes only a ``DPoP`` token back (never a bearer one instead).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

import httpx2

from mcp_temporal_tasks.activities.wire import redact
from mcp_temporal_tasks.activities.wire.auth.base import NoToken, client, read_body
from mcp_temporal_tasks.activities.wire.auth.dpop import Prover
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


async def _post(
    endpoint: str, data: dict[str, str], basic: httpx2.BasicAuth | None, headers: dict[str, str]
) -> tuple[httpx2.Response, bytes]:
    """One bounded form POST to a token endpoint: its response and body; unreachable is :class:`NoToken`."""
    try:
        async with client() as http:
            async with http.stream("POST", endpoint, data=data, auth=basic, headers=headers) as response:
                body = await read_body(response, "the token response")
    except httpx2.HTTPError as exc:
        raise NoToken(f"cannot reach {redact_url(endpoint)}: {type(exc).__name__}") from None
    return response, body


async def post_form(endpoint: str, data: dict[str, str], basic: httpx2.BasicAuth | None, who: str) -> bytes:
    """The body of a successful token-endpoint POST of ``data`` (at ``endpoint``, ``who``'s); a refusal, an
    unreachable endpoint or a body over the bound is :class:`NoToken` naming ``who`` and the RFC 6749 §5.2 error."""
    response, body = await _post(endpoint, data, basic, {"accept": "application/json"})
    if response.status_code not in (200, 201):
        raise NoToken(
            f"{who} at {redact_url(endpoint)} refused the token request: {refusal(response.status_code, body)}",
            oauth_error=error_code(body),
        )
    return body


async def request_token(
    endpoint: str, resource: str, scope: str | None, grant: TokenRequest, *, dpop: Prover | None = None
) -> OAuthToken:
    """An access token from the token endpoint at ``endpoint`` (found by discovery), for ``resource`` and ``scope``:
    a bearer token, or with ``dpop`` a token bound to its key (``token_type`` ``DPoP``, RFC 9449 §5)."""
    from pydantic import ValidationError

    data = {"grant_type": grant.grant_type, "resource": resource}
    if scope:
        data["scope"] = scope
    data.update(grant.fields)
    where = redact_url(endpoint)
    for attempt in range(2):
        headers = {"accept": "application/json"}
        if dpop is not None:
            headers["dpop"] = dpop.proof("POST", endpoint)
        response, body = await _post(endpoint, data, grant.basic, headers)
        if dpop is None or response.status_code != 400 or error_code(body) != "use_dpop_nonce":
            break
        # RFC 9449 §8: the authorization server refused this request for its proof's missing or stale nonce
        # (nothing was granted, a code or refresh token not spent): once more with the nonce it gave, never more.
        if attempt:
            raise NoToken(
                f"the authorization server at {where} asked for a new DPoP nonce again after the request carried "
                "the one it gave (use_dpop_nonce twice): not asked a third time"
            )
        dpop.take_nonce(endpoint, response.headers)
    if response.status_code not in (200, 201):
        raise NoToken(
            f"the authorization server at {where} refused the token request: {refusal(response.status_code, body)}",
            oauth_error=error_code(body),
        )
    if dpop is not None:
        dpop.note_nonce(endpoint, response.headers)
    try:
        tokens = _answer_model().model_validate_json(body)
    except ValidationError:
        raise NoToken(
            f"the authorization server at {where} answered the token request with something that is not a "
            f"{'DPoP' if dpop is not None else 'bearer'} token response"
        ) from None
    if not tokens.access_token:
        raise NoToken(f"the authorization server at {where} answered with an empty access token")
    kind = tokens.token_type.lower()
    if kind != ("dpop" if dpop is not None else "bearer"):
        redact.register([tokens.access_token, *([tokens.refresh_token] if tokens.refresh_token else [])])
        wanted = "a DPoP-bound token (auth.dpop is set)" if dpop is not None else "a bearer token"
        raise NoToken(
            f"the authorization server at {where} answered token_type {tokens.token_type[:40]!r} where "
            f"{wanted} was asked for: not used"
        )
    lifetime = lifetime_s(tokens)
    # Scrubbed from logs while it can be used (and a grace after): then it leaves the registry (bounded).
    redact.register([tokens.access_token], lifetime_s=lifetime)
    if tokens.refresh_token:
        redact.register([tokens.refresh_token], lifetime_s=max(lifetime, REFRESH_TOKEN_SCRUB_S))
    return tokens


@functools.cache
def _answer_model() -> type[OAuthToken]:
    from mcp.shared.auth import OAuthToken

    class Answer(OAuthToken):
        """The SDK's token response with any ``token_type`` (its own takes ``Bearer`` only): ``DPoP`` too."""

        token_type: str = "Bearer"  # type: ignore[assignment]

    return Answer
