"""The authorization-code grant: a subject's consent, its tokens in the token store, refreshed once across processes.

For the server's challenge (a ``401``): discovery (:mod:`.discovery`), then the client identity in the 2026-07-28
order (a configured client id; else the configured CIMD URL where the authorization server supports it; else dynamic
registration, kept per issuer in the store), then the subject's grant for (subject, issuer, resource, client id).
With no usable grant a consent is asked: PKCE S256, ``state``, ``resource`` (RFC 8707), the scope of the challenge or
the metadata (``offline_access`` only where the authorization server lists it, SEP-2207). Who answers it: a consent
handler in the running context (``mcp-tasks login``: the person's browser comes back to a loopback listener), else the
task fails with :class:`ConsentRequired` naming it (a durable pending consent completed from another process is not
written yet). The answer's ``state`` and ``iss`` (RFC 9207) are checked and the code exchanged in this process.

The protocol pieces are the ``mcp`` SDK's (``PKCEParameters``, ``get_client_metadata_scopes``, ``union_scopes``,
``validate_authorization_response_iss``, the registration request and response, ``should_use_client_metadata_url``);
the SDK's ``OAuthClientProvider`` itself is not used: it keeps tokens in one process, by server URL, with no subject
and no cross-process refresh (docs/security.md).

Refresh: under the grant's store lock, only if the stored generation is the one this process read (another process
may have refreshed: its token is used); the record is marked "refreshing" before the refresh token is sent, so a
process killed between the authorization server's answer and the store never lets the spent refresh token be sent
again (the next one finds the mark and asks for consent); ``invalid_grant`` marks the grant as needing consent only
if the generation still matches.
"""

from __future__ import annotations

import asyncio
import contextvars
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qs, quote, urlencode, urljoin, urlsplit

import httpx2

from mcp_temporal_tasks.activities.wire import redact
from mcp_temporal_tasks.activities.wire.auth.base import NoToken, client, read_body
from mcp_temporal_tasks.activities.wire.auth.discovery import Challenge, Discovered, discover
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


#: How long a consent kept for another process waits for its person before its state is forgotten.
CONSENT_TTL_S = 15 * 60.0
#: The callback's query, bounded.
MAX_CALLBACK = 8 * 1024

#: Who answers a consent in this context: given the URL the person opens, it returns the URL their browser was sent
#: back to (``mcp-tasks login``). None: the consent is stored as pending and :class:`ConsentRequired` raised.
consent_handler: contextvars.ContextVar[Callable[[str], Awaitable[str]] | None] = contextvars.ContextVar(
    "consent_handler", default=None
)


class ConsentRequired(AuthorizationRequired):
    """No usable grant: a person must open ``url``; ``consent_id`` (its ``state``) is what completes it. Its kind
    stays ``AuthorizationRequired``: the workflow's decisions take it as a refusal, never resent."""

    def __init__(self, message: str, *, url: str, consent_id: str, grant: str) -> None:
        super().__init__(message, status=401)
        self.url = url
        self.consent_id = consent_id
        self.grant = grant


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
        self.fetched = 0
        self.discoveries = 0
        self.step_ups = 0
        self.refreshes = 0

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

    def _hold(self, record: dict[str, Any] | None) -> None:
        if record is None or record.get("needs_consent") or not record.get("access_token"):
            self._token, self._due_at = None, 0.0
            return
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
        if record is None or record.get("needs_consent") or not record.get("refresh_token"):
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
            self.refreshes += 1
            self._save(tokens, record.get("scope"), generation=seen + 1, previous=record)

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

    def _save(self, tokens: Any, scope: str | None, *, generation: int, previous: dict[str, Any] | None) -> None:
        assert self._key is not None
        record = {
            "generation": generation,
            "access_token": tokens.access_token,
            "refresh_token": tokens.refresh_token or (previous or {}).get("refresh_token"),
            "expires_at": time.time() + lifetime_s(tokens),
            "lifetime": lifetime_s(tokens),
            "scope": tokens.scope or scope,
            "refreshing": False,
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
            # whichever process the person's browser comes back to (complete_consent), and the task says so.
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
                },
                ttl_s=CONSENT_TTL_S,
            )
            raise ConsentRequired(
                f"{self.server} needs the consent of subject {self.spec.subject!r}: open {url} (then "
                "`mcp-tasks login --callback URL` with the URL the browser was sent back to), or run "
                f"`mcp-tasks login SERVER --subject {self.spec.subject}`",
                url=url,
                consent_id=state,
                grant=grant_id(*self._key),
            )
        callback = await handler(url)
        await self._bounded(self._complete(callback, state, pending))

    async def _complete(self, callback: str, state: str, pending: dict[str, Any]) -> None:
        from mcp.client.auth.exceptions import OAuthFlowError
        from mcp.client.auth.utils import validate_authorization_response_iss
        from mcp.shared.auth import OAuthMetadata

        assert self._found is not None
        query = callback_params(callback)
        got_state = query.get("state")
        if got_state is None or not secrets.compare_digest(got_state, state):
            raise NoToken("the authorization response's state is not the one this consent sent")
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
        redact.register([code], lifetime_s=600)
        fields, basic = self._client_auth()
        tokens = await request_token(
            self._found.token_endpoint,
            self._found.resource,
            None,
            TokenRequest(
                "authorization_code",
                {"code": code, "redirect_uri": self.spec.redirect_uri, "code_verifier": pending["verifier"], **fields},
                basic,
            ),
        )
        assert self._key is not None
        async with self.store.locked("grant", self._key):
            previous = self.store.read("grant", self._key)
            generation = int((previous or {}).get("generation", 0)) + 1
            self._save(tokens, pending.get("scope"), generation=generation, previous=None)
        self._scope = pending.get("scope") or self._scope


def callback_params(callback: str) -> dict[str, str]:
    """The query of the URL the person's browser was sent back to (or the query alone), one value per name."""
    if len(callback) > MAX_CALLBACK:
        raise NoToken(f"the authorization response is larger than {MAX_CALLBACK} bytes")
    query = urlsplit(callback).query if "://" in callback or callback.startswith("/") else callback.lstrip("?")
    parsed = parse_qs(query, keep_blank_values=True)
    return {k: v[0] for k, v in parsed.items() if v}


async def complete_consent(callback: str, *, store: Store | None = None) -> str:
    """Complete a consent a task asked for, in whichever process the person's browser came back to (``mcp-tasks
    login --callback``, or a service's own web callback): ``callback`` is that URL (or its query). Its ``state`` must
    name a pending consent (once: it is forgotten here), its ``iss`` pass RFC 9207, and the code is exchanged with
    the PKCE verifier kept for it. Returns the grant's id."""
    from mcp.shared.auth import OAuthMetadata

    store = store or open_store()
    try:
        query = callback_params(callback)
    except NoToken as exc:
        raise AuthorizationRequired(exc.reason, status=None) from None
    state = query.get("state") or ""
    pending = store.read("consent", (state,)) if 0 < len(state) <= 512 else None
    if pending is None:
        raise AuthorizationRequired(
            "the authorization response's state names no pending consent (unknown, already used, or older than "
            f"{CONSENT_TTL_S:g} s)",
            status=None,
        )
    store.delete("consent", (state,))  # one use, whatever follows
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
    await src._bounded(src._complete(callback, state, pending))
    return grant_id(*src._key)
