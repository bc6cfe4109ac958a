"""ARCHITECTURE.md's module table, from each module's first docstring line: written, or checked (``--check``).

    python scripts/architecture_table.py          # rewrite the table between its markers
    python scripts/architecture_table.py --check  # exit 1, with a diff, when the table is not what the code says

A module's first docstring line is its job in the table, so the two cannot drift: change the docstring, run this.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ARCHITECTURE = ROOT / "ARCHITECTURE.md"
PACKAGE = "mcp_temporal_tasks"
BEGIN = "<!-- the table below is written by scripts/architecture_table.py from each module's first docstring line -->"
END = "<!-- end of the written table -->"
#: Layers top down, by module prefix (the longest prefix that matches names the layer).
LAYERS = {
    PACKAGE: "api",
    f"{PACKAGE}.worker": "worker",
    f"{PACKAGE}.worker.cli": "worker/cli",
    f"{PACKAGE}.workflows": "workflows",
    f"{PACKAGE}.activities": "activities",
    f"{PACKAGE}.activities.wire": "wire",
    f"{PACKAGE}.protocol": "protocol",
    f"{PACKAGE}.demo": "demo",
}
ORDER = ["api", "worker", "worker/cli", "workflows", "activities", "wire", "protocol", "demo"]


class TableError(Exception):
    """A module the table cannot describe (no docstring)."""


def modules() -> dict[str, Path]:
    """Every installed module (dotted name under the package) and its file, from pyproject's package-dir mapping."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    dirs = setuptools["package-dir"]
    found: dict[str, Path] = {}
    for package in setuptools["packages"]:
        folder = ROOT / dirs[package]
        found[package] = folder / "__init__.py"
        for path in sorted(folder.glob("*.py")):
            if path.name != "__init__.py":
                found[f"{package}.{path.stem}"] = path
    return found


def layer(module: str) -> str:
    prefix = max((p for p in LAYERS if module == p or module.startswith(p + ".")), key=len)
    return LAYERS[prefix]


def job(path: Path) -> str:
    """The first line of the module's docstring, as a table cell (reStructuredText roles and literals to Markdown)."""
    doc = ast.get_docstring(ast.parse(path.read_text()))
    if not doc:
        raise TableError(f"{path.relative_to(ROOT)} has no module docstring: its first line is its row in the table")
    lines = doc.strip().splitlines()
    if len(lines) > 1 and lines[1].strip():
        raise TableError(
            f"{path.relative_to(ROOT)}: the docstring's first line must say the module's job alone (a "
            "blank line after it); it goes on: " + lines[1].strip()[:60]
        )
    first = lines[0].strip()
    first = first.replace("``", "`").replace("|", "\\|")
    while ":" in first and "`~" in first:  # :class:`~a.b.C` -> `C`
        start = first.index("`~")
        end = first.index("`", start + 2)
        first = first[:start] + "`" + first[start + 2 : end].rsplit(".", 1)[-1] + first[end:]
    for role in (":class:", ":func:", ":data:", ":meth:", ":mod:"):
        first = first.replace(role, "")
    return first.rstrip(".")


def table() -> str:
    rows = sorted(modules().items(), key=lambda kv: (ORDER.index(layer(kv[0])), kv[0]))
    lines = ["| module | layer | job |", "|---|---|---|"]
    for module, path in rows:
        name = module if module == PACKAGE else module.removeprefix(f"{PACKAGE}.")
        shown = f"`{name}` (`{path.relative_to(ROOT).as_posix()}`)" if module == PACKAGE else f"`{name}`"
        lines.append(f"| {shown} | {layer(module)} | {job(path)} |")
    return "\n".join(lines) + "\n"


def with_table(text: str) -> str:
    if BEGIN not in text or END not in text:
        raise TableError(f"ARCHITECTURE.md has no markers for the table ({BEGIN!r} … {END!r})")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{table()}{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="exit 1 when the table is not current (nothing written)")
    args = parser.parse_args(argv)
    current = ARCHITECTURE.read_text()
    try:
        wanted = with_table(current)
    except TableError as exc:
        print(f"architecture_table: {exc}", file=sys.stderr)
        return 2
    if wanted == current:
        return 0
    if args.check:
        diff = difflib.unified_diff(
            current.splitlines(), wanted.splitlines(), "ARCHITECTURE.md", "as the code says", lineterm=""
        )
        print("\n".join(diff))
        print(
            "architecture_table: ARCHITECTURE.md's module table is not current: run "
            "python scripts/architecture_table.py",
            file=sys.stderr,
        )
        return 1
    ARCHITECTURE.write_text(wanted)
    return 0


if __name__ == "__main__":
    sys.exit(main())
