"""The agent extras: a plain install imports neither framework; our module without its extra is one ImportError
naming the extra; the pins are the ones the adapters were built and tested against."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.temporal_harness import REPO_ROOT

#: Makes the named top-level packages unimportable in a child interpreter, as if the extra were not installed.
BLOCK = """
import sys
class _Missing:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked!r} or name in {blocked!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}")
        return None
sys.meta_path.insert(0, _Missing())
"""


def python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
                          check=False)


def test_plain_use_imports_neither_framework() -> None:
    proc = python("import sys, mcp_temporal_tasks as m\n"
                  "m.McpTasksPlugin, m.McpTasksClient, m.McpTaskError, m.start_mcp_task\n"
                  "import mcp_temporal_tasks.worker.cli\n"
                  "print(sorted(n for n in ('pydantic_ai', 'agents', 'temporalio.openai_agents') if n in sys.modules))")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]", proc.stdout


@pytest.mark.parametrize(("module", "blocked", "extra"), [
    ("mcp_temporal_tasks.pydantic_ai", ["pydantic_ai"], "mcp-temporal-tasks[pydantic-ai]"),
    ("mcp_temporal_tasks.openai_agents", ["agents", "temporalio.openai_agents"], "mcp-temporal-tasks[openai-agents]"),
])
def test_module_without_its_extra_names_the_extra(module: str, blocked: list[str], extra: str) -> None:
    proc = python(BLOCK.format(blocked=set(blocked)) + f"import {module}\n")
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: ") and extra in last, proc.stderr[-2000:]
    # and with the extra installed (this venv), it imports
    ok = python(f"import {module}")
    assert ok.returncode == 0, ok.stderr[-2000:]


def test_extras_are_pinned_and_installed_by_the_test_script() -> None:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert extras["pydantic-ai"] == ["pydantic-ai-slim[temporal]==2.68.0"]
    assert extras["openai-agents"] == ["temporalio-openai-agents[mcp]==1.1.0"]
    # neither framework is a dependency of a plain install
    assert not any(d.startswith(("pydantic-ai", "temporalio-openai-agents", "openai")) for d in project["dependencies"])
    script = (Path(REPO_ROOT) / "scripts" / "test.sh").read_text()
    installed = re.search(r"pip install --quiet -e '\.\[([^\]]*)\]'", script)
    assert installed is not None, "scripts/test.sh no longer installs the project with extras"
    assert {"test", "demo", "pydantic-ai", "openai-agents"} <= set(installed.group(1).split(",")), installed.group(0)
