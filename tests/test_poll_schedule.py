"""The age-aware poll schedule, as plain functions: no Temporal, no server.

The bounds asserted here are the issue's: after a task's first minute, at most 1/20 of the polls that
polling at ``pollInterval`` would cost; every task seen within max(pollInterval, 5 % of its age); never a
poll sooner than the server's ``pollInterval``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from mcp_temporal_tasks.activities.activity_io import PollSchedule
from mcp_temporal_tasks.activities.schedule import MAX_HONOURED_POLL_INTERVAL_S, next_poll_delay, task_age_s
from mcp_temporal_tasks.worker.config import ConfigError, server_config

pytestmark = pytest.mark.fast

DEFAULT = PollSchedule()


def poll_times(
    poll_ms: int | None, horizon_s: float, schedule: PollSchedule = DEFAULT, ceiling_s: float = 30.0
) -> list[float]:
    """Ages at which the activity's loop would poll a task that never ends, from its creation."""
    t, previous, times = 0.0, None, [0.0]
    while t < horizon_s:
        previous = next_poll_delay(
            poll_ms, floor_s=0.1, ceiling_s=ceiling_s, previous_s=previous, age_s=t, schedule=schedule
        )
        t += previous
        times.append(t)
    return times


@pytest.mark.parametrize("poll_ms", [100, 500, 1000])
def test_an_hour_of_waiting_costs_a_twentieth_of_the_polls_after_the_first_minute(poll_ms: int) -> None:
    times = poll_times(poll_ms, 3600)
    after_first_minute = [t for t in times if 60 <= t <= 3600]
    at_interval = (3600 - 60) / (poll_ms / 1000)
    assert len(after_first_minute) <= at_interval / 20, (len(after_first_minute), at_interval)
    # The first minute is polled at the server's pace: a 5 s task is still seen within its pollInterval.
    assert len([t for t in times if t < 60]) == pytest.approx(60 / (poll_ms / 1000), abs=2)


@pytest.mark.parametrize("poll_ms", [100, 500, 5000])
def test_every_task_is_seen_within_its_interval_or_five_percent_of_its_age(poll_ms: int) -> None:
    times = poll_times(poll_ms, 24 * 3600, schedule=PollSchedule(max_interval_s=24 * 3600))
    for seen_before, seen_after in zip(times, times[1:], strict=False):
        # Worst case: the task ended just after a poll, at age `seen_before`.
        assert seen_after - seen_before <= max(poll_ms / 1000, 0.05 * seen_before) + 1e-9
    # A task that ends after 40 minutes is delivered within 2.
    ended = 40 * 60
    delivered = next(t for t in times if t >= ended)
    assert delivered - ended <= 120


def test_never_sooner_than_the_servers_interval_even_above_our_ceiling() -> None:
    assert next_poll_delay(60_000, floor_s=0.1, ceiling_s=30, previous_s=None, age_s=0, schedule=DEFAULT) == 60
    assert next_poll_delay(60_000, floor_s=0.1, ceiling_s=30, previous_s=None, age_s=1200, schedule=DEFAULT) == 60
    # An absurd interval is honoured up to an hour, not a day.
    day = next_poll_delay(86_400_000, floor_s=0.1, ceiling_s=30, previous_s=None, age_s=10, schedule=DEFAULT)
    assert day == MAX_HONOURED_POLL_INTERVAL_S


def test_a_changed_interval_is_honoured_at_the_next_poll() -> None:
    slow = next_poll_delay(5_000, floor_s=0.1, ceiling_s=30, previous_s=0.5, age_s=10, schedule=DEFAULT)
    fast = next_poll_delay(200, floor_s=0.1, ceiling_s=30, previous_s=slow, age_s=12, schedule=DEFAULT)
    assert (slow, fast) == (5.0, 0.2)


def test_the_stretch_is_capped_and_can_be_turned_off() -> None:
    capped = next_poll_delay(500, floor_s=0.1, ceiling_s=30, previous_s=None, age_s=10 * 24 * 3600, schedule=DEFAULT)
    assert capped == DEFAULT.max_interval_s
    flat = PollSchedule(age_fraction=0)
    assert next_poll_delay(500, floor_s=0.1, ceiling_s=30, previous_s=None, age_s=7200, schedule=flat) == 0.5
    # Without a schedule (an older caller) the old behaviour holds: pollInterval within floor and ceiling.
    assert next_poll_delay(500, floor_s=0.1, ceiling_s=30, previous_s=None) == 0.5


def test_a_silent_server_backs_off_and_old_tasks_still_stretch() -> None:
    first = next_poll_delay(None, floor_s=0.1, ceiling_s=30, previous_s=None, age_s=0, schedule=DEFAULT)
    second = next_poll_delay(None, floor_s=0.1, ceiling_s=30, previous_s=first, age_s=1, schedule=DEFAULT)
    assert (first, second) == (0.5, 0.75)
    assert next_poll_delay(None, floor_s=0.1, ceiling_s=30, previous_s=30, age_s=3600, schedule=DEFAULT) == 180


def test_age_is_our_own_send_time_and_created_at_only_without_one() -> None:
    now = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    ts = now.timestamp()
    ten_min_ago = (now - timedelta(minutes=10)).isoformat().replace("+00:00", "Z")
    two_hours_ago = (now - timedelta(hours=2)).isoformat().replace("+00:00", "Z")
    # A server clock 2 h behind (or local time written with a Z): the task is as old as our tools/call, 5 s.
    assert task_age_s(two_hours_ago, ts - 5, ts) == pytest.approx(5)
    assert task_age_s(ten_min_ago, ts - 900, ts) == pytest.approx(900)
    # Without a send time (none recorded), the server's createdAt is all there is.
    assert task_age_s(ten_min_ago, None, ts) == pytest.approx(600)
    # A createdAt in the future (skewed clock), without a zone, or garbled is ignored.
    future = (now + timedelta(hours=1)).isoformat()
    assert task_age_s(future, None, ts) is None
    assert task_age_s("2026-12-01T11:00:00", None, ts) is None
    assert task_age_s(future, ts - 5, ts) == pytest.approx(5)
    assert task_age_s("yesterday-ish", None, ts) is None
    assert task_age_s(None, None, ts) is None


def test_polling_is_configured_per_server_and_per_tool() -> None:
    cfg = server_config(
        "builds",
        {
            "url": "https://mcp.example.com/mcp",
            "polling": {"after_s": 30, "age_fraction": 0.02},
            "tools": {"deploy": {"polling": {"age_fraction": 0}}},
        },
    )
    assert cfg.polling == PollSchedule(after_s=30, age_fraction=0.02)
    assert cfg.tools["deploy"].polling == PollSchedule(age_fraction=0)
    with pytest.raises(ConfigError, match="age_fraction"):
        server_config("bad", {"url": "https://mcp.example.com/mcp", "polling": {"age_fraction": 2}})
