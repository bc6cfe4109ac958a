"""What a grant is, and the one place a client's grant is chosen: by its configured type (``OAuthClient.type``).

Here a new grant is a module beside ``client_credentials`` and ``private_key_jwt`` (importing neither: a contract in
pyproject.toml) and one entry in :data:`GRANTS`; its configuration is a new ``OAuthClient.type`` with its fields
(``protocol.tasks``, carried in workflow inputs) and the keys ``worker.config`` accepts for it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Protocol

from mcp_temporal_tasks.activities.wire.auth.authorization_code import AuthorizationCode
from mcp_temporal_tasks.activities.wire.auth.client_credentials import ClientSecret
from mcp_temporal_tasks.activities.wire.auth.enterprise_managed import EnterpriseManaged
from mcp_temporal_tasks.activities.wire.auth.private_key_jwt import PrivateKeyJwt
from mcp_temporal_tasks.activities.wire.auth.workload_identity import WorkloadIdentity
from mcp_temporal_tasks.protocol.tasks import OAuthClient

if TYPE_CHECKING:
    from mcp_temporal_tasks.activities.wire.auth.discovery import Discovered
    from mcp_temporal_tasks.activities.wire.auth.token_endpoint import TokenRequest


class Grant(Protocol):
    """How one OAuth client gets tokens at a token endpoint that discovery found: the same POST for every grant
    (:func:`~mcp_temporal_tasks.activities.wire.auth.token_endpoint.request_token`), with what the grant adds."""

    def read_secret(self) -> str:
        """The credential (secret, private key) the configuration refers to, read now and registered for scrubbing;
        never kept. Raises ``CapabilityUnavailable`` when it is not there."""
        ...

    def method(self, supported: list[str] | None) -> str:
        """The client authentication at the token endpoint, given the authorization server's
        ``token_endpoint_auth_methods_supported`` (None: it does not say). Raises ``NoToken`` when none fits."""
        ...

    async def token_request(self, found: Discovered) -> TokenRequest:
        """The ``grant_type``, form fields and Basic credentials of one token request, with ``found.method``; the
        credential read again for each request."""
        ...


#: Each configured ``OAuthClient.type`` and its grant.
GRANTS: Mapping[str, Callable[[OAuthClient], Grant]] = {
    "client_credentials": ClientSecret,
    "private_key_jwt": PrivateKeyJwt,
    # A subject's grant: its tokens come from authorization_code.SubjectTokenSource (chosen by wire.auth.token_source).
    "authorization_code": AuthorizationCode,
    # The platform's token for this workload, presented with the JWT-bearer grant (workload identity federation).
    "workload_identity": WorkloadIdentity,
    # A subject's ID token exchanged for an ID-JAG, presented with the JWT-bearer grant (SEP-990).
    "enterprise_managed": EnterpriseManaged,
}


def grant_for(spec: OAuthClient) -> Grant:
    """The grant of the OAuth client ``spec`` configures."""
    return GRANTS[spec.type](spec)
