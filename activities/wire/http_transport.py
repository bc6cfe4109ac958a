"""Streamable HTTP to an MCP server, with failures mapped to :mod:`.errors` types.

Why not the SDK's transport: ``mcp.client.streamable_http`` folds every HTTP status ≥ 400
into a generic ``-32603`` (the ``Retry-After`` of a 429 and the 401/403 distinction are lost), and it
has no way to adopt a persisted ``Mcp-Session-Id`` without a fresh ``initialize``, which on stateful
servers orphans every task of the old session.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
from collections.abc import AsyncIterator
from typing import Any

import httpx2

from mcp_temporal_tasks.activities.wire import redact
from mcp_temporal_tasks.activities.wire.auth import BearerAuth
from mcp_temporal_tasks.activities.wire.backpressure import HOLDS, HeldBack
from mcp_temporal_tasks.activities.wire.http11 import FRESH_CONNECTION, H11Transport, RequestNotSent, StaleConnection
from mcp_temporal_tasks.activities.wire.jsonrpc import (
    DEFAULT_TIMEOUT_S,
    NotificationHandler,
    ServerRequestHandler,
    json_result,
    request_body,
    result_of,
    scrubbed,
    server_reply,
    sse_message,
)
from mcp_temporal_tasks.activities.wire.redact import register as register_secrets
from mcp_temporal_tasks.activities.wire.resume import MAX_IDLE_RESUMPTIONS, ResumePoint
from mcp_temporal_tasks.activities.wire.status import answered, http_error
from mcp_temporal_tasks.protocol.limits import MAX_REPLY_BYTES
from mcp_temporal_tasks.protocol.tasks import redact_url
from mcp_temporal_tasks.protocol.wire_errors import (
    McpWireError,
    PayloadUnusable,
    ProtocolViolation,
    RequestRefused,
    SessionGone,
    StreamLost,
    TransportError,
)

CONNECT_TIMEOUT_S = 10.0
#: How long a plain call waits for the session's standalone GET stream to open before it is sent anyway.
SIDE_STREAM_READY_S = 2.0
log = logging.getLogger(__name__)
#: Reads bounded as a whole (connect, write and every wait for bytes together), not only per wait for bytes: the
#: requests a waiting worker sends by the thousand, which a server trickling bytes must not hold.
WHOLE_BOUNDED_READS = frozenset({"tasks/get"})


#: ``MCP_TASKS_H11_CONNECTIONS=0``: httpx's own transport (httpcore2's pool) for every server instead of our HTTP/1.1
#: connection layer (:mod:`.http11`): for comparison, or a server this layer misreads (please report it). Reads stay
#: bounded as a whole either way.
SWITCH = "MCP_TASKS_H11_CONNECTIONS"
#: Its name before the layer served every request rather than reads only; still read when ``SWITCH`` is unset.
#: Deprecated: to be removed in the release after next.
OLD_SWITCH = "MCP_TASKS_KEEPALIVE_READS"


def _switched_off() -> bool:
    value = os.environ.get(SWITCH, os.environ.get(OLD_SWITCH, "1"))
    return value.strip().lower() in ("0", "false", "no", "off")


@functools.lru_cache(maxsize=256)
def _httpx_goes_direct(origin: str, proxy_env: tuple[tuple[str, str], ...]) -> bool:
    """Whether httpx, as configured by this environment (``HTTP(S)_PROXY``, ``ALL_PROXY``, ``NO_PROXY``), connects
    to ``origin`` itself rather than through a proxy: httpx's own decision (``_transport_for_url``; pinned httpx2,
    held by tests/test_sdk_contract.py), asked once per origin and proxy environment. Only then does our connection
    layer serve it; proxied origins keep httpx's own transport, so proxy rules are httpx's exactly."""
    del proxy_env  # part of the cache key only
    probe = httpx2.Client()
    try:
        return probe._transport_for_url(httpx2.URL(origin)) is probe._transport
    finally:
        probe.close()


def _proxy_environment() -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in os.environ.items() if k.lower().endswith("_proxy")))


class HttpTransport:
    """Streamable HTTP, one POST per request; replies as JSON or as an SSE stream.

    Requests go through httpx's client (auth flows, cookies, default headers, no redirects followed), on our own
    HTTP/1.1 connection layer (:class:`~.http11.H11Transport`, framed by h11) wherever httpx would connect directly,
    and on httpx's own transport through a proxy from the environment. Either way one reading of a reply
    (:meth:`_read_reply`) decides what it means.
    """

    def __init__(
        self,
        url: str,
        *,
        headers: dict[str, str] | None = None,
        session_id: str | None = None,
        protocol_version: str | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        auth: BearerAuth | None = None,
        hold_key: str | None = None,
    ) -> None:
        self.url = url
        #: This server and credential's key in the process's holds (``backpressure``): every request asks it first.
        self.hold_key = hold_key or url
        self._server = redact_url(url)
        self.session_id = session_id
        self.protocol_version = protocol_version
        self._headers = dict(headers or {})
        #: Header values are resolved credentials (references only ever name secrets): never in an error text.
        self._secrets = register_secrets(self._headers.values())
        self._auth = auth
        parts = httpx2.URL(url)
        direct = (
            not _switched_off()
            and parts.scheme in ("http", "https")
            and _httpx_goes_direct(f"{parts.scheme}://{parts.netloc.decode('ascii', 'replace')}", _proxy_environment())
        )
        #: Our connection layer, where httpx goes direct (None: httpx's own transport, proxies included).
        self.connections: H11Transport | None = H11Transport() if direct else None
        self._client = httpx2.AsyncClient(
            timeout=httpx2.Timeout(timeout_s, connect=CONNECT_TIMEOUT_S), auth=auth, transport=self.connections
        )
        self._timeout_s = timeout_s
        self.closed = False

    @property
    def secrets(self) -> frozenset[str]:
        # OAuth tokens arrive after this transport was made (and change): the process registry has them all.
        return self._secrets | redact.registered() if self._auth is not None else self._secrets

    def _base_headers(self, extra: dict[str, str] | None) -> dict[str, str]:
        headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
        headers.update(self._headers)
        # Lowercase on purpose: a mixed-case duplicate reaches TS servers twice and gets HTTP 400.
        if self.protocol_version:
            headers["mcp-protocol-version"] = self.protocol_version
        if self.session_id:
            headers["mcp-session-id"] = self.session_id
        headers.update(extra or {})
        return headers

    @scrubbed
    async def request(
        self,
        method: str,
        params: dict[str, Any] | None,
        *,
        headers: dict[str, str] | None = None,
        on_server_request: ServerRequestHandler | None = None,
        timeout_s: float | None = None,
        on_notification: NotificationHandler | None = None,
    ) -> dict[str, Any]:
        try:
            if method not in WHOLE_BOUNDED_READS:
                return await self._exchange(method, params, headers, on_server_request, on_notification, timeout_s)
            # A read, bounded as a whole: a server trickling bytes cannot hold it past its timeout.
            bound = timeout_s or self._timeout_s
            try:
                async with asyncio.timeout(bound):
                    return await self._exchange(method, params, headers, on_server_request, on_notification, timeout_s)
            except TimeoutError:
                raise TransportError(f"{method}: no reply within {bound:g}s", sent=True) from None
        except McpWireError as exc:
            self._saw(exc)
            raise

    def _held(self, what: str) -> None:
        """Raise :class:`~.backpressure.HeldBack` while this server asks us to wait: nothing is sent meanwhile."""
        HOLDS.check(self.hold_key, what, self._server)

    def _saw(self, exc: McpWireError) -> None:
        """A reply that asks this process to wait (``backpressure.hold_of``) holds every request to this server."""
        if not isinstance(exc, HeldBack):
            HOLDS.saw(self.hold_key, exc)

    def _saw_status(self, what: str, response: httpx2.Response) -> None:
        if response.status_code in (429, 503):
            self._saw(
                http_error(what, response.status_code, "", response.headers.get, "", url=self.url, session_id=None)
            )

    async def _exchange(
        self,
        method: str,
        params: dict[str, Any] | None,
        headers: dict[str, str] | None,
        on_server_request: ServerRequestHandler | None,
        on_notification: NotificationHandler | None,
        timeout_s: float | None,
        *,
        fresh: bool = False,
    ) -> dict[str, Any]:
        """One request and the reading of its reply; every failure mapped to its wire error.

        A pooled connection that the server closed just as the request was written into it (:class:`StaleConnection`:
        closed before any byte of a reply) is not a fault: the request goes once more on a new connection. Only
        requests that may be sent twice ever take a pooled connection: ``tools/call`` always gets a new one
        (:data:`~.http11.FRESH_CONNECTION`)."""
        try:
            return await self._exchange_once(
                method, params, headers, on_server_request, on_notification, timeout_s, fresh=fresh
            )
        except TransportError as exc:
            if fresh or not isinstance(exc.__cause__, StaleConnection):
                raise
        return await self._exchange_once(
            method, params, headers, on_server_request, on_notification, timeout_s, fresh=True
        )

    async def _exchange_once(
        self,
        method: str,
        params: dict[str, Any] | None,
        headers: dict[str, str] | None,
        on_server_request: ServerRequestHandler | None,
        on_notification: NotificationHandler | None,
        timeout_s: float | None,
        *,
        fresh: bool,
    ) -> dict[str, Any]:
        self._held(method)
        msg_id, body = request_body(method, params)
        try:
            req = self._client.build_request(
                "POST",
                self.url,
                json=body,
                headers=self._base_headers(headers),
                timeout=httpx2.Timeout(timeout_s, connect=CONNECT_TIMEOUT_S)
                if timeout_s
                else httpx2.USE_CLIENT_DEFAULT,
                extensions={FRESH_CONNECTION: True} if fresh or method == "tools/call" else None,
            )
        except (UnicodeEncodeError, ValueError) as exc:  # a header value httpx cannot encode: nothing was sent
            raise RequestRefused(f"{method}: the request cannot be sent: {exc}") from exc
        try:
            response = await self._client.send(req, stream=True)
        except RequestNotSent as exc:
            raise RequestRefused(f"{method}: {exc}") from exc
        except (httpx2.ConnectError, httpx2.ConnectTimeout) as exc:
            raise TransportError(f"{method}: cannot connect to {self.url}: {exc}", sent=False) from exc
        except httpx2.HTTPError as exc:
            raise TransportError(f"{method}: {type(exc).__name__}: {exc}", sent=True) from exc
        try:
            return await self._read_reply(response, method, msg_id, on_server_request, on_notification, timeout_s)
        except httpx2.SSEError as exc:
            if "exceeded" in str(exc):
                raise PayloadUnusable(f"{method}: a reply event exceeds {MAX_REPLY_BYTES} bytes", raw=str(exc)) from exc
            raise TransportError(f"{method}: reply interrupted: {exc}", sent=True) from exc
        except httpx2.HTTPError as exc:
            raise TransportError(f"{method}: reply interrupted: {type(exc).__name__}: {exc}", sent=True) from exc
        finally:
            await response.aclose()

    async def _read_reply(
        self,
        response: httpx2.Response,
        method: str,
        msg_id: str,
        on_server_request: ServerRequestHandler | None,
        on_notification: NotificationHandler | None = None,
        timeout_s: float | None = None,
    ) -> dict[str, Any]:
        status = response.status_code
        ctype = response.headers.get("content-type", "").lower()
        if method == "initialize" and response.headers.get("mcp-session-id"):
            self.session_id = response.headers["mcp-session-id"]
        if status >= 400:
            raw = (await _read_bounded(response, method, limit=64 * 1024, truncate=True)).decode("utf-8", "replace")
            error = http_error(
                method, status, ctype, response.headers.get, raw, url=self.url, session_id=self.session_id
            )
            # What answered, for the handshake to tell "not an MCP endpoint" from an MCP server's refusal or fault.
            error.answered = answered(status, ctype, response.headers.get, raw)  # type: ignore[attr-defined]
            raise error
        if status == 202:
            raise ProtocolViolation(f"{method}: server answered a request with 202 Accepted", raw="")
        if ctype.startswith("application/json"):
            return json_result(await _read_bounded(response, method), method, msg_id)
        if ctype.startswith("text/event-stream"):
            return await self._read_sse(response, method, msg_id, on_server_request, on_notification, timeout_s)
        raw_text = (await _read_bounded(response, method, limit=2048, truncate=True)).decode("utf-8", "replace")
        violation = ProtocolViolation(f"{method}: unexpected content-type {ctype!r}", raw=raw_text)
        violation.answered = answered(status, ctype, response.headers.get, raw_text)  # type: ignore[attr-defined]
        raise violation

    async def _read_sse(
        self,
        response: httpx2.Response,
        method: str,
        msg_id: str,
        on_server_request: ServerRequestHandler | None,
        on_notification: NotificationHandler | None = None,
        timeout_s: float | None = None,
    ) -> dict[str, Any]:
        """The reply on an SSE stream; a stream that ends (gracefully or dropped) before it is resumed with ``GET`` and
        ``Last-Event-ID`` after the server's ``retry``, within the bounds of :mod:`.resume` (the request itself is never
        sent again); a resumption that cannot bring the reply raises :class:`~protocol.wire_errors.StreamLost`."""
        point = ResumePoint()
        reply = await self._read_events(response, method, msg_id, on_server_request, on_notification, point)
        while reply is None:
            why = point.ended()
            if why is not None and not point.resumptions and point.header() is None:
                raise TransportError(f"{method}: SSE stream ended without a reply ({why})", sent=True)
            if why is not None:
                raise StreamLost(f"{method}: SSE stream ended without a reply and was not resumed: {why}")
            await asyncio.sleep(point.delay_s())
            reply = await self._resume(method, msg_id, on_server_request, on_notification, point, timeout_s)
        return reply

    async def _read_events(
        self,
        response: httpx2.Response,
        method: str,
        msg_id: str,
        on_server_request: ServerRequestHandler | None,
        on_notification: NotificationHandler | None,
        point: ResumePoint,
    ) -> dict[str, Any] | None:
        """Every event of one stream until the reply (returned); None when the stream ended or dropped first."""
        try:
            async for event in httpx2.EventSource(response, max_event_size=MAX_REPLY_BYTES):
                message = sse_message(event.data, method)
                point.saw(event.id, event.retry, message=message is not None)
                if message is None:
                    continue
                if "method" in message and "id" in message:
                    await self._answer_server_request(message, on_server_request)
                elif "method" in message:
                    # Progress of a long synchronous call is shown, never relied on; task status pushes are ignored.
                    if on_notification is not None:
                        on_notification(message)
                elif message.get("id") == msg_id:
                    return result_of(message, method=method)
        except (httpx2.ReadError, httpx2.RemoteProtocolError) as exc:
            # Dropped mid-stream: resumable like a graceful end (a silence, ReadTimeout, is not: it propagates);
            # without an event id to resume from, the drop is the fault it always was.
            if point.header() is None:
                raise
            point.last_failure = f"dropped: {type(exc).__name__}"
        return None

    async def _resume(
        self,
        method: str,
        msg_id: str,
        on_server_request: ServerRequestHandler | None,
        on_notification: NotificationHandler | None,
        point: ResumePoint,
        timeout_s: float | None,
    ) -> dict[str, Any] | None:
        """One resumption: ``GET`` with ``Last-Event-ID``. The reply, or None when this stream too ended first (or the
        GET failed in a way worth another try: a connect error, a 5xx, a 429). Final refusals raise StreamLost."""
        self._held(f"{method} (resuming its stream)")
        headers = {**self._base_headers({"last-event-id": point.header() or ""}), "accept": "text/event-stream"}
        headers.pop("content-type", None)
        try:
            request = self._client.build_request(
                "GET",
                self.url,
                headers=headers,
                timeout=httpx2.Timeout(timeout_s, connect=CONNECT_TIMEOUT_S)
                if timeout_s
                else httpx2.USE_CLIENT_DEFAULT,
            )
            response = await self._client.send(request, stream=True)
        except httpx2.HTTPError as exc:
            point.last_failure = f"GET failed: {type(exc).__name__}"
            return None
        try:
            status = response.status_code
            ctype = response.headers.get("content-type", "").lower()
            if status in (409, 429) or status >= 500:
                # Busy, or (409) the server still holds the old stream as connected: asked again after retry.
                point.last_failure = f"GET answered HTTP {status}"
                return None
            if status >= 300:
                raise StreamLost(
                    f"{method}: SSE stream ended without a reply; resuming it (GET with Last-Event-ID) "
                    f"was answered HTTP {status}: the server cannot resume it"
                )
            if not ctype.startswith("text/event-stream"):
                raise StreamLost(
                    f"{method}: SSE stream ended without a reply; resuming it (GET with Last-Event-ID) "
                    f"was answered {ctype[:64]!r}, not an event stream"
                )
            return await self._read_events(response, method, msg_id, on_server_request, on_notification, point)
        finally:
            await response.aclose()

    async def _answer_server_request(self, message: dict[str, Any], handler: ServerRequestHandler | None) -> None:
        await self._post_reply(await server_reply(message, handler), f"reply to {message.get('method')}")

    @scrubbed
    async def respond(self, request_id: Any, result: dict[str, Any]) -> None:
        """Answer a server request by id, outside the stream that carried it (a late answer after a restart)."""
        await self._post_reply({"jsonrpc": "2.0", "id": request_id, "result": result}, "late reply")

    async def _post_reply(self, reply: dict[str, Any], what: str) -> None:
        self._held(what)
        try:
            resp = await self._client.post(self.url, json=reply, headers=self._base_headers(None))
            await resp.aclose()
        except httpx2.HTTPError as exc:
            raise TransportError(f"{what}: {exc}", sent=True) from exc
        self._saw_status(what, resp)
        if resp.status_code == 404 and self.session_id:
            raise SessionGone(f"{what}: session {self.session_id} is gone (HTTP 404)")
        if resp.status_code >= 400:
            raise ProtocolViolation(f"server refused our {what}: HTTP {resp.status_code}")

    @contextlib.asynccontextmanager
    async def server_requests(self, handler: ServerRequestHandler) -> AsyncIterator[None]:
        """Hold the session's standalone GET stream open while a plain call runs, answering the server requests it
        carries with ``handler``: a server may send a call's ``elicitation/create`` there instead of on the call's
        own stream (the TypeScript SDK does for ``server.request`` without a related request; the conformance
        suite's SEP-1034 scenario does). Opened before the call is sent (a server drops what it sends while no
        stream is open), at most :data:`SIDE_STREAM_READY_S` waited for; a server without one (405), one held by
        another client (409), or one that keeps failing (:data:`~.resume.MAX_IDLE_RESUMPTIONS` in a row) is simply
        not heard. Nothing but server requests is read from it here."""
        if not self.session_id or self.closed:
            yield
            return
        opened = asyncio.Event()
        side = asyncio.create_task(self._hold_server_requests(handler, opened))
        waiter = asyncio.create_task(opened.wait())
        try:
            await asyncio.wait({side, waiter}, timeout=SIDE_STREAM_READY_S, return_when=asyncio.FIRST_COMPLETED)
            yield
        finally:
            for task in (waiter, side):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

    async def _hold_server_requests(self, handler: ServerRequestHandler, opened: asyncio.Event) -> None:
        point = ResumePoint()
        idle = 0
        while idle < MAX_IDLE_RESUMPTIONS:
            answered = False
            try:
                async with self.open_event_stream(
                    read_timeout_s=self._timeout_s, last_event_id=point.header()
                ) as response:
                    ctype = response.headers.get("content-type", "").lower()
                    if response.status_code >= 300 or not ctype.startswith("text/event-stream"):
                        log.debug("no GET stream for server requests: HTTP %s %s", response.status_code, ctype[:64])
                        return
                    opened.set()
                    async for event in httpx2.EventSource(response, max_event_size=MAX_REPLY_BYTES):
                        point.saw(event.id, event.retry, message=False)
                        try:
                            message = sse_message(event.data, "GET stream")
                        except ProtocolViolation:
                            continue
                        if message is not None and "method" in message and "id" in message:
                            answered = True
                            await self._answer_server_request(message, handler)
            except (httpx2.HTTPError, McpWireError) as exc:
                log.debug("GET stream for server requests: %s: %s", type(exc).__name__, exc)
            idle = 0 if answered else idle + 1
            await asyncio.sleep(point.delay_s())

    @contextlib.asynccontextmanager
    async def open_event_stream(
        self, *, read_timeout_s: float, last_event_id: str | None = None
    ) -> AsyncIterator[httpx2.Response]:
        """The session's standalone GET stream (what the server sends outside any request: task status
        notifications), as an httpx2 streaming-response context for :mod:`.notifications`: this session's headers
        and auth, never bounded as a whole (it is held open); ``read_timeout_s`` bounds a silence. Not opened while
        the server asks us to wait (:class:`~.backpressure.HeldBack`); a 429 or 503 to it holds the server too."""
        self._held("GET stream")
        headers = {**self._base_headers(None), "accept": "text/event-stream"}
        headers.pop("content-type", None)
        if last_event_id:  # resuming (SEP-1699): the server may replay what this session missed
            headers["last-event-id"] = last_event_id
        async with self._client.stream(
            "GET", self.url, headers=headers, timeout=httpx2.Timeout(read_timeout_s, connect=10.0)
        ) as response:
            self._saw_status("GET stream", response)
            yield response

    @scrubbed
    async def notify(
        self, method: str, params: dict[str, Any] | None = None, *, headers: dict[str, str] | None = None
    ) -> None:
        self._held(method)
        body: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            body["params"] = params
        try:
            resp = await self._client.post(self.url, json=body, headers=self._base_headers(headers))
            await resp.aclose()
        except httpx2.HTTPError as exc:
            raise TransportError(f"{method}: {exc}", sent=True) from exc

    async def aclose(self, *, terminate: bool = False) -> None:
        """Close connections. ``terminate`` also DELETEs the session (never done for persisted sessions)."""
        if self.closed:
            return
        self.closed = True
        if terminate and self.session_id:
            try:
                await self._client.delete(self.url, headers=self._base_headers(None))
            except httpx2.HTTPError:
                pass
        await self._client.aclose()  # closes our connection layer too, when it is the client's transport


async def _read_bounded(
    response: httpx2.Response, method: str, *, limit: int = MAX_REPLY_BYTES, truncate: bool = False
) -> bytes:
    """The body, never more than ``limit`` bytes: beyond it, cut (error bodies) or refused (replies)."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > limit:
            if truncate:
                chunks.append(chunk[: limit - (size - len(chunk))])
                break
            raise PayloadUnusable(f"{method}: reply exceeds {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)
