"""The workflow's pure decision functions, without Temporal. Payloads are the ones the real peers send."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from mcp_temporal_tasks.activities.schedule import next_poll_delay
from mcp_temporal_tasks.protocol.tasks import RpcErrorInfo
from mcp_temporal_tasks.workflows.decisions import (
    after_submit_failure,
    classify_failure,
    decide_replay,
    not_found_outcome,
    parse_retry_after_text,
    replay_reason,
    retrieval_budget_s,
    terminal_outcome,
)
from mcp_temporal_tasks.workflows.records import Classification, Outcome, ReplayPolicy, Stage

pytestmark = pytest.mark.fast

# Real payloads, as captured from the peers (tests/peers/ts, demo/server.py).
TS_429 = {
    "content": [{"type": "text", "text": "HTTP 429 Too Many Requests: rate limit exceeded; retry-after=30"}],
    "isError": True,
}
TS_REQUIRED = {
    "content": [
        {
            "type": "text",
            "text": "MCP error -32601: Tool required_echo requires task augmentation (taskSupport: 'required')",
        }
    ],
    "isError": True,
}
RPC_INVALID = RpcErrorInfo(code=-32602, message="invalid account id: acct-0")
FASTMCP_VALIDATION = {
    "content": [
        {"type": "text", "text": "1 validation error for call[charge_card]\namount_cents\n  Missing required argument"}
    ],
    "isError": True,
}


def text(t: str) -> dict:
    return {"content": [{"type": "text", "text": t}], "isError": True}


@pytest.mark.parametrize(
    "result, error, status, expected, retry_after",
    [
        (TS_429, None, None, Classification.RETRYABLE, 30.0),
        (text("Rate limit reached. Retry-After: 12"), None, None, Classification.RETRYABLE, 12.0),
        (text("too many requests, retry after 500 ms"), None, None, Classification.RETRYABLE, 0.5),
        (
            {"content": [], "structuredContent": {"error": "quota exceeded", "retryAfter": 7}, "isError": True},
            None,
            None,
            Classification.RETRYABLE,
            7.0,
        ),
        (text("upstream returned 503 Service Unavailable"), None, None, Classification.RETRYABLE, None),
        (text("request timed out after 30s"), None, None, Classification.RETRYABLE, None),
        (text("HTTP 401 Unauthorized: invalid token"), None, None, Classification.AUTHORIZATION_REQUIRED, None),
        (text("permission denied for repo acme/infra"), None, None, Classification.AUTHORIZATION_REQUIRED, None),
        (None, RPC_INVALID, "invalid account id: acct-0", Classification.INPUT_CORRECTABLE, None),
        (FASTMCP_VALIDATION, None, None, Classification.INPUT_CORRECTABLE, None),
        (TS_REQUIRED, None, None, Classification.PERMANENT, None),
        (None, RpcErrorInfo(code=-32601, message="Method not found"), None, Classification.PERMANENT, None),
        (text("the printer is on fire"), None, None, Classification.UNKNOWN, None),
        (None, None, "failed with no payload", Classification.UNKNOWN, None),
    ],
)
def test_classify_failure(result, error, status, expected, retry_after) -> None:
    assert classify_failure(result, error, status) == (expected, retry_after)


def test_forbidden_tool_is_not_an_authorization_problem() -> None:
    assert classify_failure(text("forbidden tool for task execution"), None)[0] != Classification.AUTHORIZATION_REQUIRED
    assert classify_failure(text("403 Forbidden"), None)[0] == Classification.AUTHORIZATION_REQUIRED


def test_retry_after_units() -> None:
    assert parse_retry_after_text("retry-after=30") == 30.0
    assert parse_retry_after_text("Retry after 2 minutes") == 120.0
    assert parse_retry_after_text("no hint") is None


@pytest.mark.parametrize(
    "status, kw, expected",
    [
        ("completed", dict(result={"content": [], "isError": False}), Outcome.COMPLETED),
        ("completed", dict(result=TS_429), Outcome.TOOL_ERROR),  # extension: completed + isError
        ("failed", dict(result=TS_429), Outcome.TOOL_ERROR),  # legacy: failed + stored isError
        ("failed", dict(error=RPC_INVALID), Outcome.FAILED),
        ("cancelled", dict(empty=True), Outcome.CANCELLED),
        ("completed", dict(decode_error="content: Field required"), Outcome.DECODE_FAILED),
        ("completed", dict(empty=True), Outcome.DECODE_FAILED),  # completed work is never "nothing"
    ],
)
def test_terminal_outcome(status, kw, expected) -> None:
    args = dict(result=None, error=None, empty=False, decode_error=None, status_message=None) | kw
    assert terminal_outcome(status, **args)[0] == expected


def test_failed_without_payload_keeps_status_message() -> None:
    outcome, error = terminal_outcome(
        "failed", result=None, error=None, empty=True, decode_error=None, status_message="disk full on build agent 3"
    )
    assert outcome == Outcome.FAILED and error is not None and error.message == "disk full on build agent 3"


@pytest.mark.parametrize(
    "policy, idempotent, used, max_, expected",
    [
        (ReplayPolicy.NEVER, True, 0, 3, "stop"),
        (ReplayPolicy.IF_IDEMPOTENT, True, 0, 1, "replay"),
        (ReplayPolicy.IF_IDEMPOTENT, False, 0, 1, "stop"),
        (ReplayPolicy.IF_IDEMPOTENT, True, 1, 1, "stop"),
        (ReplayPolicy.ALWAYS, False, 0, 1, "replay"),
        (ReplayPolicy.ALWAYS, False, 2, 2, "stop"),
        (ReplayPolicy.WITH_APPROVAL, False, 0, 1, "await_approval"),
        (ReplayPolicy.WITH_APPROVAL, False, 1, 1, "stop"),
    ],
)
def test_decide_replay(policy, idempotent, used, max_, expected) -> None:
    assert decide_replay(policy, idempotent=idempotent, replays_used=used, max_replays=max_) == expected


def test_replay_reasons() -> None:
    assert replay_reason(Stage.GONE, Outcome.LOST, None) == "replay_lost"
    assert replay_reason(Stage.SUBMITTING, Outcome.UNKNOWN_OUTCOME, None) == "replay_unknown_outcome"
    assert replay_reason(Stage.PAYLOAD, Outcome.TOOL_ERROR, Classification.RETRYABLE) == "replay_retryable"
    # Never replayed: finished work, refusals, and failures a replay cannot fix.
    for outcome in (Outcome.COMPLETED, Outcome.CANCELLED, Outcome.DECODE_FAILED, Outcome.REJECTED):
        assert replay_reason(Stage.PAYLOAD, outcome, Classification.RETRYABLE) is None
    assert replay_reason(Stage.PAYLOAD, Outcome.TOOL_ERROR, Classification.INPUT_CORRECTABLE) is None
    # A lost that only means "we could not read it" never replays.
    assert replay_reason(Stage.UNREACHABLE, Outcome.LOST, None) is None


@pytest.mark.parametrize(
    "kind, reached, resends, expected",
    [
        ("TransportError", False, 0, "resend"),  # connection refused: nothing left this machine
        ("TransportError", False, 3, "unreachable"),
        ("TransportError", True, 0, "unknown_outcome"),  # reset after send
        ("TimeoutHEARTBEAT", True, 0, "unknown_outcome"),  # worker died mid-call
        ("InvalidParams", True, 0, "rejected"),
        ("MethodNotFound", True, 0, "rejected"),
        ("AuthorizationRequired", False, 0, "rejected"),
        ("SessionGone", False, 0, "resend"),
    ],
)
def test_after_submit_failure(kind, reached, resends, expected) -> None:
    assert after_submit_failure(kind, may_have_reached_server=reached, resends=resends) == expected


def test_next_poll_delay() -> None:
    assert next_poll_delay(500, floor_s=0.1, ceiling_s=30, previous_s=None) == 0.5
    assert next_poll_delay(10, floor_s=0.1, ceiling_s=30, previous_s=None) == 0.1  # floor
    # The ceiling never makes us poll sooner than the server asked (the spec allows slower, not faster).
    assert next_poll_delay(600_000, floor_s=0.1, ceiling_s=30, previous_s=None) == 600
    assert next_poll_delay(None, floor_s=0.1, ceiling_s=30, previous_s=None) == 0.5  # silent server: back off
    assert next_poll_delay(None, floor_s=0.1, ceiling_s=30, previous_s=2.0) == 3.0
    assert next_poll_delay(None, floor_s=0.1, ceiling_s=30, previous_s=25.0) == 30


def test_not_found_outcome() -> None:
    now = datetime(2026, 11, 29, 12, 0, 10, tzinfo=UTC)
    assert not_found_outcome("2026-11-29T12:00:00Z", 5_000, now) == Outcome.EXPIRED
    assert not_found_outcome("2026-11-29T12:00:00+00:00", 600_000, now) == Outcome.LOST
    assert not_found_outcome("2026-11-29T12:00:00Z", "unlimited", now) == Outcome.LOST
    assert not_found_outcome(None, 5_000, now) == Outcome.LOST
    assert not_found_outcome("not a date", 5_000, now) == Outcome.LOST


def test_retrieval_budget() -> None:
    now = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)
    assert retrieval_budget_s("2026-11-29T12:00:00Z", 60_000, now, None) == 60
    assert retrieval_budget_s(None, None, now, now + timedelta(seconds=20)) == 20
    assert retrieval_budget_s(None, None, now, None) == 3600
    assert retrieval_budget_s("2026-11-29T11:00:00Z", 1_000, now, None) == 5  # floor: always try a little
