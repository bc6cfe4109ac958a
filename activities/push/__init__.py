"""The push hub, a worker-wide service: waits register (``PushHub.register``) and ask their ``Lease`` the rest.

Activities import this package's names only, never its modules (a contract).

``hub`` (the registry and the listeners) → ``lease`` (a wait's registration and its answers) | ``poller`` (idle waits'
tasks read here) | ``list_reader`` (a session's ``tasks/list``).
"""

from __future__ import annotations

from mcp_temporal_tasks.activities.push.hub import DEFAULT_NET_STRETCH, DEFAULT_STRETCH, WAKE_STATUSES, PushHub
from mcp_temporal_tasks.activities.push.lease import GRACE_S, Lease, Registration

__all__ = ["DEFAULT_NET_STRETCH", "DEFAULT_STRETCH", "GRACE_S", "WAKE_STATUSES", "Lease", "PushHub", "Registration"]
