"""The fast tier: ``McpTaskWorkflow`` on the time-skipping test server, its activities replaced by fakes registered
under the real activity names (as Temporal's samples test workflows). No MCP server, no Node, no network: each
test scripts what the activities answer and checks how the machine ends, which stage it ended at (through the
replay it does or does not make), and the phases it went through.

One test (or parametrised case) per ending site of ``workflows/mcp_task.py`` and its phases (``workflows/phases/``)
and per transition family of ``records.TRANSITIONS``. The real activities and peers are exercised by the rest of the
suite.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import Callable
from datetime import UTC, timedelta
from typing import Any

import pytest
from temporalio import activity, workflow
from temporalio.client import WorkflowHandle
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from mcp_temporal_tasks.activities import mcp_activities as names
from mcp_temporal_tasks.activities.activity_io import (
    TASK_NOTIFIED_SIGNAL,
    AnswerInput,
    AwaitInput,
    AwaitOutput,
    CancelInput,
    CancelOutput,
    DecodedPayload,
    RelayInput,
    RelayOutput,
    ResolveInput,
    RetrieveInput,
    RetrieveOutput,
    ServerProfile,
    StartCallInput,
    StartCallOutput,
)
from mcp_temporal_tasks.activities.failure_encoding import to_application_error
from mcp_temporal_tasks.activities.wire import Endpoint
from mcp_temporal_tasks.protocol.tasks import (
    EXTENSION,
    LEGACY,
    InputRequest,
    RpcErrorInfo,
    SessionRef,
    StartResult,
    TaskState,
)
from mcp_temporal_tasks.protocol.wire_errors import (
    MAX_RETRY_AFTER_S,
    AuthorizationRequired,
    HttpRefusal,
    JsonRpcError,
    McpWireError,
    RateLimited,
    RequestRefused,
    TaskNotFound,
    TransportError,
    error_from_rpc,
    read_retry_after,
)
from mcp_temporal_tasks.worker.runner import workflow_runner
from mcp_temporal_tasks.workflows.client import outcome_of, start_mcp_task
from mcp_temporal_tasks.workflows.mcp_task import McpTaskWorkflow
from mcp_temporal_tasks.workflows.records import (
    McpTaskOutcome,
    McpTaskRequest,
    Outcome,
    Phase,
    ReplayPolicy,
    Timeouts,
)
from mcp_temporal_tasks.workflows.tasks_client import McpTasksClient
from tests.temporal_harness import keep_history, until, wait_for_view

pytestmark = pytest.mark.fast

ENDPOINT = Endpoint(url="http://fake.invalid/mcp")
TIMEOUTS = Timeouts(heartbeat_s=5, poll_floor_s=0.05, submit_s=30, unreachable_s=20)
RETRYABLE_TEXT = "HTTP 429 Too Many Requests; retry-after=1"


def session(era: str = LEGACY) -> SessionRef:
    return SessionRef(endpoint=ENDPOINT, era=era, protocol_version=era, session_id="s-1")  # type: ignore[arg-type]


def task(status: str = "working", era: str = LEGACY, **kw: Any) -> TaskState:
    # No createdAt/TTL: "gone" is then `lost`, never `expired`, whatever the test server's clock says.
    return TaskState(task_id="t-1", status=status, era=era, **kw)  # type: ignore[arg-type]


def started(era: str = LEGACY) -> StartCallOutput:
    return StartCallOutput(
        start=StartResult(era=era, session=session(era), task=task(era=era)),  # type: ignore[arg-type]
        sdk_version="fake",
    )


def sync(result: dict[str, Any]) -> StartCallOutput:
    return StartCallOutput(
        start=StartResult(era=LEGACY, session=session(), result=result),
        payload=DecodedPayload(result=result),
        sdk_version="fake",
    )


def text(t: str, *, is_error: bool = False) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": t}], "isError": is_error}


def done(
    result: dict[str, Any] | None = None,
    *,
    status: str = "completed",
    era: str = LEGACY,
    error: RpcErrorInfo | None = None,
) -> AwaitOutput:
    return AwaitOutput(
        state=task(status, era),
        polls=1,
        payload=DecodedPayload(result=result, error=error) if (result or error) else None,
        retrieval_error=None if (result or error) else "TransportError: reset",
    )


def wire(exc: McpWireError, **kw: Any) -> ApplicationError:
    """A fake activity's failure exactly as the real one maps it."""
    return to_application_error(exc, **kw)


#: A failure of an activity on an existing task that no retry can mend (a bug, a refused configuration).
UNEXPECTED = ApplicationError(
    "unexpected failure", {"may_have_reached_server": False}, type="Unexpected", non_retryable=True
)

Step = Any  # a value to return, an exception to raise, or a callable of the input giving either


class Fakes:
    """Scripted answers per activity (consumed in order; the last one repeats) and a count of every call."""

    def __init__(self, **script: list[Step]) -> None:
        self.script = {k: list(v) for k, v in script.items()}
        self.calls: Counter[str] = Counter()
        self.inputs: dict[str, list[Any]] = {}

    def _next(self, name: str, inp: Any) -> Any:
        self.calls[name] += 1
        self.inputs.setdefault(name, []).append(inp)
        steps = self.script.get(name)
        if not steps:
            raise AssertionError(f"the workflow called {name}, which this test did not script")
        step = steps.pop(0) if len(steps) > 1 else steps[0]
        if callable(step) and not isinstance(step, BaseException):
            step = step(inp)
        if isinstance(step, BaseException):
            raise step
        return step

    def activities(self) -> list[Callable[..., Any]]:
        profile = self.script.get("profile", [ServerProfile(name="fake", endpoint=ENDPOINT, identity="fake")])[0]

        @activity.defn(name=names.RESOLVE)
        async def resolve(inp: ResolveInput) -> ServerProfile:
            self.calls["resolve"] += 1
            if "resolve" in self.script:
                return self._next("resolve", inp)  # type: ignore[no-any-return]
            return profile  # type: ignore[no-any-return]

        @activity.defn(name=names.START_CALL)
        async def start_call(inp: StartCallInput) -> StartCallOutput:
            return self._next("start_call", inp)  # type: ignore[no-any-return]

        @activity.defn(name=names.AWAIT_TASK)
        async def await_task(inp: AwaitInput) -> AwaitOutput:
            return self._next("await_task", inp)  # type: ignore[no-any-return]

        @activity.defn(name=names.POLL_TASK)
        async def poll_task(inp: AwaitInput) -> AwaitOutput:
            return self._next("poll_task", inp)  # type: ignore[no-any-return]

        @activity.defn(name=names.RETRIEVE_RESULT)
        async def retrieve_result(inp: RetrieveInput) -> RetrieveOutput:
            return self._next("retrieve_result", inp)  # type: ignore[no-any-return]

        @activity.defn(name=names.CANCEL_TASK)
        async def cancel_task(inp: CancelInput) -> CancelOutput:
            return self._next("cancel_task", inp)  # type: ignore[no-any-return]

        @activity.defn(name=names.ANSWER_INPUT)
        async def answer_input(inp: AnswerInput) -> None:
            self._next("answer_input", inp)

        @activity.defn(name=names.RELAY_INPUT)
        async def relay_input(inp: RelayInput) -> RelayOutput:
            return self._next("relay_input", inp)  # type: ignore[no-any-return]

        return [resolve, start_call, await_task, poll_task, retrieve_result, cancel_task, answer_input, relay_input]


@pytest.fixture(scope="module")
async def env(skipping_env: WorkflowEnvironment) -> WorkflowEnvironment:
    return skipping_env


@pytest.fixture
async def lone_env(lone_skipping_env: WorkflowEnvironment) -> WorkflowEnvironment:
    """For a test whose wait is cancelled while it heartbeats (``Blocking``): see ``lone_skipping_env``."""
    return lone_skipping_env


async def run(
    env: WorkflowEnvironment,
    fakes: Fakes,
    *,
    steer: Callable[[WorkflowHandle[Any, Any]], Any] | None = None,
    record: str | None = None,
    **request: Any,
) -> McpTaskOutcome:
    """One task through the fakes. ``record``: with MCP_TASKS_RECORD_HISTORIES=1, its history joins the committed
    ones (tests/test_replay.py) when none of that name exists yet."""
    queue = f"fast-{uuid.uuid4().hex[:8]}"
    request.setdefault("timeouts", TIMEOUTS)
    async with Worker(
        env.client,
        task_queue=queue,
        workflows=[McpTaskWorkflow],
        activities=fakes.activities(),
        workflow_runner=workflow_runner(),
    ):
        handle = await start_mcp_task(
            env.client,
            McpTaskRequest(server="fake", tool="t", **request),
            workflow_id=f"fast-{uuid.uuid4().hex[:8]}",
            task_queue=queue,
        )
        if steer is not None:
            await steer(handle)
        out = await asyncio.wait_for(outcome_of(handle), 30)
    if record:
        await keep_history(handle, record)
    return out


REPLAY = {"replay": ReplayPolicy.ALWAYS, "idempotent": True, "max_replays": 1}


def replays(out: McpTaskOutcome) -> list[str]:
    """The replays' reasons: every attempt after the first but an MRTR continuation (``input_response``)."""
    return [a.reason for a in out.operation_attempts[1:] if a.reason != "input_response"]


# --- REQUEST ------------------------------------------------------------------------------------------


async def test_an_invalid_request_is_rejected_before_anything(env: WorkflowEnvironment) -> None:
    fakes = Fakes()
    queue = f"fast-{uuid.uuid4().hex[:8]}"
    async with Worker(
        env.client,
        task_queue=queue,
        workflows=[McpTaskWorkflow],
        activities=fakes.activities(),
        workflow_runner=workflow_runner(),
    ):
        handle = await env.client.start_workflow(
            "McpTaskWorkflow",
            {"server": "fake", "tool": "t", "bogus": 1},
            id=f"fast-{uuid.uuid4().hex[:8]}",
            task_queue=queue,
        )
        out = await outcome_of(handle)
    assert out.outcome == Outcome.REJECTED and "bogus" in (out.reason or "")
    assert sum(fakes.calls.values()) == 0


async def test_an_unknown_server_is_rejected_before_tools_call(env: WorkflowEnvironment) -> None:
    fakes = Fakes(resolve=[ApplicationError("unknown MCP server 'fake'", type="UnknownServer", non_retryable=True)])
    out = await run(env, fakes, **REPLAY)
    assert out.outcome == Outcome.REJECTED and out.reason == "UnknownServer"
    assert fakes.calls["start_call"] == 0


# --- SUBMITTING -------------------------------------------------------------------------------------


async def test_a_synchronous_answer_completes(env: WorkflowEnvironment) -> None:
    out = await run(env, Fakes(start_call=[sync(text("done"))]))
    assert out.outcome == Outcome.COMPLETED and out.result == text("done") and out.task_id is None


async def test_a_synchronous_retryable_tool_error_may_replay(env: WorkflowEnvironment) -> None:
    fakes = Fakes(start_call=[sync(text(RETRYABLE_TEXT, is_error=True)), sync(text("ok"))])
    out = await run(env, fakes, **REPLAY)
    assert out.outcome == Outcome.COMPLETED and replays(out) == ["replay_retryable"]
    assert fakes.calls["start_call"] == 2


async def test_input_asked_on_tools_call_itself_unanswered_is_declined_and_the_call_goes_on(
    env: WorkflowEnvironment,
) -> None:
    """MRTR (patch ``mrtr-continuation``; tests/test_mrtr_fast.py has the answered rounds): nobody answers within the
    input timeout (``on_input_timeout = "decline"``; the default, ``cancel``, ends the task without a continuation),
    so the continuation declines, once; a continuation is never counted as a replay."""
    ask = StartCallOutput(
        start=StartResult(
            era=EXTENSION, session=session(EXTENSION), input_requests={"k": InputRequest(method="elicitation/create")}
        ),
        sdk_version="fake",
    )
    fakes = Fakes(start_call=[ask, sync(text("went on"))])
    out = await run(env, fakes, on_input_timeout="decline", **REPLAY)
    assert out.outcome == Outcome.COMPLETED and fakes.calls["start_call"] == 2 and not replays(out), out
    assert [a.reason for a in out.operation_attempts] == ["initial", "input_response"]


async def test_a_refused_tools_call_is_rejected_never_replayed(env: WorkflowEnvironment) -> None:
    refusal = error_from_rpc({"code": -32602, "message": "bad argument"}, method="tools/call")
    fakes = Fakes(start_call=[wire(refusal)])
    out = await run(env, fakes, **REPLAY)
    assert out.outcome == Outcome.REJECTED and fakes.calls["start_call"] == 1 and not replays(out)


def _never_sent(kind: str, message: str) -> ApplicationError:
    """A refusal before tools/call left, as start_call raises it for a call tools/list already answers."""
    message = f"tools/call was never sent: {message}"
    return ApplicationError(
        message, {"may_have_reached_server": False, "message": message, "code": -32602}, type=kind, non_retryable=True
    )


@pytest.mark.parametrize(
    "failure, classification",
    [
        (wire(HttpRefusal("initialize: HTTP 404 without a JSON-RPC error", code=None), sent=False), None),
        (
            wire(
                AuthorizationRequired(
                    "no access token for http://fake.invalid/mcp (OAuth client 'svc'): cannot reach http://127.0.0.1:1",
                    status=None,
                ),
                sent=False,
            ),
            "authorization_required",
        ),
        (_never_sent("UnknownTool", "the server lists no tool 't' (it lists: a, b)"), "permanent"),
        (
            _never_sent(
                "InvalidArguments",
                "the arguments do not match the input schema of 't': seconds: 'x' is not of type 'number'",
            ),
            "input_correctable",
        ),
    ],
    ids=["initialize_refused", "oauth_failed", "unknown_tool", "schema_mismatch"],
)
async def test_a_refusal_before_tools_call_was_sent_counts_no_attempt(
    env: WorkflowEnvironment, failure: ApplicationError, classification: str | None
) -> None:
    """The attempts ledger holds the calls whose bytes may have left: a refusal before (initialize, auth, discovery,
    the tool list, the input schema) is `rejected` with none, so the same request may run again; never resent."""
    fakes = Fakes(start_call=[failure])
    kind = failure.type
    out = await run(env, fakes, record="rejected_before_tools_call_sent" if kind == "UnknownTool" else None, **REPLAY)
    assert out.outcome == Outcome.REJECTED and out.operation_attempts == [], out
    assert fakes.calls["start_call"] == 1 and out.reason == f"refused before tools/call was sent ({kind})"
    assert out.error is not None and out.error.message.startswith("tools/call was never sent")
    if classification is not None:
        assert out.classification == classification


async def test_a_refusal_of_tools_call_itself_counts_its_attempt(env: WorkflowEnvironment) -> None:
    """A refusal that came after tools/call left (the server refused it) is one attempt, rejected."""
    refusal = error_from_rpc({"code": -32602, "message": "bad argument"}, method="tools/call")
    out = await run(env, Fakes(start_call=[wire(refusal)]))
    assert out.outcome == Outcome.REJECTED and [a.ended for a in out.operation_attempts] == ["rejected"]


async def test_a_server_that_never_took_the_call_is_resent_then_rejected_retryable(env: WorkflowEnvironment) -> None:
    fakes = Fakes(start_call=[wire(TransportError("connection refused", sent=False))])
    out = await run(env, fakes)
    assert out.outcome == Outcome.REJECTED and out.classification == "retryable"
    assert fakes.calls["start_call"] == 4  # the first send and three resends: nothing ever reached the tool


async def test_a_lost_reply_is_unknown_outcome_and_replays_only_by_policy(env: WorkflowEnvironment) -> None:
    lost = wire(TransportError("reset after send", sent=True))
    never = await run(env, Fakes(start_call=[lost]))
    assert never.outcome == Outcome.UNKNOWN_OUTCOME and not replays(never)
    fakes = Fakes(start_call=[lost, sync(text("ok"))])
    out = await run(env, fakes, **REPLAY)
    assert out.outcome == Outcome.COMPLETED and replays(out) == ["replay_unknown_outcome"]


# --- GONE / UNREACHABLE (following) -----------------------------------------------------------------------


async def test_a_task_gone_while_followed_is_lost_and_may_replay(env: WorkflowEnvironment) -> None:
    fakes = Fakes(start_call=[started(), sync(text("ok"))], await_task=[AwaitOutput(not_found=True)])
    out = await run(env, fakes, **REPLAY)
    assert out.outcome == Outcome.COMPLETED and replays(out) == ["replay_lost"]
    alone = await run(env, Fakes(start_call=[started()], await_task=[AwaitOutput(not_found=True)]))
    assert alone.outcome == Outcome.LOST and "-32602" in (alone.reason or "")


async def test_a_session_gone_is_lost_and_may_replay(env: WorkflowEnvironment) -> None:
    fakes = Fakes(start_call=[started(), sync(text("ok"))], await_task=[AwaitOutput(unreachable="session gone")])
    out = await run(env, fakes, **REPLAY)
    assert replays(out) == ["replay_lost"]


async def test_no_usable_answer_is_lost_with_the_servers_error_never_replayed(env: WorkflowEnvironment) -> None:
    last = RpcErrorInfo(code=-32603, message="tasks/get: temporarily unavailable")
    fakes = Fakes(start_call=[started()], await_task=[AwaitOutput(no_answer="9 attempts over 20s", last_error=last)])
    out = await run(env, fakes, **REPLAY)
    assert out.outcome == Outcome.LOST and out.error == last and not replays(out)
    assert fakes.calls["start_call"] == 1


async def test_a_wait_that_fails_is_lost_never_replayed(env: WorkflowEnvironment) -> None:
    fakes = Fakes(start_call=[started()], await_task=[UNEXPECTED])
    out = await run(env, fakes, **REPLAY)
    assert out.outcome == Outcome.LOST and "could not follow" in (out.reason or "") and not replays(out)


# --- PAYLOAD / RETRIEVING ---------------------------------------------------------------------------------


async def test_a_completed_task_delivers_its_result(env: WorkflowEnvironment) -> None:
    fakes = Fakes(start_call=[started()], await_task=[done(text("built"))])
    out = await run(env, fakes)
    assert out.outcome == Outcome.COMPLETED and out.result == text("built") and out.task_status == "completed"
    assert fakes.calls["retrieve_result"] == 0


async def test_a_payload_read_that_failed_is_retrieved_alone(env: WorkflowEnvironment) -> None:
    fakes = Fakes(
        start_call=[started()],
        await_task=[done()],
        retrieve_result=[RetrieveOutput(payload=DecodedPayload(result=text("late")))],
    )
    out = await run(env, fakes, **REPLAY)
    assert out.outcome == Outcome.COMPLETED and out.result == text("late") and fakes.calls["start_call"] == 1


async def test_a_payload_unreadable_for_its_budget_is_result_unavailable_never_replayed(
    env: WorkflowEnvironment,
) -> None:
    fault = error_from_rpc({"code": -32603, "message": "temporarily unavailable"}, method="tasks/result")
    fakes = Fakes(start_call=[started()], await_task=[done()], retrieve_result=[wire(fault, task_read=True)])
    out = await run(env, fakes, record="result_unavailable_after_read_faults", **REPLAY)
    assert out.outcome == Outcome.RESULT_UNAVAILABLE and not replays(out)
    assert out.error is not None and out.error.code == -32603 and "temporarily unavailable" in out.error.message
    assert fakes.calls["retrieve_result"] > 1 and "attempts over" in (out.reason or "")


@pytest.mark.parametrize("gone", ["not_found", "unreachable"])
async def test_a_payload_purged_before_it_was_read_never_replays(env: WorkflowEnvironment, gone: str) -> None:
    answer = RetrieveOutput(not_found=True) if gone == "not_found" else RetrieveOutput(unreachable="session gone")
    fakes = Fakes(start_call=[started()], await_task=[done()], retrieve_result=[answer])
    out = await run(env, fakes, **REPLAY)
    assert out.outcome in (Outcome.LOST, Outcome.EXPIRED) and not replays(out) and fakes.calls["start_call"] == 1


async def test_a_retryable_stored_failure_may_replay(env: WorkflowEnvironment) -> None:
    failure = RpcErrorInfo(code=-32000, message=RETRYABLE_TEXT)
    fakes = Fakes(
        start_call=[started(EXTENSION), sync(text("ok"))],
        await_task=[done(status="failed", era=EXTENSION, error=failure)],
    )
    out = await run(env, fakes, **REPLAY)
    assert replays(out) == ["replay_retryable"]


async def test_a_legacy_error_reply_payload_never_replays(env: WorkflowEnvironment) -> None:
    """2025-11-25: a failed task's error that came as the reply to tasks/result may be a refused read."""
    failure = RpcErrorInfo(code=-32603, message="temporarily unavailable, try again")
    fakes = Fakes(start_call=[started(LEGACY)], await_task=[done(status="failed", era=LEGACY, error=failure)])
    out = await run(env, fakes, record="error_reply_never_replays_legacy", **REPLAY)
    assert out.outcome == Outcome.FAILED and out.classification == "retryable" and not replays(out)
    assert fakes.calls["start_call"] == 1


# --- INPUT ------------------------------------------------------------------------------------------------


def asking(era: str = EXTENSION) -> AwaitOutput:
    return AwaitOutput(
        state=task(
            "input_required",
            era,
            input_requests={"k1": InputRequest(method="elicitation/create", params={"message": "approve?"})},
        ),
        polls=1,
    )


async def answer(handle: WorkflowHandle[Any, Any]) -> None:
    view = await wait_for_view(handle, lambda v: v.phase == Phase.INPUT_REQUIRED and v.pending_inputs, timeout_s=20)
    await handle.execute_update(McpTaskWorkflow.provide_input, {view.pending_inputs[0].key: {"action": "decline"}})


async def test_input_is_answered_with_tasks_update_then_the_task_completes(env: WorkflowEnvironment) -> None:
    fakes = Fakes(
        start_call=[started(EXTENSION)], await_task=[asking(), done(text("ok"), era=EXTENSION)], answer_input=[None]
    )
    out = await run(env, fakes, steer=answer)
    assert out.outcome == Outcome.COMPLETED and fakes.calls["answer_input"] == 1
    assert fakes.inputs["answer_input"][0].responses == {"k1": {"action": "decline"}}


async def test_answers_to_a_task_gone_end_lost_and_may_replay(env: WorkflowEnvironment) -> None:
    gone = wire(TaskNotFound("tasks/update: Task not found", code=-32602), task_read=True)
    fakes = Fakes(start_call=[started(EXTENSION), sync(text("ok"))], await_task=[asking()], answer_input=[gone])
    out = await run(env, fakes, steer=answer, **REPLAY)
    assert replays(out) == ["replay_lost"]


async def test_answers_that_cannot_be_delivered_end_lost_never_replayed(env: WorkflowEnvironment) -> None:
    fault = wire(JsonRpcError("tasks/update: temporarily unavailable", code=-32603), task_read=True)
    fakes = Fakes(start_call=[started(EXTENSION)], await_task=[asking()], answer_input=[fault])
    out = await run(env, fakes, steer=answer, record="input_undeliverable_lost", **REPLAY)
    assert out.outcome == Outcome.LOST and not replays(out) and fakes.calls["answer_input"] > 1
    assert out.error is not None and out.error.code == -32603


async def test_legacy_input_is_relayed_and_the_relays_payload_ends_the_task(env: WorkflowEnvironment) -> None:
    relayed = RelayOutput(state=task("completed"), payload=DecodedPayload(result=text("relayed")))
    fakes = Fakes(start_call=[started(LEGACY)], await_task=[asking(LEGACY)], relay_input=[relayed])
    out = await run(env, fakes)
    assert out.outcome == Outcome.COMPLETED and out.result == text("relayed")


async def test_a_relay_that_fails_is_lost_never_replayed(env: WorkflowEnvironment) -> None:
    fakes = Fakes(start_call=[started(LEGACY)], await_task=[asking(LEGACY)], relay_input=[UNEXPECTED])
    out = await run(env, fakes, **REPLAY)
    assert out.outcome == Outcome.LOST and not replays(out)


# --- WORKING, nothing running between polls ------------------------------------------------------------


def still_working(gap_s: float = 600.0) -> ApplicationError:
    """A poll_task attempt that found the task working, exactly as the real one ends it."""
    return ApplicationError(
        f"working (next in {gap_s:.0f}s)",
        {"status": "working"},
        type=names.STILL_WORKING,
        next_retry_delay=timedelta(seconds=gap_s),
        category=ApplicationErrorCategory.BENIGN,
    )


IDLE = AwaitOutput(state=task(), polls=3, idle=True)


def scheduled(events: list[Any], activity_type: str) -> int:
    return sum(
        1
        for e in events
        if e.HasField("activity_task_scheduled_event_attributes")
        and e.activity_task_scheduled_event_attributes.activity_type.name == activity_type
    )


async def test_a_wait_whose_polls_are_far_apart_goes_on_with_nothing_running_between_them(
    env: WorkflowEnvironment,
) -> None:
    handles: list[WorkflowHandle[Any, Any]] = []

    async def keep(handle: WorkflowHandle[Any, Any]) -> None:
        handles.append(handle)

    fakes = Fakes(
        start_call=[started()],
        await_task=[IDLE],
        poll_task=[still_working(), still_working(), still_working(), done(text("built"))],
    )
    out = await run(env, fakes, steer=keep, record="idle_wait_completed")
    assert out.outcome == Outcome.COMPLETED and out.result == text("built")
    assert fakes.calls["await_task"] == 1 and fakes.calls["poll_task"] == 4
    # The heartbeating wait hands over once the gap reaches 0.8 × the heartbeat timeout.
    assert fakes.inputs["await_task"][0].hand_over_gap_s == pytest.approx(0.8 * TIMEOUTS.heartbeat_s)
    events = [e async for e in handles[0].fetch_history_events()]
    # Four polls, one scheduled activity: retries of poll_task add no history events.
    assert scheduled(events, names.POLL_TASK) == 1 and scheduled(events, names.AWAIT_TASK) == 1
    assert not any(e.HasField("timer_started_event_attributes") for e in events)  # no deadline: no timer


async def test_idle_gap_zero_keeps_the_whole_wait_in_one_heartbeating_activity(env: WorkflowEnvironment) -> None:
    fakes = Fakes(start_call=[started()], await_task=[done(text("built"))])
    out = await run(env, fakes, timeouts=TIMEOUTS.model_copy(update={"idle_gap_s": 0}))
    assert out.outcome == Outcome.COMPLETED and fakes.inputs["await_task"][0].hand_over_gap_s is None


async def test_input_asked_during_an_idle_wait_is_answered_and_the_wait_goes_on_idle(env: WorkflowEnvironment) -> None:
    fakes = Fakes(
        start_call=[started(EXTENSION)],
        await_task=[IDLE],
        answer_input=[None],
        poll_task=[still_working(0.2), asking(), still_working(0.2), done(text("ok"), era=EXTENSION)],
    )
    out = await run(env, fakes, steer=answer)  # short gaps: the test server skips time only while a result is awaited
    assert out.outcome == Outcome.COMPLETED and fakes.calls["answer_input"] == 1
    assert fakes.calls["await_task"] == 1 and fakes.calls["poll_task"] == 4  # after the answer: still no heartbeats


async def test_a_cancel_reaches_an_idle_wait_without_waiting_for_its_next_poll(env: WorkflowEnvironment) -> None:
    # Every gap is a day: a cancel that waited for the next attempt would not end this test in time.
    fakes = Fakes(
        start_call=[started()],
        await_task=[IDLE, AwaitOutput(state=task("cancelled"), polls=1)],
        poll_task=[still_working(86400.0)],
        cancel_task=[CancelOutput(state=task("cancelled"))],
    )

    async def cancel(handle: WorkflowHandle[Any, Any]) -> None:
        await until(lambda: fakes.calls["poll_task"] >= 1, 20, "the first idle poll")
        await handle.execute_update(McpTaskWorkflow.cancel, "operator")

    out = await run(env, fakes, steer=cancel, **REPLAY)
    assert out.outcome == Outcome.CANCELLED and fakes.calls["cancel_task"] == 1 and fakes.calls["poll_task"] == 1
    assert not replays(out)


async def test_the_deadline_ends_an_idle_wait_by_a_timer(env: WorkflowEnvironment) -> None:
    fakes = Fakes(
        start_call=[started()],
        await_task=[IDLE, AwaitOutput(state=task("cancelled"), polls=1)],
        poll_task=[still_working(600.0)],
        cancel_task=[CancelOutput(state=task("cancelled"))],
    )
    deadline = await env.get_current_time() + timedelta(hours=1)
    out = await run(env, fakes, deadline=deadline, **REPLAY)
    assert out.outcome == Outcome.CANCELLED and "deadline" in (out.reason or "") and fakes.calls["cancel_task"] == 1
    # One attempt per 600 s gap within the hour (the time-skipping server runs the gaps), not one per heartbeat.
    assert 2 <= fakes.calls["poll_task"] <= 8 and not replays(out)


async def test_a_poll_that_keeps_failing_idle_is_lost_never_replayed(env: WorkflowEnvironment) -> None:
    last = RpcErrorInfo(code=-32603, message="temporarily unavailable")
    fakes = Fakes(
        start_call=[started()],
        await_task=[IDLE],
        poll_task=[still_working(), AwaitOutput(no_answer="9 attempts over 20s", last_error=last)],
    )
    out = await run(env, fakes, **REPLAY)
    assert out.outcome == Outcome.LOST and out.error == last and not replays(out)


# --- WORKING, woken by a server's notification -------------------------------------------------------------


async def test_a_notification_wakes_an_idle_wait_and_the_read_that_follows_decides(env: WorkflowEnvironment) -> None:
    """The signal drops the pending poll (a day away) and the task is read at once; a notice about another task, a
    malformed one and a repeated one change nothing (one wake per status)."""
    fakes = Fakes(start_call=[started()], await_task=[IDLE, done(text("told"))], poll_task=[still_working(86400.0)])

    async def notify(handle: WorkflowHandle[Any, Any]) -> None:
        await until(lambda: fakes.calls["poll_task"] >= 1, 20, "the first idle poll")
        await handle.signal(TASK_NOTIFIED_SIGNAL, {"task_id": "another", "status": "completed"})
        await handle.signal(TASK_NOTIFIED_SIGNAL, {"task_id": "t-1", "status": "bogus"})
        await handle.signal(TASK_NOTIFIED_SIGNAL, "not a notice")
        await handle.signal(TASK_NOTIFIED_SIGNAL, {"task_id": "t-1", "status": "working"})
        await handle.signal(TASK_NOTIFIED_SIGNAL, {"task_id": "t-1", "status": "completed"})
        await handle.signal(TASK_NOTIFIED_SIGNAL, {"task_id": "t-1", "status": "completed"})

    out = await run(env, fakes, steer=notify, record="notified_wake_idle")
    assert out.outcome == Outcome.COMPLETED and out.result == text("told")
    assert out.delivered_by == "notification"
    assert fakes.calls["poll_task"] == 1 and fakes.calls["await_task"] == 2
    assert fakes.inputs["await_task"][1].first_poll_at is None  # the woken read polls at once


async def test_a_notification_that_lied_costs_one_read_and_the_poll_ends_the_task(env: WorkflowEnvironment) -> None:
    fakes = Fakes(
        start_call=[started()],
        await_task=[IDLE, IDLE],
        poll_task=[still_working(86400.0), still_working(0.2), done(text("true end"))],
    )

    async def lie(handle: WorkflowHandle[Any, Any]) -> None:
        await until(lambda: fakes.calls["poll_task"] >= 1, 20, "the first idle poll")
        await handle.signal(TASK_NOTIFIED_SIGNAL, {"task_id": "t-1", "status": "completed"})
        await until(lambda: fakes.calls["await_task"] >= 2, 20, "the read after the notification")
        await handle.signal(TASK_NOTIFIED_SIGNAL, {"task_id": "t-1", "status": "completed"})  # again: ignored

    out = await run(env, fakes, steer=lie)
    assert out.outcome == Outcome.COMPLETED and out.result == text("true end") and out.delivered_by == "poll"
    assert fakes.calls["await_task"] == 2 and fakes.calls["start_call"] == 1


async def test_a_task_seen_ending_by_its_polls_says_so(env: WorkflowEnvironment) -> None:
    out = await run(env, Fakes(start_call=[started()], await_task=[done(text("built"))]))
    assert out.delivered_by == "poll"
    sync_out = await run(env, Fakes(start_call=[sync(text("done"))]))
    assert sync_out.delivered_by is None  # no wait saw it end


# --- CANCELLING -------------------------------------------------------------------------------------------


class Blocking(Fakes):
    """await_task blocks (heartbeating) until cancelled, except the short settle after tasks/cancel."""

    def activities(self) -> list[Callable[..., Any]]:
        acts = [
            a for a in super().activities() if getattr(a, "__temporal_activity_definition").name != names.AWAIT_TASK
        ]

        @activity.defn(name=names.AWAIT_TASK)
        async def await_task(inp: AwaitInput) -> AwaitOutput:
            self.calls["await_task"] += 1
            if inp.poll_ceiling_s == 2.0:
                return self._next("settle", inp)  # type: ignore[no-any-return]
            while True:
                activity.heartbeat()
                await asyncio.sleep(0.5)

        return [*acts, await_task]


async def cancel_when_working(handle: WorkflowHandle[Any, Any]) -> None:
    await wait_for_view(handle, lambda v: v.phase == Phase.WORKING and v.task_id, timeout_s=20)
    await handle.execute_update(McpTaskWorkflow.cancel, "operator")


@pytest.mark.parametrize(
    "settled, want",
    [
        (AwaitOutput(state=task("cancelled"), polls=1), Outcome.CANCELLED),
        (done(text("finished first")), Outcome.COMPLETED),
    ],
)
async def test_a_cancel_sends_tasks_cancel_and_keeps_the_tasks_true_end(
    lone_env: WorkflowEnvironment, settled: AwaitOutput, want: Outcome
) -> None:
    fakes = Blocking(start_call=[started()], cancel_task=[CancelOutput(state=task("cancelled"))], settle=[settled])
    out = await run(lone_env, fakes, steer=cancel_when_working, **REPLAY)
    assert out.outcome == want and fakes.calls["cancel_task"] == 1 and not replays(out)


async def test_a_cancel_of_a_task_already_gone(lone_env: WorkflowEnvironment) -> None:
    fakes = Blocking(start_call=[started()], cancel_task=[CancelOutput(not_found=True)])
    out = await run(lone_env, fakes, steer=cancel_when_working, **REPLAY)
    assert out.outcome == Outcome.CANCELLED and "already gone" in (out.reason or "") and not replays(out)


async def test_a_cancel_the_server_never_answers_says_the_task_may_still_run(lone_env: WorkflowEnvironment) -> None:
    fault = wire(JsonRpcError("tasks/cancel: temporarily unavailable", code=-32603), task_read=True)
    fakes = Blocking(start_call=[started()], cancel_task=[fault])
    # A 5 s read budget (retries 1 s apart): once the cancelled wait leaves the test server unsure whether an
    # activity still runs, it may stop skipping time, and a 20 s budget's backoff then runs on the wall clock.
    budget = TIMEOUTS.model_copy(update={"unreachable_s": 5})
    out = await run(lone_env, fakes, steer=cancel_when_working, timeouts=budget, **REPLAY)
    assert out.outcome == Outcome.CANCELLED and "may still be running" in (out.reason or "")
    assert out.error is not None and out.error.code == -32603 and fakes.calls["cancel_task"] > 1


async def test_a_cancel_whose_final_state_is_unknown(lone_env: WorkflowEnvironment) -> None:
    fakes = Blocking(start_call=[started()], cancel_task=[CancelOutput(state=task("working"))], settle=[UNEXPECTED])
    out = await run(lone_env, fakes, steer=cancel_when_working)
    assert out.outcome == Outcome.CANCELLED and "final state unknown" in (out.reason or "")


# --- AWAITING_APPROVAL → REPLAYING → SUBMITTING ---------------------------------------------------------


async def test_a_replay_with_approval_waits_for_an_operator(env: WorkflowEnvironment) -> None:
    fakes = Fakes(start_call=[started(), sync(text("ok"))], await_task=[AwaitOutput(not_found=True)])

    async def approve(handle: WorkflowHandle[Any, Any]) -> None:
        await wait_for_view(handle, lambda v: v.phase == Phase.AWAITING_APPROVAL, timeout_s=20)
        assert fakes.calls["start_call"] == 1
        await handle.execute_update(McpTaskWorkflow.approve_replay)

    out = await run(env, fakes, steer=approve, replay=ReplayPolicy.WITH_APPROVAL)
    assert out.outcome == Outcome.COMPLETED and replays(out) == ["replay_lost"]


async def test_a_replay_not_approved_before_a_cancel_keeps_the_first_ending(env: WorkflowEnvironment) -> None:
    fakes = Fakes(start_call=[started()], await_task=[AwaitOutput(not_found=True)])

    async def refuse(handle: WorkflowHandle[Any, Any]) -> None:
        await wait_for_view(handle, lambda v: v.phase == Phase.AWAITING_APPROVAL, timeout_s=20)
        await handle.execute_update(McpTaskWorkflow.cancel, "no")

    out = await run(env, fakes, steer=refuse, replay=ReplayPolicy.WITH_APPROVAL)
    assert out.outcome == Outcome.LOST and "not approved" in (out.reason or "") and fakes.calls["start_call"] == 1


async def test_max_replays_is_the_bound(env: WorkflowEnvironment) -> None:
    fakes = Fakes(start_call=[started()], await_task=[AwaitOutput(not_found=True)])
    out = await run(env, fakes, replay=ReplayPolicy.ALWAYS, idempotent=True, max_replays=2)
    assert out.outcome == Outcome.LOST and replays(out) == ["replay_lost", "replay_lost"]
    assert fakes.calls["start_call"] == 3


# --- the phases a task went through -------------------------------------------------------------------------


async def test_a_run_through_input_a_lost_task_and_a_replay_makes_only_allowed_moves(env: WorkflowEnvironment) -> None:
    """SUBMITTING → WORKING → INPUT_REQUIRED → WORKING → REPLAYING → SUBMITTING → WORKING → DONE: the machine checks
    each move against TRANSITIONS itself, and a move it does not allow fails the workflow task (no outcome)."""
    fakes = Fakes(
        start_call=[started(EXTENSION)],
        await_task=[asking(), AwaitOutput(not_found=True), done(text("ok"), era=EXTENSION)],
        answer_input=[None],
    )
    out = await run(env, fakes, steer=answer, **REPLAY)
    assert out.outcome == Outcome.COMPLETED and replays(out) == ["replay_lost"]
    assert fakes.calls["await_task"] == 3 and fakes.calls["answer_input"] == 1


async def test_a_task_cancelled_through_temporal_shows_canceled_with_its_outcome_kept(
    lone_env: WorkflowEnvironment,
) -> None:
    """handle.cancel() (what `mcp-tasks cancel` sends): the UI shows Canceled, and outcome_of still reads the whole
    outcome (from the memo: a cancellation carries no details). The cancel update still ends Failed."""
    from temporalio.client import WorkflowExecutionStatus

    fakes = Blocking(
        start_call=[started()],
        cancel_task=[CancelOutput(state=task("cancelled"))],
        settle=[AwaitOutput(state=task("cancelled"), polls=1)],
    )
    handles: list[WorkflowHandle[Any, Any]] = []

    async def cancel(handle: WorkflowHandle[Any, Any]) -> None:
        await wait_for_view(handle, lambda v: v.phase == Phase.WORKING and v.task_id, timeout_s=20)
        handles.append(handle)
        await handle.cancel()

    out = await run(lone_env, fakes, steer=cancel, record="cancelled_through_temporal_canceled")
    assert out.outcome == Outcome.CANCELLED and out.task_id == "t-1" and fakes.calls["cancel_task"] == 1
    assert (await handles[0].describe()).status == WorkflowExecutionStatus.CANCELED

    by_update: list[WorkflowHandle[Any, Any]] = []

    async def update(handle: WorkflowHandle[Any, Any]) -> None:
        await cancel_when_working(handle)
        by_update.append(handle)

    again = await run(
        lone_env,
        Blocking(
            start_call=[started()],
            cancel_task=[CancelOutput(state=task("cancelled"))],
            settle=[AwaitOutput(state=task("cancelled"), polls=1)],
        ),
        steer=update,
    )
    assert again.outcome == Outcome.CANCELLED
    assert (await by_update[0].describe()).status == WorkflowExecutionStatus.FAILED


@workflow.defn(name="FastParent", sandboxed=False)
class Parent:
    """A parent workflow calling one tool through McpTasksClient, as agent adapters do."""

    @workflow.run
    async def run(self, child_id: str) -> McpTaskOutcome:
        return await McpTasksClient("fake").run("t", {}, child_id=child_id)


async def test_a_child_cancelled_on_purpose_gives_its_parent_the_cancelled_outcome(
    lone_env: WorkflowEnvironment,
) -> None:
    """The child ends Canceled (no details); the parent reads its outcome from the child's memo."""
    from mcp_temporal_tasks.activities.mcp_activities import McpActivities

    fakes = Blocking(
        start_call=[started()],
        cancel_task=[CancelOutput(state=task("cancelled"))],
        settle=[AwaitOutput(state=task("cancelled"), polls=1)],
    )
    queue, child_id = f"fast-{uuid.uuid4().hex[:8]}", f"child-{uuid.uuid4().hex[:8]}"
    async with Worker(
        lone_env.client,
        task_queue=queue,
        workflows=[McpTaskWorkflow, Parent],
        activities=[*fakes.activities(), McpActivities().fetch_outcome],
        workflow_runner=workflow_runner(),
    ):
        parent = await lone_env.client.start_workflow(
            Parent.run, child_id, id=f"parent-{uuid.uuid4().hex[:8]}", task_queue=queue
        )
        child = lone_env.client.get_workflow_handle(child_id)
        await wait_for_view(child, lambda v: v.phase == Phase.WORKING and v.task_id, timeout_s=20)
        await child.cancel()
        out = await asyncio.wait_for(parent.result(), 30)
    assert out.outcome == Outcome.CANCELLED and out.workflow_id == child_id and fakes.calls["start_call"] == 1


async def test_an_attempt_is_dated_when_tools_call_was_sent_not_when_its_reply_came(env: WorkflowEnvironment) -> None:
    """A synchronous tool whose reply comes 3 s (of the test server's skipped clock) after the call was sent:
    operation_attempts[].at is the send time, as it is for a task."""
    sent, replied = asyncio.Event(), asyncio.Event()
    fakes = Fakes()
    queue = f"fast-{uuid.uuid4().hex[:8]}"

    @activity.defn(name=names.START_CALL)
    async def start_call(inp: StartCallInput) -> StartCallOutput:
        sent.set()
        await replied.wait()
        return sync(text("done"))

    acts = [a for a in fakes.activities() if getattr(a, "__temporal_activity_definition").name != names.START_CALL]
    async with Worker(
        env.client,
        task_queue=queue,
        workflows=[McpTaskWorkflow],
        activities=[*acts, start_call],
        workflow_runner=workflow_runner(),
    ):
        handle = await start_mcp_task(
            env.client,
            McpTaskRequest(server="fake", tool="t", timeouts=TIMEOUTS),
            workflow_id=f"fast-{uuid.uuid4().hex[:8]}",
            task_queue=queue,
        )
        await asyncio.wait_for(sent.wait(), 20)
        await env.sleep(3)  # Temporal's clock moves 3 s while the call is out (under the 5 s heartbeat timeout)
        replied.set()
        out = await asyncio.wait_for(outcome_of(handle), 30)
    events = [e async for e in handle.fetch_history_events()]
    scheduled = next(
        e.event_time.ToDatetime(tzinfo=UTC)
        for e in events
        if e.activity_task_scheduled_event_attributes.activity_type.name == names.START_CALL
    )
    completed = next(
        e.event_time.ToDatetime(tzinfo=UTC) for e in events if e.HasField("activity_task_completed_event_attributes")
    )
    at = out.operation_attempts[0].at
    assert out.outcome == Outcome.COMPLETED and (completed - scheduled).total_seconds() >= 2.9, (scheduled, completed)
    assert abs((at - scheduled).total_seconds()) < 1.0, (at, scheduled, completed)


async def test_a_task_cancelled_before_tools_call_was_sent_still_has_an_outcome(lone_env: WorkflowEnvironment) -> None:
    """Cancelled while its server is being resolved: Canceled, with a cancelled outcome and nothing sent."""
    from temporalio.client import WorkflowExecutionStatus

    fakes = Fakes()
    resolving = asyncio.Event()

    @activity.defn(name=names.RESOLVE)
    async def resolve(inp: ResolveInput) -> ServerProfile:
        resolving.set()
        while True:  # until the cancel reaches it
            activity.heartbeat()
            await asyncio.sleep(0.1)

    acts = [a for a in fakes.activities() if getattr(a, "__temporal_activity_definition").name != names.RESOLVE]
    queue = f"fast-{uuid.uuid4().hex[:8]}"
    async with Worker(
        lone_env.client,
        task_queue=queue,
        workflows=[McpTaskWorkflow],
        activities=[*acts, resolve],
        workflow_runner=workflow_runner(),
    ):
        handle = await start_mcp_task(
            lone_env.client,
            McpTaskRequest(server="fake", tool="t", timeouts=TIMEOUTS),
            workflow_id=f"fast-{uuid.uuid4().hex[:8]}",
            task_queue=queue,
        )
        await asyncio.wait_for(resolving.wait(), 20)
        await handle.cancel()
        out = await asyncio.wait_for(outcome_of(handle), 30)
    assert out.outcome == Outcome.CANCELLED and "before tools/call was sent" in (out.reason or "")
    assert not out.operation_attempts and fakes.calls["start_call"] == 0
    assert (await handle.describe()).status == WorkflowExecutionStatus.CANCELED


# --- what a server says about waiting is bounded: never a crash, never a call counted lost ---------------------


@pytest.mark.parametrize(
    "header", ["7", "-3", "inf", "nan", "1e15", "soon", "99999999999999999999", "Fri, 31 Dec 9999 23:59:59 GMT"]
)
async def test_a_429_on_tools_call_is_never_an_unknown_outcome(env: WorkflowEnvironment, header: str) -> None:
    """A 429 is a refusal: the call did not run, whatever its Retry-After says. Usable ones are waited out before a
    resend; unusable ones are ignored (backoff instead); a day-long one ends the task rejected at once."""
    after = read_retry_after(header)
    limited = wire(RateLimited("tools/call: HTTP 429", retry_after_s=after.seconds, retry_after_note=after.note))
    fakes = Fakes(start_call=[limited])
    out = await run(env, fakes)
    assert out.outcome == Outcome.REJECTED and out.classification == "retryable", out
    assert all(a.ended != Outcome.UNKNOWN_OUTCOME.value for a in out.operation_attempts), out.operation_attempts
    clamped = after.seconds == MAX_RETRY_AFTER_S
    assert fakes.calls["start_call"] == (1 if clamped else 4)  # resent three times unless the wait is past bounds
    if clamped:
        assert out.retry_after_s == MAX_RETRY_AFTER_S


async def test_a_retry_after_no_timer_can_hold_is_bounded_in_the_workflow(env: WorkflowEnvironment) -> None:
    """A tool's own text asking for an absurd wait (400 digits: float inf) must not fail the workflow task forever:
    the replay waits at most a day (skipped here) and goes on."""
    absurd = text("HTTP 429 Too Many Requests; retry-after=" + "9" * 400, is_error=True)
    fakes = Fakes(start_call=[sync(absurd), sync(text("ok"))])
    out = await run(env, fakes, **REPLAY)
    assert out.outcome == Outcome.COMPLETED and replays(out) == ["replay_retryable"]


async def test_a_request_refused_before_it_was_written_is_rejected_not_resent(env: WorkflowEnvironment) -> None:
    refused = wire(RequestRefused("tools/call: the request cannot be sent: Illegal header value b'a\\nb'"))
    fakes = Fakes(start_call=[refused])
    out = await run(env, fakes, **REPLAY)
    assert out.outcome == Outcome.REJECTED and fakes.calls["start_call"] == 1 and not replays(out)
    assert out.error is not None and "Illegal header value" in out.error.message


# --- ENDINGS THAT NEED NO PEER ------------------------------------------------------------------------------


async def test_a_task_gone_after_its_ttl_is_expired(env: WorkflowEnvironment) -> None:
    aged = StartCallOutput(
        start=StartResult(
            era=LEGACY,
            session=session(),
            task=TaskState(task_id="t-1", status="working", era=LEGACY, created_at="2000-01-01T00:00:00Z", ttl_ms=1000),
        ),
        sdk_version="fake",
    )
    fakes = Fakes(start_call=[aged], await_task=[AwaitOutput(not_found=True)])
    out = await run(env, fakes)
    assert out.outcome == Outcome.EXPIRED and "after its TTL" in (out.reason or "")
    assert not replays(out) and fakes.calls["start_call"] == 1


async def test_a_stored_tool_error_ends_tool_error(env: WorkflowEnvironment) -> None:
    fakes = Fakes(start_call=[started()], await_task=[done(text("no such order", is_error=True))])
    out = await run(env, fakes)
    assert out.outcome == Outcome.TOOL_ERROR and out.task_status == "completed" and not replays(out)


async def test_a_stored_failure_ends_failed_with_the_servers_error(env: WorkflowEnvironment) -> None:
    failure = RpcErrorInfo(code=-32000, message="disk full")
    fakes = Fakes(start_call=[started(EXTENSION)], await_task=[done(status="failed", era=EXTENSION, error=failure)])
    out = await run(env, fakes)
    assert out.outcome == Outcome.FAILED and out.error is not None and out.error.message == "disk full"
    assert not replays(out) and fakes.calls["start_call"] == 1
