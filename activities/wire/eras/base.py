"""What every era's room answers for a session: the interface the rooms share, side by side below the session.

A room holds nothing of a session (one room serves every session of its era): it shapes the era's requests and reads
its replies; the session sends them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Protocol

from mcp_temporal_tasks.activities.wire.jsonrpc import NotificationHandler, ServerRequestHandler
from mcp_temporal_tasks.activities.wire.replies import is_call_tool_result
from mcp_temporal_tasks.activities.wire.transport import Transport
from mcp_temporal_tasks.protocol.tasks import Era, SessionRef, StartResult, TaskPayload, TaskState, ToolInfo
from mcp_temporal_tasks.protocol.wire_errors import CapabilityUnavailable, ProtocolViolation


class Speaker(Protocol):
    """What a room may ask of its session (:class:`~..session.WireSession`)."""

    era: Era
    tasks_offered: bool
    transport: Transport

    async def request(
        self,
        method: str,
        params: dict[str, Any],
        *,
        name: str | None = None,
        on_server_request: ServerRequestHandler | None = None,
        timeout_s: float | None = None,
        on_notification: NotificationHandler | None = None,
    ) -> dict[str, Any]: ...

    async def get(self, task_id: str) -> TaskState: ...

    async def list_tools(self, *, refresh: bool = False) -> dict[str, ToolInfo]: ...


@dataclass(frozen=True)
class CallOptions:
    """What a caller asks of one ``tools/call`` beyond its name and arguments; each era's room takes what it has."""

    #: A task's lifetime, where the client may ask for one (2025-11-25).
    ttl_ms: int | None = None
    #: The answers to the questions a previous ``tools/call`` came back with, and its echoed state (2026-07-28).
    input_responses: dict[str, Any] | None = None
    request_state: str | None = None


class Room(ABC):
    """One era's requests and replies. Registered in :mod:`.eras` (``ROOMS``), which picks a session's room."""

    era: ClassVar[Era]
    #: The protocol versions a server answers that this room speaks (the era's own name among them, for its room).
    versions: ClassVar[tuple[str, ...]]
    #: The request that opens a session of this era (:mod:`..handshake`).
    opens_with: ClassVar[Literal["initialize", "server/discover"]]
    #: The optional methods this era lacks, and what a caller asking for one is told.
    lacks: ClassVar[Mapping[str, str]] = {}

    @abstractmethod
    def offers_tasks(self, capabilities: dict[str, Any]) -> bool:
        """Whether a server whose handshake declared ``capabilities`` runs tools as tasks in this era."""

    async def envelope(
        self, transport: Transport, method: str, params: dict[str, Any], name: str | None
    ) -> tuple[dict[str, Any], dict[str, str] | None]:
        """Every request's params (the trace context already in) and HTTP headers, as this era sends them."""
        return params, None

    @abstractmethod
    async def shape_call(self, session: Speaker, tool: str, params: dict[str, Any], options: CallOptions) -> bool:
        """Complete ``tools/call``'s ``params`` (``name``, ``arguments`` in) for this era: whether it asks for a task.
        Raises :class:`CapabilityUnavailable` when the tool cannot run here."""

    @abstractmethod
    def started(self, reply: dict[str, Any], ref: SessionRef, *, task_requested: bool) -> StartResult:
        """What ``tools/call``'s ``reply`` made: a task, a plain result, or (where the era has them) input requests."""

    def ran(self, reply: dict[str, Any], ref: SessionRef, *, task_requested: bool) -> StartResult:
        """A ``tools/call`` reply that is no task of the era's: a plain ``CallToolResult``, or a protocol violation."""
        if is_call_tool_result(reply):
            return StartResult(era=self.era, session=ref, result=reply, task_requested=task_requested)
        raise ProtocolViolation("tools/call reply is neither a task nor a CallToolResult", raw=reply)

    @abstractmethod
    def task_in(self, reply: dict[str, Any]) -> dict[str, Any]:
        """The task object in a ``tasks/get`` reply."""

    @abstractmethod
    async def payload(
        self,
        session: Speaker,
        state: TaskState,
        *,
        on_server_request: ServerRequestHandler | None,
        timeout_s: float | None,
    ) -> TaskPayload:
        """The final payload of a task whose ``state`` is terminal (:meth:`~..session.WireSession.result`)."""

    @abstractmethod
    def cancelled(self, reply: dict[str, Any]) -> TaskState | None:
        """What a ``tasks/cancel`` reply says of the task: its state, or None for an ack that carries none."""

    def may_reconcile(self, capabilities: dict[str, Any]) -> bool:
        """Whether ``tasks/list`` can tell which task a ``tools/call`` whose reply was lost made (the session's other
        conditions: :meth:`~..session.WireSession.reconcile_lost_call`)."""
        return False

    def check(self, method: str) -> None:
        """Raise :class:`CapabilityUnavailable` when this era lacks ``method`` (before anything is sent)."""
        if method in self.lacks:
            raise CapabilityUnavailable(self.lacks[method])
