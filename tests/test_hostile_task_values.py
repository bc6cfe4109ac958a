"""Issue 39's acceptance, as a user runs it: ``mcp-tasks run charge --url … --replay always --idempotent`` against a
scripted 2025-11-25 server whose task records carry a hostile ``ttl`` (10**15 ms) or a ``createdAt`` in year 1 or
9999, and whose ``tasks/get`` #2 and later answer ``-32602`` "no such task".

Before: ``not_found_outcome`` computed ``created + timedelta(milliseconds=ttl)`` in workflow code, which raised
(``date value out of range``) on every workflow task: the workflow never ended and ``run`` said "still WORKING".
Now the values are bounded where they are parsed and the workflow's time arithmetic cannot raise: the task ends
``lost`` (the server says it is gone, its TTL had not run out), replayed once as the policy allows, and the history
holds no ``WorkflowTaskFailed``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType

from mcp_temporal_tasks.workflows.records import McpTaskOutcome
from tests.temporal_harness import address_of, cli, one_json, unique
from tests.wire_scripted_server import GONE_AFTER_FIRST_READ, gone_after_first_read, summary

CASES = GONE_AFTER_FIRST_READ


@pytest.mark.parametrize("case", sorted(CASES))
async def test_a_hostile_task_record_then_not_found_ends_with_an_outcome(temporal_env: Any, case: str) -> None:
    server = await gone_after_first_read(**CASES[case]).start()
    wid = unique(f"hostile-{case}")
    try:
        code, out, err = await cli(
            "run",
            "charge",
            "--url",
            server.url,
            "--replay",
            "always",
            "--idempotent",
            "--args",
            json.dumps({"amount": 42}),
            "--json",
            "--id",
            wid,
            "--address",
            address_of(temporal_env),
            timeout=90,
        )
    finally:
        await server.stop()
    seen = summary(server)
    outcome = McpTaskOutcome.model_validate(one_json(out)) if out.strip() else None
    assert outcome is not None, f"exit {code}, no outcome; {seen}; stderr: {err[-2000:]}"
    assert outcome.outcome.value == "lost", (outcome.outcome.value, outcome.reason, seen)
    assert "gone" in (outcome.reason or ""), outcome.reason
    # --replay always allows one replay (max_replays 1): two tools/call at most, never more.
    calls = len(server.seen("tools/call"))
    assert calls == len(outcome.operation_attempts) == 2, (calls, seen)
    handle = temporal_env.client.get_workflow_handle(wid)
    failed = [
        e async for e in handle.fetch_history_events() if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
    ]
    assert failed == [], (
        f"{len(failed)} WorkflowTaskFailed: {failed[0].workflow_task_failed_event_attributes.failure.message}"
    )
