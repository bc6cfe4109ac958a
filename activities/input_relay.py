"""The one input relay: a server's ``elicitation/create`` put to the workflow, its answer read back and delivered.

Put as a task's input is (the relay's signal), read back by query, delivery signalled: for the questions on a
``tools/call``'s own stream (``start_call``) and on a held 2025-11-25 ``tasks/result`` (``relay_input``).

A question is keyed by its content (:func:`~.relay.legacy_input_key`): one the workflow has answered is answered from
that record, so a person is never asked twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from temporalio import activity
from temporalio.client import WorkflowHandle

from mcp_temporal_tasks.activities.activity_io import LegacyInputRequest
from mcp_temporal_tasks.activities.relay import (
    INPUT_DELIVERED_SIGNAL,
    INPUT_REQUESTED_SIGNAL,
    RELAY_STATE_QUERY,
    legacy_input_key,
)
from mcp_temporal_tasks.activities.wire import McpWireError, WireSession
from mcp_temporal_tasks.protocol.elicitation import elicitation_problem

#: How often the workflow is asked whether a person has answered.
ANSWER_POLL_S = 0.5


def refuse_unless_form(method: str, params: dict[str, Any]) -> None:
    """Refuse what cannot be put to a person: a method other than ``elicitation/create`` (``-32601``: no handler is
    configured, ``sampling/createMessage`` included), or one whose form is not ours to show (URL mode, a malformed
    ``requestedSchema``: ``-32602`` naming why)."""
    if method != "elicitation/create":
        raise McpWireError(f"{method} is not supported by this client (no handler configured)", code=-32601)
    problem = elicitation_problem(params)
    if problem is not None:
        raise McpWireError(f"elicitation/create cannot be answered: {problem}", code=-32602)


class InputRelay:
    """The relay's messages with one workflow run: a question asked, its answer read, its delivery told."""

    def __init__(self, workflow: WorkflowHandle[Any, Any]) -> None:
        self.workflow = workflow

    @classmethod
    def of(cls, workflow_id: str) -> InputRelay:
        """The relay with this activity's workflow run. Raises ``RuntimeError`` outside a worker (no client)."""
        return cls(activity.client().get_workflow_handle(workflow_id, run_id=activity.info().workflow_run_id))

    async def ask(self, method: str, params: dict[str, Any], rpc_id: Any) -> str:
        """Put the question to the workflow (it moves the task to INPUT_REQUIRED); returns its key."""
        key = legacy_input_key(method, params)
        await self.workflow.signal(
            INPUT_REQUESTED_SIGNAL, LegacyInputRequest(key=key, rpc_id=rpc_id, method=method, params=params)
        )
        return key

    async def answer(self, key: str, *, meanwhile: Callable[[], None] | None = None) -> dict[str, Any]:
        """The answer the workflow holds for ``key`` (given with its ``provide_input`` update), once it has one; asked
        every :data:`ANSWER_POLL_S`, ``meanwhile`` run between two asks. Bounded by the caller."""
        while True:
            relay = await self.workflow.query(RELAY_STATE_QUERY)
            given = (relay.get(key) or {}).get("answer")
            if isinstance(given, dict):
                return given
            if meanwhile is not None:
                meanwhile()
            await asyncio.sleep(ANSWER_POLL_S)

    async def delivered(self, key: str) -> None:
        """Tell the workflow the answer reached the server (the task is back to its phase before the question)."""
        await self.workflow.signal(INPUT_DELIVERED_SIGNAL, key)

    async def deliver_owed(self, client: WireSession, *, meanwhile: Callable[[], None] | None = None) -> None:
        """Answers the workflow holds for requests an earlier attempt received but never answered, sent to the
        server's original request ids (it keeps those requests pending)."""
        relay = await self.workflow.query(RELAY_STATE_QUERY)
        for key, rec in relay.items():
            if rec.get("delivered"):
                continue
            answer = rec.get("answer") or await self.answer(key, meanwhile=meanwhile)
            await client.reply(rec["rpc_id"], answer)
            await self.delivered(key)


__all__ = ["ANSWER_POLL_S", "InputRelay", "refuse_unless_form"]
