"""OAuth access tokens for MCP servers that demand them: one module per grant, chosen from configuration.

``source`` (the token held, its refresh, the server's challenges) → ``grants`` (the one place a grant is chosen, by
``OAuthClient.type``) → ``client_credentials`` | ``private_key_jwt`` | ``authorization_code`` | ``workload_identity``
| ``enterprise_managed`` (one module per grant, side by side; ``authorization_code`` with its own token source, a
subject's, over the store) → ``discovery`` | ``token_endpoint`` | ``token_store`` (which opens ``token_store_dir`` |
``token_store_s3``, over ``token_records``) → ``dpop`` (keys, proofs and nonces of sender-constrained tokens) →
``base``. The rules, and why neither the SDK's ``OAuthClientProvider`` nor authlib does this: docs/security.md
("Authenticated servers"). Tokens live in this process's memory, and a subject's grant (encrypted) in the token
store; never in a workflow's input, history or memo.
"""

from __future__ import annotations

import asyncio
import json
import weakref

from mcp_temporal_tasks.activities.wire.auth.authorization_code import ConsentRequired, SubjectTokenSource
from mcp_temporal_tasks.activities.wire.auth.base import AUTH_SERVER_TIMEOUT_S
from mcp_temporal_tasks.activities.wire.auth.discovery import Challenge, Discovered, secure_enough
from mcp_temporal_tasks.activities.wire.auth.grants import Grant, grant_for
from mcp_temporal_tasks.activities.wire.auth.source import (
    AUTH_FLOW_TIMEOUT_S,
    BearerAuth,
    TokenSource,
    negotiated_protocol,
    refresh_margin_s,
)
from mcp_temporal_tasks.protocol.tasks import SUBJECT_AUTH_TYPES, Endpoint, OAuthClient

#: Each event loop's token sources, by server and OAuth client.
_sources: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, TokenSource | SubjectTokenSource]] = (
    weakref.WeakKeyDictionary()
)


def token_source(url: str, spec: OAuthClient) -> TokenSource | SubjectTokenSource:
    """The one token source of this server and OAuth client (and subject: part of ``spec``) in the running event
    loop (its lock is bound to one loop): a subject's over the token store for ``authorization_code``."""
    per_loop = _sources.setdefault(asyncio.get_running_loop(), {})
    key = json.dumps([url, spec.model_dump(mode="json")], sort_keys=True)
    source = per_loop.get(key)
    if source is None:
        source = per_loop[key] = (
            SubjectTokenSource(url, spec) if spec.type == "authorization_code" else TokenSource(url, spec)
        )
    return source


def for_subject(endpoint: Endpoint, principal: str | None) -> Endpoint:
    """``endpoint`` as a session for ``principal`` opens it: a subject's grant (``authorization_code``,
    ``enterprise_managed``) is the task's principal's (set by the trusted caller, never by configuration or the
    server; None: no subject, no grant). Any other endpoint unchanged: a service's credentials are the worker's
    whoever the task is for."""
    auth = endpoint.auth
    if auth is None or auth.type not in SUBJECT_AUTH_TYPES or auth.subject == principal:
        return endpoint
    return endpoint.model_copy(update={"auth": auth.model_copy(update={"subject": principal})})


def bearer_auth(url: str, spec: OAuthClient) -> BearerAuth:
    return BearerAuth(token_source(url, spec))


def read_secret(spec: OAuthClient) -> str:
    """The client secret or the private key (PEM) ``spec`` refers to, registered for scrubbing."""
    return grant_for(spec).read_secret()


__all__ = [
    "AUTH_FLOW_TIMEOUT_S",
    "AUTH_SERVER_TIMEOUT_S",
    "BearerAuth",
    "Challenge",
    "ConsentRequired",
    "Discovered",
    "Grant",
    "SubjectTokenSource",
    "TokenSource",
    "bearer_auth",
    "for_subject",
    "grant_for",
    "negotiated_protocol",
    "read_secret",
    "refresh_margin_s",
    "secure_enough",
    "token_source",
]
