"""A subject's grants: the encrypted token store, its per-record lock, and the decisions of the authorization-code
source that need no authorization server (a wrong ``state`` or ``iss`` refused before any token request; another
process's refresh used, not repeated; an interrupted refresh never re-sends its refresh token; no subject, no grant).

The flow end to end against an authorization server is the conformance suite's (tests/test_conformance.py: every
authorization-code scenario through ``mcp-tasks login``).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import time
from pathlib import Path
from typing import Any

import pytest
from cryptography.fernet import Fernet

from mcp_temporal_tasks.activities.wire import auth
from mcp_temporal_tasks.activities.wire.auth.authorization_code import (
    SubjectTokenSource,
    callback_params,
    complete_consent,
)
from mcp_temporal_tasks.activities.wire.auth.discovery import Challenge, Discovered
from mcp_temporal_tasks.activities.wire.auth.token_store import StoreError, TokenStore, grant_id
from mcp_temporal_tasks.protocol.tasks import Endpoint, OAuthClient
from mcp_temporal_tasks.protocol.wire_errors import AuthorizationRequired

pytestmark = pytest.mark.fast

KEY = ("alice", "https://as.example", "https://mcp.example/mcp", "client-1")
#: A token endpoint nothing listens on: a test that reaches it fails with "cannot reach".
NOWHERE = "http://127.0.0.1:9/token"


def store(tmp_path: Path, key: str | None = None) -> TokenStore:
    return TokenStore(tmp_path / "store", key or Fernet.generate_key().decode())


def test_records_are_encrypted_at_rest_and_keyed_by_subject(tmp_path: Path) -> None:
    key = Fernet.generate_key().decode()
    s = store(tmp_path, key)
    s.write("grant", KEY, {"access_token": "at-secret-1", "refresh_token": "rt-secret-1", "generation": 1})
    raw = b"".join(p.read_bytes() for p in (tmp_path / "store").iterdir())
    assert b"at-secret-1" not in raw and b"rt-secret-1" not in raw and b"alice" not in raw
    assert store(tmp_path, key).read("grant", KEY) is not None  # another process with the key reads it
    assert s.read("grant", ("bob", *KEY[1:])) is None  # another subject's key: nothing
    assert s.read("grant", (*KEY[:2], "https://other.example/mcp", KEY[3])) is None  # another resource's: nothing
    assert s.read("grant", (KEY[0], "https://other-as.example", *KEY[2:])) is None  # another issuer's: nothing
    with pytest.raises(StoreError, match="does not decrypt"):
        store(tmp_path).read("grant", KEY)  # another key
    assert grant_id(*KEY).startswith("grant-") and "alice" not in grant_id(*KEY)
    # Records that expire are gone once read past their time, and swept from the directory as new ones come.
    s.write("consent", ("state-1",), {"verifier": "v"}, ttl_s=0.05)
    time.sleep(0.1)
    assert s.read("consent", ("state-1",)) is None
    s.write("consent", ("state-2",), {"verifier": "v"}, ttl_s=0.05)
    assert len(list(s.directory.glob("consent-*"))) == 1


def _hold_lock(directory: str, key: str, held: Any, release: Any) -> None:
    async def main() -> None:
        async with TokenStore(Path(directory), key).locked("grant", KEY):
            held.set()
            release.wait(10)

    asyncio.run(main())


async def test_the_lock_excludes_another_process(tmp_path: Path) -> None:
    key = Fernet.generate_key().decode()
    s = store(tmp_path, key)
    ctx = multiprocessing.get_context("spawn")
    held, release = ctx.Event(), ctx.Event()
    proc = ctx.Process(target=_hold_lock, args=(str(s.directory), key, held, release))
    proc.start()
    try:
        assert held.wait(20)
        with pytest.raises(StoreError, match="stayed locked"):
            async with s.locked("grant", KEY, wait_s=0.3):
                pass
        release.set()
        async with s.locked("grant", KEY, wait_s=10):
            pass
    finally:
        release.set()
        proc.join(10)


def source(tmp_path: Path, *, subject: str | None = "alice") -> tuple[SubjectTokenSource, TokenStore]:
    s = store(tmp_path)
    spec = OAuthClient(type="authorization_code", client_id="client-1", subject=subject)
    src = SubjectTokenSource("https://mcp.example/mcp", spec, s)
    src._found = Discovered(
        issuer=KEY[1], token_endpoint=NOWHERE, resource=KEY[2], scope=None, method="none", advertised_scope=None
    )
    src._client = {"client_id": "client-1", "method": "none"}
    src._key = KEY
    return src, s


async def test_a_wrong_state_or_iss_is_refused_before_any_token_request(tmp_path: Path) -> None:
    src, _ = source(tmp_path)
    pending = {"verifier": "v" * 43, "scope": None, "metadata": None}
    with pytest.raises(AuthorizationRequired, match="state is not the one"):
        await src._bounded(src._complete("http://127.0.0.1/cb?code=c&state=other", "mine", pending))
    pending["metadata"] = {
        "issuer": KEY[1],
        "authorization_endpoint": f"{KEY[1]}/authorize",
        "token_endpoint": f"{KEY[1]}/token",
        "response_types_supported": ["code"],
        "authorization_response_iss_parameter_supported": True,
    }
    with pytest.raises(AuthorizationRequired, match="RFC 9207"):
        await src._bounded(src._complete("http://127.0.0.1/cb?code=c&state=mine&iss=https://evil", "mine", pending))
    with pytest.raises(AuthorizationRequired, match="RFC 9207"):  # advertised, then missing
        await src._bounded(src._complete("http://127.0.0.1/cb?code=c&state=mine", "mine", pending))
    with pytest.raises(AuthorizationRequired, match="refused consent: access_denied"):
        await src._bounded(src._complete(f"/cb?error=access_denied&state=mine&iss={KEY[1]}", "mine", pending))
    assert callback_params("?a=1&a=2&b=") == {"a": "1", "b": ""}


async def test_another_process_refresh_is_used_not_repeated(tmp_path: Path) -> None:
    src, s = source(tmp_path)
    s.write("grant", KEY, {"generation": 1, "access_token": "old", "refresh_token": "rt1", "expires_at": 0})
    # Another process refreshed after this one read generation 1: its token stands, no request is sent (the token
    # endpoint here is unreachable: a request would fail the refresh).
    s.write(
        "grant", KEY, {"generation": 2, "access_token": "new", "refresh_token": "rt2", "expires_at": time.time() + 600}
    )
    await src._refresh(seen=1)
    assert src.current() == "new" and src.refreshes == 0


async def test_an_interrupted_refresh_never_sends_its_refresh_token_again(tmp_path: Path) -> None:
    src, s = source(tmp_path)
    # A process marked the refresh, sent it, and died before storing the answer (the record it leaves; a real worker
    # SIGKILLed at that moment: tests/test_subject_kill.py).
    s.write("grant", KEY, {"generation": 3, "access_token": "a", "refresh_token": "spent", "refreshing": True})
    await src._refresh(seen=3)
    record = s.read("grant", KEY)
    assert record is not None and record["needs_consent"] and "refresh_token" not in record
    assert record["generation"] == 4 and src.current() is None


async def test_no_subject_never_gets_a_grant(tmp_path: Path) -> None:
    src, s = source(tmp_path, subject=None)
    s.write("grant", KEY, {"generation": 1, "access_token": "alice-token", "expires_at": time.time() + 600})
    with pytest.raises(AuthorizationRequired, match="names no subject"):
        await src.after_401(None, Challenge(401), None)
    endpoint = Endpoint(url="https://mcp.example/mcp", auth=OAuthClient(type="authorization_code"))
    assert auth.for_subject(endpoint, "bob").auth.subject == "bob"  # type: ignore[union-attr]
    assert auth.for_subject(endpoint, None) is endpoint
    service = Endpoint(
        url="https://mcp.example/mcp",
        auth=OAuthClient(type="client_credentials", client_id="c", client_secret_env="X"),
    )
    assert auth.for_subject(service, "bob") is service  # a service's credentials are the worker's


async def test_a_callback_for_no_pending_consent_is_refused(tmp_path: Path) -> None:
    s = store(tmp_path)
    with pytest.raises(AuthorizationRequired, match="names no pending consent"):
        await complete_consent("http://127.0.0.1:1/callback?code=c&state=never-asked", store=s)
    with pytest.raises(AuthorizationRequired, match="names no pending consent"):
        await complete_consent("http://127.0.0.1:1/callback?code=c", store=s)


def test_login_bad_input_is_one_clear_line(tmp_path: Path) -> None:
    """``mcp-tasks login``: a callback naming no consent, no store key, a server not configured for consent, a
    redirect that is not loopback: each one line and its exit code, never a traceback."""
    import os
    import subprocess
    import sys

    config = tmp_path / "c.toml"
    config.write_text(
        '[servers.svc]\nurl = "http://127.0.0.1:9/mcp"\n[servers.svc.auth]\ntype = "client_credentials"\n'
        'client_id = "c"\nclient_secret = { env = "T55_SECRET" }\n'
        '[servers.web]\nurl = "http://127.0.0.1:9/mcp"\n[servers.web.auth]\ntype = "authorization_code"\n'
        'redirect_uri = "https://app.example/cb"\n'
    )
    env = {**os.environ, "T55_SECRET": "s", "MCP_TASKS_TOKEN_DIR": str(tmp_path / "store")}
    env.pop("MCP_TASKS_TOKEN_KEY", None)

    def login(*args: str, key: bool = True) -> subprocess.CompletedProcess[str]:
        extra = {"MCP_TASKS_TOKEN_KEY": Fernet.generate_key().decode()} if key else {}
        return subprocess.run(
            [sys.executable, "-m", "mcp_temporal_tasks.worker.cli", "login", *args],
            env={**env, **extra},
            capture_output=True,
            text=True,
            timeout=60,
        )

    cases = [
        (login("--callback", "http://127.0.0.1:1/cb?state=nope&code=x"), 1, "names no pending consent"),
        (login("--callback", "http://127.0.0.1:1/cb?state=nope", key=False), 2, "MCP_TASKS_TOKEN_KEY is not set"),
        (login("svc", "--config", str(config)), 2, "not configured for a subject's consent"),
        (login("web", "--config", str(config)), 2, "loopback redirect_uri"),
    ]
    for done, code, says in cases:
        assert done.returncode == code and says in done.stderr, (done.returncode, done.stderr)
        assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


async def test_a_refused_token_is_refreshed_not_sent_again(tmp_path: Path) -> None:
    src, s = source(tmp_path)
    live = {"generation": 5, "access_token": "at5", "refresh_token": "rt5", "expires_at": time.time() + 600}
    s.write("grant", KEY, live)
    await src._from_store_or_refresh(refused=None)
    assert src.current() == "at5" and s.read("grant", KEY) == {**live, "_key": ["grant", *KEY]}  # no refresh
    # The server refused at5 before its time: a refresh is tried (marked before sending; the token endpoint here
    # cannot be reached, so the mark stays: that refresh token may be spent and is not sent again).
    await src._from_store_or_refresh(refused="at5")
    record = s.read("grant", KEY)
    assert record is not None and record["refreshing"] is True and record["generation"] == 5
    assert src.current() is None and src.refreshes == 0
    await src._from_store_or_refresh(refused="at5")  # the next attempt finds the mark: consent, nothing sent
    record = s.read("grant", KEY)
    assert record is not None and record["needs_consent"] and "refresh_token" not in record
