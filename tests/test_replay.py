"""Committed workflow histories must replay under the current code: a non-deterministic change fails here.

Refresh them deliberately (and review the diff) with:
    MCP_TASKS_RECORD_HISTORIES=1 python -m pytest tests/test_workflow.py \
        -k "completed or tool_error or cancel_via or killed"
    MCP_TASKS_RECORD_HISTORIES=1 python -m pytest tests/test_jobs.py -k "result_tools_reply or error_text"
    MCP_TASKS_RECORD_HISTORIES=1 python -m pytest tests/test_waiting.py -k long_heartbeat
    MCP_TASKS_RECORD_HISTORIES=1 python -m pytest tests/test_machine_fakes.py   (histories of scripted activities)
    MCP_TASKS_RECORD_HISTORIES=1 python -m pytest tests/test_push.py -k "ends_the_wait and ts-http"   (a notified wake)

``before_rooms/`` holds one history per run of ``tests/test_machine_fakes.py`` and ``tests/test_call_input_fast.py``,
recorded on ``e065df1``, the code before the workflow's phases became explicit steps (issue 53): every ending site and
every kind of move the fast tier drives, so that the rewrite is held to the commands the old code issued.

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
BEFORE_ROOMS = sorted((Path(__file__).parent / "histories" / "before_rooms").glob("*.json"))

#: An ending site of the machine -> a history of ``before_rooms/`` that ends there.
ENDING_SITES = {
    "completed": "test_a_completed_task_delivers_its_result",
    "tool_error": "test_a_stored_tool_error_ends_tool_error",
    "failed": "test_a_stored_failure_ends_failed_with_the_servers_error",
    "cancelled": "test_a_cancel_sends_tasks_cancel_and_keeps_the_tasks_true_end_settled0-cancelled_",
    "lost": "test_a_wait_that_fails_is_lost_never_replayed",
    "expired": "test_a_task_gone_after_its_ttl_is_expired",
    "unknown_outcome": "test_a_lost_reply_is_unknown_outcome_and_replays_only_by_policy",
    "result_unavailable": "test_a_payload_unreadable_for_its_budget_is_result_unavailable_never_replayed",
    "rejected": "test_a_refused_tools_call_is_rejected_never_replayed",
    "input answered (tasks/update)": "test_input_is_answered_with_tasks_update_then_the_task_completes",
    "input answered (relay)": "test_legacy_input_is_relayed_and_the_relays_payload_ends_the_task",
    "input answered (on tools/call)": "test_answered_with_defaults_then_the_call_goes_on",
    "approval": "test_a_replay_with_approval_waits_for_an_operator",
    "a replay": "test_a_retryable_stored_failure_may_replay",
    "cancelled through Temporal": "test_a_task_cancelled_through_temporal_shows_canceled_with_its_outcome_kept",
    "idle wait": "test_a_wait_whose_polls_are_far_apart_goes_on_with_nothing_running_between_them",
    "notified wake": "test_a_notification_wakes_an_idle_wait_and_the_read_that_follows_decides",
}


def test_the_histories_from_before_the_steps_cover_every_ending_site() -> None:
    names = {p.stem for p in BEFORE_ROOMS}
    assert len(BEFORE_ROOMS) >= 68
    assert {site: stem for site, stem in ENDING_SITES.items() if stem not in names} == {}


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


@pytest.mark.parametrize("path", HISTORIES + BEFORE_ROOMS, ids=lambda p: f"{p.parent.name}/{p.stem}")
async def test_replays_deterministically(path: Path) -> None:
    history = WorkflowHistory.from_json(path.stem, path.read_text())
    # debug_mode: no deadlock detector. A replay checks the commands, not timing: on 2 cores at a load of 5-7, a
    # history's workflow task twice took past the detector's 2 s (its commands replayed when run again).
    replayer = Replayer(workflows=[McpTaskWorkflow], data_converter=pydantic_data_converter, debug_mode=True)
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, f"{path.name}: {result.replay_failure}"
