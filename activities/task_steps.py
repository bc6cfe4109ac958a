"""Steps on a task that exists: retrieve, cancel, answer, relay 2025-11-25 input, a child's outcome.

``retrieve_result``, ``cancel_task``, ``answer_input`` (``tasks/update``), ``relay_input``, ``fetch_outcome``. The one
rule: each is idempotent and retried by the workflow's bounded policy on a read fault; ``-32602`` (gone) and an
unreachable session are answers, not failures. None re-calls the tool.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, TypeVar

from temporalio import activity
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ApplicationError, CancelledError

from mcp_temporal_tasks.activities.activity_io import (
    OUTCOME_MEMO,
    AnswerInput,
    CancelInput,
    CancelOutput,
    DecodedPayload,
    FetchOutcomeInput,
    RelayInput,
    RelayOutput,
    RetrieveInput,
    RetrieveOutput,
    outcome_in_failure,
)
from mcp_temporal_tasks.activities.failure_encoding import to_application_error
from mcp_temporal_tasks.activities.heartbeats import ANSWERING, CANCELLING, RETRIEVING, Heartbeat
from mcp_temporal_tasks.activities.input_relay import InputRelay, refuse_unless_form
from mcp_temporal_tasks.activities.shared import Shared, count, heartbeating, tasks_of
from mcp_temporal_tasks.activities.wire import (
    JsonRpcError,
    McpWireError,
    TaskNotFound,
    TaskUnreachable,
    TransportError,
    WireSession,
)
from mcp_temporal_tasks.activities.wire.tracing import annotate
from mcp_temporal_tasks.protocol.limits import short_id
from mcp_temporal_tasks.protocol.tasks import TaskPayload, TaskState
from mcp_temporal_tasks.protocol.wire_errors import PayloadUnusable

T = TypeVar("T")


async def _on_task(out_type: type[T], fn: Callable[[], Awaitable[T]], beat: Heartbeat) -> T:
    """Run an idempotent step on an existing task, heartbeating: -32602 and unreachable sessions are answers, not
    failures; garbled replies and transport faults are retried by the activity's policy."""
    try:
        return await heartbeating(fn(), beat)
    except TaskNotFound:
        return out_type(not_found=True)  # type: ignore[call-arg]
    except TaskUnreachable as exc:
        return out_type(unreachable=exc.message)  # type: ignore[call-arg]
    except McpWireError as exc:
        raise to_application_error(exc, task_read=True)


class TaskSteps:
    """The steps on an existing task, over the shared session pool."""

    def __init__(self, shared: Shared) -> None:
        self.shared = shared

    async def retrieve_result(self, inp: RetrieveInput) -> RetrieveOutput:
        """The payload of a terminal task, again (legacy ``tasks/result``). Idempotent, heartbeating; never re-calls
        the tool.

        Read faults (transport faults, garbled replies, JSON-RPC errors that are not the task's stored payload)
        raise retryable errors, with bounded backoff (the workflow bounds the retries by the task's TTL or the
        deadline); a payload that cannot be carried comes back as decode_failed.
        """

        async def retrieve() -> RetrieveOutput:
            try:
                _, raw = await self.shared.pool.read_task(
                    inp.session, principal=inp.principal, fn=lambda s: tasks_of(s, inp.job).result(inp.state)
                )
                payload = self.shared.decode(raw, inp.output_schema)
            except PayloadUnusable as exc:
                payload = DecodedPayload(decode_error=exc.message, raw=exc.raw)
            return RetrieveOutput(payload=payload)

        self.shared.moved_on(inp.session, inp.principal, inp.state.task_id)
        beat = Heartbeat(task_id=short_id(inp.state.task_id), step=RETRIEVING, status=inp.state.status)
        annotate(task_id=inp.state.task_id, status=inp.state.status)
        try:
            out = await _on_task(RetrieveOutput, retrieve, beat)
        except ApplicationError:
            count("mcp_tasks_retrievals", "task payload retrievals", outcome="error")
            raise
        if out.payload is not None:
            count("mcp_tasks_retrievals", "task payload retrievals", outcome="ok")
        return out

    async def cancel_task(self, inp: CancelInput) -> CancelOutput:
        """``tasks/cancel`` (or a job's cancel tool); idempotent, heartbeating. Read faults raise retryable errors,
        retried within the workflow's bound; a task gone or unreachable is an answer (``not_found``,
        ``unreachable``)."""

        async def cancel() -> CancelOutput:
            _, state = await self.shared.pool.read_task(
                inp.session, principal=inp.principal, fn=lambda s: tasks_of(s, inp.job).cancel(inp.task_id)
            )
            return CancelOutput(state=state.model_copy(update={"result": None}) if state else None)

        self.shared.moved_on(inp.session, inp.principal, inp.task_id)
        annotate(task_id=inp.task_id)
        return await _on_task(CancelOutput, cancel, Heartbeat(task_id=short_id(inp.task_id), step=CANCELLING))

    async def answer_input(self, inp: AnswerInput) -> None:
        """``tasks/update`` with the answers (2026-07-28); idempotent (servers ignore a key answered twice), so
        every read fault (JSON-RPC errors included) is retried by the workflow's bounded policy; ``-32602``
        (``TaskNotFound``: the task is gone) is final."""
        self.shared.moved_on(inp.session, inp.principal, inp.task_id)
        try:
            await heartbeating(
                self.shared.pool.read_task(
                    inp.session, principal=inp.principal, fn=lambda s: s.update(inp.task_id, inp.responses)
                ),
                Heartbeat(task_id=short_id(inp.task_id), step=ANSWERING),
            )
        except McpWireError as exc:
            raise to_application_error(exc, task_read=True)

    async def fetch_outcome(self, inp: FetchOutcomeInput) -> dict[str, Any]:
        """The outcome (JSON) of an existing ``McpTaskWorkflow``: how a reset parent re-attaches to its child.

        A child that did not complete failed with the outcome as its failure's first detail; that is passed on
        as is (the caller types it). Any other failure is raised: it is not an outcome.
        """
        handle = activity.client().get_workflow_handle(inp.workflow_id)
        try:
            value = await heartbeating(handle.result(), Heartbeat(waiting_for=inp.workflow_id))
        except WorkflowFailureError as err:
            outcome = outcome_in_failure(err)
            if outcome is None and isinstance(err.cause, CancelledError):
                # Cancelled on purpose: the outcome is in the memo (a cancellation carries no details).
                outcome = (await (await handle.describe()).memo()).get(OUTCOME_MEMO)
            if not isinstance(outcome, dict):
                raise
            return outcome
        return value if isinstance(value, dict) else value.model_dump(mode="json")

    async def relay_input(self, inp: RelayInput) -> RelayOutput:
        """2025-11-25 input: hold ``tasks/result`` open and relay each input request through the workflow.

        Each ``elicitation/create`` is handed to the workflow (signal), whose answer (given with the
        ``provide_input`` update) is read back by query and sent on the wire (``input_relay.py``). A request whose
        content the workflow has already answered is answered from that record: a human is never asked twice.
        An attempt that replaces a dead one first delivers answers still owed to the server's original
        request ids (the server keeps those requests pending), then re-opens ``tasks/result``.
        ``sampling/createMessage`` is refused with a JSON-RPC error: no sampling handler is configured. A task gone
        or unreachable is an answer; other read faults raise retryable errors.
        """
        info = activity.info()
        assert info.workflow_id is not None, "relay_input runs for a workflow"
        relay = InputRelay(activity.client().get_workflow_handle(info.workflow_id, run_id=info.workflow_run_id))
        every = max(0.5, (info.heartbeat_timeout or timedelta(seconds=30)).total_seconds() / 3)
        beat = Heartbeat(task_id=inp.state.task_id, status="input_required", relay=True)
        # A notification for the task ends the hold (the workflow's copy of the signal is ignored while it relays).
        lease = self.shared.lease(inp.session, inp.principal, inp.state.task_id, job=None, epoch=-1)

        def beat_now() -> None:
            activity.heartbeat(beat.details())

        async def on_request(method: str, params: dict[str, Any], rpc_id: Any) -> dict[str, Any]:
            refuse_unless_form(method, params)
            key = await relay.ask(method, params, rpc_id)
            answer = await relay.answer(key, meanwhile=beat_now)
            await relay.delivered(key)
            return answer

        async def held_read(client: WireSession) -> tuple[TaskPayload | None, TaskState | None]:
            """The held ``tasks/result``'s payload (None: it ended with an error), and the ended task's state when a
            notification ended the hold (the ``tasks/get`` that confirmed it). A server may answer a held
            ``tasks/result`` only at its own poll interval (the TypeScript SDK: up to a minute after the task ended); a
            notification that the task changed is checked with a ``tasks/get``, and a task that has ended is read anew
            at once (a read: nothing is re-run)."""
            lease.hold(inp.hold_s, session=client, status=inp.state.status)
            held = asyncio.create_task(
                heartbeating(client.result(inp.state, on_server_request=on_request, timeout_s=inp.hold_s), beat, every)
            )
            try:
                while True:
                    either: set[asyncio.Future[Any]] = {held, lease.woken}
                    await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
                    if held.done():
                        try:
                            return held.result(), None
                        except JsonRpcError:
                            return None, None
                    lease.rearm()
                    seen = await client.get(inp.state.task_id)
                    if seen.terminal:
                        held.cancel()
                        with contextlib.suppress(asyncio.CancelledError, Exception):
                            await held
                        return None, seen
            finally:
                held.cancel()

        async def relay_held() -> RelayOutput:
            client = await self.shared.pool.for_task(inp.session, principal=inp.principal)
            owed = asyncio.create_task(relay.deliver_owed(client, meanwhile=beat_now)) if info.attempt > 1 else None
            try:
                # None: the stream ended with an error (the task's own stored error, or "gone"; its status says
                # which), or a notification ended the hold.
                payload, ended = await held_read(client)
            finally:
                if owed is not None:
                    owed.cancel()
            state = ended or await client.get(inp.state.task_id)  # a notified end was just read: not asked twice
            if payload is None:
                if not state.terminal:
                    raise TransportError("tasks/result ended with an error while the task is still running", sent=True)
                payload = await client.result(state)
            self.shared.pool.track(client, inp.state.task_id, done=True)
            lease.release()
            return RelayOutput(
                state=state, payload=self.shared.decode(payload, inp.output_schema), notified=ended is not None
            )

        try:
            return await _on_task(RelayOutput, relay_held, beat)
        finally:
            lease.close()


__all__ = ["TaskSteps"]
