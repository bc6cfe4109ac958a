"""A subject's consent answered from a service's own web callback: checked, kept, and handed to the waiting task.

A task without a usable grant waits in AWAITING_AUTHORIZATION with the URL a person opens (``consent-wait``). The
person's browser comes back to the ``redirect_uri`` of the server's configuration: a service serves it with
:func:`consent_app` (an ASGI app, Starlette) or calls :func:`complete_consent` from its own handler. Either checks
the answer (its ``state`` names a pending consent, its ``iss`` passes RFC 9207), keeps the code in the encrypted
token store under a new opaque id, and signals the workflow that asked for the consent with that id only
(``mcp_task_consent``); the task's own ``consent_check`` activity exchanges the code (never this process, never
workflow code; a consent no task waits for is exchanged here, as ``mcp-tasks login --callback`` does). The workflow
is found by the id the consent was stored with (encrypted, never indexed): no subject and no grant goes to a search
attribute. A wrong ``state`` or ``iss`` is one clear error and changes nothing: the task keeps waiting. A signal that
does not arrive (Temporal unreachable) is no loss: the waiting task looks at its consent by itself
(``decisions.consent_recheck_s``) and finds the kept answer.

:func:`wake_waiting` nudges the tasks that wait for a grant a login just gave (``mcp-tasks login SERVER --subject
S``), read from the store's record of who waits for it.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from mcp_temporal_tasks.activities.activity_io import CONSENT_SIGNAL, ConsentAnswered
from mcp_temporal_tasks.activities.wire.auth import authorization_code
from mcp_temporal_tasks.activities.wire.auth.authorization_code import Answered
from mcp_temporal_tasks.activities.wire.auth.token_store import Store, open_store
from mcp_temporal_tasks.protocol.wire_errors import AuthorizationRequired

if TYPE_CHECKING:
    from starlette.applications import Starlette
    from temporalio.client import Client

#: How long one signal to a waiting task may take before the answer is left to the task's own re-check.
SIGNAL_TIMEOUT_S = 10.0


async def hand_over(client: Client, answered: Answered) -> bool:
    """Signal the workflow that asked for the consent with the answer's opaque id. False when it could not be told
    (it has ended, or Temporal did not answer): a task still waiting finds the answer by itself."""
    import asyncio

    if answered.workflow_id is None:
        return False
    handle = client.get_workflow_handle(answered.workflow_id)
    try:
        await asyncio.wait_for(handle.signal(CONSENT_SIGNAL, ConsentAnswered(ref=answered.ref)), SIGNAL_TIMEOUT_S)
    except Exception:  # noqa: BLE001 - any failure to tell it leaves the answer kept for its re-check
        return False
    return True


async def complete_consent(callback: str, client: Client, *, store: Store | None = None) -> tuple[Answered, bool]:
    """The answer a person's browser brought back to ``callback`` (the full URL, or its query): checked, kept, and
    handed to the waiting task; with whether the task was told now (else its own re-check finds the answer). A consent
    no task waits for is completed here (its code exchanged in this process: there is no task to do it). Raises
    ``AuthorizationRequired`` naming what was wrong (no pending consent for the ``state``, ``iss`` failing RFC 9207,
    a consent already answered, no code); nothing changes then."""
    store = store or open_store()
    answered = authorization_code.accept_callback(callback, store=store)
    if answered.workflow_id is None:
        # No task waits (a consent asked outside a task, or by a worker from before): exchanged here, as login does.
        await authorization_code.exchange_answer(answered.ref, store=store)
        return answered, False
    return answered, await hand_over(client, answered)


async def wake_waiting(client: Client, grant: str, *, store: Store | None = None) -> int:
    """Nudge every task waiting for ``grant`` (a login just gave it): each looks at its consent again. How many
    were told."""
    import asyncio

    told = 0
    for workflow_id in authorization_code.waiting_for(grant, store=store or open_store()):
        handle = client.get_workflow_handle(workflow_id)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(handle.signal(CONSENT_SIGNAL, ConsentAnswered()), SIGNAL_TIMEOUT_S)
            told += 1
    return told


def consent_app(client: Client, *, path: str = "/callback", store: Store | None = None) -> Starlette:
    """An ASGI app answering ``GET path`` (the ``redirect_uri`` the server's configuration names): the person's
    answer handed to the waiting task (200, a line saying so), or one line naming what was wrong (400). The query,
    which holds the code, is never logged or echoed."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    async def callback(request: Request) -> PlainTextResponse:
        try:
            answered, told = await complete_consent(str(request.url), client, store=store)
        except AuthorizationRequired as exc:
            return PlainTextResponse(f"consent not completed: {exc.message}\n", status_code=400)
        except Exception as exc:  # noqa: BLE001 - the store unusable here: said, never a traceback to the browser
            return PlainTextResponse(f"consent not completed: {type(exc).__name__}: {exc}\n"[:500], status_code=503)
        if answered.workflow_id is None:
            said = f"grant {answered.grant} stored; no task waits for it"
        else:
            said = "the task resumes" if told else "the task finds it within minutes"
        return PlainTextResponse(f"consent received ({said}); you can close this window.\n")

    routes: list[Any] = [Route(path, callback, methods=["GET"])]
    return Starlette(routes=routes)


__all__ = ["SIGNAL_TIMEOUT_S", "complete_consent", "consent_app", "hand_over", "wake_waiting"]
