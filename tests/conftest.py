"""The test harnesses, registered once for the whole run (``pytest --setup-plan`` shows one of each).

* ``tests/peers/harness.py``: real MCP servers as subprocesses, each with a fresh PEER_LOG: ``ts_stdio``,
  ``ts_http_stateful``, ``ts_http_stateless``, ``ts_peer`` (all three), ``fastmcp_server``, ``fastmcp_json``,
  ``fastmcp_short_ttl``, ``py1_http`` (the official Python SDK 1.30), ``py0618_http`` (mcp 1.12.4, protocol 2025-06-18),
  ``all_peers``, ``peer_logs``.
* ``tests/temporal_harness.py``: the Temporal dev server (``temporal_env``, ``client``), a task queue per module
  (``queue``) and an in-process worker (``worker``), plus helpers (``FAST``, ``wait_for_view``, ``tool_calls``,
  ``until``/``eventually``, ``settled_calls``).
* ``tests/strict_skips.py``: a skipped test fails the run, in every invocation (``pytest -m fast`` too) and under
  xdist (the controller counts its workers' skips).

Test modules never import these fixtures: importing one makes pytest build another instance per module.

Rules for a test to be safe in parallel (``scripts/test.sh`` runs ``pytest -n N --dist loadgroup``; each xdist
worker is its own process with its own session fixtures: one Temporal dev server and one of each peer per worker):

1. Ports: peers and servers bind port 0 (or ``free_port()`` just before use), never a fixed port. A test that needs
   the embedded default (localhost:7233 / UI 8233) is marked ``@pytest.mark.xdist_group("embedded-temporal")`` so
   that such tests run one at a time, and fails (never skips) when the port is taken.
2. Names: every workflow id and task queue comes from ``unique(...)``; every file lives under ``tmp_path`` (never a
   fixed name in /tmp, never in the checkout). A file the whole run shares (``tests/faults/last_matrix.json``) is
   read and written under ``flock``.
3. Shared peers: a session peer serves every test of its worker, one after another. Read its log only since your
   own ``log_mark()``; never count a whole log, never rely on what an earlier test left on it.
4. A module whose tests depend on one another (a module fixture that collects across tests, a last test that checks
   what the others left) is one group: ``pytestmark = pytest.mark.xdist_group("<module name>")``. Any other test may
   run in any worker, in any order.
5. Wait for the condition, never for a fixed time: ``until``/``eventually``, ``wait_for_view``, a server's log line;
   "no late tools/call" is ``settled_calls(..., client=..., workflows=[...])``, which waits until the workflows and
   their children closed with nothing left that could send one. Every wait is bounded.
6. Bounds are written for a loaded 2-core machine (other workers share it): never loosen one to pass under load,
   find what the test really waits for instead. A test that bounds its own wall time or CPU (the benchmark smoke
   test) is marked ``alone``: scripts/test.sh runs those after the parallel run, by themselves. No retries of
   failed tests (no rerun plugins).
7. Environment changes go through ``monkeypatch`` (undone after the test); processes a test starts are stopped by the
   test (by pid or process group), never by name.
"""

from __future__ import annotations

import pytest

pytest_plugins = ["tests.peers.harness", "tests.temporal_harness", "tests.strict_skips"]


_UNGROUPED = pytest.StashKey[bool]()


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In an xdist worker under ``--dist loadgroup``, every ``xdist_group`` mark must have reached the scheduler
    (xdist tells it by a ``@group`` suffix of the node id). With pytest 9.2 the suffix is silently lost
    (pytest-dev/pytest-xdist#1386) and grouped tests run side by side: each such test fails instead."""
    if getattr(config.option, "loadgroup", False):
        for item in items:
            if item.get_closest_marker("xdist_group") and "@" not in item.nodeid:
                item.stash[_UNGROUPED] = True


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.stash.get(_UNGROUPED, False):
        pytest.fail("--dist loadgroup ignored this test's xdist_group mark: it may run beside tests it must not "
                    "(the pytest / pytest-xdist pair of pyproject.toml no longer groups; see its pytest pin)",
                    pytrace=False)
