"""Each MCP protocol era's room, and which one speaks a session: chosen once, from its era and protocol version.

A new revision is its module here and one line in :data:`ROOMS`; nothing outside this package compares eras.
"""

from __future__ import annotations

from mcp_temporal_tasks.activities.wire.eras.base import CallOptions, Room, Speaker
from mcp_temporal_tasks.activities.wire.eras.core_tasks import CoreTasks
from mcp_temporal_tasks.activities.wire.eras.plain import PlainCalls
from mcp_temporal_tasks.activities.wire.eras.tasks_extension import TasksExtension
from mcp_temporal_tasks.protocol.tasks import Era

_CORE = CoreTasks()

#: Every room, newest first.
ROOMS: tuple[Room, ...] = (
    TasksExtension(),
    _CORE,
    PlainCalls(tasks=_CORE),
)

_BY_VERSION = {version: room for room in ROOMS for version in room.versions}


def room_for(era: Era, protocol_version: str | None = None) -> Room:
    """The room of a session of ``era`` whose server answered ``protocol_version``: the era's own (the room of the
    version the era is named after) when the version is not given, unknown, or not of that era."""
    room = _BY_VERSION.get(protocol_version) if protocol_version is not None else None
    return room if room is not None and room.era == era else _BY_VERSION[era]


def room_answered(protocol_version: str) -> Room:
    """The room of a version a server answered (one of :data:`~protocol.tasks.KNOWN_VERSIONS`)."""
    return _BY_VERSION[protocol_version]


__all__ = ["ROOMS", "CallOptions", "Room", "Speaker", "room_for", "room_answered"]
