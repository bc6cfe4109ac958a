"""SUBMITTING: the one dangerous step, ``tools/call`` (a single attempt per send), and what its answer leads to.

A failure that surely never reached the server is resent after its ``Retry-After``; anything else ends ``rejected`` or
``unknown_outcome`` (``decisions.after_submit_failure``). A question asked on the call's own stream is put to a person
(INPUT_REQUIRED) while the call goes on. A call that needs a subject's consent first waits for it
(AWAITING_AUTHORIZATION), and is then sent. A task the call started is followed (``Follow``).
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from mcp_temporal_tasks.activities.activity_io import (
        StartCallInput,
        StartCallOutput,
    )
    from mcp_temporal_tasks.activities.defs import McpActivityDefs
    from mcp_temporal_tasks.protocol.tasks import RpcErrorInfo
    from mcp_temporal_tasks.workflows import decisions
    from mcp_temporal_tasks.workflows.failure_decoding import failure_info
    from mcp_temporal_tasks.workflows.options import MAX_RESEND_DELAY_S, SUBMIT
    from mcp_temporal_tasks.workflows.phases import endings
    from mcp_temporal_tasks.workflows.phases.consent import for_a_subject, wait_for_consent, who
    from mcp_temporal_tasks.workflows.phases.machine import TaskMachine, bug
    from mcp_temporal_tasks.workflows.phases.patches import (
        CALL_INPUT,
        CONSENT_WAIT,
        MRTR_CONTINUATION,
        READ_ONLY_IS_IDEMPOTENT,
    )
    from mcp_temporal_tasks.workflows.phases.steps import Ended, Follow, Step, Submit
    from mcp_temporal_tasks.workflows.records import (
        SA_SERVER,
        SA_STATUS,
        SA_TASK_ID,
        SA_TOOL,
        Classification,
        Ending,
        OperationAttempt,
        Outcome,
        PendingInput,
        Phase,
        Stage,
        search_attribute_value,
    )


def apply_profile(mc: TaskMachine) -> None:
    """The resolved server's profile into the ledger, the contract and the search attributes, once, before any call."""
    if mc.state.profile is None:
        raise bug("apply_profile before resolve")
    mc.state.output_schema = mc.state.profile.policy.output_schema
    mc.state.ledger.server = mc.state.profile.name
    mc.state.ledger.server_identity = mc.state.profile.identity
    mc.state.ledger.principal = mc.state.profile.principal
    rule = mc.rule()
    mc.state.ledger.idempotency.update(
        replay=rule.policy.value, idempotent=rule.idempotent, max_replays=rule.max_replays
    )
    mc.set_contract()
    # Upsert only what the starter did not already set (each upsert is a history event and a visibility write); the
    # ledger goes to the memo once, at the end (live: the status() query).
    current = workflow.info().typed_search_attributes
    wanted = {
        SA_SERVER: search_attribute_value(mc.state.profile.name),
        SA_TOOL: search_attribute_value(mc.req.tool),
        SA_STATUS: "submitting",
    }
    changed = [key.value_set(value) for key, value in wanted.items() if current.get(key) != value]
    if changed:
        workflow.upsert_search_attributes(changed)
    mc.state.shown_status = "submitting"


async def submit(mc: TaskMachine, step: Submit) -> Step:
    """Send ``tools/call`` and say where its answer leads: an ending (synchronous result, refusal, lost reply) or
    the task to follow. A call answered with input requests (2026-07-28, MRTR: SEP-2322) is continued: the questions
    put to a person, then the same call sent again with the answers and the server's echoed ``requestState``, recorded
    as an ``input_response`` attempt (the continuation of the call before it, never a replay)."""
    start = await _send(mc, step.reason)
    if isinstance(start, Ending):
        return Ended(start)
    rounds = 0
    while start.start.input_requests is not None and workflow.patched(MRTR_CONTINUATION):
        if rounds >= decisions.MAX_INPUT_ROUNDS:
            return Ended(_too_many_rounds(mc))
        answers = await _answer_on_call(mc, start)
        if isinstance(answers, Ending):
            return Ended(answers)
        rounds += 1
        mc.state.ledger.input_rounds = rounds
        # One continuation per answer: _send never resends a call that may have reached the server.
        start = await _send(mc, "input_response", input_responses=answers, request_state=start.start.request_state)
        if isinstance(start, Ending):
            return Ended(start)
    attempt = mc.state.attempts[-1]
    if start.payload is not None:  # the server ran the tool synchronously
        mc.state.task_state = None
        ending = endings.from_payload(mc, "completed", start.payload, Stage.SUBMITTING)
        if mc.state.call_input_note:  # (None in every history from before)
            ending.reason = "; ".join(filter(None, [ending.reason, mc.state.call_input_note]))
        return Ended(ending)
    if start.start.input_requests is not None:
        return Ended(
            Ending(
                outcome=Outcome.REJECTED,
                stage=Stage.SUBMITTING,
                error=RpcErrorInfo(
                    code=-32601, message="server asked for input on tools/call itself; answer through a task"
                ),
                classification=Classification.PERMANENT,
            )
        )
    task = start.start.task
    if task is None:
        # Neither a task, a result nor an input request (the wire refuses such a reply; this guards what a history
        # may hold): the call reached the server and gave nothing to follow, as if its reply had been lost.
        attempt.ended = Outcome.UNKNOWN_OUTCOME.value
        return Ended(
            Ending(
                outcome=Outcome.UNKNOWN_OUTCOME,
                stage=Stage.SUBMITTING,
                reason="tools/call was answered with neither a task, a result nor an input request",
            )
        )
    mc.state.session = start.start.session
    mc.state.owner_queue = start.owner_queue
    mc.state.task_state = task
    attempt.task_id = task.task_id
    mc.state.ledger.task_ids.append(task.task_id)
    attempt.reconciled = start.reconciled
    mc.enter(Phase.WORKING, None, SA_TASK_ID.value_set(search_attribute_value(task.task_id)))
    return Follow(task)


async def _answer_on_call(mc: TaskMachine, start: StartCallOutput) -> dict[str, Any] | Ending:
    """The answers to the input requests a ``tools/call`` came back with (MRTR), put to a person as a task's questions
    are (INPUT_REQUIRED, ``provide_input``); declined at the input timeout (with ``on_input_timeout = "cancel"``, or a
    cancel asked meanwhile: the ending, and the call is not continued: nothing runs on the server between rounds)."""
    requests = start.start.input_requests or {}
    attempt = mc.state.attempts[-1]
    attempt.ended = "input_required"
    # A key may come back in a later round of the same call: each round's answers are its own.
    for key in requests:
        mc.state.answers.pop(key, None)
    mc.state.pending = {k: PendingInput.of(k, r) for k, r in requests.items()}
    mc.enter(Phase.INPUT_REQUIRED, "input_required")
    timeout = mc.req.input_timeout_s or mc.req.timeouts.input_s
    answered = await mc.interruptible_wait(
        lambda: all(k in mc.state.answers for k in mc.state.pending), timeout_s=timeout
    )
    if not answered and mc.state.cancel_reason is None and mc.req.on_input_timeout == "cancel":
        mc.state.cancel_reason = f"no answer to input request within {timeout:g}s"
    if mc.state.cancel_reason is not None:
        mc.state.pending = {}
        return Ending(
            outcome=Outcome.CANCELLED,
            stage=Stage.CANCELLING,
            reason=f"{mc.state.cancel_reason}; the server asked for input on tools/call and the call was not continued",
        )
    responses = {k: mc.state.answers.get(k, {"action": "decline"}) for k in mc.state.pending}
    mc.state.pending = {}
    return responses


def _too_many_rounds(mc: TaskMachine) -> Ending:
    return Ending(
        outcome=Outcome.REJECTED,
        stage=Stage.SUBMITTING,
        error=RpcErrorInfo(
            code=-32600,
            message=f"the server asked for input more than {decisions.MAX_INPUT_ROUNDS} times on one tools/call",
        ),
        classification=Classification.PERMANENT,
    )


async def _send(
    mc: TaskMachine,
    reason: str,
    *,
    input_responses: dict[str, Any] | None = None,
    request_state: str | None = None,
) -> StartCallOutput | Ending:
    """``tools/call``, resent only while it surely never reached the server; the ending when it did not go through.
    ``input_responses`` and ``request_state``: a continuation (MRTR), the answers and the state echoed as received."""
    if mc.state.profile is None:
        raise bug("submit before resolve")
    mc.enter(Phase.SUBMITTING, "submitting")
    resends = 0
    while True:
        # operation_attempts[].at is when tools/call was sent, for a task and a synchronous call alike.
        sent_at = workflow.now()
        handle = workflow.start_activity_method(
            McpActivityDefs.start_call,
            StartCallInput(
                profile=mc.state.profile,
                tool=mc.req.tool,
                arguments=mc.req.arguments,
                ttl_ms=int(mc.req.ttl_s * 1000) if mc.req.ttl_s else None,
                # Only a tool with its own bound waits longer than the transport's read timeout.
                call_timeout_s=mc.call_bound_s() if mc.job() or mc.own_bound() else None,
                input_wait_s=_call_input_bound_s(mc),
                input_timeout_action="cancel" if mc.req.on_input_timeout == "cancel" else "decline",
                input_responses=input_responses,
                request_state=request_state,
                consent_wait_s=mc.req.timeouts.consent_s if for_a_subject(mc) else None,
            ),
            **mc.config(
                SUBMIT,
                start_to_close_timeout=timedelta(seconds=mc.call_bound_s()),
                summary=f"tools/call {mc.req.tool} ({reason})",
                pinned=False,
            ),
        )
        try:
            out = await _await_call(mc, handle)
        except ActivityError as err:
            failure = kind, reached, info = failure_info(err)
            consent = decisions.consent_asked(kind, reached, info)
            if consent is not None and workflow.patched(CONSENT_WAIT):
                waited = await _await_consent(mc, consent)
                if waited is not None:
                    return waited
                continue  # the grant is there: tools/call now (the failed attempt never sent it)
            verdict = decisions.after_submit_failure(kind, may_have_reached_server=reached, resends=resends)
            retry_after = decisions.bounded_delay_s(info.get("retry_after_s")) or 0.0
            if verdict == "resend" and retry_after <= MAX_RESEND_DELAY_S:
                resends += 1
                # tools/call never reached the tool: resending is safe, after the server's Retry-After.
                delay = max(2.0**resends, retry_after)
                if not (mc.req.deadline and workflow.now() + timedelta(seconds=delay) >= mc.req.deadline):
                    await workflow.sleep(
                        timedelta(seconds=delay),
                        summary="rate limited; resend" if retry_after else "server unreachable; resend",
                    )
                    continue
                verdict = "unreachable"
            elif verdict == "resend":
                verdict = "unreachable"
            return _not_through(mc, reason, sent_at, err, failure, verdict, retry_after)
        return _accepted(mc, out, reason, sent_at)


async def _await_consent(mc: TaskMachine, consent: dict[str, str]) -> Ending | None:
    """AWAITING_AUTHORIZATION before ``tools/call`` (:func:`wait_for_consent`). None: the grant is there, send
    ``tools/call``; else the ending (refused, ``consent_expired`` past ``Timeouts.consent_s``, cancelled, or too many
    consents), ``tools/call`` never sent."""
    verdict, refused = await wait_for_consent(mc, consent)
    if verdict == "send":
        mc.enter(Phase.SUBMITTING, "submitting")
        return None
    if verdict == "cancelled":
        return Ending(
            outcome=Outcome.CANCELLED,
            stage=Stage.SUBMITTING,
            reason=f"{mc.state.cancel_reason} while waiting for consent; tools/call was never sent",
        )
    if verdict == "too_many":
        return _consent_ending(mc, f"the server asked for consent more than {decisions.MAX_CONSENTS} times")
    if verdict == "refused":
        return _consent_ending(mc, f"consent not given: {refused}")
    return _consent_ending(
        mc, f"consent_expired: no consent of {who(mc)} within {mc.req.timeouts.consent_s:g} s", kind="ConsentExpired"
    )


def _consent_ending(mc: TaskMachine, why: str, *, kind: str = "AuthorizationRequired") -> Ending:
    return Ending(
        outcome=Outcome.REJECTED,
        stage=Stage.SUBMITTING,
        error=RpcErrorInfo(code=-32001, message=why[:2048], data={"kind": kind}),
        classification=Classification.AUTHORIZATION_REQUIRED,
        reason=f"{why[:512]}; tools/call was never sent",
    )


def _not_through(
    mc: TaskMachine,
    reason: str,
    sent_at: datetime,
    err: ActivityError,
    failure: tuple[str, bool, dict[str, Any]],
    verdict: str,
    retry_after: float,
) -> Ending:
    """The ending of a ``tools/call`` that failed and is not resent: refused, never sent, or its reply lost."""
    kind, reached, info = failure
    error = RpcErrorInfo(
        code=info.get("code") or -32000, message=info.get("message") or str(err.cause), data={"kind": kind}
    )
    if verdict == "rejected":
        # operation_attempts holds the calls whose bytes may have left: a refusal before tools/call was sent
        # (initialize, auth, discovery, tools/list, the input schema) is not one, so the same request may run again.
        if reached:
            _record(mc, reason, sent_at, ended=Outcome.REJECTED.value)
        cls, _ = decisions.classify_failure(None, error)
        cls = decisions.REFUSAL_CLASSES.get(kind, cls)
        return Ending(
            outcome=Outcome.REJECTED,
            stage=Stage.SUBMITTING,
            error=error,
            classification=cls,
            reason=None if reached else f"refused before tools/call was sent ({kind})",
        )
    if verdict == "unreachable":
        return Ending(
            outcome=Outcome.REJECTED,
            stage=Stage.SUBMITTING,
            error=error,
            classification=Classification.RETRYABLE,
            retry_after_s=retry_after or None,
            reason="server unreachable; tools/call was never sent",
        )
    _record(mc, reason, sent_at, ended=Outcome.UNKNOWN_OUTCOME.value)
    return Ending(
        outcome=Outcome.UNKNOWN_OUTCOME,
        stage=Stage.SUBMITTING,
        error=error,
        reason=f"tools/call may have reached the server but its reply was lost ({kind})",
    )


def _accepted(mc: TaskMachine, out: StartCallOutput, reason: str, sent_at: datetime) -> StartCallOutput:
    """``tools/call`` answered: the attempt recorded, the session's era in the ledger, the tool's contract."""
    _record(mc, reason, sent_at)
    mc.state.ledger.sdk_version = out.sdk_version
    mc.state.ledger.era = out.start.era
    mc.state.ledger.protocol_version = out.start.session.protocol_version
    if out.tool is not None:
        _learn_tool(mc, out)
    return out


def _call_input_bound_s(mc: TaskMachine) -> float:
    return decisions.call_input_bound_s(mc.req.input_timeout_s or mc.req.timeouts.input_s, mc.call_bound_s())


async def _await_call(mc: TaskMachine, handle: Any) -> StartCallOutput:
    """``tools/call`` to its end (never abandoned, a cancel is remembered). A question the server asks on the call's own
    stream (``elicitation/create``, relayed by start_call as the relay's signal) is put to a person as a task's input
    is: INPUT_REQUIRED with the questions, answered with ``provide_input``, or declined (cancelled, with
    ``on_input_timeout = "cancel"`` or once the task is cancelled) after :func:`_call_input_bound_s`."""
    while True:
        try:
            await workflow.wait_condition(lambda: handle.done() or bool(mc.unanswered()))
        except asyncio.CancelledError:
            mc.cancelled_by_temporal()
            continue
        if handle.done() or not workflow.patched(CALL_INPUT):
            return await mc.uninterruptible(handle)
        bound = _call_input_bound_s(mc)
        mc.enter(Phase.INPUT_REQUIRED, "input_required")
        answered = await mc.interruptible_wait(lambda: not mc.unanswered() or handle.done(), timeout_s=bound)
        if not answered and not handle.done():
            _decline_unanswered(mc, bound)
        mc.state.pending = {}
        mc.enter(Phase.SUBMITTING, "submitting")


def _decline_unanswered(mc: TaskMachine, bound: float) -> None:
    cancelling = mc.state.cancel_reason is not None or mc.req.on_input_timeout == "cancel"
    action = "cancel" if cancelling else "decline"
    why = f"cancelled ({mc.state.cancel_reason})" if mc.state.cancel_reason else f"nobody answered within {bound:g}s"
    for key in mc.unanswered():
        mc.state.answers[key] = {"action": action}
        asked = mc.state.pending[key].message or key
        mc.state.call_input_note = (
            f"the server asked for input during tools/call ({asked!r}): answered {action}: {why}"
        )[:1024]


def _record(mc: TaskMachine, reason: str, sent_at: datetime, *, ended: str = "in_flight") -> None:
    mc.state.attempts.append(
        OperationAttempt(
            n=len(mc.state.attempts) + 1,
            reason=reason,  # type: ignore[arg-type]
            at=sent_at,
            ended=ended,
            continues=len(mc.state.attempts) if reason == "input_response" else None,
        )
    )


def _learn_tool(mc: TaskMachine, out: StartCallOutput) -> None:
    if out.tool is None or mc.state.profile is None:
        raise bug("_learn_tool without a tool or a profile")
    if mc.state.output_schema is None and out.tool.output_schema is not None:
        mc.state.output_schema = out.tool.output_schema
        mc.set_contract()
    # Annotations count only for servers configuration trusts (decisions.annotation_idempotent, the one rule).
    annotated = decisions.annotation_idempotent(
        trusted=mc.state.profile.trust_annotations,
        idempotent_hint=out.tool.idempotent_hint,
        read_only_hint=out.tool.read_only_hint,
    )
    if annotated is not None and out.tool.idempotent_hint is None and not workflow.patched(READ_ONLY_IS_IDEMPOTENT):
        annotated = None  # recorded before readOnlyHint alone counted
    if annotated is not None:
        mc.state.ledger.idempotency["annotation_idempotent"] = annotated
        mc.state.ledger.idempotency["idempotent"] = mc.rule().idempotent


__all__ = ["apply_profile", "submit"]
