"""Smoke test of the benchmark: ``python -m bench --quick`` (at smaller sizes) runs end to end (about 2 minutes on 2
cores) and reports every figure for every design, with every task completed, and the four cost-of-waiting targets each
met or not met."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

#: It runs beside the other tests (in scripts/test.sh's one pytest run): it checks that every figure is there and what
#: each says, never how fast (the bench's own "Total wall time" and CPU figures are for the bench to print).
pytestmark = [pytest.mark.slow]


@pytest.mark.timeout(540)  # about 2 minutes alone; beside three other test workers on 2 cores, up to twice that
def test_bench_quick(tmp_path: Path) -> None:
    out = tmp_path / "latest.json"
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    # Smaller than --quick where a size only scales a figure (tasks, in-flight counts, windows): every phase still
    # runs and prints every figure, for about two thirds of --quick's CPU, which the other test workers share.
    smaller = [
        "--tasks",
        "6",
        "--concurrency",
        "6",
        "--light-tasks",
        "2",
        "--inflight",
        "30",
        "--inflight-aged",
        "30",
        "--inflight-aged-window",
        "5",
        "--aged-tiles",
        "8",
        "--aged-probes",
        "3",
        "--aged-window",
        "30",
        "--naive-wait-s",
        "5",
    ]
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", *smaller, "--json", str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=480,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    table = proc.stdout

    # The markdown table: every design row, the ratios, history, in-flight memory, the cost of waiting, targets.
    for needle in (
        "| design |",
        "| ours |",
        "| naive |",
        "| floor |",
        "| minimal durable",
        "throughput ours/naive",
        "latency p50 ours/floor",
        "latency p50 ours−floor ms",
        "### History events per task",
        "tasks in flight on one worker process",
        "### Earlier targets",
        "### Cost of waiting",
        "**Polls by age**",
        "**Temporal cost per task-hour of waiting**",
        "tasks in flight aged 10 min…1 h",
        "### Targets — the cost of waiting",
        "Total wall time",
    ):
        assert needle in table, f"{needle!r} missing from the table:\n{table}"

    res = json.loads(out.read_text())
    assert res["table_markdown"].strip() == table.split("\nJSON:")[0].strip()
    designs = res["designs"]
    assert set(designs) == {"ours", "naive", "floor", "minimal"}
    for name, d in designs.items():
        assert d["completed"] == d["tasks"] > 0, (name, d["errors"])
        assert d["throughput_per_s"] > 0
        for p in ("p50", "p95"):
            assert d["latency_ms"][p] is not None, (name, p)
        assert d["mcp_tasks_get_per_task"] is not None
        if name != "floor":
            assert d["temporal_rpcs_per_task"] > 0
            assert d["history"]["events"]["mean"] > 0
            assert d["history"]["activity_tasks"]["mean"] >= 1
    for light in res["light"].values():
        assert light["completed"] == light["tasks"] > 0
    assert designs["minimal"]["history"]["activity_tasks"]["mean"] == 1  # the lower bound: one activity
    assert designs["minimal"]["history"]["events"]["mean"] < designs["ours"]["history"]["events"]["mean"]
    ratios = res["ratios"]
    for key in (
        "throughput ours/naive",
        "latency p50 ours/floor",
        "latency p50 ours−floor ms",
        "latency p95 ours/floor",
        "latency p95 ours−floor ms",
    ):
        assert ratios.get(key) is not None, key

    hist = res["history"]
    assert hist["ours"]["short"]["events"] > 0 and hist["ours"]["long"]["events"] > 0
    assert hist["ours"]["long"]["tasks_get_observed"] >= hist["long_polls"] - 1
    assert hist["naive"]["long"]["events"] > hist["naive"]["short"]["events"]
    assert hist["naive"]["events_per_poll"] > 0

    mem = res["inflight"]
    assert mem["completed"] == mem["inflight"] > 0, mem.get("errors")
    for key in ("rss_idle_mb", "rss_inflight_mb", "rss_peak_mb", "rss_per_1000_inflight_mb", "temporal_rpcs_per_task"):
        assert mem[key] is not None and mem[key] > 0, key

    assert {t["target"].split(" (")[0] for t in res["earlier_targets"]} >= {
        "throughput ≥ 2× naive",
        "latency p50 ≤ floor + 150 ms",
    }

    # The figures behind the four targets were measured...
    t1 = res["aged"]["t1"]
    assert t1["polls_per_task_hour"] > 0 and t1["gaps_measured"] > 0 and t1["deliveries"], t1
    assert all(d["poll_wait_s"] is not None for d in t1["deliveries"]), t1["deliveries"]
    t3 = res["aged"]["t3"]
    assert t3["ours"]["heartbeats"] > 0 and t3["minimal"]["heartbeats"] > 0
    assert t3["ours"]["timers"] == 0  # a wait is one activity (heartbeating, or idle attempts): no timers
    assert res["naive_wait"]["activity_starts"] > 0 and res["naive_wait"]["timers"] > 0
    aged_inflight = res["inflight_aged"]
    assert aged_inflight["polled"] == aged_inflight["tasks"] > 0 and aged_inflight["scaled_to_2000"]
    # ...and each target is printed last, met or not met (which one depends on the worker, not on the bench).
    targets = res["targets"]
    assert [t["id"] for t in targets] == ["T1", "T2", "T3", "T4"]
    section = table.split("### Targets — the cost of waiting", 1)[1]
    for t in targets:
        assert isinstance(t["met"], bool), t
        row = next(line for line in section.splitlines() if line.startswith(f"| {t['id']}: "))
        assert row.endswith("| met |" if t["met"] else "| **not met** |"), row
    print(f"bench --quick: {res['wall_s']} s wall (beside the other tests)")


def test_go_symbols_of_the_pinned_temporal_binary() -> None:
    """The profile summary names Temporal's functions from the stripped binary's own Go symbol table."""
    import struct

    from bench.profile_summary import GoSymbols
    from mcp_temporal_tasks.worker.devserver import temporal_binary

    binary = temporal_binary()
    syms = GoSymbols(binary)
    assert len(syms.names) > 10_000
    with open(binary, "rb") as f:
        entry = struct.unpack_from("<Q", f.read(64), 0x18)[0]  # ELF e_entry: Go's amd64 Linux entry point
    assert syms.name(entry - syms.load_bias) == "_rt0_amd64_linux"
    assert any(n.startswith("go.temporal.io/server/service/history.") for n in syms.names)
    assert syms.name(syms.end + 1 - syms.load_bias).startswith("[outside Go text")
