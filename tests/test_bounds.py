"""Issue 39: every number and time a server sends is bounded where it is parsed (``parse_task``), and the workflow's
time arithmetic (``decisions``) cannot raise whatever a history holds. Pure: no server, no Temporal."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from mcp_temporal_tasks.activities.wire.session import parse_task
from mcp_temporal_tasks.protocol.bounds import MAX_POLL_INTERVAL_MS, MAX_TTL_MS, parse_time, shifted
from mcp_temporal_tasks.workflows import decisions
from mcp_temporal_tasks.workflows.states import Outcome

pytestmark = pytest.mark.fast

NOW = datetime(2026, 12, 3, tzinfo=UTC)
HOSTILE: list[Any] = [
    10**15,
    10**400,
    -1,
    -(10**400),
    math.nan,
    math.inf,
    -math.inf,
    1e308,
    "600000",
    True,
    [],
    {},
    0.5,
]
TIMES: list[Any] = [
    "0001-01-01T00:00:00Z",
    "9999-12-31T23:59:59Z",
    "9999-12-31T23:59:59-05:00",
    "not a date",
    "2026-13-45T00:00:00Z",
    12345,
    None,
    "x" * 10_000,
]


@pytest.mark.parametrize("value", HOSTILE, ids=repr)
@pytest.mark.parametrize("era", ["2025-11-25", "2026-07-28"])
def test_hostile_numbers_are_clamped_or_ignored_with_the_raw_value_kept(value: Any, era: str) -> None:
    for ttl_key in ("ttl", "ttlMs"):
        task = parse_task({"taskId": "t", "status": "working", ttl_key: value, "pollInterval": value}, era)  # type: ignore[arg-type]
        assert task.ttl_ms is None or (isinstance(task.ttl_ms, int) and 0 <= task.ttl_ms <= MAX_TTL_MS)
        assert task.poll_interval_ms is None or 0 <= task.poll_interval_ms <= MAX_POLL_INTERVAL_MS
        usable = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= MAX_POLL_INTERVAL_MS
        assert (task.unusable is None) == usable, task.unusable
        if task.unusable:
            assert set(task.unusable) <= {ttl_key, "pollInterval"} and all(len(v) <= 65 for v in task.unusable.values())


def test_a_huge_ttl_is_clamped_and_recorded() -> None:
    task = parse_task({"taskId": "t", "status": "working", "ttl": 10**15}, "2025-11-25")
    assert task.ttl_ms == MAX_TTL_MS and task.unusable == {"ttl": "1000000000000000"}


@pytest.mark.parametrize("value", TIMES, ids=lambda v: repr(v)[:30])
def test_times_far_past_far_future_or_not_times_are_ignored(value: Any) -> None:
    task = parse_task({"taskId": "t", "status": "working", "createdAt": value, "lastUpdatedAt": value}, "2025-11-25")
    assert task.created_at is None and task.last_updated_at is None
    assert (task.unusable is None) == (value is None)


@pytest.mark.parametrize("created", TIMES + ["2026-12-01T00:00:00Z", "2026-12-01T00:00:00"], ids=lambda v: repr(v)[:30])
@pytest.mark.parametrize("ttl", HOSTILE + [600_000, "unlimited", None], ids=repr)
def test_the_workflows_time_arithmetic_never_raises(created: Any, ttl: Any) -> None:
    """What an old worker's history may hold (values from before the parser bounded them) must not raise either."""
    for now in (NOW, datetime(1, 1, 1, tzinfo=UTC), datetime.max.replace(tzinfo=UTC)):
        assert decisions.not_found_outcome(created, ttl, now) in (Outcome.LOST, Outcome.EXPIRED)
        budget = decisions.retrieval_budget_s(created, ttl, now, now + timedelta(days=1) if now.year < 9999 else None)
        assert 5.0 <= budget <= 3600.0


def test_not_found_outcome_keeps_its_meaning() -> None:
    created = "2026-12-01T00:00:00Z"
    assert decisions.not_found_outcome(created, 60_000, NOW) == Outcome.EXPIRED
    assert decisions.not_found_outcome(created, 10**15, NOW) == Outcome.LOST  # saturates: never expires
    assert decisions.not_found_outcome(created, "unlimited", NOW) == Outcome.LOST
    assert decisions.not_found_outcome("0001-01-01T00:00:00Z", 10**15, NOW) == Outcome.LOST  # unusable createdAt
    assert decisions.retrieval_budget_s(created, 2 * 86_400_000 + 30_000, NOW, None) == pytest.approx(30.0)


def test_shifted_saturates_instead_of_raising() -> None:
    assert shifted(NOW, ms=10**15) == datetime.max.replace(tzinfo=UTC)
    assert shifted(NOW, ms=-(10**400)) == datetime.min.replace(tzinfo=UTC)
    assert shifted(NOW, ms=math.nan, seconds=2) == NOW + timedelta(seconds=2)
    assert shifted(NOW, ms=1500) == NOW + timedelta(milliseconds=1500)
    assert parse_time("2026-12-01T05:00:00+05:00") == datetime(2026, 12, 1, tzinfo=UTC)


@pytest.mark.parametrize("progress,total", [(math.nan, 1), (math.inf, 10), (1, math.nan), (1, -5), (10**400, 10**400)])
def test_progress_notifications_pass_on_only_finite_numbers(progress: Any, total: Any) -> None:
    from mcp_temporal_tasks.activities.wire.session import _progress_listener

    seen: list[tuple[float, float | None, str | None]] = []
    params: dict[str, Any] = {}
    listen = _progress_listener(params, lambda p, t, m: seen.append((p, t, m)))
    assert listen is not None
    listen(
        {
            "method": "notifications/progress",
            "params": {"progressToken": params["_meta"]["progressToken"], "progress": progress, "total": total},
        }
    )
    for p, t, _ in seen:
        assert math.isfinite(p) and (t is None or (math.isfinite(t) and t >= 0))


@pytest.mark.parametrize("value", [math.inf, math.nan, 1e300, 10**20])
@pytest.mark.parametrize(
    "where",
    [
        "ttl_s",
        "input_timeout_s",
        "timeouts.heartbeat_s",
        "timeouts.input_s",
        "timeouts.idle_gap_s",
        "timeouts.unreachable_s",
    ],
)
def test_a_request_span_no_timer_can_hold_is_refused_when_validated(where: str, value: Any) -> None:
    """The request is input too: workflow code makes timers of these, so they are bounded (the task then ends
    ``rejected`` naming the field, never a workflow task failing forever)."""
    from pydantic import ValidationError

    from mcp_temporal_tasks.workflows.records import MAX_SPAN_S, McpTaskRequest

    raw: dict[str, Any] = {"server": "s", "tool": "t"}
    if where.startswith("timeouts."):
        raw["timeouts"] = {where.split(".")[1]: value}
    else:
        raw[where] = value
    with pytest.raises(ValidationError):
        McpTaskRequest.model_validate(raw)
    ok = McpTaskRequest.model_validate(
        {
            **raw,
            **(
                {"timeouts": {where.split(".")[1]: MAX_SPAN_S}}
                if where.startswith("timeouts.")
                else {where: MAX_SPAN_S}
            ),
        }
    )
    assert ok is not None and timedelta(seconds=MAX_SPAN_S) > timedelta(0)
