"""The client credentials grant with a signed client assertion instead of a secret (``private_key_jwt``, RFC 7523).

A fresh assertion for every token request (the client id its issuer and subject, the authorization server's issuer
its audience), valid for 60 s and scrubbed from logs as long.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from mcp_temporal_tasks.activities.wire import redact
from mcp_temporal_tasks.activities.wire.auth.base import NoToken
from mcp_temporal_tasks.activities.wire.auth.token_endpoint import TokenRequest
from mcp_temporal_tasks.protocol.tasks import OAuthClient
from mcp_temporal_tasks.protocol.wire_errors import CapabilityUnavailable

if TYPE_CHECKING:
    from mcp_temporal_tasks.activities.wire.auth.discovery import Discovered

#: How long an assertion is valid: it is used once, at once.
ASSERTION_LIFETIME_S = 60
CLIENT_ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"


class PrivateKeyJwt:
    """``type = "private_key_jwt"``: a client id and the private key (PEM) in ``private_key_env`` or
    ``private_key_file``, signed with ``signing_alg``."""

    def __init__(self, spec: OAuthClient) -> None:
        self.spec = spec
        self.client_id = spec.client_id or ""  # required for this type (OAuthClient checks)

    def read_secret(self) -> str:
        if self.spec.private_key_env is not None:
            value = os.environ.get(self.spec.private_key_env)
            if not value:
                raise CapabilityUnavailable(
                    f"auth private_key refers to environment variable {self.spec.private_key_env!r}, which is not set"
                )
        else:
            try:
                value = Path(self.spec.private_key_file or "").read_text(encoding="utf-8")
            except OSError as exc:
                raise CapabilityUnavailable(
                    f"auth private_key file {self.spec.private_key_file!r} cannot be read: "
                    f"{exc.strerror or type(exc).__name__}"
                ) from None
        redact.register([value, *value.splitlines()])
        return value

    def method(self, supported: list[str] | None) -> str:
        return "private_key_jwt"

    async def token_request(self, found: Discovered) -> TokenRequest:
        from mcp.client.auth.extensions.client_credentials import SignedJWTParameters

        signer = SignedJWTParameters(
            issuer=self.client_id,
            subject=self.client_id,
            signing_key=self.read_secret(),
            signing_algorithm=self.spec.signing_alg,
            lifetime_seconds=ASSERTION_LIFETIME_S,
        )
        try:
            assertion = await signer.create_assertion_provider()(found.issuer)
        except Exception as exc:  # PyJWT: a key that does not load or does not fit the algorithm
            raise NoToken(
                f"cannot sign the client assertion with {self.spec.signing_alg}: {type(exc).__name__}"
            ) from None
        redact.register([assertion], lifetime_s=ASSERTION_LIFETIME_S)
        return TokenRequest(
            "client_credentials",
            {
                "client_id": self.client_id,
                "client_assertion": assertion,
                "client_assertion_type": CLIENT_ASSERTION_TYPE,
            },
        )
