"""Reading a failed activity: kind, whether ``tools/call`` may have arrived, a read's last error, attempts taken.

The server's last error is that of a read whose retries ran out.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, TimeoutError

from mcp_temporal_tasks.activities.activity_io import failed_read_error
from mcp_temporal_tasks.protocol.tasks import RpcErrorInfo


def failure_info(err: ActivityError | ApplicationError) -> tuple[str, bool, dict[str, Any]]:
    """(kind, may_have_reached_server, info) of a failed activity, from its typed cause.

    Local activity failures may arrive as the bare ``ApplicationError``, not wrapped in ActivityError.
    """
    cause = err if isinstance(err, ApplicationError) else err.cause
    if isinstance(cause, ApplicationError):
        info = cause.details[0] if cause.details and isinstance(cause.details[0], dict) else {}
        return cause.type or "ApplicationError", bool(info.get("may_have_reached_server", True)), info
    if isinstance(cause, TimeoutError):
        # A worker died or hung mid-call: whatever it sent may have arrived.
        return f"Timeout{cause.type.name if cause.type else ''}", True, {"message": str(cause)}
    return type(cause).__name__ if cause else "ActivityError", True, {"message": str(err)}


def last_read_failure(err: ActivityError) -> tuple[str, dict[str, Any], RpcErrorInfo]:
    """(kind, info, error) of a read whose retries ran out: the last attempt's typed failure, which Temporal
    puts under the timeout when the schedule-to-close budget ended the retries; the error is the server's."""
    cause: BaseException | None = err.cause
    while cause is not None and not isinstance(cause, ApplicationError):
        cause = cause.cause if isinstance(cause, (TimeoutError, ActivityError)) else None
    kind, _, info = failure_info(cause if cause is not None else err)
    message = str(info.get("message") or (cause.message if cause is not None else ""))
    return kind, info, failed_read_error(kind, info.get("code"), message, info.get("data"))


def attempts_text(info: dict[str, Any], since: datetime) -> str:
    attempts = info.get("attempt")
    seconds = (workflow.now() - since).total_seconds()
    return (
        f"{attempts} attempt{'s' if attempts != 1 else ''} over {seconds:.0f}s"
        if isinstance(attempts, int)
        else f"attempts over {seconds:.0f}s"
    )
