"""The worker's log lines for an activity attempt that ended as expected: one line, no traceback."""

from __future__ import annotations

import asyncio
import logging

import pytest
from temporalio.exceptions import ApplicationError

from mcp_temporal_tasks.worker.runner import TypedFailureOneLine

pytestmark = pytest.mark.fast


def record(exc: BaseException) -> logging.LogRecord:
    return logging.LogRecord(
        "temporalio.activity", logging.WARNING, __file__, 1, "Completing activity as failed (%s)", ("x",),
        (type(exc), exc, None),
    )  # fmt: skip


def test_a_typed_failure_and_a_server_cancel_are_one_line_and_a_bug_keeps_its_traceback() -> None:
    one_line = TypedFailureOneLine()
    typed = record(ApplicationError("no such server", type="UnknownServer"))
    cancelled = record(asyncio.CancelledError("Activity cancelled"))
    bug = record(KeyError("oops"))
    assert all(one_line.filter(r) for r in (typed, cancelled, bug))  # nothing is dropped
    assert typed.exc_info is None and "UnknownServer: no such server" in typed.getMessage()
    assert cancelled.exc_info is None and "cancelled by the server" in cancelled.getMessage()
    assert bug.exc_info is not None  # a bug keeps its traceback
