"""DPoP (RFC 9449): the proofs we sign, checked by another library; nonces from hostile servers; a ``tools/call``
sent again after a nonce challenge is run once.

The proofs are built with PyJWT (``wire.auth.dpop``) and verified here with joserfc, a JOSE implementation we do
not sign with: signature by the key in the proof's own ``jwk`` header, and every claim RFC 9449 §4.2 asks for. The
servers of the last tests are small HTTP servers of the test's own (``FakeHttp``, as in test_auth_hostile.py): an
authorization server and an MCP endpoint that check each proof the same way, and count what they run. Last, a
subject's grant: its key kept in the token store signs its refresh, and a grant bound otherwise than configured is not
used. The suite's own DPoP scenarios (``auth/dpop``, ``auth/dpop-nonce``: the authorization-code grant through
``mcp-tasks login``, then a task) run in tests/test_conformance.py.
"""

from __future__ import annotations

import base64
import hashlib
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from joserfc import jws
from joserfc.jwk import ECKey

from mcp_temporal_tasks.activities.wire.auth import SubjectTokenSource, TokenSource
from mcp_temporal_tasks.activities.wire.auth.base import NoToken
from mcp_temporal_tasks.activities.wire.auth.discovery import Discovered
from mcp_temporal_tasks.activities.wire.auth.dpop import MAX_NONCE, DpopKey, Prover, check_nonce
from mcp_temporal_tasks.activities.wire.auth.source import BearerAuth
from mcp_temporal_tasks.activities.wire.auth.token_endpoint import TokenRequest, request_token
from mcp_temporal_tasks.activities.wire.auth.token_store import TokenStore
from mcp_temporal_tasks.protocol.tasks import OAuthClient
from mcp_temporal_tasks.protocol.wire_errors import AuthorizationRequired
from mcp_temporal_tasks.worker.config import ConfigError, server_config
from tests.test_auth_hostile import FakeHttp

SECRET_VAR = "MCP_TEST_DPOP_SECRET"


def verified(proof: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The proof's header and claims, once joserfc has checked its signature with the key in its ``jwk`` header."""
    header = json.loads(base64.urlsafe_b64decode(proof.split(".")[0] + "==="))
    key = ECKey.import_key(header["jwk"])
    result = jws.deserialize_compact(proof, key, algorithms=["ES256"])
    return dict(result.protected), json.loads(result.payload)


def sha256_b64url(value: str) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(value.encode()).digest()).rstrip(b"=").decode()


@pytest.mark.fast
def test_a_proof_verifies_with_its_own_public_key_and_says_what_rfc_9449_asks() -> None:
    key = DpopKey.generate()
    token = f"at-{uuid.uuid4().hex}"
    before = int(time.time())
    proof = key.proof("post", "https://user:pw@MCP.example.com:8443/mcp?x=1#frag", access_token=token, nonce="n-1")
    header, claims = verified(proof)
    assert header["typ"] == "dpop+jwt" and header["alg"] == "ES256"
    assert set(header["jwk"]) == {"kty", "crv", "x", "y"} and header["jwk"]["crv"] == "P-256"  # no private part
    assert claims["htm"] == "POST"
    assert claims["htu"] == "https://mcp.example.com:8443/mcp"  # no query, fragment nor user info
    assert claims["ath"] == sha256_b64url(token)
    assert claims["nonce"] == "n-1"
    assert before <= claims["iat"] <= int(time.time())
    assert isinstance(claims["jti"], str) and len(claims["jti"]) >= 16
    # A token request's proof has no ath and no nonce unless given one; every proof a new jti.
    _, bare = verified(key.proof("POST", "https://as.example.com/token"))
    assert "ath" not in bare and "nonce" not in bare and bare["jti"] != claims["jti"]
    # A proof is no good with another key: joserfc refuses it.
    other = ECKey.import_key(DpopKey.generate().public_jwk)
    with pytest.raises(Exception, match="signature"):
        jws.deserialize_compact(proof, other, algorithms=["ES256"])


@pytest.mark.fast
def test_the_stored_key_is_the_same_key() -> None:
    """What the token store keeps (the private JWK) gives back the key the token is bound to (same thumbprint)."""
    key = DpopKey.generate()
    again = DpopKey.from_jwk(key.private_jwk())
    assert ECKey.import_key(again.public_jwk).thumbprint() == ECKey.import_key(key.public_jwk).thumbprint()
    verified(again.proof("GET", "https://mcp.example.com/mcp"))
    for broken in ({}, {"kty": "EC", "crv": "P-256", "x": "AAAA", "y": "AAAA", "d": "AAAA"}, key.public_jwk):
        with pytest.raises(NoToken, match="DPoP key"):
            DpopKey.from_jwk(broken)


@pytest.mark.fast
@pytest.mark.parametrize(
    "value, message",
    [
        (None, "without sending one"),
        ("", "without sending one"),
        ("n" * (MAX_NONCE + 1), f"of {MAX_NONCE + 1} characters"),
        ('a"b', "is not a nonce"),
        ("two words", "is not a nonce"),
        ("nonce\u00e9", "is not a nonce"),
        ("a\\b", "is not a nonce"),
    ],
    ids=["none", "empty", "too-long", "quote", "space", "not-ascii", "backslash"],
)
def test_a_nonce_header_that_is_not_one_is_one_clear_error(value: str | None, message: str) -> None:
    with pytest.raises(NoToken, match=message) as caught:
        check_nonce(value, "the server at https://as.example.com/token")
    assert "https://as.example.com/token" in str(caught.value)


@pytest.mark.fast
def test_nonces_are_kept_per_origin_and_bounded() -> None:
    prover = Prover(DpopKey.generate())
    assert check_nonce("abc-._~!#$", "x") == "abc-._~!#$"
    prover.take_nonce("https://as.example.com/token", {"dpop-nonce": "as-nonce"})
    prover.note_nonce("https://mcp.example.com/mcp", {"dpop-nonce": "rs-nonce"})
    prover.note_nonce("https://mcp.example.com/mcp", {"dpop-nonce": "not one"})  # garbage on a success: ignored
    assert verified(prover.proof("POST", "https://as.example.com/token"))[1]["nonce"] == "as-nonce"
    assert verified(prover.proof("POST", "https://mcp.example.com/other"))[1]["nonce"] == "rs-nonce"
    for i in range(40):
        prover.note_nonce(f"https://s{i}.example.com/", {"dpop-nonce": f"n{i}"})
    assert len(prover.nonces) == 16


@pytest.mark.fast
def test_the_dpop_option_is_checked_in_configuration() -> None:
    env = {SECRET_VAR: "s"}
    base = {"type": "client_credentials", "client_id": "c", "client_secret": {"env": SECRET_VAR}}
    on = server_config("s", {"url": "https://mcp.example.com/mcp", "auth": {**base, "dpop": True}}, env=env)
    assert on.auth is not None and on.auth.dpop is True
    off = server_config("s", {"url": "https://mcp.example.com/mcp", "auth": base}, env=env)
    assert off.auth is not None and off.auth.dpop is False
    with pytest.raises(ConfigError, match=r"servers\.s\.auth\.dpop: must be true or false \(got 'yes'\)"):
        server_config("s", {"url": "https://mcp.example.com/mcp", "auth": {**base, "dpop": "yes"}}, env=env)


# --- hostile and demanding servers -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def shared() -> Iterator[FakeHttp]:
    fake = FakeHttp()  # one per module: its shutdown waits out a poll interval (0.5 s)
    yield fake
    fake.close()


@pytest.fixture
def server(shared: FakeHttp) -> FakeHttp:
    shared.routes.clear()
    shared.requests.clear()
    return shared


def header(request: dict[str, Any], name: str) -> str | None:
    return next((v for k, v in request["headers"].items() if k.lower() == name), None)


def token_endpoint(
    fake: FakeHttp, *, nonces: Iterator[str] | None, token_type: str = "DPoP", forever: bool = False
) -> None:
    """``/token``: every request must carry a proof that verifies; with ``nonces``, a proof without the current one
    is answered ``use_dpop_nonce`` with the next (``forever``: every proof is, whatever nonce it carries)."""
    current: list[str | None] = [None]

    def answer(request: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
        proof = header(request, "dpop")
        assert proof is not None
        _, claims = verified(proof)
        assert claims["htm"] == "POST" and claims["htu"] == f"{fake.url}/token" and "ath" not in claims
        if nonces is not None and (forever or current[0] is None or claims.get("nonce") != current[0]):
            current[0] = next(nonces)
            body = json.dumps({"error": "use_dpop_nonce", "error_description": "a nonce, please"}).encode()
            return 400, {"content-type": "application/json", "dpop-nonce": current[0]}, body
        body = json.dumps({"access_token": f"at-{uuid.uuid4().hex}", "token_type": token_type, "expires_in": 60})
        return 200, {"content-type": "application/json"}, body.encode()

    fake.routes["/token"] = answer


async def token(fake: FakeHttp, prover: Prover) -> str:
    grant = TokenRequest("client_credentials", {"client_id": "c", "client_secret": "s"})
    tokens = await request_token(f"{fake.url}/token", f"{fake.url}/mcp", None, grant, dpop=prover)
    return tokens.access_token


def token_requests(fake: FakeHttp) -> int:
    return sum(1 for r in fake.requests if r["path"] == "/token")


async def test_the_authorization_server_nonce_is_answered_once(server: FakeHttp) -> None:
    token_endpoint(server, nonces=iter(["as-1"]))
    prover = Prover(DpopKey.generate())
    assert (await token(server, prover)).startswith("at-")
    assert token_requests(server) == 2  # refused for its nonce, then granted
    await token(server, prover)  # the nonce is kept: granted at once
    assert token_requests(server) == 3


async def test_an_authorization_server_that_keeps_asking_for_new_nonces_gets_one_clear_error(server: FakeHttp) -> None:
    token_endpoint(server, nonces=(f"as-{i}" for i in range(1000)), forever=True)
    with pytest.raises(NoToken, match=r"asked for a new DPoP nonce again .* not asked a third time"):
        await token(server, Prover(DpopKey.generate()))
    assert token_requests(server) == 2


@pytest.mark.parametrize("nonce", ["x" * 5000, "bad nonce", ""], ids=["too-long", "space", "empty"])
async def test_an_authorization_server_nonce_that_is_not_one_is_one_clear_error(server: FakeHttp, nonce: str) -> None:
    token_endpoint(server, nonces=iter([nonce]))
    with pytest.raises(NoToken, match="DPoP-Nonce header|without sending one"):
        await token(server, Prover(DpopKey.generate()))
    assert token_requests(server) == 1


async def test_a_bearer_token_where_dpop_was_asked_for_is_not_used(server: FakeHttp) -> None:
    token_endpoint(server, nonces=None, token_type="Bearer")
    with pytest.raises(NoToken, match="answered token_type 'Bearer' where a DPoP-bound token"):
        await token(server, Prover(DpopKey.generate()))


def mcp_server(fake: FakeHttp, nonces: Iterator[str], runs: list[str], *, forever: bool = False) -> None:
    """Protected resource metadata, the authorization server (metadata and ``/token``) and ``/mcp``: a request
    without a token gets the challenge; one whose proof lacks the current nonce ``401 use_dpop_nonce`` with the next
    (not run); one with it is run (appended to ``runs``)."""
    fake.json("/prm", {"resource": f"{fake.url}/mcp", "authorization_servers": [fake.url]})
    fake.json(
        "/.well-known/oauth-authorization-server",
        {
            "issuer": fake.url,
            "authorization_endpoint": f"{fake.url}/authorize",
            "token_endpoint": f"{fake.url}/token",
            "token_endpoint_auth_methods_supported": ["client_secret_post"],
            "dpop_signing_alg_values_supported": ["ES256"],
        },
    )
    token_endpoint(fake, nonces=None)
    current: list[str | None] = [None]
    challenge = f'DPoP resource_metadata="{fake.url}/prm"'

    def mcp(request: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
        authorization = header(request, "authorization") or ""
        if not authorization:
            return 401, {"www-authenticate": challenge}, b""
        scheme, _, presented = authorization.partition(" ")
        assert scheme == "DPoP"
        _, claims = verified(header(request, "dpop") or "")
        assert claims["ath"] == sha256_b64url(presented) and claims["htu"] == f"{fake.url}/mcp"
        if forever or current[0] is None or claims.get("nonce") != current[0]:
            current[0] = next(nonces)
            asked = {"www-authenticate": f'DPoP error="use_dpop_nonce", {challenge[5:]}', "dpop-nonce": current[0]}
            return 401, asked, b""
        runs.append(json.loads(request["body"])["method"])
        reply = {"jsonrpc": "2.0", "id": 1, "result": {"content": [{"type": "text", "text": "ran"}]}}
        return 200, {"content-type": "application/json"}, json.dumps(reply).encode()

    fake.routes["/mcp"] = mcp


async def call(fake: FakeHttp, monkeypatch: pytest.MonkeyPatch) -> httpx2.Response:
    monkeypatch.setenv(SECRET_VAR, "s")
    spec = OAuthClient(type="client_credentials", client_id="c", client_secret_env=SECRET_VAR, dpop=True)
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "t", "arguments": {}}}
    async with httpx2.AsyncClient(auth=BearerAuth(TokenSource(f"{fake.url}/mcp", spec)), timeout=10) as http:
        return await http.post(f"{fake.url}/mcp", json=body)


async def test_a_tools_call_sent_again_for_the_servers_nonce_runs_once(
    server: FakeHttp, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs: list[str] = []
    mcp_server(server, iter(["rs-1"]), runs)
    response = await call(server, monkeypatch)
    assert response.status_code == 200 and runs == ["tools/call"]
    # Sent without a token (401), with the token (401 use_dpop_nonce: not run), with the nonce (run): once.
    assert [r["path"] for r in server.requests].count("/mcp") == 3


async def test_a_server_that_keeps_asking_for_new_nonces_gets_one_clear_error_and_runs_nothing(
    server: FakeHttp, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs: list[str] = []
    mcp_server(server, (f"rs-{i}" for i in range(1000)), runs, forever=True)
    with pytest.raises(AuthorizationRequired, match=r"use_dpop_nonce twice\): not sent a third time"):
        await call(server, monkeypatch)
    assert runs == [] and [r["path"] for r in server.requests].count("/mcp") == 3


@pytest.mark.parametrize("nonce", ["y" * 5000, "\u00e9t\u00e9"], ids=["too-long", "not-ascii"])
async def test_a_server_nonce_that_is_not_one_is_one_clear_error_and_runs_nothing(
    server: FakeHttp, monkeypatch: pytest.MonkeyPatch, nonce: str
) -> None:
    runs: list[str] = []
    mcp_server(server, iter([nonce]), runs)
    with pytest.raises(AuthorizationRequired, match="DPoP-Nonce header"):
        await call(server, monkeypatch)
    assert runs == [] and [r["path"] for r in server.requests].count("/mcp") == 2


# --- a subject's grant: its key in the token store -----------------------------------------------------------------

GRANT = ("alice", "https://as.example", "https://mcp.example/mcp", "client-1")


def subject_source(tmp_path: Path, token_endpoint: str, *, dpop: bool) -> tuple[SubjectTokenSource, TokenStore]:
    from cryptography.fernet import Fernet

    store = TokenStore(tmp_path / "store", Fernet.generate_key().decode())
    spec = OAuthClient(type="authorization_code", client_id="client-1", subject="alice", dpop=dpop)
    src = SubjectTokenSource(GRANT[2], spec, store)
    src._found = Discovered(
        issuer=GRANT[1],
        token_endpoint=token_endpoint,
        resource=GRANT[2],
        scope=None,
        method="none",
        advertised_scope=None,
    )
    src._client = {"client_id": "client-1", "method": "none"}
    src._key = GRANT
    return src, store


async def test_a_refresh_proves_the_key_the_grant_was_bound_to(server: FakeHttp, tmp_path: Path) -> None:
    """The stored grant's key signs its refresh (the authorization server binds a public client's refresh token to
    it) and the new tokens' presentation; the record keeps it, encrypted: its raw bytes hold no part of the key."""
    token_endpoint(server, nonces=iter(["as-1"]))
    key = DpopKey.generate()
    src, store = subject_source(tmp_path, f"{server.url}/token", dpop=True)
    jwk = key.private_jwk()
    store.write(
        "grant",
        GRANT,
        {"generation": 1, "access_token": "old", "refresh_token": "rt1", "expires_at": 0, "dpop_jwk": jwk},
    )
    await src._from_store_or_refresh()
    assert src.refreshes == 1 and (src.current() or "").startswith("at-")
    thumbprint = ECKey.import_key(key.public_jwk).thumbprint()
    proofs = [header(r, "dpop") or "" for r in server.requests if r["path"] == "/token"]
    assert len(proofs) == 2  # refused for the nonce, then granted: both signed by the grant's key
    assert all(ECKey.import_key(verified(p)[0]["jwk"]).thumbprint() == thumbprint for p in proofs)
    prover = src.prover()
    assert prover is not None and ECKey.import_key(prover.key.public_jwk).thumbprint() == thumbprint
    record = store.read("grant", GRANT)
    assert record is not None and record["dpop_jwk"] == jwk and record["generation"] == 2
    raw = b"".join(p.read_bytes() for p in (tmp_path / "store").glob("grant-*") if p.suffix != ".lock")
    assert jwk["d"].encode() not in raw and jwk["x"].encode() not in raw


@pytest.mark.fast
async def test_a_grant_bound_otherwise_than_configured_is_not_used(tmp_path: Path) -> None:
    """A bearer grant where ``dpop = true`` (or the reverse) is neither presented nor refreshed: a consent is asked
    (the token endpoint here is unreachable: a refresh would fail the test)."""
    for configured, stored in ((True, None), (False, DpopKey.generate().private_jwk())):
        src, store = subject_source(tmp_path / str(configured), "http://127.0.0.1:9/token", dpop=configured)
        store.write(
            "grant",
            GRANT,
            {
                "generation": 1,
                "access_token": "at",
                "refresh_token": "rt",
                "expires_at": time.time() + 600,
                "dpop_jwk": stored,
            },
        )
        await src._from_store_or_refresh()
        assert src.current() is None and src.refreshes == 0 and src.prover() is None
