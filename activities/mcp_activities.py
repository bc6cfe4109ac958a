"""Temporal activities over the MCP task wire layer.

Activity names are stable and versioned (``mcp-tasks.<step>.v1``): workflows in flight keep resolving
them across deployments. Failure semantics, per activity:

``resolve`` (local)
    Configuration only, no network. Unknown server name → ``ApplicationError(type="UnknownServer")``.
    An inline endpoint this worker's configuration does not allow (command, credential references or URL,
    each by its own ``[worker]`` key) → ``ApplicationError(type="InlineEndpointRefused")``; nothing runs.
``start_call``
    Sends ``tools/call`` once. It never retries itself, and its retry policy is one attempt: whether a
    failed send may be repeated is the workflow's decision (``decisions.after_submit_failure``).
    Wire failures surface as ``ApplicationError(type=<error kind>, details=[info])`` whose info says
    ``may_have_reached_server``. A worker that dies mid-call surfaces as a heartbeat timeout: the call
    may have reached the server.
``await_task``
    Polls ``tasks/get`` inside one heartbeating activity, at the server's ``pollInterval`` within our
    floor and ceiling, until the task is terminal or needs input (O(1) history per wait). Read faults
    (transport errors, garbled replies, every JSON-RPC error but ``-32602``: the table in
    ``protocol/wire_errors.py``) are retried in the loop (``tasks/get`` is idempotent) for ``unreachable_s``, then
    reported as ``no_answer`` with the server's last error. Ends early, without raising, on ``-32602``
    (``not_found``) or an unreachable session. When terminal it also reads the payload
    (legacy ``tasks/result``); if that read fails it says so and the workflow retries retrieval alone.
``poll_task``
    One ``tasks/get`` per attempt, for a wait whose polls are far apart: a working task ends the attempt with a
    benign, retryable ``TaskStillWorking`` whose ``next_retry_delay`` is the schedule's gap, so nothing runs (no
    slot, no heartbeat, no history event) until the next poll. Terminal, input, gone, unreachable and
    ``no_answer`` return as from ``await_task``; read faults are retried attempt by attempt for ``unreachable_s``.
``retrieve_result``
    Legacy ``tasks/result`` for a terminal task. Idempotent; read faults (JSON-RPC errors included) retry
    with bounded backoff (the workflow bounds them by the task's TTL or the deadline). Never re-calls the tool.
``cancel_task`` / ``answer_input``
    ``tasks/cancel`` / ``tasks/update``; idempotent, retried on read faults within the workflow's bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import timedelta
from typing import Any, TypeVar

import jsonschema
from temporalio import activity
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory, CancelledError

from mcp_temporal_tasks.activities.activity_io import (
    OUTCOME_MEMO,
    STILL_WORKING,
    WORKER_SHUTDOWN,
    AnswerInput,
    AwaitInput,
    AwaitOutput,
    CancelInput,
    CancelOutput,
    DecodedPayload,
    FetchOutcomeInput,
    JobBinding,
    LegacyInputRequest,
    ListToolsInput,
    RelayInput,
    RelayOutput,
    ResolveInput,
    RetrieveInput,
    RetrieveOutput,
    ServerConfig,
    ServerProfile,
    StartCallInput,
    StartCallOutput,
    ToolPolicy,
    outcome_in_failure,
)
from mcp_temporal_tasks.activities.defs import (  # the names stay importable from here too
    ANSWER_INPUT,
    AWAIT_TASK,
    CANCEL_TASK,
    FETCH_OUTCOME,
    LIST_TOOLS,
    POLL_TASK,
    RELAY_INPUT,
    RESOLVE,
    RETRIEVE_RESULT,
    START_CALL,
    McpActivityDefs,
)
from mcp_temporal_tasks.activities.failure_encoding import to_application_error
from mcp_temporal_tasks.activities.push import Lease, PushHub, Registration
from mcp_temporal_tasks.activities.relay import (
    INPUT_DELIVERED_SIGNAL,
    INPUT_REQUESTED_SIGNAL,
    RELAY_STATE_QUERY,
    legacy_input_key,
)
from mcp_temporal_tasks.activities.result_store import ResultStore
from mcp_temporal_tasks.activities.schedule import after_read_fault, next_poll_delay, task_age_s
from mcp_temporal_tasks.activities.wire import (
    JsonRpcError,
    McpWireError,
    ResultDecodeError,
    SessionPool,
    SessionRef,
    TaskNotFound,
    TaskUnreachable,
    TransportError,
    WireSession,
    decode_result,
)
from mcp_temporal_tasks.activities.wire.jobs import JobReplyMismatch, JobTasks
from mcp_temporal_tasks.activities.wire.jsonrpc import ServerRequestHandler
from mcp_temporal_tasks.activities.wire.sdk_compat import installed_sdk_version
from mcp_temporal_tasks.activities.wire.tracing import annotate
from mcp_temporal_tasks.protocol.elicitation import elicitation_problem
from mcp_temporal_tasks.protocol.limits import cap_text, safe_raw
from mcp_temporal_tasks.protocol.tasks import (
    LEGACY,
    Endpoint,
    StartResult,
    TaskPayload,
    TaskState,
    ToolInfo,
)
from mcp_temporal_tasks.protocol.wire_errors import (
    PayloadUnusable,
    _cap,
)

log = logging.getLogger(__name__)
MAX_TOOLS_LIST_BYTES = 1024 * 1024
#: A wait's first gap at least this long, on a session whose ``tasks/list`` is read here, waits (within the gap) for
#: the reader to list it before sleeping, so that it stretches (push.Lease.until_listed).
SETTLE_MIN_GAP_S = 20.0
T = TypeVar("T")


def _beat_every(info: activity.Info) -> float:
    """Heartbeat period: half the heartbeat timeout. The SDK sends at most one per 0.8 × the timeout (the
    latest one given); calling more often adds local work (thousands of waiting tasks) and no safety."""
    return max(0.2, (info.heartbeat_timeout or timedelta(seconds=30)).total_seconds() / 2)


def _short(task_id: str, n: int = 64) -> str:
    return task_id if len(task_id) <= n else f"{task_id[:n]}…"


def _tasks(client: WireSession, job: JobBinding | None) -> WireSession | JobTasks:
    """What speaks for a task: the MCP task methods, or a job binding's tools in their place."""
    return JobTasks(client, job) if job is not None else client


def _gap_for(inp: AwaitInput) -> Callable[[TaskState], float]:
    """Today's gap for an idle wait's task, from a read of it (what the push hub reads it on)."""
    floor, ceiling, schedule, submitted = inp.poll_floor_s, inp.poll_ceiling_s, inp.schedule, inp.submitted_at

    def gap(state: TaskState) -> float:
        return next_poll_delay(
            state.poll_interval_ms,
            floor_s=floor,
            ceiling_s=ceiling,
            previous_s=ceiling,
            schedule=schedule,
            age_s=task_age_s(state.created_at, submitted, time.time()),
        )

    return gap


def _sdk_stores_large_payloads() -> bool:
    """Whether this activity's client offloads large payloads itself (Temporal's External Storage on its data
    converter, ``worker/storage.py``): then a large result travels as it is, and the SDK puts it in the store and
    only a claim in the history, readable by every client and worker configured alike, in any SDK. Otherwise (a
    client without it) the result store's ``file://`` reference, as before."""
    try:
        return activity.client().data_converter.external_storage is not None
    except RuntimeError:  # not in an activity with a client (a unit test calling the method directly)
        return False


class McpActivities(McpActivityDefs):
    """Activities with their dependencies injected: the server registry, the session pool, the result store.

    Each overrides its stub in :class:`McpActivityDefs` (what workflows import) under the same activity name."""

    def __init__(
        self,
        *,
        servers: Mapping[str, ServerConfig] | None = None,
        pool: SessionPool | None = None,
        store: ResultStore | None = None,
        allow_inline_endpoints: bool = False,
        allow_inline_commands: bool = False,
        allow_inline_credentials: bool = False,
        inline_allowlist: Iterable[Endpoint] = (),
        owner_queue: str | None = None,
        live_sink: Callable[[str, dict[str, Any]], None] | None = None,
        push: PushHub | None = None,
    ) -> None:
        self.servers = dict(servers or {})
        self.pool = pool or SessionPool()
        #: Who hears the servers' task notifications for this process's waits (``activities/push/``).
        self.push = push or PushHub()
        self.push.reads_with(self._hub_read)
        self.store = store or ResultStore()
        #: What a request may name instead of a configured server (``[worker]`` keys of the same names).
        self.allow_inline_endpoints = allow_inline_endpoints
        self.allow_inline_commands = allow_inline_commands
        self.allow_inline_credentials = allow_inline_credentials
        #: Inline endpoints allowed as they are, whatever the rules say (the CLI's: the one its user typed).
        self.inline_allowlist = [e.model_dump(mode="json") for e in inline_allowlist]
        #: Task queue served by this process only; stdio tasks are pinned to it.
        self.owner_queue = owner_queue
        #: Called with (workflow id, heartbeat details) whenever a call's or a wait's live status changes: the live
        #: view of a `mcp-tasks run` whose own worker this is (heartbeats reach Temporal throttled).
        self.live_sink = live_sink
        #: How this worker names itself to Temporal (``runner.run_workers`` sets it; a refusal names it).
        self.identity = f"{os.getpid()}@{socket.gethostname()}"

    def all(self) -> list[Callable[..., Any]]:
        return [
            self.resolve,
            self.start_call,
            self.await_task,
            self.poll_task,
            self.retrieve_result,
            self.cancel_task,
            self.answer_input,
            self.relay_input,
            self.list_tools,
            self.fetch_outcome,
        ]

    # --- helpers ---------------------------------------------------------------------------------

    def _decode(self, payload: TaskPayload, output_schema: dict[str, Any] | None) -> DecodedPayload:
        """The payload as the workflow may carry it: decoded, or decode_failed with the raw kept (capped),
        and over the store's inline limit only as a reference. Every activity returning a payload uses it."""
        if payload.result is None:
            return DecodedPayload(error=payload.error, empty=payload.empty)
        try:
            decoded = decode_result(payload.result, output_schema)
        except ResultDecodeError as exc:
            return DecodedPayload(decode_error=exc.message, raw=_cap(payload.result))
        inline, ref = (decoded, None) if _sdk_stores_large_payloads() else self.store.maybe_offload(decoded)
        if ref is not None:
            # The workflow never sees the offloaded body: it must still know a tool error from a success.
            ref["is_error"] = bool(decoded.get("isError"))
            activity.logger.warning("result of %s bytes kept outside history at %s", ref["size"], ref["uri"])
        return DecodedPayload(result=inline, result_ref=ref)

    @staticmethod
    async def _heartbeating(
        coro: Awaitable[T], details: Callable[[], Any], every_s: float | None = None, *, at_once: bool = True
    ) -> T:
        """Await ``coro`` while heartbeating every ``every_s`` (default half the heartbeat timeout), so a dead
        worker is noticed and a cancel gets through; the first beat at once, or (``at_once=False``) only once the
        coroutine has outlasted a period: a ``poll_task`` read normally takes milliseconds, and a heartbeat is a
        billable action, so an attempt should cost exactly one. A timer, not a task of its own: thousands of short
        attempts a minute pay for no task, no ``asyncio.wait`` and no cancellation of either."""
        every = every_s or _beat_every(activity.info())
        loop = asyncio.get_running_loop()

        def beat() -> None:
            activity.heartbeat(details())
            timer[0] = loop.call_later(every, beat)  # runs in the activity's context, copied by call_later

        if at_once:
            activity.heartbeat(details())
        timer = [loop.call_later(every, beat)]
        try:
            return await coro
        finally:
            timer[0].cancel()

    @classmethod
    async def _on_task(cls, out_type: type[T], fn: Callable[[], Awaitable[T]], beat: dict[str, Any]) -> T:
        """Run an idempotent step on an existing task, heartbeating: -32602 and unreachable sessions are
        answers, not failures; garbled replies and transport faults are retried by the activity's policy."""
        try:
            return await cls._heartbeating(fn(), lambda: beat)
        except TaskNotFound:
            return out_type(not_found=True)  # type: ignore[call-arg]
        except TaskUnreachable as exc:
            return out_type(unreachable=exc.message)  # type: ignore[call-arg]
        except McpWireError as exc:
            raise to_application_error(exc, task_read=True)

    @staticmethod
    def _lease(
        hub: PushHub,
        ref: SessionRef,
        principal: str | None,
        task_id: str,
        *,
        job: JobBinding | None,
        epoch: int,
        gap_for: Callable[[TaskState], float] | None = None,
    ) -> Lease:
        """This wait's lease on the push hub: a notification for the task (or the hub's own read, or a ``tasks/list``
        read) then wakes its workflow at once. Nothing to register (a lease on nothing) for a job (plain tools have no
        notifications) or an activity run outside a worker (ActivityEnvironment: nobody to wake)."""
        if job is not None:
            return Lease()
        try:
            temporal = activity.client()
        except RuntimeError:
            return Lease()
        info = activity.info()
        if info.workflow_id is None:
            return Lease()
        return hub.register(
            Registration(ref, principal, task_id, info.workflow_id, info.workflow_run_id, epoch, temporal, gap_for)
        )

    @staticmethod
    async def _after_hub_read(lease: Lease) -> None:
        """A read right after this process's own (the hub read it, and woke the workflow): keep the pollInterval."""
        if (spacing := lease.spacing()) > 0:
            await asyncio.sleep(spacing)

    async def _hub_read(self, ref: SessionRef, principal: str | None, task_id: str) -> TaskState:
        """The push hub's own read of an idle wait's task (``push/poller.py``): ``tasks/get`` on the pooled
        session, a session the server forgot replaced as for any read."""
        _, state = await self.pool.read_task(ref, principal=principal, fn=lambda s: s.get(task_id))
        return state

    @staticmethod
    def _counter(name: str, description: str, **attrs: str) -> None:
        try:
            activity.metric_meter().create_counter(name, description).add(1, attrs)
        except Exception:  # metrics must never fail an activity
            pass

    # --- activities ------------------------------------------------------------------------------

    def _inline_refusal(self, endpoint: Endpoint) -> str | None:
        """Why this worker refuses an endpoint given by a request (None: allowed).

        Workflow inputs are not trusted beyond this: a command runs on the worker, a credential reference
        sends one of its secrets, a URL makes it connect anywhere. Each needs its own ``[worker]`` key.
        """
        if endpoint.model_dump(mode="json") in self.inline_allowlist:
            return None
        refused = []
        if endpoint.command is not None and not self.allow_inline_commands:
            refused.append(
                "inline stdio commands are not run by this worker "
                "(set [worker] allow_inline_commands = true to allow them)"
            )
        if endpoint.url is not None and not self.allow_inline_endpoints:
            refused.append(
                "inline URLs are not reached by this worker (set [worker] allow_inline_endpoints = true to allow them)"
            )
        if (endpoint.header_refs or endpoint.env_refs or endpoint.auth) and not self.allow_inline_credentials:
            refused.append(
                "inline credential references (header_refs/env_refs/auth) are not resolved by this worker "
                "(set [worker] allow_inline_credentials = true to allow them)"
            )
        return "; ".join(refused) or None

    @activity.defn(name=RESOLVE)
    async def resolve(self, inp: ResolveInput) -> ServerProfile:
        if isinstance(inp.server, str):
            cfg = self.servers.get(inp.server)
            if cfg is None:
                known = ", ".join(sorted(self.servers)) or "none configured"
                raise ApplicationError(
                    f"unknown MCP server {inp.server!r}: worker {self.identity} on task queue "
                    f"{activity.info().task_queue!r} took this task and has no such server (its "
                    f"servers: {known}); every worker on a queue needs the same [servers]",
                    type="UnknownServer",
                    non_retryable=True,
                )
            endpoint = cfg.endpoint()
            job = cfg.jobs.get(inp.tool)
            # A job's own idempotency, replay policy and polling are those of its binding.
            policy = (
                ToolPolicy.model_validate(job.model_dump(include=set(ToolPolicy.model_fields)))
                if job is not None
                else cfg.tools.get(inp.tool, ToolPolicy())
            )
            return ServerProfile(
                name=inp.server,
                endpoint=endpoint,
                identity=endpoint.identity(),
                principal=inp.principal or cfg.principal,
                era=inp.era or cfg.era,
                trust_annotations=cfg.trust_annotations,
                policy=policy,
                polling=policy.polling or cfg.polling,
                job=job,
            )
        endpoint = inp.server
        refusal = self._inline_refusal(endpoint)
        if refusal is not None:
            raise ApplicationError(
                f"inline endpoint {endpoint.identity()!r} refused: {refusal}; "
                "or name a server configured in [servers.NAME]",
                type="InlineEndpointRefused",
                non_retryable=True,
            )
        # Named by its (redacted) identity, as start_mcp_task labels it: the same McpServer everywhere.
        return ServerProfile(
            name=endpoint.identity(),
            endpoint=endpoint,
            identity=endpoint.identity(),
            principal=inp.principal,
            era=inp.era,
        )

    def _live(self, details: dict[str, Any], workflow_id: str | None = None) -> None:
        """Hand ``details`` (what the heartbeat carries) to this process's live view at once, where one listens
        (``mcp-tasks run``'s own worker): heartbeats reach Temporal only every 0.8 × the heartbeat timeout."""
        if self.live_sink is not None:
            try:
                self.live_sink(workflow_id or activity.info().workflow_id or "", dict(details))
            except Exception:  # noqa: BLE001  (a display must never fail an activity)
                pass

    async def _check_before_sending(
        self, client: WireSession, tools: dict[str, ToolInfo], name: str, arguments: dict[str, Any]
    ) -> None:
        """Refuse, before ``tools/call`` leaves, a call the server's ``tools/list`` already answers: a tool it does not
        list (read again once: the list may have changed) or arguments that do not match its ``inputSchema``. Both
        are ``rejected`` with nothing sent (``may_have_reached_server`` False), so the same request may run again."""
        if name not in tools:
            tools = await client.list_tools(refresh=True)
        if name not in tools:
            listed = ", ".join(sorted(tools)[:20]) + (", ..." if len(tools) > 20 else "") if tools else "none"
            message = f"tools/call was never sent: the server lists no tool {name!r} (it lists: {listed})"
            raise ApplicationError(
                message,
                {"may_have_reached_server": False, "message": message, "code": -32602},
                type="UnknownTool",
                non_retryable=True,
            )
        raw = next((t for t in reversed(client.raw_tools) if isinstance(t, dict) and t.get("name") == name), None)
        schema = raw.get("inputSchema") if isinstance(raw, dict) else None
        if not isinstance(schema, dict):
            return
        try:
            validator_cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
            validator_cls.check_schema(schema)
            error = jsonschema.exceptions.best_match(validator_cls(schema).iter_errors(arguments))
        except (jsonschema.exceptions.SchemaError, RecursionError, TypeError, ValueError):
            return  # the server's own schema is unusable: the server decides
        if error is not None:
            where = "/".join(str(p) for p in error.absolute_path) or "arguments"
            message = (
                f"tools/call was never sent: the arguments do not match the input schema of {name!r}: "
                f"{where}: {cap_text(error.message, 512)}"
            )
            raise ApplicationError(
                message,
                {"may_have_reached_server": False, "message": message, "code": -32602},
                type="InvalidArguments",
                non_retryable=True,
            )

    def _call_input_relay(self, inp: StartCallInput, beat: dict[str, Any], workflow_id: str) -> ServerRequestHandler:
        """What answers a server's request on the stream of this ``tools/call``: ``ping``; an ``elicitation/create``
        (form mode, the one declared) put to the workflow as a task's input is (the relay's signal; the answer read
        back by query), or ``decline``/``cancel`` (``inp.input_timeout_action``) when none comes within
        ``inp.input_wait_s`` (+10 s: the workflow's own timer decides first); a workflow from before
        (``input_wait_s`` None) gets ``decline`` at once. A request that cannot be put to a person (URL mode, a
        malformed ``requestedSchema``) is answered ``-32602`` naming why; anything else ``-32601``."""

        async def on_request(method: str, params: dict[str, Any], rpc_id: Any) -> dict[str, Any]:
            if method == "ping":
                return {}
            if method != "elicitation/create":
                raise McpWireError(f"{method} is not supported by this client (no handler configured)", code=-32601)
            problem = elicitation_problem(params)
            if problem is not None:
                raise McpWireError(f"elicitation/create cannot be answered: {problem}", code=-32602)
            if inp.input_wait_s is None:
                return {"action": "decline"}
            try:
                wf = activity.client().get_workflow_handle(workflow_id, run_id=activity.info().workflow_run_id)
            except RuntimeError:  # outside a worker: nobody to ask
                return {"action": inp.input_timeout_action}
            key = legacy_input_key(method, params)
            await wf.signal(
                INPUT_REQUESTED_SIGNAL, LegacyInputRequest(key=key, rpc_id=rpc_id, method=method, params=params)
            )
            beat["step"] = "input_required"
            self._live(beat, workflow_id)
            answer: dict[str, Any] = {"action": inp.input_timeout_action}
            try:
                async with asyncio.timeout(inp.input_wait_s + 10.0):
                    while True:
                        relay = await wf.query(RELAY_STATE_QUERY)
                        given = (relay.get(key) or {}).get("answer")
                        if isinstance(given, dict):
                            answer = given
                            break
                        await asyncio.sleep(0.5)
            except TimeoutError:
                pass
            await wf.signal(INPUT_DELIVERED_SIGNAL, key)
            beat["step"] = "tools/call sent"
            self._live(beat, workflow_id)
            return answer

        return on_request

    @activity.defn(name=START_CALL)
    async def start_call(self, inp: StartCallInput) -> StartCallOutput:
        """Send ``tools/call`` once. Everything before its bytes leave (connect, discovery, ``initialize``,
        ``tools/list``, and a call ``tools/list`` already refuses: an unlisted tool, arguments against its
        ``inputSchema``) fails as "tools/call was never sent" (``may_have_reached_server`` False), however the
        failing request itself ended. A lost reply on a 2025-11-25 session is reconciled with ``tasks/list``
        where that is sound (:meth:`WireSession.reconcile_lost_call`); otherwise it may have reached the
        server. Heartbeats run for the whole activity, so only a dead worker times it out; the first one goes
        when ``tools/call`` is sent (step ``tools/call sent``: `mcp-tasks run` shows a long synchronous call as
        CALLING), later ones carry the call's progress."""
        profile = inp.profile
        annotate(server=profile.name, tool=inp.tool)
        beat: dict[str, Any] = {"step": "connecting", "tool": inp.tool}
        sent = False
        workflow_id = activity.info().workflow_id or ""

        def progress(done: float, total: float | None, message: str | None) -> None:
            # A synchronous tool's progress is its live status: the activity's next heartbeat carries it, and
            # heartbeat details are what `mcp-tasks status` shows while the call runs (no history event).
            beat["progress"] = f"{done:g}/{total:g}" if total else f"{done:g}"
            beat["statusMessage"] = message or beat["progress"]
            # Not a heartbeat here: a pooled session's notifications may arrive in another activity's context.
            self._live(beat, workflow_id)

        on_request = self._call_input_relay(inp, beat, workflow_id)

        async def call(client: WireSession) -> StartCallOutput:
            nonlocal sent
            beat["step"] = "reading tools/list"
            listed = client.era == LEGACY or profile.trust_annotations or profile.policy.output_schema is None
            tools = await client.list_tools() if listed else {}
            if listed:
                await self._check_before_sending(
                    client, tools, profile.job.submit if profile.job else inp.tool, inp.arguments
                )
                tools = await client.list_tools()
            beat["step"] = "tools/call sent"
            sent = True
            # The first heartbeat of the attempt: the SDK sends it at once (later ones are throttled).
            activity.heartbeat(beat)
            self._live(beat, workflow_id)
            reconciled = None
            if profile.job is not None:
                beat["tool"] = profile.job.submit
                try:
                    start = await JobTasks(client, profile.job).submit(
                        inp.arguments, timeout_s=inp.call_timeout_s, on_progress=progress
                    )
                except JobReplyMismatch as exc:
                    return StartCallOutput(
                        start=StartResult(era=client.era, session=client.session_ref(), result={"content": []}),
                        payload=DecodedPayload(decode_error=exc.message, raw=exc.raw),
                        sdk_version=installed_sdk_version(),
                    )
            else:
                try:
                    start = await client.start(
                        inp.tool,
                        inp.arguments,
                        ttl_ms=inp.ttl_ms,
                        input_responses=inp.input_responses,
                        request_state=inp.request_state,
                        timeout_s=inp.call_timeout_s,
                        on_progress=progress,
                        on_server_request=on_request,
                    )
                except McpWireError as exc:
                    if not exc.may_have_reached_server:
                        raise
                    task = await client.reconcile_lost_call(exc)
                    if task is None:
                        raise
                    reconciled = f"the reply to tools/call was lost ({exc.kind}); tasks/list showed its one new task"
                    activity.logger.warning("tools/call %s: %s: %s", inp.tool, reconciled, _short(task.task_id))
                    start = StartResult(era=client.era, session=client.session_ref(), task=task, task_requested=True)
            tool = None if profile.job is not None else tools.get(inp.tool)  # a job's name is not a server's tool
            payload = None
            if start.result is not None:
                schema = profile.policy.output_schema or (tool.output_schema if tool else None)
                payload = self._decode(TaskPayload(result=start.result), schema)
            if start.task is not None:
                self.pool.track(client, start.task.task_id)
                annotate(task_id=start.task.task_id, status=start.task.status)
            return StartCallOutput(
                start=start,
                tool=tool,
                payload=payload,
                sdk_version=installed_sdk_version(),
                owner_queue=self.owner_queue if profile.endpoint.command else None,
                reconciled=reconciled,
            )

        try:
            out = await self._heartbeating(
                self.pool.run_new_call(profile.endpoint, principal=profile.principal, era=profile.era, fn=call),
                lambda: beat,
                at_once=False,
            )
        except McpWireError as exc:
            raise to_application_error(exc, sent=None if sent else False)
        self._counter("mcp_tasks_tool_calls", "tools/call requests sent", tool=inp.tool)
        return out

    @activity.defn(name=AWAIT_TASK)
    async def await_task(self, inp: AwaitInput) -> AwaitOutput:
        """Poll ``tasks/get`` until the task is terminal or needs input, heartbeating throughout.

        Read faults (transport faults, garbled replies, JSON-RPC errors other than ``-32602``) are retried here
        (``tasks/get`` is idempotent), with backoff and ``Retry-After``, until the server has given no usable
        answer for ``unreachable_s``; that clock and the count of failed reads survive a worker's death (they
        travel in the heartbeat details). A terminal task's payload is read
        here too: on 2026-07-28 it is inline, and is dropped from the returned state once decoded (a large
        one goes to the result store, never into history).
        """
        # A worker that stops hands its waits on at once instead of holding them through its graceful timeout.
        shutdown = asyncio.ensure_future(activity.wait_for_worker_shutdown())
        try:
            return await self._poll_until_moved(inp, shutdown)
        finally:
            shutdown.cancel()

    async def _poll_until_moved(self, inp: AwaitInput, shutdown: asyncio.Future[None]) -> AwaitOutput:
        info = activity.info()
        annotate(task_id=inp.task_id)
        hb_every = _beat_every(info)
        previous = info.heartbeat_details[0] if info.heartbeat_details else None
        failing_since: float | None = previous.get("failingSince") if isinstance(previous, dict) else None
        #: Unanswered reads in a row, across attempts (a worker that dies mid-fault hands the count on).
        faults: int = int(previous.get("faults") or 0) if isinstance(previous, dict) and failing_since else 0
        polls = 0
        delay: float | None = None
        transient = 0
        details: dict[str, Any] = {"taskId": _short(inp.task_id), "polls": 0}
        lease = self._lease(
            self.push, inp.session, inp.principal, inp.task_id, job=inp.job, epoch=len(inp.answered_keys)
        )
        # Done when the push hub wakes this task's workflow: the workflow then reads the task in an activity of its own
        # (it abandoned this one), so this one stops at once instead of polling on until a heartbeat tells it of the
        # cancel. Had the workflow not taken the wake, the state returned here makes it read again anyway.
        woken = lease.woken
        await self._after_hub_read(lease)
        while True:
            try:
                session, state = await self.pool.read_task(
                    inp.session, principal=inp.principal, fn=lambda s: _tasks(s, inp.job).get(inp.task_id)
                )
                client = _tasks(session, inp.job)
                transient, failing_since, faults = 0, None, 0
            except JobReplyMismatch as exc:
                # The job's status cannot be known from this reply, and asking again gets the same: decode_failed.
                ended = TaskState(
                    task_id=inp.task_id, status="failed", era=inp.session.era, status_message=cap_text(exc.message, 512)
                )
                return AwaitOutput(
                    state=ended, polls=polls, payload=DecodedPayload(decode_error=exc.message, raw=exc.raw)
                )
            except TaskNotFound:
                return AwaitOutput(not_found=True, polls=polls)
            except TaskUnreachable as exc:
                return AwaitOutput(unreachable=exc.message, polls=polls)
            except McpWireError as exc:
                failing_since, faults = failing_since or time.time(), faults + 1
                transient += 1
                gave_up, wait = after_read_fault(exc, inp, failing_since, faults, transient)
                if gave_up is not None:
                    gave_up.polls = polls
                    return gave_up
                details.update(
                    transportError=cap_text(f"{exc.kind}: {exc.message}", 512),
                    failingSince=failing_since,
                    faults=faults,
                    readBudgetEndsAt=failing_since + inp.unreachable_s,
                )
                activity.heartbeat(details)
                self._live(details)  # `run` shows at once that reads fail (and until when it tries)
                await self._sleep_beating(wait, hb_every, details, shutdown)
                continue
            polls += 1
            self._counter("mcp_tasks_polls", "tasks/get polls")
            # The SDK throttles heartbeats itself; the details are what `mcp-tasks run` shows live.
            details = {
                "taskId": _short(state.task_id),
                "status": state.status,
                "statusMessage": state.status_message,
                "polls": polls,
            }
            activity.heartbeat(details)
            self._live(details)
            moved = await self._if_moved(session, client, state, inp, details, polls, lease)
            if moved is not None:
                return moved
            age = task_age_s(state.created_at, inp.submitted_at, time.time())
            delay = next_poll_delay(
                state.poll_interval_ms,
                floor_s=inp.poll_floor_s,
                ceiling_s=inp.poll_ceiling_s,
                previous_s=delay,
                schedule=inp.schedule,
                age_s=age,
            )
            # Where the server has shown it notifies, polls are the safety net: further apart (push.Lease.stretch).
            factor = lease.stretch()
            lease.renew(delay * factor, session=session, status=state.status)
            if (
                factor == 1.0
                and delay >= SETTLE_MIN_GAP_S
                and await self._listed(lease, min(hb_every, delay / 4), shutdown, woken)
            ):
                # Registered just now on a session whose tasks/list is read here: the reader's next read lists it,
                # so this first long gap stretches as the later ones will (not one gap at today's pace first).
                factor = lease.stretch()
                lease.renew(delay * factor, session=session, status=state.status)
            stretched = delay * factor
            if inp.hand_over_gap_s is not None and stretched >= inp.hand_over_gap_s:
                return AwaitOutput(state=state, polls=polls, idle=True, next_poll_at=time.time() + stretched)
            if inp.return_after_age_s is not None and age is not None and age >= inp.return_after_age_s:
                return AwaitOutput(state=state, polls=polls, long_wait=True)
            await self._sleep_beating(stretched, hb_every, details, shutdown, woken)
            if woken.done():
                return AwaitOutput(state=state, polls=polls)

    @staticmethod
    async def _listed(lease: Lease, timeout: float, *stop: asyncio.Future[None]) -> bool:
        """:meth:`Lease.until_listed`, given up when the worker starts shutting down or the workflow is woken."""
        listed = asyncio.ensure_future(lease.until_listed(timeout))
        waited: set[asyncio.Future[Any]] = {listed, *stop}
        await asyncio.wait(waited, return_when=asyncio.FIRST_COMPLETED)
        if not listed.done():
            listed.cancel()
            return False
        return listed.result()

    @staticmethod
    async def _sleep_beating(
        seconds: float,
        every: float,
        details: dict[str, Any],
        shutdown: asyncio.Future[None] | None = None,
        woken: asyncio.Future[None] | None = None,
    ) -> None:
        """Sleep without outlasting the heartbeat timeout. When this worker starts shutting down, the wait is
        handed on: a retryable failure (after one last heartbeat, so the next attempt keeps the unreachable clock),
        retried at once by another worker. Only waits between polls are cut short, never a request in flight.
        ``woken`` done ends the sleep early (a notification woke the workflow)."""
        remaining = seconds
        while remaining > 0:
            if woken is not None and woken.done():
                return
            step = min(remaining, every)
            if shutdown is None:
                await asyncio.sleep(step)
            else:
                await asyncio.wait({shutdown, woken} if woken is not None else {shutdown}, timeout=step)
                if shutdown.done():
                    activity.heartbeat(details)
                    # BENIGN: an expected hand-over, not an error (the SDK logs it at debug, with no traceback).
                    raise ApplicationError(
                        "this worker is shutting down: another one goes on waiting for the task",
                        type=WORKER_SHUTDOWN,
                        next_retry_delay=timedelta(milliseconds=100),
                        category=ApplicationErrorCategory.BENIGN,
                    )
            remaining -= step
            if remaining > 0:
                activity.heartbeat(details)

    @activity.defn(name=POLL_TASK)
    async def poll_task(self, inp: AwaitInput) -> AwaitOutput:
        """One ``tasks/get`` per attempt, for a wait whose polls are far apart: nothing runs between polls.

        While the task works, the attempt ends with a benign, retryable ``ApplicationError(type="TaskStillWorking")``
        whose ``next_retry_delay`` is the schedule's gap (``next_poll_delay``: age, ``pollInterval``): Temporal
        starts the next attempt then, adds no history event for it, and holds no worker slot meanwhile; its
        message and details are what the UI shows as the pending activity's last failure. The attempt returns
        (as ``await_task`` does) when the task is terminal (its payload read here), needs input, is gone or
        unreachable. A read fault is retried as a regular failure after a backoff (or a 429's ``Retry-After``)
        until the server has given no usable answer for ``unreachable_s``, then ``no_answer``: that clock
        travels between attempts in the heartbeat details, the only state Temporal hands to the next attempt,
        so it costs a heartbeat only when a read fails and once when reads recover. Never re-calls the tool.
        """
        info = activity.info()
        annotate(task_id=inp.task_id)
        previous = info.heartbeat_details[0] if info.heartbeat_details else None
        failing_since: float | None = previous.get("failingSince") if isinstance(previous, dict) else None
        faults = int(previous.get("faults") or 0) if isinstance(previous, dict) and failing_since else 0
        details: dict[str, Any] = {"taskId": _short(inp.task_id), "polls": info.attempt}
        lease = self._lease(
            self.push,
            inp.session,
            inp.principal,
            inp.task_id,
            job=inp.job,
            epoch=len(inp.answered_keys),
            gap_for=_gap_for(inp),
        )
        early = (inp.first_poll_at or 0.0) - time.time()
        if info.attempt == 1 and early > 0.05:
            # The hand-over came right after a poll: the first attempt only keeps the schedule (never undercut the
            # server's pollInterval), at the price of the one poll it replaces.
            lease.renew(early)
            raise ApplicationError(
                f"waiting for the next poll in {early:.0f}s",
                details,
                type=STILL_WORKING,
                next_retry_delay=timedelta(seconds=early),
                category=ApplicationErrorCategory.BENIGN,
            )
        # This process's hub read the task within today's gap and saw it working: that read stands for this one (a
        # change would have woken the workflow), so the server is not asked twice in one gap.
        cached = None if failing_since else lease.fresh()
        session: WireSession | None = None
        if cached is None:
            await self._after_hub_read(lease)
        if cached is not None:
            state = cached
            details.update(status=state.status, statusMessage=state.status_message, readBy="worker")
            self._live(details)
            self._counter("mcp_tasks_polls_from_worker", "idle attempts that took the worker's own recent read")
        else:
            try:
                read_on, state = await self._heartbeating(
                    self.pool.read_task(
                        inp.session, principal=inp.principal, fn=lambda s: _tasks(s, inp.job).get(inp.task_id)
                    ),
                    lambda: details,
                    at_once=False,
                )
                session, client = read_on, _tasks(read_on, inp.job)
            except JobReplyMismatch as exc:
                ended = TaskState(
                    task_id=inp.task_id, status="failed", era=inp.session.era, status_message=cap_text(exc.message, 512)
                )
                return AwaitOutput(state=ended, polls=1, payload=DecodedPayload(decode_error=exc.message, raw=exc.raw))
            except TaskNotFound:
                return AwaitOutput(not_found=True, polls=1)
            except TaskUnreachable as exc:
                return AwaitOutput(unreachable=exc.message, polls=1)
            except McpWireError as exc:
                failing_since, faults = failing_since or time.time(), faults + 1
                gave_up, wait = after_read_fault(exc, inp, failing_since, faults, faults)
                if gave_up is not None:
                    return gave_up
                failing = {
                    **details,
                    "failingSince": failing_since,
                    "faults": faults,
                    "readBudgetEndsAt": failing_since + inp.unreachable_s,
                    "transportError": cap_text(f"{exc.kind}: {exc.message}", 512),
                }
                activity.heartbeat(failing)
                self._live(failing)
                what = "tasks/get" if inp.job is None else inp.job.status
                raise ApplicationError(
                    f"{what} failed ({faults} in a row, retrying in {wait:.1f}s): {exc.kind}: "
                    f"{cap_text(exc.message, 512)}",
                    type="TaskReadFault",
                    next_retry_delay=timedelta(seconds=wait),
                ) from None
            self._counter("mcp_tasks_polls", "tasks/get polls")
            details.update(status=state.status, statusMessage=state.status_message)
            self._live(details)
            if failing_since:
                activity.heartbeat(details)  # reads work again: the next attempt must not inherit the fault clock
            moved = await self._if_moved(read_on, client, state, inp, details, 1, lease)
            if moved is not None:
                return moved
        age = task_age_s(state.created_at, inp.submitted_at, time.time())
        # The backoff without a server pollInterval has reached the ceiling by the time a wait is handed here.
        delay = next_poll_delay(
            state.poll_interval_ms,
            floor_s=inp.poll_floor_s,
            ceiling_s=inp.poll_ceiling_s,
            previous_s=inp.poll_ceiling_s,
            schedule=inp.schedule,
            age_s=age,
        )
        today = delay
        # Registered for the longest gap this wait may get: the hub reads the task itself from now on (where it can),
        # and this wait's own attempts are then only the net for this process's death (push.Lease.stretch).
        lease.renew(
            today * lease.net, session=session, status=state.status, today_s=today, read=cached is None, state=state
        )
        delay = today * lease.stretch(idle=True)
        details["nextPollS"] = round(delay, 1)
        message = state.status_message and cap_text(state.status_message, 256)
        # BENIGN: an expected outcome of every poll of a working task; the SDK logs it at debug, with no traceback.
        raise ApplicationError(
            f"{state.status}{f': {message}' if message else ''} (poll {info.attempt}; next in {delay:.0f}s)",
            details,
            type=STILL_WORKING,
            next_retry_delay=timedelta(seconds=delay),
            category=ApplicationErrorCategory.BENIGN,
        )

    async def _if_moved(
        self,
        session: WireSession,
        client: WireSession | JobTasks,
        state: TaskState,
        inp: AwaitInput,
        details: dict[str, Any],
        polls: int,
        lease: Lease,
    ) -> AwaitOutput | None:
        """How a wait ends once the task moved: terminal (its payload read here too), or input to answer; None while
        it works (input already answered counts as working: servers acknowledge lazily)."""
        if state.terminal:
            annotate(status=state.status, polls=polls)
            out = AwaitOutput(state=state.model_copy(update={"result": None}), polls=polls)
            out.payload, out.retrieval_error = await self._read_payload(client, state, inp.output_schema, details)
            self.pool.track(session, state.task_id, done=True)
            lease.release()
            return out
        if state.status == "input_required":
            fresh = {k for k in (state.input_requests or {}) if k not in set(inp.answered_keys)}
            # Legacy input arrives only on a tasks/result stream: nothing to wait for here.
            if fresh or state.era == LEGACY:
                return AwaitOutput(state=state, polls=polls)
        return None

    async def _read_payload(
        self,
        client: WireSession | JobTasks,
        state: TaskState,
        output_schema: dict[str, Any] | None,
        beat: dict[str, Any],
    ) -> tuple[DecodedPayload | None, str | None]:
        """(payload, None), or (None, why) when a transient fault kept it from being read: the workflow then
        retries the retrieval alone. A payload that cannot be carried is decode_failed, not a fault."""
        try:
            payload = self._decode(await self._heartbeating(client.result(state), lambda: beat), output_schema)
        except PayloadUnusable as exc:
            payload = DecodedPayload(decode_error=exc.message, raw=exc.raw)
        except McpWireError as exc:
            self._counter("mcp_tasks_retrievals", "task payload retrievals", outcome="error")
            return None, cap_text(f"{exc.kind}: {exc.message}", 1024)
        self._counter("mcp_tasks_retrievals", "task payload retrievals", outcome="ok")
        return payload, None

    @activity.defn(name=RETRIEVE_RESULT)
    async def retrieve_result(self, inp: RetrieveInput) -> RetrieveOutput:
        """The payload of a terminal task, again. Idempotent, heartbeating; never re-calls the tool.

        Read faults (transport faults, garbled replies, JSON-RPC errors that are not the task's stored payload)
        raise retryable errors (the workflow bounds the retries by the task's TTL or the deadline); a payload
        that cannot be carried comes back as decode_failed.
        """

        async def retrieve() -> RetrieveOutput:
            try:
                _, raw = await self.pool.read_task(
                    inp.session, principal=inp.principal, fn=lambda s: _tasks(s, inp.job).result(inp.state)
                )
                payload = self._decode(raw, inp.output_schema)
            except PayloadUnusable as exc:
                payload = DecodedPayload(decode_error=exc.message, raw=exc.raw)
            return RetrieveOutput(payload=payload)

        beat = {"taskId": _short(inp.state.task_id), "step": "retrieving", "status": inp.state.status}
        annotate(task_id=inp.state.task_id, status=inp.state.status)
        try:
            out = await self._on_task(RetrieveOutput, retrieve, beat)
        except ApplicationError:
            self._counter("mcp_tasks_retrievals", "task payload retrievals", outcome="error")
            raise
        if out.payload is not None:
            self._counter("mcp_tasks_retrievals", "task payload retrievals", outcome="ok")
        return out

    @activity.defn(name=CANCEL_TASK)
    async def cancel_task(self, inp: CancelInput) -> CancelOutput:
        async def cancel() -> CancelOutput:
            _, state = await self.pool.read_task(
                inp.session, principal=inp.principal, fn=lambda s: _tasks(s, inp.job).cancel(inp.task_id)
            )
            return CancelOutput(state=state.model_copy(update={"result": None}) if state else None)

        annotate(task_id=inp.task_id)
        return await self._on_task(CancelOutput, cancel, {"taskId": _short(inp.task_id), "step": "cancelling"})

    @activity.defn(name=ANSWER_INPUT)
    async def answer_input(self, inp: AnswerInput) -> None:
        """``tasks/update`` with the answers (2026-07-28); idempotent (servers ignore a key answered twice), so
        every read fault (JSON-RPC errors included) is retried by the workflow's bounded policy; ``-32602``
        (``TaskNotFound``: the task is gone) is final."""
        try:
            await self._heartbeating(
                self.pool.read_task(
                    inp.session, principal=inp.principal, fn=lambda s: s.update(inp.task_id, inp.responses)
                ),
                lambda: {"taskId": _short(inp.task_id), "step": "answering input"},
            )
        except McpWireError as exc:
            raise to_application_error(exc, task_read=True)

    @activity.defn(name=LIST_TOOLS)
    async def list_tools(self, inp: ListToolsInput) -> dict[str, Any]:
        """``tools/list`` (every page) as a ``ListToolsResult`` in wire form, for the workflow-side client.

        The server is resolved exactly as for a task (configured name, or an inline endpoint this worker
        allows). The answer is bounded (:data:`MAX_TOOLS_LIST_BYTES`): a larger one is refused, not carried.
        """
        profile = await self.resolve(ResolveInput(server=inp.server, tool="-", principal=inp.principal, era=inp.era))
        try:
            client = await self.pool.for_new_call(profile.endpoint, principal=profile.principal, era=profile.era)
            await self._heartbeating(client.list_tools(refresh=True), lambda: {"step": "tools/list"})
        except McpWireError as exc:
            raise to_application_error(exc, read=True)
        value = {"tools": client.raw_tools}
        if safe_raw(value, MAX_TOOLS_LIST_BYTES) is not value:
            raise ApplicationError(
                f"tools/list of {profile.identity} is over {MAX_TOOLS_LIST_BYTES} bytes or not carriable",
                type="PayloadUnusable",
                non_retryable=True,
            )
        return value

    @activity.defn(name=FETCH_OUTCOME)
    async def fetch_outcome(self, inp: FetchOutcomeInput) -> dict[str, Any]:
        """The outcome (JSON) of an existing ``McpTaskWorkflow``: how a reset parent re-attaches to its child.

        A child that did not complete failed with the outcome as its failure's first detail; that is passed on
        as is (the caller types it). Any other failure is raised: it is not an outcome.
        """
        handle = activity.client().get_workflow_handle(inp.workflow_id)
        try:
            value = await self._heartbeating(handle.result(), lambda: {"waiting_for": inp.workflow_id})
        except WorkflowFailureError as err:
            outcome = outcome_in_failure(err)
            if outcome is None and isinstance(err.cause, CancelledError):
                # Cancelled on purpose: the outcome is in the memo (a cancellation carries no details).
                outcome = (await (await handle.describe()).memo()).get(OUTCOME_MEMO)
            if not isinstance(outcome, dict):
                raise
            return outcome
        return value if isinstance(value, dict) else value.model_dump(mode="json")

    @activity.defn(name=RELAY_INPUT)
    async def relay_input(self, inp: RelayInput) -> RelayOutput:
        """2025-11-25 input: hold ``tasks/result`` open and relay each input request through the workflow.

        Each ``elicitation/create`` is handed to the workflow (signal), whose answer (given with the
        ``provide_input`` update) is read back by query and sent on the wire. A request whose content
        the workflow has already answered is answered from that record: a human is never asked twice.
        An attempt that replaces a dead one first delivers answers still owed to the server's original
        request ids (the server keeps those requests pending), then re-opens ``tasks/result``.
        ``sampling/createMessage`` is refused with a JSON-RPC error: no sampling handler is configured.
        """
        info = activity.info()
        assert info.workflow_id is not None, "relay_input runs for a workflow"
        wf = activity.client().get_workflow_handle(info.workflow_id, run_id=info.workflow_run_id)
        every = max(0.5, (info.heartbeat_timeout or timedelta(seconds=30)).total_seconds() / 3)
        beat = {"taskId": inp.state.task_id, "status": "input_required", "relay": True}
        # A notification for the task ends the hold (the workflow's copy of the signal is ignored while it relays).
        lease = self._lease(self.push, inp.session, inp.principal, inp.state.task_id, job=None, epoch=-1)

        async def answer_for(key: str) -> dict[str, Any]:
            while True:
                relay = await wf.query(RELAY_STATE_QUERY)
                answer = (relay.get(key) or {}).get("answer")
                if answer is not None:
                    return answer
                activity.heartbeat(beat)
                await asyncio.sleep(0.5)

        async def on_request(method: str, params: dict[str, Any], rpc_id: Any) -> dict[str, Any]:
            if method != "elicitation/create":
                raise McpWireError(f"{method} is not supported by this client (no handler configured)", code=-32601)
            problem = elicitation_problem(params)
            if problem is not None:
                raise McpWireError(f"elicitation/create cannot be answered: {problem}", code=-32602)
            key = legacy_input_key(method, params)
            await wf.signal(
                INPUT_REQUESTED_SIGNAL, LegacyInputRequest(key=key, rpc_id=rpc_id, method=method, params=params)
            )
            answer = await answer_for(key)
            await wf.signal(INPUT_DELIVERED_SIGNAL, key)
            return answer

        async def deliver_owed(client: WireSession) -> None:
            """Answers the workflow holds for requests an earlier attempt received but never answered."""
            relay = await wf.query(RELAY_STATE_QUERY)
            for key, rec in relay.items():
                if rec.get("delivered"):
                    continue
                answer = rec.get("answer") or await answer_for(key)
                await client.reply(rec["rpc_id"], answer)
                await wf.signal(INPUT_DELIVERED_SIGNAL, key)

        async def held_read(client: WireSession) -> tuple[TaskPayload | None, TaskState | None]:
            """The held ``tasks/result``'s payload (None: it ended with an error), and the ended task's state when a
            notification ended the hold (the ``tasks/get`` that confirmed it). A server may answer a held
            ``tasks/result`` only at its own poll interval (the TypeScript SDK: up to a minute after the task ended); a
            notification that the task changed is checked with a ``tasks/get``, and a task that has ended is read anew
            at once (a read: nothing is re-run)."""
            lease.hold(inp.hold_s, session=client, status=inp.state.status)
            held = asyncio.create_task(
                self._heartbeating(
                    client.result(inp.state, on_server_request=on_request, timeout_s=inp.hold_s), lambda: beat, every
                )
            )
            try:
                while True:
                    either: set[asyncio.Future[Any]] = {held, lease.woken}
                    await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
                    if held.done():
                        try:
                            return held.result(), None
                        except JsonRpcError:
                            return None, None
                    lease.rearm()
                    seen = await client.get(inp.state.task_id)
                    if seen.terminal:
                        held.cancel()
                        with contextlib.suppress(asyncio.CancelledError, Exception):
                            await held
                        return None, seen
            finally:
                held.cancel()

        async def relay() -> RelayOutput:
            client = await self.pool.for_task(inp.session, principal=inp.principal)
            owed = asyncio.create_task(deliver_owed(client)) if info.attempt > 1 else None
            try:
                # None: the stream ended with an error (the task's own stored error, or "gone"; its status says
                # which), or a notification ended the hold.
                payload, ended = await held_read(client)
            finally:
                if owed is not None:
                    owed.cancel()
            state = ended or await client.get(inp.state.task_id)  # a notified end was just read: not asked twice
            if payload is None:
                if not state.terminal:
                    raise TransportError("tasks/result ended with an error while the task is still running", sent=True)
                payload = await client.result(state)
            self.pool.track(client, inp.state.task_id, done=True)
            lease.release()
            return RelayOutput(
                state=state, payload=self._decode(payload, inp.output_schema), notified=ended is not None
            )

        return await self._on_task(RelayOutput, relay, beat)


__all__ = ["McpActivities"]
