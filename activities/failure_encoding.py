"""The one mapping from wire failures to Temporal failures (``ApplicationError``), bounded.

Type = the error kind, details = its info; a retrying attempt's failure stays under Temporal's 4 KiB.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import activity
from temporalio.exceptions import ApplicationError

from mcp_temporal_tasks.activities.activity_io import failed_read_error
from mcp_temporal_tasks.activities.wire import McpWireError, RateLimited
from mcp_temporal_tasks.protocol.limits import cap_text, safe_raw
from mcp_temporal_tasks.protocol.tasks import RpcErrorInfo
from mcp_temporal_tasks.protocol.wire_errors import is_read_fault, is_transient_read_error

#: Temporal keeps the failure of an attempt that will be retried only up to 4 KiB
#: (``limit.mutableStateActivityFailureSize.error``); a larger one is replaced by "Failure exceeds size limit." and
#: the reason is lost from the UI and ``describe``. A retryable failure's message is cut to this, ...
RETRYABLE_MESSAGE_CAP = 1024
#: ... each text or value of its details to this (their ``message`` is the failure's own), and it carries no cause
#: chain (the wire error it stands for is in the details): message, details and the stack trace of its raise stay
#: under that limit with room to spare (``tests/test_failure_bounds.py`` measures one on a real server).
RETRYABLE_DETAIL_CAP = 256


def to_application_error(
    exc: McpWireError, *, read: bool = False, task_read: bool = False, sent: bool | None = None
) -> ApplicationError:
    """The one mapping from wire failures to Temporal failures: type = error kind, details = info.

    ``read``: the request was an idempotent read, so a garbled reply is retryable like a transport fault.
    ``task_read``: a read of an existing task (``tasks/*``, a job's status, result or cancel tool): every
    failure :func:`~protocol.wire_errors.is_read_fault` calls a fault is retryable, JSON-RPC errors included, and the
    details say which attempt it was (the workflow reports how many there were).
    ``sent=False``: the failure happened before ``tools/call`` left (discovery, ``tools/list``, connect),
    whatever the failing request itself may have reached: the tool surely did not run.

    A retryable failure is bounded (:data:`RETRYABLE_MESSAGE_CAP`, :data:`RETRYABLE_DETAIL_CAP`, the cut said in the
    text) and suppresses its context: raise it plainly (``raise to_application_error(exc)``), not ``from exc``. A
    final one keeps the wire error's 16 KiB texts (the outcome reads them) and its cause.
    """
    delay = timedelta(seconds=exc.retry_after_s) if isinstance(exc, RateLimited) and exc.retry_after_s else None
    info = exc.info()
    reached = exc.may_have_reached_server if sent is None else sent
    info["may_have_reached_server"] = reached
    message = exc.message
    if sent is False:
        message = f"tools/call was never sent: {message}"
        info["message"] = message
    retryable = exc.retryable or (read and is_transient_read_error(exc)) or (task_read and is_read_fault(exc))
    if task_read and activity.in_activity():
        info["attempt"] = activity.info().attempt
    if retryable:
        message = cap_text(message, RETRYABLE_MESSAGE_CAP)
        info.pop("message", None)
        info = {
            k: cap_text(v, RETRYABLE_DETAIL_CAP)
            if isinstance(v, str)
            else safe_raw(v, RETRYABLE_DETAIL_CAP)
            if isinstance(v, (dict, list))
            else v
            for k, v in info.items()
        }
    err = ApplicationError(message, info, type=exc.kind, non_retryable=not retryable, next_retry_delay=delay)
    if retryable:
        err.__suppress_context__ = True
    else:
        err.__cause__ = exc
    return err


def read_error_info(exc: McpWireError) -> RpcErrorInfo:
    """The server's last answer to a read that kept failing (the wire error's message and data are capped)."""
    return failed_read_error(exc.kind, exc.code, exc.message, exc.data)
