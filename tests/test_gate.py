"""The type gate catches what used to fail at run time: a misspelt field of a workflow ending, and an ending
that does not say at which stage it ended (the replay rule reads the stage)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from scripts.typecheck import ROOT, build_view

SNIPPET = """
from mcp_temporal_tasks.workflows.records import Ending, Outcome, Stage

ok = Ending(outcome=Outcome.LOST, stage=Stage.GONE, reason="the task is gone")
typo = Ending(outcome=Outcome.LOST, stage=Stage.GONE, reasn="the task is gone")
no_stage = Ending(outcome=Outcome.LOST, reason="an ending site that forgot where it ended")
"""


def test_mypy_catches_a_misspelt_ending_field(tmp_path: Path) -> None:
    view = build_view()
    snippet = tmp_path / "ending_typo.py"
    snippet.write_text(SNIPPET)
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), str(snippet)],
        cwd=view,
        env={**os.environ, "MYPYPATH": str(view)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    errors = [line for line in proc.stdout.splitlines() if ": error:" in line]
    assert len(errors) == 2, proc.stdout  # the correct line passes; the typo and the missing stage do not
    assert "ending_typo.py:5:" in errors[0] and '"reasn"' in errors[0], errors
    assert "ending_typo.py:6:" in errors[1] and 'Missing named argument "stage"' in errors[1], errors
