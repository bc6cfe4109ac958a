"""Calling a tool: ``resolve`` the server, ``tools/call`` sent once (``start_call``), ``list_tools``.

What the server's ``tools/list`` already refuses is refused before ``tools/call`` leaves (never counted as an attempt),
and the questions asked on a call's own stream go through the input relay.

The one rule: ``tools/call`` is sent at most once per attempt, and everything that fails before its bytes leave says
so (``may_have_reached_server`` False); whether a failed call may be sent again is the workflow's decision.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Mapping
from typing import Any

import jsonschema
from temporalio import activity
from temporalio.exceptions import ApplicationError

from mcp_temporal_tasks.activities.activity_io import (
    ConsentCheckInput,
    ConsentCheckOutput,
    DecodedPayload,
    JobBinding,
    ListToolsInput,
    ResolveInput,
    ServerConfig,
    ServerProfile,
    StartCallInput,
    StartCallOutput,
    ToolPolicy,
)
from mcp_temporal_tasks.activities.failure_encoding import to_application_error
from mcp_temporal_tasks.activities.heartbeats import (
    CALL_SENT,
    CONNECTING,
    INPUT_REQUIRED,
    LISTING_TOOLS,
    READING_TOOLS,
    Heartbeat,
)
from mcp_temporal_tasks.activities.input_relay import InputRelay, refuse_unless_form
from mcp_temporal_tasks.activities.shared import Shared, count, heartbeating
from mcp_temporal_tasks.activities.wire import McpWireError, WireSession
from mcp_temporal_tasks.activities.wire.auth import authorization_code
from mcp_temporal_tasks.activities.wire.auth.token_store import StoreError, open_store
from mcp_temporal_tasks.activities.wire.jobs import JobReplyMismatch, JobTasks
from mcp_temporal_tasks.activities.wire.jsonrpc import ServerRequestHandler
from mcp_temporal_tasks.activities.wire.sdk_compat import installed_sdk_version
from mcp_temporal_tasks.activities.wire.session import ProgressHandler
from mcp_temporal_tasks.activities.wire.tracing import annotate
from mcp_temporal_tasks.protocol.eras import era_rules
from mcp_temporal_tasks.protocol.limits import cap_text, safe_raw, short_id
from mcp_temporal_tasks.protocol.tasks import Endpoint, StartResult, TaskPayload, ToolInfo

#: The largest ``tools/list`` answer ``list_tools`` carries (every page, in wire form).
MAX_TOOLS_LIST_BYTES = 1024 * 1024


class Calling:
    """``resolve``, ``start_call`` and ``list_tools``: the server registry and what this worker allows a request to
    name instead, over the shared session pool."""

    def __init__(
        self,
        shared: Shared,
        *,
        servers: Mapping[str, ServerConfig] | None = None,
        allow_inline_endpoints: bool = False,
        allow_inline_commands: bool = False,
        allow_inline_credentials: bool = False,
        inline_allowlist: Iterable[Endpoint] = (),
        owner_queue: str | None = None,
        identity: str,
    ) -> None:
        self.shared = shared
        self.servers = dict(servers or {})
        #: What a request may name instead of a configured server (``[worker]`` keys of the same names).
        self.allow_inline_endpoints = allow_inline_endpoints
        self.allow_inline_commands = allow_inline_commands
        self.allow_inline_credentials = allow_inline_credentials
        #: Inline endpoints allowed as they are, whatever the rules say (the CLI's: the one its user typed).
        self.inline_allowlist = [e.model_dump(mode="json") for e in inline_allowlist]
        #: Task queue served by this process only; stdio tasks are pinned to it.
        self.owner_queue = owner_queue
        #: How this worker names itself to Temporal (``runner.run_workers`` sets it; a refusal names it).
        self.identity = identity

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

    async def resolve(self, inp: ResolveInput) -> ServerProfile:
        """A request's server, from configuration only (a local activity: no network).

        An unknown server name → ``ApplicationError(type="UnknownServer")``. An inline endpoint this worker's
        configuration does not allow (command, credential references or URL, each by its own ``[worker]`` key) →
        ``ApplicationError(type="InlineEndpointRefused")``; a principal the server's ``subjects`` do not include →
        ``ApplicationError(type="SubjectRefused")``; nothing runs. All are non-retryable.
        """
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
            refused = cfg.subject_refusal(inp.principal or cfg.principal)
            if refused is not None:
                raise ApplicationError(
                    f"server {inp.server!r}: {refused}; nothing was sent",
                    type="SubjectRefused",
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

    @staticmethod
    async def _check_before_sending(
        client: WireSession, tools: dict[str, ToolInfo], name: str, arguments: dict[str, Any]
    ) -> None:
        """Refuse, before ``tools/call`` leaves, a call the server's ``tools/list`` already answers: a tool it does not
        list (read again once: the list may have changed), one whose ``x-mcp-header`` declaration is invalid (SEP-2243)
        or arguments that do not match its ``inputSchema``. All are ``rejected`` with nothing sent
        (``may_have_reached_server`` False), so the same request may run again."""
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
        problem = client.header_problem(name)
        if problem is not None:
            # SEP-2243: a tool whose x-mcp-header declaration is invalid is excluded; the server's other tools stay.
            message = f"tools/call was never sent: {name!r} declares an invalid x-mcp-header ({cap_text(problem, 300)})"
            raise ApplicationError(
                message,
                {"may_have_reached_server": False, "message": message, "code": -32602},
                type="InvalidToolHeaders",
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

    def _questions(self, inp: StartCallInput, beat: Heartbeat, workflow_id: str) -> ServerRequestHandler:
        """What answers a server's request on the stream of this ``tools/call``: ``ping``; an ``elicitation/create``
        (form mode, the one declared) put to the workflow as a task's input is (the relay's signal; the answer read
        back by query), or ``decline``/``cancel`` (``inp.input_timeout_action``) when none comes within
        ``inp.input_wait_s`` (+10 s: the workflow's own timer decides first); a workflow from before
        (``input_wait_s`` None) gets ``decline`` at once. A request that cannot be put to a person (URL mode, a
        malformed ``requestedSchema``) is answered ``-32602`` naming why; anything else ``-32601``."""

        async def on_request(method: str, params: dict[str, Any], rpc_id: Any) -> dict[str, Any]:
            if method == "ping":
                return {}
            refuse_unless_form(method, params)
            if inp.input_wait_s is None:
                return {"action": "decline"}
            try:
                relay = InputRelay.of(workflow_id)
            except RuntimeError:  # outside a worker: nobody to ask
                return {"action": inp.input_timeout_action}
            key = await relay.ask(method, params, rpc_id)
            beat.step = INPUT_REQUIRED
            self.shared.live(beat, workflow_id)
            answer: dict[str, Any] = {"action": inp.input_timeout_action}
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(inp.input_wait_s + 10.0):
                    answer = await relay.answer(key)
            await relay.delivered(key)
            beat.step = CALL_SENT
            self.shared.live(beat, workflow_id)
            return answer

        return on_request

    async def start_call(self, inp: StartCallInput) -> StartCallOutput:
        """Send ``tools/call`` once. It never retries itself, and its retry policy is one attempt: whether a failed send
        may be repeated is the workflow's decision (``decisions.after_submit_failure``).

        Everything before its bytes leave (connect, discovery, ``initialize``, ``tools/list``, and a call
        ``tools/list`` already refuses: an unlisted tool, arguments against its ``inputSchema``) fails as "tools/call
        was never sent" (``may_have_reached_server`` False), however the failing request itself ended. Wire failures
        surface as ``ApplicationError(type=<error kind>, details=[info])`` whose info says ``may_have_reached_server``.
        A lost reply on a 2025-11-25 session is reconciled with ``tasks/list`` where that is sound
        (:meth:`WireSession.reconcile_lost_call`); otherwise it may have reached the server. A lost stream on a
        2026-07-28 ``tools/call`` is not re-issued although the revision says a client re-issues a lost request: the
        tool may have run, and a call is sent once; it stays ``unknown_outcome`` unless the replay policy allows a
        replay (docs/how-it-works.md, "A lost stream on a 2026-07-28 tools/call"). An MRTR continuation
        (``input_responses``, ``request_state``) is the same call going on, sent once per answer, under the same rule.
        Heartbeats run for the whole activity, so only a dead worker times it out (a heartbeat timeout: the call may
        have reached the server); the first one goes when ``tools/call`` is sent (step ``tools/call sent``:
        `mcp-tasks run` shows a long synchronous call as CALLING), later ones carry the call's progress."""
        profile = inp.profile
        annotate(server=profile.name, tool=inp.tool)
        beat = Heartbeat(step=CONNECTING, tool=inp.tool)
        sent = False
        workflow_id = activity.info().workflow_id or ""

        def progress(done: float, total: float | None, message: str | None) -> None:
            # A synchronous tool's progress is its live status: the activity's next heartbeat carries it, and
            # heartbeat details are what `mcp-tasks status` shows while the call runs (no history event).
            beat.progress = f"{done:g}/{total:g}" if total else f"{done:g}"
            beat.status_message = message or beat.progress
            # Not a heartbeat here: a pooled session's notifications may arrive in another activity's context.
            self.shared.live(beat, workflow_id)

        on_request = self._questions(inp, beat, workflow_id)

        async def call(client: WireSession) -> StartCallOutput:
            nonlocal sent
            beat.step = READING_TOOLS
            listed = (
                era_rules(client.era).client_asks_for_task
                or era_rules(client.era).param_headers
                or profile.trust_annotations
                or profile.policy.output_schema is None
            )
            tools = await client.list_tools() if listed else {}
            if listed:
                await self._check_before_sending(
                    client, tools, profile.job.submit if profile.job else inp.tool, inp.arguments
                )
                tools = await client.list_tools()
            beat.step = CALL_SENT
            sent = True
            self.shared.live(beat, workflow_id)
            if profile.job is not None:
                # From here on a job's heartbeats and live view name its submit tool, what is called (the view above
                # still named the request's tool).
                beat.tool = profile.job.submit
            # The first heartbeat of the attempt: the SDK sends it at once (later ones are throttled).
            activity.heartbeat(beat.details())
            if profile.job is not None:
                submitted = await self._submit_job(client, profile.job, inp, progress)
                if isinstance(submitted, StartCallOutput):
                    return submitted
                start, reconciled = submitted, None
            else:
                start, reconciled = await self._call_tool(client, inp, progress, on_request)
            return self._answered(client, inp, start, tools, reconciled)

        # A consent this call asks for is kept for this task, as long as it waits (consent-wait).
        waiter = (
            authorization_code.consent_waiter.set((workflow_id, inp.consent_wait_s)) if inp.consent_wait_s else None
        )
        try:
            out = await heartbeating(
                self.shared.pool.run_new_call(profile.endpoint, principal=profile.principal, era=profile.era, fn=call),
                beat,
                at_once=False,
            )
        except McpWireError as exc:
            raise to_application_error(exc, sent=None if sent else False)
        finally:
            if waiter is not None:
                authorization_code.consent_waiter.reset(waiter)
        count("mcp_tasks_tool_calls", "tools/call requests sent", tool=inp.tool)
        return out

    async def consent_check(self, inp: ConsentCheckInput) -> ConsentCheckOutput:
        """Where a waiting task's consent stands: an answer a callback kept (handed by signal, or found with the
        consent when the signal was lost) is exchanged here, in this activity (the code never leaves the store
        otherwise); else whether a grant was given meanwhile. Reads the store only: no MCP server is reached."""
        try:
            store = open_store()
            ref, usable = (inp.ref, False) if inp.ref else authorization_code.consent_state(inp.state, store=store)
            if ref is None:
                return ConsentCheckOutput(ready=usable)
            await authorization_code.exchange_answer(ref, store=store, state=inp.state)
        except ValueError:
            return ConsentCheckOutput()  # an answer to another consent: this one waits on
        except McpWireError as exc:
            return ConsentCheckOutput(refused=cap_text(exc.message, 1024))
        except StoreError as exc:
            # The store cannot be read here (no key on this worker, a lock held): retried, the wait goes on.
            raise ApplicationError(f"token store: {exc}", type="TokenStoreError") from None
        return ConsentCheckOutput(ready=True)

    @staticmethod
    async def _submit_job(
        client: WireSession, job: JobBinding, inp: StartCallInput, progress: ProgressHandler
    ) -> StartResult | StartCallOutput:
        """A job's submit tool, called once; a reply that does not name the job is the call's payload (decode_failed:
        the work may have started, so never a replay)."""
        try:
            return await JobTasks(client, job).submit(inp.arguments, timeout_s=inp.call_timeout_s, on_progress=progress)
        except JobReplyMismatch as exc:
            return StartCallOutput(
                start=StartResult(era=client.era, session=client.session_ref(), result={"content": []}),
                payload=DecodedPayload(decode_error=exc.message, raw=exc.raw),
                sdk_version=installed_sdk_version(),
            )

    @staticmethod
    async def _call_tool(
        client: WireSession,
        inp: StartCallInput,
        progress: ProgressHandler,
        on_request: ServerRequestHandler,
    ) -> tuple[StartResult, str | None]:
        """``tools/call``, once: what it started, and how it was learned when its reply was lost but ``tasks/list``
        showed its one new task (:meth:`WireSession.reconcile_lost_call`); any other failure is raised."""
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
            activity.logger.warning("tools/call %s: %s: %s", inp.tool, reconciled, short_id(task.task_id))
            return StartResult(era=client.era, session=client.session_ref(), task=task, task_requested=True), reconciled
        return start, None

    def _answered(
        self,
        client: WireSession,
        inp: StartCallInput,
        start: StartResult,
        tools: dict[str, ToolInfo],
        reconciled: str | None,
    ) -> StartCallOutput:
        """The call's answer as the workflow takes it: a synchronous result decoded against its contract, a task
        tracked on its session."""
        profile = inp.profile
        tool = None if profile.job is not None else tools.get(inp.tool)  # a job's name is not a server's tool
        payload = None
        if start.result is not None:
            schema = profile.policy.output_schema or (tool.output_schema if tool else None)
            payload = self.shared.decode(TaskPayload(result=start.result), schema)
            # The workflow reads the synchronous result from ``payload`` only: carried once, not twice (a 5 MB result
            # was two 5 MB copies in one stored payload).
            start = start.model_copy(update={"result": None})
        if start.task is not None:
            self.shared.pool.track(client, start.task.task_id)
            annotate(task_id=start.task.task_id, status=start.task.status)
        return StartCallOutput(
            start=start,
            tool=tool,
            payload=payload,
            sdk_version=installed_sdk_version(),
            owner_queue=self.owner_queue if profile.endpoint.command else None,
            reconciled=reconciled,
        )

    async def list_tools(self, inp: ListToolsInput) -> dict[str, Any]:
        """``tools/list`` (every page) as a ``ListToolsResult`` in wire form, for the workflow-side client.

        The server is resolved exactly as for a task (configured name, or an inline endpoint this worker
        allows). The answer is bounded (:data:`MAX_TOOLS_LIST_BYTES`): a larger one is refused, not carried.
        """
        profile = await self.resolve(ResolveInput(server=inp.server, tool="-", principal=inp.principal, era=inp.era))
        try:
            client = await self.shared.pool.for_new_call(profile.endpoint, principal=profile.principal, era=profile.era)
            await heartbeating(client.list_tools(refresh=True), Heartbeat(step=LISTING_TOOLS))
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


__all__ = ["MAX_TOOLS_LIST_BYTES", "Calling"]
