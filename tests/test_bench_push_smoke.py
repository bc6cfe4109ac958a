"""Smoke test of the benchmark's push phase: ``python -m bench --only push`` at a tiny size runs end to end and every
figure says what it must. Like tests/test_bench_smoke.py it bounds no wall time or CPU figure, so it runs beside the
other tests."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

pytestmark = [pytest.mark.slow]


@pytest.mark.timeout(480)  # two MCP servers and seven workers start; a loaded machine takes minutes for it
def test_bench_push_tiny(tmp_path: Path) -> None:
    """``--only push`` at a tiny size (two age buckets, a 40 s window, a 2,000-notification flood): every figure of
    both servers is there and says what it must (notified vs polled, no signal from the flood), not how fast."""
    out = tmp_path / "push.json"
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "--only",
            "push",
            "--quick",
            "--push-ages",
            "60,300",
            "--push-window",
            "40",
            "--push-tiles",
            "2",
            "--push-probes",
            "1",
            "--push-flood",
            "2000",
            "--json",
            str(out),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=420,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    table = proc.stdout
    for needle in ("### Told, not polled", "**Flood**: 2000 ", "a flood of 2,000 notifications"):
        assert needle in table, f"{needle!r} missing from the table:\n{table}"
    for bucket in ("1 min", "5 min"):
        for design in ("notifying", "silent", "listing"):
            assert re.search(rf"^\| {bucket} \([^)]*\) \| {design} \| ", table, re.M), (bucket, design, table)

    p = json.loads(out.read_text())["push"]
    primes = p["primes_delivered_by"]
    assert primes["notifying"] == {"notification": 3} and primes["silent"] == {"poll": 3}, primes
    assert sum(primes["listing"].values()) == 3 and set(primes["listing"]) <= {"list", "poll"}, primes
    for design, by in (("notifying", "notification"), ("silent", "poll")):
        for bucket in ("1 min", "5 min"):
            row = p[design]["buckets"][bucket]
            d = row["delivery"]
            assert d["n"] == d["of"] == 1 and d["delivered_by"] == {by: 1}, (design, bucket, d)
            assert d["max_s"] is not None and d["max_s"] >= 0, (design, bucket, d)
            assert row["tasks"] == 2 and row["window_s"] >= 40, row
            for key in (
                "actions_per_task_hour",
                "attempts_per_task_hour",
                "heartbeats_per_task_hour",
                "polls_per_task_hour",
                "worker_cpu_pct_of_core",
            ):
                assert row[key] is not None and row[key] >= 0, (design, bucket, key, row)
            assert row["signals_in_window"] == 0, row  # held tasks never end: nothing wakes them
    # The silent server with tasks/list: its probes are woken by the list reader (or, young, seen at a poll first).
    for bucket in ("1 min", "5 min"):
        d = p["listing"]["buckets"][bucket]["delivery"]
        assert d["n"] == d["of"] == 1 and set(d["delivered_by"]) <= {"list", "poll"}, d
    assert p["listing"]["list_requests_in_window"] > 0 and p["silent"]["list_requests_in_window"] == 0
    # A task aged 1 min is polled every 3 s where the server is silent (5 % of its age): the window must see it.
    assert p["silent"]["buckets"]["1 min"]["polls_per_task_hour"] > 0
    # One wake per notified probe; where the server is silent, at most the one the worker's own read of an idle wait
    # sends (activities/push/poller.py; these young probes are mostly read by their heartbeating wait: none).
    assert p["notifying"]["per_task_history"]["signals"] == 1 and p["silent"]["per_task_history"]["signals"] <= 1
    f = p["flood"]
    assert f["sent"] == 2000 and f["error"] is None, f
    assert f["signals_sent"] == 0 and f["signals_in_histories"] == 0, f
    assert 0 < f["heard_by_worker"] <= 2000 and f["hub"].get("woken", 0) == 0, f
    assert f["visibility_lookups"] <= 20 + 5 * f["wall_s"] + 1, f  # the hub's bucket: 20 at once, 5 a second after
    assert f["worker_cpu_s"] is not None and f["worker_cpu_s"] >= 0, f
