"""ARCHITECTURE.md ("Every module", also the docs site's Architecture page) names every module of the installed
package with its layer and job, and no module that is gone."""

from __future__ import annotations

import importlib
import pkgutil
import re
import tomllib

import pytest

from tests.doc_pages import REPO_ROOT, section

pytestmark = pytest.mark.fast

PACKAGE = "mcp_temporal_tasks"


def installed_modules() -> set[str]:
    """Every module and package under ``mcp_temporal_tasks``, relative to it: the packages setuptools installs
    (pyproject's ``[tool.setuptools] packages``, whose folders package-dir maps from around the repository, so one
    walk from the top would not find them), each walked as imported."""
    packages = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    found = {PACKAGE}
    for name in packages:
        found.add(name)
        for info in pkgutil.iter_modules(importlib.import_module(name).__path__, f"{name}."):
            found.add(info.name)
    return {m.removeprefix(f"{PACKAGE}.") for m in found}


def named_modules() -> set[str]:
    table = section((REPO_ROOT / "ARCHITECTURE.md").read_text(), "## Every module")
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    return {re.match(r"\| `([^`]+)`", row).group(1) for row in rows}  # type: ignore[union-attr]


def test_every_module_is_named_in_the_architecture() -> None:
    modules, named = installed_modules(), named_modules()
    print(f"{len(modules)} modules, {len(named)} named")
    assert len(modules) > 60
    assert not modules - named, f"modules ARCHITECTURE.md's 'Every module' does not name: {sorted(modules - named)}"
    assert not named - modules, f"ARCHITECTURE.md names modules that do not exist: {sorted(named - modules)}"


def test_the_module_table_is_written_from_each_modules_first_docstring_line() -> None:
    """The table's job column is each module's first docstring line (``scripts/architecture_table.py``): a module added,
    removed or redescribed without running the script fails here."""
    from scripts.architecture_table import main

    assert main(["--check"]) == 0, "run: python scripts/architecture_table.py"
