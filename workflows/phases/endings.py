"""How a task ends, wherever that is learned: from a payload, from a read that found no task, from an activity lost.

Shared by the step functions, which import it and never each other: the same payload makes the same ending whether a
synchronous call, a wait, the relay or a cancel read it.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ActivityError, TimeoutError, TimeoutType

with workflow.unsafe.imports_passed_through():
    from mcp_temporal_tasks.activities.activity_io import DecodedPayload
    from mcp_temporal_tasks.protocol.eras import era_rules
    from mcp_temporal_tasks.protocol.tasks import RpcErrorInfo, TaskState
    from mcp_temporal_tasks.workflows import decisions
    from mcp_temporal_tasks.workflows.failure_decoding import failure_info
    from mcp_temporal_tasks.workflows.phases.machine import TaskMachine
    from mcp_temporal_tasks.workflows.phases.patches import ERROR_REPLY_NEVER_REPLAYS, RETRIEVAL_NEVER_REPLAYS
    from mcp_temporal_tasks.workflows.records import Ending, Outcome, ResultRef, Stage


def from_payload(mc: TaskMachine, status: str, payload: DecodedPayload, stage: Stage) -> Ending:
    """The task's own end, from the payload read at ``stage`` (SUBMITTING for a synchronous answer, PAYLOAD for a
    task's stored payload, CANCELLING when a cancel found the task already ended)."""
    task = mc.state.task_state
    mc.state.ledger.last_retrieval = "ok" if not payload.decode_error else "decode_failed"
    ref = payload.result_ref
    outcome, error = decisions.terminal_outcome(
        status,
        result=payload.result
        if payload.result is not None
        else ({"content": [], "isError": bool(ref.get("is_error"))} if ref else None),
        error=payload.error,
        empty=payload.empty,
        decode_error=payload.decode_error,
        status_message=task.status_message if task else None,
    )
    ending = Ending(
        outcome=outcome, stage=stage, result=payload.result, error=error, result_ref=ResultRef(**ref) if ref else None
    )
    if payload.decode_error:
        ending.raw_payload, ending.reason = payload.raw, payload.decode_error
    if outcome in (Outcome.TOOL_ERROR, Outcome.FAILED):
        ending.classification, ending.retry_after_s = decisions.classify_failure(
            payload.result, error, task.status_message if task else None
        )
        from_error_reply = (
            payload.error is not None
            and mc.job() is None
            and task is not None
            and era_rules(task.era).error_reply_payload
        )
        if (
            from_error_reply
            and decisions.replay_reason(stage, outcome, ending.classification) is not None
            and workflow.patched(ERROR_REPLY_NEVER_REPLAYS)
        ):
            ending.stage = Stage.ERROR_REPLY
    return ending


def found_ended(mc: TaskMachine, ending: Ending) -> Ending:
    """A cancel that found the task already ended keeps that ending, and says so."""
    ending.reason = f"cancel requested ({mc.state.cancel_reason}) but the task had already ended"
    return ending


def unusable_note(task: TaskState | None) -> str:
    """What the server's task record held that could not be used as sent (clamped or ignored where it was parsed)."""
    if task is None or not task.unusable:
        return ""
    return " (its task record had unusable " + ", ".join(f"{k}={v}" for k, v in sorted(task.unusable.items())) + ")"


def unread(
    mc: TaskMachine,
    *,
    not_found: bool = False,
    no_answer: str | None = None,
    unreachable: str | None = None,
    last_error: RpcErrorInfo | None = None,
) -> Ending:
    """A read that gave no state of the task: gone (``-32602``), no usable answer within its budget (the server may
    still hold the task: never a replay), or its session unreachable."""
    last = mc.state.task_state
    if not_found:
        outcome = decisions.not_found_outcome(
            last.created_at if last else None, last.ttl_ms if last else None, workflow.now()
        )
        return Ending(
            outcome=outcome,
            stage=Stage.GONE,
            reason="tasks/get answered -32602: the task is gone"
            + (" after its TTL" if outcome == Outcome.EXPIRED else "")
            + unusable_note(last),
        )
    if no_answer is not None:
        return Ending(
            outcome=Outcome.LOST,
            stage=Stage.UNREACHABLE,
            error=last_error,
            reason=f"{no_answer}; not replayed: the task may still exist on the server",
        )
    return Ending(outcome=Outcome.LOST, stage=Stage.GONE, reason=unreachable or "task unreachable")


def lost(err: ActivityError, what: str, where: Stage) -> Ending:
    """An activity on a task the server accepted failed for good: we lost sight of the task, which is not known to be
    gone, so never a replay (except for histories from before ``RETRIEVAL_NEVER_REPLAYS``)."""
    kind, _, info = failure_info(err)
    timeout = err.cause if isinstance(err.cause, TimeoutError) else None
    if timeout is not None and timeout.type == TimeoutType.SCHEDULE_TO_START:  # the owner's process is gone
        return Ending(
            outcome=Outcome.LOST, stage=Stage.GONE, reason="the worker process that owns this stdio task is gone"
        )
    stage = where if workflow.patched(RETRIEVAL_NEVER_REPLAYS) else Stage.GONE
    return Ending(outcome=Outcome.LOST, stage=stage, reason=f"{what}: {kind}: {info.get('message', '')}")


__all__ = ["found_ended", "from_payload", "lost", "unread", "unusable_note"]
