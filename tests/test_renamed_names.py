"""Names that explain themselves (issue 41): an old name kept for one release warns and resolves to the new one, and
the example workflow is registered by no worker of ours."""

from __future__ import annotations

import pytest

from mcp_temporal_tasks.activities import wire
from mcp_temporal_tasks.worker.registry import WORKFLOWS
from mcp_temporal_tasks.workflows.mcp_task import McpTaskWorkflow

pytestmark = pytest.mark.fast


def test_the_wire_client_old_name_warns_and_is_the_session() -> None:
    with pytest.warns(DeprecationWarning, match="use WireSession"):
        old = wire.McpTaskClient  # type: ignore[attr-defined]  # old name
    assert old is wire.WireSession
    with pytest.raises(AttributeError):
        wire.NoSuchName  # type: ignore[attr-defined]  # noqa: B018


def test_our_workers_register_the_task_workflow_only() -> None:
    assert WORKFLOWS == [McpTaskWorkflow]
