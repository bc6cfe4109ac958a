"""The activity options of ``McpTaskWorkflow``: one preset per kind of step, and the retry budget of a read.

How often and for how long a step is retried; which failures are worth it, each failure says itself.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio.common import RetryPolicy
from temporalio.workflow import ActivityConfig

# Activity presets. Which failures are worth retrying is said by each error itself (``non_retryable``, from the
# wire error's ``retryable`` flag: activities.failure_encoding.to_application_error), not listed here again.
#: tools/call: one attempt. Whether a failed send may be repeated is the workflow's decision, never a retry's.
SUBMIT = ActivityConfig(retry_policy=RetryPolicy(maximum_attempts=1))
#: Waiting on a task (poll, relay): retried while the worker dies or the server hiccups, bounded by the caller.
WAIT = ActivityConfig(
    retry_policy=RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30))
)
#: Reading a terminal task's payload; the caller bounds it by the task's TTL or the deadline.
RETRIEVE = ActivityConfig(start_to_close_timeout=timedelta(minutes=5))
#: One idempotent request on an existing task (tasks/cancel, tasks/update).
TASK_STEP = ActivityConfig(start_to_close_timeout=timedelta(seconds=60), retry_policy=WAIT["retry_policy"])
#: Waiting on a task with nothing running between polls (``poll_task``): each attempt is one poll, retried at the
#: gap the attempt names (``next_retry_delay``), so the backoff here only paces attempts a worker's death cut short.
#: No schedule-to-close: a deadline is a workflow timer (a retry past schedule-to-close would be refused early).
IDLE_POLL = ActivityConfig(
    start_to_close_timeout=timedelta(minutes=5),
    retry_policy=RetryPolicy(
        initial_interval=timedelta(seconds=1), backoff_coefficient=2.0, maximum_interval=timedelta(seconds=60)
    ),
)
LONG_WAIT = timedelta(days=7)
#: Longest Retry-After honoured before a resend of a tools/call that never reached the tool; a longer one
#: ends the task (``rejected``, ``retryable``, with ``retry_after_s``) so the caller decides when to come back.
MAX_RESEND_DELAY_S = 300.0


def read_budget(budget_s: float, *, max_interval_s: float = 30.0) -> dict[str, Any]:
    """Activity options of a read retried on every fault for ``budget_s``: backoff from 1 s by 2×, its gaps within
    a fifth of the budget, so the last tries are not forfeited (Temporal gives up at once when the next retry
    would start past the schedule-to-close timeout)."""
    return {
        "schedule_to_close_timeout": timedelta(seconds=budget_s),
        "retry_policy": RetryPolicy(
            initial_interval=timedelta(seconds=1),
            backoff_coefficient=2.0,
            maximum_interval=timedelta(seconds=max(1.0, min(max_interval_s, budget_s / 5))),
        ),
    }
