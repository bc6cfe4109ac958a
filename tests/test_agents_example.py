"""The agents page's example (docs/agents.md; examples/agent_workflows/run.py, the one-line snippets in context) runs
as written: against the test Temporal and the fastmcp peer, with its scripted models, in its own process. The page's
Google ADK and Gemini snippets (self-contained) run too."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

from tests.agents_common import tool_calls
from tests.doc_pages import blocks, page
from tests.peers.harness import Peer
from tests.temporal_harness import REPO_ROOT, address_of

EXAMPLE = REPO_ROOT / "examples" / "agent_workflows" / "run.py"


def test_agent_example_runs_as_written(temporal_env: Any, fastmcp_server: Peer) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(TEMPORAL_ADDRESS=address_of(temporal_env), MCP_URL=fastmcp_server.url or "")
    mark = fastmcp_server.log_mark()
    proc = subprocess.run(
        [sys.executable, str(EXAMPLE)], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=180, check=False
    )
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr[-4000:]}"
    lines = proc.stdout.splitlines()
    for name in ("PydanticAIDemo", "OpenAIAgentsDemo", "GoogleAdkDemo", "GeminiDemo"):
        answer = next((ln for ln in lines if ln.startswith(f"{name}: ")), None)
        assert answer and "the tool said:" in answer and "hello from a durable MCP task" in answer, proc.stdout
    children = [ln for ln in lines if "tool call ran as child workflow(s): " in ln]
    assert len(children) == 4 and all("/mcp/demo/r1/slow_echo/" in ln for ln in children), proc.stdout
    # one tools/call per agent
    assert len(tool_calls(fastmcp_server, mark, "slow_echo")) == 4


def agents_page_snippets(module: str) -> list[str]:
    """The python blocks of the agents page (docs/agents.md) that import ``module``."""
    return [b for b in blocks(page("agents.md"), "python") if f"from {module} import" in b]


def test_agents_page_google_snippets_run_as_written() -> None:
    from mcp_temporal_tasks.google_adk import McpTasksToolset
    from mcp_temporal_tasks.google_genai import McpTasksClientSession

    (adk,) = agents_page_snippets("mcp_temporal_tasks.google_adk")
    scope: dict[str, Any] = {}
    exec(adk, scope)  # noqa: S102  (the page's own code)
    assert [type(t) for t in scope["agent"].tools] == [McpTasksToolset], scope["agent"].tools
    (genai,) = agents_page_snippets("mcp_temporal_tasks.google_genai")
    scope = {}
    exec(genai, scope)  # noqa: S102
    assert isinstance(scope["billing"], McpTasksClientSession) and scope["config"].tools == [scope["billing"]]
