"""JSON-RPC over streamable HTTP and stdio, with failures mapped to :mod:`.errors` types.

Why HTTP is not the SDK's transport: ``mcp.client.streamable_http`` folds every HTTP status ≥ 400
into a generic ``-32603`` (the ``Retry-After`` of a 429 and the 401/403 distinction are lost), and it
has no way to adopt a persisted ``Mcp-Session-Id`` without a fresh ``initialize``, which on stateful
servers orphans every task of the old session. Stdio keeps the SDK's message framing on a child process of
our own (:mod:`.stdio` says why: the SDK's ``stdio_client`` could not be made to end its child in bounded time).

Both transports expose the same three calls: ``request`` (returns the JSON-RPC ``result`` object),
``notify`` and ``aclose``. Server→client requests that arrive while a request is open (elicitation on
a legacy ``tasks/result`` stream) go to ``on_server_request``; without a handler they are refused
with ``-32601`` so the server is never left waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import json
import logging
import os
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import httpx2

from mcp_temporal_tasks.activities.wire import redact
from mcp_temporal_tasks.activities.wire.auth import BearerAuth
from mcp_temporal_tasks.activities.wire.errors import (
    AuthorizationRequired,
    HttpRefusal,
    McpWireError,
    PayloadUnusable,
    ProcessGone,
    ProtocolViolation,
    RateLimited,
    RequestRefused,
    SessionGone,
    TaskUnreachable,
    TransportError,
    error_from_rpc,
    read_retry_after,
)
from mcp_temporal_tasks.activities.wire.http11 import FRESH_CONNECTION, H11Transport, RequestNotSent, StaleConnection
from mcp_temporal_tasks.activities.wire.limits import MAX_REPLY_BYTES, loads_bounded
from mcp_temporal_tasks.activities.wire.redact import register as register_secrets
from mcp_temporal_tasks.activities.wire.redact import scrub_error
from mcp_temporal_tasks.activities.wire.stdio import WRITE_TIMEOUT_S, ChildStartError, StdioChild

log = logging.getLogger(__name__)
T = TypeVar("T")


def _scrubbed(fn: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T]]:
    """Every wire error leaving a transport method is scrubbed of the secret values this transport resolved."""

    @functools.wraps(fn)
    async def wrapper(self: Any, *args: Any, **kwargs: Any) -> T:
        try:
            return await fn(self, *args, **kwargs)
        except McpWireError as exc:
            raise scrub_error(exc, self.secrets)

    return wrapper


#: (method, params, server request id) -> JSON-RPC result. Raise McpWireError to answer with an error.
ServerRequestHandler = Callable[[str, dict[str, Any], Any], Awaitable[dict[str, Any]]]
#: Called with each notification that arrives while a request is open (progress of that request, mostly).
NotificationHandler = Callable[[dict[str, Any]], None]

DEFAULT_TIMEOUT_S = 60.0
CONNECT_TIMEOUT_S = 10.0
#: Reads bounded as a whole (connect, write and every wait for bytes together), not only per wait for bytes: the
#: requests a waiting worker sends by the thousand, which a server trickling bytes must not hold.
KEPT_ALIVE_READS = frozenset({"tasks/get"})


def _message_from_body(body: Any, *, method: str) -> dict[str, Any]:
    if not isinstance(body, dict) or body.get("jsonrpc") != "2.0":
        raise ProtocolViolation(f"{method}: reply is not a JSON-RPC 2.0 message", raw=body)
    return body


def _result_of(message: dict[str, Any], *, method: str) -> dict[str, Any]:
    if "error" in message:
        raise error_from_rpc(message["error"], method=method, raw=message)
    result = message.get("result")
    if not isinstance(result, dict):
        raise ProtocolViolation(f"{method}: reply has neither an object 'result' nor an 'error'", raw=message)
    return result


class _Ids:
    """Request ids unique per process: a re-attached HTTP session must never reuse a live id."""

    _counter = itertools.count(1)
    _prefix = f"mtt-{os.getpid()}-"

    @classmethod
    def next(cls) -> str:
        return f"{cls._prefix}{next(cls._counter)}"


def _request_body(method: str, params: dict[str, Any] | None) -> tuple[str, dict[str, Any]]:
    """(id, JSON-RPC request) for either transport."""
    msg_id = _Ids.next()
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": msg_id, "method": method}
    if params is not None:
        body["params"] = params
    return msg_id, body


#: ``MCP_TASKS_KEEPALIVE_READS=0``: httpx's own connection layer (httpcore2) for everything, no direct reads: for
#: comparison, or a server this layer misreads (please report it).
SWITCH = "MCP_TASKS_KEEPALIVE_READS"


def _switched_off() -> bool:
    return os.environ.get(SWITCH, "1").strip().lower() in ("0", "false", "no", "off")


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
    ) -> None:
        self.url = url
        self.session_id = session_id
        self.protocol_version = protocol_version
        self._headers = dict(headers or {})
        #: Header values are resolved credentials (references only ever name secrets): never in an error text.
        self._secrets = register_secrets(self._headers.values())
        self._auth = auth
        parts = httpx2.URL(url)
        direct = not _switched_off() and parts.scheme in ("http", "https") and _httpx_goes_direct(
            f"{parts.scheme}://{parts.netloc.decode('ascii', 'replace')}", _proxy_environment())
        #: Our connection layer, where httpx goes direct (None: httpx's own transport, proxies included).
        self.connections: H11Transport | None = H11Transport() if direct else None
        self._client = httpx2.AsyncClient(timeout=httpx2.Timeout(timeout_s, connect=CONNECT_TIMEOUT_S), auth=auth,
                                          transport=self.connections)
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

    @_scrubbed
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
        if method not in KEPT_ALIVE_READS:
            return await self._exchange(method, params, headers, on_server_request, on_notification, timeout_s)
        # A read, bounded as a whole: a server trickling bytes cannot hold it past its timeout.
        bound = timeout_s or self._timeout_s
        try:
            async with asyncio.timeout(bound):
                return await self._exchange(method, params, headers, on_server_request, on_notification, timeout_s)
        except TimeoutError:
            raise TransportError(f"{method}: no reply within {bound:g}s", sent=True) from None

    async def _exchange(self, method: str, params: dict[str, Any] | None, headers: dict[str, str] | None,
                        on_server_request: ServerRequestHandler | None, on_notification: NotificationHandler | None,
                        timeout_s: float | None, *, fresh: bool = False) -> dict[str, Any]:
        """One request and the reading of its reply; every failure mapped to its wire error.

        A pooled connection that the server closed just as the request was written into it (:class:`StaleConnection`:
        closed before any byte of a reply) is not a fault: the request goes once more on a new connection. Only
        requests that may be sent twice ever take a pooled connection: ``tools/call`` always gets a new one
        (:data:`~.http11.FRESH_CONNECTION`)."""
        try:
            return await self._exchange_once(method, params, headers, on_server_request, on_notification, timeout_s,
                                             fresh=fresh)
        except TransportError as exc:
            if fresh or not isinstance(exc.__cause__, StaleConnection):
                raise
        return await self._exchange_once(method, params, headers, on_server_request, on_notification, timeout_s,
                                         fresh=True)

    async def _exchange_once(self, method: str, params: dict[str, Any] | None, headers: dict[str, str] | None,
                             on_server_request: ServerRequestHandler | None,
                             on_notification: NotificationHandler | None, timeout_s: float | None, *,
                             fresh: bool) -> dict[str, Any]:
        msg_id, body = _request_body(method, params)
        try:
            req = self._client.build_request(
                "POST", self.url, json=body, headers=self._base_headers(headers),
                timeout=httpx2.Timeout(timeout_s, connect=CONNECT_TIMEOUT_S) if timeout_s else httpx2.USE_CLIENT_DEFAULT,
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
            return await self._read_reply(response, method, msg_id, on_server_request, on_notification)
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
    ) -> dict[str, Any]:
        status = response.status_code
        ctype = response.headers.get("content-type", "").lower()
        if method == "initialize" and response.headers.get("mcp-session-id"):
            self.session_id = response.headers["mcp-session-id"]
        if status >= 400:
            raw = (await _read_bounded(response, method, limit=64 * 1024, truncate=True)).decode("utf-8", "replace")
            raise self._http_error(method, status, ctype, response.headers.get, raw)
        if status == 202:
            raise ProtocolViolation(f"{method}: server answered a request with 202 Accepted", raw="")
        if ctype.startswith("application/json"):
            return _json_result(await _read_bounded(response, method), method, msg_id)
        if ctype.startswith("text/event-stream"):
            return await self._read_sse(response, method, msg_id, on_server_request, on_notification)
        raw_text = (await _read_bounded(response, method, limit=2048, truncate=True)).decode("utf-8", "replace")
        raise ProtocolViolation(f"{method}: unexpected content-type {ctype!r}", raw=raw_text)

    def _http_error(self, method: str, status: int, ctype: str, header: Callable[[str], str | None],
                    raw: str) -> McpWireError:
        """What an HTTP status ≥ 400 means, whichever path read it (``raw``: the body, at most 64 KiB)."""
        if status == 429:
            after = read_retry_after(header("retry-after"))
            return RateLimited(f"{method}: HTTP 429 from {self.url}", retry_after_s=after.seconds,
                               retry_after_note=after.note, raw=raw)
        if status in (401, 403):
            return AuthorizationRequired(f"{method}: HTTP {status} from {self.url}", status=status, raw=raw)
        rpc_error = None
        if ctype.startswith("application/json"):
            try:
                parsed = json.loads(raw)
                rpc_error = parsed.get("error") if isinstance(parsed, dict) else None
            except ValueError:
                pass
        # 404 with a session is "session gone" unless the body says which method is missing.
        if status == 404 and self.session_id and method != "initialize" and (
                rpc_error is None or rpc_error.get("code") not in (-32601, -32602)):
            return SessionGone(f"{method}: session {self.session_id} is gone (HTTP 404)", raw=raw)
        if status >= 500:
            return TransportError(f"{method}: HTTP {status} from {self.url}", sent=True, status=status, raw=raw)
        if rpc_error is not None:
            return error_from_rpc(rpc_error, method=method, raw=raw)
        return HttpRefusal(f"{method}: HTTP {status} without a JSON-RPC error", code=None, raw=raw)

    async def _read_sse(
        self,
        response: httpx2.Response,
        method: str,
        msg_id: str,
        on_server_request: ServerRequestHandler | None,
        on_notification: NotificationHandler | None = None,
    ) -> dict[str, Any]:
        async for event in httpx2.EventSource(response, max_event_size=MAX_REPLY_BYTES):
            message = _sse_message(event.data, method)
            if message is None:
                continue
            if "method" in message and "id" in message:
                await self._answer_server_request(message, on_server_request)
            elif "method" in message:
                # Progress of a long synchronous call is shown, never relied on; task status pushes are ignored.
                if on_notification is not None:
                    on_notification(message)
            elif message.get("id") == msg_id:
                return _result_of(message, method=method)
        raise TransportError(f"{method}: SSE stream ended without a reply", sent=True)

    async def _answer_server_request(self, message: dict[str, Any], handler: ServerRequestHandler | None) -> None:
        await self._post_reply(await _server_reply(message, handler), f"reply to {message.get('method')}")

    @_scrubbed
    async def respond(self, request_id: Any, result: dict[str, Any]) -> None:
        """Answer a server request by id, outside the stream that carried it (a late answer after a restart)."""
        await self._post_reply({"jsonrpc": "2.0", "id": request_id, "result": result}, "late reply")

    async def _post_reply(self, reply: dict[str, Any], what: str) -> None:
        try:
            resp = await self._client.post(self.url, json=reply, headers=self._base_headers(None))
            await resp.aclose()
        except httpx2.HTTPError as exc:
            raise TransportError(f"{what}: {exc}", sent=True) from exc
        if resp.status_code == 404 and self.session_id:
            raise SessionGone(f"{what}: session {self.session_id} is gone (HTTP 404)")
        if resp.status_code >= 400:
            raise ProtocolViolation(f"server refused our {what}: HTTP {resp.status_code}")

    def open_event_stream(self, *, read_timeout_s: float) -> Any:
        """The session's standalone GET stream (what the server sends outside any request: task status
        notifications), as an httpx2 streaming-response context for :mod:`.notifications`: this session's headers
        and auth, never the kept-alive path (it is held open); ``read_timeout_s`` bounds a silence."""
        headers = {**self._base_headers(None), "accept": "text/event-stream"}
        headers.pop("content-type", None)
        return self._client.stream("GET", self.url, headers=headers, timeout=httpx2.Timeout(read_timeout_s, connect=10.0))

    @_scrubbed
    async def notify(self, method: str, params: dict[str, Any] | None = None, *, headers: dict[str, str] | None = None) -> None:
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


def _sse_message(data: str | None, method: str) -> dict[str, Any] | None:
    """The JSON-RPC message an SSE event carries, None for a priming event (no data), whichever path read it."""
    if not data or not data.strip():
        return None
    try:
        return _message_from_body(loads_bounded(data), method=method)
    except ValueError as exc:
        raise ProtocolViolation(f"{method}: malformed JSON in SSE event", raw=data) from exc


def _json_result(raw_bytes: bytes, method: str, msg_id: str) -> dict[str, Any]:
    """The ``result`` of a JSON reply body (a JSON-RPC error raises its typed error)."""
    try:
        message = loads_bounded(raw_bytes)
    except ValueError as exc:
        raise ProtocolViolation(f"{method}: malformed JSON reply", raw=raw_bytes.decode("utf-8", "replace")) from exc
    message = _message_from_body(message, method=method)
    if message.get("id") not in (msg_id, None):  # null id: error raised before the id was read
        raise ProtocolViolation(f"{method}: reply carries id {message.get('id')!r}, not {msg_id!r}", raw=message)
    return _result_of(message, method=method)


async def _read_bounded(response: httpx2.Response, method: str, *, limit: int = MAX_REPLY_BYTES,
                        truncate: bool = False) -> bytes:
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


async def _server_reply(message: dict[str, Any], handler: ServerRequestHandler | None) -> dict[str, Any]:
    method = message["method"]
    if handler is None:
        return {"jsonrpc": "2.0", "id": message["id"],
                "error": {"code": -32601, "message": f"client has no handler for {method}"}}
    try:
        result = await handler(method, message.get("params") or {}, message["id"])
        return {"jsonrpc": "2.0", "id": message["id"], "result": result}
    except McpWireError as exc:
        return {"jsonrpc": "2.0", "id": message["id"],
                "error": {"code": exc.code or -32603, "message": exc.message}}


class StdioTransport:
    """A child process speaking newline-delimited JSON-RPC (:class:`.stdio.StdioChild`: the SDK's framing, our
    process lifecycle).

    The child lives as long as this object; tasks on it die with it. When the child exits every open
    request fails with :class:`TaskUnreachable`, never hangs. :meth:`aclose` ends the child by the spec's
    shutdown within :data:`.stdio.SHUTDOWN_BOUND_S`, whatever it does.
    """

    def __init__(self, command: list[str], *, cwd: str | None = None, env: dict[str, str] | None = None,
                 secrets: Any = None) -> None:
        self.command = command
        self.cwd = cwd
        self.env = env
        #: The child's referenced (credential) environment values: never in an error text.
        self.secrets = register_secrets(secrets or ())
        self._pending: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._handlers: dict[str, ServerRequestHandler | None] = {}
        self._notified: dict[str, NotificationHandler] = {}
        self._child: StdioChild | None = None
        #: Every notification the child writes, whatever request is open (task status pushes: .notifications).
        self.on_notification: NotificationHandler | None = None
        self._runner: asyncio.Task[None] | None = None
        self._death: str | None = None
        self.closed = False
        # Stdio has no protocol session id; this one names *this child process*, so that a SessionRef of a
        # task created here never leads to another child of the same command (the task died with this one).
        self.session_id: str | None = f"stdio-{uuid.uuid4().hex}"
        self.protocol_version: str | None = None  # accepted for interface parity with HTTP

    @property
    def alive(self) -> bool:
        return self._death is None and not self.closed

    @_scrubbed
    async def start(self) -> None:
        try:
            self._child = await StdioChild.start(self.command, cwd=self.cwd, env=self.env)
        except (ChildStartError, ValueError) as exc:
            self._death = str(exc)
            raise TransportError(f"cannot start stdio server {self.command[0]!r}: {exc}", sent=False) from None
        self._runner = asyncio.create_task(self._read(self._child), name=f"mcp-stdio:{self.command[0]}")

    async def _read(self, child: StdioChild) -> None:
        try:
            async for item in child.messages():
                if isinstance(item, Exception):
                    log.warning("stdio server %s sent an unreadable line: %s", self.command[0], item)
                    continue
                self._dispatch(item.model_dump(by_alias=True, mode="json", exclude_unset=True))
            self._death = "server process closed its output"
        except asyncio.CancelledError:
            self._death = "transport closed"
            raise
        except Exception as exc:  # the reader broke (the pipe, a bug of ours): the session is over either way
            self._death = f"{type(exc).__name__}: {exc}"
        finally:
            if self._death is None:
                self._death = "server process exited"
            for fut in self._pending.values():
                if not fut.done():
                    fut.set_exception(TaskUnreachable(f"stdio server {self.command[0]!r} is gone: {self._death}"))
            self._pending.clear()

    def _dispatch(self, message: dict[str, Any]) -> None:
        if "method" in message and "id" in message:
            # A server request is answered on its own task so the reader keeps reading meanwhile.
            handler = next((h for h in self._handlers.values() if h is not None), None)
            asyncio.create_task(self._answer(message, handler))
        elif "method" in message:
            for listener in list(self._notified.values()):
                listener(message)
            if self.on_notification is not None:
                self.on_notification(message)
        else:
            fut = self._pending.pop(str(message.get("id")), None)
            if fut is not None and not fut.done():
                fut.set_result(message)

    async def _answer(self, message: dict[str, Any], handler: ServerRequestHandler | None) -> None:
        with contextlib.suppress(McpWireError):  # the child went away before our answer: nothing waits for it
            await self._send(await _server_reply(message, handler))

    async def _send(self, body: dict[str, Any]) -> None:
        from mcp_types import jsonrpc_message_adapter

        if not self.alive or self._child is None:
            raise ProcessGone(f"stdio server {self.command[0]!r} is gone: {self._death or 'closed'}")
        message = jsonrpc_message_adapter.validate_python(body, by_name=False)
        try:
            await self._child.send(message)
        except TimeoutError as exc:
            raise TransportError(f"stdio server {self.command[0]!r} has not read its input for "
                                 f"{WRITE_TIMEOUT_S:g} s", sent=True) from exc
        except OSError as exc:  # the pipe is gone: nothing of this message reached it
            raise ProcessGone(f"stdio server {self.command[0]!r} is gone: {exc}") from exc

    @_scrubbed
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
        msg_id, body = _request_body(method, params)
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[msg_id] = fut
        self._handlers[msg_id] = on_server_request
        if on_notification is not None:
            self._notified[msg_id] = on_notification
        try:
            try:
                await self._send(body)
            except McpWireError:
                raise
            except Exception as exc:
                raise TransportError(f"{method}: write to stdio server failed: {exc}", sent=False) from exc
            try:
                message = await asyncio.wait_for(fut, timeout_s or DEFAULT_TIMEOUT_S)
            except TimeoutError as exc:
                raise TransportError(f"{method}: no reply from stdio server in time", sent=True) from exc
        finally:
            self._pending.pop(msg_id, None)
            self._handlers.pop(msg_id, None)
            self._notified.pop(msg_id, None)
        return _result_of(message, method=method)

    @_scrubbed
    async def respond(self, request_id: Any, result: dict[str, Any]) -> None:
        await self._send({"jsonrpc": "2.0", "id": request_id, "result": result})

    @_scrubbed
    async def notify(self, method: str, params: dict[str, Any] | None = None, *, headers: dict[str, str] | None = None) -> None:
        body: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            body["params"] = params
        await self._send(body)

    async def aclose(self, *, terminate: bool = False) -> None:
        """End the child (:meth:`.stdio.StdioChild.aclose`: stdin closed, SIGTERM, SIGKILL; within
        :data:`.stdio.SHUTDOWN_BOUND_S`). Cancelled meanwhile, it kills the child before it returns."""
        self.closed = True
        try:
            if self._child is not None:
                await self._child.aclose()
        finally:
            if self._runner is not None and not self._runner.done():
                # The child is gone; what it still wrote is not waited for (a descendant may hold its stdout).
                self._runner.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await asyncio.wait({self._runner}, timeout=1.0)


Transport = HttpTransport | StdioTransport
