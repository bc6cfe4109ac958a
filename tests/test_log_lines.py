"""Issue 43: an expected ending of a task (a typed ``ApplicationError`` our activities raise: ``UnknownServer``...) is
one line in the worker's log; a bug keeps its traceback. The record is made by the SDK's own logger call."""

from __future__ import annotations

import io
import logging

import pytest
import temporalio.activity
from temporalio.exceptions import ApplicationError

from mcp_temporal_tasks.worker.runner import install_typed_failure_filter

pytestmark = pytest.mark.fast


def _logged(exc: BaseException) -> str:
    install_typed_failure_filter()
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    logger = logging.getLogger("temporalio.activity")
    logger.addHandler(handler)
    try:
        try:
            raise exc
        except BaseException:
            # As temporalio/worker/_activity.py logs an activity that failed.
            temporalio.activity.logger.warning(
                "Completing activity as failed", exc_info=True, extra={"__temporal_error_identifier": "ActivityFailure"}
            )
    finally:
        logger.removeHandler(handler)
    return out.getvalue()


def test_a_typed_failure_is_one_line() -> None:
    text = _logged(
        ApplicationError(
            "server 'demo' is not configured\n(configured: none)", type="UnknownServer", non_retryable=True
        )
    )
    assert text.count("\n") == 1 and "Traceback" not in text, text
    assert text.startswith(
        "WARNING temporalio.activity: Completing activity as failed: UnknownServer: server 'demo' "
        "is not configured (configured: none)"
    ), text


def test_a_bug_keeps_its_traceback() -> None:
    text = _logged(KeyError("oops"))
    assert "Traceback" in text and "KeyError: 'oops'" in text, text
