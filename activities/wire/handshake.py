"""Opening a session: which era a server is spoken in, found the way the 2026-07-28 revision says per transport.

The one place that sends ``initialize`` and ``server/discover``; the rooms (:mod:`.eras`) say what an answer means.

Why a modern request goes first, on both transports (``basic/versioning.mdx``, ``transports/streamable-http.mdx`` and
``transports/stdio.mdx`` of revision 2026-07-28, "Backward Compatibility"): a server of 2026-07-28 alone has no
``initialize`` (it refuses it, answers "Method not found", or answers it with ``2026-07-28``), so a client that opens
with ``initialize`` cannot meet it; a legacy server refuses a request before ``initialize`` without doing anything.
The probe is always ``server/discover`` (never a ``tools/call``: a call is sent once, and only after the era is known),
carrying the modern ``_meta`` envelope and, on HTTP, the ``MCP-Protocol-Version`` header.

* **HTTP**: the answer is a ``DiscoverResult`` (modern) or an error. A *recognised modern error*
  (``-32022`` unsupported version, ``-32021`` missing capability, ``-32020`` header mismatch) means a modern server:
  ``-32022`` is retried once with a version its ``data.supported`` lists that this client speaks; the other two are
  ours to fix and end the handshake. Any other refusal (a 4xx with another body or none, ``-32601``, ``-32602``, a
  session required) means a legacy server: ``initialize`` follows on the same transport (no session exists yet).
  A garbled or lost reply is no answer: it propagates, so a transport fault never downgrades the era.
* **stdio**: the same, and a probe that is not answered within :data:`STDIO_PROBE_S` also means legacy (some legacy
  servers ignore a request before ``initialize``); the child that did not answer is the one ``initialize`` goes to.

What an older server sees: one ``server/discover``, refused, then ``initialize`` and only what its version has. Its era
is a property of the server (the revision allows caching it per origin); this client probes once per session opened,
which costs one refused request and never a second call.
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
from mcp_temporal_tasks.protocol.wire_errors import (
    CapabilityUnavailable,
    HeaderMismatch,
    JsonRpcError,
    MissingCapability,
    TransportError,
    UnknownProtocolVersion,
    UnsupportedProtocolVersion,
)

#: How long a stdio server may leave the ``server/discover`` probe unanswered before it is taken for a legacy server
#: (the revision: "does not respond within a reasonable timeout"). A modern server answers it at once.
STDIO_PROBE_S = 10.0

#: The JSON-RPC errors only a server of 2026-07-28 or later sends: such a server is modern, whatever it refused.
_MODERN_ERRORS = (UnsupportedProtocolVersion, MissingCapability, HeaderMismatch)


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
    * Not pinned: ``server/discover`` first (the module's docstring says why, per transport). A modern server is
      spoken in 2026-07-28, with tasks where it advertises the tasks extension; a legacy one gets ``initialize`` and
      its answer decides (2025-11-25 with ``capabilities.tasks``: tasks; older: plain calls). An ``initialize``
      answered with ``2026-07-28`` (a modern server that refused the probe with a non-modern error) is spoken in
      2026-07-28 too, never refused.
    * A protocol version this client does not know: :class:`UnknownProtocolVersion` (nothing more is sent).

    A transport that fails raises :class:`TransportError`; the transport is closed on any failure.
    """
    pinned = room_for(era) if era is not None else None
    transport = await open_transport()

    def modern(capabilities: dict[str, Any]) -> S:
        offered = room_for(EXTENSION).offers_tasks(capabilities)
        return opened(
            transport, era=EXTENSION, protocol_version=EXTENSION, capabilities=capabilities, tasks_offered=offered
        )

    try:
        if pinned is None or pinned.opens_with == "server/discover":
            capabilities = await probe(transport, required=pinned is not None)
            if capabilities is not None:
                return modern(capabilities)
        version, capabilities = await initialize(transport)
        if version == EXTENSION:
            if pinned is not None:
                raise UnknownProtocolVersion(
                    f"era {era} pinned but the server answered initialize with {EXTENSION}", raw=capabilities
                )
            if isinstance(transport, HttpTransport):
                # Nothing of the initialize session is kept: the revision has none (an id it sent is not echoed).
                transport.session_id = None
            return modern(capabilities)
        room = room_answered(version)
        await transport.notify("notifications/initialized")
        return opened(
            transport,
            era=room.era,
            protocol_version=version,
            capabilities=capabilities,
            tasks_offered=room.offers_tasks(capabilities),
        )
    except BaseException as exc:
        await transport.aclose(terminate=True)
        if isinstance(transport, HttpTransport):
            # An answer that is no MCP at all (an HTML page, a 404 page, 501): said once, and final.
            not_mcp = not_mcp_endpoint(exc, transport.url)
            if not_mcp is not None:
                raise not_mcp from exc
        raise


async def probe(transport: Transport, *, required: bool) -> dict[str, Any] | None:
    """``server/discover``: the server's capabilities when it speaks 2026-07-28 (``-32022`` retried once), None when
    it is a legacy server (``required``: :class:`CapabilityUnavailable` instead, and the tasks extension must be
    advertised)."""
    retried = False
    while True:
        try:
            reply = await discover(transport)
        except UnsupportedProtocolVersion as exc:
            supported = _supported(exc.data)
            if EXTENSION in supported and not retried:
                retried = True  # "retry once with one of them": a second refusal of the same version is final
                continue
            if not required and any(v in INITIALIZE_VERSIONS for v in supported):
                return None  # a dual-era server that speaks our legacy versions only: initialize
            if EXTENSION in supported:
                raise UnknownProtocolVersion(
                    f"the server refused protocol version {EXTENSION} twice although it lists it; nothing else was "
                    "sent to it",
                    code=exc.code,
                    data=exc.data,
                ) from exc
            raise UnknownProtocolVersion(
                f"the server speaks protocol versions {[cap_text(v, 32) for v in supported][:8]}, none of which this "
                f"client speaks ({', '.join(KNOWN_VERSIONS)}); nothing else was sent to it",
                code=exc.code,
                data=exc.data,
            ) from exc
        except _MODERN_ERRORS:
            raise  # a modern server refusing what we sent: ours to fix, no fallback hides it
        except JsonRpcError as exc:
            # A legacy server refusing a request before initialize (any code, any 4xx body): fall back.
            if required:
                raise CapabilityUnavailable(
                    f"era {EXTENSION} pinned but server/discover failed: {exc.message}", code=exc.code, data=exc.data
                ) from exc
            return None
        except TransportError:
            if required or isinstance(transport, HttpTransport) or not _timed_out(transport):
                raise
            return None  # a stdio server silent before initialize: a legacy one
        break
    versions = reply.get("supportedVersions")
    versions = [v for v in versions if isinstance(v, str)] if isinstance(versions, list) else []
    caps = reply.get("capabilities")
    caps = caps if isinstance(caps, dict) else {}
    if not versions and not required:
        # Not a DiscoverResult (no supportedVersions): a legacy server that answers any method it does not know
        # with an empty result. Not a modern answer, so not a modern server.
        return None
    if EXTENSION not in versions:
        if not required and any(v in INITIALIZE_VERSIONS for v in versions):
            return None
        raise UnknownProtocolVersion(
            f"server/discover offers protocol versions {[cap_text(v, 32) for v in versions][:8]}, none of which this "
            f"client speaks ({', '.join(KNOWN_VERSIONS)})",
            raw=reply,
        )
    if required and not room_for(EXTENSION).offers_tasks(caps):
        raise CapabilityUnavailable(
            f"era {EXTENSION} pinned but the server does not offer the {TASKS_EXTENSION} extension", raw=reply
        )
    if isinstance(transport, HttpTransport):
        transport.protocol_version = EXTENSION
    return caps


def _supported(data: Any) -> list[str]:
    supported = data.get("supported") if isinstance(data, dict) else None
    return [v for v in supported if isinstance(v, str)] if isinstance(supported, list) else []


def _timed_out(transport: Transport) -> bool:
    """Whether a stdio probe failed by silence (the child still runs) rather than by the child ending."""
    alive = getattr(transport, "alive", False)
    return bool(alive)


async def discover(transport: Transport) -> dict[str, Any]:
    """One ``server/discover`` in the modern envelope (``_meta``; on HTTP the version and routing headers)."""
    headers = None
    if isinstance(transport, HttpTransport):
        await sdk_compat.load_sdk()
        headers = sdk_compat.extension_headers("server/discover", None)
    return await transport.request(
        "server/discover",
        with_trace_context({"_meta": sdk_compat.extension_meta()}),
        headers=headers,
        timeout_s=None if isinstance(transport, HttpTransport) else STDIO_PROBE_S,
    )


async def initialize(transport: Transport) -> tuple[str, dict[str, Any]]:
    """``initialize``: the protocol version the server answered (one of :data:`KNOWN_VERSIONS`) and its
    capabilities. ``notifications/initialized`` is the caller's to send, once it keeps a legacy session."""
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
    if not isinstance(version, str) or version not in KNOWN_VERSIONS:
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
