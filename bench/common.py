"""Shared helpers of the benchmark: child processes, the bench server's state, statistics, RSS, CPU, metrics."""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcp_temporal_tasks.activities.wire import Endpoint
from mcp_temporal_tasks.worker.devserver import die_with_parent
from mcp_temporal_tasks.workflows.records import McpTaskRequest, Timeouts

REPO = Path(__file__).resolve().parent.parent
TOOL = "bench_task"


@dataclass
class TaskRecord:
    """One task as one design saw it. Times are ``time.time()`` of this machine."""

    key: str
    submitted: float = 0.0
    delivered: float | None = None
    task_id: str | None = None
    ok: bool = False
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class Child:
    """A child process that announces readiness with one line on stderr (or stdout)."""

    def __init__(
        self,
        argv: list[str],
        *,
        ready_prefix: str,
        env: dict[str, str] | None = None,
        stream: str = "stderr",
        timeout_s: float = 60.0,
        log: Path | None = None,
    ) -> None:
        self.argv = argv
        full_env = {
            **os.environ,
            "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
            **(env or {}),
        }
        # Its own session (a Ctrl-C reaches the bench, which stops its children in order), and dead with the bench
        # if the bench is killed: a worker or server left behind would load the next run's machine.
        self.proc = subprocess.Popen(
            argv,
            cwd=REPO,
            env=full_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
        pipe = self.proc.stderr if stream == "stderr" else self.proc.stdout
        other = self.proc.stdout if stream == "stderr" else self.proc.stderr
        assert pipe is not None and other is not None
        deadline = time.monotonic() + timeout_s
        self.ready_line = ""
        seen: list[str] = []
        while time.monotonic() < deadline:
            r, _, _ = select.select([pipe], [], [], 0.2)
            if r:
                line = pipe.readline()
                if not line:
                    break
                seen.append(line)
                if line.startswith(ready_prefix):
                    self.ready_line = line.strip()
                    break
            if self.proc.poll() is not None:
                break
        if not self.ready_line:
            self.stop()
            raise RuntimeError(f"{' '.join(argv)} did not become ready: {''.join(seen)[-2000:]}")
        # Drain both pipes from now on so the child never blocks on a full pipe.
        self._log = open(log, "a") if log else None  # noqa: SIM115
        import threading

        for p in (pipe, other):
            threading.Thread(target=self._drain, args=(p,), daemon=True).start()

    def _drain(self, pipe: Any) -> None:
        for line in pipe:
            if self._log:
                try:
                    self._log.write(line)
                    self._log.flush()
                except ValueError:
                    return

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def http_json(url: str, *, method: str = "GET", timeout: float = 30.0) -> Any:
    req = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())


def rss_mb(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of ``pid`` in MiB, from /proc."""
    rss = hwm = 0.0
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) / 1024
            elif line.startswith("VmHWM:"):
                hwm = int(line.split()[1]) / 1024
    return rss, hwm


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` (children not included)."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def percentile(values: list[float], p: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    k = (len(s) - 1) * p / 100.0
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def python() -> str:
    return sys.executable


def machine_cpu_seconds() -> float:
    """Busy CPU seconds of the whole machine (all cores) since boot, from /proc/stat."""
    with open("/proc/stat") as fh:
        parts = fh.readline().split()[1:]
    vals = [int(x) for x in parts]
    idle = vals[3] + (vals[4] if len(vals) > 4 else 0)
    return (sum(vals[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def base_url(url: str) -> str:
    return url.rsplit("/mcp", 1)[0]


class CpuMeter:
    """CPU seconds used by each process of the bench over a phase."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self.start = {k: self._cpu(p) for k, p in pids.items()}
        self.machine0 = machine_cpu_seconds()
        self.t0 = time.monotonic()

    @staticmethod
    def _cpu(pid: int) -> float:
        if pid == os.getpid():
            t = os.times()
            return t.user + t.system
        try:
            return cpu_seconds(pid)
        except OSError:
            return 0.0

    def done(self) -> dict[str, float]:
        wall = time.monotonic() - self.t0
        out = {k: round(self._cpu(p) - self.start[k], 2) for k, p in self.pids.items()}
        machine = machine_cpu_seconds() - self.machine0
        ours = sum(out.values())
        out["machine_busy"] = round(machine, 2)
        # Everything else on the machine (other processes; the bench cannot control them): a noisy-neighbour gauge.
        out["other_processes"] = round(max(0.0, machine - ours), 2)
        out["wall_s"] = round(wall, 2)
        out["capacity"] = round(wall * (os.cpu_count() or 1), 2)
        return out


class RssSampler:
    """Samples VmRSS of a pid every ``every_s`` in a thread."""

    def __init__(self, pid: int, every_s: float = 0.25) -> None:
        self.pid, self.every_s = pid, every_s
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.samples.append((time.monotonic(), rss_mb(self.pid)[0]))
            except OSError:
                return
            self._stop.wait(self.every_s)

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return max((s for _, s in self.samples), default=0.0)


#: ``Timeouts`` fields every ours request of this run sets (``--heartbeat-s``: a caller's own setting, not a patch).
OURS_TIMEOUTS: dict[str, Any] = {}


def ours_request(
    url: str, args: dict[str, Any], key: str, *, poll_floor_s: float = 0.1, timeouts: dict[str, Any] | None = None
) -> McpTaskRequest:
    """``timeouts``: fields of :class:`Timeouts` over the run's (``idle_gap_s=0``: the heartbeating wait alone)."""
    return McpTaskRequest(
        server=Endpoint(url=url),
        tool=TOOL,
        arguments=args,
        era="2026-07-28",
        idempotency_key=key,
        timeouts=Timeouts(poll_floor_s=poll_floor_s, **{**OURS_TIMEOUTS, **(timeouts or {})}),
    )


def scrape(port: int) -> str:
    """A Prometheus endpoint's text on 127.0.0.1 ("" when it does not answer: the figures are then left out)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
            return resp.read().decode()
    except OSError:
        return ""


def worker_metrics(port: int) -> dict[str, float]:
    """A few counters of the worker's SDK Prometheus endpoint (sticky cache, workflow task replays, polls)."""
    wanted = (
        "temporal_sticky_cache_total_forced_eviction",
        "temporal_sticky_cache_size",
        "temporal_workflow_task_replay_latency_count",
        "temporal_workflow_task_execution_latency_count",
        "temporal_workflow_task_schedule_to_start_latency_sum",
        "temporal_workflow_task_schedule_to_start_latency_count",
        "temporal_activity_execution_latency_count",
        "temporal_request_failure",
        "temporal_workflow_task_execution_failed",
    )
    out: dict[str, float] = {}
    for line in scrape(port).splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in wanted:
            try:
                out[name] = out.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
            except ValueError:
                pass
    return out


def sdk_requests(port: int) -> Counter[str]:
    """RPCs a worker's SDK client sent to Temporal so far, by operation: ``temporal_request`` (successes) +
    ``temporal_request_failure`` (failures, e.g. a heartbeat for a workflow just terminated) of its Prometheus
    endpoint. ``RecordActivityTaskHeartbeat`` counts the heartbeats that reached the server, after the SDK's
    throttling."""
    out: Counter[str] = Counter()
    for m in re.finditer(r"^temporal_request(?:_failure)?\{([^}]*)\} (\S+)$", scrape(port), re.M):
        op = re.search(r'operation="([^"]+)"', m.group(1))
        try:
            out[op.group(1) if op else "?"] += int(float(m.group(2)))  # counters: whole numbers
        except ValueError:
            pass
    return out


def start_py_spy(pid: int, out: Path) -> Any:
    """py-spy (``pip install py-spy``) sampling every thread of ``pid``, collapsed stacks; None if unavailable."""
    import shutil
    import subprocess

    exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(exe).exists():
        log("py-spy not installed: no profile")
        return None
    out.parent.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [exe, "record", "--pid", str(pid), "--format", "raw", "--rate", "100", "--threads", "--output", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def stop_profiler(proc: Any) -> None:
    import signal as _signal

    proc.send_signal(_signal.SIGINT)
    try:
        proc.wait(20)
    except Exception:  # noqa: BLE001
        proc.kill()
