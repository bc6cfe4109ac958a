"""Starting and reading MCP task workflows from application services.

``start_mcp_task`` is idempotent: the same ``workflow_id`` (derive it from your own request id) always
returns the same workflow, running or finished, and never sends a second ``tools/call``.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
import time
from typing import Any, Literal

from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import CancelledError, WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from mcp_temporal_tasks.activities.activity_io import OUTCOME_MEMO
from mcp_temporal_tasks.protocol.contract import canonical_json
from mcp_temporal_tasks.workflows.mcp_task import McpTaskWorkflow, initial_search_attributes
from mcp_temporal_tasks.workflows.records import DEFAULT_TASK_QUEUE, McpTaskOutcome, McpTaskRequest, check_request_size
from mcp_temporal_tasks.workflows.task_error import McpTaskError

#: Where a service connects when neither ``TEMPORAL_ADDRESS`` nor a temporal.toml profile says (as Temporal's samples
#: and the CLI do).
DEFAULT_ADDRESS = "localhost:7233"
#: How long :func:`get_outcome` lets a running task's queue go without a polling worker before it says so.
NO_WORKER_S = 10.0
#: A poller whose last poll began longer ago than this is gone (the server lists a dead worker for minutes).
_POLLER_GONE_S = 100.0

_log = logging.getLogger("mcp_temporal_tasks")


#: The SDK's words when a claim meets a client without External Storage, and a claim of a driver it lacks.
_NO_STORAGE_MARK = "TMPRL1105"
_NO_DRIVER = re.compile(r"No driver found with name '(?P<name>[^']{1,100})'")
#: Where a service names the store the workers write to.
STORE_SETTING = (
    "connect with mcp_temporal_tasks.connect(), which reads the store from $MCP_TASKS_CONFIG's [temporal.storage] or "
    "the MCP_TASKS_STORAGE_DRIVER/_BUCKET/_ENDPOINT/_PREFIX variables (as the workers have them; neither: this "
    "machine's embedded store), or give McpTasksPlugin to Client.connect"
)


class NoPayloadStore(RuntimeError):
    """The task's outcome is in Temporal's External Storage (the history holds a claim) and this client has no store
    that reads it: a client connected without one, or with another driver than the workers'. ``driver`` names the
    claim's driver when the SDK said it. The task itself is unaffected: a client with the workers' store reads it."""

    def __init__(self, workflow_id: str, driver: str | None) -> None:
        has = (
            f"a claim of driver {driver!r}, which this client's External Storage does not have"
            if driver
            else "a claim, and this client has no External Storage"
        )
        super().__init__(
            f"the outcome of MCP task {workflow_id} is stored outside the history ({has}): {STORE_SETTING}"
        )
        self.workflow_id, self.driver = workflow_id, driver


def no_payload_store(workflow_id: str, exc: BaseException) -> NoPayloadStore | None:
    """:class:`NoPayloadStore` when ``exc`` (or what caused it) is the SDK's "no store for this claim"; else None."""
    seen: BaseException | None = exc
    for _ in range(5):
        if seen is None:
            return None
        text = str(seen)
        if isinstance(seen, RuntimeError) and _NO_STORAGE_MARK in text:
            return NoPayloadStore(workflow_id, None)
        found = _NO_DRIVER.search(text) if isinstance(seen, ValueError) else None
        if found:
            return NoPayloadStore(workflow_id, found["name"])
        seen = seen.__cause__ or seen.__context__
    return None


class NoWorker(RuntimeError):
    """No worker has polled the task's queue for ``waited_s``: the task waits until one does.

    Raised by :func:`get_outcome` with ``no_worker="raise"`` (by default it logs one WARNING and keeps waiting).
    The task is not cancelled: a worker that starts later runs it, and ``get_outcome`` again returns its outcome.
    """

    def __init__(self, workflow_id: str, task_queue: str, waited_s: float) -> None:
        super().__init__(no_worker_message(workflow_id, task_queue, waited_s))
        self.workflow_id, self.task_queue, self.waited_s = workflow_id, task_queue, waited_s


def no_worker_message(workflow_id: str, task_queue: str, waited_s: float) -> str:
    return (
        f"no worker has polled task queue {task_queue!r} for {waited_s:g} s, so MCP task {workflow_id} waits "
        f"until one does: start one with `mcp-tasks worker --task-queue {task_queue} --config YOUR.toml` "
        "(the configuration with its [servers])"
    )


class RequestMismatch(ValueError):
    """The workflow id is already taken by a task of a *different* request (another tool or other arguments).

    Raised by :func:`start_mcp_task` instead of returning that task's handle: its outcome answers another
    request. ``workflow_id``, ``existing_digest`` and ``request_digest`` say which.
    """

    def __init__(self, workflow_id: str, existing_digest: str, request_digest: str, detail: str) -> None:
        super().__init__(
            f"workflow id {workflow_id!r} is already used by a different request ({detail}); "
            "use another workflow id (or idempotency key) for a new request"
        )
        self.workflow_id = workflow_id
        self.existing_digest = existing_digest
        self.request_digest = request_digest


async def _existing_request(handle: WorkflowHandle[Any, Any]) -> tuple[str, str] | None:
    """(tool, request digest) of the task behind ``handle``: from its memo (written when it ends), else from its
    start event (readable while it runs, with or without a worker). None when neither can be read."""
    from mcp_temporal_tasks.protocol.contract import digest

    try:
        desc = await handle.describe()
        memo = await desc.memo()
        ledger = memo.get("ledger") if isinstance(memo, dict) else None
        if isinstance(ledger, dict) and ledger.get("request_digest"):
            return str(ledger.get("tool")), str(ledger["request_digest"])
        async for event in handle.fetch_history_events(page_size=1):
            attrs = event.workflow_execution_started_event_attributes
            if not attrs.input.payloads:
                return None
            values = await handle._client.data_converter.decode(attrs.input.payloads, [dict])
            raw = values[0] if values and isinstance(values[0], dict) else {}
            arguments = raw.get("arguments") if isinstance(raw.get("arguments"), dict) else {}
            return str(raw.get("tool")), digest(arguments)
    except RPCError as err:
        # Not permitted to read it (a caller allowed to start but not to describe): the id's usual idempotency stands.
        # Anything else (the server unreachable, a timeout, an undecodable input) raises: the check is never skipped
        # by accident, and calling start_mcp_task again is safe.
        if err.status == RPCStatusCode.PERMISSION_DENIED:
            return None
        raise
    return None


async def _check_same_request(handle: WorkflowHandle[Any, Any], request: McpTaskRequest) -> None:
    from mcp_temporal_tasks.protocol.contract import digest

    existing = await _existing_request(handle)
    if existing is None:
        return
    tool, existing_digest = existing
    wanted = digest(request.arguments)
    if tool != request.tool:
        raise RequestMismatch(handle.id, existing_digest, wanted, f"tool {tool!r}, not {request.tool!r}")
    if existing_digest != wanted:
        raise RequestMismatch(
            handle.id, existing_digest, wanted, f"arguments digest {existing_digest[:19]}…, not {wanted[:19]}…"
        )


def default_workflow_id(request: McpTaskRequest) -> str:
    """A deterministic id: the idempotency key when given, else a digest of the whole request."""
    if request.idempotency_key:
        return f"mcp-task-{request.idempotency_key}"
    body = canonical_json(request.model_dump(mode="json", exclude={"timeouts"}))
    return f"mcp-task-{hashlib.sha256(body.encode()).hexdigest()[:32]}"


async def start_mcp_task(
    client: Client,
    request: McpTaskRequest,
    *,
    workflow_id: str | None = None,
    task_queue: str = DEFAULT_TASK_QUEUE,
    replace_failed: bool = False,
    memo: dict[str, Any] | None = None,
) -> WorkflowHandle[McpTaskWorkflow, McpTaskOutcome]:
    """Start (or attach to) the workflow for ``request``. Safe to call again with the same id.

    A running workflow with this id is reused (``USE_EXISTING``); a finished one is never re-run
    (``REJECT_DUPLICATE``): its handle is returned so the caller reads the stored outcome. ``replace_failed``: a
    finished run that *failed* may be replaced (``ALLOW_DUPLICATE_FAILED_ONLY``): for a caller that knows it was
    refused before anything was sent (``rejected``, no ``tools/call``); a completed one still stands. ``memo``:
    the workflow's memo at start (the CLI records the configuration it was started with; never a secret).

    Raises :class:`~mcp_temporal_tasks.workflows.records.RequestTooLarge` (naming the limit) before anything starts when
    the arguments are too large to carry through Temporal, and :class:`RequestMismatch` when the id already belongs to
    a task of a different request (another tool, or arguments with another digest): never another request's
    outcome.
    """
    check_request_size(request.arguments)
    wid = workflow_id or default_workflow_id(request)
    try:
        handle = await client.start_workflow(
            McpTaskWorkflow.run,
            request,
            id=wid,
            task_queue=task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            id_reuse_policy=(
                WorkflowIDReusePolicy.ALLOW_DUPLICATE_FAILED_ONLY
                if replace_failed
                else WorkflowIDReusePolicy.REJECT_DUPLICATE
            ),
            search_attributes=initial_search_attributes(request),
            memo=memo,
            static_summary=f"MCP {request.tool} on {request.server_label()}",
            static_details=f"tool `{request.tool}` · server `{request.server_label()}` · "
            f"replay `{(request.replay.value if request.replay else 'configured')}`",
        )
    except WorkflowAlreadyStartedError:
        handle = client.get_workflow_handle_for(McpTaskWorkflow.run, wid)
        await _check_same_request(handle, request)
        return handle
    response = getattr(handle, "_start_workflow_response", None)
    if response is None or not getattr(response, "started", True):  # attached to a running one (USE_EXISTING)
        await _check_same_request(handle, request)
    return handle


async def get_outcome(
    client: Client,
    workflow_id: str,
    *,
    no_worker_s: float | None = NO_WORKER_S,
    no_worker: Literal["warn", "raise"] = "warn",
) -> McpTaskOutcome:
    """Wait for and return the outcome of an MCP task workflow, whatever it is (see :func:`outcome_of`).

    While it waits it looks at the task's queue: once no worker has polled it for ``no_worker_s`` (default
    10 s; None: never look), it logs one WARNING on the ``mcp_temporal_tasks`` logger naming the queue and the
    command that serves it, and keeps waiting (a worker that starts picks the task up); with
    ``no_worker="raise"`` it raises :class:`NoWorker` instead (the task goes on waiting for a worker).
    """
    handle = client.get_workflow_handle_for(McpTaskWorkflow.run, workflow_id)
    if no_worker_s is None:
        return await outcome_of(handle)
    waiting = asyncio.ensure_future(outcome_of(handle))
    watch = asyncio.ensure_future(_watch_queue(client, handle, no_worker_s, no_worker))
    try:
        await asyncio.wait({waiting, watch}, return_when=asyncio.FIRST_COMPLETED)
        if not waiting.done():
            watch.result()  # raises NoWorker; a watch that ended otherwise never ends first
        return waiting.result()
    finally:
        for future in (waiting, watch):
            future.cancel()


async def _pollers(client: Client, queue: str) -> int | None:
    """How many live workers poll ``queue`` for workflow tasks; None when the server cannot say."""
    try:
        resp = await asyncio.wait_for(
            client.workflow_service.describe_task_queue(
                DescribeTaskQueueRequest(namespace=client.namespace, task_queue=TaskQueue(name=queue))
            ),
            5,
        )
    except Exception:  # noqa: BLE001  (e.g. the time-skipping test server: unknown, say nothing)
        return None
    now = time.time()
    return sum(
        1
        for p in resp.pollers
        if not p.HasField("last_access_time") or now - p.last_access_time.ToSeconds() < _POLLER_GONE_S
    )


async def _watch_queue(client: Client, handle: WorkflowHandle[Any, Any], bound_s: float, mode: str) -> None:
    """Log once (or raise :class:`NoWorker`) when the task's queue went ``bound_s`` without a poller; runs until
    cancelled."""
    try:
        desc = await handle.describe()
    except Exception:  # noqa: BLE001  (the wait itself reports a missing workflow)
        desc = None
    if desc is None or desc.status != WorkflowExecutionStatus.RUNNING:
        await asyncio.Event().wait()  # nothing to watch: the wait ends by itself
    assert desc is not None
    queue, loop = desc.task_queue, asyncio.get_running_loop()
    since: float | None = None
    told = False
    while True:
        pollers = await _pollers(client, queue)
        now = loop.time()
        if pollers == 0:
            since = now if since is None else since
            if now - since >= bound_s and not told:
                if mode == "raise":
                    raise NoWorker(handle.id, queue, bound_s)
                _log.warning("%s", no_worker_message(handle.id, queue, bound_s))
                told = True
        elif pollers:
            if told:
                _log.warning("a worker polls task queue %r now: MCP task %s goes on", queue, handle.id)
            since, told = None, False
        await asyncio.sleep(min(2.0, max(0.2, bound_s / 5)))


async def outcome_of(handle: WorkflowHandle[Any, Any]) -> McpTaskOutcome:
    """Wait for the task's end and return its outcome, whatever it is.

    ``handle.result()`` returns the outcome of a ``completed`` task only: every other outcome fails the
    workflow with :class:`~mcp_temporal_tasks.workflows.task_error.McpTaskError` (so Temporal shows it as failed);
    this unwraps it. A workflow that failed for another reason (terminated, timed out) still raises. An outcome
    stored outside the history that this client cannot read raises :class:`NoPayloadStore`, naming the setting.
    """
    try:
        return await _result(handle)
    except WorkflowFailureError as err:
        outcome = McpTaskError.outcome_of(err)
        if outcome is None and isinstance(err.cause, CancelledError):
            # Cancelled on purpose shows as Canceled; its outcome is in the memo.
            memo = await (await handle.describe()).memo()
            outcome = McpTaskOutcome.model_validate(memo[OUTCOME_MEMO]) if OUTCOME_MEMO in memo else None
        if outcome is None:
            raise
        return outcome


async def _result(handle: WorkflowHandle[Any, Any]) -> Any:
    try:
        return await handle.result()
    except (RuntimeError, ValueError) as exc:
        missing = no_payload_store(handle.id, exc)
        if missing is None:
            raise
        raise missing from None
