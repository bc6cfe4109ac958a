"""Print the last fault-matrix run (``tests/faults/last_matrix.json``) as markdown, for docs/faults.md.

    python -m tests.faults.table [--file PATH] [--cells]

Default: one grid per era and replay policy (fault × method; each cell ``outcome · tools/call count · seconds``,
✅ as expected, ❌ otherwise). ``--cells``: one row per cell instead.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

DEFAULT = Path(__file__).with_name("last_matrix.json")
FAULT_ORDER = [
    "Refuse",
    "ResetAfterSend",
    "Stall",
    "Malformed",
    "Truncated",
    "Status500",
    "RateLimit",
    "RpcError-32603×once",
    "RpcError-32603×thrice",
    "RpcError-32603×always",
]
METHOD_ORDER = [
    "initialize",
    "server/discover",
    "tools/list",
    "tools/call",
    "tasks/get",
    "tasks/result",
    "tasks/result:failed",
    "tasks/update",
    "tasks/cancel",
    "hostile",
]
TITLES = {
    "legacy": "2025-11-25, TS SDK stateful HTTP",
    "extension": "2026-07-28, fastmcp",
    "legacy-py1": "2025-11-25, the official Python SDK mcp 1.30.0",
}


def _order(seq: list[str], value: str) -> tuple[int, str]:
    return (seq.index(value) if value in seq else len(seq), value)


def _cell_text(c: dict[str, Any]) -> str:
    mark = "✅" if c.get("passed") else "❌"
    outcome = str(c.get("outcome", "?"))
    if len(outcome) > 40:
        outcome = outcome[:37] + "…"
    return f"{mark} {outcome} · {c.get('tools_call', '?')}× · {c.get('seconds', '?')}s"


def grids(cells: list[dict[str, Any]]) -> str:
    out: list[str] = []
    groups: dict[tuple[str, bool], list[dict[str, Any]]] = {}
    for c in cells:
        groups.setdefault((c["era"], bool(c.get("replay"))), []).append(c)
    for (era, replay), group in sorted(groups.items()):
        methods = sorted({c["method"] for c in group}, key=lambda m: _order(METHOD_ORDER, m))
        faults = sorted({c["fault"] for c in group}, key=lambda f: _order(FAULT_ORDER, f))
        by = {(c["fault"], c["method"]): c for c in group}
        title = TITLES.get(era, era)
        out.append(f"#### {era} ({title}), replay={'always (idempotent)' if replay else 'never'}\n")
        out.append("| fault | " + " | ".join(f"`{m}`" for m in methods) + " |")
        out.append("|---|" + "---|" * len(methods))
        for f in faults:
            row = [_cell_text(by[(f, m)]) if (f, m) in by else "" for m in methods]
            out.append(f"| {f} | " + " | ".join(row) + " |")
        out.append("")
    return "\n".join(out)


def rows(cells: list[dict[str, Any]]) -> str:
    out = [
        "| era | method | fault | replay | expected | outcome | tools/call | seconds | ok |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for c in sorted(
        cells,
        key=lambda c: (
            c["era"],
            _order(METHOD_ORDER, c["method"]),
            _order(FAULT_ORDER, c["fault"]),
            bool(c.get("replay")),
        ),
    ):
        out.append(
            f"| {c['era']} | `{c['method']}` | {c['fault']} | {'always' if c.get('replay') else 'never'} "
            f"| {c.get('expected')} | {c.get('outcome')} | {c.get('tools_call')} | {c.get('seconds')} "
            f"| {'✅' if c.get('passed') else '❌ ' + ', '.join(c.get('failed_checks') or [])} |"
        )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.faults.table", description=__doc__.splitlines()[0])
    parser.add_argument("--file", type=Path, default=DEFAULT)
    parser.add_argument("--cells", action="store_true", help="one row per cell instead of grids")
    parser.add_argument("--fault", default="", help="only the cells whose fault starts with this (e.g. RpcError)")
    args = parser.parse_args(argv)
    try:
        data = json.loads(args.file.read_text())
    except FileNotFoundError:
        print(f"{args.file} not found: run `pytest -p tests.strict_skips tests/test_faults.py` first", file=sys.stderr)
        return 1
    cells = [c for c in data.get("cells", {}).values() if str(c.get("fault", "")).startswith(args.fault)]
    passed = sum(1 for c in cells if c.get("passed"))
    print(f"Fault matrix ({data.get('updated', '?')}): {passed}/{len(cells)} cells as expected.\n")
    print(rows(cells) if args.cells else grids(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
