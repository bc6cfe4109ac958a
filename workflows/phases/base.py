"""What every phase of ``McpTaskWorkflow`` shares: one state, the one move, and the steps each phase takes.

:class:`TaskMachine` holds the request and the :class:`~mcp_temporal_tasks.workflows.records.MachineState` (the only
state, read by the queries) and the moves every phase makes: :meth:`~TaskMachine._move` (checked against
``records.TRANSITIONS``, the one table of allowed moves) and :meth:`~TaskMachine._enter`; the replay rule's inputs,
activity options, and waiting without losing a cancellation. Each phase is a mixin over it in its own module
(``submit``, ``wait``, ``retrieve``, ``input``, ``cancel``, ``finish``, and ``messages`` for the handlers); the
phases import only this module, never each other: one phase hands over to another by calling it on ``self``
(the entry points are named at the end of :class:`TaskMachine`).
"""

from __future__ import annotations

import asyncio
import builtins
from datetime import timedelta
from typing import TYPE_CHECKING, Any, NoReturn

from temporalio import workflow
from temporalio.exceptions import ActivityError, TimeoutError, TimeoutType
from temporalio.workflow import ActivityConfig

with workflow.unsafe.imports_passed_through():
    from mcp_temporal_tasks.activities.activity_io import AwaitOutput, DecodedPayload, JobBinding
    from mcp_temporal_tasks.protocol.contract import canonical_json, contract_of, digest
    from mcp_temporal_tasks.protocol.tasks import TaskState
    from mcp_temporal_tasks.workflows import decisions
    from mcp_temporal_tasks.workflows.failure_decoding import failure_info
    from mcp_temporal_tasks.workflows.phases.patches import RETRIEVAL_NEVER_REPLAYS, SEARCHABLE_PHASES
    from mcp_temporal_tasks.workflows.records import (
        SA_STATUS,
        TRANSITIONS,
        Ending,
        MachineState,
        McpTaskRequest,
        Outcome,
        Phase,
        ReplayPolicy,
        Stage,
    )

LEDGER_CONTRACT_CAP = 16 * 1024


class _Woken:
    """What a wait returns when a notification cut it short (its activity cancelled): read the task now."""


_WOKEN = _Woken()


class _Ended(Exception):
    """Internal: one operation reached its :class:`~mcp_temporal_tasks.workflows.records.Ending`.

    Raised from deep inside a step (a wait, a retrieval, a cancel) and caught once, in ``_run``.
    """

    def __init__(self, ending: Ending) -> None:
        super().__init__(ending.outcome.value)
        self.ending = ending


def _short(task_id: str, n: int = 64) -> str:
    """A task id as labels show it (activity summaries): bounded, whatever the server sent."""
    return task_id if len(task_id) <= n else f"{task_id[:n]}…"


def _bug(what: str) -> RuntimeError:
    """An invariant of our own code broken (never a value a server sent: those end the task with an outcome). It
    fails the workflow *task*, which Temporal retries until fixed code is deployed; the CLI shows it as
    ``workflow task failing``."""
    return RuntimeError(f"McpTaskWorkflow bug: {what}")


def _unusable_note(task: TaskState | None) -> str:
    """What the server's task record held that could not be used as sent (clamped or ignored where it was parsed)."""
    if task is None or not task.unusable:
        return ""
    return " (its task record had unusable " + ", ".join(f"{k}={v}" for k, v in sorted(task.unusable.items())) + ")"


class TaskMachine:
    """The state and the shared steps of ``McpTaskWorkflow`` (composed in ``workflows/mcp_task.py``)."""

    #: The request, as validated (or its stand-in when it did not validate).
    req: McpTaskRequest
    #: Everything the machine knows, in one typed model (queries read it; nothing else holds state).
    m: MachineState

    # --- the one move ----------------------------------------------------------------------------

    def _move(self, phase: Phase) -> None:
        """The one place the phase changes: a move :data:`~.records.TRANSITIONS` does not allow is a bug, and fails
        the workflow *task* (retried until fixed code is deployed), never the task's outcome."""
        if phase not in TRANSITIONS[self.m.phase]:
            raise RuntimeError(f"McpTaskWorkflow: no transition {self.m.phase.value} → {phase.value}")
        self.m.phase = phase

    def _enter(self, phase: Phase, status: str | None = None, *extra: Any) -> None:
        """Move to ``phase``; upsert search attributes only when they change (each upsert is an event)."""
        self._move(phase)
        shown = status or (self.m.task_state.status if self.m.task_state else phase.value.lower())
        if phase == Phase.AWAITING_APPROVAL and shown != "awaiting_approval" and workflow.patched(SEARCHABLE_PHASES):
            shown = "awaiting_approval"  # findable: `McpTaskStatus = 'awaiting_approval'`
        updates = list(extra)
        if shown != self.m.shown_status:
            updates.append(SA_STATUS.value_set(shown))
            self.m.shown_status = shown
        if updates:
            workflow.upsert_search_attributes(updates)
        msg = self.m.task_state.status_message if self.m.task_state and self.m.task_state.status_message else ""
        workflow.set_current_details(f"**{self.req.tool}** — {phase.value}" + (f": {msg}" if msg else ""))

    # --- the replay rule's inputs and the contract -------------------------------------------------

    def _cancelled_by_temporal(self) -> None:
        """The workflow itself was cancelled (not the ``cancel`` update): remembered, and shown as Canceled."""
        self.m.cancel_requested = True
        self.m.cancel_reason = self.m.cancel_reason or "workflow cancelled"

    def _rule(self) -> decisions.ReplayRule:
        """Replay policy, idempotency and budget: the request, then configuration, then annotations of a trusted
        server (``decisions.replay_rule``, the one precedence)."""
        configured = self.m.profile.policy if self.m.profile else None
        annotated = self.m.ledger.idempotency.get("annotation_idempotent")
        return decisions.replay_rule(
            requested_policy=self.req.replay,
            configured_policy=configured.replay if configured else None,
            requested_idempotent=self.req.idempotent,
            configured_idempotent=configured.idempotent if configured else None,
            annotated_idempotent=bool(annotated) if annotated is not None else None,
            requested_max=self.req.max_replays,
            configured_max=configured.max_replays if configured else None,
        )

    def _max_replays(self) -> int:
        return self._rule().max_replays

    def _policy(self) -> ReplayPolicy:
        return self._rule().policy

    def _idempotent(self) -> bool:
        return self._rule().idempotent

    def _set_contract(self) -> None:
        contract = contract_of(self.m.output_schema)
        self.m.ledger.result_contract_digest = digest(contract)
        # The ledger is the memo and part of every outcome: a server's huge outputSchema stays out of it.
        if len(canonical_json(contract)) > LEDGER_CONTRACT_CAP:
            contract = {**contract, "outputSchema": f"[omitted: over {LEDGER_CONTRACT_CAP} bytes; see the digest]"}
        self.m.ledger.result_contract = contract

    # --- activity options and bounds ---------------------------------------------------------------

    def _config(self, preset: ActivityConfig, *, pinned: bool = True, **overrides: Any) -> ActivityConfig:
        """``preset`` for this task: its heartbeat timeout and, for a stdio task, the owner process's queue
        (``pinned``; a task there whose owner died ends after ``owner_pickup_s`` instead of hanging)."""
        config = ActivityConfig(heartbeat_timeout=timedelta(seconds=self.req.timeouts.heartbeat_s))
        config.update(preset)
        if pinned and self.m.owner_queue:
            config["task_queue"] = self.m.owner_queue
            config["schedule_to_start_timeout"] = timedelta(seconds=self.req.timeouts.owner_pickup_s)
        config.update(overrides)  # type: ignore[typeddict-item]
        return config

    def _principal(self) -> str | None:
        return self.m.profile.principal if self.m.profile else None

    def _job(self) -> JobBinding | None:
        """The job binding when the requested "tool" is a job: its tools stand in for the task methods."""
        return self.m.profile.job if self.m.profile else None

    def _own_bound(self) -> float | None:
        return self.m.profile.policy.max_call_s if self.m.profile else None

    def _call_bound_s(self) -> float:
        """How long one tools/call may take: the tool's own bound from configuration, else ``submit_s``."""
        return self._own_bound() or self.req.timeouts.submit_s

    # --- waiting without losing cancellations ------------------------------------------------------

    async def _uninterruptible(self, handle: Any) -> Any:
        """Await an activity to its end even if the workflow is cancelled meanwhile (remembering it).

        Used for ``tools/call``: abandoning it would lose the task id of a call that did reach the server.
        """
        while True:
            try:
                return await asyncio.shield(handle)
            except asyncio.CancelledError:
                if handle.done() and handle.cancelled():
                    raise
                self._cancelled_by_temporal()

    async def _interruptible_wait(self, ready: Any, *, timeout_s: float | None = None) -> bool:
        """Wait for ``ready()``; False on cancellation or timeout. Workflow cancellation is remembered."""
        try:
            # No timeout means no timer: a timer would cost two history events per wait.
            await workflow.wait_condition(
                lambda: ready() or self.m.cancel_reason is not None,
                timeout=timedelta(seconds=timeout_s) if timeout_s else None,
            )
        except builtins.TimeoutError:
            return False
        except asyncio.CancelledError:
            self._cancelled_by_temporal()
            return False
        return self.m.cancel_reason is None and ready()

    async def _interruptible_sleep(self, seconds: float) -> bool:
        """A durable timer that a cancel cuts short: True when it ran its course."""
        await self._interruptible_wait(lambda: False, timeout_s=seconds)
        return self.m.cancel_reason is None

    @staticmethod
    async def _abandon(handle: Any) -> None:
        """Cancel a waiting activity and let it go: its late completion has nothing we still need."""
        handle.cancel()
        try:
            await handle
        except (ActivityError, asyncio.CancelledError):
            pass

    @staticmethod
    def _lost(err: ActivityError, what: str, where: Stage) -> _Ended:
        kind, _, info = failure_info(err)
        timeout = err.cause if isinstance(err.cause, TimeoutError) else None
        if timeout is not None and timeout.type == TimeoutType.SCHEDULE_TO_START:  # the owner's process is gone
            return _Ended(
                Ending(
                    outcome=Outcome.LOST,
                    stage=Stage.GONE,
                    reason="the worker process that owns this stdio task is gone",
                )
            )
        # We could not follow a task the server accepted; it is not known to be gone: never a replay.
        # Histories from before the patch took this for a task gone.
        stage = where if workflow.patched(RETRIEVAL_NEVER_REPLAYS) else Stage.GONE
        return _Ended(Ending(outcome=Outcome.LOST, stage=stage, reason=f"{what}: {kind}: {info.get('message', '')}"))

    # --- each phase's entry points, defined in its own module (the composed class has them all) -----

    if TYPE_CHECKING:

        def _ended_from_payload(self, status: str, payload: DecodedPayload, stage: Stage) -> _Ended: ...  # retrieve
        async def _retrieve(self) -> DecodedPayload: ...  # retrieve
        async def _follow(self, task: TaskState) -> NoReturn: ...  # wait
        def _after_wait(self, aw: AwaitOutput) -> None: ...  # wait
        async def _input_required(self, task: TaskState) -> None: ...  # input
        async def _legacy_relay(self, task: TaskState) -> NoReturn: ...  # input
        def _unanswered(self) -> list[str]: ...  # input
        async def _cancel_and_settle(self, task: TaskState) -> NoReturn: ...  # cancel
