"""One MCP session with one server: ``WireSession``, the interface every caller of the wire uses.

Era-neutral: what differs between eras is asked of the session's room (:mod:`.eras`), chosen once when the session is
opened (:mod:`.handshake`) or attached.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from mcp_temporal_tasks.activities.wire import eras, handshake, redact, sdk_compat
from mcp_temporal_tasks.activities.wire.auth import bearer_auth
from mcp_temporal_tasks.activities.wire.backpressure import key_of
from mcp_temporal_tasks.activities.wire.http_transport import HttpTransport
from mcp_temporal_tasks.activities.wire.jsonrpc import NotificationHandler, ServerRequestHandler
from mcp_temporal_tasks.activities.wire.replies import is_call_tool_result, parse_task
from mcp_temporal_tasks.activities.wire.stdio_transport import StdioTransport
from mcp_temporal_tasks.activities.wire.tracing import with_trace_context
from mcp_temporal_tasks.activities.wire.transport import Transport
from mcp_temporal_tasks.protocol.bounds import finite_number
from mcp_temporal_tasks.protocol.eras import era_rules
from mcp_temporal_tasks.protocol.limits import cap_text
from mcp_temporal_tasks.protocol.tasks import Endpoint, Era, SessionRef, StartResult, TaskPayload, TaskState, ToolInfo
from mcp_temporal_tasks.protocol.wire_errors import (
    CapabilityUnavailable,
    McpWireError,
    ProtocolViolation,
    TaskNotFound,
    TaskUnreachable,
    is_transient_read_error,
)

log = logging.getLogger(__name__)

__all__ = ["ProgressHandler", "WireSession", "parse_task", "resolve_refs"]


def resolve_refs(refs: dict[str, str], *, what: str) -> dict[str, str]:
    """Read referenced values from this process's environment. Missing ones are a clear error.

    Every value read is a secret from then on: it is registered for scrubbing from logs (:mod:`.redact`).
    """
    out: dict[str, str] = {}
    for name, var in refs.items():
        value = os.environ.get(var)
        if value is None:
            raise CapabilityUnavailable(f"{what} {name!r} refers to environment variable {var!r}, which is not set")
        out[name] = value
    redact.register(out.values())
    return out


#: (progress, total, message) of a call's ``notifications/progress``.
ProgressHandler = Callable[[float, float | None, str | None], None]


def _progress_listener(params: dict[str, Any], on_progress: ProgressHandler | None) -> NotificationHandler | None:
    """Ask for progress (a fresh ``progressToken`` in ``params._meta``) and filter the notifications for it."""
    if on_progress is None:
        return None
    token = f"mcp-tasks-{uuid.uuid4().hex}"
    params["_meta"] = {**(params.get("_meta") or {}), "progressToken": token}

    def listen(message: dict[str, Any]) -> None:
        p = message.get("params")
        if (
            message.get("method") != "notifications/progress"
            or not isinstance(p, dict)
            or p.get("progressToken") != token
        ):
            return
        # NaN, ±∞, a huge int or a negative total: never passed on (a heartbeat detail, a progress bar).
        progress, total, text = finite_number(p.get("progress")), finite_number(p.get("total")), p.get("message")
        if progress is not None:
            on_progress(
                progress,
                total if total is not None and total >= 0 else None,
                cap_text(text, 512) if isinstance(text, str) else None,
            )

    return listen


class _LostCall:
    """Where one ``tools/call`` stood on its session, kept on the error if its reply is lost."""

    __slots__ = ("seq", "alone", "sent_at")

    def __init__(self, *, seq: int, alone: bool, sent_at: datetime) -> None:
        self.seq, self.alone, self.sent_at = seq, alone, sent_at


def _created_after(task: TaskState, sent_at: datetime, slack_s: float = 5.0) -> bool:
    if task.created_at is None:
        return True
    try:
        created = datetime.fromisoformat(task.created_at.replace("Z", "+00:00"))
    except ValueError:
        return True
    if created.tzinfo is None:
        created = created.replace(tzinfo=UTC)
    return created >= sent_at - timedelta(seconds=slack_s)


class WireSession:
    """A live session. Create with :meth:`connect` (handshake) or :meth:`attach` (from a :class:`SessionRef`).

    Every failure is an :class:`~protocol.wire_errors.McpWireError` saying whether it is ``retryable`` and whether
    the request ``may_have_reached_server``."""

    def __init__(
        self,
        transport: Transport,
        endpoint: Endpoint,
        *,
        era: Era,
        protocol_version: str,
        capabilities: dict[str, Any] | None = None,
        tasks_offered: bool = False,
        owner: str | None = None,
    ) -> None:
        self.transport = transport
        self.endpoint = endpoint
        self.era = era
        self.protocol_version = protocol_version
        self.capabilities = capabilities or {}
        self.tasks_offered = tasks_offered
        self.owner = owner
        self._room = eras.room_for(era, protocol_version)
        self._tools: dict[str, ToolInfo] | None = None
        #: The last tools/list as the server sent it (the workflow-side client hands it on).
        self.raw_tools: list[Any] = []
        # SEP-2243, where the era has it: each tool's x-mcp-header paths and tokens, and why a declaration is invalid.
        self._param_maps: dict[str, dict[tuple[str, ...], str]] = {}
        self._header_problems: dict[str, str] = {}
        # What reconcile_lost_call needs to know to be sound: every task a tools/call of this session made,
        # and whether calls overlapped. Sessions are never shared across processes for tools/call.
        self._known_tasks: set[str] = set()
        self._calls_in_flight = 0
        self._call_seq = 0
        #: A reply was lost and its task (if any) never identified: tasks/list can no longer tell ours apart.
        self._tainted = False

    # --- connecting ----------------------------------------------------------------------------

    @staticmethod
    async def _open_transport(
        endpoint: Endpoint, *, session_id: str | None = None, protocol_version: str | None = None
    ) -> Transport:
        if endpoint.command or endpoint.auth is not None:
            await sdk_compat.load_sdk()
        if endpoint.url:
            headers = resolve_refs(endpoint.header_refs, what="header")
            auth = bearer_auth(endpoint.url, endpoint.auth) if endpoint.auth is not None else None
            return HttpTransport(
                endpoint.url,
                headers=headers,
                session_id=session_id,
                protocol_version=protocol_version,
                auth=auth,
                hold_key=key_of(endpoint),
            )
        env = dict(sdk_compat.default_stdio_environment())
        referenced = resolve_refs(endpoint.env_refs, what="environment variable")
        env.update(referenced)
        transport = StdioTransport(list(endpoint.command or []), cwd=endpoint.cwd, env=env, secrets=referenced.values())
        await transport.start()
        return transport

    @classmethod
    async def connect(cls, endpoint: Endpoint, *, era: Era | None = None, owner: str | None = None) -> WireSession:
        """Open a session. With ``era`` pinned, speak only that era (:class:`CapabilityUnavailable` if the server
        offers no tasks there); otherwise ask each server only what it has (the order: :func:`.handshake.negotiate`).

        ``era``, ``protocol_version`` (the version the server answered; ``2026-07-28`` on the extension) and
        ``tasks_offered`` report the choice. A version this client does not speak: :class:`UnknownProtocolVersion`;
        transport failures: :class:`TransportError`.
        """
        return await handshake.negotiate(
            era=era,
            open_transport=lambda: cls._open_transport(endpoint),
            opened=functools.partial(cls, endpoint=endpoint, owner=owner),
        )

    @classmethod
    async def attach(cls, ref: SessionRef) -> WireSession:
        """Reach an existing session from any process, without a new handshake.

        Legacy HTTP re-uses ``Mcp-Session-Id`` (a new ``initialize`` would orphan the tasks of a stateful server);
        the extension is stateless. A stdio session can only be reached through the process that owns it (the
        pool): its task lives in that child, so attaching one raises TaskUnreachable.
        """
        if ref.endpoint.command is not None:
            raise TaskUnreachable(f"stdio session owned by {ref.owner!r} cannot be re-attached from another process")
        transport = await cls._open_transport(
            ref.endpoint, session_id=ref.session_id, protocol_version=ref.protocol_version
        )
        return cls(
            transport,
            ref.endpoint,
            era=ref.era,
            protocol_version=ref.protocol_version,
            tasks_offered=True,
            owner=ref.owner,
        )

    def session_ref(self) -> SessionRef:
        return SessionRef(
            endpoint=self.endpoint,
            era=self.era,
            protocol_version=self.protocol_version,
            session_id=self.transport.session_id,
            owner=self.owner,
        )

    @property
    def alive(self) -> bool:
        return not self.transport.closed and (not isinstance(self.transport, StdioTransport) or self.transport.alive)

    async def aclose(self, *, terminate: bool = False) -> None:
        await self.transport.aclose(terminate=terminate)

    # --- requests ------------------------------------------------------------------------------

    async def request(
        self,
        method: str,
        params: dict[str, Any],
        *,
        name: str | None = None,
        on_server_request: ServerRequestHandler | None = None,
        timeout_s: float | None = None,
        on_notification: NotificationHandler | None = None,
        extra_headers: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """One request on this session, in its era's envelope (:meth:`.eras.Room.envelope`), with the caller's trace
        context. ``name`` is the tool name or task id the request is about; ``extra_headers`` (HTTP only) a call's
        mirrored parameters."""
        params, headers = await self._room.envelope(self.transport, method, with_trace_context(params), name)
        if extra_headers:
            headers = {**(headers or {}), **extra_headers}
        return await self.transport.request(
            method,
            params,
            headers=headers,
            on_server_request=on_server_request,
            timeout_s=timeout_s,
            on_notification=on_notification,
        )

    async def list_tools(self, *, refresh: bool = False) -> dict[str, ToolInfo]:
        """``tools/list``, every page (at most 100), kept for the session: a read, safe to retry."""
        if self._tools is not None and not refresh:
            return self._tools
        tools: dict[str, ToolInfo] = {}
        raw_tools: list[Any] = []
        cursor: str | None = None
        for _ in range(100):  # a server that pages forever must not hang us
            reply = await self.request("tools/list", {"cursor": cursor} if cursor else {})
            for raw in reply.get("tools") or []:
                info = sdk_compat.tool_info(raw)
                tools[info.name] = info
                raw_tools.append(raw)
            cursor = reply.get("nextCursor")
            if not cursor:
                break
        self._tools = tools
        self.raw_tools = raw_tools
        if era_rules(self.era).param_headers:
            await sdk_compat.load_sdk()
            self._param_maps, self._header_problems = {}, {}
            for raw in raw_tools:
                header_map, problem = sdk_compat.param_headers_of(raw.get("inputSchema"))
                if problem is not None:
                    self._header_problems[raw["name"]] = problem
                elif header_map:
                    self._param_maps[raw["name"]] = header_map
        return tools

    def header_problem(self, tool: str) -> str | None:
        """Why ``tool`` must not be called, when its ``x-mcp-header`` declaration is invalid (SEP-2243: the client
        excludes such a tool; the others stay usable). None for a valid tool, an unlisted one, or an era without
        custom headers."""
        return self._header_problems.get(tool)

    async def _param_headers(self, tool: str, arguments: dict[str, Any]) -> dict[str, str] | None:
        """The ``Mcp-Param-*`` headers of a ``tools/call`` (HTTP, an era with SEP-2243), after the invalid-tool gate:
        :class:`CapabilityUnavailable` before anything is sent when the tool's declaration is invalid."""
        if not era_rules(self.era).param_headers:
            return None
        if self._tools is None and isinstance(self.transport, HttpTransport):
            await self.list_tools()  # the schemas say which parameters are mirrored
        problem = self.header_problem(tool)
        if problem is not None:
            raise CapabilityUnavailable(
                f"tool {tool!r} is not called: its input schema declares an invalid x-mcp-header "
                f"({cap_text(problem, 300)})"
            )
        if not isinstance(self.transport, HttpTransport):
            return None
        return sdk_compat.param_headers(self._param_maps.get(tool, {}), arguments)

    async def start(
        self,
        tool: str,
        arguments: dict[str, Any],
        *,
        ttl_ms: int | None = None,
        input_responses: dict[str, Any] | None = None,
        request_state: str | None = None,
        timeout_s: float | None = None,
        on_progress: ProgressHandler | None = None,
        on_server_request: ServerRequestHandler | None = None,
    ) -> StartResult:
        """Send ``tools/call``, as a task wherever the era's rules allow it. **Not idempotent**: never retry blindly.

        The result is a task, a plain ``CallToolResult`` (the server ran the tool at once) or, on 2026-07-28,
        ``input_requests`` (call again with ``input_responses`` and the echoed ``request_state``). A
        :class:`TransportError` with ``may_have_reached_server`` means the tool may be running: do not resend unless
        a replay policy allows it (:meth:`reconcile_lost_call` may still find its task). A JSON-RPC refusal
        (``InvalidParams``, ``MethodNotFound``, ``MissingCapability``) means no work was started.

        ``timeout_s`` bounds the wait for a reply (a synchronous tool may take that long); ``on_progress``
        receives the call's ``notifications/progress`` (asked for with a progress token); ``on_server_request``
        answers the server's requests on the call's own stream (``elicitation/create``: :mod:`.elicitation`)."""
        params: dict[str, Any] = {"name": tool, "arguments": arguments}
        listener = _progress_listener(params, on_progress)
        options = eras.CallOptions(ttl_ms=ttl_ms, input_responses=input_responses, request_state=request_state)
        task_requested = await self._room.shape_call(self, tool, params, options)
        mirrored = await self._param_headers(tool, arguments)
        self._call_seq += 1
        call = _LostCall(seq=self._call_seq, alone=self._calls_in_flight == 0, sent_at=datetime.now(UTC))
        self._calls_in_flight += 1
        try:
            async with (
                self.transport.server_requests(on_server_request)
                if on_server_request is not None and not task_requested and isinstance(self.transport, HttpTransport)
                else contextlib.nullcontext()
            ):
                reply = await self.request(
                    "tools/call",
                    params,
                    name=tool,
                    timeout_s=timeout_s,
                    on_notification=listener,
                    on_server_request=on_server_request,
                    extra_headers=mirrored,
                )
            out = self._room.started(reply, self.session_ref(), task_requested=task_requested)
        except McpWireError as exc:
            exc.lost_call = call  # type: ignore[attr-defined]
            raise
        finally:
            self._calls_in_flight -= 1
        if out.task is not None:
            self._known_tasks.add(out.task.task_id)
        return out

    async def call(
        self,
        tool: str,
        arguments: dict[str, Any],
        *,
        timeout_s: float | None = None,
        on_progress: ProgressHandler | None = None,
    ) -> dict[str, Any]:
        """A plain ``tools/call``, never as a task: the reply must be a ``CallToolResult`` (returned as is).

        For the tools of a job binding. Whether it is safe to repeat is the tool's business: the caller
        decides (a job's status and result tools are reads; its submit tool is not)."""
        params: dict[str, Any] = {"name": tool, "arguments": arguments}
        listener = _progress_listener(params, on_progress)
        mirrored = await self._param_headers(tool, arguments)
        reply = await self.request(
            "tools/call", params, name=tool, timeout_s=timeout_s, on_notification=listener, extra_headers=mirrored
        )
        if is_call_tool_result(reply):
            return reply
        raise ProtocolViolation(f"tools/call {tool}: the reply is not a CallToolResult", raw=reply)

    async def reconcile_lost_call(self, exc: McpWireError, *, settle_s: float = 1.0) -> TaskState | None:
        """The task a ``tools/call`` created although its reply was lost, where that can be known for sure.

        Sound only on 2025-11-25 with ``tasks/list`` offered, on a session that is ours alone (stateful HTTP
        with a session id, or a stdio child), when no other ``tools/call`` overlapped this one and every
        earlier call's task is known: then the one unknown task on the session is this call's. Otherwise
        (the 2026-07-28 era has no ``tasks/list``; a stateless server lists everyone's tasks) returns None
        and the caller keeps ``unknown_outcome``.
        """
        call: _LostCall | None = getattr(exc, "lost_call", None)
        listable = self._room.may_reconcile(self.capabilities)
        if (
            call is None
            or not exc.may_have_reached_server
            or not listable
            or self.transport.session_id is None
            or self._tainted
            or not call.alone
            or self._call_seq != call.seq
        ):
            self._tainted = True
            return None
        unknown: list[TaskState] = []
        # Bounded: a few seconds for a server that is briefly unreachable (the fault that cut the reply often
        # lasts a moment) or still creating the task when the reply was cut.
        for attempt in range(4):
            try:
                listed = await self.list_tasks()
            except McpWireError as err:
                if not is_transient_read_error(err) or attempt == 3:
                    break
                await asyncio.sleep(settle_s * 2)
                continue
            unknown = [t for t in listed if t.task_id not in self._known_tasks and _created_after(t, call.sent_at)]
            if unknown or attempt == 3:
                break
            await asyncio.sleep(settle_s)
        if len(unknown) == 1:
            self._known_tasks.add(unknown[0].task_id)
            return unknown[0]
        self._tainted = True
        return None

    async def get(self, task_id: str) -> TaskState:
        """``tasks/get``, normalised (a missing ``ttl`` or ``pollInterval`` is tolerated). A read: safe to retry on a
        :class:`TransportError`. :class:`TaskNotFound` when the task is unknown, expired or purged (not retryable)."""
        task = self._room.task_in(await self.request("tasks/get", {"taskId": task_id}, name=task_id))
        return parse_task(task, self.era, raw=task)

    async def result(
        self, state: TaskState, *, on_server_request: ServerRequestHandler | None = None, timeout_s: float | None = None
    ) -> TaskPayload:
        """The final payload of a task whose terminal status ``state`` shows (``ValueError`` otherwise, unless
        ``on_server_request`` answers an ``input_required`` task's questions on the held read).

        2025-11-25: ``tasks/result``, which blocks until the task ends, and also for ``failed``: the stored
        ``isError`` result or the original JSON-RPC error comes back as the payload, never raised. ``-32603`` or a
        ``{_meta}``-only reply after a cancel give ``empty``. 2026-07-28: the payload is inline in ``state``; no
        request is made. The state's own era decides, as it read the task.
        """
        if not state.terminal and not (on_server_request and state.status == "input_required"):
            raise ValueError(f"result() needs a terminal status, task {state.task_id} is {state.status!r}")
        room = eras.room_for(state.era, self.protocol_version)
        return await room.payload(self, state, on_server_request=on_server_request, timeout_s=timeout_s)

    async def cancel(self, task_id: str) -> TaskState | None:
        """``tasks/cancel``. Returns the task (2025-11-25) or None (the extension's empty ack).

        ``-32602`` on a task that is already terminal is benign: the task is fetched and returned so the caller
        keeps its true outcome. An unknown task still raises TaskNotFound. Cancellation is cooperative: the task may
        still end ``completed``; poll to learn.
        """
        try:
            reply = await self.request("tasks/cancel", {"taskId": task_id}, name=task_id)
        except TaskNotFound:
            state = await self.get(task_id)  # raises TaskNotFound when the task really is gone
            if state.terminal:
                return state
            raise
        return self._room.cancelled(reply)

    async def reply(self, request_id: Any, result: dict[str, Any]) -> None:
        """Answer a server→client request by its id (legacy input after a relay restart)."""
        await self.transport.respond(request_id, result)

    async def update(self, task_id: str, input_responses: dict[str, Any]) -> None:
        """Extension ``tasks/update``: answer input requests. Retry-safe: servers ignore a key answered twice."""
        self._room.check("tasks/update")
        await self.request("tasks/update", {"taskId": task_id, "inputResponses": input_responses}, name=task_id)

    async def listen_tasks(
        self, task_ids: list[str], on_notification: NotificationHandler, *, hold_s: float
    ) -> dict[str, Any]:
        """Extension ``subscriptions/listen`` for task events of ``task_ids`` (the ext-tasks draft, SEP-2575): the
        reply is the stream itself, so this returns only when the server ends the subscription (its empty result)
        or raises when the stream breaks or stays silent for ``hold_s``. Every frame (the acknowledgement first,
        then ``notifications/tasks``) goes to ``on_notification``; what the server agreed to send is in the
        acknowledgement (:mod:`.notifications` reads it). No runtime here emits task events yet."""
        self._room.check("subscriptions/listen")
        return await self.request(
            "subscriptions/listen",
            {"notifications": {"taskIds": list(task_ids)}},
            on_notification=on_notification,
            timeout_s=hold_s,
        )

    async def list_tasks_page(self, cursor: str | None = None) -> dict[str, Any]:
        """One page of legacy ``tasks/list``, as the server sent it (the list reader bounds and reads it)."""
        self._room.check("tasks/list")
        return await self.request("tasks/list", {"cursor": cursor} if cursor else {})

    async def list_tasks(self) -> list[TaskState]:
        """Legacy ``tasks/list``, every page (at most 100); may be absent (:class:`MethodNotFound`). The extension
        has none."""
        self._room.check("tasks/list")
        out: list[TaskState] = []
        cursor: str | None = None
        for _ in range(100):
            reply = await self.request("tasks/list", {"cursor": cursor} if cursor else {})
            out.extend(parse_task(t, self.era, raw=reply) for t in reply.get("tasks") or [])
            cursor = reply.get("nextCursor")
            if not cursor:
                break
        return out
