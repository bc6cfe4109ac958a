"""The patch ids of ``McpTaskWorkflow``, one place (ARCHITECTURE.md's register says what each changed).

Each guards a change to the commands a workflow issues: ``workflow.patched(ID)`` is asked where the change is, so a
history recorded before it keeps replaying. An id never changes once released.
"""

from __future__ import annotations

#: Guards the rule "a retrieval failure never leads to a replay": histories recorded before it replayed.
RETRIEVAL_NEVER_REPLAYS = "retrieval-failures-never-replay"
FAIL_UNLESS_COMPLETED = "fail-unless-completed"
#: ``McpTaskStatus`` says ``awaiting_approval`` while a replay waits for an operator, and a finished task whose
#: server status was not terminal is listed under its outcome: histories recorded before it replay unchanged.
SEARCHABLE_PHASES = "searchable-approval-and-outcome"
#: A wait on an old task is handed to a second activity with a longer heartbeat timeout (asked only then).
LONG_WAIT_HEARTBEAT = "long-wait-heartbeat"
#: Once a wait's next poll is far enough away, it goes on in ``poll_task`` (one attempt per poll, nothing running in
#: between) instead of a heartbeating activity. Asked only when a wait hands over that way.
IDLE_WAITS = "idle-waits-between-polls"
#: A 2025-11-25 failed task's payload that arrived as a JSON-RPC error reply to ``tasks/result`` cannot be told
#: from a read refused by the server or a gateway ("temporarily unavailable, try again"): it never justifies a
#: replay by itself. Asked only for such an ending classified retryable; histories from before keep replaying.
ERROR_REPLY_NEVER_REPLAYS = "error-reply-payload-never-replays"
#: A task cancelled through Temporal ends as Canceled (its outcome in the memo) instead of failing with
#: McpTaskCancelled: histories from before keep failing as they did.
CANCELLED_SHOWS_CANCELED = "cancelled-shows-canceled"
#: A server's task notification (signal ``mcp_task_notified``, from a worker's push hub: activities/push.py) wakes the
#: wait: the pending poll is dropped and the task read at once; the read decides. Asked in the signal's handler, only
#: for a notice that would wake the wait, so a task never notified has no marker; a history recorded by a worker from
#: before (which ignored the signal) replays with the wake ignored.
NOTIFIED_WAKES = "notifications-wake-waits"
#: A question the server asks on the stream of a plain ``tools/call`` (``elicitation/create``, relayed by start_call as
#: the relay's signal) moves the task to INPUT_REQUIRED, is answered with ``provide_input`` or declined after
#: ``decisions.call_input_bound_s`` (a timer), and the call goes on. Asked when such a question first arrives: a
#: history from before (whose start_call never relayed one) has none and replays unchanged.
CALL_INPUT = "plain-call-input"
#: A trusted server's ``readOnlyHint: true`` makes a tool idempotent without ``idempotentHint`` (as the agent tools
#: always counted it: ``decisions.annotation_idempotent``). Asked only for such a tool; histories from before replay.
READ_ONLY_IS_IDEMPOTENT = "read-only-hint-is-idempotent"
#: At its end a task's memo also carries ``ending`` (``task_error.ending_memo``: outcome, class, the server's words,
#: reason), which the UI shows with no worker running. Asked at every ending; histories from before replay unchanged.
ENDING_MEMO = "ending-in-memo"
#: A ``tools/call`` answered with input requests (2026-07-28 MRTR, SEP-2322) is continued (the questions put to a
#: person, the call sent again with the answers and the echoed ``requestState``, an ``input_response`` attempt) instead
#: of ending rejected. Asked only when such an answer arrives: a history from before ended there and replays unchanged.
MRTR_CONTINUATION = "mrtr-continuation"
#: A ``tools/call`` that needs a subject's consent first (``start_call`` failed with ``AuthorizationRequired`` carrying
#: its ``consent``) waits for it in AWAITING_AUTHORIZATION (the URL in the status, the memo and the current details;
#: woken by ``mcp_task_consent`` or its own bounded re-checks; ``consent_check`` exchanges the code in an activity)
#: and is then sent, instead of ending ``rejected``; ``Timeouts.consent_s`` bounds it (``consent_expired``). Asked
#: only when such a failure arrives: a history from before ended there and replays unchanged.
CONSENT_WAIT = "consent-wait"
#: A task already accepted whose reads need the subject's consent (the grant revoked, or its refresh token spent:
#: ``await_task``/``poll_task`` end with ``consent``) waits for it in AWAITING_AUTHORIZATION as ``consent-wait`` does
#: (one pending consent per wait), then reads the same task again: never a second ``tools/call``. Past
#: ``Timeouts.consent_s`` it ends ``lost`` (the task may still run on the server); a cancel ends it ``cancelled``.
#: Asked only when such a read arrives: a history from before never had one and replays unchanged.
CONSENT_READ = "consent-read"
