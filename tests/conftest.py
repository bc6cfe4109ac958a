"""Shared pytest fixtures, composed from helper modules (keep this file small).

Peers (real MCP servers as subprocesses, fresh PEER_LOG each): ``tests/peers/harness.py`` —
``ts_stdio``, ``ts_http_stateful``, ``ts_http_stateless``, ``ts_peer`` (all three), ``fastmcp_server``,
``fastmcp_short_ttl``, ``all_peers``, ``peer_logs``.
"""

from tests.peers.harness import *  # noqa: F401,F403  (fixtures are exported through harness.__all__)

# Temporal (dev server, client, queue, worker): registered once for the whole run.
pytest_plugins = ["tests.temporal_harness"]
