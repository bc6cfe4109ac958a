"""``McpTaskWorkflow`` composed from its phases (``workflows/phases/``): the names other code and other languages use
stay as they were, every phase entry point ``base.TaskMachine`` names is defined by a phase, and the patch ids in
the code are the ids of ARCHITECTURE.md's register. No Temporal server: the workflow's definition is read."""

from __future__ import annotations

import ast
import inspect
import re

import pytest
from temporalio.workflow import _Definition

from mcp_temporal_tasks.workflows.mcp_task import McpTaskWorkflow
from mcp_temporal_tasks.workflows.phases import base, patches
from tests.doc_pages import REPO_ROOT, section

pytestmark = pytest.mark.fast


def test_the_workflow_keeps_its_names() -> None:
    defn = _Definition.must_from_class(McpTaskWorkflow)
    assert defn.name == "McpTaskWorkflow"
    assert set(defn.signals) == {"legacy_input_requested", "legacy_input_delivered", "mcp_task_notified"}
    assert set(defn.queries) == {"status", "legacy_relay_state"}
    assert set(defn.updates) == {"cancel", "approve_replay", "provide_input"}
    assert all(defn.updates[name].validator is not None for name in defn.updates)


def test_every_entry_point_the_base_names_is_defined_by_a_phase() -> None:
    """``TaskMachine`` declares (for the type checker only) the methods one phase calls on another: each must be
    defined by one of the composed phases, or the call would fail only when a task got there."""
    tree = ast.parse(inspect.getsource(base))
    machine = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "TaskMachine")
    declared = {
        f.name
        for n in machine.body
        if isinstance(n, ast.If)
        for f in n.body
        if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)
    }
    assert len(declared) >= 8
    for name in declared:
        owner = next(c for c in McpTaskWorkflow.__mro__ if name in vars(c))
        assert owner.__module__.startswith("mcp_temporal_tasks.workflows.phases.") and owner is not base.TaskMachine, (
            name,
            owner,
        )


def test_the_patch_ids_are_the_registers() -> None:
    ids = {v for k, v in vars(patches).items() if k.isupper() and isinstance(v, str)}
    register = section((REPO_ROOT / "ARCHITECTURE.md").read_text(), "## `workflow.patched` register")
    listed = set(re.findall(r"^\| `([^`]+)` \|", register, re.MULTILINE))
    assert len(ids) == 10
    assert ids == listed, (sorted(ids - listed), sorted(listed - ids))
