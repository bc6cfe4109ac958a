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
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
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
