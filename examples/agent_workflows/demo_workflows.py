"""The example's workflows: one agent per framework, each calling an MCP tool as a durable child workflow."""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from agents import Agent, Runner
    from demo_agents import pydantic_ai_agent
    from google.adk import Agent as AdkAgent
    from google.adk.runners import InMemoryRunner
    from google.genai import types
    from pydantic_ai.durable_exec.temporal import PydanticAIWorkflow
    from temporalio.google_adk import TemporalModel
    from temporalio.google_genai import TemporalAsyncClient

    from mcp_temporal_tasks.google_adk import McpTasksToolset
    from mcp_temporal_tasks.google_genai import McpTasksClientSession
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


@workflow.defn
class GoogleAdkDemo:
    @workflow.run
    async def run(self, prompt: str) -> str:
        # The one-line change: tools=[TemporalMcpToolSet("demo")] becomes tools=[McpTasksToolset("demo")].
        agent = AdkAgent(name="demo", model=TemporalModel("scripted-demo"), tools=[McpTasksToolset("demo")])
        runner = InMemoryRunner(agent=agent, app_name="demo")
        session = await runner.session_service.create_session(app_name="demo", user_id="demo")
        answer = ""
        message = types.Content(role="user", parts=[types.Part(text=prompt)])
        async for event in runner.run_async(user_id="demo", session_id=session.id, new_message=message):
            answer = "".join(p.text or "" for p in (event.content.parts if event.content else None) or []) or answer
        return answer


@workflow.defn
class GeminiDemo:
    @workflow.run
    async def run(self, prompt: str) -> str:
        # The one-line change: tools=[TemporalMcpClientSession("demo")] becomes tools=[McpTasksClientSession("demo")].
        config = types.GenerateContentConfig(tools=[McpTasksClientSession("demo")])
        response = await TemporalAsyncClient().models.generate_content(
            model="gemini-2.5-flash", contents=prompt, config=config
        )
        return response.text or ""
