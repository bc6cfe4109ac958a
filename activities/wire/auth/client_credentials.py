"""The client credentials grant with a client secret: ``client_secret_basic``, ``client_secret_post`` or ``none``.

The method: the configured ``token_endpoint_auth_method``, else the first of the three the authorization server's
``token_endpoint_auth_methods_supported`` lists (``client_secret_basic`` when it does not say: RFC 8414's default).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING
from urllib.parse import quote

import httpx2

from mcp_temporal_tasks.activities.wire import redact
from mcp_temporal_tasks.activities.wire.auth.base import NoToken
from mcp_temporal_tasks.activities.wire.auth.token_endpoint import TokenRequest
from mcp_temporal_tasks.protocol.tasks import OAuthClient
from mcp_temporal_tasks.protocol.wire_errors import CapabilityUnavailable

if TYPE_CHECKING:
    from mcp_temporal_tasks.activities.wire.auth.discovery import Discovered


class ClientSecret:
    """``type = "client_credentials"``: a client id and the secret in ``client_secret_env``."""

    def __init__(self, spec: OAuthClient) -> None:
        self.spec = spec
        self.client_id = spec.client_id or ""  # required for this type (OAuthClient checks)

    def read_secret(self) -> str:
        value = os.environ.get(self.spec.client_secret_env or "")
        if not value:
            raise CapabilityUnavailable(
                f"auth client_secret refers to environment variable {self.spec.client_secret_env!r}, which is not set"
            )
        redact.register([value, *value.splitlines()])
        return value

    def method(self, supported: list[str] | None) -> str:
        if self.spec.token_endpoint_auth_method is not None:
            return self.spec.token_endpoint_auth_method
        if supported is None or "client_secret_basic" in supported:
            return "client_secret_basic"
        if "client_secret_post" in supported:
            return "client_secret_post"
        if "none" in supported:
            return "none"  # the server authenticates no client: the client id alone, the secret stays here
        raise NoToken(
            f"the authorization server supports token endpoint auth methods "
            f"{', '.join(m[:40] for m in supported[:8]) or 'none'}; this client has a client secret "
            "(client_secret_basic or client_secret_post)"
        )

    async def token_request(self, found: Discovered) -> TokenRequest:
        secret = self.read_secret()
        if found.method == "client_secret_post":
            return TokenRequest("client_credentials", {"client_id": self.client_id, "client_secret": secret})
        if found.method == "none":
            return TokenRequest("client_credentials", {"client_id": self.client_id})
        # client_secret_basic, form-encoded first (RFC 6749 §2.3.1)
        basic = httpx2.BasicAuth(quote(self.client_id, safe=""), quote(secret, safe=""))
        return TokenRequest("client_credentials", {}, basic)
