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
   find what the test really waits for instead. No test bounds its own wall time or CPU: speed and memory figures are
   the benchmark's, printed, never asserted (the benchmark smoke test checks that every figure is there). No retries
   of failed tests (no rerun plugins).
8. Order: the tests in :data:`LONG_FIRST` (each over ~35 s on CI) are handed out first, so that no worker is still
   busy with one of them when the others have run out of tests (the tail of the parallel run). Order only: any test
   may still run in any worker.
7. Environment changes go through ``monkeypatch`` (undone after the test); processes a test starts are stopped by the
   test (by pid or process group), never by name.
"""

from __future__ import annotations

import pytest

pytest_plugins = ["tests.peers.harness", "tests.temporal_harness", "tests.strict_skips"]


_UNGROUPED = pytest.StashKey[bool]()

#: Node-id prefixes of the tests that take longest (durations of a CI run, ``--durations``), longest first.
LONG_FIRST = (
    "tests/test_bench_smoke.py::test_bench_quick",
    "tests/test_operator.py::test_worker_stops_in_time_on_every_sigterm",
    "tests/test_bench_push_smoke.py::test_bench_push_tiny",
    "tests/test_agents_google.py::test_worker_killed_mid_call_one_tools_call",
    "tests/test_agents_ai_integrations.py::test_worker_killed_mid_call_one_tools_call",
    "tests/test_operator.py::test_run_with_its_own_worker_never_meets_a_foreign_worker",
    "tests/test_operator.py::test_dev_server_links_signals_and_lock",
    "tests/test_jobs.py::test_a_60s_synchronous_tool_completes_within_its_own_bound_with_live_progress",
    "tests/test_cli_ux.py::test_no_such_task_is_exit_2",
    "tests/test_push.py::test_the_worker_holding_the_stream_killed_mid_task_loses_nothing",
    "tests/test_waiting.py::test_a_long_wait_survives_kill_minus_9_on_the_stretched_schedule",
    "tests/test_operator.py::test_second_signal_leaves_at_once_and_the_printed_command_resumes",
    "tests/test_operator.py::test_messages_about_finished_and_running_tasks",
    "tests/test_stdio_lifecycle.py::test_a_line_over_the_bound_is_skipped_and_the_next_one_read",
    "tests/test_list_reader.py::test_the_worker_holding_the_reader_killed_costs_at_most_one_safety_gap",
    "tests/test_idle_waits.py::test_an_idle_wait_survives_a_worker_killed_between_polls_and_one_killed_during_a_poll",
    "tests/test_idle_waits.py::test_the_worker_reading_an_idle_wait_killed_costs_at_most_one_net_gap",
    "tests/test_stuck_visible.py::test_run_status_and_list_say_the_workflow_task_is_failing",
)


def _long_rank(item: pytest.Item) -> int:
    nodeid = item.nodeid.split("@", 1)[0]
    return next((i for i, prefix in enumerate(LONG_FIRST) if nodeid.startswith(prefix)), len(LONG_FIRST))


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The longest tests first (rule 8). In an xdist worker under ``--dist loadgroup``, every ``xdist_group`` mark
    must have reached the scheduler (xdist tells it by a ``@group`` suffix of the node id). With pytest 9.2 the
    suffix is silently lost (pytest-dev/pytest-xdist#1386) and grouped tests run side by side: each such test fails
    instead."""
    items.sort(key=_long_rank)  # stable: every other test keeps its place (and every worker sorts alike)
    if getattr(config.option, "loadgroup", False):
        for item in items:
            if item.get_closest_marker("xdist_group") and "@" not in item.nodeid:
                item.stash[_UNGROUPED] = True


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.stash.get(_UNGROUPED, False):
        pytest.fail(
            "--dist loadgroup ignored this test's xdist_group mark: it may run beside tests it must not "
            "(the pytest / pytest-xdist pair of pyproject.toml no longer groups; see its pytest pin)",
            pytrace=False,
        )
