"""Temporal activities over the MCP task wire layer.

Activity names are stable and versioned (``mcp-tasks.<step>.v1``): workflows in flight keep resolving
them across deployments. Failure semantics, per activity:

``resolve`` (local)
    Configuration only, no network. Unknown server name → ``ApplicationError(type="UnknownServer")``.
``start_call``
    Sends ``tools/call`` once. It never retries itself, and its retry policy is one attempt: whether a
    failed send may be repeated is the workflow's decision (``decisions.after_submit_failure``).
    Wire failures surface as ``ApplicationError(type=<error kind>, details=[info])`` whose info says
    ``may_have_reached_server``. A worker that dies mid-call surfaces as a heartbeat timeout: the call
    may have reached the server.
``await_task``
    Polls ``tasks/get`` inside one heartbeating activity, at the server's ``pollInterval`` within our
    floor and ceiling, until the task is terminal or needs input (O(1) history per wait). Transport
    errors are retried in the loop (``tasks/get`` is idempotent). Ends early, without raising, on
    ``-32602`` (``not_found``) or an unreachable session. When terminal it also reads the payload
    (legacy ``tasks/result``); if that read fails it says so and the workflow retries retrieval alone.
``retrieve_result``
    Legacy ``tasks/result`` for a terminal task. Idempotent; transport errors retry with bounded
    backoff (the workflow bounds them by the task's TTL or the deadline). Never re-calls the tool.
``cancel_task`` / ``provide_input``
    ``tasks/cancel`` / ``tasks/update``; idempotent, retried on transport errors.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from datetime import timedelta
from typing import Any, TypeVar

from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from activities.models import (
    AwaitInput,
    AwaitOutput,
    CancelInput,
    CancelOutput,
    LegacyInputRequest,
    PayloadOutcome,
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
    UpdateInput,
)
from activities.result_store import ResultStore
from activities.wire import (
    JsonRpcError,
    McpTaskClient,
    McpWireError,
    RateLimited,
    ResultDecodeError,
    SessionPool,
    TaskNotFound,
    TaskUnreachable,
    TransportError,
    decode_result,
)
from activities.wire.errors import RAW_CAP, _cap
from activities.wire.models import TaskPayload
from activities.wire.sdk_compat import installed_sdk_version
from workflows.decisions import next_poll_delay

log = logging.getLogger(__name__)
T = TypeVar("T")

RESOLVE = "mcp-tasks.resolve.v1"
START_CALL = "mcp-tasks.start_call.v1"
AWAIT_TASK = "mcp-tasks.await_task.v1"
RETRIEVE_RESULT = "mcp-tasks.retrieve_result.v1"
CANCEL_TASK = "mcp-tasks.cancel_task.v1"
PROVIDE_INPUT = "mcp-tasks.provide_input.v1"
RELAY_INPUT = "mcp-tasks.relay_input.v1"

# Workflow messages the relay uses (defined by McpTaskWorkflow).
INPUT_REQUESTED_SIGNAL = "legacy_input_requested"
INPUT_DELIVERED_SIGNAL = "legacy_input_delivered"
RELAY_STATE_QUERY = "legacy_relay_state"


def legacy_input_key(method: str, params: dict[str, Any]) -> str:
    """Stable key of an input request: a re-sent identical question maps to the same key (asked once)."""
    from activities.wire.contract import canonical_json

    body = canonical_json({"method": method, "params": {k: v for k, v in params.items() if k != "_meta"}})
    return "legacy-" + hashlib.sha256(body.encode()).hexdigest()[:16]


def to_application_error(exc: McpWireError) -> ApplicationError:
    """The one mapping from wire failures to Temporal failures: type = error kind, details = info."""
    delay = timedelta(seconds=exc.retry_after_s) if isinstance(exc, RateLimited) and exc.retry_after_s else None
    info = exc.info()
    info["may_have_reached_server"] = exc.may_have_reached_server
    return ApplicationError(exc.message, info, type=exc.kind, non_retryable=not exc.retryable, next_retry_delay=delay)


class McpActivities:
    """Activities with their dependencies injected: the server registry, the session pool, the result store."""

    def __init__(
        self,
        *,
        servers: Mapping[str, ServerConfig] | None = None,
        pool: SessionPool | None = None,
        store: ResultStore | None = None,
        allow_inline_endpoints: bool = True,
        owner_queue: str | None = None,
    ) -> None:
        self.servers = dict(servers or {})
        self.pool = pool or SessionPool()
        self.store = store or ResultStore()
        self.allow_inline_endpoints = allow_inline_endpoints
        #: Task queue served by this process only; stdio tasks are pinned to it.
        self.owner_queue = owner_queue

    def all(self) -> list[Callable[..., Any]]:
        return [self.resolve, self.start_call, self.await_task, self.retrieve_result, self.cancel_task,
                self.provide_input, self.relay_input]

    # --- helpers ---------------------------------------------------------------------------------

    def _decode(self, payload: TaskPayload, output_schema: dict[str, Any] | None) -> PayloadOutcome:
        if payload.result is None:
            return PayloadOutcome(error=payload.error, empty=payload.empty)
        try:
            decoded = decode_result(payload.result, output_schema)
        except ResultDecodeError as exc:
            return PayloadOutcome(decode_error=exc.message, raw=_cap(payload.result))
        inline, ref = self.store.maybe_offload(decoded)
        if ref is not None:
            # The workflow never sees the offloaded body: it must still know a tool error from a success.
            ref["is_error"] = bool(decoded.get("isError"))
            activity.logger.warning("result of %s bytes kept outside history at %s", ref["size"], ref["uri"])
        return PayloadOutcome(result=inline, result_ref=ref)

    @staticmethod
    async def _heartbeating(coro: Awaitable[T], details: Callable[[], Any], every_s: float = 5.0) -> T:
        """Await ``coro`` while heartbeating, so a dead worker is noticed and cancellation gets through."""
        task = asyncio.ensure_future(coro)
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=every_s)
                if done:
                    return task.result()
                activity.heartbeat(details())
        finally:
            if not task.done():
                task.cancel()

    @staticmethod
    async def _on_task(out_type: type[T], fn: Callable[[], Awaitable[T]]) -> T:
        """Run a step on an existing task: -32602 and unreachable sessions are answers, not failures."""
        try:
            return await fn()
        except TaskNotFound:
            return out_type(not_found=True)  # type: ignore[call-arg]
        except TaskUnreachable as exc:
            return out_type(unreachable=exc.message)  # type: ignore[call-arg]
        except McpWireError as exc:
            raise to_application_error(exc) from exc

    @staticmethod
    def _counter(name: str, description: str, **attrs: str) -> None:
        try:
            activity.metric_meter().create_counter(name, description).add(1, attrs)
        except Exception:  # metrics must never fail an activity
            pass

    # --- activities ------------------------------------------------------------------------------

    @activity.defn(name=RESOLVE)
    async def resolve(self, inp: ResolveInput) -> ServerProfile:
        if isinstance(inp.server, str):
            cfg = self.servers.get(inp.server)
            if cfg is None:
                known = ", ".join(sorted(self.servers)) or "none configured"
                raise ApplicationError(f"unknown MCP server {inp.server!r} (known: {known})",
                                       type="UnknownServer", non_retryable=True)
            endpoint = cfg.endpoint()
            return ServerProfile(
                name=inp.server, endpoint=endpoint,
                identity=endpoint.identity(),
                principal=inp.principal or cfg.principal, era=inp.era or cfg.era,
                trust_annotations=cfg.trust_annotations, policy=cfg.tools.get(inp.tool, ToolPolicy()),
            )
        if not self.allow_inline_endpoints:
            raise ApplicationError("inline endpoints are disabled on this worker; name a configured server",
                                   type="InlineEndpointRefused", non_retryable=True)
        endpoint = inp.server
        # Named by its (redacted) identity, as start_mcp_task labels it: the same McpServer everywhere.
        return ServerProfile(name=endpoint.identity(), endpoint=endpoint, identity=endpoint.identity(),
                             principal=inp.principal, era=inp.era)

    @activity.defn(name=START_CALL)
    async def start_call(self, inp: StartCallInput) -> StartCallOutput:
        profile = inp.profile
        info = activity.info()
        progress = {"step": "tools/call sent", "tool": inp.tool}

        async def call(client: McpTaskClient) -> StartCallOutput:
            tools = await client.list_tools() if (client.era == "2025-11-25" or profile.trust_annotations
                                                   or profile.policy.output_schema is None) else {}
            start = await self._heartbeating(
                client.start(inp.tool, inp.arguments, ttl_ms=inp.ttl_ms, input_responses=inp.input_responses,
                             request_state=inp.request_state),
                lambda: progress, every_s=max(1.0, (info.heartbeat_timeout or timedelta(seconds=30)).total_seconds() / 3))
            tool = tools.get(inp.tool)
            payload = None
            if start.result is not None:
                schema = profile.policy.output_schema or (tool.output_schema if tool else None)
                payload = self._decode(TaskPayload(result=start.result), schema)
            if start.task is not None:
                self.pool.track(client, start.task.task_id)
            return StartCallOutput(start=start, tool=tool, payload=payload, sdk_version=installed_sdk_version(),
                                   owner_queue=self.owner_queue if profile.endpoint.command else None)

        try:
            out = await self.pool.run_new_call(profile.endpoint, principal=profile.principal, era=profile.era, fn=call)
        except McpWireError as exc:
            raise to_application_error(exc) from exc
        self._counter("mcp_tasks_tool_calls", "tools/call requests sent", tool=inp.tool)
        return out

    @activity.defn(name=AWAIT_TASK)
    async def await_task(self, inp: AwaitInput) -> AwaitOutput:
        info = activity.info()
        hb_every = max(0.5, (info.heartbeat_timeout or timedelta(seconds=30)).total_seconds() / 3)
        polls = 0
        delay: float | None = None
        transient = 0
        while True:
            try:
                client = await self.pool.for_task(inp.session, principal=inp.principal)
                state = await client.get(inp.task_id)
                transient = 0
            except TaskNotFound:
                return AwaitOutput(not_found=True, polls=polls)
            except TaskUnreachable as exc:
                return AwaitOutput(unreachable=exc.message, polls=polls)
            except (TransportError, ) as exc:
                # tasks/get is idempotent: keep trying while heartbeats keep the activity alive.
                transient += 1
                wait = exc.retry_after_s if isinstance(exc, RateLimited) and exc.retry_after_s else min(30.0, 0.5 * 2 ** min(transient, 6))
                activity.heartbeat({"taskId": inp.task_id, "transportError": exc.message, "polls": polls})
                await asyncio.sleep(wait)
                continue
            except McpWireError as exc:
                raise to_application_error(exc) from exc
            polls += 1
            self._counter("mcp_tasks_polls", "tasks/get polls")
            # The SDK throttles heartbeats itself; the details are what `mcp-tasks run` shows live.
            details = {"taskId": state.task_id, "status": state.status, "statusMessage": state.status_message,
                       "polls": polls}
            activity.heartbeat(details)
            if state.terminal:
                out = AwaitOutput(state=state, polls=polls)
                if state.era == "2026-07-28":
                    out.payload = self._decode(await client.result(state), inp.output_schema)
                else:
                    try:
                        out.payload = self._decode(await client.result(state), inp.output_schema)
                        self._counter("mcp_tasks_retrievals", "task payload retrievals", outcome="ok")
                    except McpWireError as exc:  # the workflow retries retrieval on its own
                        out.retrieval_error = f"{exc.kind}: {exc.message}"
                        self._counter("mcp_tasks_retrievals", "task payload retrievals", outcome="error")
                self.pool.track(client, state.task_id, done=True)
                return out
            if state.status == "input_required":
                fresh = {k for k in (state.input_requests or {}) if k not in set(inp.answered_keys)}
                # Legacy input arrives only on a tasks/result stream: nothing to wait for here.
                if fresh or state.era == "2025-11-25":
                    return AwaitOutput(state=state, polls=polls)
            delay = next_poll_delay(state.poll_interval_ms, floor_s=inp.poll_floor_s, ceiling_s=inp.poll_ceiling_s,
                                    previous_s=delay)
            remaining = delay
            while remaining > 0:  # a long poll interval must not outlast the heartbeat timeout
                step = min(remaining, hb_every)
                await asyncio.sleep(step)
                remaining -= step
                if remaining > 0:
                    activity.heartbeat(details)

    @activity.defn(name=RETRIEVE_RESULT)
    async def retrieve_result(self, inp: RetrieveInput) -> RetrieveOutput:
        async def retrieve() -> RetrieveOutput:
            client = await self.pool.for_task(inp.session, principal=inp.principal)
            payload = await client.result(inp.state)
            return RetrieveOutput(payload=self._decode(payload, inp.output_schema))

        try:
            out = await self._on_task(RetrieveOutput, retrieve)
        except ApplicationError:
            self._counter("mcp_tasks_retrievals", "task payload retrievals", outcome="error")
            raise
        if out.payload is not None:
            self._counter("mcp_tasks_retrievals", "task payload retrievals", outcome="ok")
        return out

    @activity.defn(name=CANCEL_TASK)
    async def cancel_task(self, inp: CancelInput) -> CancelOutput:
        async def cancel() -> CancelOutput:
            client = await self.pool.for_task(inp.session, principal=inp.principal)
            return CancelOutput(state=await client.cancel(inp.task_id))

        return await self._on_task(CancelOutput, cancel)

    @activity.defn(name=PROVIDE_INPUT)
    async def provide_input(self, inp: UpdateInput) -> None:
        try:
            client = await self.pool.for_task(inp.session, principal=inp.principal)
            await client.update(inp.task_id, inp.responses)
        except McpWireError as exc:
            raise to_application_error(exc) from exc

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
        wf = activity.client().get_workflow_handle(info.workflow_id, run_id=info.workflow_run_id)
        every = max(0.5, (info.heartbeat_timeout or timedelta(seconds=30)).total_seconds() / 3)
        beat = {"taskId": inp.state.task_id, "status": "input_required", "relay": True}

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
            key = legacy_input_key(method, params)
            await wf.signal(INPUT_REQUESTED_SIGNAL, LegacyInputRequest(key=key, rpc_id=rpc_id, method=method,
                                                                       params=params))
            answer = await answer_for(key)
            await wf.signal(INPUT_DELIVERED_SIGNAL, key)
            return answer

        async def deliver_owed(client: McpTaskClient) -> None:
            """Answers the workflow holds for requests an earlier attempt received but never answered."""
            relay = await wf.query(RELAY_STATE_QUERY)
            for key, rec in relay.items():
                if rec.get("delivered"):
                    continue
                answer = rec.get("answer") or await answer_for(key)
                await client.reply(rec["rpc_id"], answer)
                await wf.signal(INPUT_DELIVERED_SIGNAL, key)

        async def relay() -> RelayOutput:
            client = await self.pool.for_task(inp.session, principal=inp.principal)
            owed = asyncio.create_task(deliver_owed(client)) if info.attempt > 1 else None
            try:
                payload = await self._heartbeating(
                    client.result(inp.state, on_server_request=on_request, timeout_s=inp.hold_s), lambda: beat, every)
            except JsonRpcError:
                # The stream ended with an error: the task's own stored error, or "gone". Its status says which.
                payload = None
            finally:
                if owed is not None:
                    owed.cancel()
            state = await client.get(inp.state.task_id)
            if payload is None:
                if not state.terminal:
                    raise TransportError("tasks/result ended with an error while the task is still running", sent=True)
                payload = await client.result(state)
            self.pool.track(client, inp.state.task_id, done=True)
            return RelayOutput(state=state, payload=self._decode(payload, inp.output_schema))

        return await self._on_task(RelayOutput, relay)


__all__ = ["McpActivities", "to_application_error", "legacy_input_key", "RAW_CAP"]
