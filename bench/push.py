"""Told, not polled: what a server's task notifications buy, a notifying server, a silent one and a silent one that
offers ``tasks/list`` side by side.

The servers are the official Python SDK's 2025-11-25 task runtime (``mcp`` 1.30, ``bench/push_server.py``): one sends
``notifications/tasks/status`` on the session's GET stream when a task ends (the SDK's default), the other two are
told not to (``complete(..., notify=False)``); ``notifying`` and ``silent`` offer no ``tasks/list`` (``--no-list``:
today's two kinds of server, each wait read on its own), ``listing`` offers the SDK's (the session's own tasks), which
the worker's list reader reads at the pollInterval (``activities/push/list_reader.py``). Wherever the server is reached
over HTTP, the worker's hub also reads its idle waits' tasks itself (``activities/push/poller.py``: on today's schedule
where nothing else tells it of a change, so that the waits' own attempts are only the net). Everything else is the same:
pollInterval ``--poll-ms``, our worker as shipped (push on, ``push_stretch`` 4), its tasks back-dated to known ages
(``age_s``, as in ``bench/idle.py``), one dev server. Every worker first sees one 3 s task end (the prime), so that on
the notifying server its listener is up and the server has shown it notifies (``delivered_by`` of the primes is in the
JSON). Phases (``--only push``), both designs at once so that the machine's load is the same for both:

1. **Cost by age** (``--push-ages``, default 1 min, 5 min, 15 min, 30 min, 1 h): per design and age bucket,
   ``--push-tiles`` tasks aged within ±10 % of the bucket's age, held open by a gate, on a worker of their own; over
   ``--push-window`` seconds (by default at least one stretched gap of the oldest bucket: 4 × 5 % × 1 h = 12 min,
   so every task polls at least once in it): billable actions per task-hour, counted as in ``bench/idle.py`` (every
   activity attempt that ended: the worker SDK's ``RespondActivityTask*`` RPCs; heartbeats that reached Temporal;
   timers, markers, upserts, signals and children recorded in the histories in the window), the ``tasks/get`` polls,
   and the worker's CPU over the window, raw and above an idle worker's (one with no task, measured over the same
   window).
2. **Delivery by age** (``--push-probes`` per design and bucket, on a worker per design, inside the window): tasks that
   run 5–25 s and end at the bucket's age (±10 %); delay = the workflow's close time − the server's own record of the
   end (its store's, before any notification), p50 / p95 / max per bucket; the silent server's bound is today's,
   max(pollInterval, 5 % of the age at the end). Per probe's whole history: the signal, marker and upsert a wake adds.
3. **Flood** (``--push-flood``, 10,000): after the window, the notifying server sends that many
   ``notifications/tasks/status`` (``completed``) for task ids nobody waits on, on the session of the oldest bucket's
   held tasks (its worker holds that session's GET stream). Counted: signals the dev server received meanwhile
   (``SignalWorkflowExecution``, nothing else ends then) and in the held tasks' histories, visibility lookups
   (``ListWorkflowExecutions``), what the worker's hub made of what it read (``mcp_tasks_notifications`` by result),
   and the worker's CPU from the flood's first message until 10 s after its last, above the idle worker's.
4. Full run only: ``--push-old`` tasks aged 2 … 5 h over ``--push-old-window``, and ``--push-inflight`` idle tasks aged
   10 min … 1 h on one worker, once per server of ``--push-inflight-servers`` (the first in ``inflight``, the others in
   ``inflight_more``; ``waiting.phase_inflight_aged``), every gap against the
   stretched schedule.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections import Counter
from typing import Any

from mcp_temporal_tasks.activities.push import DEFAULT_NET_STRETCH, DEFAULT_STRETCH
from mcp_temporal_tasks.activities.wire import Endpoint
from mcp_temporal_tasks.workflows.client import outcome_of, start_mcp_task
from mcp_temporal_tasks.workflows.records import McpTaskRequest, Timeouts

from .common import (
    OURS_TIMEOUTS,
    REPO,
    TOOL,
    Child,
    CpuMeter,
    base_url,
    http_json,
    log,
    percentile,
    scrape,
    sdk_requests,
)
from .idle import _actions
from .waiting import AGE_FRACTION, HOUR_S, PHI, events_in_window, fetch_histories, phase_inflight_aged

DESIGNS = ("notifying", "silent", "listing")
PY1_PYTHON = REPO / "tests" / "peers" / "py1" / ".venv" / "bin" / "python"
#: ``[worker] push_stretch``'s default: the factor of the notifying server's schedule.
STRETCH = DEFAULT_STRETCH
DEFAULT_AGES = (60.0, 300.0, 900.0, 1800.0, 3600.0)
#: ``--push-inflight-ages``' default, the real ages of issue 42's 10,000 idle tasks (10 min … 1 h).
INFLIGHT_AGES = (600.0, 3600.0)
#: Ages of a bucket's tasks: its age × (1 ± SPREAD), so that their polls do not all fall at one instant.
SPREAD = 0.1
#: The worker's CPU after the flood's last message still counts for this long (its lookups, its stream's reopening).
FLOOD_TAIL_S = 10.0
#: The targets of issue 31 (first hour 56 and aged 5.6 actions per task-hour before it: bench/README's idle figures).
BEFORE_FIRST_HOUR, BEFORE_AGED = 56.0, 5.6


def bucket_label(age_s: float) -> str:
    return f"{age_s / HOUR_S:g} h" if age_s >= HOUR_S else f"{age_s / 60:g} min"


def default_window(ages: list[float]) -> float:
    """One stretched gap of the oldest bucket's oldest task (+5 %), so that each of its tasks polls in the window."""
    return round(1.05 * STRETCH * AGE_FRACTION * max(ages) * (1 + SPREAD))


def compressed_timeouts(ages: tuple[float, float]) -> dict[str, Any] | None:
    """The in-flight tasks' Timeouts where ``--push-inflight-ages`` compresses time k times (k = 600 s / LOW): the
    idle hand-over (``Timeouts.idle_gap_s``, 0.8 × the heartbeat timeout: 24 s) is a gap like the others, so it is k
    times shorter too. Left at 24 s, a wait whose compressed gap is under it stays in a heartbeating activity, where no
    wait at the real ages does (5 % of 10 min is 30 s): on a silent server, whose heartbeating waits keep today's
    schedule, most of the waits then read the task themselves, and the window prices a mix no real worker holds."""
    k = INFLIGHT_AGES[0] / ages[0]
    if k == 1.0:
        return None
    return {"idle_gap_s": round(0.8 * OURS_TIMEOUTS.get("heartbeat_s", Timeouts().heartbeat_s) / k, 3)}


def push_request(url: str, args: dict[str, Any], key: str, *, timeouts: dict[str, Any] | None = None) -> McpTaskRequest:
    return McpTaskRequest(
        server=Endpoint(url=url),
        tool=TOOL,
        arguments=args,
        era="2025-11-25",
        idempotency_key=key,
        timeouts=Timeouts(poll_floor_s=0.1, **{**OURS_TIMEOUTS, **(timeouts or {})}),
    )


def push_server(env: Any, poll_ms: int, *, silent: bool, name: str, listing: bool = False) -> tuple[Child, str]:
    if not PY1_PYTHON.exists():
        raise RuntimeError(
            f"{PY1_PYTHON} is missing: the push phase runs mcp 1.30 in the py1 peer's venv "
            "(python3 -m venv tests/peers/py1/.venv && tests/peers/py1/.venv/bin/pip install -r "
            "tests/peers/py1/requirements.txt; scripts/test.sh does it)"
        )
    argv = [str(PY1_PYTHON), "-m", "bench.push_server", "--port", "0", "--poll-interval-ms", str(poll_ms)]
    argv += ([] if listing else ["--no-list"]) + (["--silent"] if silent else [])
    child = Child(argv, ready_prefix="LISTENING", env=env.child_env(), log=env.tmp / f"push-server-{name}.log")
    url = child.ready_line.split()[1]
    env.servers[f"push-{name}"] = (child, url)  # stopped with the bench whatever happens
    return child, url


def hub_counts(port: int) -> Counter[str]:
    """The worker's ``mcp_tasks_notifications`` counter by ``result`` (what its push hub made of each notice)."""
    out: Counter[str] = Counter()
    for m in re.finditer(r"^mcp_tasks_notifications(?:_total)?\{([^}]*)\} (\S+)$", scrape(port), re.M):
        result = re.search(r'result="([^"]+)"', m.group(1))
        try:
            out[result.group(1) if result else "?"] += int(float(m.group(2)))
        except ValueError:
            pass
    return out


class _Group:
    """Tasks of one design on a worker of their own."""

    def __init__(self, env: Any, design: str, name: str, url: str, ages: list[float] | None = None) -> None:
        from mcp_temporal_tasks.worker.devserver import free_port

        self.env, self.design, self.name, self.url = env, design, name, url
        self.tq, self.port = f"bench-push-{design}-{name}-{env.run_id}", free_port()
        self.worker: Any = None
        self.ages: list[float] = ages or []
        self.ids: list[str] = []
        self.sdk0: Counter[str] = Counter()
        self.primed_by: str | None = None

    def start_worker(self) -> None:
        self.worker = self.env.worker("ours", self.tq, metrics_port=self.port)

    async def prime(self) -> None:
        """One task that ends after 3 s: long enough for the worker's listener to be up when the server notifies."""
        key = f"push-prime-{self.design}-{self.name}-{self.env.run_id}"
        out = await outcome_of(
            await start_mcp_task(
                self.env.client, push_request(self.url, {"seconds": 3.0}, key), workflow_id=key, task_queue=self.tq
            )
        )
        self.primed_by = out.delivered_by

    async def hold(self, gate: str) -> None:
        self.ids = [f"push-{self.design}-{self.name}-{self.env.run_id}-{i}" for i in range(len(self.ages))]
        sem = asyncio.Semaphore(50)

        async def one(key: str, age: float) -> None:
            async with sem:
                await start_mcp_task(
                    self.env.client,
                    push_request(self.url, {"gate": gate, "age_s": round(age, 1)}, key),
                    workflow_id=key,
                    task_queue=self.tq,
                )

        await asyncio.gather(*(one(k, a) for k, a in zip(self.ids, self.ages, strict=True)))


def _spread(age: float, n: int) -> list[float]:
    return [age * (1 - SPREAD + 2 * SPREAD * ((i * PHI) % 1.0)) for i in range(n)]


async def _probe(env: Any, g: _Group, j: int, end_age: float, seconds: float, bucket: float) -> dict[str, Any]:
    key = f"push-probe-{g.design}-{env.run_id}-{j}"
    handle = await start_mcp_task(
        env.client,
        push_request(g.url, {"seconds": seconds, "age_s": round(end_age - seconds, 1)}, key),
        workflow_id=key,
        task_queue=g.tq,
    )
    out = await outcome_of(handle)
    closed = (await handle.describe()).close_time
    events = list((await handle.fetch_history()).events)
    return {
        "key": key,
        "bucket_s": bucket,
        "end_age_s": round(end_age),
        "task_id": out.task_id,
        "ok": out.outcome.value == "completed",
        "delivered_by": out.delivered_by,
        "closed": closed.timestamp() if closed else None,
        "kinds": events_in_window([events], 0.0, 1e12),
        "events": len(events),
    }


def _delays(rows: list[dict[str, Any]], state: dict[str, Any], poll_s: float) -> dict[str, Any]:
    delays, within, within_list, by = [], 0, 0, Counter()
    for r in rows:
        end = state["terminal"].get(r.get("task_id"))
        if not r.get("ok") or end is None or r.get("closed") is None:
            continue
        d = r["closed"] - end
        r["delay_s"] = round(d, 3)
        r["bound_s"] = round(max(poll_s, AGE_FRACTION * r["end_age_s"]), 1)
        within += d <= r["bound_s"] + 1.0
        within_list += d <= max(poll_s, 5.0)
        delays.append(d)
        by[r["delivered_by"]] += 1
    return {
        "n": len(delays),
        "of": len(rows),
        "p50_s": _r(percentile(delays, 50)),
        "p95_s": _r(percentile(delays, 95)),
        "max_s": _r(max(delays) if delays else None),
        "within_todays_bound": within,
        "within_list_bound": within_list,
        "delivered_by": dict(by),
        "rows": [{k: r.get(k) for k in ("end_age_s", "delay_s", "bound_s", "delivered_by")} for r in rows],
    }


def _r(v: float | None) -> float | None:
    return None if v is None else round(v, 2)


async def _task_id(env: Any, workflow_id: str) -> str | None:
    """The MCP task id a held workflow waits on (its ``McpTaskId`` search attribute)."""
    desc = await env.client.get_workflow_handle(workflow_id).describe()
    for pair in desc.typed_search_attributes:
        if pair.key.name == "McpTaskId":
            return str(pair.value)
    return None


async def _flood(env: Any, n: int, server: Child, url: str, g: _Group, idle: _Group) -> dict[str, Any]:
    """``n`` notifications for unknown task ids on ``g``'s session; what they cost and caused (module docstring)."""
    task_id = await _task_id(env, g.ids[0])
    if task_id is None:
        return {"error": "no McpTaskId on the held task"}
    hub0, rpc0 = hub_counts(g.port), env.metrics()
    f0 = time.time()
    meter = CpuMeter({"worker": g.worker.pid, "idle_worker": idle.worker.pid, "mcp_server": server.pid})
    reply = await asyncio.to_thread(
        http_json, base_url(url) + f"/bench/flood?n={n}&task={task_id}", method="POST", timeout=180.0
    )
    await asyncio.sleep(FLOOD_TAIL_S)
    cpu = meter.done()
    f1 = time.time()
    hub, rpc = hub_counts(g.port) - hub0, env.metrics()
    hist = events_in_window(await fetch_histories(env.client, g.ids), f0, f1)
    # Each notice read is counted once by what became of it; ``not_ours`` is the later answer to a ``lookups`` one.
    heard = sum(v for k, v in hub.items() if k != "not_ours")
    return {
        "sent": reply.get("sent"),
        "server_seconds": reply.get("seconds"),
        "error": reply.get("error"),
        "heard_by_worker": heard,
        "hub": dict(hub),
        "signals_sent": int(rpc.get("SignalWorkflowExecution", 0) - rpc0.get("SignalWorkflowExecution", 0)),
        "signals_in_histories": hist["signals"],
        "visibility_lookups": int(rpc.get("ListWorkflowExecutions", 0) - rpc0.get("ListWorkflowExecutions", 0)),
        "worker_cpu_s": cpu["worker"],
        "idle_worker_cpu_s": cpu["idle_worker"],
        "worker_cpu_above_idle_s": round(cpu["worker"] - cpu["idle_worker"], 2),
        "wall_s": cpu["wall_s"],
        "mcp_server_cpu_s": cpu["mcp_server"],
        "machine_other_pct": round(100 * cpu["other_processes"] / max(cpu["capacity"], 1e-9), 1),
    }


async def phase_push(env: Any, args: Any) -> dict[str, Any]:
    ages = [float(a) for a in args.push_ages]
    window = args.push_window or default_window(ages)
    out: dict[str, Any] = {
        "poll_ms": args.poll_ms,
        "stretch": STRETCH,
        "ages_s": ages,
        "tiles": args.push_tiles,
        "probes": args.push_probes,
        "window_s": window,
        "old": args.push_old,
        **{d: {"buckets": {}} for d in DESIGNS},
    }
    poll_s = args.poll_ms / 1000
    servers = {
        d: push_server(env, args.poll_ms, silent=d != "notifying", listing=d == "listing", name=f"{d}-{env.run_id}")
        for d in DESIGNS
    }
    cost = {
        d: {a: _Group(env, d, f"age{a:g}", servers[d][1], _spread(a, args.push_tiles)) for a in ages} for d in DESIGNS
    }
    probers = {d: _Group(env, d, "probes", servers[d][1]) for d in DESIGNS}
    old = (
        {
            d: _Group(
                env, d, "old", servers[d][1], [7200.0 + 3 * HOUR_S * ((i * PHI) % 1.0) for i in range(args.push_old)]
            )
            for d in DESIGNS
        }
        if args.push_old
        else {}
    )
    idle = _Group(env, "none", "idle-worker", servers["silent"][1])  # never given a task: the CPU baseline
    held = [g for d in DESIGNS for g in cost[d].values()] + list(old.values())
    everyone = [*held, *probers.values(), idle]
    gate = f"push-{env.run_id}"
    try:
        t0 = time.monotonic()
        starting = asyncio.Semaphore(4)  # 19 workers at once miss their 90 s readiness bound on a loaded 2-core machine

        async def start(g: _Group) -> None:
            async with starting:
                await asyncio.to_thread(g.start_worker)

        await asyncio.gather(*(start(g) for g in everyone))
        await asyncio.gather(*(g.prime() for g in everyone if g is not idle))
        out["primes_delivered_by"] = {d: dict(Counter(g.primed_by for g in everyone if g.design == d)) for d in DESIGNS}
        log(
            f"push: {len(everyone)} workers up and primed in {time.monotonic() - t0:.0f}s "
            f"({out['primes_delivered_by']})"
        )
        for d in DESIGNS:
            http_json(base_url(servers[d][1]) + "/bench/reset", method="POST")
        t0 = time.monotonic()
        await asyncio.gather(*(g.hold(gate) for g in held))
        want = sum(len(g.ages) for g in held) // len(DESIGNS)
        while time.monotonic() - t0 < 600:
            if all(http_json(base_url(u) + "/bench/counts")["polled"] >= want for _, u in servers.values()):
                break
            await asyncio.sleep(1)
        # Every wait has made its first poll and handed over to its idle attempts (or its stretched heartbeats).
        await asyncio.sleep(10)
        log(f"push: {want} tasks per design held and polled in {time.monotonic() - t0:.0f}s; window {window:g}s")

        lists0 = {d: http_json(base_url(servers[d][1]) + "/bench/counts").get("lists", 0) for d in DESIGNS}
        old_w0 = w0 = time.time()
        for g in held:
            g.sdk0 = sdk_requests(g.port)
        meter = CpuMeter({**{f"{g.design}:{g.name}": g.worker.pid for g in held}, "idle": idle.worker.pid})
        specs = [(a, k) for a in ages for k in range(args.push_probes)]
        probes = {
            d: [
                asyncio.ensure_future(
                    _probe(
                        env,
                        probers[d],
                        j,
                        a * (1 - SPREAD + 2 * SPREAD * ((k * PHI) % 1.0)),
                        round(5.0 + 20.0 * (((j + 1) * PHI) % 1.0), 1),
                        a,
                    )
                )
                for j, (a, k) in enumerate(specs)
            ]
            for d in DESIGNS
        }
        await asyncio.sleep(window)
        w1 = time.time()
        cpu = meter.done()
        out["machine_other_pct"] = round(100 * cpu["other_processes"] / max(cpu["capacity"], 1e-9), 1)
        out["idle_worker_cpu_pct_of_core"] = round(100 * cpu["idle"] / cpu["wall_s"], 2)
        for d in DESIGNS:
            out[d]["list_requests_in_window"] = (
                http_json(base_url(servers[d][1]) + "/bench/counts").get("lists", 0) - lists0[d]
            )
            polls1 = http_json(base_url(servers[d][1]) + "/bench/state")["aged"]
            for a, g in cost[d].items():
                row = await _measure(env, g, w0, w1)
                row["polls_per_task_hour"] = _polls(g, polls1, w0, w1)
                used = cpu[f"{d}:{g.name}"]
                row["worker_cpu_pct_of_core"] = round(100 * used / cpu["wall_s"], 2)
                row["worker_cpu_ms_per_task_hour_above_idle"] = round(
                    1000 * (used - cpu["idle"]) / (len(g.ids) * cpu["wall_s"] / HOUR_S), 1
                )
                out[d]["buckets"][bucket_label(a)] = row
            out[d]["worker_cpu_pct_of_core"] = round(
                sum(out[d]["buckets"][bucket_label(a)]["worker_cpu_pct_of_core"] for a in ages), 2
            )
        for d in DESIGNS:
            rows = [r for r in await asyncio.gather(*probes[d], return_exceptions=True) if isinstance(r, dict)]
            state = http_json(base_url(servers[d][1]) + "/bench/state")
            out[d]["delivery"] = _delays(rows, state, poll_s)
            for a in ages:
                mine = [r for r in rows if r["bucket_s"] == a]
                out[d]["buckets"].setdefault(bucket_label(a), {})["delivery"] = _delays(mine, state, poll_s)
            kinds = [r["kinds"] for r in rows if r.get("ok")]
            if kinds:
                total = sum(kinds, Counter())
                # A probe's whole history (start, submit, waits, end): notifying minus silent is what a wake adds.
                out[d]["per_task_history"] = {
                    k: round(total[k] / len(kinds), 2)
                    for k in ("signals", "markers", "upserts", "activity_starts", "events")
                }
            log(
                f"push delivery {d}: "
                + ", ".join(
                    f"{b}: {r['delivery']['p50_s']}/{r['delivery']['p95_s']}/{r['delivery']['max_s']} s"
                    for b, r in out[d]["buckets"].items()
                )
            )
        if args.push_flood:
            out["flood"] = await _flood(env, args.push_flood, *servers["notifying"], cost["notifying"][max(ages)], idle)
            log(f"push flood: {out['flood']}")
        if args.push_inflight:
            # One server kind after another (--push-inflight-servers), while the old tasks' window runs on.
            out["inflight"] = await inflight_on(env, args, args.push_inflight_servers[0])
            out["inflight_more"] = {d: await inflight_on(env, args, d) for d in args.push_inflight_servers[1:]}
        if old:
            while time.time() - old_w0 < args.push_old_window:
                await asyncio.sleep(5)
            ow1 = time.time()
            for d in DESIGNS:
                out[d]["old"] = await _measure(env, old[d], old_w0, ow1)
        for _, u in servers.values():
            http_json(base_url(u) + f"/bench/open?gate={gate}", method="POST")
        await asyncio.gather(
            *(
                env.client.get_workflow_handle(w).terminate(reason="bench: push phase over")
                for g in held
                for w in g.ids
            ),
            return_exceptions=True,
        )
        await asyncio.gather(*(asyncio.to_thread(env.stop_worker, g.worker) for g in everyone))
    finally:
        for d in DESIGNS:
            entry = env.servers.pop(f"push-{d}-{env.run_id}", None)
            if entry is not None:
                entry[0].stop()
    log(f"push: {out}")
    return out


async def inflight_on(env: Any, args: Any, design: str) -> dict[str, Any]:
    """``--push-inflight`` idle tasks aged 10 min … 1 h on one worker, on one session of a ``design`` server
    (``waiting.phase_inflight_aged``): the worker's CPU and RSS, and every poll gap against the stretched schedule."""
    poll_s = args.poll_ms / 1000
    seen: dict[str, Any] = {}
    name = f"inflight-{design}-{env.run_id}"

    def check(url: str, a: float, b: float) -> None:
        # The hub reads a notifying server's idle waits once per net gap (PushHub._poll_factor), the others' at
        # today's gap; every kind is checked against the stretched schedule at least.
        seen["schedule"] = _schedule(
            http_json(base_url(url) + "/bench/state")["aged"],
            poll_s,
            a,
            b,
            DEFAULT_NET_STRETCH if design == "notifying" else STRETCH,
        )
        seen["lists"] = http_json(base_url(url) + "/bench/counts").get("lists", 0)

    res = await phase_inflight_aged(
        env,
        n=args.push_inflight,
        poll_ms=args.poll_ms,
        window_s=args.inflight_aged_window,
        cache=0,
        name=f"push-inflight-{design}",
        handover=False,
        settle_polls=1,
        timeout_s=1800,
        after_window=check,
        server=lambda: push_server(
            env, args.poll_ms, silent=design != "notifying", listing=design == "listing", name=name
        ),
        request=push_request,
        ages=args.push_inflight_ages,
        settle_s=args.push_inflight_settle,
        steady=args.push_inflight_steady,
        timeouts=compressed_timeouts(args.push_inflight_ages),
    )
    res["server"] = design
    res.update(seen)
    env.servers.pop(f"push-{name}", None)  # the phase stopped it
    return res


async def phase_push_inflight(env: Any, args: Any) -> dict[str, Any]:
    """``--only push-inflight``: the in-flight part alone, once per server kind in ``--push-inflight-servers``."""
    out: dict[str, Any] = {}
    for design in args.push_inflight_servers:
        out[design] = await inflight_on(env, args, design)
        log(f"push-inflight {design}: {out[design]}")
    return out


def _polls(g: _Group, after: dict[str, Any], w0: float, w1: float) -> float | None:
    """``tasks/get`` of the group's tasks in the window (the server's log), per task-hour. The server knows tasks by
    their MCP ids: a group's are those whose age is one of the group's."""
    mine = {round(a, 1) for a in g.ages}
    polls = sum(sum(1 for p in t["polls"] if w0 <= p <= w1) for t in after.values() if t["age_s"] in mine)
    return round(polls / (len(g.ages) * (w1 - w0) / HOUR_S), 2) if g.ages else None


async def _measure(env: Any, g: _Group, w0: float, w1: float) -> dict[str, Any]:
    hist = await fetch_histories(env.client, g.ids)
    events = events_in_window(hist, w0, w1)
    acts = _actions(g.sdk0, sdk_requests(g.port), events)
    task_hours = len(g.ids) * (w1 - w0) / HOUR_S
    return {
        "tasks": len(g.ids),
        "window_s": round(w1 - w0),
        "ages_s": f"{min(g.ages):.0f}…{max(g.ages) + (w1 - w0):.0f}",
        "actions_per_task_hour": round(acts["total"] / task_hours, 2),
        "attempts_per_task_hour": round(acts["attempts"] / task_hours, 2),
        "heartbeats_per_task_hour": round(acts["heartbeats"] / task_hours, 2),
        "workflow_actions_per_task_hour": round(acts["workflow"] / task_hours, 2),
        "signals_in_window": events["signals"],
        "history_events": sorted({len(h) for h in hist}),
    }


def _schedule(aged: dict[str, Any], poll_s: float, w0: float, w1: float, stretch: float) -> dict[str, Any]:
    fraction = AGE_FRACTION * stretch
    late = gaps = 0
    worst = 0.0
    for a in aged.values():
        polls = [p for p in a["polls"] if w0 <= p <= w1]
        for p0, p1 in zip(polls, polls[1:], strict=False):
            want = max(poll_s, min(600.0 * stretch, fraction * (p0 - a["created"])))
            gaps += 1
            worst = max(worst, (p1 - p0) / want)
            late += p1 - p0 > want * 1.1 + 2.0
    return {"gaps": gaps, "late": late, "worst_gap_over_schedule": round(worst, 3), "fraction_of_age": fraction}


def _first_hour(d: dict[str, Any], ages: list[float]) -> float | None:
    """Actions per task-hour over a task's first hour: the buckets' figures weighted by the age span each stands for."""
    rows = [(a, d["buckets"].get(bucket_label(a), {}).get("actions_per_task_hour")) for a in ages if a <= HOUR_S]
    rows = [(a, v) for a, v in rows if v is not None]
    if len(rows) < 2:
        return None
    total = span = 0.0
    for (a0, v0), (a1, v1) in zip(rows, rows[1:], strict=False):
        total += (v0 + v1) / 2 * (a1 - a0)
        span += a1 - a0
    return round(total / span, 1)


#: Issue 42's targets for idle tasks on one worker, % of a core: a server that notifies or whose list is read, and
#: one that does neither.
INFLIGHT_CPU_TARGET = {"notifying": 10.0, "listing": 10.0, "silent": 25.0}


def inflight_targets(res: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for design, inf in (res.get("push_inflight") or {}).items():
        bound = INFLIGHT_CPU_TARGET[design]
        rows.append(
            {
                "target": f"{inf['tasks']:,} idle tasks on one worker, {design} server: ≤ {bound:g} % of a core, "
                "RSS < 500 MB",
                "value": f"{inf['worker_cpu_pct_of_core']:g} % of a core, RSS peak {inf['rss_peak_mb']:g} MB, "
                f"{inf.get('mcp_requests_per_s')} MCP requests/s (other processes "
                f"{inf.get('machine_other_pct')} % of the machine)",
                "met": inf["worker_cpu_pct_of_core"] <= bound and inf["rss_peak_mb"] < 500,
            }
        )
    return rows


def push_targets(res: dict[str, Any]) -> list[dict[str, Any]]:
    p = res.get("push")
    if not p:
        return inflight_targets(res)
    n, s = p["notifying"], p["silent"]
    rows: list[dict[str, Any]] = []
    dn, ds = n.get("delivery") or {}, s.get("delivery") or {}
    if dn.get("n"):
        rows.append(
            {
                "target": "notifying server: delivery ≤ 1 s p50 and ≤ 3 s max after the server's end, at every age",
                "value": f"p50 {dn['p50_s']} s, p95 {dn['p95_s']} s, max {dn['max_s']} s over {dn['n']} tasks "
                f"ending at ages {bucket_label(min(p['ages_s']))} … {bucket_label(max(p['ages_s']))} "
                f"(silent: p50 {ds.get('p50_s')} s, max {ds.get('max_s')} s)",
                "met": (dn["p50_s"] or 99) <= 1.0 and (dn["max_s"] or 99) <= 3.0 and dn["n"] == dn["of"],
            }
        )
    if ds.get("n"):
        rows.append(
            {
                "target": "silent server: delivery within today's bound, max(pollInterval, 5 % of the age) (+1 s)",
                "value": f"{ds['within_todays_bound']}/{ds['n']} within",
                "met": ds["within_todays_bound"] == ds["n"],
            }
        )
    li = p.get("listing") or {}
    dl = li.get("delivery") or {}
    if dl.get("n"):
        bound = max(p["poll_ms"] / 1000, 5.0)
        rows.append(
            {
                "target": f"silent server with tasks/list: delivery ≤ max(pollInterval, 5 s) = {bound:g} s p95 at "
                "every age",
                "value": f"p50 {dl['p50_s']} s, p95 {dl['p95_s']} s, max {dl['max_s']} s over {dl['n']} tasks "
                f"({dl['within_list_bound']} within; delivered by {dl.get('delivered_by')})",
                "met": dl["n"] == dl["of"] and (dl["p95_s"] if dl["p95_s"] is not None else 99) <= bound,
            }
        )
    hour = (li.get("buckets") or {}).get(bucket_label(HOUR_S)) or {}
    if hour.get("actions_per_task_hour") is not None:
        rows.append(
            {
                "target": "silent server with tasks/list: ≤ 5 billable actions per task-hour at 1 h (today 17.3)",
                "value": f"{hour['actions_per_task_hour']:g} (silent without tasks/list: "
                f"{((s.get('buckets') or {}).get(bucket_label(HOUR_S)) or {}).get('actions_per_task_hour')})",
                "met": hour["actions_per_task_hour"] <= 5.0,
            }
        )
    fn, fs = _first_hour(n, p["ages_s"]), _first_hour(s, p["ages_s"])
    if fn is not None and fs is not None:
        rows.append(
            {
                "target": f"billable actions per task-hour, a task's first hour, notifying: ≤ half of today's "
                f"{BEFORE_FIRST_HOUR:g}",
                "value": f"{fn:g} (silent: {fs:g}; the buckets' figures averaged over the ages they span)",
                "met": fn <= BEFORE_FIRST_HOUR / 2,
            }
        )
    if "old" in n and "old" in s:
        rows.append(
            {
                "target": f"billable actions per task-hour, tasks aged 2 … 5 h, notifying: ≤ half of today's "
                f"{BEFORE_AGED:g}",
                "value": f"{n['old']['actions_per_task_hour']:g} (silent: {s['old']['actions_per_task_hour']:g}; "
                f"window {n['old']['window_s']} s)",
                "met": n["old"]["actions_per_task_hour"] <= BEFORE_AGED / 2,
            }
        )
    f = p.get("flood")
    if f and f.get("sent"):
        rows.append(
            {
                "target": f"a flood of {f['sent']:,} notifications for unknown task ids: no signal, CPU bounded",
                "value": f"{f['signals_sent']} signals; worker {f['worker_cpu_above_idle_s']:g} CPU s above an "
                f"idle worker's over {f['wall_s']:g} s; read {f['heard_by_worker']:,}, "
                f"{f['visibility_lookups']} lookups",
                "met": f["signals_sent"] == 0 and f["signals_in_histories"] == 0,
            }
        )
    full = {d: r for d, r in [("notifying", p.get("inflight")), *(p.get("inflight_more") or {}).items()] if r}
    return (
        rows
        + inflight_targets({"push_inflight": {r.get("server", d): r for d, r in full.items()}})
        + inflight_targets(res)
    )


def render_push_inflight(res: dict[str, Any], *, with_targets: bool = True) -> list[str]:
    runs = res.get("push_inflight") or {}
    if not runs:
        return []
    lines = [
        "",
        "### Idle tasks in flight on one worker, per kind of server (`--only push-inflight`)",
        "",
        "| server | tasks | worker CPU % of a core | RSS peak MB | MCP requests/s | tasks/list requests | "
        "poll gaps late / all (worst ÷ schedule) | other processes % of the machine |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for design, r in runs.items():
        sch = r.get("schedule") or {}
        lines.append(
            f"| {design} | {r['tasks']:,} | **{r['worker_cpu_pct_of_core']:g}** | {r['rss_peak_mb']:g} | "
            f"{r.get('mcp_requests_per_s')} | {r.get('lists', '–')} | {sch.get('late')} / {sch.get('gaps')} "
            f"({sch.get('worst_gap_over_schedule')}) | {r.get('machine_other_pct')} |"
        )
    if with_targets:
        lines += ["", "| target | value | met |", "|---|---|---|"]
        lines += [
            f"| {t['target']} | {t['value']} | {'met' if t['met'] else 'NOT MET'} |" for t in inflight_targets(res)
        ]
    return lines


def render_push(res: dict[str, Any]) -> list[str]:
    p = res.get("push")
    if not p:
        return render_push_inflight(res)
    lines = [
        "",
        "### Told, not polled: a notifying server, a silent one, a silent one with tasks/list (mcp 1.30, "
        f"pollInterval {p['poll_ms']} ms, stretch {p['stretch']:g}, window {p['window_s']:g} s, {p['tiles']} "
        f"held tasks and {p['probes']} "
        f"delivery probes per design and age)",
        "",
        "| age (held tasks' ages over the window, s) | server | delivery p50 / p95 / max s | delivered by | "
        "actions/task-hour (attempts + heartbeats + workflow) | polls/task-hour | signals in window | worker CPU "
        "% of a core | worker CPU ms/task-hour above "
        "idle |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for a in p["ages_s"]:
        b = bucket_label(a)
        for d in DESIGNS:
            r = p[d]["buckets"].get(b) or {}
            dv = r.get("delivery") or {}
            lines.append(
                f"| {b} ({r.get('ages_s')}) | {d} | {dv.get('p50_s')} / {dv.get('p95_s')} / {dv.get('max_s')} "
                f"| {dv.get('delivered_by')} | **{r.get('actions_per_task_hour')}** "
                f"({r.get('attempts_per_task_hour')} + {r.get('heartbeats_per_task_hour')} + "
                f"{r.get('workflow_actions_per_task_hour')}) | {r.get('polls_per_task_hour')} | "
                f"{r.get('signals_in_window')} | {r.get('worker_cpu_pct_of_core')} | "
                f"{r.get('worker_cpu_ms_per_task_hour_above_idle')} |"
            )
    lines += [
        "",
        f"Idle worker (no task): {p.get('idle_worker_cpu_pct_of_core')} % of a core over the window; other "
        f"processes {p.get('machine_other_pct')} % of the machine. Primes delivered by: "
        f"{p.get('primes_delivered_by')}.",
    ]
    for d in DESIGNS:
        dv = p[d].get("delivery") or {}
        lines.append(
            f"All ages, {d}: delivery p50 {dv.get('p50_s')} s, p95 {dv.get('p95_s')} s, max {dv.get('max_s')} s "
            f"({dv.get('n')}/{dv.get('of')} probes; within today's bound {dv.get('within_todays_bound')}); "
            f"worker CPU {p[d].get('worker_cpu_pct_of_core')} % of a core over all ages' workers; "
            f"tasks/list requests in the window {p[d].get('list_requests_in_window')}."
        )
    hn, hs = p["notifying"].get("per_task_history"), p["silent"].get("per_task_history")
    if hn and hs:

        def billable(h: dict[str, Any]) -> float:
            return round(sum(h.get(k, 0) for k in ("signals", "markers", "upserts", "activity_starts")), 2)

        lines += [
            "",
            f"Per delivery probe's whole history (once per task, start to end): notifying {hn}, silent {hs}: "
            f"billable {billable(hn):g} vs {billable(hs):g} (signals + markers + upserts + activities "
            f"scheduled), {hn.get('events', 0) - hs.get('events', 0):g} events more where a notification "
            f"ended the wait.",
        ]
    hl = (p.get("listing") or {}).get("per_task_history")
    if hl:
        lines.append(f"Per delivery probe's whole history, listing: {hl}.")
    f = p.get("flood")
    if f:
        lines += [
            "",
            f"**Flood**: {f.get('sent')} `notifications/tasks/status` for unknown task ids sent in "
            f"{f.get('server_seconds')} s on a held session; the worker's hub read "
            f"{f.get('heard_by_worker')} (by result: {f.get('hub')}; the listener sheds a stream past 500 "
            f"useless messages in a second), **{f.get('signals_sent')} signals** sent (dev server; "
            f"{f.get('signals_in_histories')} in the held tasks' histories), {f.get('visibility_lookups')} "
            f"visibility lookups; worker **{f.get('worker_cpu_s')} CPU s** over {f.get('wall_s')} s (idle "
            f"worker {f.get('idle_worker_cpu_s')} s: {f.get('worker_cpu_above_idle_s')} s above it).",
        ]
    targets = push_targets(res)
    if targets:
        lines += ["", "| target | value | met |", "|---|---|---|"]
        lines += [f"| {t['target']} | {t['value']} | {'met' if t['met'] else 'NOT MET'} |" for t in targets]
    return lines + render_push_inflight(res, with_targets=False)  # its targets are in the table above
