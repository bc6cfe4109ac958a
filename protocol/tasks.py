"""Era-neutral models of MCP tasks. Pure pydantic: safe to import from workflow code.

Only ``taskId`` and ``status`` are relied on; every other field is optional because real runtimes omit
them (``ttl`` missing instead of ``null``, no ``pollInterval``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Era = Literal["2025-11-25", "2026-07-28"]
LEGACY: Era = "2025-11-25"
EXTENSION: Era = "2026-07-28"
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
#: Every protocol version an ``initialize`` may answer that this client speaks, newest first. Only 2025-11-25 has
#: tasks (``capabilities.tasks``); on 2025-06-18 and 2025-03-26 every tool runs as a plain synchronous ``tools/call``.
#: They all belong to the era :data:`LEGACY` (the ``initialize`` handshake); :data:`EXTENSION` is the other one.
INITIALIZE_VERSIONS: tuple[str, ...] = ("2025-11-25", "2025-06-18", "2025-03-26")
#: Every protocol version this client speaks.
KNOWN_VERSIONS: tuple[str, ...] = ("2026-07-28", *INITIALIZE_VERSIONS)


RELATED_TASK_META = "io.modelcontextprotocol/related-task"

TaskStatus = Literal["working", "input_required", "completed", "failed", "cancelled"]
TERMINAL_STATUSES: frozenset[str] = frozenset({"completed", "failed", "cancelled"})

#: ``ttl_ms`` when the server says the task lives forever (``ttl: null``).
UNLIMITED: Literal["unlimited"] = "unlimited"


class StrictModel(BaseModel):
    """Every model of this project: unknown fields are refused, so a typo is an error, not silence."""

    model_config = ConfigDict(extra="forbid")


class OAuthClient(StrictModel):
    """How this worker gets OAuth access tokens for a server: as itself (client credentials, ``private_key_jwt``, a
    platform token presented with the JWT-bearer grant: ``workload_identity``) or for a subject (the
    authorization-code grant, ``authorization_code``; the subject's identity-provider token exchanged for an ID-JAG:
    ``enterprise_managed``).

    *References* only, like ``header_refs``: the secret (``client_secret_env``) and the private key
    (``private_key_env`` or ``private_key_file``) are read in the worker when a token is needed, never carried; a
    subject's tokens live in the token store (``wire.auth.token_store``), never here.
    The token endpoint is discovered from the server (protected resource metadata, then the authorization
    server's metadata); ``issuer`` pins which authorization server may receive the credentials.
    """

    type: Literal[
        "client_credentials", "private_key_jwt", "authorization_code", "workload_identity", "enterprise_managed"
    ]
    #: Required for the service grants; for ``authorization_code`` a pre-registered client (else CIMD, else DCR);
    #: optional for ``workload_identity`` (sent with the assertion when set).
    client_id: str | None = Field(default=None, min_length=1)
    client_secret_env: str | None = None
    #: None: chosen from the authorization server's ``token_endpoint_auth_methods_supported`` (``wire.auth``).
    token_endpoint_auth_method: Literal["client_secret_basic", "client_secret_post"] | None = None
    private_key_env: str | None = None
    private_key_file: str | None = None
    signing_alg: str = "RS256"
    scope: str | None = None
    issuer: str | None = None
    #: ``authorization_code``: the client ID metadata document URL (CIMD) used where no client id is configured.
    client_metadata_url: str | None = None
    #: ``authorization_code``: where the person's browser is sent back (a loopback URL for ``mcp-tasks login``).
    redirect_uri: str = "http://127.0.0.1:33418/callback"
    #: ``authorization_code``: whose grant; set per task from the request's ``principal`` (the trusted caller's),
    #: never from configuration or the MCP server.
    subject: str | None = None
    #: Sender-constrained tokens (DPoP, RFC 9449): tokens bound to a key of this client, a fresh proof with every
    #: request (``wire.auth.dpop``). Off: bearer tokens.
    dpop: bool = False
    #: ``workload_identity``: the platform token (a JWT: a projected service-account token, a CI OIDC token), by
    #: reference: a file read at each token request (it rotates) or an environment variable.
    assertion_file: str | None = None
    assertion_env: str | None = None
    #: ``enterprise_managed``: the subject's identity provider (its ID token, handed over with ``mcp-tasks login
    #: --id-token-file``, must name this issuer), its token endpoint (the RFC 8693 exchange for an ID-JAG), and this
    #: app's client there (with its secret by reference, optional).
    idp_issuer: str | None = None
    idp_token_endpoint: str | None = None
    idp_client_id: str | None = None
    idp_client_secret_env: str | None = None

    def model_post_init(self, _ctx: Any) -> None:
        if self.type not in ("authorization_code", "workload_identity") and not self.client_id:
            raise ValueError(f"auth type {self.type!r} needs a client_id")
        if self.type == "workload_identity" and (self.assertion_env is None) == (self.assertion_file is None):
            raise ValueError('auth type \'workload_identity\' needs assertion = { env = "VAR" } or { file = "PATH" }')
        if self.type == "enterprise_managed":
            if not self.client_secret_env:
                raise ValueError("auth type 'enterprise_managed' needs client_secret = { env = \"VAR\" }")
            for name in ("idp_issuer", "idp_token_endpoint"):
                value = getattr(self, name)
                if not value or not value.startswith(("http://", "https://")):
                    raise ValueError(f"auth type 'enterprise_managed' needs {name}, an http(s) URL (got {value!r})")
        if self.type == "client_credentials" and not self.client_secret_env:
            raise ValueError("auth type 'client_credentials' needs client_secret = { env = \"VAR\" }")
        if self.type == "private_key_jwt" and (self.private_key_env is None) == (self.private_key_file is None):
            raise ValueError('auth type \'private_key_jwt\' needs private_key = { env = "VAR" } or { file = "PATH" }')
        if self.issuer is not None and not self.issuer.startswith(("http://", "https://")):
            raise ValueError(f"auth issuer must be an http(s) URL, got {self.issuer!r}")
        if self.client_metadata_url is not None and not self.client_metadata_url.startswith("https://"):
            raise ValueError(f"auth client_metadata_url must be an https URL, got {self.client_metadata_url!r}")
        if not self.redirect_uri.startswith(("http://", "https://")):
            raise ValueError(f"auth redirect_uri must be an http(s) URL, got {self.redirect_uri!r}")


class Endpoint(StrictModel):
    """Where an MCP server is. Exactly one of ``url`` / ``command``.

    ``headers`` holds *references*: header name → environment variable name. Values are read in the
    worker process at connect time, so no credential ever enters a workflow input or history.
    """

    url: str | None = None
    command: list[str] | None = None
    cwd: str | None = None
    env_refs: dict[str, str] = Field(default_factory=dict)
    header_refs: dict[str, str] = Field(default_factory=dict)
    #: OAuth for an HTTP server; tokens stay in the worker's memory (``wire.auth``).
    auth: OAuthClient | None = None

    def model_post_init(self, _ctx: Any) -> None:
        if (self.url is None) == (self.command is None):
            raise ValueError("an endpoint needs exactly one of 'url' or 'command'")
        if self.command is not None and not self.command:
            raise ValueError("endpoint 'command' must not be empty")
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"endpoint 'url' must be http(s), got {self.url!r}")
        if self.auth is not None and self.url is None:
            raise ValueError("endpoint 'auth' needs a 'url': OAuth is for servers reached over HTTP")

    @property
    def transport(self) -> Literal["http", "stdio"]:
        return "http" if self.url else "stdio"

    def identity(self) -> str:
        """Server identity for ledgers and search attributes: no userinfo, query or arguments (may hold tokens)."""
        return redact_url(self.url) if self.url else (self.command or [""])[0]


#: The auth types whose tokens are a subject's (the task's principal's), never the worker's own.
SUBJECT_AUTH_TYPES = ("authorization_code", "enterprise_managed")


def redact_url(url: str) -> str:
    """Scheme, host, port and path only."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{parts.hostname or ''}{port}{parts.path}"


class SessionRef(StrictModel):
    """Everything needed to reach a task's session again, from any process.

    For stateful legacy HTTP servers the task is bound to ``session_id``: re-attaching sends it without a
    new ``initialize``. For stdio the session *is* the child process: ``owner`` names the worker process
    that spawned it, and nobody else can reach it; ``session_id`` names the child itself (not sent anywhere).
    """

    endpoint: Endpoint
    era: Era
    protocol_version: str
    session_id: str | None = None
    owner: str | None = None


class RpcErrorInfo(StrictModel):
    code: int
    message: str
    data: Any = None


class InputRequest(StrictModel):
    """One server→client request that waits for a human or a handler (elicitation, sampling)."""

    model_config = ConfigDict(extra="allow")
    method: str
    params: dict[str, Any] = Field(default_factory=dict)


class TaskState(StrictModel):
    """``tasks/get`` (or a creation reply), normalised across eras."""

    task_id: str
    status: TaskStatus
    era: Era
    status_message: str | None = None
    created_at: str | None = None
    last_updated_at: str | None = None
    #: ms from ``created_at``; ``"unlimited"`` for ``null``; ``None`` when the server did not say.
    ttl_ms: int | Literal["unlimited"] | None = None
    poll_interval_ms: int | None = None
    #: Extension only: the payload inline in ``tasks/get`` once terminal.
    result: dict[str, Any] | None = None
    error: RpcErrorInfo | None = None
    input_requests: dict[str, InputRequest] | None = None
    #: Fields the server sent out of range, of a wrong type, NaN or infinite (``ttl: 1e15``, ``createdAt`` in year
    #: 1): wire name → the raw value as JSON text (capped), kept for the record. The normalised field above holds
    #: the clamped value, or None when the value was ignored (:mod:`.bounds`).
    unusable: dict[str, str] | None = None

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES


class ToolInfo(StrictModel):
    """What ``tools/list`` said about one tool that matters for tasks and contracts."""

    name: str
    task_support: Literal["forbidden", "optional", "required"] | None = None
    output_schema: dict[str, Any] | None = None
    read_only_hint: bool | None = None
    idempotent_hint: bool | None = None
    destructive_hint: bool | None = None


class StartResult(StrictModel):
    """What a ``tools/call`` produced. Exactly one of ``task``, ``result``, ``input_required``.

    * ``task``: the server made a task (legacy ``CreateTaskResult``, extension ``resultType:"task"``);
    * ``result``: the server ran the tool synchronously and answered a plain ``CallToolResult``;
    * ``input_required``: extension ``InputRequiredResult`` on the call itself (retry ``tools/call`` with
      ``inputResponses`` and the echoed ``request_state``).
    """

    era: Era
    session: SessionRef
    task: TaskState | None = None
    result: dict[str, Any] | None = None
    input_requests: dict[str, InputRequest] | None = None
    request_state: str | None = None
    task_requested: bool = False


class TaskPayload(StrictModel):
    """The final payload of a task: a ``CallToolResult`` in wire form, or the JSON-RPC error.

    ``empty`` marks a payload that carried no result at all (``{_meta}`` only, or ``-32603`` after a
    cancel): not an error of ours, just nothing to return.
    """

    result: dict[str, Any] | None = None
    error: RpcErrorInfo | None = None
    empty: bool = False
