"""Deep Agents' own MCP path on Temporal, for the kill test's comparison (run from this folder's venv: mcp<2).

``create_deep_agent`` in the workflow with the tools ``langchain-mcp-adapters`` makes, each wrapped with
``temporalio-deepagents``' ``tool_as_activity`` (start-to-close 25 s, retried): the integration's way for a tool that
does I/O. The model is the integration's ``TemporalModel`` over the scripted chat model.

    python -m tests.peers.agents_own.deepagents_own   # env: TEMPORAL_ADDRESS, AGENT_APP_QUEUE, AGENT_APP_OWN_URL
"""

from __future__ import annotations

import asyncio
import os
from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from deepagents import create_deep_agent
    from langchain_core.messages import HumanMessage
    from temporalio.deepagents import TemporalModel

    from tests.peers.agents_own.registry import TOOLS
WORKFLOW = "DeepAgentOwnMcpWorkflow"


@workflow.defn(name=WORKFLOW)
class DeepAgentOwnMcpWorkflow:
    @workflow.run
    async def run(self, prompt: str) -> str:
        agent = create_deep_agent(model=TemporalModel(model="mcp-tasks-scripted"), tools=TOOLS)
        out = await agent.ainvoke({"messages": [HumanMessage(prompt)]})
        return str(out["messages"][-1].content)


async def main() -> None:
    from langchain_mcp_adapters.client import MultiServerMCPClient
    from temporalio.client import Client
    from temporalio.deepagents import DeepAgentsPlugin, tool_as_activity
    from temporalio.worker import Worker

    from tests.fixtures.langchain_scripted import ScriptedChatModel

    mcp = MultiServerMCPClient({"own": {"url": os.environ["AGENT_APP_OWN_URL"], "transport": "streamable_http"}})
    TOOLS.extend(tool_as_activity(t, start_to_close_timeout=timedelta(seconds=25)) for t in await mcp.get_tools())
    client = await Client.connect(
        os.environ["TEMPORAL_ADDRESS"],
        plugins=[DeepAgentsPlugin(model_provider=lambda _name: ScriptedChatModel())],
    )
    async with Worker(client, task_queue=os.environ["AGENT_APP_QUEUE"], workflows=[DeepAgentOwnMcpWorkflow]):
        print("READY", flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    # Run from the module under its own name: the integration refuses a node or tool defined in __main__.
    from tests.peers.agents_own.deepagents_own import main as named_main

    asyncio.run(named_main())
