"""``mcp-tasks schema``: the JSON Schemas of the workflow's wire shapes (``workflows/schemas.py``)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from mcp_temporal_tasks.worker.cli.parser import EXIT_USAGE, CliError
from mcp_temporal_tasks.workflows.schemas import json_schemas, render


def cmd_schema(args: argparse.Namespace) -> int:
    schemas = json_schemas()
    if not args.out:
        if args.check:
            raise CliError("--check needs --out DIR", EXIT_USAGE)
        sys.stdout.write(json.dumps(schemas, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
        return 0
    out = Path(args.out)
    if args.check:
        stale = sorted(
            name
            for name, schema in schemas.items()
            if not (out / name).is_file() or (out / name).read_text(encoding="utf-8") != render(schema)
        )
        if stale:
            sys.stderr.write(f"not current in {out}: {', '.join(stale)} (run `mcp-tasks schema --out {out}`)\n")
            return 1
        return 0
    try:
        out.mkdir(parents=True, exist_ok=True)
        for name, schema in schemas.items():
            (out / name).write_text(render(schema), encoding="utf-8")
    except OSError as exc:
        raise CliError(f"cannot write the schemas to {out}: {exc.strerror or exc}", EXIT_USAGE) from None
    sys.stderr.write(f"wrote {len(schemas)} schemas to {out}\n")
    return 0
