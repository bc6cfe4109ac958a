"""The static gate over the package as it installs (``mcp_temporal_tasks.{workflows,activities,worker,demo}`` and the
modules of ``api/``): mypy, then the import layers (import-linter contracts in pyproject.toml).

The repository keeps those folders at its top (pyproject's package-dir maps them), which neither tool can follow;
so this builds a view of the installed layout out of symlinks under ``.typecheck/`` and checks that.
Exit code: the first tool that failed (mypy's, then lint-imports').
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VIEW = ROOT / ".typecheck"


def build_view() -> Path:
    """``.typecheck/mcp_temporal_tasks``: the installed layout, as symlinks to the repository's folders. mypy's
    cache beside it (``.typecheck/.mypy_cache``) is kept: a later run over the same sources (tests/test_gate.py,
    after the gate) then checks only what changed."""
    package = VIEW / "mcp_temporal_tasks"
    shutil.rmtree(package, ignore_errors=True)
    package.mkdir(parents=True)
    for module in (ROOT / "api").glob("*.py"):
        (package / module.name).symlink_to(module)
    for folder in ("protocol", "workflows", "activities", "worker", "demo"):
        (package / folder).symlink_to(ROOT / folder, target_is_directory=True)
    return VIEW


def main() -> int:
    view = build_view()
    mypy = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), "-p", "mcp_temporal_tasks"]
    code = subprocess.call(mypy, cwd=view)
    if code:
        return code
    # The layers are checked on the same view: grimp finds the package there first (PYTHONPATH), not the
    # editable install whose folders it could not walk.
    lint = [str(Path(sys.executable).with_name("lint-imports")), "--no-cache", str(ROOT / "pyproject.toml")]
    return subprocess.call(lint, cwd=view, env={**os.environ, "PYTHONPATH": str(view)})


if __name__ == "__main__":
    sys.exit(main())
