"""The type gate catches what used to fail at run time: a misspelt field of a workflow ending."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from scripts.typecheck import ROOT, build_view

SNIPPET = """
from mcp_temporal_tasks.workflows.models import Ending, Outcome

ok = Ending(outcome=Outcome.LOST, reason="the task is gone")
typo = Ending(outcome=Outcome.LOST, reasn="the task is gone")
"""


def test_mypy_catches_a_misspelt_ending_field(tmp_path: Path) -> None:
    view = build_view()
    snippet = tmp_path / "ending_typo.py"
    snippet.write_text(SNIPPET)
    proc = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), str(snippet)],
                          cwd=view, env={**os.environ, "MYPYPATH": str(view)}, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    errors = [line for line in proc.stdout.splitlines() if ": error:" in line]
    assert len(errors) == 1, proc.stdout  # the correct line passes, the typo does not
    assert "ending_typo.py:5:" in errors[0] and '"reasn"' in errors[0], errors
