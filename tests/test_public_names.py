"""The names others depend on do not change: the workflow's and its messages', the activities', the search attributes',
the JSON fields of what crosses Temporal, the configuration keys, the CLI's options, the extras, and the public API.

``tests/data/public_names.json`` was written on ``e065df1`` (before issue 53 moved the code around), with
``python -m tests.test_public_names > tests/data/public_names.json``; a name may be added (rewrite the file and say
why in the commit), never renamed or removed while anything in the field may still use it.
"""

from __future__ import annotations

import argparse
import json
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

pytestmark = pytest.mark.fast

SNAPSHOT = Path(__file__).parent / "data" / "public_names.json"
ROOT = Path(__file__).resolve().parent.parent


def _fields(model: type[BaseModel]) -> list[str]:
    return sorted(f.alias or name for name, f in model.model_fields.items())


def _options(parser: argparse.ArgumentParser) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {"": sorted(s for a in parser._actions for s in a.option_strings)}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out[name] = sorted(s for a in sub._actions for s in a.option_strings)
    return out


def public_names() -> dict[str, Any]:
    from temporalio.workflow import _Definition

    import mcp_temporal_tasks as api
    from mcp_temporal_tasks.activities import activity_io, defs
    from mcp_temporal_tasks.protocol import tasks
    from mcp_temporal_tasks.worker import config
    from mcp_temporal_tasks.worker.cli.parser import build_parser
    from mcp_temporal_tasks.workflows import records
    from mcp_temporal_tasks.workflows.mcp_task import McpTaskWorkflow

    defn = _Definition.must_from_class(McpTaskWorkflow)
    activities = sorted(
        getattr(m, "__temporal_activity_definition").name
        for m in vars(defs.McpActivityDefs).values()
        if hasattr(m, "__temporal_activity_definition")
    )
    models: list[type[BaseModel]] = [
        records.McpTaskRequest,
        records.McpTaskOutcome,
        records.TaskView,
        records.Timeouts,
        records.Ledger,
        records.OperationAttempt,
        records.PendingInput,
        records.ResultRef,
        tasks.Endpoint,
        tasks.OAuthClient,
        tasks.SessionRef,
        tasks.TaskState,
        tasks.StartResult,
        tasks.ToolInfo,
        tasks.RpcErrorInfo,
        activity_io.ServerConfig,
        activity_io.ToolPolicy,
        activity_io.JobBinding,
        activity_io.PollSchedule,
        activity_io.ServerProfile,
        activity_io.ResolveInput,
        activity_io.StartCallInput,
        activity_io.StartCallOutput,
        activity_io.DecodedPayload,
        activity_io.AwaitInput,
        activity_io.AwaitOutput,
        activity_io.RetrieveInput,
        activity_io.RetrieveOutput,
        activity_io.CancelInput,
        activity_io.CancelOutput,
        activity_io.AnswerInput,
        activity_io.RelayInput,
        activity_io.RelayOutput,
        activity_io.LegacyInputRequest,
        activity_io.ListToolsInput,
        activity_io.FetchOutcomeInput,
        activity_io.TaskNotified,
        config.TemporalSettings,
        config.StorageSettings,
        config.WorkerSettings,
    ]
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return {
        "api": sorted(api.__all__),
        "workflow": defn.name,
        "signals": sorted(defn.signals),
        "queries": sorted(defn.queries),
        "updates": sorted(defn.updates),
        "activities": activities,
        "search_attributes": sorted(
            v.name for k, v in vars(records).items() if k.startswith("SA_") and hasattr(v, "name")
        ),
        "fields": {m.__name__: _fields(m) for m in models},
        "auth_keys": sorted(config._AUTH_KEYS),
        "cli": _options(build_parser()),
        "scripts": sorted(pyproject["project"]["scripts"]),
        "extras": sorted(pyproject["project"]["optional-dependencies"]),
    }


def test_no_public_name_changed() -> None:
    before = json.loads(SNAPSHOT.read_text())
    now = public_names()
    assert len(before["api"]) >= 20 and len(before["activities"]) == 10 and len(before["cli"]) >= 10
    problems = []
    for key, was in before.items():
        is_ = now.get(key)
        if isinstance(was, dict):
            for name, items in was.items():
                gone = sorted(set(items) - set(is_.get(name, []))) if isinstance(is_, dict) else items
                if gone or not isinstance(is_, dict) or name not in is_:
                    problems.append(f"{key}.{name}: gone {gone}")
        elif isinstance(was, list):
            gone = sorted(set(was) - set(is_ or []))
            if gone:
                problems.append(f"{key}: gone {gone}")
        elif was != is_:
            problems.append(f"{key}: {was!r} is now {is_!r}")
    assert not problems, problems


if __name__ == "__main__":
    json.dump(public_names(), sys.stdout, indent=1, sort_keys=True)
    print()
