"""A scripted HTTP/1.1 MCP server: every reply is exact bytes, on kept-alive connections, for the wire's tests.

Requests are parsed by h11 (a maintained parser: what we receive is our own client's, and must be read right);
replies are written as raw bytes, whatever they are, so a test can send what no library would: broken chunk
sizes, a stale reply after a good one on the same connection, a 96 MiB chunk written piece by piece. Every
request is recorded with the id of the connection it came on (``requests``), so a test can tell whether the
client dropped a connection after a fault.

Two uses:

* :class:`ScriptedMcpServer` with a ``reads`` script: ``initialize`` answered plainly (with ``Mcp-Session-Id``),
  each ``tasks/get`` by ``reads(message)`` (tests/test_wire_corpus.py switches it between a good reply and a
  hostile one).
* the acceptance scenario of issue 29 (:func:`acceptance_server`): a 2025-11-25 server with one tool ``charge``
  (``taskSupport: required``) whose ``tasks/get`` replies #2-#4 carry broken chunked framing followed, on the same
  connection, by a stale ``404 Not Found``; then a good ``completed`` and a good ``tasks/result``. It counts
  ``tools/call``. By hand::

      python -m tests.wire_scripted_server --framing 0x5        # prints its URL, serves until Ctrl-C
      mcp-tasks run charge --url http://127.0.0.1:PORT/mcp --replay always --idempotent

  and Ctrl-C prints what it saw (``tools/call: 1`` is the pass).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import signal
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import h11

TASK_ID = "t-1"
SESSION_ID = "sess-scripted"
CREATED = "2026-12-01T00:00:00Z"
RESULT_TEXT = "charged 42"


def task(status: str = "working", task_id: str = TASK_ID, **extra: Any) -> dict[str, Any]:
    return {
        "taskId": task_id,
        "status": status,
        "createdAt": CREATED,
        "lastUpdatedAt": CREATED,
        "ttl": 600000,
        "pollInterval": 100,
        **extra,
    }


def rpc(msg_id: Any, result: Any) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": msg_id, "result": result}).encode()


def rpc_error(msg_id: Any, code: int, message: str) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": msg_id, "error": {"code": code, "message": message}}).encode()


def head(status: str = "200 OK", *headers: str, version: str = "HTTP/1.1") -> bytes:
    """A status line and header lines, exactly as given (no validation: that is the point)."""
    return (f"{version} {status}\r\n" + "".join(f"{h}\r\n" for h in headers) + "\r\n").encode("latin-1")


def json_reply(body: bytes, *extra: str, status: str = "200 OK") -> bytes:
    return head(status, "content-type: application/json", f"content-length: {len(body)}", *extra) + body


def chunked(*chunks: bytes, sizes: list[str] | None = None, end: bytes = b"0\r\n\r\n") -> bytes:
    """Chunked coding of ``chunks``; ``sizes`` replaces the size lines (hostile ones); ``end`` the last chunk."""
    out = b""
    for i, chunk in enumerate(chunks):
        size = sizes[i] if sizes is not None else f"{len(chunk):x}"
        out += size.encode("latin-1") + b"\r\n" + chunk + b"\r\n"
    return out + end


def sse_event(data: bytes, *, event: str = "message", eol: bytes = b"\n") -> bytes:
    return b"event: " + event.encode() + eol + b"data: " + data + eol + eol


STALE_404 = head("404 Not Found", "content-type: text/plain", "content-length: 9") + b"not found"

Then = Literal["keep", "close", "hang"]


@dataclass
class Reply:
    """What the server writes for one request: ``data``, then ``stream`` (large bodies, written in pieces with
    back-pressure), then ``then``: keep the connection for the next request, close it, or hang (say nothing more
    and wait for the client to give up)."""

    data: bytes
    then: Then = "keep"
    stream: Callable[[asyncio.StreamWriter], Awaitable[None]] | None = None
    #: Bytes written after a pause (a stale reply arriving after the good one was read).
    later: bytes = b""
    later_s: float = 0.05


@dataclass
class Seen:
    n: int
    conn: int
    http_method: str
    method: str | None
    msg_id: Any
    tool: str | None = None


#: ``reads(message)``: the reply to one ``tasks/get``.
Reads = Callable[[dict[str, Any]], Reply]


def good_read(message: dict[str, Any], status: str = "working") -> Reply:
    return Reply(json_reply(rpc(message["id"], task(status))))


@dataclass
class ScriptedMcpServer:
    reads: Reads = good_read
    session_id: str = SESSION_ID
    #: tools/call answer (a 2025-11-25 CreateTaskResult by default) and tasks/result answer.
    tools: list[dict[str, Any]] = field(
        default_factory=lambda: [
            {
                "name": "charge",
                "description": "charge a card (scripted)",
                "inputSchema": {"type": "object"},
                "execution": {"taskSupport": "required"},
            }
        ]
    )
    requests: list[Seen] = field(default_factory=list)
    connections: int = 0
    server: asyncio.Server | None = None
    _conn_ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    # --- life -----------------------------------------------------------------------------------------------

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> ScriptedMcpServer:
        self.server = await asyncio.start_server(self._handle, host, port, limit=1 << 20)
        return self

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.server.wait_closed(), 2)

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/mcp"

    def seen(self, method: str) -> list[Seen]:
        return [r for r in self.requests if r.method == method]

    # --- answers --------------------------------------------------------------------------------------------

    def answer(self, message: dict[str, Any]) -> Reply:
        method, msg_id = message.get("method"), message.get("id")
        if msg_id is None:  # a notification
            return Reply(head("202 Accepted", "content-length: 0"))
        if method == "initialize":
            result = {
                "protocolVersion": "2025-11-25",
                "serverInfo": {"name": "scripted", "version": "1"},
                "capabilities": {"tools": {}, "tasks": {"requests": {"tools": {"call": {}}}, "list": {}, "cancel": {}}},
            }
            return Reply(json_reply(rpc(msg_id, result), f"mcp-session-id: {self.session_id}"))
        if method == "tools/list":
            return Reply(json_reply(rpc(msg_id, {"tools": self.tools})))
        if method == "tools/call":
            return Reply(json_reply(rpc(msg_id, {"task": task("working")})))
        if method == "tasks/get":
            return self.reads(message)
        if method == "tasks/result":
            result = {
                "content": [{"type": "text", "text": RESULT_TEXT}],
                "isError": False,
                "_meta": {"io.modelcontextprotocol/related-task": {"taskId": TASK_ID}},
            }
            return Reply(json_reply(rpc(msg_id, result)))
        return Reply(json_reply(rpc_error(msg_id, -32601, f"Method not found: {method}")))

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn_id = next(self._conn_ids)
        self.connections += 1
        leftover = b""
        try:
            while True:
                parser = h11.Connection(h11.SERVER)
                if leftover:  # (receive_data(b"") would mean the connection's end)
                    parser.receive_data(leftover)
                request: h11.Request | None = None
                body = b""
                while True:
                    event = parser.next_event()
                    if event is h11.NEED_DATA:
                        parser.receive_data(await reader.read(65536))
                    elif isinstance(event, h11.Request):
                        request = event
                    elif isinstance(event, h11.Data):
                        body += event.data
                    elif isinstance(event, h11.EndOfMessage) or event is h11.PAUSED:
                        break
                    elif isinstance(event, h11.ConnectionClosed):
                        return
                leftover = parser.trailing_data[0]
                assert request is not None
                if request.method != b"POST":  # DELETE of the session, a GET stream: nothing scripted
                    reply = Reply(head("405 Method Not Allowed", "content-length: 0"))
                    self.requests.append(Seen(len(self.requests) + 1, conn_id, request.method.decode(), None, None))
                else:
                    message = json.loads(body)
                    params = message.get("params") or {}
                    self.requests.append(
                        Seen(
                            len(self.requests) + 1,
                            conn_id,
                            "POST",
                            message.get("method"),
                            message.get("id"),
                            params.get("name"),
                        )
                    )
                    reply = self.answer(message)
                writer.write(reply.data)
                if reply.stream is not None:
                    await reply.stream(writer)
                await writer.drain()
                if reply.later:
                    await asyncio.sleep(reply.later_s)
                    writer.write(reply.later)
                    await writer.drain()
                if reply.then == "close":
                    return
                if reply.then == "hang":
                    while await reader.read(65536):  # until the client gives up and closes
                        pass
                    return
        except (ConnectionError, h11.RemoteProtocolError, json.JSONDecodeError, asyncio.IncompleteReadError):
            return
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


async def pieces(writer: asyncio.StreamWriter, total: int, piece: bytes = b"x" * (1 << 20)) -> None:
    """``total`` bytes of ``piece`` repeated, with back-pressure: a huge body costs the server no memory."""
    left = total
    while left > 0:
        writer.write(piece[:left])
        left -= min(left, len(piece))
        await writer.drain()


# --- the acceptance scenario of issue 29 ----------------------------------------------------------------------

#: Broken chunked framings of a tasks/get reply, each read as garbage by a framing that is not h11's. The body is
#: followed on the same connection by :data:`STALE_404`.
FRAMINGS: dict[str, Callable[[bytes], bytes]] = {
    # "0x5": h11 refuses the size; int(x, 16) reads 5 (the first 5 bytes of the body are taken as all of it).
    "0x5": lambda body: b"0x5\r\n" + body[:5] + b"\r\n0\r\n\r\n",
    # The chunk's data is not followed by CRLF: two bytes of the body are where the CRLF should be.
    "no-crlf": lambda body: f"{len(body) - 2:x}\r\n".encode() + body + b"0\r\n\r\n",
    # A negative size: no chunk size at all for h11; int("-1", 16) is -1.
    "-1": lambda body: b"-1\r\n" + body + b"\r\n0\r\n\r\n",
    # A sign: "+5" is no chunk size either; int("+5", 16) is 5.
    "+5": lambda body: b"+5\r\n" + body[:5] + b"\r\n0\r\n\r\n",
}


def broken_read(message: dict[str, Any], framing: str) -> Reply:
    body = FRAMINGS[framing](rpc(message["id"], task("working")))
    return Reply(head("200 OK", "content-type: application/json", "transfer-encoding: chunked") + body + STALE_404)


def acceptance_server(framing: str, *, broken: tuple[int, ...] = (2, 3, 4)) -> ScriptedMcpServer:
    """tasks/get #1 working, #2-#4 broken framing + stale 404 on the same connection, then completed."""
    server = ScriptedMcpServer()

    def reads(message: dict[str, Any]) -> Reply:
        n = len(server.seen("tasks/get"))  # this one is recorded already
        if n in broken:
            return broken_read(message, framing)
        return good_read(message, "working" if n < max(broken, default=0) else "completed")

    server.reads = reads
    return server


# --- the acceptance scenario of issue 39 ----------------------------------------------------------------------


def gone_after_first_read(**fields: Any) -> ScriptedMcpServer:
    """A 2025-11-25 server whose task records (the ``tools/call`` reply and ``tasks/get`` #1) carry ``fields`` (a
    hostile ``ttl``, a ``createdAt`` in year 1 or 9999, ...) and whose ``tasks/get`` #2 and later answer ``-32602``
    "no such task". Issue 39: the workflow must end with an outcome saying so, never fail its workflow task."""

    class Server(ScriptedMcpServer):
        def answer(self, message: dict[str, Any]) -> Reply:
            if message.get("method") == "tools/call" and message.get("id") is not None:
                return Reply(json_reply(rpc(message["id"], {"task": task("working", **fields)})))
            return super().answer(message)

    server = Server()

    def reads(message: dict[str, Any]) -> Reply:
        if len(server.seen("tasks/get")) >= 2:
            return Reply(json_reply(rpc_error(message["id"], -32602, "no such task")))
        return Reply(json_reply(rpc(message["id"], task("working", **fields))))

    server.reads = reads
    return server


def summary(server: ScriptedMcpServer) -> str:
    counts: dict[str, int] = {}
    for r in server.requests:
        counts[r.method or r.http_method] = counts.get(r.method or r.http_method, 0) + 1
    return (
        f"connections: {server.connections}; "
        + ", ".join(f"{k}: {v}" for k, v in counts.items())
        + f"; tools/call: {counts.get('tools/call', 0)}"
    )


#: Issue 39's scenarios (``--gone-after-first-read NAME``): the task record's hostile fields.
GONE_AFTER_FIRST_READ: dict[str, dict[str, Any]] = {
    "ttl-1e15": {"ttl": 10**15},
    "created-year-1": {"ttl": 10**15, "createdAt": "0001-01-01T00:00:00Z"},
    "created-year-9999": {"ttl": 10**15, "createdAt": "9999-12-31T23:59:59Z"},
}


async def _serve(args: argparse.Namespace) -> None:
    if args.gone_after_first_read:
        fields = GONE_AFTER_FIRST_READ[args.gone_after_first_read]
        server = await gone_after_first_read(**fields).start(port=args.port)
        print(
            f"scripted MCP server (task records {json.dumps(fields)}; tasks/get #2 and later -32602): {server.url}",
            flush=True,
        )
    else:
        server = await acceptance_server(args.framing).start(port=args.port)
        print(
            f"scripted MCP server ({args.framing} framing on tasks/get #2-#4, then a stale 404): {server.url}",
            flush=True,
        )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop()
    print(summary(server), flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.wire_scripted_server", description=__doc__.split("\n")[0])
    parser.add_argument("--framing", choices=sorted(FRAMINGS), default="0x5")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument(
        "--gone-after-first-read",
        choices=sorted(GONE_AFTER_FIRST_READ),
        help="issue 39: hostile task records, then -32602 from tasks/get #2 on",
    )
    asyncio.run(_serve(parser.parse_args(argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
