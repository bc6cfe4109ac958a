"""The example's workflows: one agent per framework, each calling an MCP tool as a durable child workflow."""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from agents import Agent, Runner
    from demo_agents import pydantic_ai_agent
    from pydantic_ai.durable_exec.temporal import PydanticAIWorkflow

    from mcp_temporal_tasks.openai_agents import mcp_tasks_server


@workflow.defn
class PydanticAIDemo(PydanticAIWorkflow):
    __pydantic_ai_agents__ = [pydantic_ai_agent]

    @workflow.run
    async def run(self, prompt: str) -> str:
        return (await pydantic_ai_agent.run(prompt)).output


@workflow.defn
class OpenAIAgentsDemo:
    @workflow.run
    async def run(self, prompt: str) -> str:
        # The one-line change: mcp_servers=[temporal_mcp_server("demo")] becomes [mcp_tasks_server("demo")].
        agent = Agent(name="demo", instructions="Use the tools.", mcp_servers=[mcp_tasks_server("demo")])
        return str((await Runner.run(agent, input=prompt)).final_output)
