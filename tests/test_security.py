"""The worker's trust boundary, as a fault-injection review attacked it.

1. Inline endpoints: a worker runs no command, reaches no URL and resolves no credential reference that a
   request names, unless its ``[worker]`` configuration allows that kind explicitly.
2. Secrets: a server echoing the ``Authorization`` header (401/500 bodies, JSON-RPC errors) or a stdio child
   echoing its environment never gets a resolved value into an error, the workflow history or a log line.
3. Server text: control and bidi characters reach a terminal escaped; ``--json`` stays exact.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import logging
import sys
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from mcp_temporal_tasks.activities.activity_io import ResolveInput, ServerConfig
from mcp_temporal_tasks.activities.mcp_activities import McpActivities
from mcp_temporal_tasks.activities.wire import (
    AuthorizationRequired,
    Endpoint,
    JsonRpcError,
    McpWireError,
    TransportError,
    WireSession,
    redact,
)
from mcp_temporal_tasks.activities.wire.http_transport import HttpTransport
from mcp_temporal_tasks.worker.config import WorkerSettings, load_config
from mcp_temporal_tasks.worker.printable import printable
from mcp_temporal_tasks.workflows.client import outcome_of, start_mcp_task
from mcp_temporal_tasks.workflows.records import McpTaskRequest, Outcome, Timeouts
from tests.peers.harness import Peer
from tests.temporal_harness import address_of, cli, in_process_worker, one_json, unique

FAST = Timeouts(heartbeat_s=2, poll_floor_s=0.05, owner_pickup_s=4, submit_s=60)
#: A credential value no test output could contain by chance.
TOKEN = f"tok-{uuid.uuid4().hex}"
TOKEN_VAR = "MCP_TEST_SECURITY_TOKEN"


# --- a server that echoes what it was sent -----------------------------------------------------------


class _Echo(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _EchoServer

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.requests.append({"path": self.path, "headers": dict(self.headers.items())})
        auth = self.headers.get("Authorization") or ""
        msg_id = json.loads(raw).get("id") if raw else None
        route = self.path.strip("/")
        if route == "401":
            status, ctype, body = 401, "text/plain", f"invalid credentials: {auth} (token {auth.split(' ')[-1]})"
        elif route == "500":
            status, ctype, body = 500, "text/plain", f"internal error while checking {auth}"
        else:  # "rpc": a JSON-RPC error quoting the header in its message and data
            status, ctype = 200, "application/json"
            body = json.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": msg_id,
                    "error": {"code": -32603, "message": f"rejected {auth}", "data": {"seen": {"authorization": auth}}},
                }
            )
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class _EchoServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Echo)
        self.requests: list[dict[str, Any]] = []

    def url(self, route: str) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/{route}"


@pytest.fixture(scope="module")
def echo() -> Iterator[_EchoServer]:
    server = _EchoServer()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def assert_no_token(*texts: Any) -> None:
    for text in texts:
        rendered = text if isinstance(text, str) else json.dumps(text, default=str)
        assert TOKEN not in rendered, rendered[:500]


# --- 1. inline endpoints -----------------------------------------------------------------------------


URL = Endpoint(url="http://127.0.0.1:9/mcp")
URL_WITH_REFS = Endpoint(url="http://127.0.0.1:9/mcp", header_refs={"X-Leak": TOKEN_VAR})
COMMAND = Endpoint(command=["/bin/sh", "-c", "env > /tmp/leak"])
COMMAND_WITH_REFS = Endpoint(command=["node", "server.mjs"], env_refs={"TOKEN": TOKEN_VAR})


@pytest.mark.parametrize(
    "allowed, endpoint, keys",
    [
        ({}, URL, ["allow_inline_endpoints"]),
        ({}, COMMAND, ["allow_inline_commands"]),
        ({}, URL_WITH_REFS, ["allow_inline_endpoints", "allow_inline_credentials"]),
        ({"allow_inline_endpoints": True}, URL_WITH_REFS, ["allow_inline_credentials"]),
        ({"allow_inline_commands": True}, COMMAND_WITH_REFS, ["allow_inline_credentials"]),
        ({"allow_inline_endpoints": True, "allow_inline_credentials": True}, COMMAND, ["allow_inline_commands"]),
        ({"allow_inline_commands": True, "allow_inline_credentials": True}, URL, ["allow_inline_endpoints"]),
        (
            {"inline_allowlist": [URL]},
            URL_WITH_REFS,
            ["allow_inline_endpoints", "allow_inline_credentials"],
        ),  # exact only
        ({"inline_allowlist": [URL]}, Endpoint(url="http://127.0.0.1:9/other"), ["allow_inline_endpoints"]),
        ({"allow_inline_endpoints": True}, URL, []),
        ({"allow_inline_commands": True}, COMMAND, []),
        ({"allow_inline_endpoints": True, "allow_inline_credentials": True}, URL_WITH_REFS, []),
        ({"allow_inline_commands": True, "allow_inline_credentials": True}, COMMAND_WITH_REFS, []),
        ({"inline_allowlist": [URL]}, URL, []),
        ({"inline_allowlist": [COMMAND_WITH_REFS]}, COMMAND_WITH_REFS, []),
    ],
)
async def test_resolve_inline_rules(allowed: dict[str, Any], endpoint: Endpoint, keys: list[str]) -> None:
    from temporalio.exceptions import ApplicationError

    acts = McpActivities(**allowed)
    inp = ResolveInput(server=endpoint, tool="t")
    if not keys:
        profile = await acts.resolve(inp)
        assert profile.endpoint == endpoint
        return
    with pytest.raises(ApplicationError) as info:
        await acts.resolve(inp)
    assert info.value.type == "InlineEndpointRefused" and info.value.non_retryable
    for key in ("allow_inline_endpoints", "allow_inline_commands", "allow_inline_credentials"):
        assert (f"[worker] {key} = true" in info.value.message) == (key in keys), info.value.message


def test_a_plain_worker_allows_nothing_inline(tmp_path: Path) -> None:
    """Neither the defaults nor the shipped deploy file allow inline endpoints of any kind."""
    empty = tmp_path / "w.toml"
    empty.write_text("")
    deploy = Path(__file__).resolve().parent.parent / "deploy" / "worker.toml"
    for cfg in (load_config(empty, env={}), load_config(deploy, env={})):
        w = cfg.worker
        assert not (w.allow_inline_endpoints or w.allow_inline_commands or w.allow_inline_credentials)
    loaded = load_config(None, env={}).worker
    assert loaded == WorkerSettings()


async def test_default_worker_refuses_inline_endpoints(
    client: Client, queue: str, echo: _EchoServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TOKEN_VAR, f"Bearer {TOKEN}")
    marker = tmp_path / "ran"
    command = Endpoint(command=[sys.executable, "-c", f"open({str(marker)!r}, 'w').close()"])
    leak = Endpoint(url=echo.url("rpc"), header_refs={"X-Leak": TOKEN_VAR})
    before = len(echo.requests)
    cases = [
        (WorkerSettings(), command, "allow_inline_commands"),
        (WorkerSettings(), Endpoint(url=echo.url("rpc")), "allow_inline_endpoints"),
        (WorkerSettings(allow_inline_endpoints=True), leak, "allow_inline_credentials"),
    ]
    for settings, endpoint, key in cases:
        async with in_process_worker(client, task_queue=queue, settings=settings):
            handle = await start_mcp_task(
                client,
                McpTaskRequest(server=endpoint, tool="slow_echo", timeouts=FAST),
                workflow_id=unique("inline"),
                task_queue=queue,
            )
            out = await asyncio.wait_for(outcome_of(handle), 60)
        assert out.outcome == Outcome.REJECTED and out.operation_attempts == [], out
        assert out.error is not None and f"[worker] {key} = true" in out.error.message
        assert out.error.data == {"kind": "InlineEndpointRefused"}
    assert not marker.exists(), "the refused command ran"
    assert echo.requests[before:] == [], "a refused endpoint was contacted"


async def test_inline_endpoints_run_where_configured(
    client: Client, queue: str, fastmcp_server: Peer, ts_stdio: Peer
) -> None:
    text = unique("allowed")
    cases = [
        (WorkerSettings(allow_inline_endpoints=True), fastmcp_server.endpoint),
        (WorkerSettings(allow_inline_commands=True, allow_inline_credentials=True), ts_stdio.endpoint),
    ]
    assert ts_stdio.endpoint.env_refs  # a command with a credential reference needs both keys
    for settings, endpoint in cases:
        async with in_process_worker(client, task_queue=queue, settings=settings):
            handle = await start_mcp_task(
                client,
                McpTaskRequest(
                    server=endpoint, tool="slow_echo", arguments={"seconds": 0.2, "text": text}, timeouts=FAST
                ),
                workflow_id=unique("allowed"),
                task_queue=queue,
            )
            out = await asyncio.wait_for(outcome_of(handle), 60)
        assert out.outcome == Outcome.COMPLETED, out
        assert out.result is not None and out.result["content"][0]["text"] == text


# --- 2. secrets: errors, history, logs ---------------------------------------------------------------


@pytest.mark.parametrize(
    "route, error_type", [("401", AuthorizationRequired), ("500", TransportError), ("rpc", JsonRpcError)]
)
async def test_echoed_header_is_redacted_from_errors(echo: _EchoServer, route: str, error_type: type) -> None:
    transport = HttpTransport(echo.url(route), headers={"Authorization": f"Bearer {TOKEN}"})
    try:
        with pytest.raises(error_type) as info:
            await transport.request("tasks/get", {"taskId": "t-1"})
    finally:
        await transport.aclose()
    exc = info.value
    assert echo.requests[-1]["headers"]["Authorization"] == f"Bearer {TOKEN}"  # it was sent, and echoed
    assert_no_token(str(exc), repr(exc), exc.message, exc.raw, exc.data, exc.info(), exc.args)
    assert redact.REDACTED in json.dumps(exc.info(), default=str)


async def test_referenced_values_are_redacted_and_registered(
    echo: _EchoServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TOKEN_VAR, f"Bearer {TOKEN}")
    with pytest.raises(McpWireError) as info:
        await WireSession.connect(Endpoint(url=echo.url("401"), header_refs={"Authorization": TOKEN_VAR}))
    assert isinstance(info.value, AuthorizationRequired)
    assert_no_token(str(info.value), info.value.info())
    assert TOKEN in redact.registered() and f"Bearer {TOKEN}" in redact.registered()
    # A stdio child that quotes its referenced environment in every error reply.
    script = (
        "import json, os, sys\n"
        "for line in sys.stdin:\n"
        "    msg = json.loads(line)\n"
        "    if 'id' in msg:\n"
        "        err = {'code': -32603, 'message': 'key ' + os.environ['API_KEY'],"
        " 'data': {'env': os.environ['API_KEY']}}\n"
        "        print(json.dumps({'jsonrpc': '2.0', 'id': msg['id'], 'error': err}), flush=True)\n"
    )
    with pytest.raises(JsonRpcError) as info:
        await WireSession.connect(
            Endpoint(command=[sys.executable, "-c", script], env_refs={"API_KEY": TOKEN_VAR}), era="2025-11-25"
        )
    assert_no_token(str(info.value), info.value.info())
    assert redact.REDACTED in info.value.message


def test_scrub_forms_and_truncation() -> None:
    forms = redact.secret_forms([f"Bearer {TOKEN}", "abc", 'x"quoted"value'])
    assert {f"Bearer {TOKEN}", TOKEN, 'x\\"quoted\\"value'} <= forms and "abc" not in forms
    # A capped text that ends in the first characters of a secret does not leak that prefix either.
    capped = "prefix " + TOKEN[:20] + "…[truncated 99 chars]"
    assert TOKEN[:20] not in redact.scrub(capped, forms)
    assert redact.scrub_obj({"k": [TOKEN, 1]}, forms) == {"k": [redact.REDACTED, 1]}


def test_log_filter_scrubs_registered_values() -> None:
    from mcp_temporal_tasks.worker.runner import JsonFormatter

    redact.register([f"Bearer {TOKEN}"])
    for formatter in (JsonFormatter(), logging.Formatter("%(levelname)s %(name)s: %(message)s")):
        stream = io.StringIO()
        handler = logging.StreamHandler(stream)
        handler.setFormatter(formatter)
        redact.install_log_redaction(handler)
        log = logging.getLogger(f"tests.security.{uuid.uuid4().hex}")
        log.addHandler(handler)
        log.propagate = False
        log.setLevel(logging.DEBUG)
        log.debug("sent headers %s", {"Authorization": f"Bearer {TOKEN}"})
        log.warning(f"body: token {TOKEN}")
        try:
            raise RuntimeError(f"server said {TOKEN}")
        except RuntimeError:
            log.exception("call failed")
        text = stream.getvalue()
        assert TOKEN not in text and text.count(redact.REDACTED) >= 3 and "RuntimeError" in text, text


def test_setup_logging_installs_the_filter() -> None:
    from mcp_temporal_tasks.worker.runner import setup_logging

    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        setup_logging("DEBUG", json_logs=True)
        assert any(isinstance(f, redact.RedactingFilter) for f in root.handlers[0].filters)
    finally:
        root.handlers[:], level = saved
        root.setLevel(level)


def _history_text(history_json: str) -> str:
    """The history as text, with every payload's ``data`` (base64 in the JSON form) decoded too."""
    parts = [history_json]

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                if k == "data" and isinstance(v, str):
                    try:
                        parts.append(base64.b64decode(v).decode("utf-8", "replace"))
                    except ValueError:
                        pass
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(json.loads(history_json))
    return "\n".join(parts)


@pytest.mark.parametrize("route", ["401", "rpc"])
async def test_echoed_token_never_reaches_history(
    client: Client, queue: str, echo: _EchoServer, route: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TOKEN_VAR, f"Bearer {TOKEN}")
    servers = {"echo": ServerConfig(url=echo.url(route), headers={"Authorization": TOKEN_VAR})}
    async with in_process_worker(client, task_queue=queue, servers=servers, settings=WorkerSettings()):
        handle = await start_mcp_task(
            client,
            McpTaskRequest(server="echo", tool="slow_echo", timeouts=FAST),
            workflow_id=unique("echo"),
            task_queue=queue,
        )
        out = await asyncio.wait_for(outcome_of(handle), 60)
    assert out.outcome != Outcome.COMPLETED
    assert echo.requests[-1]["headers"]["Authorization"] == f"Bearer {TOKEN}"  # the server did see it
    text = _history_text((await handle.fetch_history()).to_json())
    assert redact.REDACTED in text, "the echo never reached the history: the test proves nothing"
    assert TOKEN not in text
    assert_no_token(out.model_dump(mode="json"))


# --- 3. server text on a terminal --------------------------------------------------------------------


def test_printable() -> None:
    assert printable("a\x00b\x07c\x1b[31md\re\u202ef\x7f\x9b") == "a\\x00b\\x07c\\x1b[31md\\x0de\\u202ef\\x7f\\x9b"
    assert printable("one\ntwo\tx") == "one\\x0atwo\\x09x"
    assert printable("one\ntwo\tx", multiline=True) == "one\ntwo\\x09x"
    bidi = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
    assert printable(bidi) == "".join(f"\\u{ord(c):04x}" for c in bidi)
    assert printable("café – ok ✓") == "café – ok ✓" and printable(None) == ""


async def test_cli_escapes_server_text(temporal_env: Any, fastmcp_server: Peer, queue: str) -> None:
    """`run --url` with the CLI's own in-process worker, then `result`/`status`: escaped; `--json`: exact."""
    address = address_of(temporal_env)
    nasty = "a\x00b\x07c\x1b[31md\re\u202ef"
    wid = unique("escape")
    rc, out, err = await cli(
        "run",
        "slow_echo",
        "--url",
        fastmcp_server.url or "",
        "--args",
        json.dumps({"seconds": 0.2, "text": nasty}),
        "--id",
        wid,
        "--json",
        "--task-queue",
        queue,
        "--address",
        address,
    )
    assert rc == 0, err[-2000:]
    assert one_json(out)["result"]["content"][0]["text"] == nasty
    for command in ("result", "status"):
        rc, out, err = await cli(command, wid, "--address", address)
        assert rc == 0, err
        assert not any(ch in out for ch in "\x00\x07\x1b\r\u202e"), repr(out)
        assert "a\\x00b\\x07c\\x1b[31md\\x0de\\u202ef" in out, out
        rc, out, _ = await cli(command, wid, "--json", "--address", address)
        assert rc == 0 and one_json(out)["result"]["content"][0]["text"] == nasty
