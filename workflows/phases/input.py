"""INPUT_REQUIRED: a task that asks a person, in either era.

2026-07-28: the questions arrive in the task's state, are answered with the ``provide_input`` update (or declined
after the input timeout) and delivered with ``tasks/update``. 2025-11-25: a relay activity holds ``tasks/result``
open; questions arrive by signal, the relay reads the answers by query and replies on the wire, and the task's end
comes back with it.
"""

from __future__ import annotations

from datetime import timedelta
from typing import NoReturn

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from mcp_temporal_tasks.activities.activity_io import AnswerInput, AwaitOutput, RelayInput, RelayOutput
    from mcp_temporal_tasks.activities.defs import McpActivityDefs as McpActivities  # stubs: names, no wire
    from mcp_temporal_tasks.protocol.tasks import TaskState
    from mcp_temporal_tasks.workflows import decisions
    from mcp_temporal_tasks.workflows.failure_decoding import attempts_text, last_read_failure
    from mcp_temporal_tasks.workflows.options import TASK_STEP, WAIT, read_budget
    from mcp_temporal_tasks.workflows.phases.base import TaskMachine, _bug, _Ended, _short
    from mcp_temporal_tasks.workflows.records import Ending, Outcome, PendingInput, Phase, Stage


class InputPhase(TaskMachine):
    """INPUT_REQUIRED, both eras."""

    async def _input_required(self, task: TaskState) -> None:
        if self.m.task_state is None or self.m.session is None:
            raise _bug("_input_required without a task or a session")
        requests = {k: v for k, v in (self.m.task_state.input_requests or {}).items() if k not in self.m.answered_keys}
        if not requests:
            return
        self.m.pending = {k: PendingInput.of(k, r) for k, r in requests.items()}
        self._enter(Phase.INPUT_REQUIRED, "input_required")
        timeout = self.req.input_timeout_s or self.req.timeouts.input_s
        answered = await self._interruptible_wait(
            lambda: all(k in self.m.answers for k in self.m.pending), timeout_s=timeout
        )
        if self.m.cancel_reason is not None:
            await self._cancel_and_settle(task)
        if not answered:
            if self.req.on_input_timeout == "cancel":
                self.m.cancel_reason = f"no answer to input request within {timeout:g}s"
                await self._cancel_and_settle(task)
            for key in self.m.pending:
                self.m.answers.setdefault(key, {"action": "decline"})
        responses = {k: self.m.answers[k] for k in self.m.pending}
        answering = workflow.now()
        try:
            await workflow.execute_activity_method(
                McpActivities.answer_input,
                AnswerInput(
                    session=self.m.session, task_id=task.task_id, responses=responses, principal=self._principal()
                ),
                # tasks/update is retried on every read fault: bounded like a poll, by unreachable_s.
                **self._config(
                    TASK_STEP,
                    **read_budget(self.req.timeouts.unreachable_s),
                    summary=f"tasks/update {_short(task.task_id)}",
                ),
            )
        except ActivityError as err:
            kind, info, last = last_read_failure(err)
            if kind == "TaskNotFound":
                outcome = decisions.not_found_outcome(task.created_at, task.ttl_ms, workflow.now())
                raise _Ended(
                    Ending(
                        outcome=outcome,
                        stage=Stage.GONE,
                        reason="tasks/update answered -32602: the task is gone"
                        + (" after its TTL" if outcome == Outcome.EXPIRED else ""),
                    )
                )
            # The answers may or may not have arrived; the task is not known to be gone: never a replay.
            raise _Ended(
                Ending(
                    outcome=Outcome.LOST,
                    stage=Stage.INPUT,
                    error=last,
                    reason=(
                        f"tasks/update could not deliver the answers ({attempts_text(info, answering)}; last: {kind}: "
                        f"{info.get('message', '')}); not replayed: the task may still exist on the server"
                    ),
                )
            )
        self.m.answered_keys.extend(responses)
        self.m.pending = {}

    def _unanswered(self) -> list[str]:
        return [k for k in self.m.pending if k not in self.m.answers]

    async def _legacy_relay(self, task: TaskState) -> NoReturn:
        """2025-11-25 input: a relay activity holds tasks/result open until the task ends.

        Input requests arrive by signal; the human answers through ``provide_input``; the relay reads the
        answer by query and replies on the wire. Raises :class:`_Ended`.
        """
        if self.m.task_state is None or self.m.session is None:
            raise _bug("_legacy_relay without a task or a session")
        timeout = self.req.input_timeout_s or self.req.timeouts.input_s
        handle = workflow.start_activity_method(
            McpActivities.relay_input,
            RelayInput(
                session=self.m.session,
                state=self.m.task_state,
                output_schema=self.m.output_schema,
                principal=self._principal(),
                hold_s=timeout + 3600,
            ),
            **self._config(
                WAIT,
                start_to_close_timeout=timedelta(seconds=timeout + 7200),
                summary=f"tasks/result {_short(task.task_id)} (relaying input)",
            ),
        )
        while not handle.done():
            await self._interruptible_wait(lambda: handle.done() or bool(self._unanswered()))
            if self.m.cancel_reason is None and self._unanswered() and not handle.done():
                self._enter(Phase.INPUT_REQUIRED, "input_required")
                answered = await self._interruptible_wait(
                    lambda: not self._unanswered() or handle.done(), timeout_s=timeout
                )
                if not answered and self.m.cancel_reason is None and self._unanswered():
                    if self.req.on_input_timeout == "cancel":
                        self.m.cancel_reason = f"no answer to input request within {timeout:g}s"
                    else:
                        for key in self._unanswered():
                            self.m.answers[key] = {"action": "decline"}
                self.m.pending = {k: v for k, v in self.m.pending.items() if k not in self.m.answers}
                if self.m.cancel_reason is None:
                    self._enter(Phase.WORKING, "working")
            if self.m.cancel_reason is not None and not handle.done():
                await self._abandon(handle)
                await self._cancel_and_settle(task)
        try:
            out: RelayOutput = await handle
        except ActivityError as err:
            raise self._lost(err, "input relay failed", Stage.INPUT)
        if out.not_found or out.unreachable or out.payload is None:
            self._after_wait(AwaitOutput(not_found=out.not_found, unreachable=out.unreachable or "task unreachable"))
        if out.payload is None:  # (_after_wait raised for every such reply)
            raise _bug("a relay ended without a payload")
        if out.state is not None:
            self.m.task_state = out.state
        if out.notified:  # (False in every history from before: the outcome reads as it did)
            self.m.delivered_by = "notification"
        status = self.m.task_state.status if self.m.task_state.terminal else "completed"
        raise self._ended_from_payload(status, out.payload, Stage.PAYLOAD)
