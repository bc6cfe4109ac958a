"""A subject's grant against a real authorization server we did not write (oidc-provider, refresh-token rotation on,
access tokens of 4 s): a consent by the authorization-code flow (PKCE, state, iss), then two worker processes sharing
one token store keep asking for the grant's token across several lifetimes: on one machine (the directory store),
and as two machines (the object store on a real S3-compatible server, moto's: the processes share only its bucket).
The authorization server's own log must show every refresh succeeding (a rotated refresh token presented twice is
``invalid_grant`` there, and revokes the grant), at most one refresh per token lifetime, and both processes holding
the same tokens. Then a revoked grant: its refresh refused once, the grant marked as needing consent, no second
attempt.

No MCP server: what is judged is the grant's token-endpoint traffic; discovery and the bearer on MCP requests are the
conformance suite's (tests/test_conformance.py).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from cryptography.fernet import Fernet

from mcp_temporal_tasks.activities.wire.auth import authorization_code
from mcp_temporal_tasks.activities.wire.auth.authorization_code import SubjectTokenSource
from mcp_temporal_tasks.activities.wire.auth.discovery import Discovered
from mcp_temporal_tasks.protocol.tasks import OAuthClient
from tests.peers.harness import Peer, consent_as, oauth_user_server
from tests.peers.s3 import running_s3
from tests.token_stores import Backend, backend_for

pytestmark = pytest.mark.xdist_group("test_subject_refresh")

CLIENT = "mcp-tasks-test"
REDIRECT = "http://127.0.0.1:9/callback"  # never reached: the person stops at the redirect to it
RESOURCE = "http://127.0.0.1:9/mcp"
TTL_S = 4
#: How long the two processes run, per store: the object store's run is shorter (two refreshes or more still).
RUN_S = {"dir": 14.0, "s3": 10.0}


def found_at(issuer: str) -> Discovered:
    from mcp.shared.auth import OAuthMetadata

    metadata = OAuthMetadata.model_validate_json(
        httpx2.get(f"{issuer}/.well-known/openid-configuration", timeout=10).content
    )
    return Discovered(
        issuer=str(metadata.issuer),
        token_endpoint=str(metadata.token_endpoint),
        resource=RESOURCE,
        scope=None,
        method="none",
        advertised_scope=None,
        metadata=metadata,
    )


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    with running_s3() as server:
        yield server.endpoint


@pytest.fixture(scope="module")
def authorization_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Peer]:
    clients = [{"client_id": CLIENT, "redirect_uris": [REDIRECT]}]
    with oauth_user_server(tmp_path_factory.mktemp("as"), clients=clients, token_ttl_s=TTL_S) as server:
        yield server


@pytest.fixture(params=["dir", "s3"])
def backend(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Backend:
    endpoint = request.getfixturevalue("s3_endpoint") if request.param == "s3" else None
    return backend_for(request.param, tmp_path, Fernet.generate_key().decode(), monkeypatch, endpoint)


def source(issuer: str, backend: Backend, subject: str) -> SubjectTokenSource:
    spec = OAuthClient(type="authorization_code", client_id=CLIENT, redirect_uri=REDIRECT, subject=subject)
    src = SubjectTokenSource(RESOURCE, spec, backend.open())
    src._found = found_at(issuer)
    src._client = {"client_id": CLIENT, "method": "none"}
    src._key = (subject, src._found.issuer, RESOURCE, CLIENT)
    return src


async def person(url: str, subject: str) -> str:
    return await consent_as(url, subject, REDIRECT)


def worker(issuer: str, backend: Backend, subject: str, out: Any, start: Any) -> None:
    async def main() -> list[str]:
        src = source(issuer, backend, subject)
        start.wait(30)  # both processes begin together, whatever their start-up took
        seen: list[str] = []
        deadline = time.monotonic() + RUN_S[backend.kind]
        while time.monotonic() < deadline:
            token = await src.token()
            assert token is not None, "the grant was lost"
            if not seen or seen[-1] != token:
                seen.append(token)
            await asyncio.sleep(0.1)
        return seen

    out.put(asyncio.run(main()))


async def test_two_processes_refresh_one_rotating_grant_once_per_lifetime(
    authorization_server: Peer, backend: Backend
) -> None:
    run_s = RUN_S[backend.kind]
    server = authorization_server
    mark = server.log_mark()  # the server serves both backends' runs, one after the other
    subject = {"dir": "alice", "s3": "bob"}[backend.kind]  # a grant of its own at the server
    issuer = server.endpoint.url or ""
    first = source(issuer, backend, subject)
    handler = authorization_code.consent_handler.set(lambda url: person(url, subject))
    try:
        await first._consent("openid offline_access mcp:tools")
    finally:
        authorization_code.consent_handler.reset(handler)
    assert first.current() is not None
    consented = backend.open().read("grant", first._key or ("",))
    assert consented is not None and consented["refresh_token"]
    ctx = multiprocessing.get_context("spawn")
    out, start = ctx.Queue(), ctx.Barrier(2)
    procs = [ctx.Process(target=worker, args=(issuer, backend, subject, out, start)) for _ in range(2)]
    for p in procs:
        p.start()
    try:
        seen = [out.get(timeout=run_s + 40) for _ in procs]
    finally:
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.kill()
    # Rotation is on: the consent's refresh token, spent by the first refresh, is refused now (and the
    # authorization server revokes the grant: this is what two racing refreshes would have done).
    again = httpx2.post(
        str(first._found.token_endpoint if first._found else ""),
        data={"grant_type": "refresh_token", "refresh_token": consented["refresh_token"], "client_id": CLIENT},
        timeout=10,
    )
    assert again.status_code == 400 and again.json()["error"] == "invalid_grant", again.text
    # That reuse revoked the grant (the whole family): the next refresh is refused, and the grant is marked as
    # needing consent, not retried (its tasks ask again).
    store = backend.open()
    assert first._key is not None
    record = store.read("grant", first._key)
    assert record is not None
    store.write("grant", first._key, {**record, "expires_at": 0})
    assert await first.token() is None
    marked = store.read("grant", first._key)
    assert marked is not None and marked["needs_consent"] and "refresh_token" not in marked
    assert marked["generation"] == record["generation"] + 1
    assert await first.token() is None  # no second refresh attempt: nothing to send
    full = server.log_since(mark)
    assert [e.get("error") for e in full[-2:]] == ["invalid_grant", "invalid_grant"], full[-3:]
    log = full[:-2]
    refreshes = [e for e in log if e.get("grant_type") == "refresh_token"]
    print(f"{backend.kind}: {len(refreshes)} refreshes in {run_s:g} s; tokens seen: {[len(t) for t in seen]}")
    errors = [e for e in log if not e.get("ok")]
    assert errors == [], errors  # no invalid_grant: no rotated refresh token was presented twice
    assert [e["grant_type"] for e in log if e.get("grant_type") == "authorization_code"] == ["authorization_code"]
    # One refresh per lifetime at most (4 s tokens refreshed 2 s early: one every >= 2 s), and some did happen.
    assert 3 <= len(refreshes) <= run_s / (TTL_S - 2) + 2, refreshes
    # Both processes held the very same tokens, in the same order (each refresh by one of them, used by both): each
    # token lives 2 s or more and both look every 0.1 s, so each saw all the other's but perhaps the first (due as
    # they began) and the last (refreshed as they ended).
    tokens_a, tokens_b = seen
    common = set(tokens_a) & set(tokens_b)
    assert len(common) >= len(refreshes) - 1, (len(tokens_a), len(tokens_b), len(refreshes))
    for mine, theirs in ((tokens_a, tokens_b), (tokens_b, tokens_a)):
        assert mine[1:-1] == [t for t in theirs if t in mine[1:-1]], "the two processes diverged"
    # Both end on the same token (or one of them refreshed as the other stopped looking), the one stored then.
    assert tokens_a[-1] == tokens_b[-1] or tokens_a[-1] in tokens_b[-2:] or tokens_b[-1] in tokens_a[-2:]
    assert record["access_token"] in (tokens_a[-1], tokens_b[-1])
