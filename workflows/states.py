"""The plain enums a task's state is said in: phases, outcomes, replay policies, classifications.

Without pydantic or Temporal, so that the CLI's parser lists them without loading either (``mcp-tasks --help`` stays
fast); :mod:`.records` builds on them and exports them.
"""

from __future__ import annotations

from enum import Enum


class ReplayPolicy(str, Enum):
    """When a new ``tools/call`` may be sent for the same request. Only trusted callers set this."""

    NEVER = "never"
    IF_IDEMPOTENT = "if_idempotent"
    ALWAYS = "always"
    WITH_APPROVAL = "with_approval"


class Outcome(str, Enum):
    COMPLETED = "completed"
    TOOL_ERROR = "tool_error"
    FAILED = "failed"
    CANCELLED = "cancelled"
    EXPIRED = "expired"
    LOST = "lost"
    UNKNOWN_OUTCOME = "unknown_outcome"
    DECODE_FAILED = "decode_failed"
    REJECTED = "rejected"
    #: The server reported the task terminal (``task_status``) but its payload could not be read within the
    #: retrieval budget. The operation is done: never replayed.
    RESULT_UNAVAILABLE = "result_unavailable"


class Classification(str, Enum):
    RETRYABLE = "retryable"
    INPUT_CORRECTABLE = "input_correctable"
    AUTHORIZATION_REQUIRED = "authorization_required"
    PERMANENT = "permanent"
    UNKNOWN = "unknown"


class Phase(str, Enum):
    """States of the machine in ``workflows/mcp_task.py``; :data:`TRANSITIONS` says which may follow which."""

    SUBMITTING = "SUBMITTING"
    WORKING = "WORKING"
    INPUT_REQUIRED = "INPUT_REQUIRED"
    #: A subject's consent is asked before ``tools/call`` can be sent: the task waits for it (``consent-wait``).
    AWAITING_AUTHORIZATION = "AWAITING_AUTHORIZATION"
    RETRIEVING = "RETRIEVING"
    AWAITING_APPROVAL = "AWAITING_APPROVAL"
    REPLAYING = "REPLAYING"
    CANCELLING = "CANCELLING"
    DONE = "DONE"
