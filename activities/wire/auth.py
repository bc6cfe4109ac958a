"""OAuth access tokens for MCP servers that demand them (machine to machine: the client credentials grant).

The server speaks first, as the MCP authorization spec says (protocol 2025-06-18 and later). A request goes
without a token (or with the one this process holds); the server's ``401`` challenge (``WWW-Authenticate:
Bearer resource_metadata=…, scope=…``) starts discovery:

1. the protected resource metadata (RFC 9728): the challenge's ``resource_metadata`` URL, else
   ``/.well-known/oauth-protected-resource/<path>``, else ``/.well-known/oauth-protected-resource`` on the
   server's origin; its ``resource`` must be the server (or a parent of it, RFC 8707);
2. one of its ``authorization_servers``: the configured ``issuer`` when set (it must be listed), else the first;
   without protected resource metadata only the configured ``issuer``, or, for a server that negotiated
   2025-03-26, the server's own origin (that protocol's default: metadata at the origin, else ``/token``);
3. that authorization server's metadata (RFC 8414 path-inserted, then OpenID Connect path-inserted, then
   path-appended; root forms for an issuer without a path), whose ``issuer`` must be the one asked for;
4. its ``token_endpoint``: the client credentials grant, with ``resource`` (RFC 8707) always, the scope chosen
   below, and the client authentication chosen below.

Scope: the configured ``scope`` when set; else the challenge's ``scope``; else the metadata's
``scopes_supported``; else none. A ``403`` with ``error="insufficient_scope"`` gets one step-up (a token for the
scope so far plus the one the 403 names) and the request is sent again once; a second refusal is an error.

Client authentication: the configured ``token_endpoint_auth_method`` when set (``private_key_jwt`` for that type);
else ``client_secret_basic`` when the authorization server's ``token_endpoint_auth_methods_supported`` lists it or
is absent (RFC 8414's default), else ``client_secret_post`` when listed, else ``none`` when listed (the client id
alone: the secret is not sent); anything else (e.g. only ``private_key_jwt`` for a client with a secret) is an
error.

The credentials (secret or signed assertion) go in one request only: the token request, to the token endpoint of
an authorization server found as above, whose URL is ``https`` (``http`` only on loopback). Every other outcome
(metadata that does not parse, an issuer that does not match, an authorization server that is not named, down or
answering garbage) is one :class:`~protocol.wire_errors.AuthorizationRequired` naming the server and what was
wrong, and no request carrying the credentials is made. Each request to the metadata endpoints and the authorization
server gets :data:`AUTH_SERVER_TIMEOUT_S`, the whole discovery and token request :data:`AUTH_FLOW_TIMEOUT_S`.

What discovery found is kept for the token's lifetime: one :class:`TokenSource` per (server, OAuth client) and
event loop holds the token and every session of that server uses it; a token is replaced a little before its
expiry with one request to the token endpoint; a ``401`` to a token we sent runs discovery again.

Libraries: the MCP SDK's public auth building blocks (``mcp.client.auth.utils`` for the discovery URL orders
and ``WWW-Authenticate`` fields, ``mcp.shared.auth`` for the metadata and token models, ``mcp.shared.auth_utils``
for RFC 8707 resource matching, ``SignedJWTParameters`` for RFC 7523 assertions) and httpx2 for the requests (its
``BasicAuth`` and form encoding). Not the SDK's ``OAuthClientProvider`` as the transport's auth: it holds one lock
across each request's whole round trip and reads every response body (an SSE stream included) before handing it
back; it falls back to ``<server origin>/token`` whatever the negotiated protocol, requires no ``https``, and
picks no client authentication from the metadata; changing that means overriding its private methods. Not
authlib: not a dependency of ours, its ``private_key_jwt`` signs RSA keys only (``ES256`` is common) and its
Basic encoding skips RFC 6749 §2.3.1's form-encoding.

Tokens never leave this process's memory: not persisted (a restarted worker fetches a new one), and every
token and secret is registered for scrubbing (:mod:`.redact`) the moment it is read.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import os
import time
import weakref
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urljoin, urlsplit

import httpx2

from mcp_temporal_tasks.activities.wire import redact
from mcp_temporal_tasks.protocol.tasks import OAuthClient, redact_url
from mcp_temporal_tasks.protocol.wire_errors import AuthorizationRequired, CapabilityUnavailable

log = logging.getLogger(__name__)

#: Each request to the authorization server (and the metadata endpoints) gets this long.
AUTH_SERVER_TIMEOUT_S = 10.0
#: Discovery and the token request together (at most 3 + 3 metadata requests and 1 token request).
AUTH_FLOW_TIMEOUT_S = 20.0
#: Metadata and token responses larger than this are garbage.
MAX_AUTH_BODY = 64 * 1024
#: The one protocol whose servers may have no metadata and default endpoints at their origin.
LEGACY_PROTOCOL = "2025-03-26"


#: How long a refresh token (its lifetime is not told) stays in the log scrubber's registry.
REFRESH_TOKEN_SCRUB_S = 7 * 86400.0


def refresh_margin_s(lifetime_s: float) -> float:
    """How long before its expiry a token is replaced: a fifth of its lifetime, between 2 s and 60 s (the 2 s
    cover the whole seconds of ``exp`` and a request's way to the server)."""
    return max(2.0, min(60.0, lifetime_s / 5))


def negotiated_protocol(request: httpx2.Request) -> str | None:
    """Hook: the protocol version the session negotiated, as the transport sends it on every request after
    ``initialize`` (``MCP-Protocol-Version``). None on ``initialize`` itself: nothing negotiated yet."""
    return request.headers.get("mcp-protocol-version")


def read_secret(spec: OAuthClient) -> str:
    """The client secret or the private key (PEM) ``spec`` refers to, registered for scrubbing."""
    if spec.type == "client_credentials":
        value = os.environ.get(spec.client_secret_env or "")
        if not value:
            raise CapabilityUnavailable(
                f"auth client_secret refers to environment variable {spec.client_secret_env!r}, which is not set"
            )
    elif spec.private_key_env is not None:
        value = os.environ.get(spec.private_key_env)
        if not value:
            raise CapabilityUnavailable(
                f"auth private_key refers to environment variable {spec.private_key_env!r}, which is not set"
            )
    else:
        try:
            value = Path(spec.private_key_file or "").read_text(encoding="utf-8")
        except OSError as exc:
            raise CapabilityUnavailable(
                f"auth private_key file {spec.private_key_file!r} cannot be read: {exc.strerror or type(exc).__name__}"
            ) from None
    redact.register([value, *value.splitlines()])
    return value


def _refusal(response: httpx2.Response) -> str:
    """The authorization server's reason (RFC 6749 §5.2 ``error`` and ``error_description``), bounded."""
    try:
        body = json.loads(response.content[:4096])
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        desc = body.get("error_description")
        return f"{body['error'][:100]}" + (f" ({str(desc)[:200]})" if desc else "")
    return f"HTTP {response.status_code}"


def is_loopback(host: str | None) -> bool:
    if not host:
        return False
    if host.lower() == "localhost" or host.lower().endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def secure_enough(url: str) -> bool:
    """``https``, or ``http`` to this machine only."""
    parts = urlsplit(url)
    return parts.scheme == "https" or (parts.scheme == "http" and is_loopback(parts.hostname))


@dataclass(frozen=True)
class Challenge:
    """What a ``401``/``403`` said (``WWW-Authenticate: Bearer …``), as the SDK's parser reads it."""

    status: int
    resource_metadata: str | None = None
    scope: str | None = None
    error: str | None = None

    @classmethod
    def of(cls, response: httpx2.Response) -> Challenge:
        from mcp.client.auth.utils import extract_field_from_www_auth

        def field(name: str) -> str | None:
            value = extract_field_from_www_auth(response, name)
            return value[:2048] if value else None

        return cls(response.status_code, field("resource_metadata"), field("scope"), field("error"))


@dataclass(frozen=True)
class Discovered:
    """Where and how tokens for one server are requested."""

    issuer: str
    token_endpoint: str
    resource: str
    #: Scope chosen by the rule above for the first token (None: no scope parameter).
    scope: str | None
    method: str
    #: ``scopes_supported`` of the protected resource metadata (for a challenge without scope).
    advertised_scope: str | None


def _union(a: str | None, b: str | None) -> str | None:
    from mcp.client.auth.utils import union_scopes

    return union_scopes(a, b)


class TokenSource:
    """The access token of one OAuth client for one MCP server, shared by all of that server's sessions."""

    def __init__(self, url: str, spec: OAuthClient) -> None:
        self.url = url
        self.spec = spec
        self.server = redact_url(url)
        self._lock = asyncio.Lock()
        self._token: str | None = None
        self._scope: str | None = None
        self._refresh_at = 0.0
        self._found: Discovered | None = None
        #: Until when what discovery found is used again without asking: the lifetime of the token it led to.
        self._discovered_until = 0.0
        #: How many tokens this source obtained, discoveries it ran, step-ups it made (tests and logs; never tokens).
        self.fetched = 0
        self.discoveries = 0
        self.step_ups = 0

    # --- what the transport's auth asks for ---------------------------------------------------------------

    def current(self) -> str | None:
        """The token held, if it is not due for replacement."""
        if self._token is not None and time.monotonic() < self._refresh_at:
            return self._token
        return None

    async def token(self) -> str | None:
        """A token for the next request: the one held; one replaced with a single token request when it is due and
        discovery is still known; None when there is none to be had without the server's challenge."""
        held = self.current()
        if held is not None or self._token is None:
            return held
        async with self._lock:
            if self.current() is None and self._found is not None and time.monotonic() < self._discovered_until:
                await self._bounded(self._request_token(self._found, self._scope))
            return self.current()

    async def after_401(self, sent: str | None, challenge: Challenge, protocol: str | None) -> str:
        """A token after the server refused ``sent`` (None: the request went without one). Unless another request
        already replaced it, discovery runs from this challenge (a refused token may mean the server moved to
        another authorization server) and a token is requested."""
        async with self._lock:
            if self._token is not None and self._token != sent and self.current() is not None:
                return self._token
            self._token, self._found, self._discovered_until = None, None, 0.0
            await self._bounded(self._discover_and_fetch(challenge, protocol))
            assert self._token is not None
            return self._token

    async def step_up(self, sent: str, challenge: Challenge) -> str:
        """A token with the scope a ``403 insufficient_scope`` names added to the scope so far."""
        async with self._lock:
            if self._token is not None and self._token != sent and self.current() is not None:
                return self._token  # another request stepped up already
            found = self._found
            wanted = _union(self._scope, challenge.scope)
            if found is None or not challenge.scope or wanted == self._scope:
                raise self._error(
                    f"the server refuses the token for insufficient scope (it names "
                    f"{challenge.scope!r}; the token was requested with scope {self._scope!r})",
                    status=403,
                )
            self.step_ups += 1
            await self._bounded(self._request_token(found, wanted))
            assert self._token is not None
            return self._token

    # --- discovery ------------------------------------------------------------------------------------------

    def _error(self, reason: str, *, status: int | None = None) -> AuthorizationRequired:
        return AuthorizationRequired(
            f"no access token for {self.server} (OAuth client {self.spec.client_id!r}): {redact.scrub(reason)}",
            status=status,
        )

    async def _bounded(self, work: Any) -> None:
        try:
            await asyncio.wait_for(work, AUTH_FLOW_TIMEOUT_S)
        except TimeoutError:
            raise self._error(f"discovery and the token request took longer than {AUTH_FLOW_TIMEOUT_S:g} s") from None

    async def _body(self, response: httpx2.Response, what: str) -> bytes:
        """The body of a metadata or token response, at most :data:`MAX_AUTH_BODY`."""
        chunks: list[bytes] = []
        size = 0
        async for chunk in response.aiter_bytes():
            size += len(chunk)
            if size > MAX_AUTH_BODY:
                raise self._error(
                    f"{what} at {redact_url(str(response.request.url))} is larger than {MAX_AUTH_BODY} bytes"
                )
            chunks.append(chunk)
        return b"".join(chunks)

    async def _metadata(self, http: httpx2.AsyncClient, urls: list[str], model: Any, what: str) -> Any:
        """The first of ``urls`` that serves ``what`` (200, parsed by ``model``). Not served (3xx/4xx): the next.
        A body that does not parse, or a server error: an error, not the next URL (it would hide the fault)."""
        from pydantic import ValidationError

        for url in urls:
            if not secure_enough(url):
                raise self._error(f"{what} at {redact_url(url)} is not https (http only on loopback)")
            async with http.stream("GET", url, headers={"accept": "application/json"}) as resp:
                if resp.status_code == 200:
                    body = await self._body(resp, what)
                    try:
                        return model.model_validate_json(body)
                    except ValidationError as exc:
                        errors = exc.errors()
                        where = ".".join(str(p) for p in errors[0]["loc"]) if errors else ""
                        msg = str(errors[0]["msg"])[:120] if errors else "invalid"
                        raise self._error(
                            f"{what} at {redact_url(url)} does not parse ({where or 'body'}: {msg})"
                        ) from None
                if resp.status_code >= 500 or resp.status_code == 429:
                    raise self._error(f"{what} at {redact_url(url)} answered HTTP {resp.status_code}")
                log.debug("no %s at %s (HTTP %s)", what, redact_url(url), resp.status_code)
        return None

    async def _discover_and_fetch(self, challenge: Challenge, protocol: str | None) -> None:
        from mcp.client.auth.utils import (
            build_oauth_authorization_server_metadata_discovery_urls,
            build_protected_resource_metadata_discovery_urls,
            issuers_match,
        )
        from mcp.shared.auth import OAuthMetadata, ProtectedResourceMetadata
        from mcp.shared.auth_utils import check_resource_allowed, resource_url_from_server_url

        self.discoveries += 1
        own_resource = resource_url_from_server_url(self.url)
        issuer_pin = self.spec.issuer
        try:
            async with httpx2.AsyncClient(timeout=AUTH_SERVER_TIMEOUT_S, follow_redirects=False) as http:
                prm_urls = build_protected_resource_metadata_discovery_urls(challenge.resource_metadata, self.url)
                prm = await self._metadata(http, prm_urls, ProtectedResourceMetadata, "protected resource metadata")
                resource = own_resource
                advertised: str | None = None
                legacy = False
                if prm is not None:
                    named = str(prm.resource)
                    if not check_resource_allowed(requested_resource=own_resource, configured_resource=named):
                        raise self._error(
                            f"its protected resource metadata is for resource {named}, not for {own_resource}"
                        )
                    resource = named
                    advertised = " ".join(prm.scopes_supported) if prm.scopes_supported else None
                    servers = [str(s) for s in prm.authorization_servers]
                    if issuer_pin is not None:
                        chosen = next((s for s in servers if issuers_match(s, issuer_pin)), None)
                        if chosen is None:
                            raise self._error(
                                f"its protected resource metadata names authorization server(s) "
                                f"{', '.join(redact_url(s) for s in servers[:5])}, not the configured "
                                f"issuer {issuer_pin}"
                            )
                    else:
                        chosen = servers[0]
                elif issuer_pin is not None:
                    chosen = issuer_pin
                elif protocol == LEGACY_PROTOCOL:
                    parts = urlsplit(self.url)
                    chosen, legacy = f"{parts.scheme}://{parts.netloc}", True
                else:
                    raise self._error(
                        f"it publishes no protected resource metadata (tried {', '.join(map(redact_url, prm_urls))}) "
                        f"and negotiated protocol {protocol or 'none yet'}, not {LEGACY_PROTOCOL}: no authorization "
                        "server is named to send the client's credentials to (set auth.issuer to name it)"
                    )
                asm_urls = build_oauth_authorization_server_metadata_discovery_urls(
                    None if legacy else chosen, self.url
                )
                asm = await self._metadata(http, asm_urls, OAuthMetadata, "authorization server metadata")
        except httpx2.HTTPError as exc:
            url = getattr(getattr(exc, "request", None), "url", None)
            raise self._error(
                f"cannot reach {redact_url(str(url)) if url else 'the metadata endpoint'}: {type(exc).__name__}"
            ) from None
        if asm is None and not legacy:
            raise self._error(
                f"authorization server {chosen} publishes no metadata (tried {', '.join(map(redact_url, asm_urls))})"
            )
        if asm is not None:
            if not issuers_match(str(asm.issuer), chosen):
                raise self._error(
                    f"the authorization server metadata names issuer {str(asm.issuer)[:200]}, not "
                    f"{chosen} where it was found (RFC 8414 §3.3)"
                )
            if issuer_pin is not None and not issuers_match(str(asm.issuer), issuer_pin):
                raise self._error(f"the authorization server's issuer {asm.issuer} is not the configured {issuer_pin}")
            token_endpoint = str(asm.token_endpoint)
        else:
            token_endpoint = urljoin(chosen, "/token")  # 2025-03-26's default endpoint, legacy servers only
        if not secure_enough(token_endpoint):
            raise self._error(f"token endpoint {redact_url(token_endpoint)} is not https (http only on loopback)")
        method = self._method(asm.token_endpoint_auth_methods_supported if asm is not None else None)
        scope = self.spec.scope or challenge.scope or advertised
        found = Discovered(
            issuer=str(asm.issuer) if asm is not None else chosen,
            token_endpoint=token_endpoint,
            resource=resource,
            scope=scope,
            method=method,
            advertised_scope=advertised,
        )
        log.debug(
            "OAuth for %s: authorization server %s, token endpoint %s, %s, scope %r",
            self.server,
            redact_url(found.issuer),
            redact_url(token_endpoint),
            method,
            scope,
        )
        await self._request_token(found, scope)
        self._found = found

    def _method(self, supported: list[str] | None) -> str:
        if self.spec.type == "private_key_jwt":
            return "private_key_jwt"
        if self.spec.token_endpoint_auth_method is not None:
            return self.spec.token_endpoint_auth_method
        if supported is None or "client_secret_basic" in supported:
            return "client_secret_basic"
        if "client_secret_post" in supported:
            return "client_secret_post"
        if "none" in supported:
            return "none"  # the server authenticates no client: the client id alone, the secret stays here
        raise self._error(
            f"the authorization server supports token endpoint auth methods "
            f"{', '.join(m[:40] for m in supported[:8]) or 'none'}; this client has a client secret "
            "(client_secret_basic or client_secret_post)"
        )

    # --- the token request: the only request carrying the credentials -----------------------------------------

    async def _request_token(self, found: Discovered, scope: str | None) -> None:
        from mcp.client.auth.extensions.client_credentials import SignedJWTParameters
        from mcp.shared.auth import OAuthToken
        from pydantic import ValidationError

        data = {"grant_type": "client_credentials", "resource": found.resource}
        if scope:
            data["scope"] = scope
        secret = read_secret(self.spec)
        basic: httpx2.BasicAuth | None = None
        if found.method == "private_key_jwt":
            signer = SignedJWTParameters(
                issuer=self.spec.client_id,
                subject=self.spec.client_id,
                signing_key=secret,
                signing_algorithm=self.spec.signing_alg,
                lifetime_seconds=60,
            )
            try:
                assertion = await signer.create_assertion_provider()(found.issuer)
            except Exception as exc:  # PyJWT: a key that does not load or does not fit the algorithm
                raise self._error(
                    f"cannot sign the client assertion with {self.spec.signing_alg}: {type(exc).__name__}"
                ) from None
            redact.register([assertion], lifetime_s=60)
            data.update(
                client_id=self.spec.client_id,
                client_assertion=assertion,
                client_assertion_type="urn:ietf:params:oauth:client-assertion-type:jwt-bearer",
            )
        elif found.method == "client_secret_post":
            data.update(client_id=self.spec.client_id, client_secret=secret)
        elif found.method == "none":
            data.update(client_id=self.spec.client_id)
        else:  # client_secret_basic, form-encoded first (RFC 6749 §2.3.1)
            basic = httpx2.BasicAuth(quote(self.spec.client_id, safe=""), quote(secret, safe=""))
        where = redact_url(found.token_endpoint)
        try:
            async with httpx2.AsyncClient(timeout=AUTH_SERVER_TIMEOUT_S, follow_redirects=False) as http:
                async with http.stream(
                    "POST", found.token_endpoint, data=data, auth=basic, headers={"accept": "application/json"}
                ) as response:
                    body = await self._body(response, "the token response")
        except httpx2.HTTPError as exc:
            raise self._error(f"cannot reach {where}: {type(exc).__name__}") from None
        if response.status_code not in (200, 201):
            refused = httpx2.Response(response.status_code, content=body)
            raise self._error(f"the authorization server at {where} refused the token request: {_refusal(refused)}")
        try:
            tokens = OAuthToken.model_validate_json(body)
        except ValidationError:
            raise self._error(
                f"the authorization server at {where} answered the token request with something "
                "that is not a bearer token response"
            ) from None
        if not tokens.access_token:
            raise self._error(f"the authorization server at {where} answered with an empty access token")
        lifetime = float(tokens.expires_in) if tokens.expires_in and tokens.expires_in > 0 else 3600.0
        # Scrubbed from logs while it can be used (and a grace after): then it leaves the registry (bounded).
        redact.register([tokens.access_token], lifetime_s=lifetime)
        if tokens.refresh_token:
            redact.register([tokens.refresh_token], lifetime_s=max(lifetime, REFRESH_TOKEN_SCRUB_S))
        self._store(tokens.access_token, scope, lifetime)

    def _store(self, token: str, scope: str | None, lifetime: float) -> None:
        now = time.monotonic()
        self._token, self._scope = token, scope
        self._refresh_at = now + lifetime - refresh_margin_s(lifetime)
        self._discovered_until = now + lifetime
        self.fetched += 1


class BearerAuth(httpx2.Auth):
    """``httpx`` auth of one HTTP transport, on the real requests: the shared token when there is one; after a
    ``401`` (the request was not executed) a token from discovery and the same request once more; after a ``403
    insufficient_scope`` one step-up and the same request once more."""

    def __init__(self, source: TokenSource) -> None:
        self.source = source

    async def async_auth_flow(self, request: httpx2.Request) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        token = await self.source.token()
        if token is not None:
            request.headers["authorization"] = f"Bearer {token}"
        response = yield request
        challenge = Challenge.of(response) if response.status_code in (401, 403) else None
        if challenge is not None and challenge.status == 401:
            token = await self.source.after_401(token, challenge, negotiated_protocol(request))
            request.headers["authorization"] = f"Bearer {token}"
            response = yield request
            challenge = Challenge.of(response) if response.status_code == 403 else None
        if challenge is not None and challenge.status == 403 and challenge.error == "insufficient_scope" and token:
            token = await self.source.step_up(token, challenge)
            request.headers["authorization"] = f"Bearer {token}"
            response = yield request
            if response.status_code == 403:
                raise self.source._error(
                    f"the server still refuses for insufficient scope after one step-up to "
                    f"scope {self.source._scope!r}",
                    status=403,
                )


_sources: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, TokenSource]] = weakref.WeakKeyDictionary()


def token_source(url: str, spec: OAuthClient) -> TokenSource:
    """The one :class:`TokenSource` of this server and OAuth client in the running event loop (its lock is bound
    to one loop)."""
    per_loop = _sources.setdefault(asyncio.get_running_loop(), {})
    key = json.dumps([url, spec.model_dump(mode="json")], sort_keys=True)
    source = per_loop.get(key)
    if source is None:
        source = per_loop[key] = TokenSource(url, spec)
    return source


def bearer_auth(url: str, spec: OAuthClient) -> BearerAuth:
    return BearerAuth(token_source(url, spec))


__all__ = [
    "AUTH_FLOW_TIMEOUT_S",
    "AUTH_SERVER_TIMEOUT_S",
    "BearerAuth",
    "Challenge",
    "Discovered",
    "TokenSource",
    "bearer_auth",
    "negotiated_protocol",
    "read_secret",
    "refresh_margin_s",
    "secure_enough",
    "token_source",
]
