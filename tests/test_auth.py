"""OAuth for MCP servers that demand it, against a real authorization server and a real protected MCP server.

* authorization server: panva's ``oidc-provider`` (``tests/peers/ts/oauth.mjs``): client credentials with a
  secret or a ``private_key_jwt`` assertion, resource indicators, introspection, revocation;
* MCP server: the TypeScript SDK peer behind the SDK's ``requireBearerAuth`` and protected resource metadata,
  checking every token by introspection. It logs the requests it executed (``method``) and, apart, the ones it
  refused (``denied``).

Tokens live 4 s here, so every task longer than that is polled across a token's expiry.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from temporalio.client import Client

from mcp_temporal_tasks.activities.wire import Endpoint, WireSession, auth, redact
from mcp_temporal_tasks.protocol.tasks import OAuthClient
from mcp_temporal_tasks.worker.config import ConfigError, WorkerSettings, load_config, server_config
from mcp_temporal_tasks.workflows.client import outcome_of, start_mcp_task
from mcp_temporal_tasks.workflows.records import McpTaskRequest, Outcome
from tests.peers.harness import Peer, oauth_server, poll_until_terminal, ts_http_peer
from tests.temporal_harness import FAST, address_of, in_process_worker, tool_calls, unique, until
from tests.test_cli import cli
from tests.test_security import _history_text

TOKEN_TTL_S = 4
SECRET = f"cs-{uuid.uuid4().hex}"
SECRET_VAR = "MCP_TEST_AUTH_SECRET"
WRONG_VAR = "MCP_TEST_AUTH_WRONG_SECRET"
KEY_VAR = "MCP_TEST_AUTH_PRIVATE_KEY"
RS_SECRET = f"rs-{uuid.uuid4().hex}"
#: An authorization server that is down ends the task within this (connect refused: at once; the bound is one
#: token request's timeout plus a workflow's start and end).
DOWN_BOUND_S = auth.AUTH_SERVER_TIMEOUT_S + 10
#: The last test greps what all the others fetched and wrote (module fixtures ``issued``, ``logs``, ``texts``) for
#: secrets: the module runs in one xdist worker, in order (tests/conftest.py, rule 4).
pytestmark = pytest.mark.xdist_group("test_auth")


def _rsa_key() -> tuple[str, dict[str, Any]]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    return pem, {**jwk, "alg": "RS256", "use": "sig", "kid": "k1"}


PEM, PUBLIC_JWK = _rsa_key()
CLIENTS = [
    {"client_id": "svc-secret", "client_secret": SECRET, "token_endpoint_auth_method": "client_secret_basic"},
    {"client_id": "svc-jwt", "token_endpoint_auth_method": "private_key_jwt", "jwks": {"keys": [PUBLIC_JWK]}},
    {"client_id": "mcp-peer", "client_secret": RS_SECRET},  # the MCP server's own, for introspection
]


@pytest.fixture(scope="module", autouse=True)
def credentials() -> Iterator[None]:
    mp = pytest.MonkeyPatch()
    mp.setenv(SECRET_VAR, SECRET)
    mp.setenv(WRONG_VAR, f"wrong-{uuid.uuid4().hex}")
    mp.setenv(KEY_VAR, PEM)
    yield
    mp.undo()


@pytest.fixture(scope="module")
def issued() -> Iterator[list[str]]:
    """Every access token the worker obtained (read from its token sources), for the leak checks."""
    tokens: list[str] = []
    original = auth.TokenSource._store

    def recording(self: auth.TokenSource, token: str, scope: str | None, lifetime: float) -> None:
        original(self, token, scope, lifetime)
        tokens.append(token)

    mp = pytest.MonkeyPatch()
    mp.setattr(auth.TokenSource, "_store", recording)
    yield tokens
    mp.undo()


@pytest.fixture(scope="module")
def oauth(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Peer]:
    with oauth_server(tmp_path_factory.mktemp("oauth"), clients=CLIENTS, token_ttl_s=TOKEN_TTL_S) as server:
        yield server


@pytest.fixture(scope="module")
def protected(oauth: Peer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Peer]:
    with ts_http_peer(
        tmp_path_factory.mktemp("protected"),
        name="ts-protected",
        auth={"issuer": oauth.url or "", "client_id": "mcp-peer", "client_secret": RS_SECRET},
    ) as peer:
        yield peer


def secret_auth(oauth: Peer, var: str = SECRET_VAR) -> dict[str, Any]:
    return {"type": "client_credentials", "client_id": "svc-secret", "client_secret": {"env": var}, "issuer": oauth.url}


def jwt_auth(oauth: Peer) -> dict[str, Any]:
    return {"type": "private_key_jwt", "client_id": "svc-jwt", "private_key": {"env": KEY_VAR}, "issuer": oauth.url}


@pytest.fixture(scope="module")
def logs() -> Iterator[list[str]]:
    """Every log line of this process (the in-process workers') while the module runs, as formatted text."""
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(self.format(record))

    handler = Keep(logging.DEBUG)
    handler.setFormatter(logging.Formatter("%(name)s %(message)s"))
    redact.install_log_redaction(handler)
    root = logging.getLogger()
    saved = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    yield lines
    root.removeHandler(handler)
    root.setLevel(saved)


@pytest.fixture(scope="module")
def texts() -> list[str]:
    """Histories, outcomes and CLI output the tests produced: the leak check greps them all."""
    return []


async def run_task(
    client: Client,
    servers: dict[str, Any],
    *,
    tool: str = "slow_echo",
    arguments: dict[str, Any] | None = None,
    timeout_s: float = 60,
) -> tuple[Any, Any]:
    queue = unique("auth")
    parsed = {name: server_config(name, cfg) for name, cfg in servers.items()}
    async with in_process_worker(client, task_queue=queue, servers=parsed, settings=WorkerSettings()):
        handle = await start_mcp_task(
            client,
            McpTaskRequest(server=next(iter(servers)), tool=tool, arguments=arguments or {}, timeouts=FAST),
            workflow_id=unique("auth"),
            task_queue=queue,
        )
        out = await asyncio.wait_for(outcome_of(handle), timeout_s)
    return handle, out


#: Workflow ids of the tasks above, for the CLI's view of them.
WORKFLOW_IDS: list[str] = []


async def keep(texts: list[str], handle: Any, out: Any) -> None:
    WORKFLOW_IDS.append(handle.id)
    texts.append(_history_text((await handle.fetch_history()).to_json()))
    texts.append(out.model_dump_json())


def denied(peer: Peer, mark: int) -> list[dict[str, Any]]:
    return [line for line in peer.log_since(mark) if "denied" in line]


# --- tasks complete; a token expiring mid-task is replaced while polling -----------------------------------


async def test_client_credentials_task_outlives_its_tokens_with_one_call(
    client: Client, oauth: Peer, protected: Peer, issued: list[str], logs: list[str], texts: list[str]
) -> None:
    mark, issued_before = protected.log_mark(), len(oauth.log(client="svc-secret"))
    started = time.monotonic()
    handle, out = await run_task(
        client,
        {"p": {"url": protected.url, "auth": secret_auth(oauth)}},
        arguments={"seconds": 2 * TOKEN_TTL_S, "text": "through expiry"},
    )
    await keep(texts, handle, out)
    assert out.outcome == Outcome.COMPLETED, out
    assert time.monotonic() - started >= 2 * TOKEN_TTL_S
    assert len(tool_calls(protected, mark, "slow_echo")) == 1
    polls = tool_calls(protected, mark, method="tasks/get")
    assert polls and polls[-1]["ts"] - polls[0]["ts"] > TOKEN_TTL_S * 1000, "polling did not span a token's life"
    # The server speaks first: the session's first request (without a token) is refused and its challenge leads
    # to the token; afterwards tokens are replaced before expiry, never after a refusal.
    assert len(oauth.log(client="svc-secret")) - issued_before >= 2
    assert len(denied(protected, mark)) == 1, denied(protected, mark)


async def test_private_key_jwt_task_completes(
    client: Client, oauth: Peer, protected: Peer, issued: list[str], logs: list[str], texts: list[str]
) -> None:
    mark, issued_before = protected.log_mark(), len(oauth.log(client="svc-jwt"))
    handle, out = await run_task(
        client, {"p": {"url": protected.url, "auth": jwt_auth(oauth)}}, arguments={"seconds": 1, "text": "signed"}
    )
    await keep(texts, handle, out)
    assert out.outcome == Outcome.COMPLETED, out
    assert len(tool_calls(protected, mark, "slow_echo")) == 1
    assert len(oauth.log(client="svc-jwt")) > issued_before


async def test_discovery_is_reused_for_a_tokens_lifetime_and_run_again_after_a_refusal(
    oauth: Peer, protected: Peer
) -> None:
    """Discovery (from the server's 401: protected resource metadata, then the authorization server's) once; a
    token replaced before its expiry costs only the token request; a token the server refused sends the next fetch
    through discovery again."""
    spec = OAuthClient(
        type="client_credentials", client_id="svc-secret", client_secret_env=SECRET_VAR, issuer=oauth.url
    )
    issued_before = len(oauth.log(client="svc-secret"))
    auth._sources.pop(asyncio.get_running_loop(), None)  # a source of its own, not the earlier tests'
    client = await WireSession.connect(Endpoint(url=protected.url, auth=spec))
    try:
        source = auth.token_source(protected.url or "", spec)
        first = source.current()
        assert first is not None and (source.fetched, source.discoveries) == (1, 1)
        await until(lambda: time.monotonic() >= source._refresh_at, TOKEN_TTL_S, "the token's refresh time")
        assert "slow_echo" in await client.list_tools()
        second = source.current()
        assert second not in (None, first) and (source.fetched, source.discoveries) == (2, 1)
        # A 401 to the token we sent (the flow's path; the real refusal is the next test's): discovery again.
        third = await source.after_401(second, auth.Challenge(401), None)
        assert third not in (None, second) and (source.fetched, source.discoveries) == (3, 2)
        assert "slow_echo" in await client.list_tools()
        assert len(oauth.log(client="svc-secret")) - issued_before == 3
    finally:
        await client.aclose(terminate=True)


# --- 401 on tools/call with a stale token: resent once, executed once ----------------------------------------


async def test_tools_call_refused_for_a_revoked_token_is_resent_once_after_a_new_token(
    oauth: Peer, protected: Peer, issued: list[str]
) -> None:
    spec = server_config("p", {"url": protected.url, "auth": secret_auth(oauth)}).auth
    assert isinstance(spec, OAuthClient)
    client = await WireSession.connect(Endpoint(url=protected.url, auth=spec))
    try:
        await client.list_tools()  # so that the next request after the revocation is tools/call itself
        source = auth.token_source(protected.url or "", spec)
        stale = await source.token()
        assert stale is not None
        # Revoked at the authorization server: the worker still holds it as valid; the MCP server refuses it.
        async with httpx2.AsyncClient() as http:
            revoked = await http.post(
                f"{oauth.url}/token/revocation", data={"token": stale}, auth=("svc-secret", SECRET)
            )
        assert revoked.status_code == 200, revoked.text
        mark = protected.log_mark()
        start = await client.start("slow_echo", {"seconds": 0, "text": "after a 401"})
        assert [d["deniedMethod"] for d in denied(protected, mark)] == ["tools/call"]
        assert len(tool_calls(protected, mark, "slow_echo")) == 1
        assert await source.token() != stale
        # The resent call is the one that ran: its task (slow_echo is task-capable) ends with its own arguments' text.
        assert start.task is not None and start.result is None, start
        payload = await client.result(await poll_until_terminal(client, start.task.task_id))
        assert payload.result is not None and payload.result["structuredContent"] == {"echo": "after a 401"}
    finally:
        await client.aclose(terminate=True)


# --- refusals: rejected before tools/call, named, with no secret ---------------------------------------------


async def test_wrong_secret_is_rejected_with_no_call(
    client: Client, oauth: Peer, protected: Peer, issued: list[str], logs: list[str], texts: list[str]
) -> None:
    mark = protected.log_mark()
    handle, out = await run_task(client, {"p": {"url": protected.url, "auth": secret_auth(oauth, WRONG_VAR)}})
    await keep(texts, handle, out)
    assert out.outcome == Outcome.REJECTED, out
    text = out.model_dump_json()
    assert "invalid_client" in text and protected.url in text and "svc-secret" in text, text
    assert tool_calls(protected, mark) == []
    assert tool_calls(protected, mark, method="initialize") == []


async def test_authorization_server_down_is_rejected_within_the_bound(
    client: Client, tmp_path: Path, issued: list[str], texts: list[str]
) -> None:
    with oauth_server(tmp_path, clients=CLIENTS, name="oauth-down") as down:
        with ts_http_peer(
            tmp_path,
            name="ts-protected-down",
            auth={"issuer": down.url or "", "client_id": "mcp-peer", "client_secret": RS_SECRET},
        ) as peer:
            assert down.proc is not None
            down.proc.kill()
            down.proc.wait(10)
            mark = peer.log_mark()
            started = time.monotonic()
            handle, out = await run_task(
                client, {"p": {"url": peer.url, "auth": secret_auth(down)}}, timeout_s=DOWN_BOUND_S + 30
            )
            took = time.monotonic() - started
            await keep(texts, handle, out)
    assert out.outcome == Outcome.REJECTED, out
    assert took < DOWN_BOUND_S, took
    assert "cannot reach" in (out.error.message if out.error else ""), out
    assert tool_calls(peer, mark) == []


async def test_authorization_server_lost_while_polling_spends_the_poll_budget_never_replays(
    client: Client, tmp_path: Path, issued: list[str], texts: list[str]
) -> None:
    """With the authorization server gone, polls fail (the MCP server cannot check tokens; once ours expires, no new
    one can be had). That is a read fault, the task is not known to be gone: retried for ``unreachable_s``, then
    ``lost`` with the server's last answer, one ``tools/call``, no replay whatever the policy."""
    unreachable_s = 6.0
    with oauth_server(tmp_path, clients=CLIENTS, name="oauth-lost") as lost:
        with ts_http_peer(
            tmp_path,
            name="ts-protected-lost",
            auth={"issuer": lost.url or "", "client_id": "mcp-peer", "client_secret": RS_SECRET},
        ) as peer:
            mark = peer.log_mark()
            queue = unique("auth")
            servers = {"p": server_config("p", {"url": peer.url, "auth": secret_auth(lost)})}
            async with in_process_worker(client, task_queue=queue, servers=servers, settings=WorkerSettings()):
                handle = await start_mcp_task(
                    client,
                    McpTaskRequest(
                        server="p",
                        tool="slow_echo",
                        arguments={"seconds": 60, "text": "orphaned"},
                        timeouts=FAST.model_copy(update={"unreachable_s": unreachable_s}),
                        replay="always",
                        idempotent=True,
                    ),
                    workflow_id=unique("auth"),
                    task_queue=queue,
                )
                await until(lambda: tool_calls(peer, mark, method="tasks/get"), 20, "the first poll")
                assert lost.proc is not None
                lost.proc.kill()
                lost.proc.wait(10)
                killed = time.monotonic()
                out = await asyncio.wait_for(outcome_of(handle), TOKEN_TTL_S + unreachable_s + 40)
                took = time.monotonic() - killed
            await keep(texts, handle, out)
    assert out.outcome == Outcome.LOST, out
    # Which read fails first depends on the MCP server: it checks tokens by introspection at the same authorization
    # server, so it answers 500 while its cached check lapses; our next token request cannot reach it either.
    message = out.error.message if out.error else ""
    assert ("cannot reach" in message or "HTTP 500" in message) and "not replayed" in (out.reason or ""), out
    assert len(tool_calls(peer, mark, "slow_echo")) == 1 and len(out.operation_attempts) == 1
    # The token's remaining life, then the budget, then one poll's backoff at most.
    assert took < TOKEN_TTL_S + unreachable_s + 15, took


# --- nothing leaks -------------------------------------------------------------------------------------------


async def test_secret_and_tokens_appear_in_no_history_log_or_cli_output(
    temporal_env: Any, oauth: Peer, protected: Peer, issued: list[str], logs: list[str], texts: list[str]
) -> None:
    assert len(issued) >= 4 and len(texts) >= 6, (len(issued), len(texts))  # the tests above ran and fetched
    for wid in WORKFLOW_IDS:
        _, out, err = await cli("status", wid, "--json", "--address", address_of(temporal_env))
        assert wid in out, err
        texts.extend([out, err])
    haystacks = {"history/outcome/cli": "\n".join(texts), "logs": "\n".join(logs)}
    assert "slow_echo" in haystacks["history/outcome/cli"] and haystacks["logs"]
    for where, text in haystacks.items():
        for needle in (SECRET, RS_SECRET, *issued, *PEM.splitlines()[1:-1]):
            assert needle not in text, f"a secret or token in {where}"


# --- bad input at start ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "auth_toml, message",
    [
        (
            'type = "password"\nclient_id = "a"',
            "servers.p.auth.type: must be one of client_credentials, private_key_jwt",
        ),
        ('type = "client_credentials"\nclient_secret = { env = "HOME" }', "servers.p.auth.client_id: missing"),
        (
            'type = "client_credentials"\nclient_id = "a"\nclient_secret = { env = "MCP_TEST_UNSET_VAR" }',
            "servers.p.auth.client_secret: environment variable MCP_TEST_UNSET_VAR is not set",
        ),
        ('type = "client_credentials"\nclient_id = "a"\nclient_secret = "literal"', "servers.p.auth.client_secret"),
        (
            'type = "private_key_jwt"\nclient_id = "a"\nprivate_key = { file = "/nonexistent/key.pem" }',
            "servers.p.auth.private_key: file /nonexistent/key.pem does not exist",
        ),
        (
            'type = "client_credentials"\nclient_id = "a"\nclient_secret = { env = "HOME" }\nscopes = "x"',
            "servers.p.auth.scopes: unknown key",
        ),
    ],
)
async def test_bad_auth_config_exits_2_naming_the_key(tmp_path: Path, auth_toml: str, message: str) -> None:
    path = tmp_path / "w.toml"
    path.write_text(f'[servers.p]\nurl = "http://127.0.0.1:9/mcp"\n[servers.p.auth]\n{auth_toml}\n')
    with pytest.raises(ConfigError) as exc:
        load_config(path, env={"HOME": "/root"})
    assert message in str(exc.value)
    env = {"MCP_TEST_UNSET_VAR": ""}
    rc, out, err = await cli("worker", "--config", str(path), "--address", "127.0.0.1:9", env=env, timeout=60)
    assert rc == 2, (rc, out, err)
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0], err
