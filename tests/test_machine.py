"""The state machine's two rules, without Temporal: which ending may justify a replay (every stage × outcome ×
classification), and which phase may follow which (the transition table, the diagrams that show it, and every
ending site naming its stage)."""

from __future__ import annotations

import ast
import itertools
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from mcp_temporal_tasks.workflows import mcp_task
from mcp_temporal_tasks.workflows.decisions import replay_reason
from mcp_temporal_tasks.workflows.records import (
    TRANSITIONS,
    Classification,
    Ending,
    Outcome,
    Phase,
    Stage,
    transition_diagram,
)

pytestmark = pytest.mark.fast

ROOT = Path(__file__).parent.parent
CLASSIFICATIONS = [None, *Classification]


def allowed(stage: Stage, outcome: Outcome, classification: Classification | None) -> str | None:
    """The rule as docs/how-it-works.md and the docstring state it, written out case by case."""
    if stage is Stage.GONE and outcome in (Outcome.LOST, Outcome.EXPIRED):
        return f"replay_{outcome.value}"
    if stage is Stage.SUBMITTING and outcome is Outcome.UNKNOWN_OUTCOME:
        return "replay_unknown_outcome"
    if (
        stage in (Stage.SUBMITTING, Stage.PAYLOAD)
        and outcome in (Outcome.TOOL_ERROR, Outcome.FAILED)
        and classification is Classification.RETRYABLE
    ):
        return "replay_retryable"
    return None


@pytest.mark.parametrize("stage", list(Stage))
def test_the_replay_rule_over_every_stage_outcome_and_classification(stage: Stage) -> None:
    for outcome, classification in itertools.product(Outcome, CLASSIFICATIONS):
        assert replay_reason(stage, outcome, classification) == allowed(stage, outcome, classification), (
            stage,
            outcome,
            classification,
        )


def test_reads_that_failed_never_replay_whatever_the_outcome() -> None:
    for stage in (Stage.REQUEST, Stage.UNREACHABLE, Stage.RETRIEVING, Stage.ERROR_REPLY, Stage.INPUT, Stage.CANCELLING):
        assert all(replay_reason(stage, o, c) is None for o, c in itertools.product(Outcome, CLASSIFICATIONS)), stage


def test_an_ending_without_a_stage_does_not_validate() -> None:
    with pytest.raises(ValueError, match="stage"):
        Ending(outcome=Outcome.LOST)  # type: ignore[call-arg]


def test_every_ending_site_in_the_workflow_names_its_stage() -> None:
    files = [ROOT / "workflows" / "mcp_task.py", *sorted((ROOT / "workflows" / "phases").glob("*.py"))]
    sites = [
        (f.name, n)
        for f in files
        for n in ast.walk(ast.parse(f.read_text()))
        if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "Ending"
    ]
    assert len(sites) >= 20, "the ending sites moved: update this test"
    missing = [f"{name}:{n.lineno}" for name, n in sites if "stage" not in {k.arg for k in n.keywords}]
    assert not missing, f"Ending(...) without stage= at lines {missing}"


def test_done_is_final_and_every_phase_is_reachable_and_can_end() -> None:
    assert TRANSITIONS[Phase.DONE] == frozenset()
    assert set(TRANSITIONS) == set(Phase)
    reached, frontier = {Phase.SUBMITTING}, [Phase.SUBMITTING]
    while frontier:
        for nxt in TRANSITIONS[frontier.pop()]:
            if nxt not in reached:
                reached.add(nxt)
                frontier.append(nxt)
    assert reached == set(Phase)
    for phase in set(Phase) - {Phase.DONE}:
        assert Phase.DONE in TRANSITIONS[phase], phase


def test_replays_start_only_from_phases_where_an_operation_can_end() -> None:
    into_replay = {p for p, nxt in TRANSITIONS.items() if nxt & {Phase.AWAITING_APPROVAL, Phase.REPLAYING}}
    assert into_replay == {
        Phase.SUBMITTING,
        Phase.WORKING,
        Phase.INPUT_REQUIRED,
        Phase.RETRIEVING,
        Phase.AWAITING_APPROVAL,
    }
    assert TRANSITIONS[Phase.REPLAYING] == {Phase.SUBMITTING, Phase.DONE}
    assert not TRANSITIONS[Phase.CANCELLING] & {Phase.AWAITING_APPROVAL, Phase.REPLAYING}  # a cancel never replays


def test_the_diagrams_are_the_table() -> None:
    diagram = transition_diagram()
    assert diagram in (ROOT / "docs" / "how-it-works.md").read_text()
    doc = mcp_task.__doc__ or ""
    assert "\n".join("    " + line for line in diagram.splitlines()) in doc


def test_the_public_types_a_user_needs_are_exported_lazily() -> None:
    import mcp_temporal_tasks as api
    from mcp_temporal_tasks.protocol.tasks import Endpoint
    from mcp_temporal_tasks.worker.config import WorkerSettings
    from mcp_temporal_tasks.workflows.records import TaskView

    assert (api.Endpoint, api.WorkerSettings, api.McpTaskWorkflow, api.TaskView, api.Phase) == (
        Endpoint,
        WorkerSettings,
        mcp_task.McpTaskWorkflow,
        TaskView,
        Phase,
    )
    assert {"Endpoint", "WorkerSettings", "McpTaskWorkflow", "TaskView", "Phase"} <= set(api.__all__)


def test_an_outcome_failure_carries_no_stack_trace_and_a_crash_keeps_its_own() -> None:
    from temporalio.api.failure.v1 import Failure
    from temporalio.converter import DataConverter

    from mcp_temporal_tasks.workflows.records import Ledger, McpTaskOutcome
    from mcp_temporal_tasks.workflows.task_error import McpTaskError, McpTaskFailureConverter

    ledger = Ledger(server="demo", tool="t", request_digest="sha256:0", created_at=datetime.now(UTC))
    outcome = McpTaskOutcome(
        workflow_id="w",
        outcome=Outcome.TOOL_ERROR,
        ledger=ledger,
        result={"content": [{"type": "text", "text": "HTTP 429 Too Many Requests"}], "isError": True},
    )
    from mcp_temporal_tasks.activities.activity_io import STILL_WORKING, WORKER_SHUTDOWN

    converter = McpTaskFailureConverter()
    benign = ApplicationError(
        "working (poll 3; next in 95s)",
        {"status": "working"},
        type=STILL_WORKING,
        next_retry_delay=timedelta(seconds=95),
        category=ApplicationErrorCategory.BENIGN,
    )
    cases = (
        (McpTaskError(outcome), False),
        (RuntimeError("a bug"), True),
        (benign, False),
        (ApplicationError("handing over", type=WORKER_SHUTDOWN), False),
        (ApplicationError("a user's own benign error", type="Other", category=ApplicationErrorCategory.BENIGN), True),
    )
    for exc, traced in cases:
        try:
            raise exc
        except BaseException as raised:  # noqa: BLE001
            failure = Failure()
            converter.to_failure(raised, DataConverter.default.payload_converter, failure)
            assert raised.__traceback__ is not None  # the exception itself keeps its traceback (logs, causes)
        assert bool(failure.stack_trace) is traced, failure
    # Only the stack is left out: the message, type, details and retry delay the UI and the next attempt read are there.
    failure = Failure()
    converter.to_failure(benign, DataConverter.default.payload_converter, failure)
    info = failure.application_failure_info
    assert (failure.message, info.type, info.next_retry_delay.seconds) == (
        "working (poll 3; next in 95s)",
        STILL_WORKING,
        95,
    )
    assert DataConverter.default.payload_converter.from_payloads(info.details.payloads) == [{"status": "working"}]
    assert "HTTP 429 Too Many Requests" in str(McpTaskError(outcome))


@pytest.mark.parametrize(
    "arguments, where",
    [
        ({"note": "x\ud800y"}, "arguments.note"),
        ({"\udfff": 1}, "arguments.<key>"),
        ({"rows": [1, {"b": "\ud834"}]}, "arguments.rows[1].b"),
    ],
)
def test_a_request_that_is_not_unicode_is_refused_naming_where(arguments: dict[str, object], where: str) -> None:
    """A lone surrogate cannot be sent, hashed for the ledger or indexed: refused by name, like any invalid field."""
    from mcp_temporal_tasks.workflows.records import McpTaskRequest

    with pytest.raises(ValueError, match=rf"{re.escape(where)} is not valid Unicode text"):
        McpTaskRequest(server="s", tool="t", arguments=arguments)
    assert McpTaskRequest(server="s", tool="t", arguments={"note": "é 漢 🙂"}).arguments["note"] == "é 漢 🙂"
