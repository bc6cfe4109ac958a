"""What a command works out once before it connects: configuration, ``Target``, ``run``'s ``RunPlan``.

Its configuration (``--config``, else ``$MCP_TASKS_CONFIG``: read once), where its Temporal is (the one address rule,
``runner.connect_options``, applied once, with the one ``HOST:PORT`` check) and, for ``run``, the request and how its
worker runs, handed down. Nothing below a command reads the file again or applies the rule again.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import ValidationError

from mcp_temporal_tasks.protocol.tasks import Endpoint
from mcp_temporal_tasks.worker.cli.parser import EXIT_USAGE, RUN_QUEUE_PREFIX, CliError, check_id
from mcp_temporal_tasks.worker.config import ConfigError, WorkerConfig, is_host_port, load_config
from mcp_temporal_tasks.worker.temporal_client import connect_options
from mcp_temporal_tasks.workflows.client import default_workflow_id
from mcp_temporal_tasks.workflows.records import (
    McpTaskRequest,
    RequestTooLarge,
    check_request_size,
    validation_message,
)

# --- configuration -------------------------------------------------------------------------------


def configuration(args: argparse.Namespace) -> WorkerConfig:
    """The worker configuration of ``--config`` (else ``$MCP_TASKS_CONFIG``, else the defaults); exit 2 when invalid."""
    try:
        return load_config(getattr(args, "config", None))
    except ConfigError as exc:
        raise CliError(f"configuration: {exc}", EXIT_USAGE, kind="config") from None


def temporal_config(args: argparse.Namespace) -> WorkerConfig:
    """What a command that only talks to Temporal reads of ``--config`` (else ``$MCP_TASKS_CONFIG``): its
    ``[temporal]`` table; exit 2 when that is invalid."""
    try:
        return load_config(getattr(args, "config", None), temporal_only=True)
    except ConfigError as exc:
        raise CliError(f"configuration: {exc}", EXIT_USAGE, kind="config") from None


def missing_env_refs(where: str, endpoint: Endpoint) -> list[str]:
    """``where.headers.NAME`` / ``where.env.NAME`` entries whose environment variable is not set."""
    missing = []
    for table, refs in (("headers", endpoint.header_refs or {}), ("env", endpoint.env_refs or {})):
        for name, var in refs.items():
            if var not in os.environ:
                missing.append(f'{where}.{table}.{name} = {{ env = "{var}" }}: ${var} is not set')
    return missing


def check_env_refs(cfg: WorkerConfig, only: list[str] | None = None, inline: Endpoint | None = None) -> None:
    """A credential reference to an unset variable is a configuration error, named before anything runs."""
    missing = []
    for name, server in sorted(cfg.servers.items()):
        if only is None or name in only:
            missing += missing_env_refs(f"servers.{name}", server.endpoint())
    if inline is not None:
        missing += missing_env_refs("the request's server", inline)
    if missing:
        raise CliError("configuration: " + "; ".join(missing), EXIT_USAGE, kind="config")


# --- where Temporal is ---------------------------------------------------------------------------


def check_address(address: str, source: str) -> None:
    """``HOST:PORT`` or exit 2 naming where the address came from."""
    if not is_host_port(address):
        raise CliError(f"{source} {address!r} is not HOST:PORT (e.g. localhost:7233)", EXIT_USAGE)


def address_source(args: argparse.Namespace) -> str:
    """Where the address came from, for messages (the order of ``runner.connect_options``)."""
    if args.address:
        return "--address"
    if os.environ.get("TEMPORAL_ADDRESS"):
        return "TEMPORAL_ADDRESS"
    return "the Temporal address (temporal.toml)"  # [temporal] address is checked when the file loads


def check_ui_url(url: str, source: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc or any(c.isspace() for c in url):
        raise CliError(f"{source} {url!r} is not an http(s) URL (e.g. http://localhost:8080)", EXIT_USAGE)
    return url.rstrip("/")


@dataclass(frozen=True)
class Target:
    """Where a command's Temporal is, by the one address rule (``runner.connect_options``: ``--address``,
    ``TEMPORAL_ADDRESS``, a temporal.toml profile, the ``[temporal]`` table of ``cfg``, else the default), applied
    once; ``cfg`` is the configuration the command read (its ``[temporal]`` table, TLS, tracing, storage)."""

    address: str
    namespace: str
    #: Given, not defaulted: only at the default may the embedded Temporal start.
    explicit: bool
    #: Where the address came from, for messages.
    source: str
    #: ``Client.connect``'s keyword arguments (TLS, API key, ...), ``target_host`` and ``namespace`` included.
    options: Mapping[str, Any]
    cfg: WorkerConfig
    #: ``--ui-url``, checked (it wins over every other UI address).
    ui_url: str | None = None


def target_of(args: argparse.Namespace, cfg: WorkerConfig, ui_url: str | None = None) -> Target:
    """The target of ``args`` over ``cfg`` (``ui_url``: ``--ui-url``, checked); exit 2 for a malformed address or
    Temporal client configuration."""
    try:
        options, explicit = connect_options(address=args.address, namespace=getattr(args, "namespace", None), cfg=cfg)
    except ConfigError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    source = address_source(args)
    check_address(options["target_host"], source)
    return Target(options["target_host"], options["namespace"], explicit, source, options, cfg, ui_url)


def temporal_target(args: argparse.Namespace) -> Target:
    """The target of a command that only talks to Temporal (``status``, ``result``, ``list``...): only the
    ``[temporal]`` table of its configuration is read (an operator's shell need not hold the workers' credential
    variables). ``--ui-url`` (``result``) is checked before anything connects."""
    cfg = temporal_config(args)
    given = getattr(args, "ui_url", None)
    return target_of(args, cfg, check_ui_url(given, "--ui-url") if given else None)


# --- run -----------------------------------------------------------------------------------------


def plain_errors(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'request'}: {validation_message(e)}" for e in exc.errors())
    return str(exc)


def read_args(spec: str | None) -> str:
    """``--args``: inline JSON, ``@FILE`` (a file's contents) or ``-`` (stdin): large arguments need not pass
    through the command line, which the OS caps (~128 KiB per argument)."""
    if not spec:
        return ""
    if spec == "-":
        raw, where = sys.stdin.buffer.read(), "--args - (stdin)"
        if not raw.strip():
            # Not `{}`: an empty stdin is a pipe that produced nothing (a failed command before it), not a request.
            raise CliError(
                "--args -: standard input was empty; give the arguments as a JSON object on stdin "
                "(e.g. echo '{}' | mcp-tasks run ...), or leave --args out for none",
                EXIT_USAGE,
            )
    elif spec.startswith("@"):
        path = spec[1:]
        try:
            raw, where = Path(path).read_bytes(), f"--args @{path}"
        except OSError as exc:
            raise CliError(f"--args @{path}: cannot read the file: {exc.strerror or exc}", EXIT_USAGE) from None
    else:
        return spec
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CliError(f"{where}: not UTF-8 text (byte {exc.start})", EXIT_USAGE) from None


def run_request(args: argparse.Namespace) -> McpTaskRequest:
    """The request of `run`'s options; exit 2 for one that is not valid (refused before any workflow starts)."""
    text = read_args(args.args)
    try:
        arguments = json.loads(text) if text else {}
    except json.JSONDecodeError as exc:
        raise CliError(f"--args is not valid JSON: {exc}", EXIT_USAGE) from None
    except RecursionError:
        raise CliError("--args is nested too deeply", EXIT_USAGE) from None
    if not isinstance(arguments, dict):
        raise CliError("--args must be a JSON object, e.g. '{\"seconds\": 3}'", EXIT_USAGE)
    try:
        server: str | Endpoint
        if args.server:
            server = args.server
        elif args.url:
            server = Endpoint(url=args.url)
        else:
            server = Endpoint(command=shlex.split(args.command))
        request = McpTaskRequest(
            server=server,
            tool=args.tool,
            arguments=arguments,
            era=args.era,
            ttl_s=args.ttl,
            replay=args.replay,
            idempotent=True if args.idempotent else None,
            idempotency_key=args.idempotency_key,
            principal=args.principal,
        )
        check_request_size(request.arguments)  # refused here, before any workflow starts
        return request
    except RequestTooLarge as exc:
        raise CliError(f"--args: {exc}", EXIT_USAGE) from None
    except (ValidationError, ValueError) as exc:
        raise CliError(f"invalid request: {plain_errors(exc)}", EXIT_USAGE) from None


def check_inline_for_workers(request: McpTaskRequest, cfg: WorkerConfig, how: str) -> None:
    """``--detach``/``--no-worker`` with ``--url``/``--command``: the running workers decide, and a worker refuses an
    inline endpoint unless its ``[worker]`` table allows that kind. Refused here (exit 2) unless the configuration
    this command was given (``--config``/``$MCP_TASKS_CONFIG``, the workers' own) allows it."""
    server = request.server
    if not isinstance(server, Endpoint):
        return
    w = cfg.worker
    if server.url is not None and not w.allow_inline_endpoints:
        key, flag = "allow_inline_endpoints", "--url"
    elif server.command is not None and not w.allow_inline_commands:
        key, flag = "allow_inline_commands", "--command"
    else:
        return
    raise CliError(
        f"{how} {flag}: a worker refuses an inline endpoint unless its [worker] {key} = true (see "
        f"Trust model), so no worker would run this task; use --server NAME (a configured server), run "
        f"without {how} (this command's own worker takes the endpoint you typed), or give --config with "
        f"the workers' configuration if it allows it",
        EXIT_USAGE,
    )


@dataclass(frozen=True)
class RunPlan:
    """Everything `run` knows before it connects, checked in the order its errors are reported: the request, the
    configuration, the server, the workflow id, where Temporal is, and how the task's worker runs."""

    request: McpTaskRequest
    cfg: WorkerConfig
    wid: str
    target: Target
    #: This process is the task's worker (neither ``--no-worker`` nor ``--detach``).
    in_process: bool
    #: A private queue for a task this command's own worker runs (no other worker, with another configuration, may
    #: take it); ``--task-queue`` when given; else the configured one the running workers poll.
    queue: str
    #: The endpoint its user typed (``--url``/``--command``): the one inline endpoint the in-process worker may reach,
    #: beyond what the configuration allows.
    typed: tuple[Endpoint, ...]


def run_plan(args: argparse.Namespace) -> RunPlan:
    """`run`'s plan from its arguments; exit 2 (one line) for the first thing wrong, before anything connects."""
    request = run_request(args)
    cfg = configuration(args)
    ui_url = check_ui_url(args.ui_url, "--ui-url") if args.ui_url else None
    server = request.server
    if isinstance(server, str) and server not in cfg.servers and not args.no_worker:
        known = ", ".join(sorted(cfg.servers)) or "none"
        raise CliError(f"unknown server {server!r} (configured: {known}); use --config, --url or --command", EXIT_USAGE)
    in_process = not args.no_worker and not args.detach
    if in_process:  # this process is the worker: its configuration must be complete
        check_env_refs(
            cfg,
            only=[server] if isinstance(server, str) else [],
            inline=server if isinstance(server, Endpoint) else None,
        )
    else:
        check_inline_for_workers(request, cfg, "--detach" if args.detach else "--no-worker")
    wid = args.id or default_workflow_id(request)
    check_id(wid, "--id")
    target = target_of(args, cfg, ui_url)  # a malformed address is bad input (exit 2), whatever the MCP server does
    queue = args.task_queue or (f"{RUN_QUEUE_PREFIX}{uuid.uuid4().hex[:12]}" if in_process else cfg.temporal.task_queue)
    return RunPlan(request, cfg, wid, target, in_process, queue, (server,) if isinstance(server, Endpoint) else ())
