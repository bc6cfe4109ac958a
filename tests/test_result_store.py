"""Results too large for history: stored once by content, referenced, and still classified correctly."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcp_temporal_tasks.activities.mcp_activities import McpActivities
from mcp_temporal_tasks.activities.result_store import ResultStore
from mcp_temporal_tasks.protocol.tasks import TaskPayload

pytestmark = pytest.mark.fast


def big(is_error: bool) -> dict:
    return {"content": [{"type": "text", "text": "x" * 2048}], "isError": is_error}


def test_offloaded_tool_error_keeps_is_error(tmp_path: Path) -> None:
    acts = McpActivities(store=ResultStore(tmp_path, inline_limit=1024))
    for is_error in (True, False):
        out = acts.shared.decode(TaskPayload(result=big(is_error)), None)
        assert out.result is None and out.result_ref is not None
        assert out.result_ref["is_error"] is is_error
        assert ResultStore.get(out.result_ref)["isError"] is is_error


def test_store_is_content_addressed_and_verified(tmp_path: Path) -> None:
    store = ResultStore(tmp_path)
    first, second = store.put(big(False)), store.put(big(False))
    assert first == second and len(list(tmp_path.rglob("*.json"))) == 1
    Path(first["uri"][len("file://") :]).write_text('{"tampered": true}')
    try:
        ResultStore.get(first)
    except ValueError as exc:
        assert "does not match its digest" in str(exc)
    else:
        raise AssertionError("a tampered blob was accepted")
