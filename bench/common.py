"""Shared helpers of the benchmark: child processes, the bench server's state, statistics, RSS."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


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

    def __init__(self, argv: list[str], *, ready_prefix: str, env: dict[str, str] | None = None,
                 stream: str = "stderr", timeout_s: float = 60.0, log: Path | None = None) -> None:
        self.argv = argv
        full_env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
                    **(env or {})}
        self.proc = subprocess.Popen(argv, cwd=REPO, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, start_new_session=True)
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
