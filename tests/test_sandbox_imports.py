"""What a workflow run loads: workflow code imports activity names, stubs and models, never the wire.

In a fresh interpreter (the test process has everything loaded): first the workflow-side modules are imported, as
a worker registering them does, and what that adds to ``sys.modules`` is listed; then the worker side is loaded (as
in any worker) and committed histories are replayed in the plugin's own sandbox, and every module the sandboxes
held is listed. Neither may hold the activity implementation, a connection layer of the wire, the MCP SDK's client
package (whose import loads httpx2, anyio and uvicorn), httpx2, h11 or fastmcp (imported in the host first, as
Pydantic AI's Temporal support does in a worker). The import-linter contract "workflow code imports no wire"
(pyproject.toml) says the same of the import graph; this says it of a run. Run with ``-s`` to see the lists.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mcp_temporal_tasks.activities.defs import McpActivityDefs
from mcp_temporal_tasks.activities.mcp_activities import McpActivities

pytestmark = pytest.mark.fast

ROOT = Path(__file__).resolve().parent.parent

#: Ours that workflow code may load besides ``mcp_temporal_tasks.workflows.*``: the activity stubs and names, the
#: models the workflows are built from, and the packages holding them.
ALLOWED = {
    "mcp_temporal_tasks",
    "mcp_temporal_tasks._agent_tools",
    "mcp_temporal_tasks.activities",
    "mcp_temporal_tasks.activities.defs",
    "mcp_temporal_tasks.activities.activity_io",
    "mcp_temporal_tasks.activities.relay",
    "mcp_temporal_tasks.protocol",
    "mcp_temporal_tasks.protocol.tasks",
    "mcp_temporal_tasks.protocol.wire_errors",
    "mcp_temporal_tasks.protocol.limits",
    "mcp_temporal_tasks.protocol.contract",
    "mcp_temporal_tasks.protocol.sdk_types",
    "mcp_temporal_tasks.protocol.bounds",
    "mcp_temporal_tasks.protocol.elicitation",
    "mcp_temporal_tasks.protocol.eras",
}
#: Never, by top-level package.
FORBIDDEN = {"httpx", "httpx2", "httpcore", "httpcore2", "h11", "fastmcp", "mcp", "anyio", "uvicorn", "starlette"}
HISTORIES = [
    "completed_legacy",
    "completed_extension",
    "input_undeliverable_lost",
    "notified_wake_idle",
    "cancelled_through_temporal_canceled",
    "job_completed_extension",
    "long_wait_legacy",
]

PROBE = r"""
import asyncio, json, sys
from pathlib import Path

import temporalio.client, temporalio.worker  # the SDK, loaded by any worker before workflow code
from temporalio.worker.workflow_sandbox import _importer

before = set(sys.modules)
import mcp_temporal_tasks._agent_tools, mcp_temporal_tasks.workflows.client
import mcp_temporal_tasks.workflows.mcp_task, mcp_temporal_tasks.workflows.tasks_client
host = sorted(set(sys.modules) - before)

try:
    import fastmcp  # noqa: F401  (as in a worker that runs Pydantic AI agents: it patches the mcp types)
except ImportError:  # a venv without [demo]: nothing patches them
    pass
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from mcp_temporal_tasks.worker.runner import workflow_runner  # the worker side, as in any worker
from mcp_temporal_tasks.workflows.mcp_task import McpTaskWorkflow

sandboxes = []
init = _importer.Importer.__init__
def recording(self, *args, **kwargs):
    init(self, *args, **kwargs)
    sandboxes.append(self)
_importer.Importer.__init__ = recording

async def replay():
    replayer = Replayer(workflows=[McpTaskWorkflow], data_converter=pydantic_data_converter,
                        workflow_runner=workflow_runner())
    for name in sys.argv[2:]:
        path = Path(sys.argv[1]) / f"{name}.json"
        result = await replayer.replay_workflow(WorkflowHistory.from_json(name, path.read_text()),
                                                raise_on_replay_failure=False)
        assert result.replay_failure is None, f"{name}: {result.replay_failure}"
asyncio.run(replay())
sandbox = sorted(set().union(*(s.new_modules for s in sandboxes)))
print(json.dumps({"host": host, "sandbox": sandbox, "sandboxes": len(sandboxes)}))
"""


def test_a_workflow_run_loads_no_wire() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(ROOT / "tests" / "histories"), *HISTORIES],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["sandboxes"] >= len(HISTORIES)
    for where in ("host", "sandbox"):
        modules = seen[where]
        ours = {
            m
            for m in modules
            if m.split(".")[0] == "mcp_temporal_tasks" and not m.startswith("mcp_temporal_tasks.workflows")
        }
        print(
            f"\n{where}: {len(modules)} modules; ours: {[m for m in modules if m.startswith('mcp_temporal_tasks')]}"
            f"\n{where} others: "
            f"{sorted({m.split('.')[0] for m in modules} - {'mcp_temporal_tasks'})}"
        )
        assert ours <= ALLOWED, f"{where}: workflow code loaded {sorted(ours - ALLOWED)}"
        assert not {m.split(".")[0] for m in modules} & FORBIDDEN, (
            f"{where}: {sorted(m for m in modules if m.split('.')[0] in FORBIDDEN)}"
        )
    # The sandbox took the workflow modules from the worker (passed through), not a copy of its own.
    assert "mcp_temporal_tasks.workflows.mcp_task" in seen["sandbox"]


def test_the_stubs_name_what_the_worker_runs() -> None:
    """Each stub workflows schedule has its implementation under the same activity name, and the worker registers
    all of them (a stub without one would schedule an activity no worker runs)."""
    stubs = {
        name: getattr(McpActivityDefs, name).__temporal_activity_definition.name
        for name in dir(McpActivityDefs)
        if hasattr(getattr(McpActivityDefs, name), "__temporal_activity_definition")
    }
    assert len(stubs) == 11
    implemented = {name: getattr(McpActivities, name).__temporal_activity_definition.name for name in stubs}
    assert implemented == stubs
    registered = {fn.__temporal_activity_definition.name for fn in McpActivities().all()}
    assert registered == set(stubs.values())


async def test_public_names_imported_at_the_top_of_a_workflow_file_are_the_workers() -> None:
    """The sandbox re-runs a workflow's file (and this package's ``__init__``, which the plugin does not pass
    through); a name it takes from the package is passed through from the worker, so the file loads (re-running
    the worker side in the sandbox instead fails: "Using subclasses of proxied objects is unsupported")."""
    import temporalio.workflow

    from mcp_temporal_tasks.worker.runner import workflow_runner
    from tests.fixtures.toplevel_app import TopLevelImports

    runner = workflow_runner()
    runner.prepare_workflow(temporalio.workflow._Definition.must_from_class(TopLevelImports))
