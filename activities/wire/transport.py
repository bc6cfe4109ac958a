"""JSON-RPC over streamable HTTP and stdio, with failures mapped to :mod:`.errors` types.

Why HTTP is not the SDK's transport: ``mcp.client.streamable_http`` folds every HTTP status ≥ 400
into a generic ``-32603`` (the ``Retry-After`` of a 429 and the 401/403 distinction are lost), and it
has no way to adopt a persisted ``Mcp-Session-Id`` without a fresh ``initialize``, which on stateful
servers orphans every task of the old session. Stdio uses the SDK's ``stdio_client`` as is.

Both transports expose the same three calls: ``request`` (returns the JSON-RPC ``result`` object),
``notify`` and ``aclose``. Server→client requests that arrive while a request is open (elicitation on
a legacy ``tasks/result`` stream) go to ``on_server_request``; without a handler they are refused
with ``-32601`` so the server is never left waiting.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import json
import logging
import os
import sys
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
    SessionGone,
    TaskUnreachable,
    TransportError,
    error_from_rpc,
    parse_retry_after,
)
from mcp_temporal_tasks.activities.wire.keepalive import KeepAliveReads, NotPlain
from mcp_temporal_tasks.activities.wire.limits import MAX_REPLY_BYTES, loads_bounded
from mcp_temporal_tasks.activities.wire.redact import register as register_secrets
from mcp_temporal_tasks.activities.wire.redact import scrub_error

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
#: Reads sent on a kept-alive connection of our own once the server has answered one plainly (see .keepalive):
#: the requests a waiting worker sends by the thousand. Only reads: one may be sent twice.
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


class HttpTransport:
    """Streamable HTTP, one POST per request; replies as JSON or as an SSE stream."""

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
        self._client = httpx2.AsyncClient(timeout=httpx2.Timeout(timeout_s, connect=10.0), auth=auth)
        self._timeout_s = timeout_s
        self._keepalive = KeepAliveReads(url) if KeepAliveReads.usable(url) else None
        #: Whether reads take the kept-alive path: None until the server answered one through httpx (True from
        #: then on), False for good once a reply there was framed otherwise (a read is sent twice at most once).
        self._plain_reads: bool | None = None
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
        if self._plain_reads and method in KEPT_ALIVE_READS and on_server_request is None \
                and on_notification is None and self._keepalive is not None:
            result = await self._kept_alive_read(method, params, headers, timeout_s or self._timeout_s)
            if result is not None:
                return result
        msg_id, body = _request_body(method, params)
        try:
            req = self._client.build_request(
                "POST", self.url, json=body, headers=self._base_headers(headers),
                timeout=httpx2.Timeout(timeout_s, connect=10.0) if timeout_s else httpx2.USE_CLIENT_DEFAULT,
            )
            response = await self._client.send(req, stream=True)
        except (httpx2.ConnectError, httpx2.ConnectTimeout) as exc:
            raise TransportError(f"{method}: cannot connect to {self.url}: {exc}", sent=False) from exc
        except httpx2.HTTPError as exc:
            raise TransportError(f"{method}: {type(exc).__name__}: {exc}", sent=True) from exc
        try:
            result = await self._read_reply(response, method, msg_id, on_server_request, on_notification)
            if method in KEPT_ALIVE_READS and response.status_code == 200 and self._plain_reads is None:
                self._plain_reads = True
            return result
        except httpx2.SSEError as exc:
            if "exceeded" in str(exc):
                raise PayloadUnusable(f"{method}: a reply event exceeds {MAX_REPLY_BYTES} bytes", raw=str(exc)) from exc
            raise TransportError(f"{method}: reply interrupted: {exc}", sent=True) from exc
        except httpx2.HTTPError as exc:
            raise TransportError(f"{method}: reply interrupted: {type(exc).__name__}: {exc}", sent=True) from exc
        finally:
            await response.aclose()

    async def _kept_alive_read(self, method: str, params: dict[str, Any] | None, headers: dict[str, str] | None,
                               timeout_s: float) -> dict[str, Any] | None:
        """A read on a kept-alive connection; None when it must go through httpx (every connection busy, a 401 to
        refresh the token on, a reply not framed plainly). Errors mean what they mean on the httpx path."""
        assert self._keepalive is not None
        msg_id, body = _request_body(method, params)
        sent_headers = self._base_headers(headers)
        if self._auth is not None:
            sent_headers["authorization"] = f"Bearer {await self._auth.source.token()}"
        def on_event(data: str) -> dict[str, Any] | None:
            """The same reading of an SSE event as on the httpx path; a server request needs its handler there."""
            message = _sse_message(data, method)
            if message is None:
                return None
            if "method" in message:
                if "id" in message:
                    raise NotPlain("a request from the server in the reply stream")
                return None
            return message if message.get("id") == msg_id else None

        try:
            reply = await self._keepalive.post(json.dumps(body).encode(), sent_headers, timeout_s=timeout_s,
                                               connect_s=10.0, what=method, on_event=on_event)
        except NotPlain:
            self._plain_reads = False  # this server's reads go through httpx from now on, for good
            return None
        if reply is None:
            return None
        ctype = reply.header("content-type").lower()
        if reply.status >= 400:
            if reply.status == 401 and self._auth is not None:
                return None  # httpx's auth flow fetches a new token and sends it again
            raise self._http_error(method, reply.status, ctype, reply.headers.get,
                                   reply.body.decode("utf-8", "replace"))
        if reply.status == 202:
            raise ProtocolViolation(f"{method}: server answered a request with 202 Accepted", raw="")
        if reply.message is not None:
            return _result_of(reply.message, method=method)
        if ctype.startswith("application/json"):
            return _json_result(reply.body, method, msg_id)
        raw_text = reply.body[:2048].decode("utf-8", "replace")
        raise ProtocolViolation(f"{method}: unexpected content-type {ctype!r}", raw=raw_text)

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
            return RateLimited(
                f"{method}: HTTP 429 from {self.url}",
                retry_after_s=parse_retry_after(header("retry-after")), raw=raw,
            )
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
        if self._keepalive is not None:
            self._keepalive.aclose()
        await self._client.aclose()


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
    """A child process speaking newline-delimited JSON-RPC, through the SDK's ``stdio_client``.

    The child lives as long as this object; tasks on it die with it. When the child exits every open
    request fails with :class:`TaskUnreachable`, never hangs.
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
        #: Every notification the child writes, whatever request is open (task status pushes: .notifications).
        self.on_notification: NotificationHandler | None = None
        self._write: Any = None
        self._ready = asyncio.Event()
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
        self._runner = asyncio.create_task(self._run(), name=f"mcp-stdio:{self.command[0]}")
        await self._ready.wait()
        if self._death is not None:
            raise TransportError(f"cannot start stdio server {self.command[0]!r}: {self._death}", sent=False)

    async def _run(self) -> None:
        from mcp.client.stdio import StdioServerParameters, stdio_client
        from mcp.shared.message import SessionMessage

        self._session_message = SessionMessage
        params = StdioServerParameters(command=self.command[0], args=self.command[1:], env=self.env, cwd=self.cwd)
        try:
            async with stdio_client(params, errlog=sys.stderr) as (read, write):
                self._write = write
                self._ready.set()
                async for item in read:
                    if isinstance(item, Exception):
                        log.warning("stdio server %s sent an unreadable line: %s", self.command[0], item)
                        continue
                    self._dispatch(item.message.model_dump(by_alias=True, mode="json", exclude_unset=True))
            self._death = "server process closed its output"
        except asyncio.CancelledError:
            self._death = "transport closed"
            raise
        except Exception as exc:  # the child could not start or crashed the reader
            self._death = f"{type(exc).__name__}: {exc}"
        finally:
            if self._death is None:
                self._death = "server process exited"
            self._ready.set()
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
        await self._send(await _server_reply(message, handler))

    async def _send(self, body: dict[str, Any]) -> None:
        from mcp_types import jsonrpc_message_adapter

        if not self.alive or self._write is None:
            raise ProcessGone(f"stdio server {self.command[0]!r} is gone: {self._death or 'closed'}")
        message = jsonrpc_message_adapter.validate_python(body, by_name=False)
        await self._write.send(self._session_message(message))

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
            except TaskUnreachable:
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
        self.closed = True
        if self._runner is not None and not self._runner.done():
            self._runner.cancel()
            try:
                await self._runner
            except (asyncio.CancelledError, Exception):
                pass


Transport = HttpTransport | StdioTransport
