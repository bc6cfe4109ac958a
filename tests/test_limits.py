"""Bounds on hostile server values, without a server: sizes, depth, encodability, search attributes."""

from __future__ import annotations

import json

import pytest

from mcp_temporal_tasks.activities.wire import ProtocolViolation, ResultDecodeError, decode_result, parse_task
from mcp_temporal_tasks.protocol.limits import (
    CUT_MARKER,
    MAX_TASK_ID,
    STATUS_MESSAGE_CAP,
    cap_text,
    carry_problem,
    loads_bounded,
    safe_raw,
)
from mcp_temporal_tasks.workflows import decisions
from mcp_temporal_tasks.workflows.records import (
    MAX_ARGUMENTS_BYTES,
    Outcome,
    RequestTooLarge,
    check_request_size,
    search_attribute_value,
)

pytestmark = pytest.mark.fast


def nested(depth: int) -> dict:
    value: dict = {"leaf": 1}
    for _ in range(depth):
        value = {"n": value}
    return value


def test_cap_text_marks_what_it_cut_and_replaces_lone_surrogates() -> None:
    assert cap_text("abc", 10) == "abc"
    out = cap_text("x" * 100, 10)
    assert out.startswith("x" * 10) and out.endswith("[truncated 90 chars]")
    fixed = cap_text("a\ud800b")
    fixed.encode("utf-8")  # encodable now
    assert fixed.startswith("a") and fixed.endswith("b")


def test_carry_problem_finds_depth_and_surrogates_iteratively() -> None:
    assert carry_problem({"content": [{"type": "text", "text": "ok"}]}) is None
    assert "deeper" in (carry_problem(nested(300)) or "")
    assert "deeper" in (carry_problem(nested(50_000)) or "")  # no RecursionError in the check itself
    assert "surrogate" in (carry_problem({"text": "\ud800"}) or "")
    assert "surrogate" in (carry_problem({"\udfff": 1}) or "")


def test_safe_raw_always_fits_a_payload() -> None:
    small = {"a": [1, 2]}
    assert safe_raw(small) is small
    deep = safe_raw(nested(300))
    assert isinstance(deep, str) and len(deep) <= 16 * 1024 + 40
    surrogate = safe_raw({"t": "\ud800"})
    assert isinstance(surrogate, str) and "\\ud800" in surrogate
    surrogate.encode("utf-8")


def test_loads_bounded_cuts_what_json_cannot_parse() -> None:
    text = '{"result": ' + "[" * 5000 + "]" * 5000 + ', "status": "completed"}'
    with pytest.raises(RecursionError):
        json.loads(text)
    value = loads_bounded(text)
    assert value["status"] == "completed"  # the rest of the reply is still readable
    assert CUT_MARKER in json.dumps(value)
    assert "deeper" in (carry_problem(value["result"]) or "")


@pytest.mark.parametrize(
    "raw",
    [
        {"content": [{"type": "text", "text": "x"}], "structuredContent": nested(300)},
        {"content": [{"type": "text", "text": "\ud800"}]},
        loads_bounded('{"content": [], "structuredContent": ' + "[" * 5000 + "]" * 5000 + "}"),
    ],
    ids=["300-deep", "lone-surrogate", "5000-deep"],
)
def test_uncarriable_results_are_decode_errors_with_a_capped_raw(raw: dict) -> None:
    with pytest.raises(ResultDecodeError) as info:
        decode_result(raw)
    assert "cannot be carried" in info.value.message
    assert info.value.raw is not None
    json.dumps(info.value.info()).encode("utf-8")  # carriable as Temporal details


def test_parse_task_bounds_status_message_and_task_id() -> None:
    state = parse_task({"taskId": "t1", "status": "working", "statusMessage": "m" * (1024 * 1024)}, "2025-11-25")
    assert state.status_message is not None and len(state.status_message) < STATUS_MESSAGE_CAP + 40
    assert state.status_message.endswith("chars]")
    long_ok = "t" * 10_000  # a 10 KB id is accepted; labels and search attributes hash it
    assert parse_task({"taskId": long_ok, "status": "working"}, "2025-11-25").task_id == long_ok
    with pytest.raises(ProtocolViolation):
        parse_task({"taskId": "t" * (MAX_TASK_ID + 1), "status": "working"}, "2025-11-25")


def test_search_attribute_values_stay_under_temporals_limit() -> None:
    assert search_attribute_value("task-1") == "task-1"
    hashed = search_attribute_value("t" * 10_000)
    assert hashed.startswith("sha256:") and len(hashed) == 7 + 64
    assert hashed == search_attribute_value("t" * 10_000)  # stable: findable by computing it


def test_request_size_is_checked_with_the_limit_named() -> None:
    check_request_size({"text": "x" * 1000})
    with pytest.raises(RequestTooLarge, match=str(MAX_ARGUMENTS_BYTES)):
        check_request_size({"text": "x" * (MAX_ARGUMENTS_BYTES + 1)})


@pytest.mark.parametrize(
    "status,outcome",
    [("completed", Outcome.RESULT_UNAVAILABLE), ("failed", Outcome.FAILED), ("cancelled", Outcome.CANCELLED)],
)
def test_a_terminal_task_whose_payload_is_unreadable_is_never_lost(status: str, outcome: Outcome) -> None:
    got, error = decisions.unretrieved_outcome(status, "quota exceeded")
    assert got == outcome and got not in decisions.REPLAYABLE_OUTCOMES
    if status == "failed":
        assert error is not None and error.message == "quota exceeded"
