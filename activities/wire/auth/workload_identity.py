"""Workload identity federation: the platform's token for this workload presented with the JWT-bearer grant (RFC 7523).

A Kubernetes projected service-account token, a CI provider's OIDC token: the platform issues and rotates it, the
authorization server trusts its issuer, and the worker keeps no static secret. The configuration names it by
reference only (a file, read again at every token request because the platform rewrites it; or an environment
variable); it must be a JWT that has not expired, no larger than ``base.MAX_JWT``, or no request is made. It goes only
to the token endpoint discovery found (the configured ``issuer`` advised), as the ``assertion`` (SEP-1933); a refusal
(``invalid_grant``, ``invalid_scope``, ``unauthorized_client``) is the error, never retried with another grant.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

from mcp_temporal_tasks.activities.wire import redact
from mcp_temporal_tasks.activities.wire.auth.base import MAX_JWT, NoToken, jwt_claims
from mcp_temporal_tasks.activities.wire.auth.token_endpoint import TokenRequest
from mcp_temporal_tasks.protocol.tasks import OAuthClient

if TYPE_CHECKING:
    from mcp_temporal_tasks.activities.wire.auth.discovery import Discovered

#: How long a platform token without ``exp`` stays in the log scrubber's registry.
UNDATED_SCRUB_S = 86400.0


class WorkloadIdentity:
    """``type = "workload_identity"``: the platform token in ``assertion_file`` or ``assertion_env``, and the client
    id the authorization server knows this workload by (optional: the assertion identifies it)."""

    def __init__(self, spec: OAuthClient) -> None:
        self.spec = spec

    def _what(self) -> str:
        if self.spec.assertion_env is not None:
            return f"the platform token in environment variable {self.spec.assertion_env!r}"
        return f"the platform token file {self.spec.assertion_file!r}"

    def read_secret(self) -> str:
        """The platform token, read now (bounded) and registered for scrubbing; :class:`NoToken` naming the file or
        variable when it is missing, empty, too large, not a JWT or expired."""
        what = self._what()
        if self.spec.assertion_env is not None:
            raw = os.environ.get(self.spec.assertion_env, "")
            if not raw.strip():
                raise NoToken(f"{what} is not set")
        else:
            try:
                with open(self.spec.assertion_file or "", "rb") as fh:
                    data = fh.read(MAX_JWT + 1)
            except OSError as exc:
                raise NoToken(f"{what} cannot be read: {exc.strerror or type(exc).__name__}") from None
            if len(data) > MAX_JWT:
                raise NoToken(f"{what} is larger than {MAX_JWT} bytes: not a JWT")
            raw = data.decode("utf-8", errors="replace")
            if not raw.strip():
                raise NoToken(f"{what} is empty")
        token = raw.strip()
        claims = jwt_claims(token, what)  # its errors never quote the token
        # Scrubbed from logs while it can be used, then it leaves the registry: the platform rotates it hourly or so,
        # and a permanent entry per rotation would grow without bound.
        exp = claims.get("exp")
        lifetime = float(exp) - time.time() if isinstance(exp, (int, float)) else UNDATED_SCRUB_S
        redact.register([token], lifetime_s=max(60.0, lifetime))
        return token

    def method(self, supported: list[str] | None) -> str:
        return "none"  # the assertion is the credential (RFC 7523 §3.1): no client secret exists to send

    async def token_request(self, found: Discovered) -> TokenRequest:
        from mcp.shared.auth import JWT_BEARER_GRANT_TYPE

        fields = {"assertion": self.read_secret()}
        if self.spec.client_id:
            fields["client_id"] = self.spec.client_id
        return TokenRequest(JWT_BEARER_GRANT_TYPE, fields)
