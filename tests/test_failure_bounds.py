"""Every failure we raise fits what Temporal keeps of it.

Temporal keeps the failure of an activity attempt that will be retried only up to 4 KiB
(``limit.mutableStateActivityFailureSize.error``); beyond it the pending activity (UI, ``describe``) shows
"Failure exceeds size limit." instead of the reason. So a retryable failure is cut (message, details, no cause chain)
with the cut said, and a final one keeps the 16 KiB texts the outcome reads. Checked offline on every wire error kind,
and on a real dev server against a server that answers every ``tasks/result`` with a 3 MiB JSON-RPC error.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest
from temporalio.api.failure.v1 import Failure
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError

from mcp_temporal_tasks.activities.failure_encoding import RETRYABLE_MESSAGE_CAP, to_application_error
from mcp_temporal_tasks.activities.wire import Endpoint
from mcp_temporal_tasks.protocol.limits import TEXT_CAP
from mcp_temporal_tasks.protocol.wire_errors import (
    AuthorizationRequired,
    JsonRpcError,
    McpWireError,
    ProtocolViolation,
    RateLimited,
    TransportError,
    error_from_rpc,
)
from mcp_temporal_tasks.workflows.client import outcome_of, start_mcp_task
from mcp_temporal_tasks.workflows.records import McpTaskRequest, Outcome, Timeouts
from tests.scripted_mcp import scripted_mcp, task
from tests.temporal_harness import unique

HUGE = "x" * (3 * 1024 * 1024)
#: Temporal's limit for the failure of an attempt that will be retried.
RETRYABLE_FAILURE_LIMIT = 4 * 1024


def hostile(kind: type[McpWireError]) -> McpWireError:
    if kind is TransportError:
        return TransportError(f"tasks/get: {HUGE}", sent=True, data={"d": HUGE}, raw=HUGE)
    if kind is RateLimited:
        return RateLimited(f"tasks/get: {HUGE}", retry_after_s=5, retry_after_note=HUGE, raw=HUGE)
    if kind is AuthorizationRequired:
        return AuthorizationRequired(f"tasks/get: {HUGE}", status=403, raw=HUGE)
    if kind is JsonRpcError:
        return error_from_rpc({"code": -32603, "message": HUGE, "data": {"d": HUGE}}, method="tasks/result")
    return kind(f"tasks/get: {HUGE}", data={"d": HUGE}, raw=HUGE)


def encoded(err: ApplicationError, depth: int = 12) -> Failure:
    """``err`` as the worker sends it, raised from ``depth`` frames down (a stack trace as long as a real one)."""

    def raise_from(n: int) -> None:
        if n == 0:
            raise err
        raise_from(n - 1)

    try:
        raise_from(depth)
    except ApplicationError as raised:
        failure = Failure()
        pydantic_data_converter.failure_converter.to_failure(raised, pydantic_data_converter.payload_converter, failure)
        return failure
    raise AssertionError("not raised")


@pytest.mark.fast
@pytest.mark.parametrize("kind", [TransportError, RateLimited, ProtocolViolation, AuthorizationRequired, JsonRpcError])
def test_a_retryable_failure_fits_what_temporal_keeps_with_the_cut_said(kind: type[McpWireError]) -> None:
    exc = hostile(kind)
    err = to_application_error(exc, task_read=True)
    assert not err.non_retryable
    failure = encoded(err)
    assert failure.ByteSize() < RETRYABLE_FAILURE_LIMIT - 512, failure.ByteSize()  # room for a deeper stack
    assert failure.message.startswith("tasks/") and "truncated" in failure.message
    assert len(failure.message) <= RETRYABLE_MESSAGE_CAP + 64 and not failure.HasField("cause")


@pytest.mark.fast
def test_a_final_failure_keeps_the_texts_the_outcome_reads() -> None:
    exc = error_from_rpc({"code": -32602, "message": HUGE}, method="tools/call")  # a refused call: not retried
    err = to_application_error(exc)
    assert err.non_retryable and err.details[0]["message"].startswith("tools/call: xxx")
    assert TEXT_CAP <= len(err.details[0]["message"]) <= TEXT_CAP + 64 and err.__cause__ is exc


async def test_a_3_mib_error_on_every_payload_read_shows_its_reason_on_every_attempt(
    client: Client, worker: Any
) -> None:
    """A completed task whose ``tasks/result`` always answers a 3 MiB ``-32603``: a read fault, retried until the
    task's TTL; on the way each attempt's failure names the reason (never "Failure exceeds size limit."); at the end
    the task is ``result_unavailable`` (never replayed), its error cut to 16 KiB."""
    created = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    on = {
        "tools/call": lambda m, p: {"task": task(ttl=12_000, createdAt=created)},
        "tasks/get": lambda m, p: task(p["taskId"], "completed", ttl=12_000, createdAt=created),
        "tasks/result": lambda m, p: {"error": {"code": -32603, "message": HUGE}},
    }
    with scripted_mcp(on) as server:
        handle = await start_mcp_task(
            client,
            McpTaskRequest(
                server=Endpoint(url=server.url),
                tool="charge",
                idempotent=True,
                replay="always",
                timeouts=Timeouts(heartbeat_s=2, poll_floor_s=0.05),
            ),
            workflow_id=unique("bounds"),
            task_queue=worker.temporal.task_queue,
        )

        async def attempt_failures() -> list[Any]:
            pending = (await handle.describe()).raw_description.pending_activities
            return [p.last_failure for p in pending if p.HasField("last_failure") and p.attempt >= 3]

        failures: list[Any] = []
        for _ in range(300):
            failures = await attempt_failures()
            if failures:
                break
            await asyncio.sleep(0.1)
        assert failures, "the payload read was never retried"
        last = failures[0]
        assert last.message.startswith("tasks/result:") and "truncated" in last.message, last.message[:200]
        assert last.ByteSize() < RETRYABLE_FAILURE_LIMIT, last.ByteSize()
        out = await asyncio.wait_for(outcome_of(handle), 60)
    assert out.outcome == Outcome.RESULT_UNAVAILABLE and len(out.operation_attempts) == 1 and server.calls == 1
    assert out.error is not None and len(out.error.message) <= TEXT_CAP + 64
