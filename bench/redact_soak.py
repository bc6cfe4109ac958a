"""``python -m bench.redact_soak``: the log scrubber's registry in a worker that runs for months (issue 39), in
compressed time.

A worker fetches OAuth tokens for its servers (``wire.auth``) and registers each one for scrubbing from logs
(``wire.redact``); every log record is scrubbed against the registry. Here tokens have a 2 s lifetime (a real one:
an hour, so 1 s here stands for 30 min of a worker with one server), ``--rate`` tokens are fetched per second
(standing for that many servers or tasks), and a log record (a 300-character line that quotes a token) is
scrubbed after each fetch. Reported per phase of the soak (first and last tenth): RSS and its slope, and the
scrub time per record, for the registry as it is (``after``: expired tokens leave it) and as it was before
issue 39 (``before``: every token ever fetched kept, the pool sorted on every record), one after the other in
fresh processes.

    python -m bench.redact_soak                   # 20 s per design, 200 tokens/s (4,000 tokens each)
    python -m bench.redact_soak --seconds 60 --rate 500
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any

LIFETIME_S = 2.0


def rss_mb() -> float:
    with open(f"/proc/{os.getpid()}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


class Before:
    """The registry before issue 39: a frozenset every token joins for good; scrub sorts it per record."""

    def __init__(self) -> None:
        from mcp_temporal_tasks.activities.wire.redact import secret_forms

        self.forms = secret_forms
        self.pool: frozenset[str] = frozenset()

    def register(self, values: list[str], lifetime_s: float) -> None:
        forms = self.forms(values)
        if not forms <= self.pool:
            self.pool = self.pool | forms

    def scrub(self, text: str) -> str:
        for secret in sorted(self.pool, key=len, reverse=True):
            if secret in text:
                text = text.replace(secret, "[redacted]")
        return text

    def size(self) -> int:
        return len(self.pool)


class After:
    def __init__(self) -> None:
        from mcp_temporal_tasks.activities.wire import redact

        self.redact = redact

    def register(self, values: list[str], lifetime_s: float) -> None:
        self.redact.register(values, lifetime_s=lifetime_s)

    def scrub(self, text: str) -> str:
        return self.redact.scrub(text)

    def size(self) -> int:
        return len(self.redact.registered())


def soak(design: str, seconds: float, rate: float) -> dict[str, Any]:
    registry = Before() if design == "before" else After()
    samples: list[tuple[float, float, float, int]] = []  # (t, rss MB, scrub µs per record over the second, pool)
    start = time.monotonic()
    n = 0
    window_scrub = 0.0
    window_n = 0
    next_sample = start
    while (now := time.monotonic()) - start < seconds:
        token = f"eyJhbGciOiJSUzI1NiJ9.{n:012d}.{os.urandom(24).hex()}"
        registry.register([token], LIFETIME_S)
        line = f"GET /mcp 401 Unauthorized: server echoed 'Bearer {token}' " + "x" * 180
        t0 = time.perf_counter()
        out = registry.scrub(line)
        window_scrub += time.perf_counter() - t0
        window_n += 1
        assert token not in out
        n += 1
        if now >= next_sample:
            samples.append((now - start, rss_mb(), window_scrub / max(1, window_n) * 1e6, registry.size()))
            window_scrub, window_n, next_sample = 0.0, 0, now + 1.0
        time.sleep(max(0.0, start + n / rate - time.monotonic()))
    xs, ys = [s[0] for s in samples], [s[1] for s in samples]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / max(1e-9, sum((x - mx) ** 2 for x in xs))
    tenth = max(1, len(samples) // 10)
    return {
        "design": design,
        "tokens": n,
        "seconds": round(seconds, 1),
        "rss_mb_first": round(samples[0][1], 1),
        "rss_mb_last": round(samples[-1][1], 1),
        "rss_slope_mb_per_s": round(slope, 4),
        # 1 s here is 30 min of an hourly token: MB per hour of the compressed worker's time
        "rss_slope_mb_per_compressed_hour": round(slope * 2, 4),
        "scrub_us_first_tenth": round(sum(s[2] for s in samples[:tenth]) / tenth, 1),
        "scrub_us_last_tenth": round(sum(s[2] for s in samples[-tenth:]) / tenth, 1),
        "registry_last": samples[-1][3],
        "cpu_s": round(time.process_time(), 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.redact_soak", description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--rate", type=float, default=200.0, help="tokens fetched (and records scrubbed) per second")
    parser.add_argument("--design", choices=["before", "after"], help="one design, in this process (internal)")
    args = parser.parse_args(argv)
    if args.design:
        print(json.dumps(soak(args.design, args.seconds, args.rate)))
        return 0
    rows = []
    for design in ("before", "after"):
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "bench.redact_soak",
                "--design",
                design,
                "--seconds",
                str(args.seconds),
                "--rate",
                str(args.rate),
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    keys = list(rows[0])
    print("| " + " | ".join(keys) + " |\n|" + "---|" * len(keys))
    for row in rows:
        print("| " + " | ".join(str(row[k]) for k in keys) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
