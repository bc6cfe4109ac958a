"""The steps of ``McpTaskWorkflow`` as typed values: each step function returns the next one, the workflow dispatches.

A step holds what the next step function needs beyond the machine's state (``MachineState``); the state itself is
never copied into a step. ``Ended`` closes an operation: its ``Ending`` names the stage the replay rule reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from mcp_temporal_tasks.protocol.tasks import TaskState
    from mcp_temporal_tasks.workflows.records import Ending, Stage


class WaitMode(Enum):
    """Where a wait runs between two reads of its task."""

    #: One heartbeating activity (``await_task``) polls until the task moves: polls close together.
    HEARTBEATING = "heartbeating"
    #: One ``poll_task`` attempt per poll, nothing running between them: polls at least 0.8 × the heartbeat apart.
    IDLE = "idle"


@dataclass(frozen=True)
class Submit:
    """SUBMITTING: send ``tools/call`` (the one step that is not safe to repeat)."""

    #: Why this call is made: ``initial``, or the replay reason (``operation_attempts[].reason``).
    reason: str


@dataclass(frozen=True)
class Follow:
    """WORKING: wait for the task to move, then say where its state leads."""

    task: TaskState
    mode: WaitMode = WaitMode.HEARTBEATING
    #: Past ``long_wait_after_s``: heartbeating reads run under the long heartbeat timeout, and no longer return by age.
    old_task: bool = False
    #: A notification cut the last wait short: this read runs at once, heartbeating.
    woken: bool = False
    #: How the wake was learned (``TaskNotified.via``; None: a server's notification).
    woken_via: str | None = None
    #: The first idle attempt after a hand-over keeps the schedule until then (epoch seconds).
    first_poll_at: float | None = None


@dataclass(frozen=True)
class AskInput:
    """INPUT_REQUIRED on 2026-07-28: the questions in the task's state, answered with ``tasks/update``."""

    task: TaskState
    #: The wait that goes on once the answers are delivered.
    then: Follow


@dataclass(frozen=True)
class Relay:
    """INPUT_REQUIRED on 2025-11-25: a held ``tasks/result`` relays the questions; the task's end comes back on it."""

    task: TaskState


@dataclass(frozen=True)
class Retrieve:
    """RETRIEVING: a terminal task's payload, read alone (never re-calling the tool), and the ending it makes."""

    #: Where the payload was due: PAYLOAD (a wait's read failed to read it) or CANCELLING (a cancel found it ended).
    stage: Stage


@dataclass(frozen=True)
class Cancel:
    """CANCELLING: ``tasks/cancel``, then the task's true end."""

    task: TaskState


@dataclass(frozen=True)
class Ended:
    """The operation's end."""

    ending: Ending


Step = Submit | Follow | AskInput | Relay | Retrieve | Cancel | Ended

__all__ = ["AskInput", "Cancel", "Ended", "Follow", "Relay", "Retrieve", "Step", "Submit", "WaitMode"]
