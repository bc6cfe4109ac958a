"""Told, not polled: what a server's task notifications buy, a notifying server and a silent one side by side.

Both servers are the official Python SDK's 2025-11-25 task runtime (``mcp`` 1.30, ``bench/push_server.py``): one sends
``notifications/tasks/status`` on the session's GET stream when a task ends (the SDK's default), the other is told not
to (``complete(..., notify=False)``). Everything else is the same: pollInterval ``--poll-ms``, our worker as shipped
(push on, ``push_stretch`` 4), its tasks back-dated to known ages (``age_s``, as in ``bench/idle.py``), each design with
workers of its own on one dev server. Phases (``--only push``):

1. **Delivery** (``--push-probes`` per design): tasks that end at ages spread over 1 min … 1 h (they run 5–25 s);
   delay = the workflow's close time − the server's own record of the end (its store's, before any notification),
   p50 / p95 / max; the silent server's bound is today's, max(pollInterval, 5 % of the age at the end).
2. **Cost** (``--push-tiles`` tasks aged 60 s … 1 h, ``--push-old`` aged 2 … 5 h, held open by a gate, per design, on a
   worker that first saw one task end, so that a notifying server has shown it notifies): billable actions per
   task-hour over ``--push-window`` (the old tasks over the whole run, at least ``--push-old-window``: their stretched
   gaps are 24–40 minutes), counted as in ``bench/idle.py`` (every attempt that ended, heartbeats, and the timers,
   markers, upserts and signals in the histories), plus what a task's end adds when a notification ends it (signal,
   marker, upsert, a cancelled poll and a read: from the delivery probes' histories). Worker CPU over the window.
3. **In flight** (``--push-inflight``, 10,000 by default in the full run): idle tasks aged 10 min … 1 h on one worker
   with the notifying server (``waiting.phase_inflight_aged``): worker CPU, RSS, every gap against the stretched
   schedule (4 × 5 % of the age).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

from mcp_temporal_tasks.activities.wire import Endpoint
from mcp_temporal_tasks.workflows.client import outcome_of, start_mcp_task
from mcp_temporal_tasks.workflows.models import McpTaskRequest, Timeouts

from .common import OURS_TIMEOUTS, REPO, TOOL, Child, CpuMeter, base_url, http_json, log, percentile, sdk_requests
from .idle import _actions
from .waiting import AGE_FRACTION, FIRST_MINUTE_S, HOUR_S, PHI, events_in_window, fetch_histories, phase_inflight_aged

DESIGNS = ("notifying", "silent")
PY1_PYTHON = REPO / "tests" / "peers" / "py1" / ".venv" / "bin" / "python"
#: ``[worker] push_stretch``'s default: the factor of the notifying server's schedule.
STRETCH = 4.0
#: The targets of issue 31 (first hour 56 and aged 5.6 actions per task-hour before it: bench/README's idle figures).
BEFORE_FIRST_HOUR, BEFORE_AGED = 56.0, 5.6


def push_request(url: str, args: dict[str, Any], key: str, *, timeouts: dict[str, Any] | None = None) -> McpTaskRequest:
    return McpTaskRequest(server=Endpoint(url=url), tool=TOOL, arguments=args, era="2025-11-25", idempotency_key=key,
                          timeouts=Timeouts(poll_floor_s=0.1, **{**OURS_TIMEOUTS, **(timeouts or {})}))


def push_server(env: Any, poll_ms: int, *, silent: bool, name: str) -> tuple[Child, str]:
    if not PY1_PYTHON.exists():
        raise RuntimeError(f"{PY1_PYTHON} is missing: the push phase runs mcp 1.30 in the py1 peer's venv "
                           "(python3 -m venv tests/peers/py1/.venv && tests/peers/py1/.venv/bin/pip install -r "
                           "tests/peers/py1/requirements.txt; scripts/test.sh does it)")
    argv = [str(PY1_PYTHON), "-m", "bench.push_server", "--port", "0", "--poll-interval-ms", str(poll_ms)]
    child = Child(argv + (["--silent"] if silent else []), ready_prefix="LISTENING", env=env.child_env(),
                  log=env.tmp / f"push-server-{name}.log")
    url = child.ready_line.split()[1]
    env.servers[f"push-{name}"] = (child, url)  # stopped with the bench whatever happens
    return child, url


class _Group:
    """Tasks of one design on a worker of their own."""

    def __init__(self, env: Any, design: str, name: str, url: str) -> None:
        from mcp_temporal_tasks.worker.devserver import free_port

        self.env, self.design, self.name, self.url = env, design, name, url
        self.tq, self.port = f"bench-push-{design}-{name}-{env.run_id}", free_port()
        self.worker: Any = None
        self.ids: list[str] = []
        self.ages: list[float] = []
        self.sdk0: Counter[str] = Counter()

    def start_worker(self) -> None:
        self.worker = self.env.worker("ours", self.tq, metrics_port=self.port)

    async def prime(self) -> None:
        """One task that ends at once: the worker has then heard the server (or heard nothing from a silent one)."""
        key = f"push-prime-{self.design}-{self.name}-{self.env.run_id}"
        await outcome_of(await start_mcp_task(self.env.client, push_request(self.url, {"seconds": 0.3}, key),
                                              workflow_id=key, task_queue=self.tq))

    async def hold(self, ages: list[float], gate: str) -> None:
        self.ages = ages
        self.ids = [f"push-{self.design}-{self.name}-{self.env.run_id}-{i}" for i in range(len(ages))]
        sem = asyncio.Semaphore(50)

        async def one(key: str, age: float) -> None:
            async with sem:
                await start_mcp_task(self.env.client, push_request(self.url, {"gate": gate, "age_s": round(age, 1)}, key),
                                     workflow_id=key, task_queue=self.tq)

        await asyncio.gather(*(one(k, a) for k, a in zip(self.ids, ages, strict=True)))


async def _probe(env: Any, g: _Group, j: int, end_age: float, seconds: float) -> dict[str, Any]:
    key = f"push-probe-{g.design}-{env.run_id}-{j}"
    handle = await start_mcp_task(env.client, push_request(g.url, {"seconds": seconds, "age_s": round(end_age - seconds, 1)},
                                                           key), workflow_id=key, task_queue=g.tq)
    out = await outcome_of(handle)
    closed = (await handle.describe()).close_time
    events = list((await handle.fetch_history()).events)
    return {"key": key, "end_age_s": round(end_age), "task_id": out.task_id, "ok": out.outcome.value == "completed",
            "delivered_by": out.delivered_by, "closed": closed.timestamp() if closed else None,
            "kinds": events_in_window([events], 0.0, 1e12), "events": len(events)}


def _delays(rows: list[dict[str, Any]], state: dict[str, Any], poll_s: float) -> dict[str, Any]:
    delays, within, by = [], 0, Counter()
    for r in rows:
        end = state["terminal"].get(r.get("task_id"))
        if not r.get("ok") or end is None or r.get("closed") is None:
            continue
        d = r["closed"] - end
        r["delay_s"] = round(d, 3)
        r["bound_s"] = round(max(poll_s, AGE_FRACTION * r["end_age_s"]), 1)
        within += d <= r["bound_s"] + 1.0
        delays.append(d)
        by[r["delivered_by"]] += 1
    return {"n": len(delays), "of": len(rows), "p50_s": _r(percentile(delays, 50)), "p95_s": _r(percentile(delays, 95)),
            "max_s": _r(max(delays) if delays else None), "within_todays_bound": within,
            "delivered_by": dict(by), "rows": [{k: r.get(k) for k in ("end_age_s", "delay_s", "bound_s", "delivered_by")}
                                               for r in rows]}


def _r(v: float | None) -> float | None:
    return None if v is None else round(v, 2)


async def phase_push(env: Any, args: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"poll_ms": args.poll_ms, "stretch": STRETCH, "tiles": args.push_tiles, "old": args.push_old,
                           "probes": args.push_probes, "window_s": args.push_window, **{d: {} for d in DESIGNS}}
    poll_s = args.poll_ms / 1000
    servers = {d: push_server(env, args.poll_ms, silent=d == "silent", name=f"{d}-{env.run_id}") for d in DESIGNS}
    groups = {d: {name: _Group(env, d, name, servers[d][1]) for name in ("cost", "probes")} for d in DESIGNS}
    gate = f"push-{env.run_id}"
    tile_ages = [FIRST_MINUTE_S + (HOUR_S - FIRST_MINUTE_S) * i / max(1, args.push_tiles) for i in range(args.push_tiles)]
    old_ages = [7200.0 + 3 * HOUR_S * ((i * PHI) % 1.0) for i in range(args.push_old)]
    try:
        await asyncio.gather(*(asyncio.to_thread(g.start_worker) for gs in groups.values() for g in gs.values()))
        await asyncio.gather(*(g.prime() for gs in groups.values() for g in gs.values()))
        cost = {d: groups[d]["cost"] for d in DESIGNS}
        old = {d: _Group(env, d, "old", servers[d][1]) for d in DESIGNS}
        await asyncio.gather(*(asyncio.to_thread(g.start_worker) for g in old.values()))
        await asyncio.gather(*(g.prime() for g in old.values()))
        for d in DESIGNS:
            http_json(base_url(servers[d][1]) + "/bench/reset", method="POST")
        t0 = time.monotonic()
        await asyncio.gather(*(g.hold(tile_ages, gate) for g in cost.values()),
                             *(g.hold(old_ages, gate) for g in old.values()))
        want = len(tile_ages) + len(old_ages)
        while time.monotonic() - t0 < 600:
            if all(http_json(base_url(u) + "/bench/counts")["polled"] >= want for _, u in servers.values()):
                break
            await asyncio.sleep(1)
        await asyncio.sleep(15)  # every wait has handed over to its idle attempts (or its stretched heartbeats)
        old_w0 = time.time()
        for g in old.values():
            g.sdk0 = sdk_requests(g.port)
        log(f"push: {want} tasks per design held and polled in {time.monotonic() - t0:.0f}s")

        # The first-hour window, with the delivery probes ending inside it (on workers of their own).
        specs = [(600.0 if args.push_probes == 1 else FIRST_MINUTE_S + (HOUR_S - FIRST_MINUTE_S) * j /
                  max(1, args.push_probes - 1), round(5.0 + 20.0 * ((j * PHI) % 1.0), 1)) for j in range(args.push_probes)]
        w0 = time.time()
        for g in cost.values():
            g.sdk0 = sdk_requests(g.port)
        meter = CpuMeter({d: cost[d].worker.pid for d in DESIGNS})
        probes = {d: [asyncio.ensure_future(_probe(env, groups[d]["probes"], j, a, s)) for j, (a, s) in enumerate(specs)]
                  for d in DESIGNS}
        await asyncio.sleep(args.push_window)
        w1 = time.time()
        cpu = meter.done()
        for d in DESIGNS:
            await _measure(env, out[d], "first_hour", cost[d], w0, w1, tile_ages)
            out[d]["worker_cpu_pct_of_core"] = round(100 * cpu[d] / cpu["wall_s"], 2)
            out[d]["worker_cpu_ms_per_task_hour"] = round(1000 * cpu[d] / (len(tile_ages) * cpu["wall_s"] / HOUR_S), 1)
        out["machine_other_pct"] = round(100 * cpu["other_processes"] / max(cpu["capacity"], 1e-9), 1)
        for d in DESIGNS:
            rows = [r for r in await asyncio.gather(*probes[d], return_exceptions=True) if isinstance(r, dict)]
            state = http_json(base_url(servers[d][1]) + "/bench/state")
            out[d]["delivery"] = _delays(rows, state, poll_s)
            kinds = [r["kinds"] for r in rows if r.get("ok")]
            if kinds:
                total = sum(kinds, Counter())
                # A probe's whole history (start, submit, waits, end): notifying minus silent is what a wake adds.
                out[d]["per_task_history"] = {k: round(total[k] / len(kinds), 2) for k in
                                              ("signals", "markers", "upserts", "activity_starts", "events")}
            log(f"push delivery {d}: {out[d]['delivery']}")
        if args.push_inflight:
            factor = STRETCH

            def check(url: str, a: float, b: float) -> None:
                out["inflight_schedule"] = _schedule(http_json(base_url(url) + "/bench/state")["aged"], poll_s, a, b,
                                                     AGE_FRACTION * factor)

            out["inflight"] = await phase_inflight_aged(
                env, n=args.push_inflight, poll_ms=args.poll_ms, window_s=args.inflight_aged_window, cache=0,
                name="push-inflight", handover=False, settle_polls=1, timeout_s=1800, after_window=check,
                server=lambda: push_server(env, args.poll_ms, silent=False, name=f"inflight-{env.run_id}"),
                request=push_request)
            if "inflight_schedule" in out:
                out["inflight"]["schedule"] = out.pop("inflight_schedule")
        while time.time() - old_w0 < args.push_old_window:
            await asyncio.sleep(5)
        ow1 = time.time()
        for d in DESIGNS:
            await _measure(env, out[d], "old", old[d], old_w0, ow1, old_ages)
        for _, u in servers.values():
            http_json(base_url(u) + f"/bench/open?gate={gate}", method="POST")
        await asyncio.gather(*(env.client.get_workflow_handle(w).terminate(reason="bench: push phase over")
                               for g in (*cost.values(), *old.values()) for w in g.ids), return_exceptions=True)
        for g in (*old.values(), *(g for gs in groups.values() for g in gs.values())):
            await asyncio.to_thread(env.stop_worker, g.worker)
    finally:
        for d in DESIGNS:
            entry = env.servers.pop(f"push-{d}-{env.run_id}", None)
            if entry is not None:
                entry[0].stop()
    log(f"push: {out}")
    return out


async def _measure(env: Any, into: dict[str, Any], key: str, g: _Group, w0: float, w1: float, ages: list[float]) -> None:
    hist = await fetch_histories(env.client, g.ids)
    events = events_in_window(hist, w0, w1)
    acts = _actions(g.sdk0, sdk_requests(g.port), events)
    task_hours = len(g.ids) * (w1 - w0) / HOUR_S
    into[key] = {"tasks": len(g.ids), "window_s": round(w1 - w0), "ages_s": f"{min(ages):.0f}…{max(ages) + (w1 - w0):.0f}",
                 "actions_per_task_hour": round(acts["total"] / task_hours, 2),
                 "attempts_per_task_hour": round(acts["attempts"] / task_hours, 2),
                 "heartbeats_per_task_hour": round(acts["heartbeats"] / task_hours, 2),
                 "workflow_actions_per_task_hour": round(acts["workflow"] / task_hours, 2),
                 "signals_in_window": events["signals"], "history_events": sorted({len(h) for h in hist})}


def _schedule(aged: dict[str, Any], poll_s: float, w0: float, w1: float, fraction: float) -> dict[str, Any]:
    late = gaps = 0
    worst = 0.0
    for a in aged.values():
        polls = [p for p in a["polls"] if w0 <= p <= w1]
        for p0, p1 in zip(polls, polls[1:], strict=False):
            want = max(poll_s, min(600.0 * STRETCH, fraction * (p0 - a["created"])))
            gaps += 1
            worst = max(worst, (p1 - p0) / want)
            late += p1 - p0 > want * 1.1 + 2.0
    return {"gaps": gaps, "late": late, "worst_gap_over_schedule": round(worst, 3), "fraction_of_age": fraction}


def push_targets(res: dict[str, Any]) -> list[dict[str, Any]]:
    p = res.get("push")
    if not p:
        return []
    n, s = p["notifying"], p["silent"]
    rows: list[dict[str, Any]] = []
    dn, ds = n.get("delivery") or {}, s.get("delivery") or {}
    if dn.get("n"):
        rows.append({"target": "notifying server: delivery ≤ 1 s p50 and ≤ 3 s max after the server's end, at every age",
                     "value": f"p50 {dn['p50_s']} s, p95 {dn['p95_s']} s, max {dn['max_s']} s over {dn['n']} tasks ending at "
                              f"ages 1 min … 1 h (silent: p50 {ds.get('p50_s')} s, max {ds.get('max_s')} s)",
                     "met": (dn["p50_s"] or 99) <= 1.0 and (dn["max_s"] or 99) <= 3.0 and dn["n"] == dn["of"]})
    if ds.get("n"):
        rows.append({"target": "silent server: delivery within today's bound, max(pollInterval, 5 % of the age) (+1 s)",
                     "value": f"{ds['within_todays_bound']}/{ds['n']} within", "met": ds["within_todays_bound"] == ds["n"]})
    for key, before, label in (("first_hour", BEFORE_FIRST_HOUR, "a task's first hour"),
                               ("old", BEFORE_AGED, "tasks aged 2 … 5 h")):
        if key in n and key in s:
            rows.append({"target": f"billable actions per task-hour, {label}, notifying: ≤ half of today's {before:g}",
                         "value": f"{n[key]['actions_per_task_hour']:g} (silent: {s[key]['actions_per_task_hour']:g}; "
                                  f"window {n[key]['window_s']} s)",
                         "met": n[key]["actions_per_task_hour"] <= before / 2})
    inf = p.get("inflight")
    if inf:
        rows.append({"target": f"{inf['tasks']:,} idle tasks on one worker with push on: ≤ 30 % of a core, RSS < 500 MB",
                     "value": f"{inf['worker_cpu_pct_of_core']:g} % of a core, RSS peak {inf['rss_peak_mb']:g} MB "
                              f"(other processes {inf.get('machine_other_pct')} % of the machine)",
                     "met": inf["worker_cpu_pct_of_core"] <= 30 and inf["rss_peak_mb"] < 500})
    return rows


def render_push(res: dict[str, Any]) -> list[str]:
    p = res.get("push")
    if not p:
        return []
    lines = ["", f"### Told, not polled: a notifying server and a silent one (mcp 1.30, pollInterval {p['poll_ms']} ms, "
                 f"stretch {p['stretch']:g})", "",
             "| design | delivery p50 / p95 / max s | delivered by | actions/task-hour, first hour | … aged 2–5 h | "
             "worker CPU % of a core (first-hour window) |", "|---|---|---|---|---|---|"]
    for d in DESIGNS:
        r = p[d]
        dv = r.get("delivery") or {}
        fh, old = r.get("first_hour") or {}, r.get("old") or {}
        lines.append(f"| {d} | {dv.get('p50_s')} / {dv.get('p95_s')} / {dv.get('max_s')} | {dv.get('delivered_by')} | "
                     f"**{fh.get('actions_per_task_hour')}** ({fh.get('attempts_per_task_hour')} attempts, "
                     f"{fh.get('heartbeats_per_task_hour')} heartbeats) | **{old.get('actions_per_task_hour')}** "
                     f"(window {old.get('window_s')} s) | {r.get('worker_cpu_pct_of_core')} |")
    hn, hs = p["notifying"].get("per_task_history"), p["silent"].get("per_task_history")
    if hn and hs:
        lines += ["", f"Per delivery probe's whole history (once per task): notifying {hn}, silent {hs}."]
    targets = push_targets(res)
    if targets:
        lines += ["", "| target | value | met |", "|---|---|---|"]
        lines += [f"| {t['target']} | {t['value']} | {'met' if t['met'] else 'NOT MET'} |" for t in targets]
    return lines
