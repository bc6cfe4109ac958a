"""AWAITING_AUTHORIZATION: a task waits for its subject's consent (the URL shown), before ``tools/call`` or mid-task.

Shared by SUBMITTING (``consent-wait``: the call is then sent) and WORKING (``consent-read``: the same task is then
read again, never called again). Woken by ``mcp_task_consent`` or its own bounded re-checks of the token store; the
``consent_check`` activity exchanges a kept code (never workflow code). Bounded by ``Timeouts.consent_s``.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Literal

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from mcp_temporal_tasks.activities.activity_io import AUTHORIZATION_MEMO, ConsentCheckInput
    from mcp_temporal_tasks.activities.defs import McpActivityDefs
    from mcp_temporal_tasks.workflows import decisions
    from mcp_temporal_tasks.workflows.options import TASK_STEP
    from mcp_temporal_tasks.workflows.phases.machine import TaskMachine
    from mcp_temporal_tasks.workflows.records import AuthorizationWait, Phase


def for_a_subject(mc: TaskMachine) -> bool:
    """Whether the task acts for a subject (an authorization-code grant): only then may a consent be waited for."""
    auth = mc.state.profile.endpoint.auth if mc.state.profile is not None else None
    return auth is not None and auth.type == "authorization_code"


def who(mc: TaskMachine) -> str:
    """Whose consent it is, as the task says it."""
    return f"subject {mc.principal()!r}" if mc.principal() else "its subject"


async def wait_for_consent(
    mc: TaskMachine, consent: dict[str, str], *, reading: str | None = None
) -> tuple[Literal["send", "refused", "expired", "cancelled", "too_many"], str | None]:
    """AWAITING_AUTHORIZATION: the task shows the URL a person opens (status, memo, current details) and waits for
    the consent: an answer handed by ``mcp_task_consent`` (a callback kept its code under an opaque id), a nudge, or
    its own re-check of the store (a login given with no signal), each looked at by ``consent_check`` (the code is
    exchanged there, in an activity). Returns the verdict (``send``: the grant is there) and, when refused, why; the
    wait's memo is cleared. ``reading``: the MCP task whose reads need the consent (``consent-read``; it is read
    again once given, never called again), else ``tools/call`` waits for it."""
    bound = mc.req.timeouts.consent_s
    if not decisions.may_ask_consent(mc.state.consents):
        return "too_many", None
    mc.state.consents += 1
    wait = AuthorizationWait(
        url=consent["url"],
        grant=consent["grant"],
        state=consent["state"],
        until=workflow.now() + timedelta(seconds=bound),
    )
    mc.state.authorization, mc.state.consent_refs, mc.state.consent_nudged = wait, [], False
    mc.enter(Phase.AWAITING_AUTHORIZATION, "awaiting_authorization")
    workflow.upsert_memo({AUTHORIZATION_MEMO: wait.model_dump(mode="json", exclude={"state"})})
    to_read = f" to read task {reading}" if reading else ""
    workflow.set_current_details(
        f"**{mc.req.tool}** — AWAITING_AUTHORIZATION: {who(mc)} must consent{to_read} at {wait.url} "
        f"(until {wait.until:%Y-%m-%d %H:%M} UTC)"
    )
    checks = 0
    while True:
        left = (wait.until - workflow.now()).total_seconds()
        await mc.interruptible_wait(
            lambda: bool(mc.state.consent_refs) or mc.state.consent_nudged,
            timeout_s=max(1.0, decisions.consent_recheck_s(checks, left)),
        )
        ref = mc.state.consent_refs.pop(0) if mc.state.consent_refs else None
        mc.state.consent_nudged = False
        ready, refused = False, None
        if mc.state.cancel_reason is None:
            checks += 1
            try:
                checked = await workflow.execute_activity_method(
                    McpActivityDefs.consent_check,
                    ConsentCheckInput(state=wait.state, grant=wait.grant, ref=ref),
                    # No heartbeat (one store read, at most one token request); bounded, then the wait goes on.
                    start_to_close_timeout=timedelta(seconds=60),
                    schedule_to_close_timeout=timedelta(seconds=180),
                    retry_policy=TASK_STEP["retry_policy"],
                    summary="consent check",
                )
                ready, refused = checked.ready, checked.refused
            except ActivityError:
                pass  # the store unreadable for now (retried within the preset): the wait goes on, bounded
            except asyncio.CancelledError:
                mc.cancelled_by_temporal()
        verdict = decisions.after_consent_check(
            ready=ready,
            refused=refused,
            left_s=(wait.until - workflow.now()).total_seconds(),
            cancelled=mc.state.cancel_reason is not None,
        )
        if verdict == "wait":
            continue
        mc.state.authorization = None
        workflow.upsert_memo({AUTHORIZATION_MEMO: None})
        return verdict, refused


__all__ = ["for_a_subject", "wait_for_consent", "who"]
