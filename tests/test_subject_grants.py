"""A subject's grants: the encrypted token store, its per-record lock, and the decisions of the authorization-code
source that need no authorization server (a wrong ``state`` or ``iss`` refused before any token request; another
process's refresh used, not repeated; an interrupted refresh never re-sends its refresh token; no subject, no grant).

The store's contract runs against both backends (``backend``: the directory, and the object store on a real
S3-compatible server, moto's, started once per module); the object store's own faults (a conditional write refused,
a bucket not reached) and its choice by ``MCP_TASKS_TOKEN_STORE`` follow.

The flow end to end against an authorization server is the conformance suite's (tests/test_conformance.py: every
authorization-code scenario through ``mcp-tasks login``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import multiprocessing
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.fernet import Fernet

from mcp_temporal_tasks.activities.wire import auth
from mcp_temporal_tasks.activities.wire.auth.authorization_code import (
    SubjectTokenSource,
    accept_callback,
    callback_params,
)
from mcp_temporal_tasks.activities.wire.auth.discovery import Challenge, Discovered
from mcp_temporal_tasks.activities.wire.auth.token_store import (
    DIR_ENV,
    KEY_ENV,
    STORE_ENV,
    Store,
    StoreError,
    TokenStore,
    grant_id,
    open_store,
)
from mcp_temporal_tasks.activities.wire.auth.token_store_s3 import S3TokenStore
from mcp_temporal_tasks.protocol.tasks import Endpoint, OAuthClient
from mcp_temporal_tasks.protocol.wire_errors import AuthorizationRequired
from tests.peers.s3 import running_s3
from tests.token_stores import Backend, backend_for

pytestmark = pytest.mark.fast

KEY = ("alice", "https://as.example", "https://mcp.example/mcp", "client-1")
#: A token endpoint nothing listens on: a test that reaches it fails with "cannot reach".
NOWHERE = "http://127.0.0.1:9/token"


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    with running_s3() as server:
        yield server.endpoint


#: The object store's tests run in one xdist worker: one moto server for all of them.
ON_MOTO = pytest.mark.xdist_group("token-store-s3")


@pytest.fixture(params=["dir", pytest.param("s3", marks=ON_MOTO)])
def backend(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Backend:
    endpoint = request.getfixturevalue("s3_endpoint") if request.param == "s3" else None
    return backend_for(request.param, tmp_path, Fernet.generate_key().decode(), monkeypatch, endpoint)


def test_records_are_encrypted_at_rest_and_keyed_by_subject(backend: Backend) -> None:
    s = backend.open()
    s.write("grant", KEY, {"access_token": "at-secret-1", "refresh_token": "rt-secret-1", "generation": 1})
    objects = backend.objects()
    raw = b"".join(objects.values()) + "".join(objects).encode()  # the bytes and the names
    assert b"at-secret-1" not in raw and b"rt-secret-1" not in raw and b"alice" not in raw
    assert backend.open().read("grant", KEY) is not None  # another process with the key reads it
    assert s.read("grant", ("bob", *KEY[1:])) is None  # another subject's key: nothing
    assert s.read("grant", (*KEY[:2], "https://other.example/mcp", KEY[3])) is None  # another resource's: nothing
    assert s.read("grant", (KEY[0], "https://other-as.example", *KEY[2:])) is None  # another issuer's: nothing
    with pytest.raises(StoreError, match=f"record {Store.name('grant', KEY)} does not decrypt"):
        backend.open(Fernet.generate_key().decode()).read("grant", KEY)  # another key
    assert grant_id(*KEY).startswith("grant-") and "alice" not in grant_id(*KEY)
    # Records that expire are gone once read past their time, and swept from the store as new ones come.
    s.write("consent", ("state-1",), {"verifier": "v"}, ttl_s=0.05)
    time.sleep(0.1)
    assert s.read("consent", ("state-1",)) is None
    s.write("consent", ("state-2",), {"verifier": "v"}, ttl_s=0.05)
    assert [n for n in backend.objects() if n.startswith("consent-")] == [Store.name("consent", ("state-2",))]
    s.write("consent", ("long",), {"verifier": "v"}, ttl_s=3600)  # a task's consent lasts as long as its task waits
    time.sleep(0.1)
    s.write("consent", ("state-3",), {"verifier": "v"}, ttl_s=0.05)
    assert s.read("consent", ("long",)) is not None  # a shorter record's sweep leaves a longer-lived one of its kind


def _hold_lock(backend: Backend, held: Any) -> None:
    async def main() -> None:
        async with backend.open().locked("grant", KEY):
            held.set()
            await asyncio.sleep(60)  # killed here, holding the lock

    asyncio.run(main())


async def test_the_lock_excludes_another_process_until_its_holder_dies(backend: Backend) -> None:
    """Another process's lock is waited for, boundedly; a holder that dies loses it: at once in the directory (the
    ``flock`` dies with its process), after the lease time in the object store (a dead machine tells nobody)."""
    s = backend.open()
    ctx = multiprocessing.get_context("spawn")
    held = ctx.Event()
    proc = ctx.Process(target=_hold_lock, args=(backend, held))
    proc.start()
    try:
        assert held.wait(20)
        with pytest.raises(StoreError, match=f"record {Store.name('grant', KEY)} stayed locked for 0.3 s"):
            async with s.locked("grant", KEY, wait_s=0.3):
                pass
        proc.kill()
        proc.join(10)
        if isinstance(s, S3TokenStore):
            with pytest.raises(StoreError, match="stayed locked"):  # the dead holder's lease outlives it...
                async with s.locked("grant", KEY, wait_s=0.3):
                    pass
            s.lease_s = 1.0  # ...until it is older than the lease time, by the store's own clock
        async with s.locked("grant", KEY, wait_s=10):
            pass
    finally:
        proc.kill()
        proc.join(10)


def source(backend: Backend, *, subject: str | None = "alice") -> tuple[SubjectTokenSource, Store]:
    s = backend.open()
    spec = OAuthClient(type="authorization_code", client_id="client-1", subject=subject)
    src = SubjectTokenSource("https://mcp.example/mcp", spec, s)
    src._found = Discovered(
        issuer=KEY[1], token_endpoint=NOWHERE, resource=KEY[2], scope=None, method="none", advertised_scope=None
    )
    src._client = {"client_id": "client-1", "method": "none"}
    src._key = KEY
    return src, s


async def test_a_wrong_state_or_iss_is_refused_before_any_token_request(tmp_path: Path) -> None:
    src, _ = source(Backend("dir", str(tmp_path / "store"), Fernet.generate_key().decode()))
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


async def test_another_process_refresh_is_used_not_repeated(backend: Backend) -> None:
    src, s = source(backend)
    s.write("grant", KEY, {"generation": 1, "access_token": "old", "refresh_token": "rt1", "expires_at": 0})
    # Another process refreshed after this one read generation 1: its token stands, no request is sent (the token
    # endpoint here is unreachable: a request would fail the refresh).
    s.write(
        "grant", KEY, {"generation": 2, "access_token": "new", "refresh_token": "rt2", "expires_at": time.time() + 600}
    )
    await src._refresh(seen=1)
    assert src.current() == "new" and src.refreshes == 0


async def test_an_interrupted_refresh_never_sends_its_refresh_token_again(backend: Backend) -> None:
    src, s = source(backend)
    # A process marked the refresh, sent it, and died before storing the answer (the record it leaves; a real worker
    # SIGKILLed at that moment: tests/test_subject_kill.py).
    s.write("grant", KEY, {"generation": 3, "access_token": "a", "refresh_token": "spent", "refreshing": True})
    await src._refresh(seen=3)
    record = s.read("grant", KEY)
    assert record is not None and record["needs_consent"] and "refresh_token" not in record
    assert record["generation"] == 4 and src.current() is None


async def test_no_subject_never_gets_a_grant(backend: Backend) -> None:
    src, s = source(backend, subject=None)
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


def test_a_callback_for_no_pending_consent_is_refused(backend: Backend) -> None:
    s = backend.open()
    with pytest.raises(AuthorizationRequired, match="names no pending consent"):
        accept_callback("http://127.0.0.1:1/callback?code=c&state=never-asked", store=s)
    with pytest.raises(AuthorizationRequired, match="names no pending consent"):
        accept_callback("http://127.0.0.1:1/callback?code=c", store=s)


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


async def test_a_refused_token_is_refreshed_not_sent_again(backend: Backend) -> None:
    src, s = source(backend)
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


# --- the object store's own faults --------------------------------------------------------------------------------


@pytest.fixture
def s3(s3_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Backend:
    return backend_for("s3", tmp_path, Fernet.generate_key().decode(), monkeypatch, s3_endpoint)


class StallingTokenEndpoint:
    """A token endpoint that holds each request until told, then answers fresh tokens; counts what it was sent."""

    def __init__(self) -> None:
        import http.server
        import threading

        self.refresh_tokens: list[str] = []
        self.got, self.answer = threading.Event(), threading.Event()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                from urllib.parse import parse_qs

                body = self.rfile.read(min(int(self.headers.get("content-length") or 0), 65536)).decode()
                outer.refresh_tokens += parse_qs(body).get("refresh_token", [])
                outer.got.set()
                outer.answer.wait(30)
                data = b'{"access_token":"at-new","token_type":"Bearer","expires_in":600,"refresh_token":"rt-new"}'
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/token"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.answer.set()
        self.server.shutdown()
        self.server.server_close()


@ON_MOTO
async def test_a_refresh_whose_lease_was_taken_over_is_refused_and_never_repeated(s3: Backend) -> None:
    """Machine A sends a refresh and stalls past its lease; machine B takes the lease over, finds the grant marked
    ``refreshing`` and marks it as needing consent (sending nothing); A's answer then arrives, and its write is
    refused by the compare-and-swap: one clear error naming the record, one refresh token sent in all."""
    endpoint = StallingTokenEndpoint()
    try:
        a, store_a = source(s3)
        b, store_b = source(s3)
        for src, s in ((a, store_a), (b, store_b)):
            assert isinstance(s, S3TokenStore) and src._found is not None
            s.lease_s = 1.0
            src._found = dataclasses.replace(src._found, token_endpoint=endpoint.url)
        store_a.write("grant", KEY, {"generation": 3, "access_token": "a", "refresh_token": "rt3", "expires_at": 0})
        refreshing = asyncio.create_task(a.token())
        assert await asyncio.to_thread(endpoint.got.wait, 20)
        assert await b.token() is None  # B: the lease taken over, the grant found mid-refresh, nothing sent
        marked = store_b.read("grant", KEY)
        assert marked is not None and marked["needs_consent"] and marked["generation"] == 4
        endpoint.answer.set()
        with pytest.raises(AuthorizationRequired, match=f"record {Store.name('grant', KEY)} .*conditional write"):
            await refreshing
        assert store_a.read("grant", KEY) == marked  # B's record stands
        assert endpoint.refresh_tokens == ["rt3"]
    finally:
        endpoint.close()


@ON_MOTO
async def test_an_unreachable_or_missing_bucket_is_one_clear_error_and_no_refresh(
    s3: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, s = source(s3)
    s.write("grant", KEY, {"generation": 1, "access_token": "a", "refresh_token": "rt1", "expires_at": 0})
    missing = Backend("s3", "s3://no-such-bucket-55e/p/", s3.key)
    with pytest.raises(StoreError, match="s3://no-such-bucket-55e/p/ cannot read .*: the bucket does not exist"):
        missing.open().read("grant", KEY)
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:9")  # nothing listens there
    src, _ = source(s3)
    with pytest.raises(AuthorizationRequired, match=f"token store {s3.where} cannot be reached to read grant-"):
        await src.token()


def test_the_store_is_chosen_by_env_with_one_clear_error_per_bad_value(tmp_path: Path) -> None:
    key = Fernet.generate_key().decode()
    assert isinstance(open_store({KEY_ENV: key, DIR_ENV: str(tmp_path)}), TokenStore)
    chosen = open_store({KEY_ENV: key, STORE_ENV: "s3://tokens.example-1/team/a/"})
    assert isinstance(chosen, S3TokenStore) and (chosen.bucket, chosen.prefix) == ("tokens.example-1", "team/a/")
    assert open_store({KEY_ENV: key, STORE_ENV: "s3://tokens"}).prefix == ""  # type: ignore[attr-defined]
    bad = {
        "file:///var/tokens": "must be s3://BUCKET",
        "s3://": "is not an S3 bucket name",
        "s3://Tokens": "is not an S3 bucket name",
        "s3://tok..ens": "is not an S3 bucket name",
        "s3://AKIA:hunter2@tokens/p": "takes no credentials",
        "s3://tokens:9000/p": "takes no credentials, port",
        "s3://tokens/p?versioning=1": "takes no credentials, port, query",
        "s3://tokens/a/../b": "'..' segment",
        "s3://tokens/a b": "no spaces",
    }
    for value, says in bad.items():
        with pytest.raises(StoreError, match=f"^{STORE_ENV}.*{says}") as caught:
            open_store({KEY_ENV: key, STORE_ENV: value})
        assert "hunter2" not in str(caught.value)
    with pytest.raises(StoreError, match=f"{STORE_ENV} and {DIR_ENV} are both set"):
        open_store({KEY_ENV: key, STORE_ENV: "s3://tokens/p", DIR_ENV: "/tmp/x"})
    with pytest.raises(StoreError, match=f"{KEY_ENV} is not set"):
        open_store({STORE_ENV: "s3://tokens/p"})
