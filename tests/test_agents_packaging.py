"""The agent extras: a plain install imports no framework; our module without its extra, or with a framework version
that lacks a hook the adapter relies on, is one ImportError naming the extra (and the hook); the pins are the ones
the adapters were built and tested against."""

from __future__ import annotations

import json
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
    return subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, check=False
    )


def test_plain_use_imports_neither_framework() -> None:
    proc = python(
        "import sys, mcp_temporal_tasks as m\n"
        "m.McpTasksPlugin, m.McpTasksClient, m.McpTaskError, m.start_mcp_task\n"
        "import mcp_temporal_tasks.worker.cli\n"
        "print(sorted(n for n in ('pydantic_ai', 'agents', 'temporalio.openai_agents', 'google.adk',\n"
        "  'google.genai', 'temporalio.google_adk', 'temporalio.google_genai', 'langchain_core', 'langgraph',\n"
        "  'deepagents') if n in sys.modules))"
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]", proc.stdout


@pytest.mark.parametrize(
    ("module", "blocked", "extra"),
    [
        ("mcp_temporal_tasks.pydantic_ai", ["pydantic_ai"], "mcp-temporal-tasks[pydantic-ai]"),
        (
            "mcp_temporal_tasks.openai_agents",
            ["agents", "temporalio.openai_agents"],
            "mcp-temporal-tasks[openai-agents]",
        ),
        ("mcp_temporal_tasks.google_adk", ["google.adk"], "mcp-temporal-tasks[google-adk]"),
        (
            "mcp_temporal_tasks.google_genai",
            ["google.genai", "temporalio.google_genai"],
            "mcp-temporal-tasks[google-genai]",
        ),
        ("mcp_temporal_tasks.langgraph", ["langchain_core"], "mcp-temporal-tasks[langgraph]"),
        ("mcp_temporal_tasks.strands", ["strands", "temporalio.strands_agents"], "mcp-temporal-tasks[strands]"),
    ],
)
def test_module_without_its_extra_names_the_extra(module: str, blocked: list[str], extra: str) -> None:
    proc = python(BLOCK.format(blocked=set(blocked)) + f"import {module}\n")
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: ") and extra in last, proc.stderr[-2000:]
    # and with the extra installed (this venv), it imports
    ok = python(f"import {module}")
    assert ok.returncode == 0, ok.stderr[-2000:]


#: Each hook an adapter checks at import, as (the hook's name, where it lives: "module:attribute path" of its owner,
#: the attribute or key to take away). One child interpreter per adapter takes them away one at a time.
HOOKS = {
    "mcp_temporal_tasks.google_adk": [
        (
            "google.adk.tools.base_toolset.BaseToolset.process_llm_request",
            "google.adk.tools.base_toolset:BaseToolset",
            "process_llm_request",
        ),
        (
            "google.adk.agents.readonly_context.ReadonlyContext.invocation_id",
            "google.adk.agents.readonly_context:ReadonlyContext",
            "invocation_id",
        ),
        (
            "google.adk.tools.base_tool.BaseTool._get_declaration",
            "google.adk.tools.base_tool:BaseTool",
            "_get_declaration",
        ),
        (
            "google.genai.types.FunctionDeclaration.parameters_json_schema",
            "google.genai.types:FunctionDeclaration.__pydantic_fields__",
            "parameters_json_schema",
        ),
    ],
    "mcp_temporal_tasks.strands": [
        (
            "temporalio.strands_agents.TemporalMCPClient._refresh",
            "temporalio.strands_agents:TemporalMCPClient",
            "_refresh",
        ),
    ],
    "mcp_temporal_tasks.google_genai": [
        (
            "google.genai._extra_utils.parse_config_for_mcp_sessions",
            "google.genai._extra_utils:",
            "parse_config_for_mcp_sessions",
        ),
        (
            "google.genai._adapters.McpToGenAiToolAdapter.call_tool",
            "google.genai._adapters:McpToGenAiToolAdapter",
            "call_tool",
        ),
        ("google.genai._mcp_utils.mcp_to_gemini_tool", "google.genai._mcp_utils:", "mcp_to_gemini_tool"),
    ],
}

WITHOUT_EACH_HOOK = """
import functools, importlib, json, sys
said = {{}}
for hook, where, name in {hooks!r}:
    module, _, path = where.partition(":")
    owner = functools.reduce(getattr, filter(None, path.split(".")), importlib.import_module(module))
    table = owner if isinstance(owner, dict) else None
    kept = table.pop(name) if table is not None else vars(owner)[name]
    if table is None:
        delattr(owner, name)
    try:
        importlib.import_module({module!r})
        said[hook] = "imported"
    except ImportError as err:
        said[hook] = "ImportError: " + str(err)
    finally:
        if table is not None:
            table[name] = kept
        else:
            setattr(owner, name, kept)
        sys.modules.pop({module!r}, None)
print(json.dumps(said))
"""


@pytest.mark.parametrize("module", sorted(HOOKS))
def test_framework_without_a_needed_hook_is_one_import_error(module: str) -> None:
    proc = python(WITHOUT_EACH_HOOK.format(hooks=HOOKS[module], module=module))
    assert proc.returncode == 0, proc.stderr[-2000:]
    said = json.loads(proc.stdout.strip().splitlines()[-1])
    extra = "mcp-temporal-tasks[" + module.rsplit(".", 1)[-1].replace("_", "-") + "]"
    for hook, _, _ in HOOKS[module]:
        assert said[hook].startswith(f"ImportError: {module} needs {hook}") and extra in said[hook], said[hook]


def test_genai_integrations_own_mcp_session_does_not_import_with_our_mcp() -> None:
    """Upstream gap the README and tests/fixtures/genai_app.py rely on: ``temporalio-google-genai`` 0.1.0's
    ``TemporalMcpClientSession`` imports ``mcp.shared.session`` (mcp 1.x), so it fails next to mcp 2.3.0. When this
    fails, the gap closed: drop ``provide_mcp_shared_session`` and the README's note."""
    proc = python("from temporalio.google_genai import TemporalMcpClientSession")
    assert proc.returncode != 0 and "No module named 'mcp.shared.session'" in proc.stderr, proc.stderr[-2000:]


def test_extras_are_pinned_and_installed_by_the_test_script() -> None:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert extras["pydantic-ai"] == ["pydantic-ai-slim[temporal]==2.68.0"]
    assert extras["openai-agents"] == ["temporalio-openai-agents[mcp]==1.1.0"]
    assert extras["google-adk"] == ["google-adk==2.13.0", "temporalio-google-adk==0.0.1"]
    assert extras["google-genai"] == ["google-genai==2.34.0", "temporalio-google-genai==0.1.0"]
    assert extras["langgraph"] == ["langgraph==1.2.22", "temporalio-langgraph==0.1.0"]
    assert extras["strands"] == [
        "docstring-parser==0.18.0",
        "watchdog==6.0.0",
        "opentelemetry-instrumentation-threading==0.65b0",
        "boto3==1.40.61",
    ]
    assert extras["deepagents"] == [
        "deepagents==0.7.32",
        "temporalio-deepagents==0.0.3",
        "mcp-temporal-tasks[langgraph]",
    ]
    # no framework is a dependency of a plain install
    assert not any(
        d.startswith(
            ("pydantic-ai", "temporalio-openai-agents", "openai", "google", "temporalio-google", "lang", "deepagents")
        )
        for d in project["dependencies"]
    )
    script = (Path(REPO_ROOT) / "scripts" / "test.sh").read_text()
    installed = re.search(r"pip install --quiet (?:--no-compile )?-e '\.\[([^\]]*)\]'", script)
    assert installed is not None, "scripts/test.sh no longer installs the project with extras"
    assert {
        "test",
        "demo",
        "pydantic-ai",
        "openai-agents",
        "google-adk",
        "google-genai",
        "langgraph",
        "deepagents",
    } <= set(installed.group(1).split(",")), installed.group(0)


#: The SDK's old import path of each integration (temporalio 1.35's ``temporalio.contrib.*``) and the standalone
#: package it forwards to, which the adapters and docs/agents.md name.
CONTRIB_PATHS = {
    "temporalio.contrib.google_adk_agents": "temporalio.google_adk",
    "temporalio.contrib.langgraph": "temporalio.langgraph",
    "temporalio.contrib.deepagents": "temporalio.deepagents",
}


def test_the_sdk_contrib_paths_are_the_standalone_packages() -> None:
    """Whichever path an application imports its framework plugin from, it gets the objects our adapters were built
    and tested against: every public name of the standalone package is the same object under ``temporalio.contrib``
    (an application on the old path composes with our plugin as on the new one: tests/test_agents_google.py)."""
    proc = python(
        "import importlib, json\n"
        f"paths = {CONTRIB_PATHS!r}\n"
        "said = {}\n"
        "for old, new in paths.items():\n"
        "    a, b = importlib.import_module(old), importlib.import_module(new)\n"
        "    names, differ = list(b.__all__), []\n"
        "    for n in names:\n"
        "        try:\n"
        "            theirs = getattr(b, n)\n"
        "        except ImportError:  # a lazy name that needs mcp<2 (TemporalMcpClientSession): on neither path\n"
        "            try:\n"
        "                getattr(a, n)\n"
        "                differ.append(n)\n"
        "            except ImportError:\n"
        "                pass\n"
        "            continue\n"
        "        if getattr(a, n) is not theirs:\n"
        "            differ.append(n)\n"
        "    said[old] = [len(names), differ]\n"
        "print(json.dumps(said))"
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    said = json.loads(proc.stdout.strip().splitlines()[-1])
    for old in CONTRIB_PATHS:
        count, differ = said[old]
        assert count > 0 and differ == [], (old, said[old])
    # Not temporalio.contrib.google_genai: its `from temporalio.google_genai import *` touches the lazy
    # TemporalMcpClientSession, which needs mcp<2, so the old path does not import next to mcp 2.3.0 at all (the
    # standalone path, which our adapter imports, does). When this fails, the gap closed: add it to CONTRIB_PATHS.
    old_genai = python("import temporalio.contrib.google_genai")
    assert old_genai.returncode != 0 and "No module named 'mcp.shared.session'" in old_genai.stderr
    assert python("import temporalio.google_genai, mcp_temporal_tasks.google_genai").returncode == 0


def test_strands_override_installs_beside_our_mcp() -> None:
    """Strands and its Temporal integration require mcp<2 (temporalio-strands-agents 0.1.0) and mcp<2.2 (strands-agents
    1.62.0): scripts/test.sh installs them with --no-deps over our mcp==2.3.0 (pyproject.toml says why). What holds:
    exactly those versions, our mcp and temporalio unchanged, and the integration (which imports Strands' MCP client
    at import) importing beside mcp 2.3.0, with our adapter."""
    script = (Path(REPO_ROOT) / "scripts" / "test.sh").read_text()
    assert (
        "pip install --quiet --no-compile --no-deps strands-agents==1.62.0 temporalio-strands-agents==0.1.0" in script
    )
    proc = python(
        "from importlib.metadata import version\n"
        "import temporalio.strands_agents, mcp_temporal_tasks.strands\n"
        "print([version(n) for n in ('strands-agents', 'temporalio-strands-agents', 'mcp', 'temporalio')])"
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "['1.62.0', '0.1.0', '2.3.0', '1.35.0']", proc.stdout
