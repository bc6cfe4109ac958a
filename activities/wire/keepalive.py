"""Kept-alive HTTP/1.1 for the request a waiting worker sends most: ``tasks/get``, a small read.

Why not httpx for it: with 10,000 old tasks waiting, a worker sends ~80 ``tasks/get`` a second, and httpx's layers
(request and response models, pool bookkeeping, anyio streams, the auth flow) cost several times the CPU of the same
request written on a kept-alive socket (``python -m bench.http_read`` prints both): at that rate the difference is
a large part of what holding 10,000 tasks costs a worker.

This module only frames bytes; :class:`~.transport.HttpTransport` decides what a reply means, by the same rules as
for an httpx reply. Bodies framed by ``Content-Length`` or chunked coding are read here, JSON and SSE alike (an SSE
stream up to the event that answers; a stream left open after it is not waited for, its connection is dropped).
Anything else (a body that ends with the connection, a 1xx or 3xx, a request from the server inside the stream) is
refused with :class:`NotPlain` after the connection is dropped, and the transport sends the read again through
httpx, which handles every case, and keeps that server's reads there: ``tasks/get`` reads, so sending one twice,
once per session at most, repeats nothing.
"""

from __future__ import annotations

import asyncio
import os
import ssl
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mcp_temporal_tasks.activities.wire.errors import PayloadUnusable, ProtocolViolation, TransportError
from mcp_temporal_tasks.activities.wire.limits import MAX_REPLY_BYTES

#: A kept-alive connection idle longer than this is closed rather than reused: servers drop idle connections
#: (Node's default keepAliveTimeout is 5 s, uvicorn's 5 s), and a request written into a connection the server
#: is closing is lost.
IDLE_S = 4.0
#: Connections per server session at most; a read that finds none free goes through httpx instead of waiting.
MAX_CONNECTIONS = 32
#: An error body is read up to this much (the rest is dropped with the connection), as on the httpx path.
ERROR_BODY_BYTES = 64 * 1024
#: Reply header block at most (the stream's read limit).
HEAD_BYTES = 64 * 1024
#: ``MCP_TASKS_KEEPALIVE_READS=0`` sends every read through httpx (for comparison, or a server this path
#: misreads: please report it).
SWITCH = "MCP_TASKS_KEEPALIVE_READS"

_ssl_context: ssl.SSLContext | None = None


def _tls() -> ssl.SSLContext:
    """httpx's own default context (its CA bundle, ``SSL_CERT_FILE``): the trust this path gives a server is the
    httpx path's."""
    global _ssl_context
    if _ssl_context is None:
        import httpx2

        _ssl_context = httpx2.create_ssl_context()
    return _ssl_context


class NotPlain(Exception):
    """The reply is not framed as this module reads it; the connection is closed, the request must go through
    httpx."""


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    headers: dict[str, str]  # lower-case names; a repeated header keeps its last value
    body: bytes
    #: For an SSE reply: what ``on_event`` returned for the event that answered (the body is not kept).
    message: Any = None

    def header(self, name: str, default: str = "") -> str:
        return self.headers.get(name, default)


class _Conn:
    __slots__ = ("reader", "writer", "idle_since")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer, self.idle_since = reader, writer, 0.0

    def close(self) -> None:
        try:
            self.writer.close()
        except Exception:  # closing a broken transport must not mask why it broke
            pass


class KeepAliveReads:
    """A small pool of kept-alive HTTP/1.1 connections to one URL, for idempotent JSON POSTs."""

    def __init__(self, url: str, *, max_connections: int = MAX_CONNECTIONS, idle_s: float = IDLE_S) -> None:
        parts = urllib.parse.urlsplit(url)
        self.tls = parts.scheme == "https"
        self.host = parts.hostname or ""
        self.port = parts.port or (443 if self.tls else 80)
        self.target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self.host_header = parts.netloc
        self.max_connections, self.idle_s = max_connections, idle_s
        self._idle: list[_Conn] = []
        self._open = 0
        #: Replies read here and connections opened: what a test or an operator checks the path by.
        self.replies = self.connections = 0
        self.closed = False

    @staticmethod
    def usable(url: str) -> bool:
        """Whether reads to ``url`` may take this path: plain http(s), no credentials in the URL, no proxy that
        httpx would go through (it honours the environment's), and not switched off."""
        if os.environ.get(SWITCH, "1").strip().lower() in ("0", "false", "no", "off"):
            return False
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname or "@" in parts.netloc:
            return False
        proxies = urllib.request.getproxies()
        return not proxies or bool(urllib.request.proxy_bypass(parts.hostname))

    async def post(self, body: bytes, headers: dict[str, str], *, timeout_s: float, connect_s: float,
                   what: str, on_event: Callable[[str], Any]) -> Reply | None:
        """POST ``body``; the reply if it is plainly framed, None if every connection is busy (use httpx).

        An SSE reply is read event by event: ``on_event(data)`` returns the answer (which ends the read) or None
        (an event to skip), or raises (:class:`NotPlain` for an event only httpx can handle, such as a request
        from the server that must be answered).

        Raises :class:`NotPlain` (send it through httpx), :class:`TransportError` (``sent=False`` only when no
        byte of the request can have left: the connection was refused or timed out), :class:`PayloadUnusable`
        (a 2xx body over ``limit``) or :class:`ProtocolViolation` (a reply that is not HTTP). A reused connection
        that turns out closed before any byte of a reply came back is retried once on a new one: servers close
        kept-alive connections whenever they like, and the request is a read."""
        if self.closed:
            return None
        request = self._encode(body, headers)
        conn, reused = self._take()
        if conn is None and self._open >= self.max_connections:
            return None
        stale = f"{what}: the server closed the connection without a reply"
        try:
            async with asyncio.timeout(timeout_s):
                while True:  # twice at most: a reused connection found closed, then a new one
                    if conn is None:
                        conn = await self._connect(connect_s, what)
                    try:
                        return await self._exchange(conn, request, what, on_event)
                    except _StaleConnection:
                        self._drop(conn)
                        conn = None
                        if not reused:
                            raise TransportError(stale, sent=True) from None
                        reused = False
        except TimeoutError:
            sent = conn is not None
            if conn is not None and conn not in self._idle:
                self._drop(conn)
            raise TransportError(f"{what}: no reply within {timeout_s:g}s", sent=sent) from None
        except BaseException:
            if conn is not None and conn not in self._idle:
                self._drop(conn)
            raise

    def _take(self) -> tuple[_Conn | None, bool]:
        now = time.monotonic()
        while self._idle:
            conn = self._idle.pop()
            if now - conn.idle_since < self.idle_s and not conn.reader.at_eof() and not conn.writer.is_closing():
                return conn, True
            self._drop(conn)
        return None, False

    def _drop(self, conn: _Conn) -> None:
        self._open -= 1
        conn.close()

    async def _connect(self, connect_s: float, what: str) -> _Conn:
        self._open += 1
        try:
            async with asyncio.timeout(connect_s):
                reader, writer = await asyncio.open_connection(
                    self.host, self.port, limit=HEAD_BYTES, ssl=_tls() if self.tls else None,
                    server_hostname=self.host if self.tls else None)
        except (OSError, TimeoutError, ssl.SSLError) as exc:
            self._open -= 1
            raise TransportError(f"{what}: cannot connect to {self.host_header}: {type(exc).__name__}: {exc}",
                                 sent=False) from exc
        except BaseException:
            self._open -= 1
            raise
        self.connections += 1
        return _Conn(reader, writer)

    def _encode(self, body: bytes, headers: dict[str, str]) -> bytes:
        fields = {k: v for k, v in headers.items() if k.lower() not in ("host", "content-length")}
        if any("\r" in x or "\n" in x for kv in fields.items() for x in kv):
            raise NotPlain("a header with a line break")  # httpx refuses it, with its own error
        lines = [f"POST {self.target} HTTP/1.1", f"host: {self.host_header}", f"content-length: {len(body)}"]
        lines += [f"{k}: {v}" for k, v in fields.items()]
        try:
            return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
        except UnicodeEncodeError:
            raise NotPlain("a header outside latin-1") from None

    async def _exchange(self, conn: _Conn, request: bytes, what: str, on_event: Callable[[str], Any]) -> Reply:
        try:
            conn.writer.write(request)
            await conn.writer.drain()
            head = await conn.reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as exc:
            if not exc.partial:
                raise _StaleConnection from exc
            raise TransportError(f"{what}: the reply was cut off in its headers", sent=True) from exc
        except (ConnectionError, BrokenPipeError) as exc:
            raise _StaleConnection from exc
        except asyncio.LimitOverrunError as exc:
            raise ProtocolViolation(f"{what}: reply headers exceed {HEAD_BYTES} bytes", raw="") from exc
        except OSError as exc:
            raise TransportError(f"{what}: {type(exc).__name__}: {exc}", sent=True) from exc
        status, headers, keep = _parse_head(head, what)
        body = _Body(conn.reader, headers, what)
        if not 200 <= status < 300 and status < 400 or body.unframed:
            raise NotPlain(f"HTTP {status}, framed by {headers.get('transfer-encoding', 'the connection closing')}")
        try:
            if status >= 400:
                reply = Reply(status, headers, await body.read(ERROR_BODY_BYTES))
                keep = keep and body.done
            elif headers.get("content-type", "").lower().startswith("text/event-stream"):
                message = await _first_answer(body, on_event, what)
                reply = Reply(status, headers, b"", message)
                keep = keep and body.done  # a stream left open after the answer is not waited for
            else:
                reply = Reply(status, headers, await body.read(MAX_REPLY_BYTES, refuse=True))
        except asyncio.IncompleteReadError as exc:
            raise TransportError(f"{what}: reply interrupted after {len(exc.partial)} bytes", sent=True) from exc
        except asyncio.LimitOverrunError as exc:
            raise ProtocolViolation(f"{what}: a chunk header over {HEAD_BYTES} bytes", raw="") from exc
        except OSError as exc:
            raise TransportError(f"{what}: reply interrupted: {type(exc).__name__}: {exc}", sent=True) from exc
        self.replies += 1
        if keep:
            conn.idle_since = time.monotonic()
            self._idle.append(conn)
        else:
            self._drop(conn)
        return reply

    def aclose(self) -> None:
        self.closed = True
        while self._idle:
            self._drop(self._idle.pop())


class _Body:
    """A reply body framed by Content-Length or chunked transfer coding, read in bounded pieces."""

    def __init__(self, reader: asyncio.StreamReader, headers: dict[str, str], what: str) -> None:
        self.reader, self.what = reader, what
        coding = headers.get("transfer-encoding", "").lower()
        self.chunked = coding == "chunked"
        self.left = None if self.chunked else _length(headers.get("content-length"), what)
        #: Neither framing: delimited by the connection closing (or a coding we do not read).
        self.unframed = (bool(coding) and not self.chunked) or (not self.chunked and self.left is None)
        self.done = self.left == 0

    async def piece(self) -> bytes:
        """The next piece of the body; b"" once it is complete."""
        if self.done:
            return b""
        if not self.chunked:
            assert self.left is not None
            data = await self.reader.read(min(self.left, 65536))
            if not data:
                raise asyncio.IncompleteReadError(b"", self.left)
            self.left -= len(data)
            self.done = self.left == 0
            return data
        line = await self.reader.readuntil(b"\r\n")
        try:
            size = int(line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise ProtocolViolation(f"{self.what}: a chunk size {line[:40]!r}", raw="") from None
        if size == 0:
            while await self.reader.readuntil(b"\r\n") != b"\r\n":  # trailers, dropped
                pass
            self.done = True
            return b""
        data = await self.reader.readexactly(size + 2)
        return data[:-2]

    async def read(self, limit: int, *, refuse: bool = False) -> bytes:
        """The whole body, at most ``limit`` bytes: beyond it refused (a reply) or cut (an error body)."""
        parts: list[bytes] = []
        size = 0
        while piece := await self.piece():
            size += len(piece)
            if size > limit:
                if refuse:
                    raise PayloadUnusable(f"{self.what}: reply exceeds {limit} bytes")
                parts.append(piece[: limit - (size - len(piece))])
                break
            parts.append(piece)
        return b"".join(parts)


def _length(value: str | None, what: str) -> int | None:
    if value is None:
        return None
    try:
        length = int(value)
    except ValueError:
        raise ProtocolViolation(f"{what}: Content-Length {value[:40]!r}", raw="") from None
    if length < 0:
        raise ProtocolViolation(f"{what}: Content-Length {length}", raw="")
    return length


async def _first_answer(body: _Body, on_event: Callable[[str], Any], what: str) -> Any:
    """Read SSE events until ``on_event`` returns an answer for one (the stream is bounded as the httpx path bounds
    it: ``MAX_REPLY_BYTES`` in all)."""
    pending = b""
    data: list[str] = []
    size = 0
    while piece := await body.piece():
        size += len(piece)
        if size > MAX_REPLY_BYTES:
            raise PayloadUnusable(f"{what}: a reply event exceeds {MAX_REPLY_BYTES} bytes")
        buf = pending + piece
        held = b"\r" if buf.endswith(b"\r") else b""  # half of a CRLF split across two pieces
        *lines, pending = buf[:len(buf) - len(held)].replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
        pending += held
        for raw in lines:
            line = raw.decode("utf-8", "replace")
            if line:
                field, _, value = line.partition(":")
                if field == "data":
                    data.append(value[1:] if value.startswith(" ") else value)
                continue
            if data and (answer := on_event("\n".join(data))) is not None:
                return answer
            data = []
    raise TransportError(f"{what}: SSE stream ended without a reply", sent=True)


class _StaleConnection(Exception):
    """The connection closed before any byte of a reply: a kept-alive connection the server had dropped."""


def _parse_head(head: bytes, what: str) -> tuple[int, dict[str, str], bool]:
    """(status, headers, whether the connection may be reused) of a reply's header block."""
    try:
        text = head.decode("latin-1")
        status_line, *lines = text[:-4].split("\r\n")
        version, code, *_ = status_line.split(" ", 2)
        status = int(code)
    except ValueError:
        raise ProtocolViolation(f"{what}: the reply is not HTTP: {head[:60]!r}", raw="") from None
    if not version.startswith("HTTP/1.") or not 100 <= status <= 599:
        raise ProtocolViolation(f"{what}: the reply is not HTTP/1.x: {head[:60]!r}", raw="")
    headers: dict[str, str] = {}
    for line in lines:
        name, sep, value = line.partition(":")
        if not sep:
            raise ProtocolViolation(f"{what}: a reply header without a colon: {line[:60]!r}", raw="")
        name = name.strip().lower()
        value = value.strip()
        if name == "content-length" and headers.get(name, value) != value:
            raise ProtocolViolation(f"{what}: two different Content-Length headers", raw="")
        headers[name] = value
    keep = version == "HTTP/1.1" and "close" not in headers.get("connection", "").lower()
    return status, headers, keep
