"""The agents of the example and their scripted models (no LLM, no key): first turn, call ``slow_echo``; then answer
with what it returned. Each calls the bundled demo MCP server (named ``demo`` in ``McpTasksPlugin(servers=...)``)
through our durable toolset/server/session. The Pydantic AI agent is built here, at import time (outside any
workflow, as ``TemporalDurability`` requires); the others are built in their workflows (demo_workflows.py).
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from typing import Any

from agents import Model, ModelResponse, Usage
from google.adk.models import BaseLlm, LLMRegistry
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.genai import types
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText
from pydantic_ai import Agent
from pydantic_ai.durable_exec.temporal import TemporalDurability
from pydantic_ai.messages import ModelMessage, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.messages import ModelResponse as PaiResponse
from pydantic_ai.models.function import AgentInfo, FunctionModel
from temporalio.google_genai.testing import GeminiTestServer, function_call_response, text_response

from mcp_temporal_tasks.pydantic_ai import McpTasksToolset

ECHO = {"seconds": 3, "text": "hello from a durable MCP task"}


def pydantic_ai_model(messages: list[ModelMessage], info: AgentInfo) -> PaiResponse:
    returns = [p for m in messages for p in getattr(m, "parts", []) if isinstance(p, ToolReturnPart)]
    if not returns:
        return PaiResponse(parts=[ToolCallPart(tool_name="slow_echo", args=ECHO)])
    return PaiResponse(parts=[TextPart(f"the tool said: {json.dumps(returns[0].content)}")])


# The one-line change: toolsets=[MCPToolset(url, id="demo")] becomes toolsets=[McpTasksToolset("demo")].
pydantic_ai_agent = Agent(
    FunctionModel(pydantic_ai_model),
    name="demo_agent",
    toolsets=[McpTasksToolset("demo", tools=["slow_echo"])],
    capabilities=[TemporalDurability()],
)


class ScriptedOpenAIModel(Model):
    """An ``agents.Model`` deciding from the run's input alone (so a restarted worker answers the same)."""

    async def get_response(
        self, system_instructions: str | None, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        items = [] if isinstance(input, str) else list(input)
        outputs = [i for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"]
        if not outputs:
            call = ResponseFunctionToolCall(
                arguments=json.dumps(ECHO),
                call_id="call-1",
                name="slow_echo",
                type="function_call",
                id="fc-1",
                status="completed",
            )
            return ModelResponse(output=[call], usage=Usage(), response_id=None)
        text = ResponseOutputText(
            text=f"the tool said: {json.dumps(outputs[0]['output'])}", annotations=[], type="output_text"
        )
        message = ResponseOutputMessage(
            id="msg-1", content=[text], role="assistant", status="completed", type="message"
        )
        return ModelResponse(output=[message], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


class ScriptedAdkModel(BaseLlm):
    """An ADK model (registered in ADK's ``LLMRegistry`` as ``scripted-demo``, called through ``TemporalModel``)."""

    @classmethod
    def supported_models(cls) -> list[str]:
        return ["scripted-demo"]

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        returns = [
            p.function_response.response
            for c in llm_request.contents
            for p in c.parts or []
            if p.function_response is not None
        ]
        if not returns:
            call = types.Part(function_call=types.FunctionCall(name="slow_echo", args=ECHO))
            yield LlmResponse(content=types.Content(role="model", parts=[call]))
            return
        text = f"the tool said: {json.dumps(returns[0])}"
        yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=text)]))


LLMRegistry.register(ScriptedAdkModel)


class ScriptedGemini(GeminiTestServer):
    """``temporalio-google-genai``'s test server (the real plugin, only the HTTP layer scripted), answering from each
    request instead of from a list."""

    def __init__(self) -> None:
        super().__init__([])

    def _next(self) -> str:
        returns = [
            p["functionResponse"]["response"]
            for c in self.requests[-1]["contents"]
            for p in c.get("parts", [])
            if "functionResponse" in p
        ]
        if not returns:
            return function_call_response("slow_echo", ECHO)
        return text_response(f"the tool said: {json.dumps(returns[0])}")
