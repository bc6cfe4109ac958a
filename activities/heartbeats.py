"""An activity's heartbeat details as one model: written by the activities, read by their next attempt and the CLI.

A ``poll_task`` attempt's benign failure carries it too. Pure pydantic (the CLI imports it). The JSON is the contract: a
running task's next attempt after a deploy reads what the previous worker wrote, and the CLI and the Temporal UI show
it. So the keys never change, a key set to None is still written (``exclude_unset``), and :meth:`Heartbeat.read` takes
whatever an older worker wrote: a key missing, unknown or of the wrong type is absent, never an error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mcp_temporal_tasks.protocol.tasks import TaskStatus

#: The steps a heartbeat names (``step``).
CONNECTING = "connecting"
READING_TOOLS = "reading tools/list"
#: ``tools/call`` has left: a long synchronous call shows as CALLING.
CALL_SENT = "tools/call sent"
INPUT_REQUIRED = "input_required"
RETRIEVING = "retrieving"
CANCELLING = "cancelling"
ANSWERING = "answering input"
LISTING_TOOLS = "tools/list"
#: ``readBy``: the attempt took the worker's own recent read of the task.
READ_BY_WORKER = "worker"


class Heartbeat(BaseModel):
    """One activity's live details. The fields set are written, under their JSON names, in this order."""

    model_config = ConfigDict(strict=True, populate_by_name=True, extra="ignore")

    task_id: str | None = Field(None, alias="taskId")
    step: str | None = None
    tool: str | None = None
    #: A synchronous call's progress, ``done/total``.
    progress: str | None = None
    #: A wait's polls in this attempt (``await_task``), or the attempt's number (``poll_task``).
    polls: int | None = None
    #: The task's MCP status as the activity last read it (a status no version of ours knows is absent).
    status: TaskStatus | None = None
    status_message: str | None = Field(None, alias="statusMessage")
    read_by: str | None = Field(None, alias="readBy")
    #: A ``poll_task`` attempt's gap to the next one (seconds).
    next_poll_s: float | None = Field(None, alias="nextPollS")
    #: While reads fail: since when (epoch s), how many in a row, when the read budget ends (then the task ends
    #: ``lost``), the last error. The fault clock travels between attempts in these.
    failing_since: float | None = Field(None, alias="failingSince")
    faults: int | None = None
    read_budget_ends_at: float | None = Field(None, alias="readBudgetEndsAt")
    transport_error: str | None = Field(None, alias="transportError")
    #: A 2025-11-25 relay holds ``tasks/result`` open.
    relay: bool | None = None
    #: ``fetch_outcome``: the workflow whose outcome is awaited.
    waiting_for: str | None = None

    def details(self) -> dict[str, Any]:
        """The JSON object a heartbeat (or a benign attempt end) carries: the keys set, None values included."""
        return self.model_dump(by_alias=True, exclude_unset=True)

    @classmethod
    def read(cls, raw: Any) -> Heartbeat:
        """What ``raw`` (decoded JSON, from any worker version) says; anything unusable in it is absent."""
        if not isinstance(raw, Mapping):
            return cls()
        try:
            return cls.model_validate(raw)
        except ValidationError as exc:
            bad = {err["loc"][0] for err in exc.errors() if err["loc"]}
        try:
            return cls.model_validate({k: v for k, v in raw.items() if k not in bad})
        except ValidationError:  # (not expected: each key left validated on its own)
            return cls()


__all__ = ["CALL_SENT", "Heartbeat"]
