"""``TaskMachine``: the one state of ``McpTaskWorkflow``, its one move, and what every step function uses.

Every phase change goes through :meth:`TaskMachine.move`, checked against ``records.TRANSITIONS``; a move the table does
not allow is our bug and fails the workflow task, never the task's outcome.
"""

from __future__ import annotations

import asyncio
import builtins
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError
from temporalio.workflow import ActivityConfig

with workflow.unsafe.imports_passed_through():
    from mcp_temporal_tasks.activities.activity_io import JobBinding
    from mcp_temporal_tasks.protocol.contract import canonical_json, contract_of, digest
    from mcp_temporal_tasks.workflows import decisions
    from mcp_temporal_tasks.workflows.phases.patches import SEARCHABLE_PHASES
    from mcp_temporal_tasks.workflows.records import (
        SA_STATUS,
        TRANSITIONS,
        MachineState,
        McpTaskRequest,
        Phase,
    )

#: The ledger is the memo and part of every outcome: a server's huge outputSchema stays out of it (its digest stays).
LEDGER_CONTRACT_CAP = 16 * 1024


def bug(what: str) -> RuntimeError:
    """An invariant of our own code broken (never a value a server sent: those end the task with an outcome). It
    fails the workflow *task*, which Temporal retries until fixed code is deployed; the CLI shows it as
    ``workflow task failing``."""
    return RuntimeError(f"McpTaskWorkflow bug: {what}")


class TaskMachine:
    """The request and the state of one task (composed into ``McpTaskWorkflow``), and the moves every step makes."""

    #: The request, as validated (or its stand-in when it did not validate).
    req: McpTaskRequest
    #: Everything the machine knows, in one typed model (queries read it; nothing else holds state).
    state: MachineState

    # --- the one move ----------------------------------------------------------------------------

    def move(self, phase: Phase) -> None:
        if phase not in TRANSITIONS[self.state.phase]:
            raise RuntimeError(f"McpTaskWorkflow: no transition {self.state.phase.value} → {phase.value}")
        self.state.phase = phase

    def enter(self, phase: Phase, status: str | None = None, *extra: Any) -> None:
        """Move to ``phase``; upsert search attributes only when they change (each upsert is an event)."""
        self.move(phase)
        shown = status or (self.state.task_state.status if self.state.task_state else phase.value.lower())
        if phase == Phase.AWAITING_APPROVAL and shown != "awaiting_approval" and workflow.patched(SEARCHABLE_PHASES):
            shown = "awaiting_approval"  # findable: `McpTaskStatus = 'awaiting_approval'`
        updates = list(extra)
        if shown != self.state.shown_status:
            updates.append(SA_STATUS.value_set(shown))
            self.state.shown_status = shown
        if updates:
            workflow.upsert_search_attributes(updates)
        msg = (
            self.state.task_state.status_message
            if self.state.task_state and self.state.task_state.status_message
            else ""
        )
        workflow.set_current_details(f"**{self.req.tool}** — {phase.value}" + (f": {msg}" if msg else ""))

    # --- the replay rule's inputs and the contract -------------------------------------------------

    def cancelled_by_temporal(self) -> None:
        """The workflow itself was cancelled (not the ``cancel`` update): remembered, and shown as Canceled."""
        self.state.cancel_requested = True
        self.state.cancel_reason = self.state.cancel_reason or "workflow cancelled"

    def rule(self) -> decisions.ReplayRule:
        """Replay policy, idempotency and budget: the request, then configuration, then annotations of a trusted
        server (``decisions.replay_rule``, the one precedence)."""
        configured = self.state.profile.policy if self.state.profile else None
        annotated = self.state.ledger.idempotency.get("annotation_idempotent")
        return decisions.replay_rule(
            requested_policy=self.req.replay,
            configured_policy=configured.replay if configured else None,
            requested_idempotent=self.req.idempotent,
            configured_idempotent=configured.idempotent if configured else None,
            annotated_idempotent=bool(annotated) if annotated is not None else None,
            requested_max=self.req.max_replays,
            configured_max=configured.max_replays if configured else None,
        )

    def set_contract(self) -> None:
        contract = contract_of(self.state.output_schema)
        self.state.ledger.result_contract_digest = digest(contract)
        if len(canonical_json(contract)) > LEDGER_CONTRACT_CAP:
            contract = {**contract, "outputSchema": f"[omitted: over {LEDGER_CONTRACT_CAP} bytes; see the digest]"}
        self.state.ledger.result_contract = contract

    # --- activity options and bounds ---------------------------------------------------------------

    def config(self, preset: ActivityConfig, *, pinned: bool = True, **overrides: Any) -> ActivityConfig:
        """``preset`` for this task: its heartbeat timeout and, for a stdio task, the owner process's queue
        (``pinned``; a task there whose owner died ends after ``owner_pickup_s`` instead of hanging)."""
        config = ActivityConfig(heartbeat_timeout=timedelta(seconds=self.req.timeouts.heartbeat_s))
        config.update(preset)
        if pinned and self.state.owner_queue:
            config["task_queue"] = self.state.owner_queue
            config["schedule_to_start_timeout"] = timedelta(seconds=self.req.timeouts.owner_pickup_s)
        config.update(overrides)  # type: ignore[typeddict-item]
        return config

    def principal(self) -> str | None:
        return self.state.profile.principal if self.state.profile else None

    def job(self) -> JobBinding | None:
        """The job binding when the requested "tool" is a job: its tools stand in for the task methods."""
        return self.state.profile.job if self.state.profile else None

    def own_bound(self) -> float | None:
        return self.state.profile.policy.max_call_s if self.state.profile else None

    def call_bound_s(self) -> float:
        """How long one tools/call may take: the tool's own bound from configuration, else ``submit_s``."""
        return self.own_bound() or self.req.timeouts.submit_s

    def unanswered(self) -> list[str]:
        """The keys of the questions put to a person that have no answer yet."""
        return [k for k in self.state.pending if k not in self.state.answers]

    # --- waiting without losing cancellations ------------------------------------------------------

    async def uninterruptible(self, handle: Any) -> Any:
        """Await an activity to its end even if the workflow is cancelled meanwhile (remembering it).

        Used for ``tools/call``: abandoning it would lose the task id of a call that did reach the server.
        """
        while True:
            try:
                return await asyncio.shield(handle)
            except asyncio.CancelledError:
                if handle.done() and handle.cancelled():
                    raise
                self.cancelled_by_temporal()

    async def interruptible_wait(self, ready: Any, *, timeout_s: float | None = None) -> bool:
        """Wait for ``ready()``; False on cancellation or timeout. Workflow cancellation is remembered."""
        try:
            # No timeout means no timer: a timer would cost two history events per wait.
            await workflow.wait_condition(
                lambda: ready() or self.state.cancel_reason is not None,
                timeout=timedelta(seconds=timeout_s) if timeout_s else None,
            )
        except builtins.TimeoutError:
            return False
        except asyncio.CancelledError:
            self.cancelled_by_temporal()
            return False
        return self.state.cancel_reason is None and ready()

    async def interruptible_sleep(self, seconds: float) -> bool:
        """A durable timer that a cancel cuts short: True when it ran its course."""
        await self.interruptible_wait(lambda: False, timeout_s=seconds)
        return self.state.cancel_reason is None


async def abandon(handle: Any) -> None:
    """Cancel a waiting activity and let it go: its late completion has nothing we still need."""
    handle.cancel()
    try:
        await handle
    except (ActivityError, asyncio.CancelledError):
        pass


__all__ = ["LEDGER_CONTRACT_CAP", "TaskMachine", "abandon", "bug"]
