"""What a server's replies hold, read within bounds: a task object, input requests, a plain ``CallToolResult``.

Era-neutral: each era's room (:mod:`.eras`) says where in its replies these are; this reads them.
"""

from __future__ import annotations

from typing import Any, Literal

from mcp_temporal_tasks.protocol.bounds import MAX_POLL_INTERVAL_MS, MAX_TTL_MS, bounded_int, parse_time, raw_text
from mcp_temporal_tasks.protocol.limits import (
    MAX_TASK_ID,
    STATUS_MESSAGE_CAP,
    TEXT_CAP,
    cap_text,
    carry_problem,
    safe_raw,
)
from mcp_temporal_tasks.protocol.tasks import UNLIMITED, Era, InputRequest, RpcErrorInfo, TaskPayload, TaskState
from mcp_temporal_tasks.protocol.wire_errors import INTERNAL_ERROR, JsonRpcError, ProtocolViolation

_STATUSES = ("working", "input_required", "completed", "failed", "cancelled")
_INPUT_PARAMS_CAP = 64 * 1024
_MAX_INPUT_REQUESTS = 32


def parse_task(obj: Any, era: Era, *, raw: Any = None) -> TaskState:
    """Normalise a task object of either era. Only ``taskId`` and ``status`` are required."""
    if not isinstance(obj, dict):
        raise ProtocolViolation("task is not an object", raw=raw if raw is not None else obj)
    task_id, status = obj.get("taskId"), obj.get("status")
    if not isinstance(task_id, str) or not task_id or status not in _STATUSES:
        raise ProtocolViolation(
            f"task without a valid taskId/status (status={status!r})", raw=raw if raw is not None else obj
        )
    if len(task_id) > MAX_TASK_ID or carry_problem(task_id) is not None:
        raise ProtocolViolation(
            f"task id of {len(task_id)} characters is over {MAX_TASK_ID} or not UTF-8", raw=task_id[:200]
        )

    # Every number and time is bounded here, where it is parsed (:mod:`.bounds`): what is out of range is clamped or
    # ignored, and its raw value kept in ``unusable``.
    unusable: dict[str, str] = {}

    def ttl(key: str) -> int | Literal["unlimited"] | None:
        if key not in obj:
            return None
        value = obj[key]
        if value is None:
            return UNLIMITED
        ms, usable = bounded_int(value, low=0, high=MAX_TTL_MS)
        if not usable:
            unusable[key] = raw_text(value)
        return ms

    def number(*keys: str) -> int | None:
        for key in keys:
            if key not in obj or obj[key] is None:
                continue
            ms, usable = bounded_int(obj[key], low=0, high=MAX_POLL_INTERVAL_MS)
            if not usable:
                unusable[key] = raw_text(obj[key])
            if ms is not None:
                return ms
        return None

    def time(key: str) -> str | None:
        value = obj.get(key)
        if value is None:
            return None
        if parse_time(value) is None:  # not a date-time, or far past or far future: ignored
            unusable[key] = raw_text(value)
            return None
        return str(value)

    error = obj.get("error")
    input_requests = obj.get("inputRequests")
    status_message = obj.get("statusMessage")
    if status_message is not None and not isinstance(status_message, str):
        unusable["statusMessage"] = raw_text(status_message)
    return TaskState(
        task_id=task_id,
        status=status,
        era=era,
        status_message=cap_text(status_message, STATUS_MESSAGE_CAP) if isinstance(status_message, str) else None,
        created_at=time("createdAt"),
        last_updated_at=time("lastUpdatedAt"),
        ttl_ms=ttl("ttlMs") if "ttlMs" in obj else ttl("ttl"),
        poll_interval_ms=number("pollIntervalMs", "pollInterval"),
        result=obj.get("result") if isinstance(obj.get("result"), dict) else None,
        error=_rpc_error_info(error) if isinstance(error, dict) else None,
        input_requests=input_requests_of(input_requests)
        if isinstance(input_requests, dict) and input_requests
        else None,
        unusable=unusable or None,
    )


def _rpc_error_info(error: dict[str, Any]) -> RpcErrorInfo:
    code = error.get("code")
    return RpcErrorInfo(
        code=code if isinstance(code, int) else INTERNAL_ERROR,
        message=cap_text(str(error.get("message", "")), TEXT_CAP),
        data=safe_raw(error.get("data")),
    )


def input_requests_of(obj: dict[str, Any]) -> dict[str, InputRequest]:
    """A server's ``inputRequests`` (key → request), each bounded: it is shown in queries and kept in workflow state."""
    if len(obj) > _MAX_INPUT_REQUESTS:
        raise ProtocolViolation(
            f"{len(obj)} input requests at once (at most {_MAX_INPUT_REQUESTS} are accepted)", raw=list(obj)[:10]
        )
    out = {}
    for key, req in obj.items():
        if not isinstance(req, dict) or not isinstance(req.get("method"), str):
            raise ProtocolViolation(f"input request {key!r} has no method", raw=obj)
        params = req.get("params") or {}
        # Shown in queries and the CLI, and kept in workflow state: bounded like any other server value.
        if len(key) > 256 or not isinstance(params, dict) or safe_raw(params, _INPUT_PARAMS_CAP) is not params:
            raise ProtocolViolation(f"input request {key[:64]!r} is too large, too deep or not UTF-8", raw=obj)
        out[key] = InputRequest(method=req["method"][:128], params=params)
    return out


def payload_from_error(exc: JsonRpcError) -> TaskPayload:
    # exc.message and exc.data are already bounded by McpWireError.
    return TaskPayload(
        error=RpcErrorInfo(
            code=exc.code if exc.code is not None else INTERNAL_ERROR,
            message=exc.message.split(": ", 1)[-1],
            data=exc.data,
        )
    )


def is_call_tool_result(reply: dict[str, Any]) -> bool:
    """A ``tools/call`` reply that is a plain ``CallToolResult`` (not a task, not an input request)."""
    return "content" in reply or "structuredContent" in reply or reply.get("isError") is not None
