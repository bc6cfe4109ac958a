"""Enterprise-managed authorization (SEP-990, cross-app access): a subject's IdP ID token exchanged for an ID-JAG.

Two legs, both at token endpoints, for each access token: (1) the subject's identity-provider ID token is exchanged at
the IdP's token endpoint for an Identity Assertion JWT Authorization Grant (RFC 8693 token exchange, ``audience`` the
MCP server's authorization server, ``resource`` the MCP server); (2) the ID-JAG is presented there with the JWT-bearer
grant (RFC 7523) and this app's client credentials. The ID token is the subject's: handed over once with
``mcp-tasks login SERVER --subject S --id-token-file FILE`` (:func:`hand_over_id_token`), kept encrypted in the token
store by (subject, IdP issuer) until its ``exp``, read at each exchange; a workflow carries only the principal. A task
with no subject gets nothing here, and a subject's task never falls back to the app's own credentials (this grant
has no service token). Why this module and not the SDK's ``IdentityAssertionOAuthProvider`` or authlib:
docs/security.md ("Enterprise-managed authorization").
"""

from __future__ import annotations

import json
import os
import time
from typing import TYPE_CHECKING
from urllib.parse import quote, urlsplit

import httpx2

from mcp_temporal_tasks.activities.wire import redact
from mcp_temporal_tasks.activities.wire.auth.base import MAX_JWT, NoToken, jwt_claims
from mcp_temporal_tasks.activities.wire.auth.discovery import secure_enough
from mcp_temporal_tasks.activities.wire.auth.token_endpoint import TokenRequest, post_form
from mcp_temporal_tasks.activities.wire.auth.token_store import Store, StoreError, open_store
from mcp_temporal_tasks.protocol.tasks import OAuthClient, redact_url

if TYPE_CHECKING:
    from mcp_temporal_tasks.activities.wire.auth.discovery import Discovered

TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
ID_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:id_token"
ID_JAG_TYPE = "urn:ietf:params:oauth:token-type:id-jag"
#: The token store's kind of record for a subject's identity-provider ID token, keyed by (subject, IdP issuer).
ID_TOKEN_KIND = "idp-id-token"


def _issuer_match(a: str, b: str) -> bool:
    from mcp.client.auth.utils import issuers_match

    return issuers_match(a, b)


def hand_over_id_token(spec: OAuthClient, subject: str, token: str, store: Store | None = None) -> float:
    """Keep ``subject``'s identity-provider ID token for ``spec``'s IdP in the token store; its ``exp``. Checked
    first (not its signature: the IdP checks that at each exchange): a JWT no larger than ``base.MAX_JWT``, not
    expired, issued by ``spec.idp_issuer``. Raises :class:`NoToken` saying what is wrong, ``StoreError``."""
    token = token.strip()
    if not token:
        raise NoToken("the ID token is empty")
    claims = jwt_claims(token, "the ID token")
    issuer = claims.get("iss")
    if not isinstance(issuer, str) or not _issuer_match(issuer, spec.idp_issuer or ""):
        raise NoToken(
            f"the ID token is issued by {str(issuer)[:200]!r}, not by the configured idp_issuer {spec.idp_issuer}"
        )
    exp = claims.get("exp")
    if not isinstance(exp, (int, float)):
        raise NoToken("the ID token has no exp: it would be kept forever")
    redact.register([token], lifetime_s=max(60.0, float(exp) - time.time()))
    (store or open_store()).write(
        ID_TOKEN_KIND, (subject, spec.idp_issuer or ""), {"id_token": token, "exp": float(exp)}
    )
    return float(exp)


def _audience(issuer: str) -> str:
    """The authorization server's issuer as its metadata wrote it: pydantic's URL adds ``/`` to a bare origin."""
    parts = urlsplit(issuer)
    return issuer[:-1] if parts.path == "/" and not parts.query else issuer


class EnterpriseManaged:
    """``type = "enterprise_managed"``: this app's client at the MCP server's authorization server (``client_id``
    and ``client_secret_env``, authenticated with ``token_endpoint_auth_method``) and at the subject's IdP
    (``idp_client_id``, ``idp_client_secret_env`` optional), the IdP's ``idp_issuer`` and ``idp_token_endpoint``."""

    def __init__(self, spec: OAuthClient) -> None:
        self.spec = spec
        self.client_id = spec.client_id or ""  # required for this type (OAuthClient checks)

    def _env_secret(self, var: str | None, what: str) -> str:
        value = os.environ.get(var or "")
        if not value:
            raise NoToken(f"{what} refers to environment variable {var!r}, which is not set")
        redact.register([value, *value.splitlines()])
        return value

    def read_secret(self) -> str:
        return self._env_secret(self.spec.client_secret_env, "auth client_secret")

    def method(self, supported: list[str] | None) -> str:
        if self.spec.token_endpoint_auth_method is not None:
            return self.spec.token_endpoint_auth_method
        if supported is None or "client_secret_basic" in supported:
            return "client_secret_basic"
        if "client_secret_post" in supported:
            return "client_secret_post"
        raise NoToken(
            f"the authorization server supports token endpoint auth methods "
            f"{', '.join(m[:40] for m in supported[:8]) or 'none'}; this client has a client secret "
            "(client_secret_basic or client_secret_post)"
        )

    def _id_token(self) -> str:
        subject = self.spec.subject
        if not subject:
            raise NoToken("a task with no subject (principal) has no identity-provider token to act with")
        try:
            record = open_store().read(ID_TOKEN_KIND, (subject, self.spec.idp_issuer or ""))
        except StoreError as exc:
            raise NoToken(f"token store: {exc}") from None
        token = record.get("id_token") if record else None
        exp = record.get("exp") if record else None
        if not isinstance(token, str) or not token:
            raise NoToken(
                f"subject {subject!r} has handed over no ID token of {self.spec.idp_issuer} "
                "(`mcp-tasks login SERVER --subject S --id-token-file FILE`)"
            )
        if isinstance(exp, (int, float)) and exp <= time.time():
            raise NoToken(
                f"subject {subject!r}'s ID token of {self.spec.idp_issuer} has expired: hand over a new one "
                "(`mcp-tasks login SERVER --subject S --id-token-file FILE`)"
            )
        redact.register([token], lifetime_s=max(60.0, float(exp or 0) - time.time()))
        return token

    async def exchange(self, found: Discovered) -> str:
        """Leg 1: the subject's ID token for an ID-JAG at the IdP, for ``found``'s authorization server and resource."""
        endpoint = self.spec.idp_token_endpoint or ""
        if not secure_enough(endpoint):
            raise NoToken(f"the identity provider's token endpoint {redact_url(endpoint)} is not https")
        data = {
            "grant_type": TOKEN_EXCHANGE,
            "requested_token_type": ID_JAG_TYPE,
            "audience": _audience(found.issuer),
            "resource": found.resource,
            "subject_token": self._id_token(),
            "subject_token_type": ID_TOKEN_TYPE,
        }
        if found.scope:
            data["scope"] = found.scope
        basic = None
        if self.spec.idp_client_secret_env:
            secret = self._env_secret(self.spec.idp_client_secret_env, "auth idp_client_secret")
            basic = httpx2.BasicAuth(quote(self.spec.idp_client_id or "", safe=""), quote(secret, safe=""))
        elif self.spec.idp_client_id:
            data["client_id"] = self.spec.idp_client_id
        body = await post_form(endpoint, data, basic, "the identity provider")
        where = redact_url(endpoint)
        try:
            answer = json.loads(body)
        except ValueError:
            answer = None
        jag = answer.get("access_token") if isinstance(answer, dict) else None
        if not isinstance(answer, dict) or not isinstance(jag, str) or not jag:
            raise NoToken(
                f"the identity provider at {where} answered the token exchange with something that is not one"
            )
        if answer.get("issued_token_type") != ID_JAG_TYPE:
            raise NoToken(
                f"the identity provider at {where} issued a {str(answer.get('issued_token_type'))[:100]!r}, "
                f"not an ID-JAG ({ID_JAG_TYPE})"
            )
        if len(jag) > MAX_JWT:
            raise NoToken(f"the identity provider at {where} issued an ID-JAG larger than {MAX_JWT} bytes")
        claims = jwt_claims(jag, f"the ID-JAG from {where}")
        exp = claims.get("exp")
        lifetime = float(exp) - time.time() if isinstance(exp, (int, float)) else 3600.0
        redact.register([jag], lifetime_s=max(60.0, lifetime))
        return jag

    async def token_request(self, found: Discovered) -> TokenRequest:
        """Leg 2: the ID-JAG with the JWT-bearer grant and this client's authentication."""
        from mcp.shared.auth import JWT_BEARER_GRANT_TYPE

        jag = await self.exchange(found)
        secret = self.read_secret()
        if found.method == "client_secret_post":
            return TokenRequest(
                JWT_BEARER_GRANT_TYPE, {"assertion": jag, "client_id": self.client_id, "client_secret": secret}
            )
        basic = httpx2.BasicAuth(quote(self.client_id, safe=""), quote(secret, safe=""))
        return TokenRequest(JWT_BEARER_GRANT_TYPE, {"assertion": jag}, basic)
