"""Opening a session: which era a server is spoken in, asking each server only what it has.

The one place that sends ``initialize`` and ``server/discover``; the rooms (:mod:`.eras`) say what an answer means.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

from mcp_temporal_tasks.activities.wire import sdk_compat
from mcp_temporal_tasks.activities.wire.eras import room_answered, room_for
from mcp_temporal_tasks.activities.wire.http_transport import HttpTransport
from mcp_temporal_tasks.activities.wire.status import not_mcp_endpoint
from mcp_temporal_tasks.activities.wire.tracing import with_trace_context
from mcp_temporal_tasks.activities.wire.transport import Transport
from mcp_temporal_tasks.protocol.elicitation import ELICITATION_CAPABILITY
from mcp_temporal_tasks.protocol.limits import cap_text
from mcp_temporal_tasks.protocol.tasks import (
    EXTENSION,
    INITIALIZE_VERSIONS,
    KNOWN_VERSIONS,
    LEGACY,
    TASKS_EXTENSION,
    Era,
    ToolInfo,
)
from mcp_temporal_tasks.protocol.wire_errors import CapabilityUnavailable, JsonRpcError, UnknownProtocolVersion


class Opened(Protocol):
    """A session the handshake opened: it may still list its tools before the era is settled."""

    async def list_tools(self, *, refresh: bool = False) -> dict[str, ToolInfo]: ...


S = TypeVar("S", bound=Opened)


async def negotiate(
    *, era: Era | None, open_transport: Callable[[], Awaitable[Transport]], opened: Callable[..., S]
) -> S:
    """A session with the server ``open_transport`` reaches, made by ``opened(transport, era=, protocol_version=,
    capabilities=, tasks_offered=)`` once the era is settled. With ``era`` pinned, only that era is spoken.

    * ``era="2026-07-28"`` pinned: ``server/discover`` only (it must advertise ``io.modelcontextprotocol/tasks``:
      :class:`CapabilityUnavailable` otherwise).
    * ``era="2025-11-25"`` pinned: ``initialize`` only; the server may answer 2025-11-25, 2025-06-18 or 2025-03-26
      (:data:`INITIALIZE_VERSIONS`): tasks only on 2025-11-25 with ``capabilities.tasks``.
    * Not pinned: ``initialize`` first, which every server before 2026-07-28 knows, and its answer decides.
      2025-03-26 / 2025-06-18 (such a server predates 2026-07-28: it would have answered 2025-11-25 if it spoke a
      newer version), or 2025-11-25 *with* tasks: that session, and nothing else is asked. 2025-11-25 *without*
      tasks: ``tools/list`` (which a call needs anyway); only if a tool there declares ``execution.taskSupport``
      although the server declares no tasks (a dual-era server, whose tasks live in 2026-07-28) is
      ``server/discover`` asked, once; when it advertises the tasks extension the client speaks that and the
      ``initialize`` session is ended. An ``initialize`` the server refuses with a JSON-RPC error (a server of
      2026-07-28 alone): ``server/discover``, once.
    * A protocol version this client does not know: :class:`UnknownProtocolVersion` (nothing more is sent).

    A transport that fails raises :class:`TransportError`; the transport is closed on any failure.
    """
    pinned = room_for(era) if era is not None else None
    transport = await open_transport()

    def discovered(on: Transport, capabilities: dict[str, Any]) -> S:
        return opened(on, era=EXTENSION, protocol_version=EXTENSION, capabilities=capabilities, tasks_offered=True)

    try:
        if pinned is not None and pinned.opens_with == "server/discover":
            capabilities = await discover(transport, required=True)
            assert capabilities is not None  # required: raises otherwise
            return discovered(transport, capabilities)
        try:
            version, capabilities = await initialize(transport)
        except JsonRpcError:
            # Refused (not garbled, not lost): a server of 2026-07-28 alone may refuse initialize.
            if pinned is not None:
                raise
            found = await discover(transport, required=False)
            if found is None:
                raise
            return discovered(transport, found)
        room = room_answered(version)
        offered = room.offers_tasks(capabilities)
        await transport.notify("notifications/initialized")
        session = opened(
            transport, era=room.era, protocol_version=version, capabilities=capabilities, tasks_offered=offered
        )
        if pinned is None and room.dual_era and not offered:
            # Tools that say they run as tasks on a server that declares no tasks: its tasks live in the 2026-07-28
            # era (a dual-era server). tools/list is kept: start() would ask it anyway.
            tools = await session.list_tools()
            if any(t.task_support in ("optional", "required") for t in tools.values()):
                switched = await _try_extension(transport, open_transport)
                if switched is not None:
                    return discovered(*switched)
        return session
    except BaseException as exc:
        await transport.aclose(terminate=True)
        if isinstance(transport, HttpTransport):
            # An answer that is no MCP at all (an HTML page, a 404 page, 501): said once, and final.
            not_mcp = not_mcp_endpoint(exc, transport.url)
            if not_mcp is not None:
                raise not_mcp from exc
        raise


async def _try_extension(
    initialized: Transport, open_transport: Callable[[], Awaitable[Transport]]
) -> tuple[Transport, dict[str, Any]] | None:
    """After a 2025-11-25 ``initialize`` without tasks: ``server/discover`` once. On HTTP on a fresh, session-less
    transport (the extension is stateless); the ``initialize`` session is ended (``DELETE``) when the extension
    answers. On stdio on the same child. None when the server does not offer the tasks extension."""
    if not isinstance(initialized, HttpTransport):
        discovered = await discover(initialized, required=False)
        return (initialized, discovered) if discovered is not None else None
    fresh = await open_transport()
    try:
        discovered = await discover(fresh, required=False)
    except BaseException:
        await fresh.aclose()
        raise
    if discovered is None:
        await fresh.aclose()
        return None
    await initialized.aclose(terminate=True)
    return fresh, discovered


async def discover(transport: Transport, *, required: bool) -> dict[str, Any] | None:
    """Capabilities when the server speaks 2026-07-28 *with* the tasks extension, else None (``required``:
    :class:`CapabilityUnavailable`)."""
    if isinstance(transport, HttpTransport):
        await sdk_compat.load_sdk()
    try:
        reply = await transport.request(
            "server/discover",
            with_trace_context({"_meta": sdk_compat.extension_meta()}),
            headers=sdk_compat.extension_headers("server/discover", None)
            if isinstance(transport, HttpTransport)
            else None,
        )
    except JsonRpcError as exc:
        # The server answered (e.g. -32601, HTTP 4xx): it does not speak 2026-07-28. A garbled or
        # lost reply is *not* an answer: it propagates, so a transport fault never downgrades the era.
        if required:
            raise CapabilityUnavailable(
                f"era 2026-07-28 pinned but server/discover failed: {exc.message}", code=exc.code, data=exc.data
            ) from exc
        return None
    versions = reply.get("supportedVersions") or []
    caps = reply.get("capabilities") or {}
    has_ext = TASKS_EXTENSION in ((caps.get("extensions") or {}) if isinstance(caps, dict) else {})
    if EXTENSION in versions and has_ext:
        if isinstance(transport, HttpTransport):
            transport.protocol_version = EXTENSION
        return caps
    if required:
        raise CapabilityUnavailable(
            f"era 2026-07-28 pinned but the server offers versions {versions} "
            f"{'with' if has_ext else 'without'} the {TASKS_EXTENSION} extension",
            raw=reply,
        )
    return None


async def initialize(transport: Transport) -> tuple[str, dict[str, Any]]:
    """``initialize``: the protocol version the server answered (one of :data:`INITIALIZE_VERSIONS`) and its
    capabilities. ``notifications/initialized`` is the caller's to send, once it keeps the session."""
    # The handshake joins the caller's trace too: a server's spans for it belong to the task that opened it.
    reply = await transport.request(
        "initialize",
        with_trace_context(
            {
                "protocolVersion": LEGACY,
                # Form-mode elicitation (an empty object: form only), answered wherever it arrives: on a task's
                # held tasks/result (relay_input) and on a plain tools/call's own stream (start_call):
                # protocol/elicitation.py.
                "capabilities": {"elicitation": dict(ELICITATION_CAPABILITY)},
                "clientInfo": sdk_compat.CLIENT_INFO,
            }
        ),
    )
    version = reply.get("protocolVersion")
    if not isinstance(version, str) or version not in INITIALIZE_VERSIONS:
        shown = cap_text(version, 64) if isinstance(version, str) else type(version).__name__
        raise UnknownProtocolVersion(
            f"the server answered initialize with protocol version {shown!r}, which this client does not "
            f"speak (it speaks {', '.join(KNOWN_VERSIONS)}); nothing else was sent to it",
            raw=reply,
        )
    if isinstance(transport, HttpTransport):
        # Sent on every later request (MCP-Protocol-Version): the version the server chose, not ours.
        transport.protocol_version = version
    caps = reply.get("capabilities")
    return version, caps if isinstance(caps, dict) else {}
