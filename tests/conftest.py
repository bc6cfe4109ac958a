"""The test harnesses, registered once for the whole run (``pytest --setup-plan`` shows one of each).

* ``tests/peers/harness.py``: real MCP servers as subprocesses, each with a fresh PEER_LOG: ``ts_stdio``,
  ``ts_http_stateful``, ``ts_http_stateless``, ``ts_peer`` (all three), ``fastmcp_server``, ``fastmcp_json``, ``fastmcp_short_ttl``,
  ``py1_http`` (the official Python SDK 1.30), ``all_peers``, ``peer_logs``.
* ``tests/temporal_harness.py``: the Temporal dev server (``temporal_env``, ``client``), a task queue per module
  (``queue``) and an in-process worker (``worker``), plus helpers (``FAST``, ``wait_for_view``, ``tool_calls``).

Test modules never import these fixtures: importing one makes pytest build another instance per module.
"""

pytest_plugins = ["tests.peers.harness", "tests.temporal_harness"]
