"""Strands' own MCP path on Temporal, for the kill test's comparison (run from this folder's venv: mcp<2).

``TemporalAgent`` with ``temporalio-strands-agents``' ``TemporalMCPClient("own")``, whose ``own-call-tool`` activity
(start-to-close 25 s, retried) sends each ``tools/call`` through Strands' ``MCPClient`` on the worker
(``StrandsPlugin(mcp_clients=...)``). The model is the scripted Strands model.

    python -m tests.peers.agents_own.strands_own   # env: TEMPORAL_ADDRESS, AGENT_APP_QUEUE, AGENT_APP_OWN_URL
"""

from __future__ import annotations

import asyncio
import os
from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from temporalio.strands_agents import TemporalAgent, TemporalMCPClient

    from tests.fixtures.strands_scripted import NAME

WORKFLOW = "StrandsOwnMcpWorkflow"
OWN = TemporalMCPClient("own", cache_tools=True, start_to_close_timeout=timedelta(seconds=25))


@workflow.defn(name=WORKFLOW)
class StrandsOwnMcpWorkflow:
    @workflow.run
    async def run(self, prompt: str) -> str:
        agent = TemporalAgent(
            model=NAME, tools=[OWN], callback_handler=None, start_to_close_timeout=timedelta(seconds=30)
        )
        return str(await agent.invoke_async(prompt))


async def main() -> None:
    from mcp.client.streamable_http import streamablehttp_client
    from strands.tools.mcp import MCPClient
    from temporalio.client import Client
    from temporalio.strands_agents import StrandsPlugin
    from temporalio.worker import Worker

    from tests.fixtures.strands_scripted import ScriptedStrandsModel

    url = os.environ["AGENT_APP_OWN_URL"]
    plugin = StrandsPlugin(
        models={NAME: ScriptedStrandsModel}, mcp_clients={"own": lambda: MCPClient(lambda: streamablehttp_client(url))}
    )
    client = await Client.connect(os.environ["TEMPORAL_ADDRESS"], plugins=[plugin])
    async with Worker(client, task_queue=os.environ["AGENT_APP_QUEUE"], workflows=[StrandsOwnMcpWorkflow]):
        print("READY", flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    from tests.peers.agents_own.strands_own import main as named_main

    asyncio.run(named_main())
