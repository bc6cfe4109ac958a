"""mypy over the package as it installs: ``mcp_temporal_tasks.{workflows,activities,worker}``.

The repository keeps those folders at its top (pyproject's package-dir maps them), which mypy cannot follow;
so this builds a view of the installed layout out of symlinks under ``.typecheck/`` and checks that.
Exit code: mypy's.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VIEW = ROOT / ".typecheck"


def build_view() -> Path:
    """``.typecheck/mcp_temporal_tasks``: the installed layout, as symlinks to the repository's folders."""
    shutil.rmtree(VIEW, ignore_errors=True)
    package = VIEW / "mcp_temporal_tasks"
    package.mkdir(parents=True)
    (package / "__init__.py").symlink_to(ROOT / "api" / "__init__.py")
    for folder in ("workflows", "activities", "worker"):
        (package / folder).symlink_to(ROOT / folder, target_is_directory=True)
    return VIEW


def main() -> int:
    view = build_view()
    cmd = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), "-p", "mcp_temporal_tasks"]
    return subprocess.call(cmd, cwd=view)


if __name__ == "__main__":
    sys.exit(main())
