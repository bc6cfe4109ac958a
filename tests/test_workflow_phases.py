"""``McpTaskWorkflow`` and its steps (``workflows/phases/``): the names other code and other languages use stay as they
were, every step is dispatched in one place and no step module imports another, and the patch ids in the code are the
ids of ARCHITECTURE.md's register. No Temporal server: the workflow's definition is read."""

from __future__ import annotations

import ast
import inspect
import re
from typing import get_args

import pytest
from temporalio.workflow import _Definition

from mcp_temporal_tasks.workflows import mcp_task
from mcp_temporal_tasks.workflows.mcp_task import McpTaskWorkflow
from mcp_temporal_tasks.workflows.phases import patches, steps
from tests.doc_pages import REPO_ROOT, section

pytestmark = pytest.mark.fast


def test_the_workflow_keeps_its_names() -> None:
    defn = _Definition.must_from_class(McpTaskWorkflow)
    assert defn.name == "McpTaskWorkflow"
    assert set(defn.signals) == {
        "legacy_input_requested",
        "legacy_input_delivered",
        "mcp_task_notified",
        "mcp_task_consent",
    }
    assert set(defn.queries) == {"status", "legacy_relay_state"}
    assert set(defn.updates) == {"cancel", "approve_replay", "provide_input"}
    assert all(defn.updates[name].validator is not None for name in defn.updates)


def test_every_step_has_its_function_in_the_one_dispatch() -> None:
    """Each step type is dispatched by ``McpTaskWorkflow._take`` (mypy checks the match is exhaustive), and no step
    function's module imports another's (the import-linter contract of the phases): a step hands over by returning
    the next step, never by calling it."""
    source = inspect.getsource(mcp_task.McpTaskWorkflow._take)
    cases = set(re.findall(r"case steps\.(\w+)\(\):", source))
    assert cases == {t.__name__ for t in get_args(steps.Step)}, cases
    phases = {"submit", "wait", "input", "retrieve", "cancel", "finish", "messages"}
    for name in phases:
        tree = ast.parse(
            inspect.getsource(getattr(__import__("mcp_temporal_tasks.workflows.phases", fromlist=[name]), name))
        )
        imported = {
            n.module.rsplit(".", 1)[-1]
            for n in ast.walk(tree)
            if isinstance(n, ast.ImportFrom)
            and n.module
            and n.module.startswith("mcp_temporal_tasks.workflows.phases.")
        }
        assert not imported & (phases - {name}), (name, imported)


def test_the_patch_ids_are_the_registers() -> None:
    ids = {v for k, v in vars(patches).items() if k.isupper() and isinstance(v, str)}
    register = section((REPO_ROOT / "ARCHITECTURE.md").read_text(), "## `workflow.patched` register")
    listed = set(re.findall(r"^\| `([^`]+)` \|", register, re.MULTILINE))
    assert len(ids) == 14
    assert ids == listed, (sorted(ids - listed), sorted(listed - ids))
