"""OAuth access tokens for MCP servers that demand them (machine to machine: the client credentials grant).

What the SDK does here (``mcp.client.auth``): discovery as the MCP authorization spec says (protected resource
metadata of the server, then the authorization server's metadata, with its fallbacks and issuer checks), the
token request (``client_secret_basic``/``_post`` by ``ClientCredentialsOAuthProvider``; a signed assertion by
``PrivateKeyJWTOAuthProvider`` with ``SignedJWTParameters``, which signs a fresh JWT for every token request),
and reading the token response. We drive the provider's flow ourselves, outside the MCP request, because:

* the SDK's flow holds one lock across each request's whole round trip, so one provider shared by a server's
  sessions would let one slow ``tools/call`` stall every other task on that server; and a provider per session
  would fetch a token per session. Here one :class:`TokenSource` per (server, OAuth client) and event loop
  holds the token in memory and every session of that server uses it;
* its flow fetches a token only after a 401 and only for expired tokens sends a bare request first; we fetch
  before the first request and shortly before expiry, so a token that expires while a task is polled is
  replaced without the server ever refusing a request;
* its failures are untyped (``OAuthFlowError``, ``OAuthTokenError``, an ``httpx`` error from the
  authorization server that would look like the MCP server being down); here each is
  :class:`~.errors.AuthorizationRequired` naming the server and the reason, never the secret.

A 401 from the MCP server means the request was not executed: :class:`BearerAuth` gets a fresh token (once per
stale token, whichever request saw the 401 first) and sends the same request again, ``tools/call`` included.
A second 401, or a 403, is the transport's :class:`~.errors.AuthorizationRequired`.

Tokens never leave this process's memory: not persisted (a restarted worker fetches a new one), and every
token and secret is registered for scrubbing (:mod:`.redact`) the moment it is read.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import weakref
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import httpx2

from mcp_temporal_tasks.activities.wire import redact
from mcp_temporal_tasks.activities.wire.errors import AuthorizationRequired, CapabilityUnavailable
from mcp_temporal_tasks.activities.wire.models import OAuthClient, redact_url

#: Each request to the authorization server (and the metadata endpoints) gets this long: an authorization server
#: that does not answer ends the request that needed a token within it (plus discovery's few round trips).
AUTH_SERVER_TIMEOUT_S = 10.0


#: How long a refresh token (its lifetime is not told) stays in the log scrubber's registry.
REFRESH_TOKEN_SCRUB_S = 7 * 86400.0


def refresh_margin_s(lifetime_s: float) -> float:
    """How long before its expiry a token is replaced: a fifth of its lifetime, between 2 s and 60 s (the 2 s
    cover the whole seconds of ``exp`` and a request's way to the server)."""
    return max(2.0, min(60.0, lifetime_s / 5))


class InMemoryTokenStorage:
    """The SDK's ``TokenStorage``, in this process's memory only."""

    def __init__(self) -> None:
        self._tokens: Any = None
        self._client_info: Any = None

    async def get_tokens(self) -> Any:
        return self._tokens

    async def set_tokens(self, tokens: Any) -> None:
        self._tokens = tokens

    async def get_client_info(self) -> Any:
        return self._client_info

    async def set_client_info(self, client_info: Any) -> None:
        self._client_info = client_info


def read_secret(spec: OAuthClient) -> str:
    """The client secret or the private key (PEM) ``spec`` refers to, registered for scrubbing."""
    if spec.type == "client_credentials":
        value = os.environ.get(spec.client_secret_env or "")
        if not value:
            raise CapabilityUnavailable(f"auth client_secret refers to environment variable {spec.client_secret_env!r}, "
                                        "which is not set")
    elif spec.private_key_env is not None:
        value = os.environ.get(spec.private_key_env)
        if not value:
            raise CapabilityUnavailable(f"auth private_key refers to environment variable {spec.private_key_env!r}, "
                                        "which is not set")
    else:
        try:
            value = Path(spec.private_key_file or "").read_text(encoding="utf-8")
        except OSError as exc:
            raise CapabilityUnavailable(f"auth private_key file {spec.private_key_file!r} cannot be read: "
                                        f"{exc.strerror or type(exc).__name__}") from None
    redact.register([value, *value.splitlines()])
    return value


def _provider(url: str, spec: OAuthClient, storage: InMemoryTokenStorage) -> Any:
    import warnings

    from mcp.client.auth.extensions.client_credentials import (
        ClientCredentialsOAuthProvider,
        PrivateKeyJWTOAuthProvider,
        SignedJWTParameters,
    )

    secret = read_secret(spec)
    with warnings.catch_warnings():
        # Without an issuer the SDK warns that discovery picks the authorization server; that is the
        # configuration's choice (and the README's advice is to pin it).
        warnings.simplefilter("ignore")
        if spec.type == "client_credentials":
            return ClientCredentialsOAuthProvider(
                url, storage, spec.client_id, secret, token_endpoint_auth_method=spec.token_endpoint_auth_method,
                scope=spec.scope, issuer=spec.issuer)
        signer = SignedJWTParameters(issuer=spec.client_id, subject=spec.client_id, signing_key=secret,
                                     signing_algorithm=spec.signing_alg, lifetime_seconds=60)
        return PrivateKeyJWTOAuthProvider(url, storage, spec.client_id, signer.create_assertion_provider(),
                                          scope=spec.scope, issuer=spec.issuer)


def _refusal(response: httpx2.Response) -> str:
    """The authorization server's reason (RFC 6749 §5.2 ``error`` and ``error_description``), bounded."""
    try:
        body = json.loads(response.content[:4096])
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        desc = body.get("error_description")
        return f"{body['error']}" + (f" ({str(desc)[:200]})" if desc else "")
    return f"HTTP {response.status_code}"


class TokenSource:
    """The access token of one OAuth client for one MCP server, shared by all of that server's sessions."""

    def __init__(self, url: str, spec: OAuthClient) -> None:
        self.url = url
        self.spec = spec
        self.server = redact_url(url)
        self._lock = asyncio.Lock()
        self._provider: Any = None
        self._token: str | None = None
        self._refresh_at = 0.0
        #: Until when what discovery found (the protected resource's and the authorization server's metadata) is
        #: used again without asking: the lifetime of the token it led to.
        self._discovered_until = 0.0
        #: How many tokens this source obtained, and how many discoveries it ran (tests and logs; never the tokens).
        self.fetched = 0
        self.discoveries = 0

    async def token(self) -> str:
        """A token that is not about to expire, fetched when there is none."""
        if self._token is not None and time.monotonic() < self._refresh_at:
            return self._token
        async with self._lock:
            if self._token is None or time.monotonic() >= self._refresh_at:
                await self._fetch()
            assert self._token is not None
            return self._token

    async def replace(self, stale: str) -> str:
        """A token other than ``stale``, which the server refused: fetched unless another request already did. A
        refusal may mean the server moved to another authorization server: discovery runs again."""
        async with self._lock:
            if self._token is None or self._token == stale:
                self._discovered_until = 0.0
                await self._fetch()
            assert self._token is not None
            return self._token

    def _error(self, reason: str) -> AuthorizationRequired:
        return AuthorizationRequired(f"no access token for {self.server} (OAuth client {self.spec.client_id!r}): "
                                     f"{reason}", status=None)

    async def _fetch(self) -> None:
        """Run the SDK provider's discovery and token request as if the server had just answered 401.

        Within the lifetime of the last token, what discovery found is used again: the flow is driven as a scope
        step-up (a 403 ``insufficient_scope`` for the same scope), the SDK's own path that reuses the metadata it
        holds and goes straight to the token request. A token fetched a fifth of its lifetime before expiry thus
        costs one request to the authorization server, not three or four."""
        from mcp.client.auth import OAuthFlowError, OAuthTokenError

        self._token = None
        if self._provider is None:
            self._provider = _provider(self.url, self.spec, InMemoryTokenStorage())
        provider = self._provider
        provider.context.clear_tokens()
        probe = httpx2.Request("POST", self.url)
        # The scope a 401 would name is what the provider requests; without one it takes the server's advertised
        # scopes (protected resource metadata), as the spec's scope selection says.
        scope = f' scope="{self.spec.scope}"' if self.spec.scope else ""
        known = provider.context.oauth_metadata is not None and time.monotonic() < self._discovered_until
        status, challenge = (403, {"www-authenticate": f'Bearer error="insufficient_scope"{scope}'}) if known else (
            401, {"www-authenticate": f"Bearer{scope}"} if scope else {})
        flow = provider.async_auth_flow(probe)
        where = self.server
        try:
            async with httpx2.AsyncClient(timeout=AUTH_SERVER_TIMEOUT_S) as http:
                outgoing = await flow.__anext__()
                response = httpx2.Response(status, headers=challenge, request=outgoing)
                if not known:
                    self.discoveries += 1
                while True:
                    outgoing = await flow.asend(response)
                    if outgoing is probe:
                        break  # the flow holds a token and would now resend the request: not ours to send
                    where = redact_url(str(outgoing.url))
                    response = await http.send(outgoing)
                    await response.aread()
                    if outgoing.method == "POST" and response.status_code not in (200, 201):
                        raise self._error(f"the authorization server at {where} refused the token request: "
                                          f"{_refusal(response)}")
        except StopAsyncIteration:
            raise self._error("the OAuth flow ended without a token") from None
        except httpx2.HTTPError as exc:
            raise self._error(f"cannot reach {where}: {type(exc).__name__}") from None
        except (OAuthFlowError, OAuthTokenError) as exc:
            raise self._error(f"{type(exc).__name__}: {redact.scrub(str(exc))[:300]}") from None
        except ValueError as exc:  # pydantic: metadata or a token response that does not validate
            raise self._error(f"unusable answer from {where}: {type(exc).__name__}") from None
        finally:
            await flow.aclose()
        tokens = provider.context.current_tokens
        if tokens is None or not tokens.access_token:
            raise self._error("the authorization server's answer holds no access token")
        lifetime = float(tokens.expires_in) if tokens.expires_in else 3600.0
        # Scrubbed from logs while it can be used (and a grace after): then it leaves the registry (bounded).
        redact.register([tokens.access_token], lifetime_s=lifetime)
        if tokens.refresh_token:
            redact.register([tokens.refresh_token], lifetime_s=max(lifetime, REFRESH_TOKEN_SCRUB_S))
        self._token = tokens.access_token
        self._refresh_at = time.monotonic() + lifetime - refresh_margin_s(lifetime)
        self._discovered_until = time.monotonic() + lifetime
        self.fetched += 1


class BearerAuth(httpx2.Auth):
    """``httpx`` auth of one HTTP transport: the shared token on every request, one resend after a 401."""

    def __init__(self, source: TokenSource) -> None:
        self.source = source

    async def async_auth_flow(self, request: httpx2.Request) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        token = await self.source.token()
        request.headers["authorization"] = f"Bearer {token}"
        response = yield request
        if response.status_code == 401:
            # Refused before it was executed: the same request again, with a token fetched after the refusal.
            token = await self.source.replace(token)
            request.headers["authorization"] = f"Bearer {token}"
            yield request


_sources: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, TokenSource]] = weakref.WeakKeyDictionary()


def token_source(url: str, spec: OAuthClient) -> TokenSource:
    """The one :class:`TokenSource` of this server and OAuth client in the running event loop (its lock and the
    SDK's are bound to one loop)."""
    per_loop = _sources.setdefault(asyncio.get_running_loop(), {})
    key = json.dumps([url, spec.model_dump(mode="json")], sort_keys=True)
    source = per_loop.get(key)
    if source is None:
        source = per_loop[key] = TokenSource(url, spec)
    return source


def bearer_auth(url: str, spec: OAuthClient) -> BearerAuth:
    return BearerAuth(token_source(url, spec))


__all__ = ["AUTH_SERVER_TIMEOUT_S", "BearerAuth", "InMemoryTokenStorage", "TokenSource", "bearer_auth",
           "read_secret", "refresh_margin_s", "token_source"]
