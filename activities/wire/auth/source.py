"""The access token one OAuth client holds for one server (:class:`TokenSource`), and the httpx auth that sends it.

The server speaks first: a request goes with the token held (or none); a ``401`` runs discovery and the grant's token
request, a ``403 insufficient_scope`` one step-up, each followed by the same request once more. A token is replaced
a little before it expires; what discovery found is kept for that token's lifetime.

A DPoP client (``auth.dpop``, :mod:`.dpop`) sends ``Authorization: DPoP`` and a fresh proof with every request; a
``401`` whose challenge is ``error="use_dpop_nonce"`` is sent again once with the server's nonce. A 401 is the
server's refusal before it ran anything (the rule every 401 here follows: RFC 9449 §7.1 and §9 put the proof's check,
nonce included, before the resource is served), so a ``tools/call`` sent again after one is not run twice; any
other answer is never followed by the same request.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator
from typing import Any

import httpx2

from mcp_temporal_tasks.activities.wire import redact
from mcp_temporal_tasks.activities.wire.auth.authorization_code import SubjectTokenSource
from mcp_temporal_tasks.activities.wire.auth.base import NoToken
from mcp_temporal_tasks.activities.wire.auth.discovery import Challenge, Discovered, discover
from mcp_temporal_tasks.activities.wire.auth.dpop import DpopKey, Prover
from mcp_temporal_tasks.activities.wire.auth.grants import Grant, grant_for
from mcp_temporal_tasks.activities.wire.auth.token_endpoint import lifetime_s, request_token
from mcp_temporal_tasks.protocol.tasks import OAuthClient, redact_url
from mcp_temporal_tasks.protocol.wire_errors import AuthorizationRequired

#: Discovery and the token request together (at most 3 + 3 metadata requests and 1 token request).
AUTH_FLOW_TIMEOUT_S = 20.0


def refresh_margin_s(lifetime_s: float) -> float:
    """How long before its expiry a token is replaced: a fifth of its lifetime, between 2 s and 60 s (the 2 s
    cover the whole seconds of ``exp`` and a request's way to the server)."""
    return max(2.0, min(60.0, lifetime_s / 5))


def negotiated_protocol(request: httpx2.Request) -> str | None:
    """Hook: the protocol version the session negotiated, as the transport sends it on every request after
    ``initialize`` (``MCP-Protocol-Version``). None on ``initialize`` itself and on the ``server/discover`` probe
    that precedes it: nothing is negotiated yet (the probe carries the version it offers, not one agreed)."""
    if request.headers.get("mcp-method") == "server/discover":
        return None
    return request.headers.get("mcp-protocol-version")


def _union(a: str | None, b: str | None) -> str | None:
    from mcp.client.auth.utils import union_scopes

    return union_scopes(a, b)


class TokenSource:
    """The access token of one OAuth client for one MCP server, shared by all of that server's sessions."""

    def __init__(self, url: str, spec: OAuthClient) -> None:
        self.url = url
        self.spec = spec
        self.server = redact_url(url)
        self.grant: Grant = grant_for(spec)
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
        #: ``auth.dpop``: this client's key, made when this source is (it lives as long as the tokens bound to it,
        #: in this process's memory only: a new process gets new tokens, bound to a new key).
        self._prover = Prover(DpopKey.generate()) if spec.dpop else None

    # --- what the transport's auth asks for ---------------------------------------------------------------

    def prover(self) -> Prover | None:
        """The DPoP key and nonces the held token is presented with (None: a bearer token)."""
        return self._prover

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

    # --- getting a token --------------------------------------------------------------------------------------

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
        except NoToken as exc:  # from discovery, the grant or the token endpoint, which know neither server nor client
            refused = exc
        else:
            return
        # Raised outside the handler: the unscrubbed reason does not travel along as the error's context.
        raise self._error(refused.reason).with_traceback(refused.__traceback__)

    async def _discover_and_fetch(self, challenge: Challenge, protocol: str | None) -> None:
        self.discoveries += 1
        found = await discover(self.url, self.spec, challenge, protocol, self.grant.method)
        await self._request_token(found, found.scope)
        self._found = found

    async def _request_token(self, found: Discovered, scope: str | None) -> None:
        grant = await self.grant.token_request(found)
        tokens = await request_token(found.token_endpoint, found.resource, scope, grant, dpop=self._prover)
        self._store(tokens.access_token, scope, lifetime_s(tokens))

    def _store(self, token: str, scope: str | None, lifetime: float) -> None:
        now = time.monotonic()
        self._token, self._scope = token, scope
        self._refresh_at = now + lifetime - refresh_margin_s(lifetime)
        self._discovered_until = now + lifetime
        self.fetched += 1


class BearerAuth(httpx2.Auth):
    """``httpx`` auth of one HTTP transport, on the real requests: the shared token when there is one (``Bearer``,
    or ``DPoP`` with a fresh proof); after a ``401`` (the request was not executed) a token from discovery and the
    same request once more; after a DPoP nonce challenge (a ``401`` too) the same request once more with the nonce;
    after a ``403 insufficient_scope`` one step-up and the same request once more. At most four sends of a request,
    each after a refusal."""

    def __init__(self, source: TokenSource | SubjectTokenSource) -> None:
        self.source = source

    def _present(self, request: httpx2.Request, token: str | None) -> None:
        prover = self.source.prover() if token is not None else None
        if token is None:
            return
        if prover is None:
            request.headers["authorization"] = f"Bearer {token}"
            request.headers.pop("dpop", None)  # a grant's binding may have changed since the last send
            return
        request.headers["authorization"] = f"DPoP {token}"
        request.headers["dpop"] = prover.proof(request.method, str(request.url), access_token=token)

    def _nonce_asked(self, request: httpx2.Request, response: httpx2.Response, token: str | None) -> bool:
        """A DPoP nonce challenge to a request that presented a DPoP token: its nonce is kept for the next proofs
        (a challenge without one, or with garbage: the one error naming it, nothing sent again)."""
        prover = self.source.prover() if token is not None else None
        if prover is None or response.status_code != 401 or Challenge.of(response).error != "use_dpop_nonce":
            return False
        try:
            prover.take_nonce(str(request.url), response.headers)
        except NoToken as exc:
            raise self.source._error(exc.reason, status=401) from None
        return True

    def _nonce_again(self) -> AuthorizationRequired:
        return self.source._error(
            "the server asked for a new DPoP nonce again after the request carried the one it gave "
            "(use_dpop_nonce twice): not sent a third time",
            status=401,
        )

    async def async_auth_flow(self, request: httpx2.Request) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        token = await self.source.token()
        self._present(request, token)
        response = yield request
        nonce_sent = authorized = False
        while True:
            if self._nonce_asked(request, response, token):
                if nonce_sent:
                    raise self._nonce_again()
                nonce_sent = True
                self._present(request, token)
                response = yield request
                continue
            if response.status_code == 401 and not authorized:
                authorized = True
                token = await self.source.after_401(token, Challenge.of(response), negotiated_protocol(request))
                self._present(request, token)
                response = yield request
                continue
            break
        challenge = Challenge.of(response) if response.status_code == 403 else None
        if challenge is not None and challenge.error == "insufficient_scope" and token:
            token = await self.source.step_up(token, challenge)
            self._present(request, token)
            response = yield request
            if self._nonce_asked(request, response, token):
                if nonce_sent:
                    raise self._nonce_again()
                self._present(request, token)
                response = yield request
            if response.status_code == 403:
                raise self.source._error(
                    f"the server still refuses for insufficient scope after one step-up to "
                    f"scope {self.source._scope!r}",
                    status=403,
                )
        prover = self.source.prover() if token is not None else None
        if prover is not None and response.status_code < 400:
            prover.note_nonce(str(request.url), response.headers)
