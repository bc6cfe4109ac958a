"""A small fault-injecting reverse proxy for MCP streamable HTTP (tests only).

``FaultProxy(upstream)`` listens on 127.0.0.1 (a free port), forwards every HTTP request to the upstream MCP
URL and passes replies back, JSON bodies and ``text/event-stream`` streams alike (streams are relayed event by
event, so server→client requests and notifications before the reply get through while the stream is open).
Rules (:meth:`FaultProxy.add`) pick JSON-RPC requests by ``method`` and by their rank among the requests of
that method *counted from the moment the rule was added*; a matching request gets the rule's fault.

It runs its own asyncio loop in a daemon thread, so sync and async tests can both use it. Everything is
bounded: request and reply bodies (``max_body``), every read and write (``io_timeout_s``; upstream streams:
``upstream_read_s`` between chunks), idle keep-alive connections, and the proxy's whole life
(``lifetime_s``: it stops by itself).

Faults (what the client sees):

``Refuse(seconds)``
    not forwarded; the connection is dropped without a reply (every open client connection too) and the
    proxy stops listening for ``seconds`` (connection refused), then listens again on the same port.
``ResetAfterSend()``
    forwarded; the whole reply is read from the upstream, then the client connection is reset (RST).
``Stall(seconds)``
    forwarded; the reply (for SSE: the event carrying the reply id) is held ``seconds``, then delivered.
    ``Stall.held`` counts the replies it has begun holding: the server has answered those.
``Malformed()``
    forwarded; same status and content-type, but the body (SSE: the reply event's data) is not JSON.
``Truncated()``
    forwarded; headers with the full ``Content-Length``, then half the body, then close.
``Status(code, body)``
    forwarded; answered with this HTTP status instead of the reply.
``RateLimit(retry_after_s, header=None)``
    not forwarded; HTTP 429 with ``Retry-After`` (``header``: this exact value instead, an HTTP date or junk).

``Rewrite(fn)``
    forwarded; the JSON-RPC reply message (dict) is replaced by ``fn(message)``, re-encoded as JSON or as the
    SSE event it came in. ``fn`` may return a ``str``/``bytes``: sent as is (for text ``json.dumps`` cannot
    write: 5,000-deep nesting, lone surrogates as raw bytes...).

``FaultProxy.requests`` logs every HTTP request that reached the proxy, faulted or not: ``Seen(at, wall, http,
method, rpc_id, task_id, forwarded)`` (``at``: ``time.monotonic()``, ``wall``: ``time.time()``; ``task_id``: the
JSON-RPC params' ``taskId``).
"""

from __future__ import annotations

import asyncio
import contextlib
import http
import json
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx2

# --- faults ------------------------------------------------------------------------------------------


class Fault:
    """Base of all faults. ``forwarded``: whether the request reaches the upstream."""

    forwarded = True
    #: Faults that need the complete reply before answering (nothing is streamed to the client first).
    buffered = False


@dataclass
class Refuse(Fault):
    seconds: float = 2.0
    forwarded = False


@dataclass
class ResetAfterSend(Fault):
    buffered = True


@dataclass
class Stall(Fault):
    seconds: float = 3.0
    #: Replies this fault has begun to hold (the upstream had answered them), for tests to wait on.
    held: int = 0

    async def hold(self) -> None:
        self.held += 1
        await asyncio.sleep(self.seconds)


@dataclass
class Malformed(Fault):
    pass


@dataclass
class Truncated(Fault):
    buffered = True


@dataclass
class Status(Fault):
    code: int = 500
    body: str = '{"jsonrpc": "2.0", "error": {"code": -32603, "message": "injected by FaultProxy"}, "id": null}'
    buffered = True


@dataclass
class RateLimit(Fault):
    retry_after_s: float = 3
    #: The header's exact value, when not ``retry_after_s`` (an HTTP date, a hostile value).
    header: str | None = None
    forwarded = False


@dataclass(frozen=True)
class Seen:
    """One HTTP request that reached the proxy."""

    at: float
    #: ``time.time()`` then, to compare with Temporal's times (a workflow's close time).
    wall: float
    http: str
    method: str | None
    rpc_id: Any
    task_id: str | None
    forwarded: bool


@dataclass
class Rewrite(Fault):
    fn: Callable[[dict[str, Any]], dict[str, Any] | str | bytes]


@dataclass
class Rule:
    """One rule: requests ``nth .. nth+times-1`` of ``method`` (``"*"``: any request) get ``fault``."""

    method: str
    fault: Fault
    nth: int = 1
    times: int = 1
    #: Requests of ``method`` seen since the rule was added, and how many of them got the fault.
    matched: int = 0
    fired: int = 0
    #: (method, JSON-RPC id) of each request that got the fault.
    hits: list[tuple[str, Any]] = field(default_factory=list)

    def _take(self, method: str, is_request: bool) -> bool:
        if not (self.method == method or (self.method == "*" and is_request)):
            return False
        self.matched += 1
        if self.nth <= self.matched < self.nth + self.times:
            self.fired += 1
            return True
        return False


# --- HTTP plumbing -------------------------------------------------------------------------------------

HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "content-length",
    "content-encoding",
    "host",
    "accept-encoding",
}


class _Drop(Exception):
    """The client connection is to be closed (no reply)."""


class _TooLarge(Exception):
    pass


@dataclass
class _Request:
    method: str
    target: str
    headers: list[tuple[str, str]]
    body: bytes
    keep_alive: bool

    def header(self, name: str) -> str | None:
        name = name.lower()
        return next((v for k, v in self.headers if k.lower() == name), None)


def _rpc_of(body: bytes) -> tuple[str | None, Any, bool]:
    """(method, id, is_request) of a JSON-RPC body; the first message of a batch."""
    try:
        msg = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None, None, False
    if isinstance(msg, list):
        msg = next((m for m in msg if isinstance(m, dict) and "method" in m), None)
    if not isinstance(msg, dict) or not isinstance(msg.get("method"), str):
        return None, None, False
    return msg["method"], msg.get("id"), "id" in msg


def _task_id_of(body: bytes) -> str | None:
    """The ``taskId`` a JSON-RPC request's params name, if any."""
    try:
        msg = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    params = msg.get("params") if isinstance(msg, dict) else None
    task_id = params.get("taskId") if isinstance(params, dict) else None
    return task_id if isinstance(task_id, str) else None


def _split_events(buf: bytearray) -> list[bytes]:
    """Pop complete SSE events (with their terminating blank line) off ``buf``."""
    out = []
    while True:
        positions = [(buf.find(sep), len(sep)) for sep in (b"\r\n\r\n", b"\n\n", b"\r\r")]
        positions = [(i, n) for i, n in positions if i >= 0]
        if not positions:
            return out
        i, n = min(positions)
        out.append(bytes(buf[: i + n]))
        del buf[: i + n]


def _has_boundary(data: bytes) -> bool:
    return b"\n\n" in data or b"\r\r" in data or b"\r\n\r\n" in data


def _event_data(event: bytes) -> str | None:
    lines = event.decode("utf-8", "replace").replace("\r\n", "\n").replace("\r", "\n").split("\n")
    data = [ln[5:].removeprefix(" ") for ln in lines if ln.startswith("data:")]
    return "\n".join(data) if data else None


def _event_with_data(event: bytes, data: bytes) -> bytes:
    """The same event (its other fields kept) with its data replaced."""
    lines = event.decode("utf-8", "replace").replace("\r\n", "\n").replace("\r", "\n").split("\n")
    kept = [ln for ln in lines if ln and not ln.startswith("data:")]
    head = "".join(f"{ln}\n" for ln in kept).encode()
    body = b"".join(b"data: " + part + b"\n" for part in data.split(b"\n"))
    return head + body + b"\n"


def _is_reply(message: Any, rpc_id: Any) -> bool:
    return (
        isinstance(message, dict)
        and "method" not in message
        and message.get("id") == rpc_id
        and ("result" in message or "error" in message)
    )


def _encode(value: dict[str, Any] | str | bytes) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass")
    return json.dumps(value).encode()


MALFORMED = b'{"jsonrpc": "2.0", "result": {"content": [ <<FaultProxy: not JSON>>'


class FaultProxy:
    def __init__(
        self,
        upstream: str,
        *,
        max_body: int = 64 * 1024 * 1024,
        io_timeout_s: float = 30.0,
        upstream_read_s: float = 300.0,
        idle_s: float = 120.0,
        lifetime_s: float = 1800.0,
    ) -> None:
        parts = urlsplit(upstream)
        if parts.scheme != "http":
            raise ValueError(f"only http upstreams are supported: {upstream!r}")
        self.upstream = upstream
        self._path = parts.path or "/"
        self.max_body = max_body
        self.io_timeout_s = io_timeout_s
        self.upstream_read_s = upstream_read_s
        self.idle_s = idle_s
        self.lifetime_s = lifetime_s
        self.port = 0
        self.url = ""
        self._rules: list[Rule] = []
        self._lock = threading.Lock()
        self._seen: Counter[str] = Counter()
        self._forwarded: Counter[str] = Counter()
        #: Every fault applied, in order: (method, fault class name, JSON-RPC id).
        self.log: list[tuple[str, str, Any]] = []
        #: Every HTTP request, in order of arrival (see :class:`Seen`).
        self.requests: list[Seen] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.base_events.Server | None = None
        self._conns: set[asyncio.StreamWriter] = set()
        self._handlers: set[asyncio.Task[None]] = set()
        self._reopen: asyncio.TimerHandle | None = None
        self._http: httpx2.AsyncClient | None = None
        self._stopping = False

    # --- public API (any thread) ----------------------------------------------------------------

    def __enter__(self) -> FaultProxy:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        ready = threading.Event()
        self._loop = asyncio.new_event_loop()

        def run() -> None:
            assert self._loop is not None
            asyncio.set_event_loop(self._loop)
            self._loop.call_soon(ready.set)
            self._loop.run_forever()
            self._loop.close()

        self._thread = threading.Thread(target=run, name="fault-proxy", daemon=True)
        self._thread.start()
        ready.wait(10)
        self._call(self._start())
        self.url = f"http://127.0.0.1:{self.port}{self._path}"

    def stop(self) -> None:
        if self._loop is None or self._thread is None or not self._thread.is_alive():
            return
        with contextlib.suppress(Exception):
            self._call(self._shutdown(), timeout=15)
        with contextlib.suppress(RuntimeError):  # the loop may have stopped (and closed) by itself meanwhile
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def add(self, method: str, fault: Fault, *, nth: int = 1, times: int = 1) -> Rule:
        rule = Rule(method, fault, nth=nth, times=times)
        with self._lock:
            self._rules.append(rule)
        return rule

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()

    def seen(self, method: str) -> int:
        with self._lock:
            return sum(self._seen.values()) if method == "*" else self._seen[method]

    def forwarded(self, method: str) -> int:
        with self._lock:
            return sum(self._forwarded.values()) if method == "*" else self._forwarded[method]

    def down(self, seconds: float) -> None:
        """Stop listening for ``seconds`` (connection refused), dropping open client connections."""
        self._call(self._go_down(seconds))

    # --- loop side ------------------------------------------------------------------------------

    def _call(self, coro: Any, timeout: float = 10.0) -> Any:
        assert self._loop is not None
        if self._thread is None or not self._thread.is_alive():
            coro.close()
            raise RuntimeError("the FaultProxy has stopped (lifetime over or stop() called)")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    async def _start(self) -> None:
        self._http = httpx2.AsyncClient(
            timeout=httpx2.Timeout(self.upstream_read_s, connect=10.0, write=self.io_timeout_s),
            limits=httpx2.Limits(max_keepalive_connections=20),
            follow_redirects=False,
        )
        await self._listen()
        assert self._loop is not None
        self._loop.call_later(self.lifetime_s, lambda: asyncio.ensure_future(self._expire()))

    async def _expire(self) -> None:
        """End of the proxy's lifetime: stop serving and end the loop (the thread exits)."""
        await self._shutdown()
        assert self._loop is not None
        self._loop.stop()

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(
            self._on_connection, "127.0.0.1", self.port, reuse_address=True, limit=1024 * 1024
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def _go_down(self, seconds: float) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._conns):
            writer.transport.abort()
        self._conns.clear()
        if self._reopen is not None:
            self._reopen.cancel()
        assert self._loop is not None

        def reopen() -> None:
            self._reopen = None
            if not self._stopping and self._server is None:
                asyncio.ensure_future(self._listen())

        self._reopen = self._loop.call_later(max(0.0, seconds), reopen)

    async def _shutdown(self) -> None:
        self._stopping = True
        if self._reopen is not None:
            self._reopen.cancel()
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._conns):
            writer.transport.abort()
        for task in list(self._handlers):
            task.cancel()
        if self._handlers:
            await asyncio.wait(list(self._handlers), timeout=5)
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    async def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        self._conns.add(writer)
        try:
            while not self._stopping:
                try:
                    req = await self._read_request(reader)
                except (TimeoutError, asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
                    return
                except _TooLarge:
                    await self._simple(writer, 413, b"request body too large", close=True)
                    return
                if req is None:
                    return
                keep = await self._serve(req, writer)
                if not keep or not req.keep_alive:
                    return
        except (TimeoutError, _Drop, ConnectionError):
            pass
        except asyncio.CancelledError:
            pass
        finally:
            self._conns.discard(writer)
            self._handlers.discard(task)
            with contextlib.suppress(Exception):
                writer.transport.abort() if writer.transport.is_closing() else writer.close()

    async def _read_request(self, reader: asyncio.StreamReader) -> _Request | None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.idle_s)
        except asyncio.IncompleteReadError as exc:
            if not exc.partial:
                return None
            raise
        lines = head.decode("latin-1").split("\r\n")
        method, target, version = lines[0].split(" ", 2)
        headers = []
        for line in lines[1:]:
            if line:
                name, _, value = line.partition(":")
                headers.append((name.strip(), value.strip()))
        hmap = {k.lower(): v for k, v in headers}
        body = b""
        if "chunked" in hmap.get("transfer-encoding", "").lower():
            chunks = []
            size_total = 0
            while True:
                size_line = await asyncio.wait_for(reader.readuntil(b"\r\n"), self.io_timeout_s)
                size = int(size_line.split(b";")[0].strip(), 16)
                if size == 0:
                    await asyncio.wait_for(reader.readuntil(b"\r\n"), self.io_timeout_s)  # (no trailers expected)
                    break
                size_total += size
                if size_total > self.max_body:
                    raise _TooLarge()
                chunks.append(await asyncio.wait_for(reader.readexactly(size + 2), self.io_timeout_s))
            body = b"".join(c[:-2] for c in chunks)
        elif hmap.get("content-length"):
            n = int(hmap["content-length"])
            if n > self.max_body:
                raise _TooLarge()
            body = await asyncio.wait_for(reader.readexactly(n), self.io_timeout_s)
        conn = hmap.get("connection", "").lower()
        keep = "close" not in conn and (version.upper() == "HTTP/1.1" or "keep-alive" in conn)
        return _Request(method=method.upper(), target=target, headers=headers, body=body, keep_alive=keep)

    def _match(self, rpc_method: str | None, is_request: bool) -> Fault | None:
        if rpc_method is None:
            return None
        with self._lock:
            self._seen[rpc_method] += 1
            hit = None
            for rule in self._rules:
                if rule._take(rpc_method, is_request) and hit is None:
                    hit = rule
            return hit.fault if hit else None

    async def _serve(self, req: _Request, writer: asyncio.StreamWriter) -> bool:
        """Answer one request; False when the connection must close."""
        rpc_method, rpc_id, is_request = _rpc_of(req.body) if req.method == "POST" else (None, None, False)
        fault = self._match(rpc_method, is_request)
        with self._lock:
            self.requests.append(
                Seen(
                    time.monotonic(),
                    time.time(),
                    req.method,
                    rpc_method,
                    rpc_id,
                    _task_id_of(req.body) if rpc_method else None,
                    fault is None or fault.forwarded,
                )
            )
        if fault is not None:
            self.log.append((rpc_method or "", type(fault).__name__, rpc_id))
        if isinstance(fault, RateLimit):
            body = json.dumps(
                {"jsonrpc": "2.0", "id": rpc_id, "error": {"code": -32000, "message": "rate limited by FaultProxy"}}
            ).encode()
            secs = fault.retry_after_s
            await self._respond(
                writer,
                429,
                [
                    ("Content-Type", "application/json"),
                    (
                        "Retry-After",
                        fault.header
                        if fault.header is not None
                        else str(int(secs))
                        if float(secs).is_integer()
                        else str(secs),
                    ),
                ],
                body,
            )
            return True
        if isinstance(fault, Refuse):
            await self._go_down(fault.seconds)
            raise _Drop()
        return await self._forward(req, writer, fault, rpc_method, rpc_id)

    async def _forward(
        self, req: _Request, writer: asyncio.StreamWriter, fault: Fault | None, rpc_method: str | None, rpc_id: Any
    ) -> bool:
        assert self._http is not None
        headers = [(k, v) for k, v in req.headers if k.lower() not in HOP_BY_HOP]
        headers.append(("accept-encoding", "identity"))
        origin = urlsplit(self.upstream)
        url = f"{origin.scheme}://{origin.netloc}{req.target if req.target.startswith('/') else '/'}"
        upstream_req = self._http.build_request(
            req.method, url, headers=headers, content=req.body if req.body else None
        )
        if rpc_method is not None:
            with self._lock:
                self._forwarded[rpc_method] += 1
        try:
            resp = await self._http.send(upstream_req, stream=True)
        except (httpx2.ConnectError, httpx2.ConnectTimeout) as exc:
            if rpc_method is not None:
                with self._lock:
                    self._forwarded[rpc_method] -= 1
            await self._simple(writer, 502, f"FaultProxy: upstream unreachable: {exc}".encode(), close=True)
            return False
        except httpx2.HTTPError as exc:
            await self._simple(writer, 502, f"FaultProxy: upstream failed: {exc}".encode(), close=True)
            return False
        try:
            ctype = resp.headers.get("content-type", "").lower()
            out_headers = [(k, v) for k, v in resp.headers.multi_items() if k.lower() not in HOP_BY_HOP]
            if ctype.startswith("text/event-stream"):
                return await self._relay_sse(resp, writer, out_headers, fault, rpc_id)
            body = await self._read_all(resp)
            return await self._deliver(writer, resp.status_code, out_headers, body, fault, rpc_id, sse=False)
        except httpx2.HTTPError:
            raise _Drop() from None
        finally:
            await resp.aclose()

    async def _read_all(self, resp: httpx2.Response) -> bytes:
        buf = bytearray()
        async for chunk in resp.aiter_bytes():
            buf += chunk
            if len(buf) > self.max_body:
                raise _Drop()
        return bytes(buf)

    async def _deliver(
        self,
        writer: asyncio.StreamWriter,
        status: int,
        headers: list[tuple[str, str]],
        body: bytes,
        fault: Fault | None,
        rpc_id: Any,
        *,
        sse: bool,
    ) -> bool:
        """A complete (buffered) reply, with the fault applied."""
        if isinstance(fault, ResetAfterSend):
            self._reset(writer)
            raise _Drop()
        if isinstance(fault, Status):
            text = fault.body.encode()
            ctype = "application/json" if fault.body.lstrip().startswith("{") else "text/plain"
            keep = [(k, v) for k, v in headers if k.lower() == "mcp-session-id"]
            await self._respond(writer, fault.code, keep + [("Content-Type", ctype)], text)
            return True
        if isinstance(fault, Truncated):
            await self._write(writer, self._head(status, headers + [("Content-Length", str(len(body)))]))
            await self._write(writer, body[: len(body) // 2])
            raise _Drop()
        if not sse and fault is not None:
            body = self._transform_json(body, fault, rpc_id)
            if isinstance(fault, Stall):
                await fault.hold()
        await self._respond(writer, status, headers, body)
        return True

    def _transform_json(self, body: bytes, fault: Fault, rpc_id: Any) -> bytes:
        if isinstance(fault, Malformed):
            return MALFORMED
        if isinstance(fault, Rewrite):
            try:
                message = json.loads(body)
            except ValueError:
                return body
            return _encode(fault.fn(message)) if _is_reply(message, rpc_id) or rpc_id is None else body
        return body

    def _transform_event(self, event: bytes, fault: Fault | None, rpc_id: Any) -> tuple[bytes, bool]:
        """(event to send, whether it carries the reply)."""
        data = _event_data(event)
        if data is None or not data.strip():
            return event, False
        try:
            message = json.loads(data)
        except (ValueError, RecursionError):
            return event, False
        if not _is_reply(message, rpc_id):
            return event, False
        if isinstance(fault, Malformed):
            return _event_with_data(event, MALFORMED), True
        if isinstance(fault, Rewrite):
            new = _encode(fault.fn(message))
            return _event_with_data(event, new), True
        return event, True

    async def _relay_sse(
        self,
        resp: httpx2.Response,
        writer: asyncio.StreamWriter,
        headers: list[tuple[str, str]],
        fault: Fault | None,
        rpc_id: Any,
    ) -> bool:
        if fault is not None and fault.buffered:
            # Read up to (and including) the reply event, or the end of the stream; then act on the whole.
            buf = bytearray()
            collected = bytearray()
            async for chunk in resp.aiter_bytes():
                boundary = _has_boundary(bytes(buf[-3:]) + chunk)
                buf += chunk
                done = False
                for event in _split_events(buf) if boundary else []:
                    collected += event
                    if self._transform_event(event, None, rpc_id)[1]:
                        done = True
                if len(collected) + len(buf) > self.max_body:
                    raise _Drop()
                if done:
                    break
            collected += buf
            return await self._deliver(writer, resp.status_code, headers, bytes(collected), fault, rpc_id, sse=True)
        await self._write(writer, self._head(resp.status_code, headers + [("Transfer-Encoding", "chunked")]))
        buf = bytearray()
        async for chunk in resp.aiter_bytes():
            boundary = _has_boundary(bytes(buf[-3:]) + chunk)
            buf += chunk
            if len(buf) > self.max_body:
                raise _Drop()
            if not boundary:  # a large event arriving in many chunks: do not rescan it on every chunk
                continue
            for event in _split_events(buf):
                event, is_reply = self._transform_event(event, fault, rpc_id)
                if is_reply and isinstance(fault, Stall):
                    await fault.hold()
                await self._write(writer, b"%x\r\n%s\r\n" % (len(event), event))
        if buf:
            await self._write(writer, b"%x\r\n%s\r\n" % (len(buf), bytes(buf)))
        await self._write(writer, b"0\r\n\r\n")
        return True

    # --- writing ----------------------------------------------------------------------------------

    @staticmethod
    def _head(status: int, headers: list[tuple[str, str]]) -> bytes:
        try:
            reason = http.HTTPStatus(status).phrase
        except ValueError:
            reason = "Status"
        lines = [f"HTTP/1.1 {status} {reason}"] + [f"{k}: {v}" for k, v in headers]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    async def _write(self, writer: asyncio.StreamWriter, data: bytes) -> None:
        if writer.transport.is_closing():
            raise _Drop()
        writer.write(data)
        await asyncio.wait_for(writer.drain(), self.io_timeout_s)

    async def _respond(
        self, writer: asyncio.StreamWriter, status: int, headers: list[tuple[str, str]], body: bytes
    ) -> None:
        await self._write(writer, self._head(status, headers + [("Content-Length", str(len(body)))]) + body)

    async def _simple(self, writer: asyncio.StreamWriter, status: int, body: bytes, *, close: bool) -> None:
        with contextlib.suppress(Exception):
            await self._respond(
                writer, status, [("Content-Type", "text/plain")] + ([("Connection", "close")] if close else []), body
            )

    @staticmethod
    def _reset(writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()
