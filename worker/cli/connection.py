"""The CLI's Temporal: connecting to a plan's ``Target``, the embedded server, UI links.

The ``Target`` (``plan.target_of``: address, namespace and TLS by ``runner.connect_options``) was checked once, in
the plan; the embedded server starts only when nothing serves the default address.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
from collections.abc import AsyncIterator
from urllib.parse import quote

from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from mcp_temporal_tasks.activities.result_store import state_dir
from mcp_temporal_tasks.worker.cli.parser import EXIT_UNREACHABLE, EXIT_USAGE, CliError, err, prog
from mcp_temporal_tasks.worker.cli.plan import Target, check_ui_url
from mcp_temporal_tasks.worker.devserver import (
    DevServer,
    DevServerError,
    StateInUse,
    free_port,
    port_open,
    ui_for_address,
)
from mcp_temporal_tasks.worker.printable import printable
from mcp_temporal_tasks.worker.temporal_client import connect_to, tracing_interceptor

DEFAULT_ADDRESS = "localhost:7233"


def split_address(address: str) -> tuple[str, int]:
    """(host, port) of an address ``plan.check_address`` accepted; an IPv6 host loses its brackets."""
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


def why(exc: BaseException) -> str:
    """An exception as one line that is never empty (a bare TimeoutError has no text)."""
    text = " ".join(str(exc).split())
    if isinstance(exc, TimeoutError) and not text:
        return "no answer in time"
    return printable(text) or type(exc).__name__


#: What a failed connect says, in words: (markers in the SDK's error text, the reason a person reads).
_CONNECT_FAILURES: tuple[tuple[tuple[str, ...], str], ...] = (
    (("Connection refused", "ConnectionRefused"), "nothing listens there (connection refused)"),
    (
        ("dns error", "failed to lookup address", "Name or service not known"),
        "its host name does not resolve (DNS lookup failed)",
    ),
    (("grpc-status header missing", "Unimplemented"), "something answers there, but not Temporal's gRPC frontend"),
    (
        ("certificate", "InvalidCertificate", "tls handshake", "TLS"),
        "the TLS handshake failed (certificate, or TLS on one side only)",
    ),
    (
        ("Unauthenticated", "PermissionDenied", "Request unauthorized"),
        "it refused this client's credentials (API key or client certificate)",
    ),
    (
        ("Connection reset", "ConnectionReset", "connection closed", "broken pipe"),
        "the connection was dropped (TLS on one side only, or a proxy in between?)",
    ),
    (("timed out", "Timeout", "deadline has elapsed"), "no answer in time"),
    (("Unavailable", "not healthy yet"), "it is not ready to serve (still starting?)"),
)


def connect_failure(exc: BaseException) -> str:
    """Why a connect to Temporal failed, in words a person reads (never the transport's ``tonic::`` dump)."""
    text = " ".join(str(exc).split())
    if isinstance(exc, TimeoutError) and not text:
        return "no answer in time"
    for markers, words in _CONNECT_FAILURES:
        if any(m.lower() in text.lower() for m in markers):
            return words
    inner = re.findall(r'message: "([^"]+)"', text)  # the innermost message of a Rust error's Debug form
    return printable(inner[-1] if inner else text.split(": ", 1)[-1])[:200] or type(exc).__name__


def start_hint(address: str, explicit: bool, source: str) -> str:
    """The command that gets a Temporal at ``address``: the embedded one over the state `run` used, when it is the
    default address; else what to check."""
    if not explicit:
        db = state_dir() / "temporal.db"
        where = f"the tasks `run` started are in {db}" if db.exists() else f"state in {state_dir()}"
        return (
            f"start one: {prog()} dev-server (the embedded Temporal stops when the `run` that started it exits; "
            f"{where})"
        )
    return (
        f"check {source} ({address}), or start a local one with `{prog()} dev-server` and use --address localhost:7233"
    )


async def check_namespace(client: Client, namespace: str, address: str) -> None:
    """An unknown namespace is exit 2, named as such (the server would answer each call with NOT_FOUND)."""
    try:
        await client.workflow_service.describe_namespace(DescribeNamespaceRequest(namespace=namespace), timeout=None)
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            raise CliError(
                f"namespace {namespace!r} does not exist at {address} (--namespace or TEMPORAL_NAMESPACE; "
                "create it with `temporal operator namespace create`)",
                EXIT_USAGE,
                kind="namespace",
            ) from None
        # Anything else (e.g. not permitted to describe it): the commands themselves will say.


def untraced(client: Client) -> Client:
    """``client`` without its interceptors (the same connection): what the live view polls with, so a traced `run`
    does not export a trace for every status query it makes (twice a second)."""
    if not client.config().get("interceptors"):
        return client
    return Client(client.service_client, namespace=client.namespace, data_converter=client.data_converter)


def ui_base(
    address: str, *, given: str | None = None, configured: str | None = None, started: str | None = None
) -> str | None:
    """Where the Temporal UI of ``address`` is, or None when nothing says so (no link rather than a dead one):
    ``--ui-url``, then ``$MCP_TASKS_UI_URL``, then ``[temporal] ui_url``, then the dev server this command
    started, then the lock file of a dev server serving the default state at ``address``."""
    if given:
        return check_ui_url(given, "--ui-url")
    if os.environ.get("MCP_TASKS_UI_URL"):
        return check_ui_url(os.environ["MCP_TASKS_UI_URL"], "$MCP_TASKS_UI_URL")
    if configured:
        return check_ui_url(configured, "[temporal] ui_url")
    if started:
        return started.rstrip("/")
    return ui_for_address(address)


def ui_link(base: str | None, namespace: str, workflow_id: str) -> str | None:
    if base is None:
        return None
    return f"{base}/namespaces/{namespace}/workflows/{quote(workflow_id, safe='')}"


@contextlib.asynccontextmanager
async def temporal(
    target: Target, *, allow_embedded: bool = False, detached: bool = False
) -> AsyncIterator[tuple[Client, str | None]]:
    """Yield (client, UI base URL or None) for ``target`` (where the command's Temporal is, worked out once from its
    arguments and configuration). Starts the embedded default when allowed and nothing listens at the default.

    ``detached``: the caller exits before the task runs, so an embedded server (which would stop with it) is
    refused with the command that starts one that outlives it.
    """
    cfg, address, namespace, explicit = target.cfg, target.address, target.namespace, target.explicit
    server = None
    host, port = split_address(address)
    if not explicit and allow_embedded and not port_open(host, port):
        if detached:
            raise CliError(
                f"--detach needs a Temporal that outlives this command, and none serves at {address}: "
                "start one with `mcp-tasks dev-server` (and a worker with `mcp-tasks worker`), "
                "or run without --detach",
                EXIT_USAGE,
            )
        try:
            # The UI's usual port may be taken (another dev server's UI): the embedded one takes a free one then.
            server = await DevServer(
                port=port, ui_port=8233 if not port_open("127.0.0.1", 8233) else free_port()
            ).start_async()
        except StateInUse as exc:
            raise CliError(f"cannot start the embedded Temporal: {exc}", EXIT_USAGE, kind="state_in_use") from None
        except DevServerError as exc:
            raise CliError(f"cannot start the embedded Temporal: {exc}", EXIT_UNREACHABLE) from None
        err(f"started the embedded Temporal at {address} (state: {server.db}; UI {server.ui_url})")
    try:
        try:
            # An embedded server we started already serves (DevServer.start waits for that). Another that
            # listens may still be starting: it gets time to become healthy; nothing listening fails at once.
            wait_s = 5.0 if server is None and port_open(host, port) else 0.0
            # With [worker] tracing (`run`'s own configuration) this client traces too: the task's start is the root
            # of its trace, so its tools/call, tasks/get and tasks/result share one.
            interceptors = [tracing_interceptor()] if cfg.worker.tracing else None
            client = await asyncio.wait_for(
                connect_to(target.options, cfg=cfg, wait_s=wait_s, interceptors=interceptors), timeout=wait_s + 15
            )
        except Exception as exc:
            raise CliError(
                f"Temporal is unreachable at {address}: {connect_failure(exc)}; "
                f"{start_hint(address, explicit, target.source)}",
                EXIT_UNREACHABLE,
            ) from None
        await check_namespace(client, namespace, address)
        yield (
            client,
            target.ui_url
            or ui_base(address, configured=cfg.temporal.ui_url, started=server.ui_url if server else None),
        )
    finally:
        if server is not None:
            server.stop()
            # Said, since it started one: its UI link stops answering now, and its tasks wait in the state file.
            err(
                f"stopped the embedded Temporal this command started at {address} (its state stays in {server.db}; "
                "`mcp-tasks dev-server` keeps one running between commands)"
            )
