"""The activities as workflows see them: their names, and one stub per activity with its signature.

Workflow code imports this module, never the implementation (``activities/mcp_activities.py``, which
imports the wire: HTTP, h11, sockets, child processes). ``workflow.start_activity_method(McpActivityDefs.poll_task,
...)`` schedules the activity by the name its ``activity.defn`` carries; the worker runs the method of the same
name on ``McpActivities``, which subclasses this class (mypy holds the signatures equal) and registers under the
same names (``tests/test_sandbox_imports.py`` checks both). Imports models only.

The names are stable and versioned (``mcp-tasks.<step>.v1``): workflows in flight resolve them across deployments,
and committed histories name them.
"""

from __future__ import annotations

from typing import Any, NoReturn

from temporalio import activity

from mcp_temporal_tasks.activities.activity_io import (
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
    ServerProfile,
    StartCallInput,
    StartCallOutput,
)

RESOLVE = "mcp-tasks.resolve.v1"
START_CALL = "mcp-tasks.start_call.v1"
AWAIT_TASK = "mcp-tasks.await_task.v1"
RETRIEVE_RESULT = "mcp-tasks.retrieve_result.v1"
CANCEL_TASK = "mcp-tasks.cancel_task.v1"
ANSWER_INPUT = "mcp-tasks.provide_input.v1"  # the name stays: histories refer to it
RELAY_INPUT = "mcp-tasks.relay_input.v1"
LIST_TOOLS = "mcp-tasks.list_tools.v1"
FETCH_OUTCOME = "mcp-tasks.fetch_outcome.v1"
POLL_TASK = "mcp-tasks.poll_task.v1"
CONSENT_CHECK = "mcp-tasks.consent_check.v1"


def _runs_on_a_worker(name: str) -> NoReturn:
    raise NotImplementedError(
        f"{name} is run by a worker's McpActivities (mcp_temporal_tasks.activities."
        "mcp_activities); this stub only names it for workflow code"
    )


class McpActivityDefs:
    """The activity interface: what ``McpActivities`` implements, by name and signature. Never run."""

    @activity.defn(name=RESOLVE)
    async def resolve(self, inp: ResolveInput) -> ServerProfile:
        _runs_on_a_worker(RESOLVE)

    @activity.defn(name=START_CALL)
    async def start_call(self, inp: StartCallInput) -> StartCallOutput:
        _runs_on_a_worker(START_CALL)

    @activity.defn(name=AWAIT_TASK)
    async def await_task(self, inp: AwaitInput) -> AwaitOutput:
        _runs_on_a_worker(AWAIT_TASK)

    @activity.defn(name=POLL_TASK)
    async def poll_task(self, inp: AwaitInput) -> AwaitOutput:
        _runs_on_a_worker(POLL_TASK)

    @activity.defn(name=RETRIEVE_RESULT)
    async def retrieve_result(self, inp: RetrieveInput) -> RetrieveOutput:
        _runs_on_a_worker(RETRIEVE_RESULT)

    @activity.defn(name=CANCEL_TASK)
    async def cancel_task(self, inp: CancelInput) -> CancelOutput:
        _runs_on_a_worker(CANCEL_TASK)

    @activity.defn(name=ANSWER_INPUT)
    async def answer_input(self, inp: AnswerInput) -> None:
        _runs_on_a_worker(ANSWER_INPUT)

    @activity.defn(name=LIST_TOOLS)
    async def list_tools(self, inp: ListToolsInput) -> dict[str, Any]:
        _runs_on_a_worker(LIST_TOOLS)

    @activity.defn(name=FETCH_OUTCOME)
    async def fetch_outcome(self, inp: FetchOutcomeInput) -> dict[str, Any]:
        _runs_on_a_worker(FETCH_OUTCOME)

    @activity.defn(name=RELAY_INPUT)
    async def relay_input(self, inp: RelayInput) -> RelayOutput:
        _runs_on_a_worker(RELAY_INPUT)

    @activity.defn(name=CONSENT_CHECK)
    async def consent_check(self, inp: ConsentCheckInput) -> ConsentCheckOutput:
        _runs_on_a_worker(CONSENT_CHECK)
