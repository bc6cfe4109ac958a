"""Committed workflow histories must replay under the current code: a non-deterministic change fails here.

Refresh them deliberately (and review the diff) with:
    MCP_TASKS_RECORD_HISTORIES=1 python -m pytest tests/test_workflow.py \
        -k "completed or tool_error or cancel_via or killed"
    MCP_TASKS_RECORD_HISTORIES=1 python -m pytest tests/test_jobs.py -k "result_tools_reply or error_text"
    MCP_TASKS_RECORD_HISTORIES=1 python -m pytest tests/test_waiting.py -k long_heartbeat
    MCP_TASKS_RECORD_HISTORIES=1 python -m pytest tests/test_machine_fakes.py   (histories of scripted activities)
    MCP_TASKS_RECORD_HISTORIES=1 python -m pytest tests/test_push.py -k "ends_the_wait and ts-http"   (a notified wake)

``rejected_before_send_counted_one_attempt`` was recorded with the workflow code from before the attempts ledger
counted only calls that may have left (an ``initialize`` refused, counted as one attempt then): the same commands,
so it replays under the code that counts none.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from mcp_temporal_tasks.workflows.mcp_task import McpTaskWorkflow

pytestmark = pytest.mark.fast

HISTORIES = sorted((Path(__file__).parent / "histories").glob("*.json"))


def test_histories_are_committed() -> None:
    names = {p.stem for p in HISTORIES}
    assert {
        "completed_legacy",
        "completed_extension",
        "tool_error_legacy",
        "cancelled_legacy",
        "worker_killed_while_polling",
        "unknown_outcome_never",
        "unknown_outcome_if_idempotent",
        "tool_error_legacy_fails_workflow",
        "job_completed_legacy",
        "job_completed_extension",
        "job_failed_legacy",
        "job_failed_extension",
        "long_wait_legacy",
        "long_wait_extension",
        "result_unavailable_after_read_faults",
        "error_reply_never_replays_legacy",
        "input_undeliverable_lost",
        "cancelled_through_temporal_canceled",
        "rejected_before_tools_call_sent",
        "rejected_before_send_counted_one_attempt",
        "idle_wait_completed",
        "notified_wake",
        "notified_wake_idle",
        "plain_call_input_answered",
        "plain_call_input_declined",
    } <= names


@pytest.mark.parametrize("path", HISTORIES, ids=lambda p: p.stem)
async def test_replays_deterministically(path: Path) -> None:
    history = WorkflowHistory.from_json(path.stem, path.read_text())
    replayer = Replayer(workflows=[McpTaskWorkflow], data_converter=pydantic_data_converter)
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, f"{path.name}: {result.replay_failure}"
