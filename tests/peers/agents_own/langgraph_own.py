"""LangGraph's own MCP path on Temporal, for the kill test's comparison (run from this folder's venv: mcp<2).

The graph of tests/fixtures/langgraph_graph.py with the tools ``langchain-mcp-adapters`` makes
(``await MultiServerMCPClient(...).get_tools()``, at worker start, as a graph's tools are) and the tools node an
activity (``execute_in: "activity"``, start-to-close 25 s, retried): where an MCP call's I/O belongs in LangGraph's
Temporal integration.

    python -m tests.peers.agents_own.langgraph_own   # env: TEMPORAL_ADDRESS, AGENT_APP_QUEUE, AGENT_APP_OWN_URL
"""

from __future__ import annotations

import asyncio
import os
from datetime import timedelta
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from langchain_core.messages import HumanMessage
    from langchain_core.messages.utils import convert_to_messages
    from langgraph.prebuilt import ToolNode
    from temporalio.langgraph import LangGraphPlugin, graph

    from tests.fixtures import langgraph_graph

#: The tools of langchain-mcp-adapters, listed when the worker starts.
TOOLS: list[Any] = []
WORKFLOW = "LangGraphOwnMcpWorkflow"


async def run_tools(state: dict[str, Any]) -> dict[str, Any]:
    # In the activity: the state crossed the boundary as plain data.
    return await ToolNode(TOOLS).ainvoke({"messages": convert_to_messages(state["messages"])})  # type: ignore[no-any-return]


@workflow.defn(name=WORKFLOW)
class LangGraphOwnMcpWorkflow:
    @workflow.run
    async def run(self, prompt: str) -> str:
        app = graph(langgraph_graph.NAME).compile()
        out = await app.ainvoke({"messages": [HumanMessage(prompt)]})
        return str(out["messages"][-1].content)


async def main() -> None:
    from langchain_mcp_adapters.client import MultiServerMCPClient
    from temporalio.client import Client
    from temporalio.contrib.pydantic import pydantic_data_converter
    from temporalio.worker import Worker

    mcp = MultiServerMCPClient({"own": {"url": os.environ["AGENT_APP_OWN_URL"], "transport": "streamable_http"}})
    TOOLS.extend(await mcp.get_tools())
    built = langgraph_graph.build(
        run_tools, {"execute_in": "activity", "start_to_close_timeout": timedelta(seconds=25)}
    )
    client = await Client.connect(
        os.environ["TEMPORAL_ADDRESS"],
        plugins=[LangGraphPlugin(graphs={langgraph_graph.NAME: built})],
        data_converter=pydantic_data_converter,
    )
    async with Worker(client, task_queue=os.environ["AGENT_APP_QUEUE"], workflows=[LangGraphOwnMcpWorkflow]):
        print("READY", flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    # Run from the module under its own name: the integration refuses a node or tool defined in __main__.
    from tests.peers.agents_own.langgraph_own import main as named_main

    asyncio.run(named_main())
