"""What a JSON-RPC error on a read of an existing task means: the one table (``READ_ERROR_RULES``), exhaustively,
without a server. The fault matrix (``tests/test_faults.py``, "JSON-RPC errors on reads") drives it on real peers."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

from mcp_temporal_tasks.activities.failure_encoding import to_application_error
from mcp_temporal_tasks.protocol.wire_errors import (
    READ_ERROR_RULES,
    AuthorizationRequired,
    InvalidParams,
    JsonRpcError,
    MethodNotFound,
    ProtocolViolation,
    ReadMeaning,
    TaskNotFound,
    TransportError,
    error_from_rpc,
    is_read_fault,
    read_error_meaning,
    read_error_table,
)

pytestmark = pytest.mark.fast

READS = ["tasks/get", "tasks/result", "tasks/cancel", "tasks/update", "tools/call"]  # tools/call: a job's read tools
ERAS = ["2025-11-25", "2026-07-28"]
STATUSES = [None, "working", "input_required", "completed", "failed", "cancelled"]
CODES = [-32602, -32601, -32603, -32600, -32000, -32020, -32021, -32022, -1, 0, 42, 10_000_000, None]


def expected(method: str, era: str, status: str | None, code: int | None) -> ReadMeaning:
    """The rule as docs/faults.md states it, written independently of the table's rows."""
    legacy_result = method == "tasks/result" and era == "2025-11-25"
    if legacy_result and status == "failed":
        return ReadMeaning.FAULT if code == -32601 else ReadMeaning.PAYLOAD
    if legacy_result and status == "cancelled" and code == -32603:
        return ReadMeaning.EMPTY
    if code == -32602 and method.startswith("tasks/"):
        return ReadMeaning.GONE
    return ReadMeaning.FAULT


@pytest.mark.parametrize("method", READS)
def test_every_read_error_has_one_meaning(method: str) -> None:
    for era, status, code in itertools.product(ERAS, STATUSES, CODES):
        assert read_error_meaning(method, code, era=era, status=status) == expected(method, era, status, code), (
            method,
            era,
            status,
            code,
        )


def test_only_the_gone_code_ends_a_poll_and_the_rest_are_faults() -> None:
    gone = [c for c in CODES if read_error_meaning("tasks/get", c) == ReadMeaning.GONE]
    assert gone == [-32602]
    # A job's status tool has no "gone" code in any spec: even -32602 is a fault there (bounded, never a replay).
    assert read_error_meaning("tools/call", -32602) == ReadMeaning.FAULT


@pytest.mark.parametrize("method", ["tasks/get", "tasks/result", "tasks/cancel", "tasks/update"])
def test_error_from_rpc_types_follow_the_table(method: str) -> None:
    assert isinstance(error_from_rpc({"code": -32602, "message": "Task not found"}, method=method), TaskNotFound)
    for code in (-32603, -32000, -32601, 7):
        exc = error_from_rpc({"code": code, "message": "temporarily unavailable"}, method=method)
        assert not isinstance(exc, TaskNotFound) and is_read_fault(exc), (method, code, exc)
    assert not is_read_fault(error_from_rpc({"code": -32602, "message": "gone"}, method=method))


def test_not_reads_keep_their_own_meaning() -> None:
    # tools/call and tasks/list are not reads of one task: -32602 there is the request's own invalid params.
    assert isinstance(error_from_rpc({"code": -32602, "message": "bad"}, method="tools/call"), InvalidParams)
    assert isinstance(error_from_rpc({"code": -32602, "message": "bad cursor"}, method="tasks/list"), InvalidParams)
    assert isinstance(error_from_rpc({"code": -32601, "message": "no"}, method="tasks/get"), MethodNotFound)


def test_activity_failures_are_retryable_exactly_for_faults() -> None:
    fault = error_from_rpc({"code": -32603, "message": "temporarily unavailable, try again"}, method="tasks/get")
    gone = error_from_rpc({"code": -32602, "message": "Task not found"}, method="tasks/get")
    assert to_application_error(fault, task_read=True).non_retryable is False
    assert to_application_error(gone, task_read=True).non_retryable is True
    # The narrow rule (tools/list, tasks/list) still takes a JSON-RPC error as the server's answer.
    assert to_application_error(fault, read=True).non_retryable is True
    assert to_application_error(ProtocolViolation("garbled"), read=True).non_retryable is False
    assert to_application_error(TransportError("reset", sent=True), task_read=True).non_retryable is False
    # Refused credentials on a read of a task that exists: retried within the budget, never "gone"; but before
    # tools/call (not a task read) they end the task rejected at once.
    for refused in (AuthorizationRequired("forbidden", status=403), AuthorizationRequired("no token", status=None)):
        assert is_read_fault(refused) and to_application_error(refused, task_read=True).non_retryable is False
        assert to_application_error(refused).non_retryable is True
    huge = error_from_rpc({"code": -32603, "message": "m" * (3 * 1024 * 1024)}, method="tasks/result")
    assert isinstance(huge, JsonRpcError) and is_read_fault(huge) and len(huge.message) < 64 * 1024


def test_table_ends_with_a_catch_all_fault_row() -> None:
    last = READ_ERROR_RULES[-1]
    assert (last.method, last.era, last.status, last.code, last.meaning) == (None, None, None, None, ReadMeaning.FAULT)


def test_the_docs_show_the_table_as_the_code_has_it() -> None:
    faults = (Path(__file__).parent.parent / "docs" / "faults.md").read_text()
    m = re.search(r"<!-- read-error-table:start -->\n(.*?)\n<!-- read-error-table:end -->", faults, re.S)
    assert m is not None, "docs/faults.md lost its read-error table markers"
    assert m.group(1).strip() == read_error_table()


def test_a_decoded_result_carries_what_the_server_sent_and_no_field_it_did_not() -> None:
    """The SDK model defaults resultType to "complete" (a 2026-07-28 field): a 2025-11-25 result never gains it."""
    from mcp_temporal_tasks.activities.wire import decode_result

    legacy = decode_result({"content": [{"type": "text", "text": "done"}]}, None)
    assert "resultType" not in legacy and legacy["content"] == [{"type": "text", "text": "done"}]
    extension = decode_result({"content": [], "resultType": "complete"}, None)
    assert extension["resultType"] == "complete"
