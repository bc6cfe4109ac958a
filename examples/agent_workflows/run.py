"""Agents that never run a tool twice: a Pydantic AI agent, an OpenAI Agents SDK agent, a Google ADK agent and a
Gemini (google-genai) call on Temporal, each calling a tool of the bundled demo MCP server as a durable
McpTaskWorkflow. Scripted models: no LLM key.

    pip install 'mcp-temporal-tasks[demo,pydantic-ai,openai-agents,google-adk,google-genai]'
    mcp-tasks dev-server &                    # or any Temporal at $TEMPORAL_ADDRESS (default localhost:7233)
    python examples/agent_workflows/run.py    # MCP_URL=...: use a running demo server instead of starting one

Prints each agent's answer and the child workflow that ran the tool (``mcp-tasks status ID`` shows it).
"""

from __future__ import annotations

import asyncio
import os
import sys
import uuid

from demo_agents import ScriptedGemini, ScriptedOpenAIModel
from demo_workflows import GeminiDemo, GoogleAdkDemo, OpenAIAgentsDemo, PydanticAIDemo
from pydantic_ai.durable_exec.temporal import PydanticAIPlugin
from temporalio.client import Client
from temporalio.google_adk import GoogleAdkPlugin
from temporalio.openai_agents import OpenAIAgentsPlugin
from temporalio.openai_agents.testing import TestModelProvider
from temporalio.worker import Worker

from mcp_temporal_tasks import McpTasksPlugin


async def run_agent(address: str, framework_plugin: object, workflow: type, url: str) -> None:
    # The framework's plugin first, then ours, on one client: workers on that client inherit both.
    mcp = McpTasksPlugin(servers={"demo": {"url": url, "tools": {"slow_echo": {"idempotent": False}}}})
    client = await Client.connect(address, plugins=[framework_plugin, mcp])
    queue = f"agents-demo-{uuid.uuid4().hex[:8]}"
    async with Worker(client, task_queue=queue, workflows=[workflow]):
        wid = f"{workflow.__name__}-{uuid.uuid4().hex[:8]}"
        answer = await client.execute_workflow(
            workflow.run,
            "Echo something slowly.",
            id=wid,  # type: ignore[attr-defined]
            task_queue=queue,
        )
        children = [w.id async for w in client.list_workflows(f"ParentWorkflowId = '{wid}'")]
    print(
        f"{workflow.__name__}: {answer}\n  tool call ran as child workflow(s): {', '.join(children) or '?'}", flush=True
    )


async def main() -> None:
    address = os.environ.get("TEMPORAL_ADDRESS", "localhost:7233")
    url = os.environ.get("MCP_URL")
    proc = None
    if url is None:
        from mcp_temporal_tasks.worker.demo_scenario import start_demo_server

        proc, url = start_demo_server()
    try:
        await run_agent(address, PydanticAIPlugin(), PydanticAIDemo, url)
        await run_agent(
            address, OpenAIAgentsPlugin(model_provider=TestModelProvider(ScriptedOpenAIModel())), OpenAIAgentsDemo, url
        )
        await run_agent(address, GoogleAdkPlugin(), GoogleAdkDemo, url)
        await run_agent(address, ScriptedGemini().plugin(), GeminiDemo, url)
    finally:
        if proc is not None:
            proc.terminate()


if __name__ == "__main__":
    asyncio.run(main())
    sys.stdout.flush()
    os._exit(0)  # the Temporal runtime's threads can abort a finished short-lived process at shutdown
