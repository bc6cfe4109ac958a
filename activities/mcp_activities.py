"""``McpActivities``: the activities a worker registers, composed of the jobs that do them over shared dependencies.

Activity names are stable and versioned (``mcp-tasks.<step>.v1``, ``defs.py``): workflows in flight keep resolving
them across deployments. Each activity's failure semantics are in its job's docstring: ``calling`` (``resolve``,
``start_call``, ``list_tools``), ``waiting`` (``await_task``, ``poll_task``), ``task_steps`` (``retrieve_result``,
``cancel_task``, ``answer_input``, ``relay_input``, ``fetch_outcome``).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from temporalio import activity

from mcp_temporal_tasks.activities.activity_io import (
    STILL_WORKING,
    AnswerInput,
    AwaitInput,
    AwaitOutput,
    CancelInput,
    CancelOutput,
    ConsentCheckInput,
    ConsentCheckOutput,
    FetchOutcomeInput,
    ListToolsInput,
    RelayInput,
    RelayOutput,
    ResolveInput,
    RetrieveInput,
    RetrieveOutput,
    ServerConfig,
    ServerProfile,
    StartCallInput,
    StartCallOutput,
)
from mcp_temporal_tasks.activities.calling import Calling
from mcp_temporal_tasks.activities.defs import (  # the names stay importable from here too
    ANSWER_INPUT,
    AWAIT_TASK,
    CANCEL_TASK,
    CONSENT_CHECK,
    FETCH_OUTCOME,
    LIST_TOOLS,
    POLL_TASK,
    RELAY_INPUT,
    RESOLVE,
    RETRIEVE_RESULT,
    START_CALL,
    McpActivityDefs,
)
from mcp_temporal_tasks.activities.push import PushHub
from mcp_temporal_tasks.activities.result_store import ResultStore
from mcp_temporal_tasks.activities.shared import Shared
from mcp_temporal_tasks.activities.task_steps import TaskSteps
from mcp_temporal_tasks.activities.waiting import Waiting
from mcp_temporal_tasks.activities.wire import SessionPool
from mcp_temporal_tasks.protocol.tasks import Endpoint


class McpActivities(McpActivityDefs):
    """The activities, with their dependencies injected: the server registry, the session pool, the result store, the
    push hub. Each overrides its stub in :class:`McpActivityDefs` (what workflows import) under the same activity name
    and hands the call to its job: :attr:`calling`, :attr:`waiting`, :attr:`steps` (none calls another's)."""

    def __init__(
        self,
        *,
        servers: Mapping[str, ServerConfig] | None = None,
        pool: SessionPool | None = None,
        store: ResultStore | None = None,
        allow_inline_endpoints: bool = False,
        allow_inline_commands: bool = False,
        allow_inline_credentials: bool = False,
        inline_allowlist: Iterable[Endpoint] = (),
        owner_queue: str | None = None,
        live_sink: Callable[[str, dict[str, Any]], None] | None = None,
        push: PushHub | None = None,
    ) -> None:
        self.shared = Shared(
            pool=pool or SessionPool(), store=store or ResultStore(), push=push or PushHub(), live_sink=live_sink
        )
        self.calling = Calling(
            self.shared,
            servers=servers,
            allow_inline_endpoints=allow_inline_endpoints,
            allow_inline_commands=allow_inline_commands,
            allow_inline_credentials=allow_inline_credentials,
            inline_allowlist=inline_allowlist,
            owner_queue=owner_queue,
            identity=f"{os.getpid()}@{socket.gethostname()}",
        )
        self.waiting = Waiting(self.shared)
        self.steps = TaskSteps(self.shared)
        # The hub reads idle waits' tasks itself (push/poller.py) with the waits' own read.
        self.shared.push.reads_with(self.waiting.read_for_hub)

    @property
    def servers(self) -> dict[str, ServerConfig]:
        return self.calling.servers

    @property
    def pool(self) -> SessionPool:
        return self.shared.pool

    @property
    def store(self) -> ResultStore:
        return self.shared.store

    @property
    def push(self) -> PushHub:
        """Who hears the servers' task notifications for this process's waits (``activities/push/``)."""
        return self.shared.push

    @property
    def owner_queue(self) -> str | None:
        """Task queue served by this process only; stdio tasks are pinned to it."""
        return self.calling.owner_queue

    @property
    def identity(self) -> str:
        """How this worker names itself to Temporal (``runner.run_workers`` sets it; a refusal names it)."""
        return self.calling.identity

    @identity.setter
    def identity(self, value: str) -> None:
        self.calling.identity = value

    def all(self) -> list[Callable[..., Any]]:
        return [
            self.resolve,
            self.start_call,
            self.await_task,
            self.poll_task,
            self.retrieve_result,
            self.cancel_task,
            self.answer_input,
            self.relay_input,
            self.list_tools,
            self.fetch_outcome,
            self.consent_check,
        ]

    @activity.defn(name=RESOLVE)
    async def resolve(self, inp: ResolveInput) -> ServerProfile:
        return await self.calling.resolve(inp)

    @activity.defn(name=START_CALL)
    async def start_call(self, inp: StartCallInput) -> StartCallOutput:
        return await self.calling.start_call(inp)

    @activity.defn(name=LIST_TOOLS)
    async def list_tools(self, inp: ListToolsInput) -> dict[str, Any]:
        return await self.calling.list_tools(inp)

    @activity.defn(name=CONSENT_CHECK)
    async def consent_check(self, inp: ConsentCheckInput) -> ConsentCheckOutput:
        return await self.calling.consent_check(inp)

    @activity.defn(name=AWAIT_TASK)
    async def await_task(self, inp: AwaitInput) -> AwaitOutput:
        return await self.waiting.await_task(inp)

    @activity.defn(name=POLL_TASK)
    async def poll_task(self, inp: AwaitInput) -> AwaitOutput:
        return await self.waiting.poll_task(inp)

    @activity.defn(name=RETRIEVE_RESULT)
    async def retrieve_result(self, inp: RetrieveInput) -> RetrieveOutput:
        return await self.steps.retrieve_result(inp)

    @activity.defn(name=CANCEL_TASK)
    async def cancel_task(self, inp: CancelInput) -> CancelOutput:
        return await self.steps.cancel_task(inp)

    @activity.defn(name=ANSWER_INPUT)
    async def answer_input(self, inp: AnswerInput) -> None:
        return await self.steps.answer_input(inp)

    @activity.defn(name=RELAY_INPUT)
    async def relay_input(self, inp: RelayInput) -> RelayOutput:
        return await self.steps.relay_input(inp)

    @activity.defn(name=FETCH_OUTCOME)
    async def fetch_outcome(self, inp: FetchOutcomeInput) -> dict[str, Any]:
        return await self.steps.fetch_outcome(inp)


__all__ = [
    "ANSWER_INPUT",
    "AWAIT_TASK",
    "CANCEL_TASK",
    "FETCH_OUTCOME",
    "LIST_TOOLS",
    "POLL_TASK",
    "RELAY_INPUT",
    "RESOLVE",
    "RETRIEVE_RESULT",
    "START_CALL",
    "STILL_WORKING",
    "McpActivities",
]
