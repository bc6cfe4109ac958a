"""`mcp-tasks --help`, `--version` and a usage error load no heavy module: the command table is imported only once
the arguments parse (worker/cli/main.py). Asserted on what is imported (`-X importtime`), not on wall time, which
depends on the machine; and the demo commands without the [demo] extra say how to get it, in one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast

REPO_ROOT = Path(__file__).resolve().parent.parent
#: What makes a start slow (hundreds of ms each on a loaded 2-core machine) and what the parser never needs.
HEAVY = ("temporalio", "mcp", "mcp_types", "httpx2", "pydantic", "fastmcp", "jsonschema")


def run_cli(*args: str, code: str | None = None) -> tuple[int, str, str, set[str]]:
    """(exit code, stdout, stderr without the import lines, top-level packages imported) of the CLI in a fresh
    interpreter."""
    prog = ["-c", code] if code else ["-m", "mcp_temporal_tasks.worker.cli"]
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", *prog, *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60
    )
    imported, rest = set(), []
    for line in proc.stderr.splitlines():
        if line.startswith("import time:"):
            name = line.rsplit("|", 1)[-1].strip()
            imported.add(name.split(".")[0])
        else:
            rest.append(line)
    assert "mcp_temporal_tasks" in imported, "-X importtime wrote nothing: the check below would pass vacuously"
    return proc.returncode, proc.stdout, "\n".join(rest), imported


@pytest.mark.parametrize("args", [["--help"], ["--version"], ["list", "--help"], ["no-such-command"]])
def test_parsing_imports_no_heavy_module(args: list[str]) -> None:
    rc, out, err, imported = run_cli(*args)
    assert rc == (2 if args == ["no-such-command"] else 0), err
    assert not imported & set(HEAVY), f"{' '.join(args)} imported {sorted(imported & set(HEAVY))}"
    if args == ["--help"]:
        assert "COMMAND" in out and "demo-server" in out
    if args == ["--version"]:
        assert out.startswith("mcp-tasks ") and out.split()[1][0].isdigit(), out
    if args == ["list", "--help"]:
        assert "tool_error" in out and "awaiting_approval" in out  # the outcome and status values, listed
    if args == ["no-such-command"]:
        assert "invalid choice" in err and len(err.strip().splitlines()) == 1, err


def test_a_command_imports_what_it_runs() -> None:
    """The other side: past parsing, the command's module is loaded (here `run` with arguments that are not JSON,
    refused before any connection is made), so the check above is about the parser, not an import that never
    happens."""
    rc, _, err, imported = run_cli("run", "x", "--url", "http://127.0.0.1:1/mcp", "--args", "{bad")
    assert rc == 2 and "--args is not valid JSON" in err, err
    assert {"temporalio", "pydantic"} <= imported, sorted(imported)


@pytest.mark.parametrize("command", ["demo", "demo-server"])
def test_the_demo_without_its_extra_says_how_to_install_it(command: str) -> None:
    # fastmcp hidden as if not installed: importlib finds no spec for a module set to None in sys.modules.
    code = (
        "import sys; sys.modules['fastmcp'] = None; from mcp_temporal_tasks.worker.cli import main; "
        f"main([{command!r}])"
    )
    rc, out, err, _ = run_cli(code=code)
    assert rc == 2, err
    assert "pip install 'mcp-temporal-tasks[demo]'" in err and len(err.strip().splitlines()) == 1, err
    assert out == ""


@pytest.mark.parametrize("command", ["status", "result", "cancel", "approve", "list"])
def test_the_commands_on_existing_tasks_load_no_mcp_wire(command: str) -> None:
    """``status`` and its kin talk to Temporal only (worker/cli/operations.py): they load neither the MCP SDK nor the
    wire's HTTP stack nor the worker's activities (half of their start-up time went there). Here against a closed
    port, so each gets as far as connecting."""
    args = [command] + ([] if command == "list" else ["nothing"]) + ["--address", "127.0.0.1:1"]
    rc, _, err, imported = run_cli(*args)
    assert rc == 3 and "unreachable" in err.lower(), (rc, err)
    assert {"temporalio", "pydantic"} <= imported, sorted(imported)
    wire = imported & {"mcp", "httpx2", "h11", "fastmcp"}
    assert not wire, f"{command} imported {sorted(wire)}"
