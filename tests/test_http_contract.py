"""Contract with the HTTP libraries our connection layer (activities/wire/http11.py) stands on: httpx2 2.16.2 and
h11 0.16. When an upgrade changes any of it, these fail with what to do."""

from __future__ import annotations

import asyncio
from importlib.metadata import version

import httpx2
import pytest

from mcp_temporal_tasks.activities.wire.http11 import H11Transport

pytestmark = pytest.mark.fast


def test_the_pinned_versions() -> None:
    assert version("httpx2") == "2.16.2" and version("httpcore2") == "2.16.2", (
        "httpx2/httpcore2 moved: re-run tests/test_http_contract.py and tests/test_wire_corpus.py, then the pins"
    )
    assert version("h11").startswith("0.16."), "h11 moved: re-check activities/wire/http11.py against its events"


def test_httpx_decides_the_proxy_and_we_ask_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """``Client._transport_for_url`` (private) is where httpx2 applies HTTP(S)_PROXY/ALL_PROXY/NO_PROXY; our layer
    serves an origin only where it returns the client's own transport."""
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.internal:3128")
    monkeypatch.setenv("NO_PROXY", ".example.com")
    probe = httpx2.Client()
    try:
        assert probe._transport_for_url(httpx2.URL("https://example.com/mcp")) is not probe._transport
        assert probe._transport_for_url(httpx2.URL("https://api.example.com/mcp")) is probe._transport
    finally:
        probe.close()


async def _stale_reply_server() -> tuple[asyncio.Server, str]:
    """Answers the first request of a connection with a good reply *and* a stray 404 in the same write."""
    good = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"
    stale = b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n"

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        first = True
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    (int(h.split(b":")[1]) for h in head.split(b"\r\n") if h.lower().startswith(b"content-length:")), 0
                )
                await reader.readexactly(length)
                writer.write(good + stale if first else good)
                first = False
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/"


async def test_httpcore2_reads_a_stale_reply_as_the_next_answer_and_our_layer_does_not() -> None:
    """The gap our layer closes: httpcore2 reuses a connection whose last reply had bytes after it in the same read.
    If the first assertion fails, httpcore2 fixed it: our layer's reason to exist is then CPU alone (say so in
    http11.py's docstring)."""
    server, url = await _stale_reply_server()
    try:
        async with httpx2.AsyncClient() as theirs:
            statuses = [(await theirs.post(url, content=b"")).status_code for _ in range(2)]
        assert statuses == [200, 404], f"httpcore2 no longer reads the stray 404 as an answer: {statuses}"
        ours = H11Transport()
        async with httpx2.AsyncClient(transport=ours) as client:
            statuses = [(await client.post(url, content=b"")).status_code for _ in range(2)]
        assert statuses == [200, 200] and ours.connections == 2, (statuses, ours.connections)
    finally:
        server.close()
