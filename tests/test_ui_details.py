"""Issue 43: every ending readable on the workflow's page in the Temporal UI without opening JSON. The current
details (set when the task ends, a Canceled one too) carry the outcome, the classification, the server's words and
the reason; the failure's message words the classification so it cannot be read as the failure's retry flag."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from mcp_temporal_tasks.protocol.tasks import RpcErrorInfo
from mcp_temporal_tasks.workflows.records import Ledger, McpTaskOutcome, Outcome
from mcp_temporal_tasks.workflows.states import Classification
from mcp_temporal_tasks.workflows.task_error import McpTaskError, finished_details

pytestmark = pytest.mark.fast


def _outcome(**fields: object) -> McpTaskOutcome:
    ledger = Ledger(server="demo", tool="rate_limited", request_digest="sha256:x", created_at=datetime.now(UTC))
    return McpTaskOutcome(workflow_id="w", ledger=ledger, **fields)  # type: ignore[arg-type]


def test_a_failed_tasks_details_and_message_word_the_classification_apart_from_the_retry_flag() -> None:
    outcome = _outcome(
        outcome=Outcome.TOOL_ERROR,
        classification=Classification.RETRYABLE,
        retry_after_s=30,
        error=RpcErrorInfo(code=-32603, message="HTTP 429 Too Many Requests; retry-after=30"),
        task_id="t-1",
        task_status="completed",
    )
    details = finished_details(outcome)
    assert details.startswith("**rate\\_limited** on `demo` ended **tool_error**"), details
    assert (
        "MCP outcome class retryable, retry after 30 s (a new tools/call only as the tool's replay policy "
        "allows; the workflow itself is never retried)" in details
    )
    assert (
        "server: HTTP 429 Too Many Requests; retry\\-after=30" in details and "task t\\-1 · status completed" in details
    )
    error = McpTaskError(outcome)
    assert error.non_retryable and error.message == (
        "MCP task rate_limited on demo ended tool_error (MCP outcome class retryable, retry after 30 s; the workflow "
        "is not retried): HTTP 429 Too Many Requests; retry-after=30"
    )


def test_a_cancelled_tasks_details_name_the_reason_and_the_servers_words() -> None:
    outcome = _outcome(
        outcome=Outcome.CANCELLED,
        reason="cancelled by request",
        task_id="t-2",
        task_status="cancelled",
        status_message="stopped at [step 3](http://evil.example)",
    )
    details = finished_details(outcome)
    assert "ended **cancelled**" in details and "reason: cancelled by request" in details, details
    # Server text cannot add a link (the UI renders markdown): its markup is escaped.
    assert "“stopped at \\[step 3\\]\\(http://evil\\.example\\)”" in details, details


def test_the_ending_memo_is_bounded_and_carries_no_argument() -> None:
    """Issue 57: the memo's ``ending`` (what the UI shows with no worker) keeps each text under its cap, whatever the
    server said, and holds nothing of the request's arguments."""
    from mcp_temporal_tasks.workflows.task_error import ENDING_TEXT_CAP, ending_memo

    words = "too many requests " * 2000
    outcome = _outcome(
        outcome=Outcome.TOOL_ERROR,
        classification=Classification.RETRYABLE,
        retry_after_s=30.0,
        error=RpcErrorInfo(code=-32000, message=words),
        reason="r" * 10_000,
        status_message="s\n" * 5000,
    )
    ending = ending_memo(outcome)
    assert ending["outcome"] == "tool_error" and ending["classification"] == "retryable"
    assert ending["retry_after_s"] == 30.0 and str(ending["server_says"]).startswith("too many requests")
    texts = [v for v in ending.values() if isinstance(v, str)]
    assert all(len(t) <= ENDING_TEXT_CAP and "\n" not in t for t in texts), texts
    assert set(ending) == {
        "outcome",
        "classification",
        "retry_after_s",
        "server_says",
        "reason",
        "task_status",
        "status_message",
        "tool",
        "server",
    }
