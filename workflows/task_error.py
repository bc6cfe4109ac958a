"""How a task that did not complete shows in Temporal: ``McpTaskError``, a failed workflow with a typed failure.

``McpTaskWorkflow`` returns the outcome of a ``completed`` task and fails with :class:`McpTaskError` for every other
one: its ``type`` names the outcome, its first detail is the whole outcome, which :meth:`McpTaskError.outcome_of`
reads back from any failure that carries it. Why: docs/temporal-apps.md ("A task that did not complete shows as
Failed").
"""

from __future__ import annotations

from temporalio.api.failure.v1 import Failure
from temporalio.converter import DefaultFailureConverter, PayloadConverter
from temporalio.exceptions import ApplicationError

from mcp_temporal_tasks.activities.activity_io import EXPECTED_ATTEMPT_ENDS, OUTCOME_FAILURE_PREFIX, outcome_in_failure
from mcp_temporal_tasks.workflows.records import McpTaskOutcome, Outcome

TYPE_PREFIX = OUTCOME_FAILURE_PREFIX
#: How much of the server's text the failure message (the UI's one line) carries; the outcome detail has it all.
DETAIL_CAP = 512


def _detail(outcome: McpTaskOutcome) -> str:
    """Why, in the server's words where it gave any: its JSON-RPC error, else a tool error's text, else our reason."""
    if outcome.error is not None:
        text = outcome.error.message
    elif outcome.result is not None:
        blocks = outcome.result.get("content") or []
        text = " ".join(str(b.get("text")) for b in blocks if isinstance(b, dict) and b.get("type") == "text")
        text = text or outcome.reason or ""
    else:
        text = outcome.reason or ""
    text = " ".join(text.split())
    return text if len(text) <= DETAIL_CAP else text[: DETAIL_CAP - 1] + "…"


def classification_words(outcome: McpTaskOutcome) -> str:
    """The outcome's classification, worded so that it cannot be read as the failure's retry flag: the workflow
    is never retried (its failure is non-retryable); the classification says whether the *MCP call* is worth
    another ``tools/call``, which only the replay policy sends."""
    if outcome.classification is None:
        return ""
    after = f", retry after {outcome.retry_after_s:g} s" if outcome.retry_after_s is not None else ""
    return f"MCP outcome class {outcome.classification.value}{after}"


def _md(text: str) -> str:
    """Server text shown as markdown (the UI renders current details): one line, markup characters escaped."""
    text = " ".join(text.split())
    return "".join(f"\\{c}" if c in "\\`*_{}[]()<>#+-.!|~" else c for c in text)


def finished_details(outcome: McpTaskOutcome) -> str:
    """The workflow's current details once the task ended, the same for every ending (a Canceled workflow carries
    no failure, so this is where its page shows the outcome, the reason and the server's words)."""
    lines = [f"**{_md(outcome.ledger.tool)}** on `{_md(outcome.ledger.server)}` ended **{outcome.outcome.value}**"]
    if outcome.classification is not None:
        lines.append(
            f"{classification_words(outcome)} (a new tools/call only as the tool's replay policy allows; "
            "the workflow itself is never retried)"
        )
    server = outcome.error.message if outcome.error is not None else None
    if server is None and outcome.result is not None and outcome.outcome != Outcome.COMPLETED:
        server = _detail(outcome)
    if server:
        lines.append(f"server: {_md(server[:DETAIL_CAP])}")
    if outcome.reason:
        lines.append(f"reason: {_md(outcome.reason[:DETAIL_CAP])}")
    task = [f"task {_md(outcome.task_id)}"] if outcome.task_id else []
    if outcome.task_status:
        task.append(f"status {_md(outcome.task_status)}")
    if outcome.status_message:
        task.append(f"“{_md(outcome.status_message[:DETAIL_CAP])}”")
    if task:
        lines.append(" · ".join(task))
    return "\n\n".join(lines)


#: The memo key of a finished task's ending (``ending_memo``): what the UI's Memo tab shows with no worker running.
ENDING_MEMO = "ending"
#: Each text of the ending memo is cut at this: the memo stays small whatever the server said (the whole outcome is
#: in the workflow's result or failure).
ENDING_TEXT_CAP = 300


def _cut(text: str | None) -> str | None:
    if text is None:
        return None
    text = " ".join(text.split())
    return text if len(text) <= ENDING_TEXT_CAP else text[: ENDING_TEXT_CAP - 1] + "…"


def ending_memo(outcome: McpTaskOutcome) -> dict[str, str | float | None]:
    """How the task ended, for the workflow's memo: readable in the UI (its Memo tab, ``DescribeWorkflowExecution``)
    after every worker is gone, where the current details (read by query) are not. The outcome, its class, the
    server's words, our reason, the task's last status: each bounded (``ENDING_TEXT_CAP``), nothing that is not
    already in the history (no argument, no header, no credential), so the memo stays small and free of secrets."""
    server = outcome.error.message if outcome.error is not None else None
    if server is None and outcome.result is not None and outcome.outcome != Outcome.COMPLETED:
        server = _detail(outcome)
    return {
        "outcome": outcome.outcome.value,
        "classification": outcome.classification.value if outcome.classification is not None else None,
        "retry_after_s": outcome.retry_after_s,
        "server_says": _cut(server),
        "reason": _cut(outcome.reason),
        "task_status": outcome.task_status,
        "status_message": _cut(outcome.status_message),
        "tool": _cut(outcome.ledger.tool),
        "server": _cut(outcome.ledger.server),
    }


def failure_type(outcome: Outcome) -> str:
    """``tool_error`` → ``McpTaskToolError``: the ``ApplicationError.type`` of a task that ended so."""
    return TYPE_PREFIX + "".join(part.title() for part in outcome.value.split("_"))


class McpTaskError(ApplicationError):
    """An MCP task ended with an outcome other than ``completed``. ``.outcome`` is the whole outcome.

    Non-retryable: retrying a workflow would send a new ``tools/call``, which only the replay policy may do. The
    ``type`` names the outcome (``McpTaskToolError``, ``McpTaskLost``, ``McpTaskUnknownOutcome``...), so the Temporal
    UI's status column and "Failed" filter, ``ExecutionStatus = 'Failed'`` and the SDK's ``workflow_failed`` metric
    tell a task that did not complete from one that did; :meth:`outcome_of` reads the outcome back from a
    ``WorkflowFailureError`` of a client or a ``ChildWorkflowError`` in a parent workflow.
    """

    def __init__(self, outcome: McpTaskOutcome) -> None:
        detail = _detail(outcome)
        where = f"{outcome.ledger.tool} on {outcome.ledger.server}"
        classified = classification_words(outcome)
        super().__init__(
            f"MCP task {where} ended {outcome.outcome.value}"
            + (f" ({classified}; the workflow is not retried)" if classified else "")
            + (f": {detail}" if detail else ""),
            outcome.model_dump(mode="json"),
            type=failure_type(outcome.outcome),
            non_retryable=True,
        )
        self.outcome = outcome

    @staticmethod
    def outcome_of(err: BaseException | None) -> McpTaskOutcome | None:
        """The outcome carried by ``err`` or any of its causes, or None when it carries none."""
        probe = err
        for _ in range(10):  # raised in this process: the typed outcome as it was
            if probe is None:
                break
            if isinstance(probe, McpTaskError):
                return probe.outcome
            probe = getattr(probe, "cause", None) or probe.__cause__
        detail = outcome_in_failure(err)  # crossed a process: its JSON
        return McpTaskOutcome.model_validate(detail) if detail is not None else None


class McpTaskFailureConverter(DefaultFailureConverter):
    """Temporal's failure converter, except that two kinds of failure carry no Python stack trace: a task's outcome
    (an outcome, not a crash: the UI's Result pane should show the outcome, message and details, not the SDK's
    frames) and the benign attempt ends of a wait (``TaskStillWorking``: an idle wait ends every poll so, and
    formatting its traceback, which Python 3.11+ does with column positions read from source, cost a sixth of
    the attempt's worker CPU). The stack is never formatted for them, not formatted and dropped.
    ``McpTasksPlugin`` installs it where the data converter still has the default one."""

    def to_failure(self, exception: BaseException, payload_converter: PayloadConverter, failure: Failure) -> None:
        if not _stackless(exception):
            super().to_failure(exception, payload_converter, failure)
            return
        tb = exception.__traceback__
        exception.__traceback__ = None  # the only input of the stack trace the default converter formats
        try:
            super().to_failure(exception, payload_converter, failure)
        finally:
            exception.__traceback__ = tb


def _stackless(exception: BaseException) -> bool:
    if not isinstance(exception, ApplicationError):
        return False
    kind = exception.type or ""
    return kind.startswith(TYPE_PREFIX) or kind in EXPECTED_ATTEMPT_ENDS
