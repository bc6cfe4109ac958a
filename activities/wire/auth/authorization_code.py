"""The authorization-code grant: a subject's consent, its tokens in the token store, refreshed once across processes.

For the server's challenge (a ``401``): discovery (:mod:`.discovery`), then the client identity in the 2026-07-28
order (a configured client id; else the configured CIMD URL where the authorization server supports it; else dynamic
registration, kept per issuer in the store), then the subject's grant for (subject, issuer, resource, client id).
With no usable grant a consent is asked: PKCE S256, ``state``, ``resource`` (RFC 8707), the scope of the challenge or
the metadata (``offline_access`` only where the authorization server lists it, SEP-2207). Who answers it: a consent
handler in the running context (``mcp-tasks login``: the person's browser comes back to a loopback listener; the
answer's ``state`` and ``iss`` (RFC 9207) checked and the code exchanged in this process), else the consent is kept in
the store by its ``state`` for the task that waits for it (:data:`consent_waiter`: its workflow id and bound) and
:class:`ConsentRequired` raised with its URL. The callback that receives the person's answer (:func:`accept_callback`:
``state`` and ``iss`` checked) keeps the code in the store under an opaque id and hands the workflow that id; the code
is exchanged by the task's own activity (:func:`exchange_answer`), or a grant given meanwhile by ``mcp-tasks login``
found (:func:`consent_state`).

The protocol pieces are the ``mcp`` SDK's (``PKCEParameters``, ``get_client_metadata_scopes``, ``union_scopes``,
``validate_authorization_response_iss``, the registration request and response, ``should_use_client_metadata_url``);
the SDK's ``OAuthClientProvider`` itself is not used: it keeps tokens in one process, by server URL, with no subject
and no cross-process refresh (docs/security.md).

Refresh: under the grant's store lock, only if the stored generation is the one this process read (another process
may have refreshed: its token is used); the record is marked "refreshing" before the refresh token is sent, so a
process killed between the authorization server's answer and the store never lets the spent refresh token be sent
again (the next one finds the mark and asks for consent); ``invalid_grant`` marks the grant as needing consent only
if the generation still matches.

DPoP (``auth.dpop``): each consent's code exchange makes a new key (:mod:`.dpop`), kept in the grant's record beside
the tokens bound to it (the store's encryption covers both; a worker that uses the grant signs with it, and a
refresh proves the same key, as the authorization server binds a public client's refresh token to it). A stored grant
whose binding is not what the configuration asks for (bearer where DPoP is set, or the reverse) is not used: a
consent is asked again.
"""

from __future__ import annotations

import asyncio
import contextvars
import os
import secrets
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, quote, urlencode, urljoin, urlsplit

import httpx2

from mcp_temporal_tasks.activities.wire import redact
from mcp_temporal_tasks.activities.wire.auth.base import NoToken, client, read_body
from mcp_temporal_tasks.activities.wire.auth.discovery import Challenge, Discovered, discover
from mcp_temporal_tasks.activities.wire.auth.dpop import DpopKey, Prover
from mcp_temporal_tasks.activities.wire.auth.token_endpoint import TokenRequest, lifetime_s, request_token
from mcp_temporal_tasks.activities.wire.auth.token_store import Store, StoreError, grant_id, open_store
from mcp_temporal_tasks.protocol.tasks import OAuthClient, redact_url
from mcp_temporal_tasks.protocol.wire_errors import AuthorizationRequired, CapabilityUnavailable

#: Discovery, registration and one token request together (not the person's consent).
FLOW_TIMEOUT_S = 20.0


def refresh_margin_s(lifetime_s: float) -> float:
    """How long before its expiry a subject's token is refreshed: a fifth of its lifetime, between 2 s and 60 s
    (as a service's, ``source.refresh_margin_s``: not imported, the layers keep the grants below the source)."""
    return max(2.0, min(60.0, lifetime_s / 5))


#: How long a consent kept for another process waits for its person before its state is forgotten, when no task
#: waits for it (a task's own bound, ``Timeouts.consent_s``, is the consent's lifetime otherwise).
CONSENT_TTL_S = 15 * 60.0
#: How long a callback's answer (the code) waits in the store for the task's activity to exchange it: an
#: authorization code lives at most 10 minutes (RFC 6749 §4.1.2).
ANSWER_TTL_S = 10 * 60.0
#: How many waiting tasks one grant's ``waiting`` record names (the newest).
MAX_WAITING = 256
#: An answer's opaque id: what a callback hands the workflow (never the code).
ANSWER_PREFIX = "answer-"
#: The callback's query, bounded.
MAX_CALLBACK = 8 * 1024

#: Tests only: a file path. The first process (of those given it) to hold the authorization server's refresh answer,
#: not yet stored, creates the file with its pid in it and waits (:data:`TEST_PAUSE_S`) for the test to SIGKILL it:
#: the moment a crash costs the most. The file existing, nobody else pauses.
TEST_PAUSE_ENV = "MCP_TASKS_TEST_PAUSE_AFTER_REFRESH"
TEST_PAUSE_S = 15.0  # under FLOW_TIMEOUT_S: a process nobody kills goes on and stores the answer


async def _test_pause() -> None:
    path = os.environ.get(TEST_PAUSE_ENV)
    if not path:
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    with os.fdopen(fd, "w", encoding="utf-8") as fh:  # the announcement: the test reads the pid, then kills it
        fh.write(f"{os.getpid()}\n")
    await asyncio.sleep(TEST_PAUSE_S)


#: Who answers a consent in this context: given the URL the person opens, it returns the URL their browser was sent
#: back to (``mcp-tasks login``). None: the consent is stored as pending and :class:`ConsentRequired` raised.
consent_handler: contextvars.ContextVar[Callable[[str], Awaitable[str]] | None] = contextvars.ContextVar(
    "consent_handler", default=None
)


#: Who waits for a consent asked in this context: (workflow id, seconds it waits), set by ``start_call``. None: the
#: consent is kept :data:`CONSENT_TTL_S` for whichever process completes it, and names no task.
consent_waiter: contextvars.ContextVar[tuple[str, float] | None] = contextvars.ContextVar(
    "consent_waiter", default=None
)


class ConsentRequired(AuthorizationRequired):
    """No usable grant: a person must open ``url``; ``consent_id`` (its ``state``, also in the URL) is what completes
    it, until ``expires_at`` (epoch seconds). Its kind stays ``AuthorizationRequired`` (a refusal, never resent); its
    info carries ``consent`` (the URL, the grant's opaque id, the state, the expiry: no verifier, no code), which a
    workflow of ``consent-wait`` waits on."""

    def __init__(self, message: str, *, url: str, consent_id: str, grant: str, expires_at: float = 0.0) -> None:
        super().__init__(message, status=401)
        self.url = url
        self.consent_id = consent_id
        self.grant = grant
        self.expires_at = expires_at

    def info(self) -> dict[str, Any]:
        consent = {"url": self.url, "grant": self.grant, "state": self.consent_id, "expires_at": self.expires_at}
        return {**super().info(), "consent": consent}


class AuthorizationCode:
    """The :class:`~.grants.Grant` face of ``type = "authorization_code"``: the client's own secret where one is
    configured (a pre-registered confidential client); the tokens come from :class:`SubjectTokenSource`."""

    def __init__(self, spec: OAuthClient) -> None:
        self.spec = spec

    def read_secret(self) -> str:
        if self.spec.client_secret_env is None:
            return ""
        import os

        value = os.environ.get(self.spec.client_secret_env)
        if not value:
            raise CapabilityUnavailable(
                f"auth client_secret refers to environment variable {self.spec.client_secret_env!r}, which is not set"
            )
        redact.register([value])
        return value

    def method(self, supported: list[str] | None) -> str:
        return choose_method(supported, has_secret=self.spec.client_secret_env is not None)

    async def token_request(self, found: Discovered) -> TokenRequest:
        raise NoToken("the authorization-code grant needs a subject's consent, not a token request of the client alone")


def choose_method(supported: list[str] | None, *, has_secret: bool) -> str:
    """The token endpoint's client authentication: one the metadata offers that this client can do."""
    if not has_secret:
        return "none"
    if supported is None or "client_secret_basic" in supported:
        return "client_secret_basic"
    if "client_secret_post" in supported:
        return "client_secret_post"
    if "none" in supported:
        return "none"
    raise NoToken(
        f"the authorization server supports token endpoint auth methods {', '.join(m[:40] for m in supported[:8])}; "
        "this client has a client secret (client_secret_basic or client_secret_post)"
    )


def client_auth(client_id: str, secret: str | None, method: str) -> tuple[dict[str, str], httpx2.BasicAuth | None]:
    """The form fields and Basic credentials of ``method`` (RFC 6749 §2.3.1: form-encoded before Basic)."""
    if method == "client_secret_basic" and secret:
        return {}, httpx2.BasicAuth(quote(client_id, safe=""), quote(secret, safe=""))
    if method == "client_secret_post" and secret:
        return {"client_id": client_id, "client_secret": secret}, None
    return {"client_id": client_id}, None


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


class SubjectTokenSource:
    """The access token of one subject for one MCP server (same face as :class:`~.source.TokenSource` to
    ``BearerAuth``): from the token store, refreshed there, or asked of the subject by a consent."""

    def __init__(self, url: str, spec: OAuthClient, store: Store | None = None) -> None:
        self.url = url
        self.spec = spec
        self.server = redact_url(url)
        self._store = store
        self._lock = asyncio.Lock()
        self._found: Discovered | None = None
        self._client: dict[str, Any] | None = None
        self._key: tuple[str, str, str, str] | None = None
        self._token: str | None = None
        self._generation = -1
        self._due_at = 0.0
        self._scope: str | None = None
        #: The consent this source last asked for a task (its state, URL, scope, task, expiry): asked again for the
        #: same task while still pending, it is the same consent (one per wait, whatever reads or streams ask).
        self._asked: dict[str, Any] | None = None
        self.fetched = 0
        self.discoveries = 0
        self.step_ups = 0
        self.refreshes = 0
        #: The held token's DPoP key (None: a bearer token), and the servers' nonces (kept across keys).
        self._prover: Prover | None = None
        self._nonces: OrderedDict[str, str] = OrderedDict()

    @property
    def store(self) -> Store:
        if self._store is None:
            try:
                self._store = open_store()
            except StoreError as exc:
                raise self._error(str(exc)) from None
        return self._store

    @property
    def grant(self) -> str | None:
        """The grant's opaque id (what a workflow may carry), once discovery has named the issuer."""
        return grant_id(*self._key) if self._key else None

    def _error(self, reason: str, *, status: int | None = None) -> AuthorizationRequired:
        who = f"subject {self.spec.subject!r}" if self.spec.subject else "no subject"
        return AuthorizationRequired(
            f"no access token for {self.server} ({who}, authorization-code grant): {redact.scrub(reason)}",
            status=status,
        )

    # --- what BearerAuth asks for -------------------------------------------------------------------------

    def prover(self) -> Prover | None:
        return self._prover

    def current(self) -> str | None:
        if self._token is not None and time.time() < self._due_at:
            return self._token
        return None

    async def token(self) -> str | None:
        held = self.current()
        if held is not None or self._key is None:
            return held
        async with self._lock:
            if self.current() is None:
                await self._bounded(self._from_store_or_refresh())
            return self.current()

    async def after_401(self, sent: str | None, challenge: Challenge, protocol: str | None) -> str:
        if not self.spec.subject:
            # A task for nobody never borrows a subject's grant (and there is no service credential to fall to).
            raise self._error("the task names no subject (principal) to act for")
        async with self._lock:
            if self._token is not None and self._token != sent and self.current() is not None:
                return self._token
            await self._bounded(self._discover(challenge, protocol))
            # The stored token, or (when it is the one just refused) a refreshed one.
            await self._bounded(self._from_store_or_refresh(refused=sent))
            if self.current() is None or self._token == sent:
                # No grant, or the grant was refused even fresh (revoked, or for another resource): a consent.
                assert self._found is not None and self._client is not None
                await self._consent(self._scope_for(self._found))
            assert self._token is not None
            return self._token

    async def step_up(self, sent: str, challenge: Challenge) -> str:
        from mcp.client.auth.utils import union_scopes

        async with self._lock:
            if self._token is not None and self._token != sent and self.current() is not None:
                return self._token
            if self._key is not None:
                # A consent given meanwhile elsewhere (a task's callback, a login) may hold the wider grant already.
                record = self.store.read("grant", self._key)
                if record is not None and record.get("access_token") not in (None, sent):
                    self._hold(record)
                    if self.current() is not None:
                        return self._token  # type: ignore[return-value]
            wanted = union_scopes(self._scope, challenge.scope)
            if self._found is None or not challenge.scope or wanted == self._scope:
                raise self._error(
                    f"the server refuses the token for insufficient scope (it names {challenge.scope!r}; "
                    f"the grant has scope {self._scope!r})",
                    status=403,
                )
            self.step_ups += 1
            await self._consent(wanted)
            assert self._token is not None
            return self._token

    # --- the steps ----------------------------------------------------------------------------------------

    async def _bounded(self, work: Awaitable[None]) -> None:
        try:
            await asyncio.wait_for(work, FLOW_TIMEOUT_S)
        except TimeoutError:
            raise self._error(f"discovery, registration and the token request took over {FLOW_TIMEOUT_S:g} s") from None
        except NoToken as exc:
            refused = exc
        except StoreError as exc:
            refused = NoToken(str(exc))
        else:
            return
        raise self._error(refused.reason).with_traceback(refused.__traceback__)

    async def _discover(self, challenge: Challenge, protocol: str | None) -> None:
        self.discoveries += 1
        found = await discover(self.url, self.spec, challenge, protocol, self._method)
        self._found = found
        self._client = await self._client_identity(found)
        self._key = (self.spec.subject or "", found.issuer, found.resource, self._client["client_id"])

    def _method(self, supported: list[str] | None) -> str:
        return choose_method(supported, has_secret=self.spec.client_secret_env is not None)

    def _scope_for(self, found: Discovered) -> str | None:
        from mcp.client.auth.utils import get_client_metadata_scopes

        if self.spec.scope:
            return self.spec.scope
        return get_client_metadata_scopes(
            found.challenge_scope, found.prm, found.metadata, ["authorization_code", "refresh_token"]
        )

    async def _client_identity(self, found: Discovered) -> dict[str, Any]:
        """A configured client id; else the CIMD URL where supported; else the registration kept for this issuer,
        or a new dynamic registration (SEP-2352: credentials keyed by issuer)."""
        from mcp.client.auth.utils import should_use_client_metadata_url

        if self.spec.client_id:
            return {"client_id": self.spec.client_id, "secret_env": self.spec.client_secret_env, "method": found.method}
        if should_use_client_metadata_url(found.metadata, self.spec.client_metadata_url):
            return {"client_id": self.spec.client_metadata_url, "method": "none"}
        key = (found.issuer, self.spec.redirect_uri)
        kept = self.store.read("client", key)
        if kept is not None:
            return kept
        registered = await self._register(found)
        self.store.write("client", key, registered)
        return registered

    async def _register(self, found: Discovered) -> dict[str, Any]:
        from mcp.client.auth.exceptions import OAuthRegistrationError
        from mcp.client.auth.oauth2 import check_registration_usable
        from mcp.client.auth.utils import create_client_registration_request, handle_registration_response
        from mcp.shared.auth import OAuthClientMetadata

        metadata = found.metadata
        supported = metadata.token_endpoint_auth_methods_supported if metadata is not None else None
        if supported is not None and "none" in supported:
            wanted = "none"
        elif supported is not None and "client_secret_post" in supported and "client_secret_basic" not in supported:
            wanted = "client_secret_post"
        else:
            wanted = "client_secret_basic"
        meta = OAuthClientMetadata.model_validate(
            {
                "redirect_uris": [self.spec.redirect_uri],
                "token_endpoint_auth_method": wanted,
                "grant_types": ["authorization_code", "refresh_token"],
                "response_types": ["code"],
                "client_name": "mcp-tasks",
                "scope": self._scope_for(found),
            }
        )
        if metadata is not None and metadata.registration_endpoint is None:
            raise NoToken(
                f"authorization server {found.issuer} offers no dynamic client registration, and no client id "
                "(auth.client_id) or client metadata document (auth.client_metadata_url) is configured"
            )
        request = create_client_registration_request(metadata, meta, _origin(found.issuer))
        try:
            async with client() as http:
                response = await http.send(request, stream=True)
                try:
                    body = await read_body(response, "the registration response")
                finally:
                    await response.aclose()
        except httpx2.HTTPError as exc:
            raise NoToken(f"cannot reach the registration endpoint: {type(exc).__name__}") from None
        try:
            info = await handle_registration_response(
                httpx2.Response(response.status_code, content=body, request=request)
            )
            check_registration_usable(info)
        except OAuthRegistrationError as exc:
            raise NoToken(f"dynamic client registration failed: {str(exc)[:300]}") from None
        if info.client_secret:
            redact.register([info.client_secret])
        return {
            "client_id": info.client_id,
            "secret": info.client_secret,
            "method": info.token_endpoint_auth_method or ("client_secret_basic" if info.client_secret else "none"),
        }

    def _client_auth(self) -> tuple[dict[str, str], httpx2.BasicAuth | None]:
        assert self._client is not None
        secret = self._client.get("secret")
        if self._client.get("secret_env"):
            secret = AuthorizationCode(self.spec).read_secret()
        return client_auth(self._client["client_id"], secret, self._client["method"])

    # --- the grant in the store ---------------------------------------------------------------------------

    def _fits(self, record: dict[str, Any]) -> bool:
        """Whether a stored grant's binding is the configured one (DPoP or bearer)."""
        return bool(record.get("dpop_jwk")) == self.spec.dpop

    def _prover_of(self, record: dict[str, Any]) -> Prover | None:
        jwk = record.get("dpop_jwk")
        if not jwk:
            return None
        if isinstance(jwk, dict) and isinstance(jwk.get("d"), str):
            redact.register([jwk["d"]])
        return Prover(DpopKey.from_jwk(jwk if isinstance(jwk, dict) else {}), self._nonces)

    def _hold(self, record: dict[str, Any] | None) -> None:
        if record is None or record.get("needs_consent") or not record.get("access_token") or not self._fits(record):
            self._token, self._due_at, self._prover = None, 0.0, None
            return
        self._prover = self._prover_of(record)
        self._token = record["access_token"]
        self._generation = int(record.get("generation", 0))
        self._scope = record.get("scope")
        self._due_at = float(record.get("expires_at", 0)) - refresh_margin_s(float(record.get("lifetime", 3600)))
        redact.register([self._token])

    async def _from_store_or_refresh(self, refused: str | None = None) -> None:
        """The stored token; refreshed when it is due, or when it is ``refused``, the one the server just refused
        (an access token revoked before its time: its grant may still refresh)."""
        assert self._key is not None
        record = self.store.read("grant", self._key)
        self._hold(record)
        if record is None or record.get("needs_consent") or not record.get("refresh_token") or not self._fits(record):
            return
        if self.current() is not None and (refused is None or self._token != refused):
            return
        await self._refresh(int(record.get("generation", 0)))

    async def _refresh(self, seen: int) -> None:
        assert self._key is not None and self._found is not None
        async with self.store.locked("grant", self._key):
            record = self.store.read("grant", self._key)
            if record is None or record.get("needs_consent") or int(record.get("generation", 0)) != seen:
                self._hold(record)  # another process refreshed (or lost) the grant meanwhile: theirs stands
                return
            if record.get("refreshing"):
                # A process died between sending this refresh token and storing the answer: it may be spent.
                self._mark_needs_consent(record, "a refresh was interrupted; the refresh token is not sent twice")
                self._hold(None)
                return
            self.store.write("grant", self._key, {**record, "refreshing": True})
            fields, basic = self._client_auth()
            redact.register([record["refresh_token"]])
            try:
                tokens = await request_token(
                    self._found.token_endpoint,
                    self._found.resource,
                    None,
                    TokenRequest("refresh_token", {"refresh_token": record["refresh_token"], **fields}, basic),
                    dpop=self._prover_of(record),
                )
            except NoToken as exc:
                if exc.oauth_error is not None:
                    # The authorization server answered: this refresh token was not rotated by this request.
                    if exc.oauth_error == "invalid_grant":
                        self._mark_needs_consent(record, exc.reason)
                    else:
                        self.store.write("grant", self._key, {**record, "refreshing": False})
                self._hold(None)
                return
            await _test_pause()
            self.refreshes += 1
            self._save(
                tokens, record.get("scope"), generation=seen + 1, previous=record, dpop_jwk=record.get("dpop_jwk")
            )

    def _mark_needs_consent(self, record: dict[str, Any], why: str) -> None:
        assert self._key is not None
        self.store.write(
            "grant",
            self._key,
            {
                "generation": int(record.get("generation", 0)) + 1,
                "needs_consent": True,
                "why": redact.scrub(why)[:300],
                "scope": record.get("scope"),
            },
        )

    def _save(
        self,
        tokens: Any,
        scope: str | None,
        *,
        generation: int,
        previous: dict[str, Any] | None,
        dpop_jwk: dict[str, str] | None = None,
    ) -> None:
        assert self._key is not None
        record = {
            "generation": generation,
            "access_token": tokens.access_token,
            "refresh_token": tokens.refresh_token or (previous or {}).get("refresh_token"),
            "expires_at": time.time() + lifetime_s(tokens),
            "lifetime": lifetime_s(tokens),
            "scope": tokens.scope or scope,
            "refreshing": False,
            "dpop_jwk": dpop_jwk,
        }
        self.store.write("grant", self._key, record)
        self.fetched += 1
        self._hold(record)

    # --- consent --------------------------------------------------------------------------------------------

    async def _consent(self, scope: str | None) -> None:
        from mcp.client.auth.oauth2 import PKCEParameters

        assert self._found is not None and self._client is not None and self._key is not None
        found = self._found
        pkce = PKCEParameters.generate()
        state = secrets.token_urlsafe(32)
        endpoint = (
            str(found.metadata.authorization_endpoint)
            if found.metadata is not None and found.metadata.authorization_endpoint
            else urljoin(_origin(found.issuer), "/authorize")
        )
        params = {
            "response_type": "code",
            "client_id": self._client["client_id"],
            "redirect_uri": self.spec.redirect_uri,
            "state": state,
            "code_challenge": pkce.code_challenge,
            "code_challenge_method": "S256",
            "resource": found.resource,
        }
        if scope:
            params["scope"] = scope
            if "offline_access" in scope.split():
                params["prompt"] = "consent"  # OIDC: offline_access is granted only with a consent prompt
        url = f"{endpoint}{'&' if '?' in endpoint else '?'}{urlencode(params)}"
        pending = {
            "verifier": pkce.code_verifier,
            "scope": scope,
            "metadata": found.metadata.model_dump(mode="json") if found.metadata is not None else None,
            "key": list(self._key),
        }
        handler = consent_handler.get()
        if handler is None:
            # No person here (a worker's activity): the consent is kept by its state, bounded in time, for
            # whichever process the person's browser comes back to (accept_callback), and the task says so.
            waiter = consent_waiter.get()
            self._same_consent_again(scope, waiter)
            ttl_s = waiter[1] if waiter else CONSENT_TTL_S
            self.store.write(
                "consent",
                (state,),
                {
                    **pending,
                    "url": self.url,
                    "spec": self.spec.model_dump(mode="json"),
                    "issuer": found.issuer,
                    "token_endpoint": found.token_endpoint,
                    "resource": found.resource,
                    "client": self._client,
                    "workflow_id": waiter[0] if waiter else None,
                    # A grant newer than this one (a login meanwhile) is what the waiting task looks for.
                    "seen_generation": int((self.store.read("grant", self._key) or {}).get("generation", 0)),
                },
                ttl_s=ttl_s,
            )
            gid = grant_id(*self._key)
            if waiter is not None:
                await self._note_waiting(gid, waiter[0], ttl_s)
            self._asked = {"state": state, "url": url, "scope": scope, "task": waiter and waiter[0]}
            self._asked["expires_at"] = time.time() + ttl_s
            raise ConsentRequired(
                f"{self.server} needs the consent of subject {self.spec.subject!r}: open {url} (then "
                "`mcp-tasks login --callback URL` with the URL the browser was sent back to), or run "
                f"`mcp-tasks login SERVER --subject {self.spec.subject}`",
                url=url,
                consent_id=state,
                grant=gid,
                expires_at=time.time() + ttl_s,
            )
        callback = await handler(url)
        await self._bounded(self._complete(callback, state, pending))

    def _same_consent_again(self, scope: str | None, waiter: tuple[str, float] | None) -> None:
        """Raises the consent already asked for the same task (same scope) while it is still pending, unanswered:
        a wait's reads, retries and its session's streams each asking anew would leave one pending consent (and one
        URL) per ask, the person not knowing which one the task waits for."""
        asked = self._asked
        if asked is None or waiter is None or asked["task"] != waiter[0] or asked["scope"] != scope:
            return
        if asked["expires_at"] <= time.time() or self._key is None:
            return
        record = self.store.read("consent", (asked["state"],))
        if record is None or record.get("answered"):
            return
        raise ConsentRequired(
            f"{self.server} needs the consent of subject {self.spec.subject!r} (asked already): open {asked['url']}",
            url=asked["url"],
            consent_id=asked["state"],
            grant=grant_id(*self._key),
            expires_at=asked["expires_at"],
        )

    async def _note_waiting(self, grant: str, workflow_id: str, ttl_s: float) -> None:
        """Who waits for this grant (the store's ``waiting`` record, by the grant's opaque id): what a login that
        gives it reads to wake them. Bounded: the newest :data:`MAX_WAITING` tasks, each until its own bound."""
        async with self.store.locked("waiting", (grant,)):
            now = time.time()
            kept = (self.store.read("waiting", (grant,)) or {}).get("tasks") or {}
            tasks = {w: t for w, t in kept.items() if isinstance(t, (int, float)) and t > now}
            tasks[workflow_id] = now + ttl_s
            newest = dict(sorted(tasks.items(), key=lambda wt: wt[1])[-MAX_WAITING:])
            self.store.write("waiting", (grant,), {"tasks": newest}, ttl_s=max(newest.values()) - now)

    async def _complete(self, callback: str, state: str, pending: dict[str, Any]) -> None:
        assert self._found is not None
        query = callback_params(callback)
        got_state = query.get("state")
        if got_state is None or not secrets.compare_digest(got_state, state):
            raise NoToken("the authorization response's state is not the one this consent sent")
        await self._exchange(checked_code(query, pending), pending)

    async def _exchange(self, code: str, pending: dict[str, Any]) -> None:
        """The authorization code for tokens, with the consent's PKCE verifier; the grant stored (next generation)."""
        assert self._found is not None
        redact.register([code], lifetime_s=600)
        fields, basic = self._client_auth()
        key = DpopKey.generate() if self.spec.dpop else None  # a new grant, a new key
        tokens = await request_token(
            self._found.token_endpoint,
            self._found.resource,
            None,
            TokenRequest(
                "authorization_code",
                {"code": code, "redirect_uri": self.spec.redirect_uri, "code_verifier": pending["verifier"], **fields},
                basic,
            ),
            dpop=Prover(key, self._nonces) if key is not None else None,
        )
        assert self._key is not None
        async with self.store.locked("grant", self._key):
            previous = self.store.read("grant", self._key)
            generation = int((previous or {}).get("generation", 0)) + 1
            self._save(
                tokens,
                pending.get("scope"),
                generation=generation,
                previous=None,
                dpop_jwk=key.private_jwk() if key is not None else None,
            )
        self._scope = pending.get("scope") or self._scope


def checked_code(query: dict[str, str], pending: dict[str, Any]) -> str:
    """The code of an authorization response whose ``state`` was matched: its ``iss`` per RFC 9207 (against the
    metadata kept with the consent), the authorization server's refusal named, a missing code named."""
    from mcp.client.auth.exceptions import OAuthFlowError
    from mcp.client.auth.utils import validate_authorization_response_iss
    from mcp.shared.auth import OAuthMetadata

    metadata = OAuthMetadata.model_validate(pending["metadata"]) if pending.get("metadata") else None
    try:
        validate_authorization_response_iss(query.get("iss"), metadata)
    except OAuthFlowError as exc:
        raise NoToken(f"the authorization response fails RFC 9207: {str(exc)[:200]}") from None
    if "error" in query:
        desc = query.get("error_description")
        why = query["error"][:100] + (f" ({desc[:200]})" if desc else "")
        raise NoToken(f"the authorization server refused consent: {why}")
    code = query.get("code")
    if not code:
        raise NoToken("the authorization response carries no code")
    if len(code) > 2048:
        raise NoToken("the authorization response's code is longer than 2048 characters")
    return code


def callback_params(callback: str) -> dict[str, str]:
    """The query of the URL the person's browser was sent back to (or the query alone), one value per name."""
    if len(callback) > MAX_CALLBACK:
        raise NoToken(f"the authorization response is larger than {MAX_CALLBACK} bytes")
    query = urlsplit(callback).query if "://" in callback or callback.startswith("/") else callback.lstrip("?")
    parsed = parse_qs(query, keep_blank_values=True)
    return {k: v[0] for k, v in parsed.items() if v}


def _pending_of(query: dict[str, str], store: Store) -> tuple[str, dict[str, Any]]:
    state = query.get("state") or ""
    pending = store.read("consent", (state,)) if 0 < len(state) <= 512 else None
    if pending is None:
        raise AuthorizationRequired(
            "the authorization response's state names no pending consent (unknown, already used, or past its "
            "task's consent bound)",
            status=None,
        )
    return state, pending


def _source_of(pending: dict[str, Any], store: Store) -> SubjectTokenSource:
    """A token source standing where the consent was asked (discovery and client identity as kept with it)."""
    from mcp.shared.auth import OAuthMetadata

    src = SubjectTokenSource(pending["url"], OAuthClient.model_validate(pending["spec"]), store)
    client_info = pending["client"]
    src._found = Discovered(
        issuer=pending["issuer"],
        token_endpoint=pending["token_endpoint"],
        resource=pending["resource"],
        scope=pending.get("scope"),
        method=client_info["method"],
        advertised_scope=None,
        metadata=OAuthMetadata.model_validate(pending["metadata"]) if pending.get("metadata") else None,
    )
    src._client = client_info
    src._key = (pending["key"][0], pending["key"][1], pending["key"][2], pending["key"][3])
    return src


@dataclass(frozen=True)
class Answered:
    """A consent's answer accepted by a callback: the opaque id it is kept under, and whom to hand it."""

    #: What the waiting workflow is handed (the code stays in the store under it).
    ref: str
    grant: str
    #: The workflow that asked for the consent (None: a consent no task waits for).
    workflow_id: str | None


def accept_callback(callback: str, *, store: Store) -> Answered:
    """A callback's answer to a pending consent, checked and kept (a service's web callback, ``mcp-tasks login
    --callback``): its ``state`` must name a pending consent not answered yet, its ``iss`` pass RFC 9207; a refusal
    by the authorization server (``error=``) is kept too, so the task ends naming it. The code goes to the store
    under a new opaque id (:data:`ANSWER_TTL_S`), never further; the task's own activity exchanges it
    (:func:`exchange_answer`). A wrong ``state`` or ``iss`` raises ``AuthorizationRequired`` naming it and changes
    nothing: the task keeps waiting."""
    try:
        query = callback_params(callback)
    except NoToken as exc:
        raise AuthorizationRequired(exc.reason, status=None) from None
    state, pending = _pending_of(query, store)
    if pending.get("answered"):
        raise AuthorizationRequired("this consent was already answered (a callback is used once)", status=None)
    refusal: str | None = None
    try:
        code: str | None = checked_code(query, pending)
    except NoToken as exc:
        if "refused consent" not in exc.reason:
            raise AuthorizationRequired(exc.reason, status=None) from None
        code, refusal = None, exc.reason
    ref = ANSWER_PREFIX + secrets.token_urlsafe(24)
    store.write("answer", (ref,), {"state": state, "code": code, "refusal": refusal}, ttl_s=ANSWER_TTL_S)
    left = float(pending.get("_expires_at", 0)) - time.time()
    store.write(
        "consent",
        (state,),
        {k: v for k, v in pending.items() if not k.startswith("_")} | {"answered": ref},
        ttl_s=max(1.0, left),
    )
    return Answered(ref=ref, grant=grant_id(*pending["key"]), workflow_id=pending.get("workflow_id"))


async def exchange_answer(ref: str, *, store: Store, state: str | None = None) -> str:
    """A kept answer's code exchanged for the grant (the task's activity: never the callback's process, never
    workflow code); the answer and its consent forgotten whatever follows. Returns the grant's id; raises
    ``AuthorizationRequired`` naming why not (the authorization server refused consent, the answer or its consent
    expired, the token endpoint refused the code). ``state``: the consent the caller waits for; an answer to another
    raises ``ValueError`` and is left as it was."""
    answer = store.read("answer", (ref,)) if ref.startswith(ANSWER_PREFIX) and len(ref) <= 128 else None
    if answer is None:
        raise AuthorizationRequired(
            f"the consent's answer {ref[:60]!r} is not in the token store (unknown, already exchanged, or older "
            f"than {ANSWER_TTL_S:g} s)",
            status=None,
        )
    if state is not None and not secrets.compare_digest(str(answer.get("state") or ""), state):
        raise ValueError("the answer belongs to another consent")
    store.delete("answer", (ref,))
    state = str(answer.get("state") or "")
    pending = store.read("consent", (state,))
    store.delete("consent", (state,))
    if answer.get("refusal"):
        raise AuthorizationRequired(str(answer["refusal"])[:400], status=None)
    if pending is None or not answer.get("code"):
        raise AuthorizationRequired("the consent this answer belongs to has expired", status=None)
    src = _source_of(pending, store)
    await src._bounded(src._exchange(str(answer["code"]), pending))
    return grant_id(*src._key)  # type: ignore[misc]


def consent_state(state: str, *, store: Store) -> tuple[str | None, bool]:
    """What became of a pending consent, read without any token request: the id of its answer when a callback
    answered it (to exchange), and whether its subject's grant is usable now (given meanwhile by ``mcp-tasks login
    SERVER --subject S``, or by another task's consent). A consent no longer kept: (None, False)."""
    pending = store.read("consent", (state,)) if 0 < len(state) <= 512 else None
    if pending is None:
        return None, False
    answered = pending.get("answered")
    key = tuple(str(k) for k in pending.get("key") or ())
    grant = store.read("grant", key) if len(key) == 4 else None
    usable = bool(
        grant
        and int(grant.get("generation", 0)) > int(pending.get("seen_generation", 0))
        and not grant.get("needs_consent")
        and (grant.get("access_token") or grant.get("refresh_token"))
    )
    return (answered if isinstance(answered, str) else None), usable


def waiting_for(grant: str, *, store: Store) -> list[str]:
    """The workflow ids of the tasks waiting for ``grant`` (their consent not past its bound)."""
    record = store.read("waiting", (grant,)) if grant.startswith("grant-") and len(grant) <= 128 else None
    now = time.time()
    tasks = (record or {}).get("tasks") or {}
    return [w for w, t in tasks.items() if isinstance(t, (int, float)) and t > now]
