"""The TOML configuration and environment, refused at start when wrong.

A file is checked as a whole: every unknown key and bad value in one :class:`ConfigError`. Secrets are never in it:
header, environment and OAuth credential values are references (the worker's environment variables, files). Every
key, with its environment variable and default: docs/configuration.md.
"""

from __future__ import annotations

import difflib
import os
import tomllib
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError, field_validator, model_validator

from mcp_temporal_tasks.activities.activity_io import ServerConfig, ToolPolicy
from mcp_temporal_tasks.workflows.records import DEFAULT_TASK_QUEUE, validation_message


class ConfigError(ValueError):
    """The configuration is invalid; the message names the key and what is wrong: every problem of the file at
    once, joined by ``; `` (``problems``: one per item), an unknown key with the known one it is closest to."""

    def __init__(self, message: str, problems: list[str] | None = None) -> None:
        super().__init__(message)
        self.problems = problems or [message]


class _Strict(BaseModel):
    """Unknown keys are refused, and booleans are booleans (``tracing = "yes"`` is an error, not true)."""

    model_config = ConfigDict(extra="forbid")


def is_host_port(address: str) -> bool:
    """The one HOST:PORT rule, for every address a person or a file gives (the CLI's options, TEMPORAL_ADDRESS,
    ``[temporal] address``): a host (``[v6]`` bracketed), a colon, a port 1–65535; no spaces, no scheme or path."""
    host, sep, port = address.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    return bool(
        sep
        and host
        and port.isdigit()
        and 0 < int(port) < 65536
        and "/" not in host
        and not any(c.isspace() for c in address)
    )


class StorageSettings(_Strict):
    """``[temporal.storage]``: where payloads over ``threshold_bytes`` go (Temporal's External Storage, the
    claim-check pattern; ``worker/storage.py``). Every client and worker that reads or writes the tasks needs the
    same table. No bucket: the embedded store, one machine's directory (``local_dir``, else the state
    directory's ``payloads/``). Credentials never here: the S3 driver reads the AWS environment (``AWS_ACCESS_KEY_ID``,
    ``AWS_SECRET_ACCESS_KEY``, profiles, instance roles), the GCS driver Google's application default credentials."""

    driver: Literal["s3", "gcs", "local"] | None = None
    bucket: str | None = Field(None, min_length=3, max_length=222)
    prefix: str = Field("", max_length=256)
    #: An S3-compatible endpoint URL (MinIO, Ceph, R2...), or for gcs an emulator (gcloud-aio sends no credentials
    #: to a given API root); none: the cloud's own.
    endpoint: str | None = None
    region: str | None = None
    threshold_bytes: int = Field(256 * 1024, ge=0, le=2 * 1024 * 1024)
    #: The embedded store's directory (driver ``local``).
    local_dir: str | None = None
    #: Each store request's own timeout, and how long a read keeps retrying a store that does not answer
    #: (bounded; a missing object, refused credentials or a digest mismatch are not retried).
    request_timeout_s: float = Field(10.0, gt=0, le=300)
    read_retry_s: float = Field(60.0, ge=0, le=3600)
    #: The embedded store's cleanup: objects older than this are deleted at worker start (none: kept). Must be at
    #: least the longest task's life plus the namespace's retention (docs: "Large payloads").
    retention_days: float | None = Field(None, gt=0)

    @property
    def kind(self) -> str:
        return self.driver or ("s3" if self.bucket else "local")

    @field_validator("endpoint")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        if v is not None and not (
            v.startswith(("http://", "https://")) and len(v) > 8 and not any(c.isspace() for c in v)
        ):
            raise ValueError(f"must be an http(s) URL (e.g. http://minio:9000), got {v!r}")
        return v

    @model_validator(mode="after")
    def _bucket_fits_driver(self) -> StorageSettings:
        if self.kind in ("s3", "gcs") and not self.bucket:
            raise ValueError(f"driver {self.kind!r} needs a bucket")
        if self.kind == "local" and self.bucket:
            raise ValueError('driver \'local\' takes no bucket (set driver = "s3" or "gcs")')
        return self


class TemporalSettings(_Strict):
    address: str = "localhost:7233"
    namespace: str = "default"
    task_queue: str = DEFAULT_TASK_QUEUE
    tls: StrictBool = False
    #: The Temporal UI of this Temporal, for the links the CLI prints (none: only a dev server's own UI is linked).
    ui_url: str | None = None
    #: Large payloads: ``[temporal.storage]`` (every client and worker of these tasks needs the same table).
    storage: StorageSettings = Field(default_factory=StorageSettings)

    @field_validator("address")
    @classmethod
    def _host_port(cls, v: str) -> str:
        if not is_host_port(v):
            raise ValueError(f"must be HOST:PORT (e.g. localhost:7233), got {v!r}")
        return v


class WorkerSettings(_Strict):
    metrics_port: int = Field(0, ge=0, le=65535)
    state_dir: str | None = None
    #: Results larger than this (bytes of JSON) go to the result store under ``state_dir`` and travel by
    #: reference: Temporal warns at 512 KiB per payload and fails at 2 MiB.
    inline_result_bytes: int = Field(256 * 1024, ge=1024, le=1024 * 1024)
    #: Trust model: configuration is trusted, workflow inputs are not. A request may name a configured server;
    #: an inline endpoint needs these: a URL ``allow_inline_endpoints``, a stdio command (runs on this
    #: worker) ``allow_inline_commands``, credential references (send this worker's secrets to wherever the
    #: request points) ``allow_inline_credentials``. All off by default.
    allow_inline_endpoints: StrictBool = False
    allow_inline_commands: StrictBool = False
    allow_inline_credentials: StrictBool = False
    #: Start even when another live worker on the task queue serves other ``[servers]`` (its identity's digest
    #: differs): they would split the queue's tasks, and a task naming a server only one of them has ends ``rejected:
    #: UnknownServer`` on the other. Off: such a worker refuses to start (``mcp-tasks worker --allow-mixed-servers``).
    allow_mixed_servers: StrictBool = False
    max_concurrent_activities: int = Field(4000, ge=1)
    #: Memory is bounded by this, not by the tasks in flight: a cached workflow costs ~130 KB, an in-flight task
    #: that is not cached ~30 KB (its waiting activity). A workflow waiting on its poll activity has nothing to
    #: do, so evicting it costs one replay of its short history (≤ 21 events, ~20 ms of CPU) when the wait ends
    #: (measured in bench/: 2,000 in flight in ~310 MB at 1,000, ~420 MB with all 2,000 cached).
    max_cached_workflows: int = Field(1000, ge=0)
    max_concurrent_workflow_tasks: int = Field(200, ge=1)
    #: Threads that run workflow activations. They are pure Python under the GIL, so more threads than this
    #: only contend with each other and with the event loop that runs the polling activities (the SDK's
    #: default is one per workflow-task slot, up to 200); measured in bench/ (`--experiment wft-threads=N`).
    workflow_threads: int = Field(2, ge=1, le=64)
    idle_session_s: float = Field(300.0, gt=0)
    #: How long a workflow task may wait for the worker that has the workflow cached before another takes it.
    sticky_schedule_to_start_s: float = Field(3.0, gt=0, le=60)
    #: Longest gap the SDK leaves between two heartbeats it sends (it sends one per min(0.8 × heartbeat
    #: timeout, this)). Safe to raise: every heartbeat still arrives within its own timeout.
    max_heartbeat_throttle_s: float = Field(120.0, gt=0, le=3600)
    #: Temporal's OpenTelemetry interceptor on this worker, and W3C trace context on every MCP request (the
    #: ``[tracing]`` extra; spans go wherever the process's OpenTelemetry SDK exports them).
    tracing: StrictBool = False
    #: Listen for the servers' task status notifications while this worker has waits on their sessions (the GET
    #: stream of a 2025-11-25 HTTP session, a stdio child's output, ``subscriptions/listen`` on 2026-07-28): a
    #: notification wakes the waiting workflow, which reads the task at once (``activities/push.py``).
    push_notifications: StrictBool = True
    #: Where a server has shown it notifies, a heartbeating wait's poll gaps stretch by this (polls stay the safety
    #: net: a dropped notification is still seen within this × the schedule's bound; the worker's own reads of idle
    #: waits there go once per ``push_net_stretch`` gap). 1: today's schedule everywhere.
    push_stretch: float = Field(4.0, ge=1.0, le=10.0)
    #: Read ``tasks/list`` of a stateful 2025-11-25 HTTP session with waits here, at the server's pollInterval, and
    #: wake the waits whose task changed (``activities/list_reader.py``); off: those waits are polled one by one.
    push_list_reads: StrictBool = True
    #: Read an idle wait's task in the worker (``tasks/get`` on its schedule, no Temporal round trip) on HTTP servers
    #: and wake the wait when it changed (``activities/poller.py``); off: each read is an activity attempt.
    push_task_reads: StrictBool = True
    #: An idle wait this worker reads for (notifications, ``tasks/list``, its own reads) has its own activity attempts
    #: this many times today's gap apart: what is left if the worker dies, so a dead worker's task is seen at most
    #: this × the schedule's bound late. At least ``push_stretch``.
    push_net_stretch: float = Field(8.0, ge=1.0, le=32.0)


class WorkerConfig(_Strict):
    temporal: TemporalSettings = Field(default_factory=TemporalSettings)
    worker: WorkerSettings = Field(default_factory=WorkerSettings)
    servers: dict[str, ServerConfig] = Field(default_factory=dict)

    def api_key(self) -> str | None:
        return os.environ.get("TEMPORAL_API_KEY") or None

    def tls_config(self) -> Any:
        """``TLSConfig`` when TLS is asked for (explicitly, by a client cert, or by an API key)."""
        from temporalio.service import TLSConfig

        cert, key = os.environ.get("TEMPORAL_TLS_CERT"), os.environ.get("TEMPORAL_TLS_KEY")
        if bool(cert) != bool(key):
            raise ConfigError("TEMPORAL_TLS_CERT and TEMPORAL_TLS_KEY must be set together")
        if cert and key:
            return TLSConfig(client_cert=Path(cert).read_bytes(), client_private_key=Path(key).read_bytes())
        if self.temporal.tls or self.api_key():
            return True
        return False


def _refs(table: Any, where: str) -> dict[str, str]:
    """``{NAME = {env = "VAR"}}`` → ``{NAME: VAR}``. A literal value is refused: secrets stay out of files."""
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: must be a table")
    out = {}
    for name, value in table.items():
        if isinstance(value, dict) and set(value) == {"env"} and isinstance(value["env"], str) and value["env"]:
            out[name] = value["env"]
        else:
            raise ConfigError(f'{where}.{name}: values are given by reference only, as {{ env = "VAR_NAME" }}')
    return out


AUTH_TYPES = ("client_credentials", "private_key_jwt", "authorization_code", "workload_identity", "enterprise_managed")
#: Only ``workload_identity`` takes this: the platform token, by reference.
_WIF_KEYS = {"assertion"}
#: Only ``enterprise_managed`` takes these: the subject's identity provider and this app's client there.
_IDP_KEYS = {"idp_issuer", "idp_token_endpoint", "idp_client_id", "idp_client_secret"}
#: Only ``authorization_code`` takes these: the app's client identity when not pre-registered, and its redirect.
_USER_AUTH_KEYS = {"client_metadata_url", "redirect_uri"}
_AUTH_KEYS = {
    *_USER_AUTH_KEYS,
    *_WIF_KEYS,
    *_IDP_KEYS,
    "type",
    "client_id",
    "client_secret",
    "private_key",
    "scope",
    "issuer",
    "token_endpoint_auth_method",
    "signing_alg",
    "dpop",
}


def _auth(raw: Any, where: str, env: Mapping[str, str]) -> dict[str, Any]:
    """``[servers.NAME.auth]`` → :class:`~mcp_temporal_tasks.protocol.tasks.OAuthClient` fields.

    Checked at start, so a worker never runs without the credentials it will need: the referenced variables must
    be set and the key file readable (their values are not kept here; the wire reads them when it needs a token).
    """
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: must be a table")
    for key in raw:
        if key not in _AUTH_KEYS:
            raise ConfigError(f"{where}.{key}: unknown key")
    kind = raw.get("type")
    if kind not in AUTH_TYPES:
        raise ConfigError(f"{where}.type: must be one of {', '.join(AUTH_TYPES)} (got {kind!r})")
    if "dpop" in raw and not isinstance(raw["dpop"], bool):
        raise ConfigError(f"{where}.dpop: must be true or false (got {str(raw['dpop'])[:40]!r})")
    for only, keys in (("workload_identity", _WIF_KEYS), ("enterprise_managed", _IDP_KEYS)):
        for key in sorted(keys & set(raw)) if kind != only else []:
            raise ConfigError(f"{where}.{key}: only auth type {only!r} takes it")
    if kind == "authorization_code":
        return _user_auth(raw, where, env)
    if kind == "workload_identity":
        return _workload_auth(raw, where, env)
    if kind == "enterprise_managed":
        return _enterprise_auth(raw, where, env)
    for key in _USER_AUTH_KEYS & set(raw):
        raise ConfigError(f"{where}.{key}: only auth type 'authorization_code' takes it")
    if not isinstance(raw.get("client_id"), str) or not raw["client_id"]:
        raise ConfigError(f"{where}.client_id: missing (the OAuth client id this worker authenticates as)")
    out = {k: v for k, v in raw.items() if k not in ("client_secret", "private_key")}
    secret_key, other = (
        ("client_secret", "private_key") if kind == "client_credentials" else ("private_key", "client_secret")
    )
    if other in raw:
        raise ConfigError(f"{where}.{other}: not used by auth type {kind!r} (it takes {secret_key})")
    ref = raw.get(secret_key)
    forms = '{ env = "VAR" }' if secret_key == "client_secret" else '{ env = "VAR" } or { file = "PATH" }'
    if ref is None:
        raise ConfigError(f"{where}.{secret_key}: missing, give it by reference as {forms}")
    if isinstance(ref, dict) and len(ref) == 1 and isinstance(ref.get("env"), str) and ref["env"]:
        if not env.get(ref["env"]):
            raise ConfigError(f"{where}.{secret_key}: environment variable {ref['env']} is not set")
        out[f"{secret_key}_env"] = ref["env"]
    elif (
        secret_key == "private_key"
        and isinstance(ref, dict)
        and len(ref) == 1
        and isinstance(ref.get("file"), str)
        and ref["file"]
    ):
        if not os.access(ref["file"], os.R_OK) or not Path(ref["file"]).is_file():
            raise ConfigError(f"{where}.private_key: file {ref['file']} does not exist or cannot be read")
        out["private_key_file"] = ref["file"]
    else:
        raise ConfigError(f"{where}.{secret_key}: given by reference only, as {forms}")
    return out


def _env_ref(ref: Any, where: str, env: Mapping[str, str]) -> str:
    """``{ env = "VAR" }`` → ``VAR``, which must be set."""
    if not (isinstance(ref, dict) and set(ref) == {"env"} and isinstance(ref["env"], str) and ref["env"]):
        raise ConfigError(f'{where}: given by reference only, as {{ env = "VAR" }}')
    if not env.get(ref["env"]):
        raise ConfigError(f"{where}: environment variable {ref['env']} is not set")
    return str(ref["env"])


def _workload_auth(raw: dict[str, Any], where: str, env: Mapping[str, str]) -> dict[str, Any]:
    """``type = "workload_identity"``: the platform's token (a JWT) by reference, a file or a variable. Its file is
    not required to exist at start: the platform (kubelet, a CI runner) may write it after the worker starts, and it
    is read at each token request."""
    for key in ("client_secret", "private_key", *_USER_AUTH_KEYS):
        if key in raw:
            raise ConfigError(f"{where}.{key}: not used by auth type 'workload_identity' (it takes assertion)")
    if "client_id" in raw and (not isinstance(raw["client_id"], str) or not raw["client_id"]):
        raise ConfigError(f"{where}.client_id: must be a non-empty string (or left out)")
    out = {k: v for k, v in raw.items() if k != "assertion"}
    ref = raw.get("assertion")
    if isinstance(ref, dict) and len(ref) == 1 and isinstance(ref.get("file"), str) and ref["file"]:
        out["assertion_file"] = ref["file"]
    elif isinstance(ref, dict) and "env" in ref:
        out["assertion_env"] = _env_ref(ref, f"{where}.assertion", env)
    else:
        raise ConfigError(
            f'{where}.assertion: the platform token, given by reference only, as {{ file = "PATH" }} or '
            '{ env = "VAR" }'
        )
    return out


def _enterprise_auth(raw: dict[str, Any], where: str, env: Mapping[str, str]) -> dict[str, Any]:
    """``type = "enterprise_managed"`` (SEP-990): this app's client at the MCP server's authorization server (id and
    secret by reference), the subject's identity provider (issuer, token endpoint, this app's client id there and
    optionally its secret by reference). The subject's ID token is never configured: ``mcp-tasks login
    --id-token-file`` hands it over to the token store."""
    for key in ("private_key", *_USER_AUTH_KEYS):
        if key in raw:
            raise ConfigError(f"{where}.{key}: not used by auth type 'enterprise_managed'")
    if not isinstance(raw.get("client_id"), str) or not raw["client_id"]:
        raise ConfigError(f"{where}.client_id: missing (this app's client id at the MCP server's authorization server)")
    out = {k: v for k, v in raw.items() if k not in ("client_secret", "idp_client_secret")}
    if "client_secret" not in raw:
        raise ConfigError(f'{where}.client_secret: missing, give it by reference as {{ env = "VAR" }}')
    out["client_secret_env"] = _env_ref(raw["client_secret"], f"{where}.client_secret", env)
    if "idp_client_secret" in raw:
        if "idp_client_id" not in raw:
            raise ConfigError(f"{where}.idp_client_secret: needs the idp_client_id it belongs to")
        out["idp_client_secret_env"] = _env_ref(raw["idp_client_secret"], f"{where}.idp_client_secret", env)
    for key in ("idp_issuer", "idp_token_endpoint"):
        value = raw.get(key)
        if not isinstance(value, str) or not value.startswith(("https://", "http://")):
            raise ConfigError(f"{where}.{key}: missing or not an http(s) URL")
    return out


def _user_auth(raw: dict[str, Any], where: str, env: Mapping[str, str]) -> dict[str, Any]:
    """``type = "authorization_code"``: a subject's grant. The client is pre-registered (``client_id``, with a
    ``client_secret`` by reference for a confidential one), else identified by ``client_metadata_url`` (CIMD), else
    registered dynamically. The subject is never configured: it is each task's principal."""
    if "private_key" in raw:
        raise ConfigError(f"{where}.private_key: not used by auth type 'authorization_code'")
    if "client_id" in raw and (not isinstance(raw["client_id"], str) or not raw["client_id"]):
        raise ConfigError(f"{where}.client_id: must be a non-empty string (or left out)")
    out = {k: v for k, v in raw.items() if k != "client_secret"}
    ref = raw.get("client_secret")
    if ref is not None:
        if "client_id" not in raw:
            raise ConfigError(f"{where}.client_secret: needs the client_id it belongs to")
        if not (isinstance(ref, dict) and set(ref) == {"env"} and isinstance(ref["env"], str) and ref["env"]):
            raise ConfigError(f'{where}.client_secret: given by reference only, as {{ env = "VAR" }}')
        if not env.get(ref["env"]):
            raise ConfigError(f"{where}.client_secret: environment variable {ref['env']} is not set")
        out["client_secret_env"] = ref["env"]
    return out


def server_config(name: str, raw: Any, *, env: Mapping[str, str] | None = None) -> ServerConfig:
    """One ``[servers.NAME]`` table (as parsed from TOML, or the same shape from Python), validated.

    ``env``: where the auth table's references are checked (default: this process's environment).
    """
    return _server(name, raw, os.environ if env is None else env)


def _server(name: str, raw: Any, env: Mapping[str, str]) -> ServerConfig:
    where = f"servers.{name}"
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: must be a table")
    raw = dict(raw)
    problems: list[str] = []

    def check(step: Any, *args: Any) -> Any:
        try:
            return step(*args)
        except ConfigError as exc:
            problems.extend(exc.problems)
            return None

    # An unknown key is named first, even when it also leaves a required one missing (`ulr` for `url`).
    problems += [
        f"{where}.{key}: unknown key{_did_you_mean(key, ServerConfig.model_fields)}"
        for key in raw
        if key not in ServerConfig.model_fields
    ]
    if "auth" in raw:
        raw["auth"] = check(_auth, raw["auth"], f"{where}.auth", env)
        if "command" in raw:
            problems.append(f"{where}.auth: OAuth is for servers reached by 'url', not stdio commands")
    if "headers" in raw:
        raw["headers"] = check(_refs, raw["headers"], f"{where}.headers")
    if "env" in raw:
        raw["env"] = check(_refs, raw["env"], f"{where}.env")
    if isinstance(raw.get("command"), str):
        problems.append(f'{where}.command: must be a list of arguments, e.g. ["node", "server.mjs"]')
    if ("url" in raw) == ("command" in raw):
        problems.append(f"{where}: needs exactly one of 'url' or 'command'")
    tools = raw.get("tools", {})
    if not isinstance(tools, dict):
        problems.append(f"{where}.tools: must be a table")
        tools = {}
    policies = {}
    for tool, policy in tools.items():
        try:
            policies[tool] = ToolPolicy.model_validate(policy)
        except ValidationError as exc:
            problems += _explained(exc, f"{where}.tools.{tool}", ToolPolicy)
    if problems:
        raise ConfigError("; ".join(problems), problems)
    raw["tools"] = policies
    try:
        cfg = ServerConfig.model_validate(raw)
        cfg.endpoint()
    except ValidationError as exc:
        raise ConfigError(_explain(exc, where, ServerConfig), _explained(exc, where, ServerConfig)) from None
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    return cfg


def _did_you_mean(key: str, known: Any) -> str:
    close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _keys_at(model: Any, path: tuple[Any, ...]) -> list[str]:
    """The keys a table at ``path`` under ``model`` may have (its model's fields), for "did you mean"."""
    t: Any = model
    for part in (*path, None):
        while not (isinstance(t, type) and issubclass(t, BaseModel)) and typing.get_origin(t) is not dict:
            args = [a for a in typing.get_args(t) if a is not type(None)]
            if not args:
                return []
            t = next((a for a in args if isinstance(a, type) and issubclass(a, BaseModel)), args[0])
        if part is None:
            break
        if typing.get_origin(t) is dict:
            t = typing.get_args(t)[1]
            continue
        field = t.model_fields.get(part)
        if field is None:
            return []
        t = field.annotation
    return list(t.model_fields) if isinstance(t, type) and issubclass(t, BaseModel) else []


def _explained(exc: ValidationError, prefix: str = "", model: Any = None) -> list[str]:
    """One line per error, an unknown key with the known one closest to it (in every section)."""
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        key = f"{prefix}.{loc}" if prefix and loc else (prefix or loc)
        hint = ""
        if err.get("type") == "extra_forbidden" and model is not None and err["loc"]:
            hint = _did_you_mean(str(err["loc"][-1]), _keys_at(model, tuple(err["loc"][:-1])))
        lines.append(f"{key}: {validation_message(err)}{hint}")
    return lines


def _explain(exc: ValidationError, prefix: str = "", model: Any = None) -> str:
    return "; ".join(_explained(exc, prefix, model))


ENV_OVERRIDES = {
    "TEMPORAL_ADDRESS": ("temporal", "address"),
    "TEMPORAL_NAMESPACE": ("temporal", "namespace"),
    "MCP_TASKS_TASK_QUEUE": ("temporal", "task_queue"),
    "MCP_TASKS_METRICS_PORT": ("worker", "metrics_port"),
    "MCP_TASKS_STATE_DIR": ("worker", "state_dir"),
}

#: ``[temporal.storage]`` keys from the environment (a container's configuration).
STORAGE_ENV_OVERRIDES = {
    "MCP_TASKS_STORAGE_DRIVER": "driver",
    "MCP_TASKS_STORAGE_BUCKET": "bucket",
    "MCP_TASKS_STORAGE_PREFIX": "prefix",
    "MCP_TASKS_STORAGE_ENDPOINT": "endpoint",
}


def load_config(
    path: str | Path | None = None, *, env: dict[str, str] | None = None, temporal_only: bool = False
) -> WorkerConfig:
    """Load ``path`` (or ``$MCP_TASKS_CONFIG``; none = defaults), then apply environment overrides.

    ``temporal_only``: what a command that only talks to Temporal (``status``, ``result``, ``list``...) reads of the
    file: its ``[temporal]`` table (the other tables are not checked, so an operator's shell need not hold the
    workers' credential variables)."""
    env = dict(os.environ if env is None else env)
    path = path or env.get("MCP_TASKS_CONFIG")
    raw: dict[str, Any] = {}
    if path:
        try:
            raw = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"config file {path} does not exist") from None
        except IsADirectoryError:
            raise ConfigError(f"config file {path} is a directory, not a TOML file") from None
        except OSError as exc:
            raise ConfigError(f"config file {path} cannot be read: {exc.strerror or exc}") from None
        except UnicodeDecodeError as exc:
            raise ConfigError(f"config file {path} is not UTF-8 text (byte {exc.start})") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    # Every problem of the file at once (issue 43), each unknown key with the known one closest to it.
    sections = ("temporal", "worker", "servers")
    problems = [
        f"unknown top-level key(s): {key}{_did_you_mean(key, sections)} (expected temporal, worker, servers)"
        for key in sorted(set(raw) - set(sections))
    ]
    raw = {k: v for k, v in raw.items() if k in sections}
    for var, (section, key) in ENV_OVERRIDES.items():
        if env.get(var) and isinstance(raw.setdefault(section, {}), dict):
            raw[section][key] = env[var]
    for var, key in STORAGE_ENV_OVERRIDES.items():
        if env.get(var):
            temporal = raw.setdefault("temporal", {})
            if not isinstance(temporal, dict):
                raise ConfigError("temporal: must be a table")
            storage = temporal.setdefault("storage", {})
            if not isinstance(storage, dict):
                raise ConfigError("temporal.storage: must be a table")
            storage[key] = env[var]
    if temporal_only:
        # The embedded store's directory follows [worker] state_dir: a reader on the workers' machine finds it there.
        worker = raw.get("worker")
        state = worker.get("state_dir") if isinstance(worker, dict) else None
        raw = {"temporal": raw["temporal"]} if "temporal" in raw else {}
        if isinstance(state, str):
            raw["worker"] = {"state_dir": state}
        problems = []
    servers_raw = raw.pop("servers", {})
    if not isinstance(servers_raw, dict):
        problems.append("servers: must be a table of [servers.NAME] tables")
        servers_raw = {}
    cfg: WorkerConfig | None = None
    try:
        cfg = WorkerConfig.model_validate(raw)
    except ValidationError as exc:
        problems += _explained(exc, "", WorkerConfig)
    servers = {}
    for name, table in servers_raw.items():
        try:
            servers[name] = _server(name, table, env)
        except ConfigError as exc:
            problems += exc.problems
    if problems or cfg is None:
        raise ConfigError("; ".join(problems), problems)
    cfg.servers = servers
    return cfg
