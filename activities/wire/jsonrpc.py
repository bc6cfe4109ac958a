"""JSON-RPC 2.0 as both transports frame it: ids and bodies, a reply's ``result`` or its typed error.

Also the answer to a server's own request, the message an SSE event carries, and the secret scrub every transport
call leaves through (:func:`~protocol.wire_errors.error_from_rpc` types the errors).
"""

from __future__ import annotations

import functools
import itertools
import os
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from mcp_temporal_tasks.activities.wire.redact import scrub_error
from mcp_temporal_tasks.protocol.limits import loads_bounded
from mcp_temporal_tasks.protocol.wire_errors import McpWireError, ProtocolViolation, error_from_rpc

T = TypeVar("T")


def scrubbed(fn: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T]]:
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


def message_from_body(body: Any, *, method: str) -> dict[str, Any]:
    if not isinstance(body, dict) or body.get("jsonrpc") != "2.0":
        raise ProtocolViolation(f"{method}: reply is not a JSON-RPC 2.0 message", raw=body)
    return body


def result_of(message: dict[str, Any], *, method: str) -> dict[str, Any]:
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


def request_body(method: str, params: dict[str, Any] | None) -> tuple[str, dict[str, Any]]:
    """(id, JSON-RPC request) for either transport."""
    msg_id = _Ids.next()
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": msg_id, "method": method}
    if params is not None:
        body["params"] = params
    return msg_id, body


def sse_message(data: str | None, method: str) -> dict[str, Any] | None:
    """The JSON-RPC message an SSE event carries, None for a priming event (no data), whichever path read it."""
    if not data or not data.strip():
        return None
    try:
        return message_from_body(loads_bounded(data), method=method)
    except ValueError as exc:
        raise ProtocolViolation(f"{method}: malformed JSON in SSE event", raw=data) from exc


def json_result(raw_bytes: bytes, method: str, msg_id: str) -> dict[str, Any]:
    """The ``result`` of a JSON reply body (a JSON-RPC error raises its typed error)."""
    try:
        message = loads_bounded(raw_bytes)
    except ValueError as exc:
        raise ProtocolViolation(f"{method}: malformed JSON reply", raw=raw_bytes.decode("utf-8", "replace")) from exc
    message = message_from_body(message, method=method)
    if message.get("id") not in (msg_id, None):  # null id: error raised before the id was read
        raise ProtocolViolation(f"{method}: reply carries id {message.get('id')!r}, not {msg_id!r}", raw=message)
    return result_of(message, method=method)


async def server_reply(message: dict[str, Any], handler: ServerRequestHandler | None) -> dict[str, Any]:
    method = message["method"]
    if handler is None:
        return {
            "jsonrpc": "2.0",
            "id": message["id"],
            "error": {"code": -32601, "message": f"client has no handler for {method}"},
        }
    try:
        result = await handler(method, message.get("params") or {}, message["id"])
        return {"jsonrpc": "2.0", "id": message["id"], "result": result}
    except McpWireError as exc:
        return {"jsonrpc": "2.0", "id": message["id"], "error": {"code": exc.code or -32603, "message": exc.message}}
