"""``python -m bench``: our durable design vs the naive durable design vs a non-durable floor.

One command, everything local (2-core budget: < 5 min with defaults, ``--quick`` about 2 min):

* a Temporal dev server (``mcp_temporal_tasks.worker.devserver.DevServer``, headless, free port, state in a temp SQLite
  file like the embedded default; ``--db memory`` for the in-memory store), with its Prometheus endpoint on;
* the bench MCP server (``bench.server``: fastmcp 4.1.4 tasks extension, instrumented) over HTTP on
  127.0.0.1, one instance per pollInterval used;
* worker processes (``bench.worker_proc``): ``ours`` is the project's ``build_workers``/``make_activities``;
  ``naive`` is ``bench.naive``. Each in its own process so CPU and RSS are measured per design.

Phases (each can be skipped): ``floor``, ``ours``, ``naive``, ``minimal`` (same N / concurrency / duration / poll),
``light`` (ours and floor at light load), ``history`` (events per task, 5 s vs 1 h), ``inflight`` (RSS of one
worker holding many tasks: 1,000 by default to stay under 5 minutes; the target, 2,000, with ``--inflight 2000``,
about 4 minutes alone on 2 cores); the cost of waiting (``bench.waiting``): ``aged`` (behind all the
others: tasks back-dated to ages 1 min … 3 h), ``naive-wait``, and ``inflight-aged`` (2,000 tasks aged 10 min … 1 h,
``--only inflight-aged``, about 4 minutes alone).
Prints a markdown table, the four cost-of-waiting targets last, and writes ``bench/results/latest.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from mcp_temporal_tasks.worker.config import WorkerSettings
from mcp_temporal_tasks.worker.devserver import DevServer, free_port
from mcp_temporal_tasks.worker.runner import connect
from mcp_temporal_tasks.workflows.client import outcome_of, start_mcp_task

from .common import (
    OURS_TIMEOUTS,
    Child,
    CpuMeter,
    RssSampler,
    TaskRecord,
    base_url,
    http_json,
    log,
    ours_request,
    percentile,
    rss_mb,
    scrape,
    sdk_requests,
    start_py_spy,
    stop_profiler,
    worker_metrics,
)
from .floor import run_floor
from .idle import idle_targets, phase_idle_waits, render_idle
from .minimal import MinimalWorkflow
from .naive import NaivePollWorkflow, NaiveRequest
from .push import DESIGNS, phase_push, phase_push_inflight, push_targets, render_push
from .refresh import phase_refresh, render_refresh
from .waiting import (
    AgedBackground,
    HeartbeatLedger,
    phase_inflight_aged,
    phase_naive_wait,
    poll_wait_checks,
    render_targets,
    render_waiting,
    schedule_under_test,
    waiting_targets,
)

RESULTS = Path(__file__).resolve().parent / "results"
TOOL = "bench_task"
EVENTS_PER_NAIVE_POLL = 11  # documented; the history phase measures it


# --- environment -------------------------------------------------------------------------------------


class MemoryDevServer(DevServer):
    """The same dev server with no ``--db-filename``: the CLI then keeps state in memory."""

    def command(self) -> list[str]:
        cmd = super().command()
        i = cmd.index("--db-filename")
        return cmd[:i] + cmd[i + 2 :]


class Env:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.tmp = Path(tempfile.mkdtemp(prefix="mcp-bench-"))
        self.metrics_port = free_port()
        cls = MemoryDevServer if args.db == "memory" else DevServer
        self.dev = cls(
            db=self.tmp / "temporal.db",
            port=free_port(),
            ui_port=None,
            log_level="error",
            extra_args=["--metrics-port", str(self.metrics_port)],
        )
        self.servers: dict[str, tuple[Child, str]] = {}
        self.workers: list[Child] = []
        #: One long-lived worker per design (throughput and history phases); the in-flight phase starts its own.
        self.design_workers: dict[str, tuple[Child, str, int]] = {}
        self.client: Client | None = None
        self.worker_ports: dict[int, int] = {}  # worker pid -> its SDK metrics port (0: none)
        self.hb_ledger: HeartbeatLedger | None = None
        self.run_id = uuid.uuid4().hex[:8]

    async def start(self) -> None:
        t = time.monotonic()
        await self.dev.start_async()
        self.client = await connect(self.dev.address, "default")
        log(
            f"dev server on {self.dev.address} "
            f"({self.args.db}{': ' + str(self.dev.db) if self.args.db == 'sqlite' else ''}) in "
            f"{time.monotonic() - t:.1f}s"
        )

    def server(self, poll_ms: int, *, name: str = "", ttl_s: int = 0) -> tuple[Child, str]:
        """The bench MCP server advertising ``poll_ms`` (started on first use); ``name`` gives a phase a server of
        its own (its CPU and request counts then are that phase's alone), ``ttl_s`` its task TTL."""
        key = f"{poll_ms}{'-' + name if name else ''}"
        if key not in self.servers:
            argv = [sys.executable, "-m", "bench.server", "--port", "0", "--poll-interval-ms", str(poll_ms)]
            if ttl_s:
                argv += ["--task-ttl-s", str(ttl_s)]
            child = Child(argv, ready_prefix="LISTENING", env=self.child_env(), log=self.tmp / f"server-{key}.log")
            self.servers[key] = (child, child.ready_line.split()[1])
        return self.servers[key]

    def stop_server(self, poll_ms: int, *, name: str = "") -> None:
        key = f"{poll_ms}{'-' + name if name else ''}"
        if key in self.servers:
            self.servers.pop(key)[0].stop()

    def child_env(self) -> dict[str, str]:
        """Bytecode caching on (in a temp prefix, not in the repo) unless ``--no-bytecode``.

        The workflow sandbox re-imports the workflow module for every new workflow instance; with
        ``PYTHONDONTWRITEBYTECODE=1`` and no ``.pyc`` (a source checkout; this machine's environment) each
        import recompiles ``workflows/mcp_task.py`` from source. A pip-installed package ships ``.pyc``
        files, so bytecode-on is the production-like setting.
        """
        if self.args.no_bytecode:
            return {"PYTHONDONTWRITEBYTECODE": "1"}
        return {"PYTHONDONTWRITEBYTECODE": "", "PYTHONPYCACHEPREFIX": str(self.tmp / "pycache")}

    def worker(self, design: str, task_queue: str, *, cache: int = 0, metrics_port: int = 0) -> Child:
        argv = [
            sys.executable,
            "-m",
            "bench.worker_proc",
            "--design",
            design,
            "--address",
            self.dev.address,
            "--task-queue",
            task_queue,
        ]
        if metrics_port:
            argv += ["--metrics-port", str(metrics_port)]
        if design == "ours" and self.args.experiment:
            argv += ["--experiment", self.args.experiment]
        if cache:
            argv += ["--max-cached-workflows", str(cache)]
        child = Child(
            argv,
            ready_prefix="READY",
            stream="stdout",
            timeout_s=90,
            env=self.child_env(),
            log=self.tmp / f"worker-{task_queue}.log",
        )
        self.workers.append(child)
        self.worker_ports[child.pid] = metrics_port
        return child

    def sdk_heartbeats(self) -> dict[int, float | None]:
        """Heartbeat RPCs each running worker's SDK has sent so far, by pid (None: no metrics port)."""
        out: dict[int, float | None] = {}
        for w in self.workers:
            port = self.worker_ports.get(w.pid)
            out[w.pid] = sdk_requests(port)["RecordActivityTaskHeartbeat"] if port else None
        return out

    def design_worker(self, design: str) -> tuple[Child, str, int]:
        """(worker process, task queue, its SDK metrics port) of ``design``, started on first use."""
        if design not in self.design_workers:
            tq, port = f"bench-{design}-{self.run_id}", free_port()
            self.design_workers[design] = (self.worker(design, tq, metrics_port=port), tq, port)
        return self.design_workers[design]

    def stop_worker(self, child: Child) -> None:
        # A stopping worker flushes heartbeats after its last scrape: the ledger leaves the stop out of its count.
        if self.hb_ledger is not None:
            self.hb_ledger.close()
        child.stop()
        if child in self.workers:
            self.workers.remove(child)
        if self.hb_ledger is not None:
            self.hb_ledger.open()

    def metrics(self) -> Counter[str]:
        """Frontend RPCs served by the Temporal server so far, by operation."""
        out: Counter[str] = Counter()
        for m in re.finditer(r"^service_requests\{([^}]*)\} (\S+)$", scrape(self.metrics_port), re.M):
            labels = m.group(1)
            if 'service_name="frontend"' in labels and 'namespace="default"' in labels:
                op = re.search(r'operation="([^"]+)"', labels)
                out[op.group(1) if op else "?"] += float(m.group(2))
        return out

    def stop(self) -> None:
        for w in list(self.workers):
            w.stop()
        for child, _ in self.servers.values():
            child.stop()
        self.dev.stop()


# --- running one design --------------------------------------------------------------------------------


def durations(n: int, duration: float, poll_ms: int) -> list[float]:
    """Task i lasts ``duration + poll * frac(i * golden)``: the same set for every design, spread evenly over one
    poll interval so that where a task ends relative to a design's poll grid is uniform, not an artefact of
    every task starting together and lasting exactly ``duration``."""
    golden = 0.6180339887498949
    return [round(duration + (poll_ms / 1000.0) * ((i * golden) % 1.0), 4) for i in range(n)]


async def run_temporal(
    env: Env,
    design: str,
    tq: str,
    url: str,
    *,
    n: int,
    concurrency: int,
    args: dict[str, Any] | list[dict[str, Any]],
    poll_ms: int,
    prefix: str,
    poll_floor_s: float = 0.1,
) -> tuple[list[TaskRecord], float, float]:
    """Closed loop of ``n`` workflows, at most ``concurrency`` at once; delivery = ``handle.result()`` returned."""
    assert env.client is not None
    client = env.client
    sem = asyncio.Semaphore(concurrency)
    records = [TaskRecord(key=f"{prefix}-{env.run_id}-{i}") for i in range(n)]
    per_task = args if isinstance(args, list) else [args] * n

    async def one(rec: TaskRecord, args: dict[str, Any]) -> None:
        async with sem:
            rec.submitted = time.time()
            try:
                if design == "ours":
                    handle = await start_mcp_task(
                        client,
                        ours_request(url, args, rec.key, poll_floor_s=poll_floor_s),
                        workflow_id=rec.key,
                        task_queue=tq,
                    )
                    rec.extra["start_rpc_s"] = time.time() - rec.submitted
                    out = await outcome_of(handle)
                    rec.delivered = time.time()
                    rec.task_id, rec.ok = out.task_id, out.outcome.value == "completed" and out.result is not None
                    if not rec.ok:
                        rec.error = f"{out.outcome.value}: {out.reason or out.error}"
                else:
                    handle = await client.start_workflow(
                        MinimalWorkflow.run if design == "minimal" else NaivePollWorkflow.run,
                        NaiveRequest(url=url, tool=TOOL, arguments=args, default_poll_ms=poll_ms),
                        id=rec.key,
                        task_queue=tq,
                    )
                    rec.extra["start_rpc_s"] = time.time() - rec.submitted
                    out = await handle.result()
                    rec.delivered = time.time()
                    rec.task_id, rec.ok = out.task_id, out.status == "completed" and out.result is not None
                    rec.extra["polls"] = out.polls
                    if not rec.ok:
                        rec.error = f"{out.status}: {out.error}"
            except Exception as exc:  # noqa: BLE001
                rec.error = f"{type(exc).__name__}: {exc}"

    t0 = time.time()
    await asyncio.gather(*(one(r, a) for r, a in zip(records, per_task)))
    return records, t0, time.time()


async def history_stats(client: Client, workflow_ids: list[str], *, limit: int = 40) -> dict[str, Any]:
    """Events per workflow, by kind, over (a sample of) the given workflows."""
    step = max(1, len(workflow_ids) // limit)
    ids = workflow_ids[::step][:limit]  # spread over the run: early and late tasks see different queues
    sem = asyncio.Semaphore(20)

    async def fetch(wid: str) -> list[Any]:
        async with sem:
            return (await client.get_workflow_handle(wid).fetch_history()).events

    histories = await asyncio.gather(*(fetch(w) for w in ids))
    per: list[dict[str, int]] = []
    spans: dict[str, list[float]] = {}
    all_kinds: Counter[str] = Counter()
    for events in histories:
        all_kinds.update(EventType.Name(e.event_type).replace("EVENT_TYPE_", "") for e in events)
        for k, v in time_split(events).items():
            spans.setdefault(k, []).append(v)
        kinds = Counter(EventType.Name(e.event_type) for e in events)
        attempts = sum(
            e.activity_task_started_event_attributes.attempt
            for e in events
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
        )
        per.append(
            {
                "events": len(events),
                "activity_tasks": kinds["EVENT_TYPE_ACTIVITY_TASK_SCHEDULED"],
                "activity_attempts": attempts,
                "local_activities": kinds["EVENT_TYPE_MARKER_RECORDED"],
                "workflow_tasks": kinds["EVENT_TYPE_WORKFLOW_TASK_COMPLETED"],
                "timers": kinds["EVENT_TYPE_TIMER_STARTED"],
                "upserts": (
                    kinds["EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES"]
                    + kinds["EVENT_TYPE_WORKFLOW_PROPERTIES_MODIFIED"]
                ),
            }
        )
    if not per:
        return {}
    out: dict[str, Any] = {"sampled": len(per)}
    for key in per[0]:
        vals = [p[key] for p in per]
        out[key] = {"mean": round(sum(vals) / len(vals), 2), "min": min(vals), "max": max(vals)}
    out["time_split_ms_p50"] = {k: _r(percentile(v, 50)) for k, v in spans.items()}
    out["event_types_per_task"] = {k: round(v / len(per), 2) for k, v in all_kinds.most_common()}
    return out


def time_split(events: list[Any]) -> dict[str, float]:
    """Where one workflow's wall time went, from its history timestamps (ms): time queued for a worker
    (schedule-to-start) and time running, for workflow tasks and for each activity type."""
    t = [e.event_time.ToMilliseconds() for e in events]
    by_id = {e.event_id: (e, ts) for e, ts in zip(events, t)}
    out: Counter[str] = Counter()
    wft_sched: float | None = None
    wft_start: float | None = None
    act_sched: dict[int, tuple[str, float]] = {}
    act_start: dict[int, float] = {}
    for e, ts in zip(events, t):
        et = e.event_type
        if et == EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED:
            wft_sched = ts
        elif et == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED and wft_sched is not None:
            out["wft_queued"] += ts - wft_sched
            wft_start = ts
        elif (
            et
            in (
                EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED,
                EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED,
                EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT,
            )
            and wft_start is not None
        ):
            out["wft_running"] += ts - wft_start
            wft_start = None
        elif et == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            act_sched[e.event_id] = (e.activity_task_scheduled_event_attributes.activity_type.name, ts)
        elif et == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            sid = e.activity_task_started_event_attributes.scheduled_event_id
            if sid in act_sched:
                name, sts = act_sched[sid]
                out[f"{_short(name)}_queued"] += ts - sts
                act_start[sid] = ts
        elif et == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            sid = e.activity_task_completed_event_attributes.scheduled_event_id
            if sid in act_sched and sid in act_start:
                out[f"{_short(act_sched[sid][0])}_running"] += ts - act_start[sid]
    out["total"] = t[-1] - t[0] if t else 0.0
    del by_id
    return dict(out)


def _short(activity_type: str) -> str:
    return (
        activity_type.replace("mcp-tasks.", "")
        .replace("bench-naive.", "naive_")
        .replace("bench-minimal.", "minimal_")
        .replace(".v1", "")
    )


def summarize(
    design: str,
    records: list[TaskRecord],
    t0: float,
    t1: float,
    state: dict[str, Any],
    cpu: dict[str, float],
    rpcs: Counter[str] | None,
    concurrency: int,
) -> dict[str, Any]:
    terminal, observed = state.get("terminal", {}), state.get("observed", {})
    ok = [r for r in records if r.ok and r.delivered is not None]
    lat = [(r.delivered - terminal[r.task_id]) * 1000 for r in ok if r.task_id in terminal]
    wait = [
        (observed[r.task_id] - terminal[r.task_id]) * 1000
        for r in ok
        if r.task_id in terminal and r.task_id in observed
    ]
    after = [(r.delivered - observed[r.task_id]) * 1000 for r in ok if r.task_id in observed]
    start = [(terminal[r.task_id] - r.submitted) for r in ok if r.task_id in terminal]
    start_rpc = [r.extra["start_rpc_s"] for r in ok if "start_rpc_s" in r.extra]
    e2e = [(r.delivered - r.submitted) for r in ok]
    gets = [state.get("gets", {}).get(r.task_id, 0) for r in ok if r.task_id]
    n = len(records)
    last = max((r.delivered for r in ok), default=t1)
    out: dict[str, Any] = {
        "design": design,
        "tasks": n,
        "concurrency": concurrency,
        "completed": len(ok),
        "errors": sorted({r.error or "?" for r in records if not r.ok})[:5],
        "wall_s": round(last - t0, 3),
        "throughput_per_s": round(len(ok) / (last - t0), 3) if ok else 0.0,
        "latency_ms": {
            "p50": _r(percentile(lat, 50)),
            "p95": _r(percentile(lat, 95)),
            "max": _r(max(lat) if lat else None),
            "min": _r(min(lat) if lat else None),
            "n": len(lat),
        },
        "latency_split_ms": {
            "poll_wait_p50": _r(percentile(wait, 50)),
            "poll_wait_p95": _r(percentile(wait, 95)),
            "after_poll_p50": _r(percentile(after, 50)),
            "after_poll_p95": _r(percentile(after, 95)),
            "_": "poll_wait = first tasks/get reply showing terminal - terminal; after_poll = delivered - that reply",
        },
        "end_to_end_s": {"p50": _r(percentile(e2e, 50), 3), "p95": _r(percentile(e2e, 95), 3)},
        "submit_to_terminal_s": {"p50": _r(percentile(start, 50), 3), "p95": _r(percentile(start, 95), 3)},
        "start_workflow_rpc_s": {"p50": _r(percentile(start_rpc, 50), 3), "p95": _r(percentile(start_rpc, 95), 3)},
        "mcp_tasks_get_per_task": round(sum(gets) / len(gets), 2) if gets else None,
        "cpu_s": cpu,
    }
    if rpcs is not None:
        total = sum(rpcs.values())
        out["temporal_rpcs_per_task"] = round(total / max(1, n), 2)
        out["temporal_rpcs_by_operation_per_task"] = {k: round(v / max(1, n), 2) for k, v in rpcs.most_common()}
    return out


def _r(v: float | None, nd: int = 1) -> float | None:
    return None if v is None else round(v, nd)


async def phase_design(
    env: Env, design: str, *, n: int, concurrency: int, duration: float, poll_ms: int, label: str = ""
) -> dict[str, Any]:
    """One design, ``n`` tasks, closed loop at ``concurrency``. ``label`` keeps workflow ids of repeated runs apart."""
    prefix = f"{design}{label}"
    child, url = env.server(poll_ms)
    http_json(base_url(url) + "/bench/reset", method="POST")
    args = [{"seconds": s} for s in durations(n, duration, poll_ms)]
    pids = {
        "mcp_server": child.pid,
        "temporal_server": env.dev.proc.pid if env.dev.proc else 0,
        "bench_client": os.getpid(),
    }
    worker = None
    spy = None
    if design != "floor":
        worker, tq, sdk_port = env.design_worker(design)
        pids["worker"] = worker.pid
        # Warm-up: a handful of tasks so imports and connections are not billed to the measured run.
        await run_temporal(
            env,
            design,
            tq,
            url,
            n=min(4, n),
            concurrency=4,
            args={"seconds": 0.2},
            poll_ms=poll_ms,
            prefix=f"warm-{prefix}",
        )
        http_json(base_url(url) + "/bench/reset", method="POST")
    else:
        await run_floor(url, n=min(4, n), concurrency=4, args={"seconds": 0.2}, prefix="warm-floor")
        http_json(base_url(url) + "/bench/reset", method="POST")
    log(f"{design}: {n} tasks of {duration:g}s, concurrency {concurrency}, pollInterval {poll_ms} ms")
    rpc0 = env.metrics()
    sdk0 = worker_metrics(sdk_port) if worker is not None else {}
    perf = None
    if worker is not None and env.args.profile_dir:
        spy = start_py_spy(worker.pid, Path(env.args.profile_dir) / f"{design}-worker.txt")
        perf = start_perf(pids["temporal_server"], Path(env.args.profile_dir) / f"{design}-temporal.perf")
    meter = CpuMeter(pids)
    if design == "floor":
        records, t0, t1 = await run_floor(url, n=n, concurrency=concurrency, args=args, prefix=prefix)
    else:
        records, t0, t1 = await run_temporal(
            env, design, tq, url, n=n, concurrency=concurrency, args=args, poll_ms=poll_ms, prefix=prefix
        )
    cpu = meter.done()
    if worker is not None and spy is not None:
        stop_profiler(spy)
    if perf is not None:
        stop_profiler(perf)
    rpcs = None if design == "floor" else env.metrics() - rpc0
    state = http_json(base_url(url) + "/bench/state")
    out = summarize(design, records, t0, t1, state, cpu, rpcs, concurrency)
    if design == "ours" and label == "-light":  # the poll schedule's delivery bound, for short tasks
        out["poll_wait_checks"] = poll_wait_checks(records, state, poll_ms / 1000)
    if worker is not None:
        sdk = worker_metrics(sdk_port)
        out["worker_sdk_metrics"] = {k: round(v - sdk0.get(k, 0.0), 2) for k, v in sdk.items()}
        out["worker_rss_mb_after"] = round(rss_mb(worker.pid)[0], 1)
        assert env.client is not None
        out["history"] = await history_stats(env.client, [r.key for r in records if r.ok])
    log(
        f"{design}: {out['completed']}/{n} completed in {out['wall_s']}s, {out['throughput_per_s']}/s, "
        f"latency p50 {out['latency_ms']['p50']} ms, cpu {cpu}"
    )
    return out


def start_perf(pid: int, out: Path) -> Any:
    """Linux ``perf record -g`` of the Temporal server; None if perf is unavailable.

    The binary is stripped, so ``perf report`` shows bare addresses: ``python -m bench.profile_summary FILE``
    names them from Go's own symbol table and folds them into Temporal subsystems."""
    import shutil
    import subprocess

    exe = shutil.which("perf")
    if not exe or not pid:
        log("perf not installed: no Temporal server profile")
        return None
    out.parent.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [exe, "record", "-F", "199", "-g", "-p", str(pid), "-o", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


# --- history: 5 s vs 1 h -------------------------------------------------------------------------------


async def phase_history(env: Env, *, short_s: float, long_s: float, poll_ms: int, naive_points: int) -> dict[str, Any]:
    """Events per task for a short task and a long one: ours measured at both; naive measured at two points,
    fitted, and extrapolated to the long task.

    The "1 h" task is run as the *number of polls* a 1 h task costs at the real pollInterval
    (long_s / pollInterval): a server advertising pollIntervalMs=1 completes it right after its N-th
    tasks/get, so it runs in seconds. Why not the time-skipping test server: it skips Temporal timers, but
    our wait is one activity polling a real MCP server in real time, which no test server can skip; and
    naive's timers would skip while its 7,200 poll activities still each cost a real round trip. What
    grows with wall-clock time in ours is heartbeats, and heartbeats are never history events.
    """
    assert env.client is not None
    _, url = env.server(poll_ms)
    _, fast_url = env.server(1)
    long_polls = max(2, int(round(long_s * 1000 / poll_ms)))
    out: dict[str, Any] = {
        "short_s": short_s,
        "long_s": long_s,
        "poll_ms": poll_ms,
        "long_polls": long_polls,
        "method": (
            f"short: a real {short_s:g}s task at pollInterval {poll_ms} ms. long: a task "
            f"that completes on its {long_polls}th tasks/get (= {long_s:g}s / {poll_ms} ms), "
            "served with pollIntervalMs=1 so it runs in seconds. naive long: linear fit of "
            "two measured runs, extrapolated (not run)"
        ),
    }

    async def one(design: str, target: str, args: dict[str, Any], prefix: str, **kw: Any) -> tuple[TaskRecord, dict]:
        _, tq, _ = env.design_worker(design)
        recs, _, _ = await run_temporal(env, design, tq, target, n=1, concurrency=1, args=args, prefix=prefix, **kw)
        stats = await history_stats(env.client, [recs[0].key]) if recs[0].ok else {}
        recs[0].extra["gets"] = http_json(base_url(target) + "/bench/state")["gets"].get(recs[0].task_id or "", 0)
        if not recs[0].ok:
            raise RuntimeError(f"history phase: {design} {prefix} failed: {recs[0].error}")
        return recs[0], stats

    # Event counts do not depend on timing: the three long-ish runs go side by side.
    t = time.monotonic()

    async def ours_long() -> tuple[TaskRecord, dict, float]:
        rec, st = await one(
            "ours", fast_url, {"polls": long_polls - 1}, "hist-ours-long", poll_ms=1, poll_floor_s=0.001
        )
        return rec, st, time.monotonic() - t

    async def naive_pair() -> tuple[tuple[TaskRecord, dict], tuple[TaskRecord, dict]]:
        a = await one("naive", url, {"seconds": short_s}, "hist-naive-short", poll_ms=poll_ms)
        b = await one("naive", fast_url, {"polls": naive_points - 1}, "hist-naive-mid", poll_ms=1)
        return a, b

    (short, hs), (long, hl, long_wall), ((nshort, nhs), (nmid, nhm)) = await asyncio.gather(
        one("ours", url, {"seconds": short_s}, "hist-ours-short", poll_ms=poll_ms), ours_long(), naive_pair()
    )
    out["ours"] = {
        "short": {
            "events": hs["events"]["max"],
            "activity_tasks": hs["activity_tasks"]["max"],
            "tasks_get_observed": short.extra["gets"],
        },
        "long": {
            "events": hl["events"]["max"],
            "activity_tasks": hl["activity_tasks"]["max"],
            "tasks_get_observed": long.extra["gets"],
            "wall_s": round(long_wall, 1),
        },
    }
    out["ours"]["delta"] = out["ours"]["long"]["events"] - out["ours"]["short"]["events"]
    log(f"history ours: short {out['ours']['short']} long {out['ours']['long']}")

    short, hs, mid, hm = nshort, nhs, nmid, nhm
    p1, e1 = short.extra.get("polls", 0), hs["events"]["max"]
    p2, e2 = mid.extra.get("polls", 0), hm["events"]["max"]
    slope = (e2 - e1) / (p2 - p1) if p2 != p1 else float(EVENTS_PER_NAIVE_POLL)
    # Naive cannot poll faster than its timers fire: measure its real poll period and the timers' real length.
    events = (await env.client.get_workflow_handle(short.key).fetch_history()).events
    period_s, timer_s = naive_periods(events)
    naive_polls = int(round(long_s / period_s)) if period_s else long_polls
    long_events = int(round(e1 + slope * (naive_polls - p1)))
    long_events_nominal = int(round(e1 + slope * (long_polls - p1)))
    out["naive"] = {
        "short": {"events": e1, "polls": p1, "activity_tasks": hs["activity_tasks"]["max"]},
        "mid_measured": {"events": e2, "polls": p2, "activity_tasks": hm["activity_tasks"]["max"]},
        "events_per_poll": round(slope, 2),
        "measured_poll_period_s": round(period_s, 3) if period_s else None,
        "measured_timer_s": round(timer_s, 3) if timer_s else None,
        "long": {
            "events": long_events,
            "polls": naive_polls,
            "activity_tasks": 1 + naive_polls,
            "extrapolated": True,
            "exceeds_history_hard_limit_51200": long_events > 51_200,
            "continue_as_new_suggested_at_4096": long_events > 4096,
            "at_advertised_interval": {"polls": long_polls, "events": long_events_nominal},
        },
    }
    out["naive"]["delta"] = long_events - e1
    log(f"history naive: {out['naive']}")
    return out


def naive_periods(events: list[Any]) -> tuple[float | None, float | None]:
    """(seconds between consecutive polls, seconds a poll timer really lasted) from a naive workflow's history."""
    polls = [
        e.event_time.ToMilliseconds() / 1000
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name.endswith("get.v1")
    ]
    started: dict[int, float] = {}
    timers: list[float] = []
    for e in events:
        if e.event_type == EventType.EVENT_TYPE_TIMER_STARTED:
            started[e.event_id] = e.event_time.ToMilliseconds() / 1000
        elif e.event_type == EventType.EVENT_TYPE_TIMER_FIRED:
            sid = e.timer_fired_event_attributes.started_event_id
            if sid in started:
                timers.append(e.event_time.ToMilliseconds() / 1000 - started[sid])
    period = (polls[-1] - polls[0]) / (len(polls) - 1) if len(polls) > 1 else None
    return period, (sum(timers) / len(timers) if timers else None)


# --- many tasks in flight on one worker ---------------------------------------------------------------


async def phase_inflight(env: Env, *, inflight: int, poll_ms: int, cache: int, timeout_s: float) -> dict[str, Any]:
    """Hold ``inflight`` tasks on the server (a gate) until every one is being polled by our worker; sample RSS."""
    assert env.client is not None
    client = env.client
    child, url = env.server(poll_ms)
    tq = f"bench-inflight-{env.run_id}"
    metrics_port = free_port()
    w = env.worker("ours", tq, cache=cache, metrics_port=metrics_port)
    out: dict[str, Any] = {
        "inflight": inflight,
        "poll_ms": poll_ms,
        "max_cached_workflows": cache or f"default ({WorkerSettings().max_cached_workflows})",
    }
    try:
        _, warm_url = env.server(env.args.poll_ms)
        await run_temporal(
            env,
            "ours",
            tq,
            warm_url,
            n=8,
            concurrency=8,
            args={"seconds": 0.2},
            poll_ms=env.args.poll_ms,
            prefix="warm-inflight",
        )
        http_json(base_url(url) + "/bench/reset", method="POST")
        sdk0 = worker_metrics(metrics_port)
        await asyncio.sleep(0.5)
        out["rss_idle_mb"] = round(rss_mb(w.pid)[0], 1)
        gate = f"g-{env.run_id}"
        sampler = RssSampler(w.pid)
        meter = CpuMeter(
            {
                "worker": w.pid,
                "temporal_server": env.dev.proc.pid if env.dev.proc else 0,
                "mcp_server": child.pid,
                "bench_client": os.getpid(),
            }
        )
        rpc0 = env.metrics()
        sem = asyncio.Semaphore(200)
        keys = [f"inflight-{env.run_id}-{i}" for i in range(inflight)]
        t0 = time.monotonic()

        rate = env.args.inflight_rate

        async def start(i: int, key: str) -> Any:
            if rate:  # a steady arrival rate instead of one burst (the burst queues workflow tasks for tens of s)
                await asyncio.sleep(max(0.0, t0 + i / rate - time.monotonic()))
            async with sem:
                return await start_mcp_task(
                    client, ours_request(url, {"gate": gate}, key), workflow_id=key, task_queue=tq
                )

        handles = await asyncio.gather(*(start(i, k) for i, k in enumerate(keys)))
        out["start_s"] = round(time.monotonic() - t0, 2)
        log(f"inflight: {inflight} workflows started in {out['start_s']}s; waiting until all are polled")
        deadline = time.monotonic() + timeout_s
        polled = 0
        while time.monotonic() < deadline:
            st = http_json(base_url(url) + "/bench/state")
            polled = sum(1 for v in st["gets"].values() if v >= 1)
            if polled >= inflight:
                break
            await asyncio.sleep(0.5)
        out["all_polling_s"] = round(time.monotonic() - t0, 2)
        out["polling_when_measured"] = polled
        # Every await_task has polled once; RSS is then flat (the waits are parked coroutines): the highest
        # sample over a few seconds, not one reading.
        settle = [rss_mb(w.pid)[0]]
        for _ in range(10):
            await asyncio.sleep(0.5)
            settle.append(rss_mb(w.pid)[0])
        out["rss_inflight_mb"] = round(max(settle), 1)
        http_json(base_url(url) + f"/bench/open?gate={gate}", method="POST")
        t1 = time.monotonic()
        # Bounded: every result() is a long poll, and the dev server caps concurrent pollers per namespace.
        rsem = asyncio.Semaphore(200)

        async def result(h: Any) -> Any:
            async with rsem:
                return await outcome_of(h)

        results = await asyncio.gather(*(result(h) for h in handles), return_exceptions=True)
        out["drain_s"] = round(time.monotonic() - t1, 2)
        out["completed"] = sum(
            1 for r in results if not isinstance(r, BaseException) and r.outcome.value == "completed"
        )
        out["errors"] = sorted({f"{type(r).__name__}: {r}"[:200] for r in results if isinstance(r, BaseException)})[:5]
        out["rss_peak_mb"] = round(sampler.stop(), 1)
        # RSS every ~2 s from the first start (s since start, MB): where the peak falls (start, wait, drain).
        t_base = sampler.samples[0][0] if sampler.samples else 0.0
        out["rss_series"] = [(round(t - t_base, 1), round(mb, 1)) for t, mb in sampler.samples[::8]]
        out["rss_peak_at_s"] = (
            round(max(sampler.samples, key=lambda x: x[1])[0] - t_base, 1) if sampler.samples else None
        )
        out["gate_opened_at_s"] = round(t1 - t0, 1)
        out["rss_hwm_mb"] = round(rss_mb(w.pid)[1], 1)
        out["rss_per_1000_inflight_mb"] = round(out["rss_inflight_mb"] * 1000 / inflight, 1)
        out["rss_delta_per_1000_inflight_mb"] = round(
            (out["rss_inflight_mb"] - out["rss_idle_mb"]) * 1000 / inflight, 1
        )
        out["cpu_s"] = meter.done()
        rpcs = env.metrics() - rpc0
        out["temporal_rpcs_per_task"] = round(sum(rpcs.values()) / inflight, 2)
        out["temporal_rpcs_by_operation_per_task"] = {k: round(v / inflight, 2) for k, v in rpcs.most_common()}
        sdk = worker_metrics(metrics_port)
        out["worker_sdk_metrics"] = {k: round(v - sdk0.get(k, 0.0), 2) for k, v in sdk.items()}
        out["total_s"] = round(time.monotonic() - t0, 2)
    finally:
        env.stop_worker(w)
    log(f"inflight: {out}")
    return out


# --- report ---------------------------------------------------------------------------------------------


def _fmt(v: Any, nd: int = 1) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.{nd}f}"
    return str(v)


def targets(res: dict[str, Any]) -> list[dict[str, Any]]:
    d, out = res.get("designs", {}), []
    ours, naive, floor = d.get("ours"), d.get("naive"), d.get("floor")
    minimal = d.get("minimal")
    if ours and naive and naive["throughput_per_s"]:
        r = ours["throughput_per_s"] / naive["throughput_per_s"]
        ceiling = (
            f"; the cheapest durable design (minimal): {minimal['throughput_per_s'] / naive['throughput_per_s']:.2f}×"
            f", the non-durable floor: {floor['throughput_per_s'] / naive['throughput_per_s']:.2f}×"
            if minimal and floor
            else ""
        )
        out.append({"target": "throughput ≥ 2× naive", "value": f"{r:.2f}×{ceiling}", "met": r >= 2.0})
    if ours and floor and ours["latency_ms"]["p50"] is not None and floor["latency_ms"]["p50"] is not None:
        diff = ours["latency_ms"]["p50"] - floor["latency_ms"]["p50"]
        ceiling = (
            f"; minimal: +{minimal['latency_ms']['p50'] - floor['latency_ms']['p50']:.0f} ms"
            if minimal and minimal["latency_ms"]["p50"] is not None
            else ""
        )
        out.append(
            {
                "target": f"latency p50 ≤ floor + 150 ms (at concurrency {ours['concurrency']})",
                "value": f"+{diff:.0f} ms{ceiling}",
                "met": diff <= 150,
            }
        )
    light = res.get("light") or {}
    lo, lf = light.get("ours"), light.get("floor")
    if lo and lf and lo["latency_ms"]["p50"] is not None and lf["latency_ms"]["p50"] is not None:
        diff = lo["latency_ms"]["p50"] - lf["latency_ms"]["p50"]
        out.append(
            {
                "target": f"latency p50 ≤ floor + 150 ms (light load: {lo['tasks']} tasks, concurrency "
                f"{res['config']['light_concurrency']})",
                "value": f"+{diff:.0f} ms",
                "met": diff <= 150,
            }
        )
    h = res.get("history")
    if h and "ours" in h:
        delta = h["ours"]["delta"]
        out.append(
            {
                "target": f"history events {h['short_s']:g}s vs {h['long_s']:g}s within ±2",
                "value": f"{h['ours']['short']['events']} vs {h['ours']['long']['events']} (Δ {delta:+d})",
                "met": abs(delta) <= 2,
            }
        )
    m = res.get("inflight")
    if m and "rss_inflight_mb" in m:
        ok = m["rss_peak_mb"] < 500 and m["completed"] == m["inflight"]
        value = (
            f"{m['rss_inflight_mb']:.0f} MB in flight, peak {m['rss_peak_mb']:.0f} MB, "
            f"{m['completed']}/{m['inflight']} completed"
        )
        if m["inflight"] < 2000:  # the default run holds 1,000 to stay under 5 minutes
            out.append(
                {
                    "target": "2,000 in flight on one worker, RSS < 500 MB, all complete",
                    "value": f"not run: this run held {m['inflight']} ({value}); `--inflight 2000` runs the target",
                    "met": None,
                }
            )
        else:
            out.append(
                {
                    "target": f"{m['inflight']} in flight on one worker, RSS < 500 MB, all complete",
                    "value": value,
                    "met": ok,
                }
            )
    return out


def noise(res: dict[str, Any], threshold: float = 0.10) -> list[str]:
    """Phases where processes outside the bench used more than ``threshold`` of the machine's CPU."""
    phases: list[tuple[str, dict[str, Any]]] = [(k, v) for k, v in res.get("designs", {}).items()]
    phases += [(f"{k} (light)", v) for k, v in (res.get("light") or {}).items()]
    if (res.get("inflight") or {}).get("cpu_s"):
        phases.append(("inflight", res["inflight"]))
    out = []
    for name, r in phases:
        cpu = r.get("cpu_s") or {}
        if cpu.get("capacity") and cpu.get("other_processes", 0) / cpu["capacity"] > threshold:
            out.append(f"{100 * cpu['other_processes'] / cpu['capacity']:.0f}% ({name})")
    return out


def render(res: dict[str, Any]) -> str:
    cfg = res["config"]
    lines = [
        f"## MCP task delivery benchmark — {cfg['tasks']} tasks × {cfg['duration_s']:g}s, concurrency "
        f"{cfg['concurrency']}, pollInterval {cfg['poll_ms']} ms",
        "",
        f"Temporal dev server `{cfg['temporal_cli']}` ({cfg['db']}), fastmcp {cfg['fastmcp']} tasks extension on "
        f"127.0.0.1, {cfg['cpus']} CPUs, Python {cfg['python']}. Latency = caller has the outcome − server "
        "marked the task terminal (same clock).",
        "",
    ]
    if cfg.get("ours_heartbeat_s"):
        lines += [
            f"**`--heartbeat-s {cfg['ours_heartbeat_s']:g}`: ours' requests set a heartbeat timeout of "
            f"{cfg['ours_heartbeat_s']:g} s (default 30 s).**",
            "",
        ]
    if cfg.get("experiment"):
        lines += [f"**EXPERIMENT — `ours` is NOT the shipped worker here: patched with `{cfg['experiment']}`.**", ""]
    d = res.get("designs", {})
    if d:
        lines += [
            "| design | completed | wall s | tasks/s | latency p50 ms | p95 ms | = poll wait p50 | + after poll p50 | "
            "tasks/get per task | history events/task | activity tasks/task | workflow tasks/task | "
            "Temporal RPCs/task | CPU s (worker / temporal / mcp / client) |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        rows = [(n, d.get(n)) for n in ("ours", "naive", "floor")]
        rows += [("minimal durable (lower bound, unsafe: bench/minimal.py)", d.get("minimal"))]
        rows += [
            (
                f"{n} (light load: {r['tasks']} tasks of {cfg['light_duration_s']:g} s, concurrency "
                f"{r['concurrency']})",
                r,
            )
            for n, r in (res.get("light") or {}).items()
        ]
        for name, r in rows:
            if not r:
                continue
            h = r.get("history") or {}
            cpu = r["cpu_s"]
            lines.append(
                f"| {name} | {r['completed']}/{r['tasks']} | {_fmt(r['wall_s'], 2)} | {_fmt(r['throughput_per_s'], 2)} "
                f"| {_fmt(r['latency_ms']['p50'])} | {_fmt(r['latency_ms']['p95'])} | "
                f"{_fmt(r['latency_split_ms']['poll_wait_p50'])} | {_fmt(r['latency_split_ms']['after_poll_p50'])} | "
                f"{_fmt(r['mcp_tasks_get_per_task'])} | {_fmt((h.get('events') or {}).get('mean'))} | "
                f"{_fmt((h.get('activity_tasks') or {}).get('mean'))} | "
                f"{_fmt((h.get('workflow_tasks') or {}).get('mean'))} | {_fmt(r.get('temporal_rpcs_per_task'))} | "
                f"{_fmt(cpu.get('worker'))} / {_fmt(cpu.get('temporal_server'))} / {_fmt(cpu.get('mcp_server'))} / "
                f"{_fmt(cpu.get('bench_client'))} |"
            )
        lines += [
            "",
            "_latency = poll wait (server marked terminal → first tasks/get reply showing it) + after poll "
            "(→ caller has the outcome). Temporal RPCs = frontend requests counted by the dev server's "
            "metrics (incl. heartbeats, polls, result long-polls). CPU s = process CPU over the phase._",
        ]
        ratios = res.get("ratios", {})
        lines += ["", "| ratio | value |", "|---|---|"]
        for k, v in ratios.items():
            lines.append(f"| {k} | {_fmt(v, 2)} |")
    h = res.get("history")
    if h:
        lines += [
            "",
            f"### History events per task: {h['short_s']:g} s vs {h['long_s']:g} s task "
            f"(pollInterval {h['poll_ms']} ms → {h['long_polls']} polls for the long one)",
            "",
            "| design | short: events | short: activity tasks | long: events | long: activity tasks | Δ events | how |",
            "|---|---|---|---|---|---|---|",
        ]
        o = h.get("ours")
        if o:
            lines.append(
                f"| ours | {o['short']['events']} | {o['short']['activity_tasks']} | {o['long']['events']} | "
                f"{o['long']['activity_tasks']} | {o['delta']:+d} | measured; long = {o['long']['tasks_get_observed']} "
                f"tasks/get inside one activity, {o['long']['wall_s']} s wall |"
            )
        nv = h.get("naive")
        if nv:
            adv = nv["long"]["at_advertised_interval"]
            lines.append(
                f"| naive | {nv['short']['events']} | {nv['short']['activity_tasks']} | "
                f"{nv['long']['events']} | {nv['long']['activity_tasks']} | {nv['delta']:+d} | short measured "
                f"({nv['short']['polls']} polls); {nv['mid_measured']['polls']}-poll run measured "
                f"({nv['mid_measured']['events']} events) → {nv['events_per_poll']} events/poll; long "
                f"extrapolated at naive's measured poll period {nv['measured_poll_period_s']} s "
                f"({nv['long']['polls']} polls; its {h['poll_ms']} ms timers fire after "
                f"{nv['measured_timer_s']} s); at the advertised interval it would be {adv['events']} "
                f"events{' — over the 51,200-event hard limit' if adv['events'] > 51_200 else ''} |"
            )
        lines += ["", f"_{h['method']}._"]
    m = res.get("inflight")
    if m and "rss_inflight_mb" in m:
        sdk = m.get("worker_sdk_metrics") or {}
        cpu = m.get("cpu_s") or {}
        n = m["inflight"]
        lines += [
            "",
            f"### {m['inflight']} tasks in flight on one worker process (pollInterval {m['poll_ms']} ms)",
            "",
            "| completed | RSS idle MB | RSS all in flight MB | RSS peak MB | "
            "MB per 1,000 in flight (abs / Δ idle) | start s | all polling s | drain s | Temporal RPCs/task | "
            "CPU ms/task (worker / temporal) | sticky-cache forced evictions | max_cached_workflows |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
            f"| {m['completed']}/{n} | {m['rss_idle_mb']} | {m['rss_inflight_mb']} | {m['rss_peak_mb']} | "
            f"{m['rss_per_1000_inflight_mb']} / {m['rss_delta_per_1000_inflight_mb']} | {m['start_s']} | "
            f"{m['all_polling_s']} | {m['drain_s']} | {m['temporal_rpcs_per_task']} | "
            f"{1000 * cpu.get('worker', 0) / n:.0f} / {1000 * cpu.get('temporal_server', 0) / n:.0f} | "
            f"{sdk.get('temporal_sticky_cache_total_forced_eviction', 0):.0f} | {m['max_cached_workflows']} |",
        ]
    noisy = noise(res)
    if noisy:
        lines += [
            "",
            "**Noisy machine:** other processes used "
            + ", ".join(noisy)
            + " of the CPU capacity during these phases; their timings are pessimistic (CPU s per task are not).",
        ]
    t = res.get("earlier_targets") or []
    if t:
        lines += ["", "### Earlier targets (issues before 14)", "", "| target | value | met |", "|---|---|---|"]
        for x in t:
            met = "–" if x["met"] is None else "yes" if x["met"] else "**NO**"
            lines.append(f"| {x['target']} | {x['value']} | {met} |")
    lines += render_waiting(res)
    lines += render_idle(res)
    lines += render_push(res)
    lines += render_refresh(res)
    lines += render_targets(res.get("targets") or [])
    lines += ["", f"Total wall time: {res['wall_s']:.1f} s"]
    return "\n".join(lines)


# --- main -----------------------------------------------------------------------------------------------


PHASES = (
    "floor",
    "ours",
    "naive",
    "minimal",
    "light",
    "history",
    "inflight",
    "aged",
    "naive-wait",
    "inflight-aged",
    "idle-waits",
    "push",
    "push-inflight",
    "refresh",
)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", type=int, default=None, help="tasks per design (default 200; quick 12)")
    p.add_argument("--concurrency", type=int, default=None, help="tasks in flight per design (default 200; quick 12)")
    p.add_argument("--duration", type=float, default=None, help="task duration s (default 5; quick 2)")
    p.add_argument("--poll-ms", type=int, default=None, help="server pollIntervalMs (default 500)")
    p.add_argument(
        "--inflight",
        type=int,
        default=None,
        help="tasks held in flight on one worker (default 1000 to stay under 5 min; the target: 2000; quick 100)",
    )
    p.add_argument(
        "--inflight-poll-ms",
        type=int,
        default=None,
        help="pollIntervalMs during the in-flight phase (default 20000: 2,000 tasks then cost 100 polls/s)",
    )
    p.add_argument(
        "--inflight-rate",
        type=float,
        default=0,
        help="in-flight phase: start workflows at this many per second (default 0: all at once)",
    )
    p.add_argument(
        "--inflight-cache",
        type=int,
        default=0,
        help="max_cached_workflows for the in-flight worker (default: WorkerSettings')",
    )
    p.add_argument(
        "--long-s", type=float, default=None, help="the long task of the history phase, s (default 3600; quick 600)"
    )
    p.add_argument(
        "--short-s", type=float, default=None, help="the short task of the history phase, s (default 5; quick 2)"
    )
    p.add_argument("--naive-fit-polls", type=int, default=20, help="polls of naive's second measured history point")
    p.add_argument(
        "--db",
        choices=["sqlite", "memory"],
        default="memory",
        help="dev server store: in memory (default: keeps the default run under 5 min on 2 cores) or a "
        "temp SQLite file (what the embedded `mcp-tasks dev-server` uses; ~1.5x the Temporal CPU per task)",
    )
    p.add_argument(
        "--light-tasks", type=int, default=None, help="light-load latency probe: tasks (default 10; 0 = off)"
    )
    p.add_argument("--light-concurrency", type=int, default=10, help="light-load latency probe: concurrency")
    p.add_argument(
        "--light-duration",
        type=float,
        default=None,
        help="light-load latency probe: task duration s (default: --duration)",
    )
    for name in PHASES:
        p.add_argument(f"--skip-{name}", action="store_true")
    p.add_argument(
        "--only",
        default="",
        help=f"comma-separated phases to run, all others skipped: {', '.join(PHASES)}"
        " (e.g. `--only inflight-aged --inflight-aged 2000`)",
    )
    g = p.add_argument_group("cost of waiting")
    g.add_argument(
        "--aged-tiles",
        type=int,
        default=None,
        help="aged phase: ours tasks held open, back-dated to ages spread over 60…3600 s (default 40; quick 16)",
    )
    g.add_argument(
        "--aged-probes",
        type=int,
        default=None,
        help="aged phase: ours tasks that complete at known ages, for the delivery bound (default 12; quick 6)",
    )
    g.add_argument(
        "--aged-probe-max-age",
        type=float,
        default=None,
        help="aged phase: oldest probe's age at completion, s (default 2600: past the long-wait hand-over at "
        "2400 s; quick 400)",
    )
    g.add_argument(
        "--aged-window",
        type=float,
        default=None,
        help="aged phase: minimum window, s; it runs behind every other phase (default 180; quick 45)",
    )
    g.add_argument("--aged-minimal", type=int, default=2, help="aged phase: minimal tasks held open (T3)")
    g.add_argument(
        "--aged-old",
        type=int,
        default=None,
        help="aged phase: ours tasks aged 2 h+ held open on a worker of their own: the steady cost of an old "
        "task, past the long-wait hand-over (T3; default 4; quick 2)",
    )
    g.add_argument("--naive-wait-s", type=float, default=None, help="naive-wait window, s (default 20; quick 8)")
    g.add_argument("--naive-wait-tasks", type=int, default=4, help="naive tasks held open in the naive-wait window")
    g.add_argument(
        "--inflight-aged",
        type=int,
        default=None,
        help="T2: ours tasks aged 10 min…1 h held on one worker (the target: 2000, ~4 min alone: "
        "`--only inflight-aged`; default 0 = not run; quick 150, its figures scaled to 2,000)",
    )
    g.add_argument(
        "--inflight-aged-window", type=float, default=None, help="T2: the sustained window, s (default 120; quick 10)"
    )
    g.add_argument(
        "--heartbeat-s",
        type=float,
        default=None,
        help="heartbeat timeout of ours' activities (McpTaskRequest.timeouts.heartbeat_s; default 30): the "
        "SDK lets one heartbeat per 0.8 × this reach Temporal. A caller's setting, reported in the config",
    )
    g.add_argument(
        "--inflight-aged-poll-ms", type=int, default=None, help="T2: the server's pollIntervalMs (default: --poll-ms)"
    )
    g = p.add_argument_group(
        "waiting at the limit (bench/idle.py; `--only idle-waits`, ~20 min; not in the default run)"
    )
    g.add_argument(
        "--idle-tiles", type=int, default=None, help="tasks aged 60 s … 1 h per design (default 60; quick 8)"
    )
    g.add_argument("--idle-old", type=int, default=None, help="tasks aged 2 … 5 h per design (default 40; quick 4)")
    g.add_argument("--idle-probes", type=int, default=None, help="delivery probes per design (default 8; quick 2)")
    g.add_argument("--idle-window", type=float, default=None, help="the cost window, s (default 300; quick 30)")
    g.add_argument(
        "--idle-old-window",
        type=float,
        default=None,
        help="the old tasks' window, s: they stay open behind the other phases (default 1500; quick 40)",
    )
    g.add_argument(
        "--idle-inflight",
        type=int,
        default=None,
        help="idle tasks aged 10 min … 1 h on one worker (default 10000; quick 100)",
    )
    g.add_argument(
        "--idle-inflight-before",
        type=int,
        default=None,
        help="heartbeating tasks aged 10 min … 1 h on one worker, for comparison (default 2000; quick 50)",
    )
    g.add_argument(
        "--idle-cancels", type=int, default=None, help="idle in-flight tasks cancelled (default 20; quick 3)"
    )
    g = p.add_argument_group("acting for users (bench/refresh.py; `--only refresh`, ~4 min; not in the default run)")
    g.add_argument("--refresh-tasks", type=int, default=200, help="tasks (default 200)")
    g.add_argument("--refresh-subjects", type=int, default=10, help="subjects, each with its own grant (default 10)")
    g.add_argument("--refresh-window", type=float, default=180.0, help="seconds the starts are spread over (180)")
    g.add_argument("--refresh-ttl", type=int, default=20, help="access token lifetime at the authorization server (20)")
    g.add_argument(
        "--refresh-work", type=float, default=80.0, help="a task works 2 s … this long at the server (default 80)"
    )
    g = p.add_argument_group("told, not polled (bench/push.py; `--only push`; not in the default run)")
    g.add_argument(
        "--push-ages",
        default="60,300,900,1800,3600",
        help="age buckets, s, comma-separated (default 1 min, 5 min, 15 min, 30 min, 1 h)",
    )
    g.add_argument(
        "--push-tiles",
        type=int,
        default=None,
        help="held tasks per design and age bucket, each bucket on a worker of its own (default 20; quick 6)",
    )
    g.add_argument(
        "--push-probes",
        type=int,
        default=None,
        help="delivery probes per design and age bucket, ending at the bucket's age (default 6; quick 3)",
    )
    g.add_argument(
        "--push-window",
        type=float,
        default=None,
        help="the cost window, s (default: one stretched gap of the oldest bucket, 832 s at 1 h)",
    )
    g.add_argument(
        "--push-flood",
        type=int,
        default=None,
        help="notifications for unknown task ids sent after the window (default 10000, also quick; 0: none)",
    )
    g.add_argument(
        "--push-old", type=int, default=None, help="held tasks aged 2 … 5 h per design (default 40; quick 0)"
    )
    g.add_argument(
        "--push-old-window",
        type=float,
        default=None,
        help="the old tasks' window, s: their stretched gaps are 24–40 min (default 5400)",
    )
    g.add_argument(
        "--push-inflight",
        type=int,
        default=None,
        help="idle tasks aged 10 min … 1 h on one worker with the notifying server (default 10000; "
        "quick 0); with --only push-inflight, on each server of --push-inflight-servers (default "
        "10000; quick 300)",
    )
    g.add_argument(
        "--push-inflight-servers",
        default="notifying,listing,silent",
        help="--only push-inflight: the kinds of server, one run each (notifying, listing, silent)",
    )
    g.add_argument(
        "--push-inflight-ages",
        default="600,3600",
        help="the in-flight tasks' ages, s: LOW,HIGH (default 600,3600). k times younger gives k times "
        "shorter gaps: N/k tasks then make the reads and attempts of N, in steady state in minutes",
    )
    g.add_argument(
        "--push-inflight-settle",
        type=float,
        default=0.0,
        help="seconds between every task's first idle attempt and the window (default 0: the window sees "
        "the start's wave); one net gap of the oldest (8 × 5 %% of its age) for the steady state",
    )
    g.add_argument(
        "--push-inflight-steady",
        action="store_true",
        help="start the in-flight tasks over ~0.64 × HIGH s, each at its own phase of the schedule, so "
        "that the window sees them aged LOW … HIGH, each past two net gaps, in steady state "
        "(--push-inflight-settle is then not used)",
    )
    p.add_argument(
        "--no-bytecode",
        action="store_true",
        help="run children with PYTHONDONTWRITEBYTECODE=1 and no .pyc (recompiles sandboxed workflow modules)",
    )
    p.add_argument(
        "--experiment",
        default="",
        help="NOT ours as shipped: comma-separated patches to our worker, to price one cost: no-upserts, "
        "wft-slots=N (max_concurrent_workflow_tasks instead of 200), sticky=S "
        "(sticky_queue_schedule_to_start_timeout, s), wft-threads=N "
        "(WorkerSettings.workflow_threads), sdk-threads (the SDK default: a thread per slot), "
        "unsandboxed (UnsandboxedWorkflowRunner), passthrough-wf (workflows.* passed through the "
        "sandbox), uvloop (uvloop's event loop; `pip install uvloop` first); reported in the config",
    )
    p.add_argument(
        "--profile-dir",
        default="",
        help="py-spy each design's worker and perf the Temporal server during "
        "its run (read them with python -m bench.profile_summary)",
    )
    p.add_argument("--quick", action="store_true", help="smoke-test sizes (< 60 s)")
    p.add_argument("--json", default=str(RESULTS / "latest.json"), help="where to write the JSON results")
    args = p.parse_args(argv)
    q = args.quick
    defaults = {
        "light_tasks": 4 if q else 10,
        "tasks": 12 if q else 200,
        "concurrency": 12 if q else 200,
        "duration": 2.0 if q else 5.0,
        "poll_ms": 500,
        "inflight": 100 if q else 1000,
        "inflight_poll_ms": 500 if q else 20000,
        "long_s": 300.0 if q else 3600.0,
        "short_s": 2.0 if q else 5.0,
        "aged_tiles": 16 if q else 40,
        "aged_probes": 6 if q else 12,
        "aged_probe_max_age": 400.0 if q else 2600.0,
        "aged_window": 45.0 if q else 180.0,
        "aged_old": 2 if q else 4,
        "naive_wait_s": 8.0 if q else 20.0,
        "inflight_aged": 150 if q else 0,
        "inflight_aged_window": 10.0 if q else 120.0,
        "idle_tiles": 8 if q else 60,
        "idle_old": 4 if q else 40,
        "idle_probes": 2 if q else 8,
        "idle_window": 30.0 if q else 300.0,
        "idle_old_window": 40.0 if q else 1500.0,
        "idle_inflight": 100 if q else 10000,
        "idle_inflight_before": 50 if q else 2000,
        "idle_cancels": 3 if q else 20,
        "push_tiles": 6 if q else 20,
        "push_old": 0 if q else 40,
        "push_probes": 3 if q else 6,
        "push_window": 0.0,
        "push_old_window": 5400.0,
        "push_flood": 10000,
        "push_inflight": 0 if q else 10000,
    }
    inflight_given = args.push_inflight is not None
    for k, v in defaults.items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    if args.light_duration is None:
        args.light_duration = args.duration
    if args.inflight_aged_poll_ms is None:
        args.inflight_aged_poll_ms = args.poll_ms
    if args.only:
        wanted = {x.strip() for x in args.only.split(",") if x.strip()}
        unknown = wanted - set(PHASES)
        if unknown:
            p.error(f"--only: unknown phase(s) {', '.join(sorted(unknown))}; known: {', '.join(PHASES)}")
        for name in PHASES:
            setattr(args, f"skip_{name.replace('-', '_')}", name not in wanted)
        if "inflight-aged" in wanted and not args.inflight_aged:
            args.inflight_aged = 2000
    if args.skip_inflight_aged:
        args.inflight_aged = 0
    if not args.only or "idle-waits" not in args.only:
        args.skip_idle_waits = True  # ~20 minutes: asked for by name only
    args.push_ages = sorted(float(x) for x in str(args.push_ages).split(",") if x.strip())
    only = {x.strip() for x in (args.only or "").split(",")}
    args.push_inflight_servers = [x.strip() for x in str(args.push_inflight_servers).split(",") if x.strip()]
    if unknown := set(args.push_inflight_servers) - set(DESIGNS):
        p.error(f"--push-inflight-servers: no such kind of server: {', '.join(sorted(unknown))}")
    try:
        low, high = (float(x) for x in str(args.push_inflight_ages).split(","))
    except ValueError:
        p.error(f"--push-inflight-ages: LOW,HIGH in seconds, not {args.push_inflight_ages!r}")
    if not 0 < low <= high:
        p.error(f"--push-inflight-ages: 0 < LOW <= HIGH, not {low:g},{high:g}")
    if args.push_inflight_settle < 0:
        p.error("--push-inflight-settle: seconds, at least 0")
    args.push_inflight_ages = (low, high)
    args.skip_push_inflight = "push-inflight" not in only
    if not args.skip_push_inflight and not inflight_given:
        args.push_inflight = 300 if q else 10000
    if "refresh" not in only:
        args.skip_refresh = True  # its own servers and workers, ~4 min: by name only
    if "push" not in only:
        args.skip_push = True  # ~16 min in --quick, ~2 hours in full (the old tasks' stretched gaps): by name only
    if q:
        args.naive_fit_polls = min(args.naive_fit_polls, 10)
        args.light_concurrency = min(args.light_concurrency, args.light_tasks)
    return args


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    t_start = time.monotonic()
    env = Env(args)
    import subprocess

    import fastmcp

    from mcp_temporal_tasks.worker.devserver import temporal_binary

    cli = subprocess.run([temporal_binary(), "--version"], capture_output=True, text=True).stdout.strip()
    res: dict[str, Any] = {
        "config": {
            "tasks": args.tasks,
            "concurrency": args.concurrency,
            "duration_s": args.duration,
            "poll_ms": args.poll_ms,
            "inflight": args.inflight,
            "light_tasks": args.light_tasks,
            "light_concurrency": args.light_concurrency,
            "light_duration_s": args.light_duration,
            "inflight_poll_ms": args.inflight_poll_ms,
            "db": "SQLite temp file" if args.db == "sqlite" else "in-memory",
            "quick": args.quick,
            "bytecode": not args.no_bytecode,
            "experiment": args.experiment or None,
            "temporal_cli": cli.replace("temporal version ", ""),
            "fastmcp": fastmcp.__version__,
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "poll_schedule": schedule_under_test(),
            "ours_heartbeat_s": args.heartbeat_s or None,
            "aged": None
            if args.skip_aged
            else {
                "tiles": args.aged_tiles,
                "probes": args.aged_probes,
                "probe_max_age_s": args.aged_probe_max_age,
                "min_window_s": args.aged_window,
                "minimal_tasks": args.aged_minimal,
                "old_tasks": args.aged_old,
            },
            "naive_wait": None
            if args.skip_naive_wait
            else {"tasks": args.naive_wait_tasks, "window_s": args.naive_wait_s},
            "inflight_aged": {
                "tasks": args.inflight_aged,
                "window_s": args.inflight_aged_window,
                "poll_ms": args.inflight_aged_poll_ms,
            }
            if args.inflight_aged
            else None,
        },
        "designs": {},
    }
    aged: AgedBackground | None = None
    if args.heartbeat_s:
        OURS_TIMEOUTS["heartbeat_s"] = args.heartbeat_s
    try:
        await env.start()
        if not args.skip_aged:
            # The cost of waiting, T1 and T3: aged tasks wait in the background of every other phase (their own worker
            # and server; a few polls a minute), so the long window they need costs no wall time of its own.
            aged = AgedBackground(
                env,
                poll_ms=args.poll_ms,
                tiles=args.aged_tiles,
                probes=args.aged_probes,
                probe_max_age_s=args.aged_probe_max_age,
                minimal_tasks=args.aged_minimal,
                min_window_s=args.aged_window,
                old=args.aged_old,
            )
            await aged.start()
        for design in ("floor", "ours", "naive", "minimal"):
            if getattr(args, f"skip_{design}"):
                continue
            res["designs"][design] = await phase_design(
                env, design, n=args.tasks, concurrency=args.concurrency, duration=args.duration, poll_ms=args.poll_ms
            )
        d = res["designs"]
        ratios: dict[str, float | None] = {}
        if "ours" in d and "naive" in d and d["naive"]["throughput_per_s"]:
            ratios["throughput ours/naive"] = round(d["ours"]["throughput_per_s"] / d["naive"]["throughput_per_s"], 2)
        if "minimal" in d and "naive" in d and d["naive"]["throughput_per_s"]:
            ratios["throughput minimal/naive (best any durable design reaches here)"] = round(
                d["minimal"]["throughput_per_s"] / d["naive"]["throughput_per_s"], 2
            )
        if "ours" in d and "floor" in d:
            of, ff = d["ours"]["latency_ms"], d["floor"]["latency_ms"]
            for p in ("p50", "p95"):
                if of[p] is not None and ff[p]:
                    ratios[f"latency {p} ours/floor"] = round(of[p] / ff[p], 2)
                    ratios[f"latency {p} ours−floor ms"] = round(of[p] - ff[p], 1)
        if "naive" in d and "floor" in d:
            nf, ff = d["naive"]["latency_ms"], d["floor"]["latency_ms"]
            if nf["p50"] is not None and ff["p50"] is not None:
                ratios["latency p50 naive−floor ms"] = round(nf["p50"] - ff["p50"], 1)
        res["ratios"] = ratios
        if args.light_tasks and not args.skip_light:
            # Same tasks at light load: what delivery costs when nothing queues (ours vs floor only).
            res["light"] = {}
            for design in ("floor", "ours"):
                if getattr(args, f"skip_{design}"):
                    continue
                res["light"][design] = await phase_design(
                    env,
                    design,
                    n=args.light_tasks,
                    concurrency=args.light_concurrency,
                    duration=args.light_duration,
                    poll_ms=args.poll_ms,
                    label="-light",
                )
            lo, lf = res["light"].get("ours"), res["light"].get("floor")
            if lo and lf and lo["latency_ms"]["p50"] is not None and lf["latency_ms"]["p50"] is not None:
                ratios["light: latency p50 ours−floor ms"] = round(lo["latency_ms"]["p50"] - lf["latency_ms"]["p50"], 1)
                ratios["light: latency p95 ours−floor ms"] = round(lo["latency_ms"]["p95"] - lf["latency_ms"]["p95"], 1)
        if not args.skip_history:
            res["history"] = await phase_history(
                env, short_s=args.short_s, long_s=args.long_s, poll_ms=args.poll_ms, naive_points=args.naive_fit_polls
            )
        if not args.skip_naive_wait:
            res["naive_wait"] = await phase_naive_wait(
                env, poll_ms=args.poll_ms, tasks=args.naive_wait_tasks, window_s=args.naive_wait_s
            )
        if not args.skip_inflight:
            res["inflight"] = await phase_inflight(
                env, inflight=args.inflight, poll_ms=args.inflight_poll_ms, cache=args.inflight_cache, timeout_s=300
            )
        if args.inflight_aged:
            res["inflight_aged"] = await phase_inflight_aged(
                env,
                n=args.inflight_aged,
                poll_ms=args.inflight_aged_poll_ms,
                window_s=args.inflight_aged_window,
                cache=args.inflight_cache,
            )
        if aged is not None:
            res["aged"] = await aged.finish()
        if not args.skip_idle_waits:
            res["idle_waits"] = await phase_idle_waits(env, args)
        if not args.skip_push:
            res["push"] = await phase_push(env, args)
        if not args.skip_push_inflight:
            res["push_inflight"] = await phase_push_inflight(env, args)
        if not args.skip_refresh:
            res["refresh"] = await phase_refresh(env, args)
    finally:
        env.stop()
    res["earlier_targets"] = targets(res)
    res["targets"] = waiting_targets(res)
    res["idle_targets"] = idle_targets(res)
    res["push_targets"] = push_targets(res)
    res["wall_s"] = round(time.monotonic() - t_start, 1)
    return res


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    res = asyncio.run(main_async(args))
    table = render(res)
    res["table_markdown"] = table
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2, default=str))
    print(table)
    print(f"\nJSON: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
