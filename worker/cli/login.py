"""``mcp-tasks login SERVER [--subject S]``: a subject's consent for a server, given at a terminal (RFC 8252 loopback).

The server's challenge starts it, as for a task: discovery, the client identity, the consent URL, which a person opens
(printed, and given to the browser unless ``--no-browser``); the browser comes back to a loopback listener on the
configured ``redirect_uri``, whose ``state`` and ``iss`` are checked and whose code is exchanged here; the grant goes
to the token store (encrypted with ``MCP_TASKS_TOKEN_KEY``), where a worker's tasks for that subject find it. Then
``tools/list`` with it shows that it works, and the tasks waiting for that grant are told (``mcp_task_consent``).
``--callback URL`` answers a consent a task waits for (its URL in ``mcp-tasks status``) from the URL the browser
came back to: checked, kept in the store, and handed to the task, whose worker exchanges the code
(:mod:`mcp_temporal_tasks.worker.consent`); a consent no task waits for is completed here. ``--new-key`` prints a
key for the store and exits. For an ``enterprise_managed`` server (SEP-990) there is no consent here:
``--id-token-file`` hands over the subject's ID token from their identity provider, and the tools are listed with it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import getpass
import http.server
import json
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from mcp_temporal_tasks.activities.wire import McpWireError, TaskUnreachable, TransportError, WireSession, auth
from mcp_temporal_tasks.activities.wire.auth import authorization_code
from mcp_temporal_tasks.activities.wire.auth.discovery import is_loopback
from mcp_temporal_tasks.activities.wire.auth.token_store import StoreError, new_key, open_store
from mcp_temporal_tasks.protocol.tasks import Endpoint
from mcp_temporal_tasks.worker import consent
from mcp_temporal_tasks.worker.cli.connection import temporal
from mcp_temporal_tasks.worker.cli.parser import EXIT_ENDED, EXIT_OK, EXIT_UNREACHABLE, EXIT_USAGE, CliError
from mcp_temporal_tasks.worker.cli.plan import check_env_refs, configuration, temporal_target
from mcp_temporal_tasks.worker.printable import printable

if TYPE_CHECKING:
    from temporalio.client import Client

#: How many consents one login answers: the first, and one step-up (``403 insufficient_scope``).
MAX_CONSENTS = 2


def _wait_for_redirect(redirect_uri: str, deadline: float, listening: threading.Event) -> str:
    """The first request to ``redirect_uri``'s path on its loopback address, as a URL (stdlib ``http.server``)."""
    parts = urlsplit(redirect_uri)
    got: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            if urlsplit(self.path).path != (parts.path or "/"):
                self.send_error(404)
                return
            got.append(f"{parts.scheme}://{parts.netloc}{self.path}")
            body = b"mcp-tasks: consent received; you can close this window.\n"
            self.send_response(200)
            self.send_header("content-type", "text/plain; charset=utf-8")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the stdlib's signature
            return  # the query holds the code: never logged

    server = http.server.HTTPServer((parts.hostname or "127.0.0.1", parts.port or 80), Handler)
    server.timeout = 0.5
    listening.set()
    try:
        while not got and time.monotonic() < deadline:
            server.handle_request()
    finally:
        server.server_close()
    if not got:
        raise TimeoutError
    return got[0]


async def _complete(args: argparse.Namespace) -> int:
    """``--callback URL``: the answer to a consent, from where the person's browser came back: handed to the task
    that waits for it, or (no task waits) its code exchanged here."""
    from mcp_temporal_tasks.protocol.wire_errors import AuthorizationRequired

    try:
        store = open_store()
        answered = authorization_code.accept_callback(args.callback, store=store)
        if answered.workflow_id is None:
            grant = await authorization_code.exchange_answer(answered.ref, store=store)
            out = {"grant": grant, "workflow_id": None, "told": False}
            text = f"consent completed: grant {grant}; the task can be run again"
        else:
            told = await _tell(args, lambda client: consent.hand_over(client, answered))
            out = {"grant": answered.grant, "workflow_id": answered.workflow_id, "told": bool(told)}
            text = f"consent received: task {printable(answered.workflow_id)} " + (
                "resumes (its worker exchanges the code)" if told else _NOT_TOLD
            )
    except AuthorizationRequired as exc:
        raise CliError(f"consent not completed: {exc}", EXIT_ENDED, kind="refused") from None
    except StoreError as exc:
        raise CliError(f"token store: {exc}", EXIT_USAGE) from None
    if args.json:
        print(json.dumps(out))
    else:
        print(text)
    return EXIT_OK


_NOT_TOLD = "was not told now (Temporal unreachable); it finds the answer kept in the store within minutes"


async def _tell(args: argparse.Namespace, fn: Callable[[Client], Awaitable[Any]]) -> Any:
    """``fn`` with a client of the Temporal the options name; None when none answers (the task's own re-checks
    then find what was kept)."""
    try:
        async with temporal(temporal_target(args)) as (client, _):
            return await fn(client)
    except (CliError, OSError, RuntimeError):
        return None


async def _list_tools(args: argparse.Namespace, endpoint: Endpoint) -> dict[str, Any]:
    """``tools/list`` with the grant just given (what shows that it works): one bounded session, its failure one
    :class:`CliError` (unreachable, or refused with the server's words)."""
    try:
        client = await asyncio.wait_for(WireSession.connect(endpoint), timeout=args.timeout + 30)
        try:
            return await asyncio.wait_for(client.list_tools(), timeout=args.timeout + 30)
        finally:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(client.aclose(), 5)
    except (TimeoutError, TransportError, TaskUnreachable) as exc:
        raise CliError(f"MCP server unreachable: {exc or 'no answer in time'}", EXIT_UNREACHABLE) from None
    except McpWireError as exc:
        raise CliError(f"login to {endpoint.identity()} failed: {exc}", EXIT_ENDED, kind="refused") from None


async def _hand_over(args: argparse.Namespace, endpoint: Endpoint, subject: str) -> int:
    """Enterprise-managed authorization: ``subject``'s ID token from their identity provider (``--id-token-file``,
    ``-`` for stdin; never an argument, which ``ps`` shows) goes to the token store; then ``tools/list`` with it (the
    exchange for an ID-JAG and the JWT-bearer grant) shows that it works."""
    from mcp_temporal_tasks.activities.wire.auth.base import MAX_JWT, NoToken
    from mcp_temporal_tasks.activities.wire.auth.enterprise_managed import hand_over_id_token

    source = getattr(args, "id_token_file", None)
    if not source:
        raise CliError(
            "this server's grant is enterprise-managed: give the subject's ID token from their identity provider "
            "with --id-token-file FILE (- for stdin)",
            EXIT_USAGE,
        )
    try:
        if source == "-":
            raw = sys.stdin.buffer.read(MAX_JWT + 1)
        else:
            with open(source, "rb") as fh:
                raw = fh.read(MAX_JWT + 1)
    except OSError as exc:
        raise CliError(f"--id-token-file {source}: {exc.strerror or type(exc).__name__}", EXIT_USAGE) from None
    if len(raw) > MAX_JWT:
        raise CliError(f"--id-token-file {source}: larger than {MAX_JWT} bytes, not an ID token", EXIT_USAGE)
    assert endpoint.auth is not None
    spec = endpoint.auth.model_copy(update={"subject": subject})
    try:
        hand_over_id_token(spec, subject, raw.decode("utf-8", errors="replace"))
    except NoToken as exc:
        raise CliError(f"--id-token-file {source}: {exc.reason}", EXIT_USAGE) from None
    except StoreError as exc:
        raise CliError(f"token store: {exc}", EXIT_USAGE) from None
    endpoint = endpoint.model_copy(update={"auth": spec})
    tools = await _list_tools(args, endpoint)
    out = {"server": args.server, "subject": subject, "consents": 0, "tools": len(tools)}
    if args.json:
        print(json.dumps(out))
    else:
        print(f"logged in to {args.server} as {subject!r} ({len(tools)} tools; the ID token is in the token store)")
    return EXIT_OK


async def cmd_login(args: argparse.Namespace) -> int:
    if args.new_key:
        print(new_key())
        return EXIT_OK
    if args.callback:
        return await _complete(args)
    if not args.server:
        raise CliError("login needs SERVER (a server name of the worker configuration)", EXIT_USAGE)
    cfg = configuration(args)
    server = cfg.servers.get(args.server)
    if server is None:
        known = ", ".join(sorted(cfg.servers)) or "none"
        raise CliError(f"unknown server {args.server!r} (configured: {known}); use --config", EXIT_USAGE)
    check_env_refs(cfg, only=[args.server])
    endpoint = server.endpoint()
    if endpoint.auth is not None and endpoint.auth.type == "enterprise_managed":
        return await _hand_over(args, endpoint, args.subject or getpass.getuser())
    if getattr(args, "id_token_file", None):
        raise CliError(
            f"--id-token-file is for a server of auth type 'enterprise_managed'; {args.server!r} is not one", EXIT_USAGE
        )
    if endpoint.auth is None or endpoint.auth.type != "authorization_code":
        raise CliError(
            f"server {args.server!r} is not configured for a subject's consent "
            '([servers.NAME.auth] type = "authorization_code")',
            EXIT_USAGE,
        )
    subject = args.subject or getpass.getuser()
    endpoint = endpoint.model_copy(update={"auth": endpoint.auth.model_copy(update={"subject": subject})})
    redirect_uri = endpoint.auth.redirect_uri if endpoint.auth is not None else ""
    parts = urlsplit(redirect_uri)
    if parts.scheme != "http" or not is_loopback(parts.hostname):
        raise CliError(
            f"login listens on a loopback redirect_uri (http://127.0.0.1:PORT/PATH); this server's is {redirect_uri}",
            EXIT_USAGE,
        )
    asked = 0

    async def present(url: str) -> str:
        nonlocal asked
        asked += 1
        if asked > MAX_CONSENTS:
            raise CliError(f"the server asked for consent more than {MAX_CONSENTS} times; stopped", EXIT_ENDED)
        listening = threading.Event()
        deadline = time.monotonic() + args.timeout
        waiting = asyncio.ensure_future(asyncio.to_thread(_wait_for_redirect, redirect_uri, deadline, listening))
        await asyncio.to_thread(listening.wait, 5)
        sys.stderr.write(f"mcp-tasks: open this URL to consent for subject {subject!r}:\n{url}\n")
        sys.stderr.flush()
        if not args.no_browser:
            import webbrowser

            with contextlib.suppress(Exception):
                webbrowser.open(url)
        try:
            return await waiting
        except TimeoutError:
            raise CliError(f"no consent within {args.timeout:g} s", EXIT_ENDED) from None

    token = authorization_code.consent_handler.set(present)
    try:
        tools = await _list_tools(args, endpoint)
    finally:
        authorization_code.consent_handler.reset(token)
    # The grant this login gave (its opaque id, from the session's own token source): who waits for it is told.
    source = auth.token_source(endpoint.url, endpoint.auth) if endpoint.url and endpoint.auth else None
    grant = getattr(source, "grant", None)
    woken = await _tell(args, lambda client: consent.wake_waiting(client, grant)) if grant and asked else 0
    out = {"server": args.server, "subject": subject, "consents": asked, "tools": len(tools), "tasks_told": woken or 0}
    if args.json:
        print(json.dumps(out))
    else:
        told = f"; {woken} waiting task(s) told" if woken else ""
        print(f"logged in to {args.server} as {subject!r} ({len(tools)} tools; {asked} consent(s) given{told})")
    return EXIT_OK
