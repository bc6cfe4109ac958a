"""A subject's consent as a durable state: a task with no grant waits in AWAITING_AUTHORIZATION showing the URL, and
the same workflow sends its one ``tools/call`` once the consent is given.

End to end against real parts: oidc-provider (``tests/peers/ts/oauth_user.mjs``, a person who consents for
``login_hint``) and the TypeScript SDK's MCP server checking every bearer token there (RFC 7662 introspection, its
audience and scope); the person's browser comes back to our ASGI callback (``worker/consent.py``, over httpx's ASGI
transport), which checks ``state`` and ``iss`` and hands the workflow an opaque id; the worker's ``consent_check``
activity exchanges the code. Bad input: a callback with a wrong ``state`` or ``iss`` is one clear error and the task
keeps waiting; a consent not given within ``Timeouts.consent_s`` ends ``rejected`` (``consent_expired``) with no
``tools/call``; a cancel while waiting ends it cancelled. The pure decisions are tested without Temporal.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import httpx2
import pytest
from cryptography.fernet import Fernet
from temporalio.api.sdk.v1 import WorkflowMetadata

from mcp_temporal_tasks.activities.activity_io import AUTHORIZATION_MEMO
from mcp_temporal_tasks.activities.wire.auth import authorization_code
from mcp_temporal_tasks.activities.wire.auth.token_store import DIR_ENV, KEY_ENV, TokenStore, open_store
from mcp_temporal_tasks.protocol.wire_errors import AuthorizationRequired
from mcp_temporal_tasks.worker.config import server_config
from mcp_temporal_tasks.worker.consent import consent_app
from mcp_temporal_tasks.worker.devserver import free_port
from mcp_temporal_tasks.workflows import decisions
from mcp_temporal_tasks.workflows.client import outcome_of, start_mcp_task
from mcp_temporal_tasks.workflows.records import McpTaskRequest, Outcome
from tests.peers.harness import Peer, consent_as, oauth_user_server, ts_http_peer
from tests.temporal_harness import (
    CLI,
    FAST,
    address_of,
    cli,
    in_process_worker,
    keep_history,
    tool_calls,
    unique,
    write_config,
)

CLIENT = "mcp-tasks-consent"
#: Where the person's browser is sent back: never reached over the network (the test hands it to the ASGI app).
REDIRECT = "http://127.0.0.1:9/callback"
RS_CLIENT, RS_SECRET = "mcp-peer", "consent-test-rs-secret"
#: Where `mcp-tasks login` listens (RFC 8252 loopback), registered for the same client: a port free at module start.
LOGIN_REDIRECT = f"http://127.0.0.1:{free_port()}/callback"
SCOPE = "openid offline_access mcp:tools"


# --- the decisions, without Temporal -------------------------------------------------------------------------------


@pytest.mark.fast
def test_the_consent_decisions() -> None:
    consent = {"url": "https://as.example/authorize?state=s", "grant": "grant-1", "state": "s", "expires_at": 1.0}
    assert decisions.consent_asked("AuthorizationRequired", False, {"consent": consent}) == {
        "url": consent["url"],
        "grant": "grant-1",
        "state": "s",
    }
    # Not a consent: another kind, a call that may have reached the server, no consent, a malformed one.
    assert decisions.consent_asked("TransportError", False, {"consent": consent}) is None
    assert decisions.consent_asked("AuthorizationRequired", True, {"consent": consent}) is None
    assert decisions.consent_asked("AuthorizationRequired", False, {}) is None
    assert (
        decisions.consent_asked("AuthorizationRequired", False, {"consent": {**consent, "url": "javascript:x"}}) is None
    )
    assert decisions.consent_asked("AuthorizationRequired", False, {"consent": {**consent, "grant": ""}}) is None
    # Re-checks: 30 s doubling to 10 min, never past the bound.
    assert [decisions.consent_recheck_s(n, 10_000) for n in range(7)] == [30, 60, 120, 240, 480, 600, 600]
    assert decisions.consent_recheck_s(0, 5.0) == 5.0 and decisions.consent_recheck_s(3, -1) == 0.0
    verdict = decisions.after_consent_check
    assert verdict(ready=True, refused=None, left_s=1, cancelled=False) == "send"
    assert verdict(ready=True, refused=None, left_s=1, cancelled=True) == "cancelled"  # a cancel is never overridden
    assert verdict(ready=False, refused="access_denied", left_s=1, cancelled=False) == "refused"
    assert verdict(ready=False, refused=None, left_s=0, cancelled=False) == "expired"
    assert verdict(ready=False, refused=None, left_s=5, cancelled=False) == "wait"
    assert decisions.may_ask_consent(decisions.MAX_CONSENTS - 1) and not decisions.may_ask_consent(
        decisions.MAX_CONSENTS
    )
    # Mid-task (consent-read): given → the same task read again; a cancel ends it; else lost, never replayed.
    assert [decisions.after_read_consent(v) for v in ("send", "cancelled", "refused", "expired", "too_many")] == [
        "read",
        "cancelled",
        "lost",
        "lost",
        "lost",
    ]


def _pending(store: TokenStore, state: str, *, metadata: dict[str, Any] | None = None) -> None:
    store.write(
        "consent",
        (state,),
        {
            "verifier": "v" * 43,
            "scope": None,
            "metadata": metadata,
            "key": ["alice", "https://as.example", "https://mcp.example/mcp", "c"],
            "workflow_id": "wf-1",
            "seen_generation": 0,
        },
        ttl_s=60,
    )


@pytest.mark.fast
async def test_a_callback_keeps_the_code_under_an_opaque_id_once(tmp_path: Path) -> None:
    store = TokenStore(tmp_path / "s", Fernet.generate_key().decode())
    metadata = {
        "issuer": "https://as.example",
        "authorization_endpoint": "https://as.example/authorize",
        "token_endpoint": "https://as.example/token",
        "response_types_supported": ["code"],
        "authorization_response_iss_parameter_supported": True,
    }
    _pending(store, "st-1", metadata=metadata)
    for bad, says in [
        ("/cb?code=c&state=other&iss=https://as.example", "names no pending consent"),
        ("/cb?code=c&state=st-1&iss=https://evil.example", "RFC 9207"),
        ("/cb?code=c&state=st-1", "RFC 9207"),  # advertised, then missing
        ("/cb?state=st-1&iss=https://as.example", "carries no code"),
    ]:
        with pytest.raises(AuthorizationRequired, match=says):
            authorization_code.accept_callback(bad, store=store)
    assert authorization_code.consent_state("st-1", store=store) == (None, False)  # nothing changed: it waits on
    answered = authorization_code.accept_callback("/cb?code=the-code&state=st-1&iss=https://as.example", store=store)
    assert answered.workflow_id == "wf-1" and answered.ref.startswith("answer-") and "the-code" not in answered.ref
    assert answered.grant == authorization_code.grant_id("alice", "https://as.example", "https://mcp.example/mcp", "c")
    with pytest.raises(AuthorizationRequired, match="already answered"):
        authorization_code.accept_callback("/cb?code=again&state=st-1&iss=https://as.example", store=store)
    # A lost signal: the consent says where its answer is.
    assert authorization_code.consent_state("st-1", store=store) == (answered.ref, False)
    # Handed to another consent's wait: left as it was.
    with pytest.raises(ValueError):
        await authorization_code.exchange_answer(answered.ref, store=store, state="st-other")
    # A refusal by the authorization server is kept too: the task ends naming it (no token request).
    _pending(store, "st-2", metadata=metadata)
    refused = authorization_code.accept_callback(
        "/cb?error=access_denied&state=st-2&iss=https://as.example", store=store
    )
    with pytest.raises(AuthorizationRequired, match="refused consent: access_denied"):
        await authorization_code.exchange_answer(refused.ref, store=store, state="st-2")
    with pytest.raises(AuthorizationRequired, match="not in the token store"):
        await authorization_code.exchange_answer(refused.ref, store=store)  # used once
    raw = b"".join(p.read_bytes() for p in store.directory.iterdir() if p.is_file())
    assert b"the-code" not in raw and b"alice" not in raw


# --- end to end ------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def peers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Peer, Peer]]:
    clients = [
        {"client_id": CLIENT, "redirect_uris": [REDIRECT, LOGIN_REDIRECT]},
        {
            "client_id": RS_CLIENT,
            "client_secret": RS_SECRET,
            "token_endpoint_auth_method": "client_secret_basic",
            "grant_types": [],
            "response_types": [],
            "redirect_uris": [],
        },
    ]
    with oauth_user_server(tmp_path_factory.mktemp("as"), clients=clients) as issuer:
        with ts_http_peer(
            tmp_path_factory.mktemp("rs"),
            name="ts-user-protected",
            auth={"issuer": issuer.url or "", "client_id": RS_CLIENT, "client_secret": RS_SECRET},
        ) as server:
            yield issuer, server


@pytest.fixture
def store_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    env = {KEY_ENV: Fernet.generate_key().decode(), DIR_ENV: str(tmp_path / "tokens")}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return env


async def person(url: str, subject: str, back_to: str = REDIRECT) -> str:
    return await consent_as(url, subject, back_to)


def altered(location: str, **params: str) -> str:
    parts = urlsplit(location)
    query = {k: v[0] for k, v in parse_qs(parts.query).items()} | params
    return parts._replace(query=urlencode(query)).geturl()


async def waiting_view(wid: str, address: str, env: dict[str, str]) -> dict[str, Any]:
    """``mcp-tasks status WID --json`` once the task waits for authorization (bounded)."""
    for _ in range(150):
        code, out, err = await cli("status", wid, "--json", "--address", address, env=env)
        view = json.loads(out) if out.strip().startswith("{") else {}
        if view.get("phase") == "AWAITING_AUTHORIZATION":
            return view
        await asyncio.sleep(0.2)
    raise AssertionError(f"{wid} never showed AWAITING_AUTHORIZATION: {out[-500:]} {err[-500:]}")


def config(server: Peer) -> dict[str, Any]:
    auth = {"type": "authorization_code", "client_id": CLIENT, "redirect_uri": REDIRECT, "scope": SCOPE}
    return {"user": server_config("user", {"url": server.url, "auth": auth})}


async def test_a_task_waits_for_consent_and_the_same_workflow_sends_one_call(
    temporal_env: Any, peers: tuple[Peer, Peer], store_env: dict[str, str]
) -> None:
    _, server = peers
    client, address = temporal_env.client, address_of(temporal_env)
    queue, wid = unique("consent"), unique("consent-wait")
    app = consent_app(client, path="/callback")
    mark = server.log_mark()
    async with in_process_worker(client, task_queue=queue, servers=config(server)):
        handle = await start_mcp_task(
            client,
            McpTaskRequest(
                server="user",
                tool="slow_echo",
                arguments={"seconds": 0, "text": "hi"},
                principal="alice",
                timeouts=FAST,
            ),
            workflow_id=wid,
            task_queue=queue,
        )
        view = await waiting_view(wid, address, store_env)
        url = view["authorization"]["url"]
        assert "code_challenge=" in url and "state=" in url and view["authorization"]["grant"].startswith("grant-")
        _, text, _ = await cli("status", wid, "--address", address, env=store_env)
        print(f"$ mcp-tasks status {wid}\n{text}")
        assert "AWAITING_AUTHORIZATION" in text and url in text and "login --callback" in text, text
        memo = await (await handle.describe()).memo()
        assert memo[AUTHORIZATION_MEMO]["url"] == url  # what the UI shows with no worker running
        details = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
        assert "AWAITING_AUTHORIZATION" in details.current_details and url in details.current_details
        listed = await until_listed(wid, address, store_env)
        assert listed
        location = await person(url, "alice")
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:9") as cb:
            wrong_state = await cb.get(altered(location, state="not-the-state"))
            wrong_iss = await cb.get(altered(location, iss="http://evil.example"))
            assert wrong_state.status_code == 400 and "names no pending consent" in wrong_state.text
            assert wrong_iss.status_code == 400 and "RFC 9207" in wrong_iss.text, wrong_iss.text
            assert (await waiting_view(wid, address, store_env))["phase"] == "AWAITING_AUTHORIZATION"
            assert tool_calls(server, mark) == []
            right = await cb.get(location)
            assert right.status_code == 200 and "the task resumes" in right.text, right.text
        out = await asyncio.wait_for(outcome_of(handle), 60)
        await keep_history(handle, "consent_wait_completed")
        history = (await handle.fetch_history()).to_json()
    calls = tool_calls(server, mark, "slow_echo")
    print(
        f"callback: wrong state {wrong_state.status_code} {wrong_state.text.strip()!r}; wrong iss "
        f"{wrong_iss.status_code} {wrong_iss.text.strip()!r}; right {right.status_code} {right.text.strip()!r}"
    )
    print(
        f"outcome {out.outcome.value}; tools/call on the server: {len(calls)}; attempts {len(out.operation_attempts)}"
    )
    assert out.outcome == Outcome.COMPLETED, out
    assert len(calls) == 1  # the server counted exactly one tools/call
    assert len(out.operation_attempts) == 1 and out.operation_attempts[0].reason == "initial"
    code = parse_qs(urlsplit(location).query)["code"][0]
    assert code not in history and "code_verifier" not in history  # the code stayed in the store


async def until_listed(wid: str, address: str, env: dict[str, str]) -> bool:
    for _ in range(100):
        _, out, _ = await cli("list", "--status", "awaiting_authorization", "--json", "--address", address, env=env)
        if wid in out:
            return True
        await asyncio.sleep(0.2)
    return False


async def test_a_consent_not_given_in_time_ends_the_task_with_no_call_and_a_cancel_ends_the_wait(
    temporal_env: Any, peers: tuple[Peer, Peer], store_env: dict[str, str]
) -> None:
    _, server = peers
    client, address = temporal_env.client, address_of(temporal_env)
    queue = unique("consent")
    mark = server.log_mark()
    request = McpTaskRequest(
        server="user",
        tool="slow_echo",
        arguments={"seconds": 0},
        principal="bob",
        timeouts=FAST.model_copy(update={"consent_s": 3.0}),
    )
    async with in_process_worker(client, task_queue=queue, servers=config(server)):
        expiring = await start_mcp_task(client, request, workflow_id=unique("consent-expire"), task_queue=queue)
        cancelled = await start_mcp_task(
            client,
            request.model_copy(update={"timeouts": FAST}),
            workflow_id=unique("consent-cancel"),
            task_queue=queue,
        )
        await waiting_view(cancelled.id, address, store_env)
        code, _, err = await cli("cancel", cancelled.id, "--address", address, env=store_env)
        expired = await asyncio.wait_for(outcome_of(expiring), 60)
        ended = await asyncio.wait_for(outcome_of(cancelled), 60)
    assert expired.outcome == Outcome.REJECTED and "consent_expired" in (expired.reason or ""), expired
    assert expired.error is not None and expired.error.data == {"kind": "ConsentExpired"}
    assert ended.outcome == Outcome.CANCELLED and "waiting for consent" in (ended.reason or ""), (code, err, ended)
    assert tool_calls(server, mark) == [] and expired.operation_attempts == [] == ended.operation_attempts


async def test_a_login_at_a_terminal_wakes_the_waiting_task(
    temporal_env: Any, peers: tuple[Peer, Peer], store_env: dict[str, str], tmp_path: Path
) -> None:
    """``mcp-tasks login SERVER --subject S``: the grant it gives is what the waiting task looks for; the login tells
    it (``tasks_told``) and the same workflow sends its one ``tools/call``."""
    _, server = peers
    client, address = temporal_env.client, address_of(temporal_env)
    queue, wid = unique("consent"), unique("consent-login")
    auth = {"type": "authorization_code", "client_id": CLIENT, "redirect_uri": LOGIN_REDIRECT, "scope": SCOPE}
    cfg = write_config(tmp_path / "login.toml", {"user": {"url": server.url, "auth": auth}})
    mark = server.log_mark()
    async with in_process_worker(client, task_queue=queue, servers=config(server)):
        handle = await start_mcp_task(
            client,
            McpTaskRequest(server="user", tool="slow_echo", arguments={"seconds": 0}, principal="carol", timeouts=FAST),
            workflow_id=wid,
            task_queue=queue,
        )
        await waiting_view(wid, address, store_env)
        login = await asyncio.create_subprocess_exec(
            *CLI, "login", "user", "--subject", "carol", "--config", str(cfg), "--no-browser", "--timeout", "30",
            "--address", address, "--json",
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env={**os.environ, **store_env},
        )  # fmt: skip
        try:
            assert login.stderr is not None
            url = ""
            while not url.startswith("http"):
                url = (await asyncio.wait_for(login.stderr.readline(), 30)).decode().strip()
                assert url or login.returncode is None, "login ended before printing its URL"
            location = await person(url, "carol", back_to=LOGIN_REDIRECT)
            async with httpx2.AsyncClient(timeout=10) as browser:
                await browser.get(location)  # login's loopback listener
            out, err = await asyncio.wait_for(login.communicate(), 60)
        finally:
            if login.returncode is None:
                login.kill()
                await login.wait()
        assert login.returncode == 0 and json.loads(out)["tasks_told"] == 1, (out, err)
        done = await asyncio.wait_for(outcome_of(handle), 60)
    assert done.outcome == Outcome.COMPLETED and len(tool_calls(server, mark, "slow_echo")) == 1, done


async def test_a_grant_spent_mid_task_waits_for_consent_then_reads_the_same_task(
    temporal_env: Any, peers: tuple[Peer, Peer], store_env: dict[str, str]
) -> None:
    """The grant is lost while the task works (its refresh token presented twice at the authorization server: reuse
    detection revokes the grant and every token of it): the task's next read is refused, its refresh is
    ``invalid_grant``, and the task waits in AWAITING_AUTHORIZATION with the URL, one pending consent for the wait
    (no read retried meanwhile); once consented, the same MCP task is read again: one ``tools/call`` in all."""
    issuer, server = peers
    client, address = temporal_env.client, address_of(temporal_env)
    queue, wid = unique("consent"), unique("consent-read")
    app = consent_app(client, path="/callback")
    mark = server.log_mark()
    store = open_store()
    assert isinstance(store, TokenStore)  # the directory store of this test's environment
    consents = lambda: sorted(p.name for p in store.directory.glob("consent-*") if not p.name.endswith(".lock"))  # noqa: E731
    async with (
        in_process_worker(client, task_queue=queue, servers=config(server)),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:9") as cb,
    ):
        handle = await start_mcp_task(
            client,
            McpTaskRequest(
                server="user",
                tool="slow_echo",
                arguments={"seconds": 3, "text": "read again"},
                principal="dave",
                timeouts=FAST,
            ),
            workflow_id=wid,
            task_queue=queue,
        )
        first = (await waiting_view(wid, address, store_env))["authorization"]["url"]
        assert (await cb.get(await person(first, "dave"))).status_code == 200
        for _ in range(100):  # the call is sent: the task works on the server
            if tool_calls(server, mark, "slow_echo"):
                break
            await asyncio.sleep(0.1)
        assert len(tool_calls(server, mark, "slow_echo")) == 1
        grants = [p for p in store.directory.glob("grant-*") if not p.name.endswith(".lock")]
        assert len(grants) == 1
        key = ("dave", issuer.url or "", server.url or "", CLIENT)
        record = store.read("grant", key)
        assert record is not None and record.get("refresh_token"), sorted(record or {})
        async with httpx2.AsyncClient(timeout=10) as http:
            meta = (await http.get(f"{issuer.url}/.well-known/openid-configuration")).json()
            spend = {"grant_type": "refresh_token", "refresh_token": record["refresh_token"], "client_id": CLIENT}
            assert (await http.post(meta["token_endpoint"], data=spend)).status_code == 200
            reused = await http.post(meta["token_endpoint"], data=spend)  # reuse: the grant is revoked
            assert reused.status_code == 400 and reused.json()["error"] == "invalid_grant", reused.text
        view = await waiting_view(wid, address, store_env)
        url = view["authorization"]["url"]
        assert url != first and "code_challenge=" in url
        memo = await (await handle.describe()).memo()
        assert memo[AUTHORIZATION_MEMO]["url"] == url
        details = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
        assert "to read task" in details.current_details and url in details.current_details
        assert await until_listed(wid, address, store_env)  # `mcp-tasks list --status awaiting_authorization`
        _, text, _ = await cli("status", wid, "--address", address, env=store_env)
        print(f"$ mcp-tasks status {wid}   # mid-task\n{text}")
        assert "AWAITING_AUTHORIZATION" in text and url in text, text
        pending = consents()
        await asyncio.sleep(1.5)  # many read intervals (FAST polls every 50 ms): no read retried, no consent added
        assert consents() == pending and len(pending) == 1, pending
        assert (await waiting_view(wid, address, store_env))["authorization"]["url"] == url
        assert (await cb.get(await person(url, "dave"))).status_code == 200
        out = await asyncio.wait_for(outcome_of(handle), 60)
        await keep_history(handle, "consent_read_completed")
    calls = tool_calls(server, mark, "slow_echo")
    print(
        f"outcome {out.outcome.value}; tools/call on the server: {len(calls)}; attempts {len(out.operation_attempts)}"
    )
    assert out.outcome == Outcome.COMPLETED, out
    assert len(calls) == 1 and len(out.operation_attempts) == 1  # read again, never called again
    assert "read again" in json.dumps(out.result)


async def test_a_mid_task_consent_not_given_in_time_is_lost_and_a_cancel_ends_the_wait(
    temporal_env: Any, peers: tuple[Peer, Peer], store_env: dict[str, str]
) -> None:
    """Two running tasks of one subject lose their grant (spent at the authorization server): both wait for consent;
    one is cancelled meanwhile (ended at once: ``tasks/cancel`` would need the missing grant), the other's
    ``consent_s`` passes: ``lost`` (the task may still run on the server), never replayed. One ``tools/call`` each."""
    issuer, server = peers
    client, address = temporal_env.client, address_of(temporal_env)
    queue = unique("consent")
    app = consent_app(client, path="/callback")
    mark = server.log_mark()
    store = open_store()
    assert isinstance(store, TokenStore)  # the directory store of this test's environment
    request = McpTaskRequest(
        server="user",
        tool="slow_echo",
        arguments={"seconds": 4},
        principal="erin",
        timeouts=FAST.model_copy(update={"consent_s": 5.0}),
    )
    async with (
        in_process_worker(client, task_queue=queue, servers=config(server)),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:9") as cb,
    ):
        expiring = await start_mcp_task(client, request, workflow_id=unique("consent-read-expire"), task_queue=queue)
        first = (await waiting_view(expiring.id, address, store_env))["authorization"]["url"]
        assert (await cb.get(await person(first, "erin"))).status_code == 200
        cancelled = await start_mcp_task(
            client,
            request.model_copy(update={"timeouts": FAST}),
            workflow_id=unique("consent-read-cancel"),
            task_queue=queue,
        )
        for _ in range(100):  # both calls sent: both tasks work on the server
            if len(tool_calls(server, mark, "slow_echo")) == 2:
                break
            await asyncio.sleep(0.1)
        record = store.read("grant", ("erin", issuer.url or "", server.url or "", CLIENT))
        assert record is not None and record.get("refresh_token")
        async with httpx2.AsyncClient(timeout=10) as http:
            meta = (await http.get(f"{issuer.url}/.well-known/openid-configuration")).json()
            spend = {"grant_type": "refresh_token", "refresh_token": record["refresh_token"], "client_id": CLIENT}
            for _ in range(2):  # the second is a reuse: the grant is revoked
                await http.post(meta["token_endpoint"], data=spend)
        await waiting_view(cancelled.id, address, store_env)
        code, _, err = await cli("cancel", cancelled.id, "--address", address, env=store_env)
        lost = await asyncio.wait_for(outcome_of(expiring), 60)
        ended = await asyncio.wait_for(outcome_of(cancelled), 60)
    print(f"expired: {lost.outcome.value} {lost.reason!r}; cancelled: {ended.outcome.value} {ended.reason!r}")
    assert lost.outcome == Outcome.LOST and "consent_expired" in (lost.reason or ""), lost
    assert lost.error is not None and lost.error.data == {"kind": "ConsentExpired"}
    assert ended.outcome == Outcome.CANCELLED and "could not be sent" in (ended.reason or ""), (code, err, ended)
    assert len(tool_calls(server, mark, "slow_echo")) == 2  # one each: never replayed
    assert len(lost.operation_attempts) == 1 == len(ended.operation_attempts)
