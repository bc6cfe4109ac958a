"""The JSON Schemas under docs/schemas/ are the models' current ones, and a plain JSON request (what another
language's SDK sends through its default JSON converter) validates against them and against the models."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import jsonschema
import pytest

from mcp_temporal_tasks.worker.cli.schema import cmd_schema
from mcp_temporal_tasks.workflows.records import McpTaskRequest
from mcp_temporal_tasks.workflows.schemas import json_schemas, render

pytestmark = pytest.mark.fast

DOCS = Path(__file__).resolve().parent.parent / "docs" / "schemas"


def test_committed_schemas_are_current() -> None:
    schemas = json_schemas()
    committed = {p.name for p in DOCS.glob("*.json")}
    assert committed == set(schemas), "docs/schemas differs: run `mcp-tasks schema --out docs/schemas`"
    stale = [n for n, s in schemas.items() if (DOCS / n).read_text(encoding="utf-8") != render(s)]
    assert not stale, f"stale: {stale}; run `mcp-tasks schema --out docs/schemas`"
    assert cmd_schema(argparse.Namespace(out=str(DOCS), check=True)) == 0


def test_plain_json_request_validates(tmp_path: Path) -> None:
    plain = {
        "server": {"url": "http://127.0.0.1:3000/mcp"},
        "tool": "slow_echo",
        "arguments": {"seconds": 1, "text": "from TypeScript"},
    }
    schema = json.loads((DOCS / "McpTaskRequest.json").read_text())
    jsonschema.validate(plain, schema)
    assert McpTaskRequest.model_validate(plain).tool == "slow_echo"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**plain, "toll": "typo"}, schema)
    (tmp_path / "McpTaskRequest.json").write_text("{}")
    assert cmd_schema(argparse.Namespace(out=str(tmp_path), check=True)) == 1
