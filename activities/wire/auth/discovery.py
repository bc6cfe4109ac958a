"""Where a server's tokens are requested: its protected resource and authorization server metadata, from its challenge.

The rule: the credentials go only to a token endpoint found here, over ``https`` (``http`` to loopback only), of an
authorization server the resource names (the configured ``issuer`` when set) and whose own metadata names that issuer.
The steps in order: docs/security.md ("Authenticated servers").
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpx2

from mcp_temporal_tasks.activities.wire.auth.base import NoToken, client, read_body
from mcp_temporal_tasks.protocol.tasks import OAuthClient, redact_url

log = logging.getLogger(__name__)

#: The one protocol whose servers may have no metadata and default endpoints at their origin.
LEGACY_PROTOCOL = "2025-03-26"


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
    #: Scope for the first token: the configured one, else the challenge's, else the advertised (None: no scope).
    scope: str | None
    #: The client authentication at the token endpoint, as the grant chose it from the metadata.
    method: str
    #: ``scopes_supported`` of the protected resource metadata (for a challenge without scope).
    advertised_scope: str | None
    #: What the authorization-code grant needs beyond the token endpoint: the challenge's scope, both metadata
    #: documents as parsed (None: not served; the legacy defaults at the server's origin then).
    challenge_scope: str | None = None
    prm: Any = None
    metadata: Any = None


async def _metadata(http: httpx2.AsyncClient, urls: list[str], model: Any, what: str) -> Any:
    """The first of ``urls`` that serves ``what`` (200, parsed by ``model``). Not served (3xx/4xx): the next.
    A body that does not parse, or a server error: an error, not the next URL (it would hide the fault)."""
    from pydantic import ValidationError

    for url in urls:
        if not secure_enough(url):
            raise NoToken(f"{what} at {redact_url(url)} is not https (http only on loopback)")
        async with http.stream("GET", url, headers={"accept": "application/json"}) as resp:
            if resp.status_code == 200:
                body = await read_body(resp, what)
                try:
                    return model.model_validate_json(body)
                except ValidationError as exc:
                    errors = exc.errors()
                    where = ".".join(str(p) for p in errors[0]["loc"]) if errors else ""
                    msg = str(errors[0]["msg"])[:120] if errors else "invalid"
                    raise NoToken(f"{what} at {redact_url(url)} does not parse ({where or 'body'}: {msg})") from None
            if resp.status_code >= 500 or resp.status_code == 429:
                raise NoToken(f"{what} at {redact_url(url)} answered HTTP {resp.status_code}")
            log.debug("no %s at %s (HTTP %s)", what, redact_url(url), resp.status_code)
    return None


async def discover(
    url: str,
    spec: OAuthClient,
    challenge: Challenge,
    protocol: str | None,
    method: Callable[[list[str] | None], str],
) -> Discovered:
    """Where the MCP server at ``url`` wants ``spec``'s tokens from, after its ``challenge``: ``protocol`` is what its
    session negotiated (None: nothing yet), ``method`` the grant's choice of client authentication given the
    authorization server's ``token_endpoint_auth_methods_supported`` (None: not said)."""
    from mcp.client.auth.utils import (
        build_oauth_authorization_server_metadata_discovery_urls,
        build_protected_resource_metadata_discovery_urls,
        issuers_match,
    )
    from mcp.shared.auth import OAuthMetadata, ProtectedResourceMetadata
    from mcp.shared.auth_utils import check_resource_allowed, resource_url_from_server_url

    own_resource = resource_url_from_server_url(url)
    issuer_pin = spec.issuer
    try:
        async with client() as http:
            prm_urls = build_protected_resource_metadata_discovery_urls(challenge.resource_metadata, url)
            prm = await _metadata(http, prm_urls, ProtectedResourceMetadata, "protected resource metadata")
            resource = own_resource
            advertised: str | None = None
            legacy = False
            if prm is not None:
                named = str(prm.resource)
                if not check_resource_allowed(requested_resource=own_resource, configured_resource=named):
                    raise NoToken(f"its protected resource metadata is for resource {named}, not for {own_resource}")
                resource = named
                advertised = " ".join(prm.scopes_supported) if prm.scopes_supported else None
                servers = [str(s) for s in prm.authorization_servers]
                if issuer_pin is not None:
                    chosen = next((s for s in servers if issuers_match(s, issuer_pin)), None)
                    if chosen is None:
                        raise NoToken(
                            f"its protected resource metadata names authorization server(s) "
                            f"{', '.join(redact_url(s) for s in servers[:5])}, not the configured "
                            f"issuer {issuer_pin}"
                        )
                else:
                    chosen = servers[0]
            elif issuer_pin is not None:
                chosen = issuer_pin
            elif protocol == LEGACY_PROTOCOL or (protocol is None and spec.type == "authorization_code"):
                # 2025-03-26's default endpoints at the server's origin. Before a session has negotiated anything
                # (a server that demands a token for initialize) only for the authorization-code grant: a person
                # consents at that authorization server's own page; a service's secret would go there unasked.
                parts = urlsplit(url)
                chosen, legacy = f"{parts.scheme}://{parts.netloc}", True
            else:
                raise NoToken(
                    f"it publishes no protected resource metadata (tried {', '.join(map(redact_url, prm_urls))}) "
                    f"and negotiated protocol {protocol or 'none yet'}, not {LEGACY_PROTOCOL}: no authorization "
                    "server is named to send the client's credentials to (set auth.issuer to name it)"
                )
            asm_urls = build_oauth_authorization_server_metadata_discovery_urls(None if legacy else chosen, url)
            asm = await _metadata(http, asm_urls, OAuthMetadata, "authorization server metadata")
    except httpx2.HTTPError as exc:
        at = getattr(getattr(exc, "request", None), "url", None)
        raise NoToken(
            f"cannot reach {redact_url(str(at)) if at else 'the metadata endpoint'}: {type(exc).__name__}"
        ) from None
    if asm is None and not legacy:
        raise NoToken(
            f"authorization server {chosen} publishes no metadata (tried {', '.join(map(redact_url, asm_urls))})"
        )
    if asm is not None:
        if not issuers_match(str(asm.issuer), chosen):
            raise NoToken(
                f"the authorization server metadata names issuer {str(asm.issuer)[:200]}, not "
                f"{chosen} where it was found (RFC 8414 §3.3)"
            )
        if issuer_pin is not None and not issuers_match(str(asm.issuer), issuer_pin):
            raise NoToken(f"the authorization server's issuer {asm.issuer} is not the configured {issuer_pin}")
        token_endpoint = str(asm.token_endpoint)
    else:
        token_endpoint = urljoin(chosen, "/token")  # 2025-03-26's default endpoint, legacy servers only
    if not secure_enough(token_endpoint):
        raise NoToken(f"token endpoint {redact_url(token_endpoint)} is not https (http only on loopback)")
    chosen_method = method(asm.token_endpoint_auth_methods_supported if asm is not None else None)
    scope = spec.scope or challenge.scope or advertised
    found = Discovered(
        issuer=str(asm.issuer) if asm is not None else chosen,
        token_endpoint=token_endpoint,
        resource=resource,
        scope=scope,
        method=chosen_method,
        advertised_scope=advertised,
        challenge_scope=challenge.scope,
        prm=prm,
        metadata=asm,
    )
    log.debug(
        "OAuth for %s: authorization server %s, token endpoint %s, %s, scope %r",
        redact_url(url),
        redact_url(found.issuer),
        redact_url(token_endpoint),
        chosen_method,
        scope,
    )
    return found
