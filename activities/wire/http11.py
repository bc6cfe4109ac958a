"""HTTP/1.1 connections of our own under httpx, framed by h11: the connection layer of every direct MCP request.

A connection is reused only if nothing arrived after its last complete reply, and nothing is retried here: the
reasons, and the rules of reuse, are on :class:`H11Transport`.
"""

from __future__ import annotations

import asyncio
import collections
import select
import ssl
import time
from collections.abc import AsyncIterator
from typing import Any

import h11
import httpx2

#: A pooled connection idle longer than this is closed rather than reused: servers close idle connections (Node's
#: keepAliveTimeout and uvicorn's are 5 s), and a request written into a connection being closed is lost.
IDLE_S = 4.0
#: Idle connections kept per origin at most (a busier moment opens more; the surplus is closed when released).
MAX_IDLE = 32
#: Bytes read from a socket at a time, and held unread at most before the socket stops being read (as httpcore2).
READ_BYTES = 64 * 1024
#: A reply's header block (or a chunk header) longer than this is refused by h11 (httpcore2's value).
MAX_INCOMPLETE_EVENT = 100 * 1024
#: ``request.extensions[FRESH_CONNECTION] = True``: never on a pooled connection (a request that must not be lost
#: to a keep-alive race, because it cannot be sent twice).
FRESH_CONNECTION = "mcp_tasks.fresh_connection"

_ssl_context: ssl.SSLContext | None = None


def _tls() -> ssl.SSLContext:
    """httpx's own default context (its CA bundle, ``SSL_CERT_FILE``): the trust given to a server is httpx's."""
    global _ssl_context
    if _ssl_context is None:
        _ssl_context = httpx2.create_ssl_context()
    return _ssl_context


class RequestNotSent(httpx2.LocalProtocolError):
    """h11 refused to write the request (a header name that is not a token, a value with CR, LF or NUL): no byte
    of it left this process."""


class StaleConnection(httpx2.RemoteProtocolError):
    """A connection taken from the pool closed before any byte of a reply: what a server closing an idle connection
    at the moment we wrote into it looks like. The request may or may not have been read by the server."""


class _Conn(asyncio.Protocol):
    """One socket and its h11 state. Bytes are queued as they arrive and fed to h11 only as it asks for them, so
    what is held unread is bounded (reading pauses beyond :data:`READ_BYTES`) and anything that arrives while the
    connection is idle is seen (``dirty``)."""

    def __init__(self, origin: tuple[str, str, int]) -> None:
        self.origin = origin
        self.h11 = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_INCOMPLETE_EVENT)
        self.transport: asyncio.Transport | None = None
        self._queue: collections.deque[bytes] = collections.deque()
        self._queued = 0
        self._eof = False
        self._paused = False
        self._data_waiter: asyncio.Future[None] | None = None
        self._write_waiter: asyncio.Future[None] | None = None
        self.busy = False
        #: Something (bytes or EOF) arrived while no request was in flight: never reuse.
        self.dirty = False
        self.idle_since = 0.0
        #: Reply bytes seen in the current exchange (a reused connection closed before any is stale).
        self.got_bytes = False
        self.reused = False

    # --- asyncio.Protocol ---------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if not self.busy:
            self.dirty = True
        self._queue.append(data)
        self._queued += len(data)
        if self._queued > READ_BYTES and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        self._eof = True
        if not self.busy:
            self.dirty = True
        self._wake()
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self._eof = True
        self.dirty = True
        self._wake()
        if self._write_waiter is not None and not self._write_waiter.done():
            self._write_waiter.set_result(None)

    def pause_writing(self) -> None:
        self._write_waiter = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self._write_waiter is not None and not self._write_waiter.done():
            self._write_waiter.set_result(None)
        self._write_waiter = None

    def _wake(self) -> None:
        if self._data_waiter is not None and not self._data_waiter.done():
            self._data_waiter.set_result(None)

    # --- the exchange --------------------------------------------------------------------------------

    @property
    def reusable(self) -> bool:
        if self.dirty or self._eof or self._queue or self.transport is None or self.transport.is_closing():
            return False
        # What the event loop has not handled yet: a FIN or bytes already at the socket (httpcore2's check too).
        sock = self.transport.get_extra_info("socket")
        try:
            return sock is None or not select.select([sock], [], [], 0)[0]
        except (OSError, ValueError):
            return False

    async def write(self, data: bytes, timeout: float | None) -> None:
        if self.transport is None or self.transport.is_closing():
            raise httpx2.WriteError("the connection is closed")
        self.transport.write(data)
        if self._write_waiter is not None:
            try:
                async with asyncio.timeout(timeout):
                    await asyncio.shield(self._write_waiter)
            except TimeoutError:
                raise httpx2.WriteTimeout(f"the request could not be written within {timeout:g}s") from None
            if self.transport.is_closing():
                raise httpx2.WriteError("the connection closed while the request was written")

    async def next_event(self, timeout: float | None) -> Any:
        """The next h11 event of the reply, reading as needed (each wait for bytes bounded by ``timeout``)."""
        while True:
            try:
                event = self.h11.next_event()
            except h11.RemoteProtocolError as exc:
                raise httpx2.RemoteProtocolError(str(exc)) from exc
            if event is h11.PAUSED:  # both sides done: nothing more belongs to this exchange
                raise httpx2.RemoteProtocolError("the reply is over; no more events in this exchange")
            if event is not h11.NEED_DATA:
                return event
            await self._feed(timeout)

    async def _feed(self, timeout: float | None) -> None:
        if not self._queue and not self._eof:
            self._data_waiter = asyncio.get_running_loop().create_future()
            try:
                async with asyncio.timeout(timeout):
                    await self._data_waiter
            except TimeoutError:
                raise httpx2.ReadTimeout(f"no reply bytes within {timeout:g}s") from None
            finally:
                self._data_waiter = None
        if self._queue:
            self._pop()
            return
        # EOF. Before any byte of a reply on a reused connection: it was closed under us.
        if self.h11.their_state is h11.SEND_RESPONSE and not self.got_bytes:
            if self.reused:
                raise StaleConnection("the server closed a kept-alive connection without a reply")
            raise httpx2.RemoteProtocolError("Server disconnected without sending a response.")
        self.h11.receive_data(b"")

    def _pop(self) -> None:
        """Hand h11 the oldest bytes received (reading resumes once what is held unread is small again)."""
        data = self._queue.popleft()
        self._queued -= len(data)
        if self._paused and self._queued <= READ_BYTES and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        self.got_bytes = True
        self.h11.receive_data(data)

    def drain_buffered(self) -> None:
        """Read on, without waiting, through what has already arrived of the reply: a stream whose last bytes are
        here (an SSE reply closed right after its answer) ends cleanly and the connection may be reused; one that
        is still open is not waited for. What is read is dropped: the caller has its answer."""
        try:
            while True:
                event = self.h11.next_event()
                if event is h11.NEED_DATA:
                    if not self._queue:
                        return
                    self._pop()
                elif event is h11.PAUSED or isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
                    return  # PAUSED: the reply was already complete (anything after it is trailing data)
        except h11.RemoteProtocolError:
            return  # not clean: the connection is dropped

    def finished_cleanly(self) -> bool:
        """Whether the exchange ended as one complete request and reply with nothing after it."""
        return (
            self.h11.our_state is h11.DONE
            and self.h11.their_state is h11.DONE
            and not self.h11.trailing_data[0]
            and self.reusable
        )

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


class _ReplyBody(httpx2.AsyncByteStream):
    """A reply's body as h11 frames it; closing it hands the connection back (or drops it)."""

    def __init__(self, pool: H11Transport, conn: _Conn, read_timeout: float | None) -> None:
        self._pool, self._conn, self._timeout = pool, conn, read_timeout
        self._released = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            while True:
                event = await self._conn.next_event(self._timeout)
                if isinstance(event, h11.Data):
                    yield bytes(event.data)
                elif isinstance(event, h11.EndOfMessage):
                    return
                elif isinstance(event, h11.ConnectionClosed):  # h11 allows it only where it ends the body
                    return
        except BaseException:
            self._release(keep=False)
            raise

    async def aclose(self) -> None:
        if not self._released:
            self._conn.drain_buffered()
        self._release(keep=True)

    def _release(self, *, keep: bool) -> None:
        if not self._released:
            self._released = True
            self._pool._release(self._conn, keep=keep)


class H11Transport(httpx2.AsyncBaseTransport):
    """Direct HTTP/1.1 (plain or TLS) for one ``httpx2.AsyncClient``; see the module docstring for the rules.

    ``replies`` and ``connections`` count replies read to their end and connections opened: what tests and operators
    check reuse by.

    :class:`H11Transport` is an ``httpx2.AsyncBaseTransport``: httpx's client (auth flows, cookies, redirects, proxies
    from the environment, its default headers) runs on top of it exactly as on its own transport, and what comes back is
    an ``httpx2.Response`` read by the same code (:mod:`.http_transport`) whichever way it was sent. Every byte of HTTP
    is framed and checked by h11, the library httpcore2 (httpx's own stack) uses: request and reply headers (names are
    tokens, no CR, LF or NUL in values), ``Content-Length`` and chunked coding, 1xx, bodies that end with the
    connection. What this module owns is the plumbing around h11: sockets, a small pool, timeouts, and two rules.

    Why not httpcore2's pool, which frames with h11 too:

    * **A stale reply is never read as the answer to the next request.** httpcore2 2.16.2 puts a connection back in its
      pool when its reply is complete even if more bytes came after it in the same read (h11 keeps them as
      ``trailing_data`` across ``start_next_cycle``): a server that writes a good reply followed by a stray ``404 Not
      Found`` has that 404 read as the answer to the next request on the connection (checked:
      ``tests/test_wire_corpus.py``). On a read that looked like "session gone"; on a ``tools/call`` a stray 429, 401 or
      404 would say "never sent" of a call that was sent, and the call would be sent again. Here a connection is reused
      only if *nothing* arrived after its last complete reply, before or after it was put back.
    * **CPU.** A waiting worker sends ``tasks/get`` by the thousand (~80 a second at 10,000 old tasks); httpcore2's pool
      and anyio streams cost more per read than this does (``python -m bench.http_read`` prints each way; the figures
      are in bench/README.md, "``bench.http_read`` after the move to h11").

    Rules of reuse: a connection goes back to the pool only when h11 says both sides are done with the exchange (so a
    body framed by the connection closing, a stream left open, a reply cut short, an h11 error or a cancelled read all
    drop it), nothing is left over, and the pool holds fewer than :data:`MAX_IDLE` for that origin; one idle longer than
    :data:`IDLE_S`, or that received anything (bytes, EOF) while idle, is closed instead of used. A request marked with
    :data:`FRESH_CONNECTION` never takes a pooled one: ``tools/call`` is never written into a connection the server may
    be closing at that moment. Nothing is retried here: whether a request may be sent again is its caller's decision
    (:class:`StaleConnection` tells it that a reused connection closed before any byte of a reply).

    Failures are httpx's own exception types, so they mean to every caller what they mean from httpx's transport:
    ``ConnectError``/``ConnectTimeout`` (nothing sent), ``WriteError``/``WriteTimeout``, ``ReadError``/``ReadTimeout``,
    ``RemoteProtocolError`` (h11 refused the reply), and :class:`RequestNotSent` (h11 refused the request before any
    byte left).
    """

    def __init__(self, *, max_idle: int = MAX_IDLE, idle_s: float = IDLE_S) -> None:
        self.max_idle, self.idle_s = max_idle, idle_s
        self._idle: dict[tuple[str, str, int], list[_Conn]] = {}
        self._busy: set[_Conn] = set()
        self.replies = self.connections = 0
        self.closed = False

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if self.closed:
            raise httpx2.ConnectError("the transport is closed")
        timeouts = request.extensions.get("timeout", {})
        url = request.url
        if url.scheme not in ("http", "https"):
            raise httpx2.UnsupportedProtocol(f"scheme {url.scheme!r} is not served by this transport")
        origin = (url.scheme, url.host, url.port or (443 if url.scheme == "https" else 80))
        try:
            head = h11.Request(method=request.method, target=url.raw_path, headers=request.headers.raw)
        except h11.LocalProtocolError as exc:
            raise RequestNotSent(f"the request was not sent: {exc}") from exc
        conn = None if request.extensions.get(FRESH_CONNECTION) else self._take(origin)
        if conn is None:
            conn = await self._connect(origin, timeouts.get("connect"))
        self._busy.add(conn)
        conn.busy, conn.got_bytes = True, False
        try:
            await self._send(conn, head, request, timeouts.get("write"))
            while True:
                event = await conn.next_event(timeouts.get("read"))
                if isinstance(event, h11.Response):
                    break
                if isinstance(event, h11.InformationalResponse) and event.status_code == 101:
                    raise httpx2.RemoteProtocolError("the server switched protocols (101), which no MCP request asks")
        except BaseException:
            self._release(conn, keep=False)
            raise
        return httpx2.Response(
            event.status_code,
            headers=event.headers.raw_items(),
            stream=_ReplyBody(self, conn, timeouts.get("read")),
            extensions={"http_version": b"HTTP/" + event.http_version, "reason_phrase": event.reason},
        )

    async def _send(self, conn: _Conn, head: Any, request: httpx2.Request, timeout: float | None) -> None:
        try:
            out = conn.h11.send(head) or b""
            async for part in request.stream:  # type: ignore[union-attr]
                out += conn.h11.send(h11.Data(data=part)) or b""
            out += conn.h11.send(h11.EndOfMessage()) or b""
        except h11.LocalProtocolError as exc:  # a body longer or shorter than its Content-Length: nothing written yet
            raise RequestNotSent(f"the request was not sent: {exc}") from exc
        try:
            await conn.write(out, timeout)
        except httpx2.WriteError:
            # As httpcore2 does: a server may close early and still answer (an error reply); read what it sent.
            pass

    def _take(self, origin: tuple[str, str, int]) -> _Conn | None:
        idle = self._idle.get(origin)
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            if conn.reusable and now - conn.idle_since < self.idle_s:
                conn.reused = True
                return conn
            conn.close()
        return None

    async def _connect(self, origin: tuple[str, str, int], timeout: float | None) -> _Conn:
        scheme, host, port = origin
        loop = asyncio.get_running_loop()
        conn = _Conn(origin)
        try:
            async with asyncio.timeout(timeout):
                await loop.create_connection(
                    lambda: conn,
                    host,
                    port,
                    ssl=_tls() if scheme == "https" else None,
                    server_hostname=host if scheme == "https" else None,
                )
        except TimeoutError:
            conn.close()
            raise httpx2.ConnectTimeout(f"cannot connect to {host}:{port} within {timeout:g}s") from None
        except (OSError, ssl.SSLError) as exc:
            conn.close()
            raise httpx2.ConnectError(f"cannot connect to {host}:{port}: {exc}") from exc
        self.connections += 1
        return conn

    def _release(self, conn: _Conn, *, keep: bool) -> None:
        self._busy.discard(conn)
        conn.busy = False
        if conn.h11.their_state in (h11.DONE, h11.MUST_CLOSE, h11.CLOSED):
            self.replies += 1
        clean = keep and conn.finished_cleanly()
        idle = self._idle.setdefault(conn.origin, [])
        if clean and not self.closed and len(idle) < self.max_idle:
            conn.h11.start_next_cycle()
            conn.idle_since, conn.reused = time.monotonic(), False
            idle.append(conn)
        else:
            conn.close()

    async def aclose(self) -> None:
        """Close every connection; one in use is closed when its reply is released (never pooled after this)."""
        self.closed = True
        for idle in self._idle.values():
            while idle:
                idle.pop().close()
        for conn in list(self._busy):
            conn.close()


__all__ = ["H11Transport", "RequestNotSent", "StaleConnection", "FRESH_CONNECTION", "IDLE_S", "MAX_IDLE"]
