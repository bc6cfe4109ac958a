"""A hostile (or broken) MCP server cannot get the OAuth client's secret, and a broken discovery ends in one clear
error, bounded in time, before any ``tools/call``.

The MCP server here is a small HTTP server of the test's own that answers every MCP request ``401`` with a challenge
naming its protected resource metadata, serves whatever metadata the case gives it, and logs every request it
receives (method, path, headers, body). The real authorization server is panva's ``oidc-provider``
(``tests/peers/ts/oauth.mjs``). The assertion that matters is on the hostile server's log: no request carries the
secret, in any form (the secret itself, HTTP Basic credentials, form-encoded).
"""

from __future__ import annotations

import base64
import json
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from mcp_temporal_tasks.activities.wire import Endpoint, WireSession, auth
from mcp_temporal_tasks.protocol.tasks import OAuthClient
from mcp_temporal_tasks.protocol.wire_errors import AuthorizationRequired
from tests.peers.harness import Peer, oauth_server

SECRET = f"hs-{uuid.uuid4().hex}"
SECRET_VAR = "MCP_TEST_HOSTILE_SECRET"
CLIENT_ID = "svc-hostile"
#: Each case ends within the flow's bound plus a connect's own overhead (loaded machine).
BOUND_S = auth.AUTH_FLOW_TIMEOUT_S + 10
pytestmark = pytest.mark.xdist_group("test_auth_hostile")


class FakeHttp:
    """An HTTP server answering from ``routes`` (path → status, headers, body) and logging every request."""

    def __init__(self) -> None:
        #: path → (status, headers, body), or a function of the logged request returning one.
        self.routes: dict[str, Any] = {}
        self.requests: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                request = {
                    "method": self.command,
                    "path": self.path,
                    "headers": dict(self.headers),
                    "body": body.decode("utf-8", "replace"),
                }
                outer.requests.append(request)
                route = outer.routes.get(self.path.split("?")[0], (404, {}, b"not found"))
                status, headers, content = route(request) if callable(route) else route
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("content-length", str(len(content)))
                self.end_headers()
                self.wfile.write(content)

            do_GET = do_POST = _answer  # noqa: N815

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        # A short poll: shutdown() waits one poll interval, paid by every test (0.5 s by default).
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def json(self, path: str, value: Any, status: int = 200) -> None:
        self.routes[path] = (status, {"content-type": "application/json"}, json.dumps(value).encode())

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def secret_forms() -> list[str]:
    basic = base64.b64encode(f"{CLIENT_ID}:{SECRET}".encode()).decode()
    return [SECRET, basic, basic.rstrip("=")]


def carrying_the_secret(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in requests if any(form in json.dumps(r) for form in secret_forms())]


@pytest.fixture(scope="module", autouse=True)
def credentials() -> Iterator[None]:
    mp = pytest.MonkeyPatch()
    mp.setenv(SECRET_VAR, SECRET)
    yield
    mp.undo()


@pytest.fixture(scope="module")
def real_as(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Peer]:
    clients = [{"client_id": CLIENT_ID, "client_secret": SECRET, "token_endpoint_auth_method": "client_secret_basic"}]
    with oauth_server(tmp_path_factory.mktemp("oauth-hostile"), clients=clients, name="oauth-hostile") as server:
        yield server


@pytest.fixture
def hostile() -> Iterator[FakeHttp]:
    server = FakeHttp()
    yield server
    server.close()


def challenge(server: FakeHttp) -> None:
    server.routes["/mcp"] = (
        401,
        {"www-authenticate": f'Bearer resource_metadata="{server.url}/prm"', "content-type": "application/json"},
        b'{"error":"invalid_token"}',
    )


def as_metadata(issuer: str, token_endpoint: str) -> dict[str, Any]:
    return {
        "issuer": issuer,
        "authorization_endpoint": f"{issuer}/authorize",
        "token_endpoint": token_endpoint,
        "token_endpoint_auth_methods_supported": ["client_secret_post"],
    }


async def refused(server: FakeHttp, issuer: str | None) -> tuple[str, float]:
    spec = OAuthClient(type="client_credentials", client_id=CLIENT_ID, client_secret_env=SECRET_VAR, issuer=issuer)
    started = time.monotonic()
    with pytest.raises(Exception) as exc:  # noqa: PT011 - the message is what is checked
        client = await WireSession.connect(Endpoint(url=f"{server.url}/mcp", auth=spec))
        await client.aclose(terminate=True)
    took = time.monotonic() - started
    assert took < BOUND_S, took
    message = str(exc.value)
    assert SECRET not in message and "Traceback" not in message
    assert not any("tools/call" in r["body"] for r in server.requests)
    return message, took


def _names_its_own_as(h: FakeHttp, real: str) -> str | None:
    h.json("/prm", {"resource": f"{h.url}/mcp", "authorization_servers": [f"{h.url}/as"]})
    h.json("/.well-known/oauth-authorization-server/as", as_metadata(f"{h.url}/as", f"{h.url}/token"))
    return real  # the operator pinned the real authorization server


def _claims_the_real_issuer(h: FakeHttp, real: str) -> str | None:
    h.json("/prm", {"resource": f"{h.url}/mcp", "authorization_servers": [f"{h.url}/as"]})
    h.json("/.well-known/oauth-authorization-server/as", as_metadata(real, f"{h.url}/token"))
    return None


def _names_none(h: FakeHttp, real: str) -> str | None:
    return None  # no metadata anywhere, and a server that negotiated nothing (2025-03-26 defaults do not apply)


def _does_not_parse(h: FakeHttp, real: str) -> str | None:
    h.routes["/prm"] = (200, {"content-type": "application/json"}, b"{ this is not json")
    return None


def _as_down(h: FakeHttp, real: str) -> str | None:
    h.json("/prm", {"resource": f"{h.url}/mcp", "authorization_servers": ["http://127.0.0.1:9/as"]})
    return None


def _as_garbage(h: FakeHttp, real: str) -> str | None:
    h.json("/prm", {"resource": f"{h.url}/mcp", "authorization_servers": [f"{h.url}/as"]})
    h.routes["/.well-known/oauth-authorization-server/as"] = (200, {"content-type": "text/html"}, b"<html>hi</html>")
    return None


def _as_error(h: FakeHttp, real: str) -> str | None:
    h.json("/prm", {"resource": f"{h.url}/mcp", "authorization_servers": [f"{h.url}/as"]})
    h.json("/.well-known/oauth-authorization-server/as", {"error": "boom"}, status=500)
    return None


def _not_https(h: FakeHttp, real: str) -> str | None:
    h.json("/prm", {"resource": f"{h.url}/mcp", "authorization_servers": ["http://auth.example.com"]})
    return None


def _other_resource(h: FakeHttp, real: str) -> str | None:
    h.json("/prm", {"resource": "https://evil.example.com/mcp", "authorization_servers": [real]})
    return None


@pytest.mark.parametrize(
    "setup, message",
    [
        (_names_its_own_as, "not the configured issuer"),
        (_claims_the_real_issuer, "(RFC 8414 §3.3)"),
        (_names_none, "publishes no protected resource metadata"),
        (_does_not_parse, "protected resource metadata at http://127.0.0.1"),
        (_as_down, "cannot reach"),
        (_as_garbage, "authorization server metadata at"),
        (_as_error, "answered HTTP 500"),
        (_not_https, "is not https"),
        (_other_resource, "is for resource https://evil.example.com/mcp"),
    ],
)
async def test_hostile_or_broken_discovery_sends_the_secret_nowhere(
    hostile: FakeHttp, real_as: Peer, setup: Any, message: str
) -> None:
    challenge(hostile)
    issuer = setup(hostile, real_as.url or "")
    issued_before = len(real_as.log(client=CLIENT_ID))
    text, _ = await refused(hostile, issuer)
    assert message in text and "no access token for" in text, text
    assert hostile.requests and hostile.requests[0]["path"] == "/mcp"  # the server spoke first
    assert carrying_the_secret(hostile.requests) == []
    assert len(real_as.log(client=CLIENT_ID)) == issued_before  # no token request anywhere


async def test_garbage_token_response_is_one_clear_error(hostile: FakeHttp, tmp_path: Path) -> None:
    """An authorization server (named by the resource, no issuer pinned) that answers the token request with
    garbage: one error; the MCP server never sees the secret."""
    garbage = FakeHttp()
    try:
        garbage.json("/.well-known/oauth-authorization-server", as_metadata(garbage.url, f"{garbage.url}/token"))
        garbage.routes["/token"] = (200, {"content-type": "application/json"}, b'{"token": 42}')
        challenge(hostile)
        hostile.json("/prm", {"resource": f"{hostile.url}/mcp", "authorization_servers": [garbage.url]})
        text, _ = await refused(hostile, None)
        assert "not a bearer token response" in text, text
        # client_secret_post, as the metadata says: the secret went to the named token endpoint only.
        assert [r["path"] for r in carrying_the_secret(garbage.requests)] == ["/token"]
        assert carrying_the_secret(hostile.requests) == []
    finally:
        garbage.close()


async def test_the_real_authorization_server_alone_gets_the_secret(hostile: FakeHttp, real_as: Peer) -> None:
    """The positive control: metadata naming the pinned, real authorization server gets a token from it, with the
    resource (RFC 8707); the hostile server receives that token, never the secret; its second 401 is the error."""
    challenge(hostile)
    hostile.json(
        "/prm", {"resource": f"{hostile.url}/mcp", "authorization_servers": [real_as.url], "scopes_supported": []}
    )
    issued_before = len(real_as.log(client=CLIENT_ID))
    text, _ = await refused(hostile, real_as.url)
    assert "401" in text, text
    assert len(real_as.log(client=CLIENT_ID)) == issued_before + 1
    assert carrying_the_secret(hostile.requests) == []
    bearer = [
        r
        for r in hostile.requests
        if r["headers"].get("authorization", r["headers"].get("Authorization", "")).startswith("Bearer ")
    ]
    assert len(bearer) == 1 and bearer[0]["path"] == "/mcp"


async def test_insufficient_scope_gets_one_step_up_then_a_clear_error(hostile: FakeHttp) -> None:
    """A 401 naming scope ``a``: a token for ``a``. A 403 ``insufficient_scope`` naming ``a b``: one step-up (a
    token for ``a b``) and the request once more. The same 403 again: the error, no third token, no loop."""
    as_ = FakeHttp()
    try:
        as_.json("/.well-known/oauth-authorization-server", as_metadata(as_.url, f"{as_.url}/token"))
        as_.json("/token", {"access_token": f"tok-{uuid.uuid4().hex}", "token_type": "Bearer", "expires_in": 60})
        prm = f"{hostile.url}/prm"

        def mcp(request: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
            if not any(k.lower() == "authorization" for k in request["headers"]):
                return 401, {"www-authenticate": f'Bearer scope="a", resource_metadata="{prm}"'}, b""
            return (
                403,
                {"www-authenticate": f'Bearer error="insufficient_scope", scope="a b", resource_metadata="{prm}"'},
                b"",
            )

        hostile.routes["/mcp"] = mcp
        hostile.json("/prm", {"resource": f"{hostile.url}/mcp", "authorization_servers": [as_.url]})
        text, _ = await refused(hostile, None)
        assert "still refuses for insufficient scope after one step-up to scope 'a b'" in text, text
        scopes = [
            dict(p.split("=", 1) for p in r["body"].split("&")).get("scope")
            for r in as_.requests
            if r["path"] == "/token"
        ]
        assert scopes == ["a", "a+b"], scopes
        resource = f"resource={quote(hostile.url + '/mcp', safe='')}"
        assert all(resource in r["body"] for r in as_.requests if r["path"] == "/token")  # RFC 8707, every time
        assert [r["path"] for r in hostile.requests].count("/mcp") == 3  # bare, with the token, after the step-up
        assert carrying_the_secret(hostile.requests) == []
    finally:
        as_.close()


async def test_2025_03_26_default_endpoints_only_for_a_server_that_negotiated_it(hostile: FakeHttp) -> None:
    """No metadata anywhere: the origin's ``/token`` (2025-03-26's default) is used for a server whose session
    negotiated 2025-03-26, and for no other: the same server with any later protocol gets no request at all."""
    hostile.json("/token", {"access_token": f"tok-{uuid.uuid4().hex}", "token_type": "Bearer", "expires_in": 60})
    spec = OAuthClient(type="client_credentials", client_id=CLIENT_ID, client_secret_env=SECRET_VAR)
    for protocol in (None, "2025-06-18", "2025-11-25"):
        source = auth.TokenSource(f"{hostile.url}/mcp", spec)
        with pytest.raises(AuthorizationRequired, match="publishes no protected resource metadata"):
            await source.after_401(None, auth.Challenge(401), protocol)
    assert not [r for r in hostile.requests if r["path"] == "/token"]
    source = auth.TokenSource(f"{hostile.url}/mcp", spec)
    assert await source.after_401(None, auth.Challenge(401), "2025-03-26")
    assert [r["method"] for r in hostile.requests if r["path"] == "/token"] == ["POST"]


# --- workload identity federation and enterprise-managed authorization (SEP-990): hostile platform tokens and IdPs ---
# One fake HTTP server plays the MCP server (401 with its challenge), its protected resource metadata, the
# authorization server (metadata, /token) and the subject's IdP (/idp/token); each case checks the one typed error,
# what reached /token, and that no tools/call was sent.

JWT_KEY = "a-signing-key-of-this-test-module-alone"
PERSON = "hostile-person"


def signed(claims: dict[str, Any]) -> str:
    import jwt

    return jwt.encode({"iat": int(time.time()), **claims}, JWT_KEY, algorithm="HS256")


def federated(server: FakeHttp) -> None:
    """``server`` as the MCP server and its authorization server, which grants nothing (400 ``invalid_grant``)."""
    challenge(server)
    server.json("/prm", {"resource": f"{server.url}/mcp", "authorization_servers": [server.url]})
    server.json(
        "/.well-known/oauth-authorization-server",
        {**as_metadata(server.url, f"{server.url}/token"), "token_endpoint_auth_methods_supported": ["none"]},
    )
    server.json("/token", {"error": "invalid_grant", "error_description": "not trusted"}, status=400)


async def refused_with(server: FakeHttp, spec: OAuthClient) -> str:
    """The one error opening a session with ``spec`` ends in: typed, bounded, no tools/call sent."""
    started = time.monotonic()
    with pytest.raises(AuthorizationRequired) as exc:
        client = await WireSession.connect(Endpoint(url=f"{server.url}/mcp", auth=spec))
        await client.aclose(terminate=True)
    assert time.monotonic() - started < BOUND_S
    assert not any("tools/call" in r["body"] for r in server.requests)
    assert "Traceback" not in str(exc.value)
    return str(exc.value)


def token_requests(server: FakeHttp, path: str = "/token") -> list[dict[str, Any]]:
    return [r for r in server.requests if r["path"] == path and r["method"] == "POST"]


def _missing(path: Path) -> str:
    return "cannot be read"


def _empty(path: Path) -> str:
    path.write_text("\n")
    return "is empty"


def _huge(path: Path) -> str:
    path.write_bytes(b"e" * (2 * 1024 * 1024))
    return "larger than 16384 bytes"


def _not_a_jwt(path: Path) -> str:
    path.write_text("-----BEGIN PRIVATE KEY-----\nnot for the authorization server\n")  # a wrong file named
    return "is not a JWT"


def _expired(path: Path) -> str:
    path.write_text(signed({"iss": "https://kubernetes.default.svc", "exp": int(time.time()) - 120}))
    return "has expired"


@pytest.mark.fast
@pytest.mark.parametrize("setup", [_missing, _empty, _huge, _not_a_jwt, _expired])
async def test_a_bad_platform_token_file_is_one_error_and_is_sent_nowhere(
    hostile: FakeHttp, tmp_path: Path, setup: Any
) -> None:
    federated(hostile)
    token_file = tmp_path / "token"
    expected = setup(token_file)
    spec = OAuthClient(type="workload_identity", assertion_file=str(token_file))
    text = await refused_with(hostile, spec)
    assert expected in text and f"the platform token file {str(token_file)!r}" in text, text
    assert token_requests(hostile) == []  # nothing sent in place of the token


@pytest.mark.fast
async def test_a_refused_platform_token_is_one_error_never_retried_nor_another_grant(
    hostile: FakeHttp, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    federated(hostile)
    token = signed({"iss": "https://ci.example", "sub": "repo:x", "aud": hostile.url, "exp": int(time.time()) + 600})
    monkeypatch.setenv("MCP_TEST_PLATFORM_TOKEN", token)
    text = await refused_with(hostile, OAuthClient(type="workload_identity", assertion_env="MCP_TEST_PLATFORM_TOKEN"))
    assert "invalid_grant (not trusted)" in text and token not in text, text
    sent = token_requests(hostile)
    assert len(sent) == 1, sent  # once: no retry, no fallback to another grant
    assert "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer" in sent[0]["body"]
    assert f"assertion={token}" in sent[0]["body"]


@pytest.mark.fast
async def test_the_platform_token_file_is_read_again_at_each_token_request(tmp_path: Path) -> None:
    """The platform rotates the file: each token request presents what it holds then."""
    from mcp_temporal_tasks.activities.wire.auth.discovery import Discovered
    from mcp_temporal_tasks.activities.wire.auth.grants import grant_for

    token_file = tmp_path / "token"
    grant = grant_for(OAuthClient(type="workload_identity", client_id="wl", assertion_file=str(token_file)))
    found = Discovered("https://as.example", "https://as.example/token", "https://mcp.example", None, "none", None)
    sent = []
    for n in range(2):
        token_file.write_text(signed({"sub": f"pod-{n}", "exp": int(time.time()) + 600}))
        request = await grant.token_request(found)
        sent.append(request.fields["assertion"])
        assert request.fields["client_id"] == "wl" and request.basic is None
    assert sent[0] != sent[1] and sent[1] == token_file.read_text()


@pytest.fixture
def token_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    from cryptography.fernet import Fernet

    monkeypatch.setenv("MCP_TASKS_TOKEN_KEY", Fernet.generate_key().decode())
    monkeypatch.setenv("MCP_TASKS_TOKEN_DIR", str(tmp_path / "store"))
    return tmp_path / "store"


def enterprise(server: FakeHttp, subject: str | None = PERSON) -> OAuthClient:
    return OAuthClient(
        type="enterprise_managed",
        client_id=CLIENT_ID,
        client_secret_env=SECRET_VAR,
        idp_issuer=f"{server.url}/idp",
        idp_token_endpoint=f"{server.url}/idp/token",
        idp_client_id="idp-client",
        subject=subject,
    )


def id_token(server: FakeHttp, **claims: Any) -> str:
    return signed({"iss": f"{server.url}/idp", "sub": "person@example.com", "exp": int(time.time()) + 600, **claims})


def jag(server: FakeHttp) -> bytes:
    grant = signed({"iss": f"{server.url}/idp", "aud": server.url, "exp": int(time.time()) + 300})
    return json.dumps({"access_token": grant, "issued_token_type": "urn:ietf:params:oauth:token-type:id-jag"}).encode()


def _idp_error(h: FakeHttp) -> str:
    h.json("/idp/token", {"error": "invalid_grant", "error_description": "ID token revoked"}, status=400)
    return "the identity provider at http://127.0.0.1"


def _idp_garbage(h: FakeHttp) -> str:
    h.routes["/idp/token"] = (200, {"content-type": "text/html"}, b"<html>sign in</html>")
    return "with something that is not one"


def _idp_not_a_jag(h: FakeHttp) -> str:
    h.json("/idp/token", {"access_token": "at", "issued_token_type": "urn:ietf:params:oauth:token-type:access_token"})
    return "not an ID-JAG"


def _jag_refused(h: FakeHttp) -> str:
    h.routes["/idp/token"] = (200, {"content-type": "application/json"}, jag(h))
    return "the authorization server at http://127.0.0.1"  # /token: invalid_grant


@pytest.mark.fast
@pytest.mark.parametrize("setup", [_idp_error, _idp_garbage, _idp_not_a_jag, _jag_refused])
async def test_an_idp_or_authorization_server_refusing_is_one_error(
    hostile: FakeHttp, token_store: Path, setup: Any
) -> None:
    from mcp_temporal_tasks.activities.wire.auth.enterprise_managed import hand_over_id_token

    federated(hostile)
    hostile.json("/.well-known/oauth-authorization-server", as_metadata(hostile.url, f"{hostile.url}/token"))
    expected = setup(hostile)
    person_token = id_token(hostile)
    hand_over_id_token(enterprise(hostile), PERSON, person_token)
    text = await refused_with(hostile, enterprise(hostile))
    assert expected in text and person_token not in text, text
    exchange = token_requests(hostile, "/idp/token")
    assert len(exchange) == 1 and f"subject_token={person_token}" in exchange[0]["body"]
    assert "audience=" + quote(hostile.url, safe="") in exchange[0]["body"]
    assert "resource=" + quote(f"{hostile.url}/mcp", safe="") in exchange[0]["body"]
    sent = token_requests(hostile)
    assert len(sent) == (1 if setup is _jag_refused else 0), sent  # the JWT-bearer grant only with an ID-JAG
    assert carrying_the_secret(exchange) == []  # the app's secret at the authorization server goes to /token only


@pytest.mark.fast
async def test_no_subject_or_no_handed_over_token_sends_nothing(hostile: FakeHttp, token_store: Path) -> None:
    """A task without a subject never uses a subject's ID token; a subject who handed none over gets none of
    another's, and the app's own client credentials are never a fallback."""
    from mcp_temporal_tasks.activities.wire.auth.enterprise_managed import hand_over_id_token

    federated(hostile)
    hostile.json("/.well-known/oauth-authorization-server", as_metadata(hostile.url, f"{hostile.url}/token"))
    hand_over_id_token(enterprise(hostile), PERSON, id_token(hostile))
    text = await refused_with(hostile, enterprise(hostile, subject=None))
    assert "a task with no subject" in text, text
    text = await refused_with(hostile, enterprise(hostile, subject="someone-else"))
    assert "'someone-else' has handed over no ID token" in text, text
    assert token_requests(hostile, "/idp/token") == [] and token_requests(hostile) == []


@pytest.mark.fast
@pytest.mark.parametrize(
    "make, expected",
    [
        (lambda h: "", "is empty"),
        (lambda h: "x" * 20000, "larger than 16384 bytes"),
        (lambda h: "not.a.jwt", "is not a JWT"),
        (lambda h: id_token(h, exp=int(time.time()) - 60), "has expired"),
        (lambda h: id_token(h, iss="https://evil.example"), "not by the configured idp_issuer"),
    ],
)
def test_a_bad_id_token_is_refused_at_hand_over(hostile: FakeHttp, token_store: Path, make: Any, expected: str) -> None:
    from mcp_temporal_tasks.activities.wire.auth.base import NoToken
    from mcp_temporal_tasks.activities.wire.auth.enterprise_managed import hand_over_id_token

    with pytest.raises(NoToken, match=expected):
        hand_over_id_token(enterprise(hostile), PERSON, make(hostile))
    assert not token_store.exists() or not any(token_store.glob("idp-id-token-*"))


@pytest.mark.fast
def test_an_enterprise_managed_grant_is_the_tasks_principals_only(hostile: FakeHttp) -> None:
    """The subject is the task's principal, whatever the configuration or the request's endpoint says; a task with
    no principal has none (and so no ID token to use)."""
    configured = Endpoint(url=f"{hostile.url}/mcp", auth=enterprise(hostile, subject="from-config"))
    assert auth.for_subject(configured, "alice").auth.subject == "alice"  # type: ignore[union-attr]
    assert auth.for_subject(configured, None).auth.subject is None  # type: ignore[union-attr]
    service = Endpoint(url=f"{hostile.url}/mcp", auth=OAuthClient(type="workload_identity", assertion_env="X"))
    assert auth.for_subject(service, "alice") == service  # the workload's own token, whoever the task is for


@pytest.mark.fast
@pytest.mark.parametrize(
    "auth_toml, message",
    [
        ('type = "workload_identity"', "servers.p.auth.assertion: the platform token, given by reference only"),
        ('type = "workload_identity"\nassertion = "eyJhbGciOi.literal.token"', "given by reference only"),
        (
            'type = "workload_identity"\nassertion = { env = "MCP_TEST_UNSET_VAR" }',
            "servers.p.auth.assertion: environment variable MCP_TEST_UNSET_VAR is not set",
        ),
        (
            'type = "workload_identity"\nassertion = { env = "HOME" }\nclient_secret = { env = "HOME" }',
            "takes assertion",
        ),
        (
            'type = "client_credentials"\nclient_id = "a"\nclient_secret = { env = "HOME" }\nidp_issuer = "x"',
            "idp_issuer",
        ),
        (
            'type = "enterprise_managed"\nclient_id = "a"\nidp_issuer = "https://i"\nidp_token_endpoint = "https://i/t"',
            "servers.p.auth.client_secret: missing",
        ),
        (
            'type = "enterprise_managed"\nclient_id = "a"\nclient_secret = { env = "HOME" }\nidp_issuer = "https://i"',
            "servers.p.auth.idp_token_endpoint: missing or not an http(s) URL",
        ),
    ],
)
def test_bad_federated_auth_config_names_the_key(tmp_path: Path, auth_toml: str, message: str) -> None:
    from mcp_temporal_tasks.worker.config import ConfigError, load_config

    path = tmp_path / "w.toml"
    path.write_text(f'[servers.p]\nurl = "http://127.0.0.1:9/mcp"\n[servers.p.auth]\n{auth_toml}\n')
    with pytest.raises(ConfigError) as exc:
        load_config(path, env={"HOME": "/root"})
    assert message in str(exc.value), str(exc.value)


@pytest.mark.fast
def test_federated_auth_config_keeps_references_only(tmp_path: Path) -> None:
    from mcp_temporal_tasks.worker.config import load_config

    path = tmp_path / "w.toml"
    path.write_text(
        '[servers.w]\nurl = "https://w.example/mcp"\n[servers.w.auth]\ntype = "workload_identity"\n'
        'assertion = { file = "/var/run/secrets/tokens/mcp" }\nissuer = "https://as.example"\n'
        '[servers.e]\nurl = "https://e.example/mcp"\n[servers.e.auth]\ntype = "enterprise_managed"\nclient_id = "c"\n'
        'client_secret = { env = "HOME" }\nidp_issuer = "https://idp.example"\n'
        'idp_token_endpoint = "https://idp.example/token"\nidp_client_id = "i"\nidp_client_secret = { env = "HOME" }\n'
    )
    servers = load_config(path, env={"HOME": "/root"}).servers
    wif, em = servers["w"].endpoint().auth, servers["e"].endpoint().auth
    assert wif is not None and wif.assertion_file == "/var/run/secrets/tokens/mcp" and wif.assertion_env is None
    assert em is not None and (em.client_secret_env, em.idp_client_secret_env) == ("HOME", "HOME")
    assert "/root" not in json.dumps([wif.model_dump(), em.model_dump()])  # names, never values
