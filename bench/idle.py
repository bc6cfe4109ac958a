"""Waiting at the limit: one Temporal action per poll, and ten thousand old tasks on one worker.

Two designs side by side in one run, on one dev server, each with bench servers and workers of its own:

* **idle** (shipped): once the gap to a task's next poll reaches 0.8 × the heartbeat timeout (a task's 8th minute on
  the default schedule), the wait holds no activity open: one ``poll_task`` attempt per poll, retried by Temporal at
  the gap (``next_retry_delay``);
* **heartbeating** (the design before it, ``Timeouts(idle_gap_s=0)``): one heartbeating ``await_task`` per wait, handed
  to a 120 s heartbeat timeout after 40 minutes.

Phases (``--only idle-waits``):

1. **Cost per task-hour.** Per design, ``--idle-tiles`` tasks back-dated to ages spread evenly over 60 … 3600 s (a
   task's first hour after its first minute, as the earlier "cost of waiting" figures), and ``--idle-old`` tasks aged 2
   … 5 h, gated, each group on a worker of its own; after they settle, a window of ``--idle-window`` seconds for the
   first hour, and for the old tasks (6–10 minutes between polls) the whole run, at least ``--idle-old-window``.
   Billable actions in the window = activity attempts that ended in it (the worker SDK's
   ``RespondActivityTask{Completed,Failed, Canceled}`` RPCs: every attempt, retries included) + heartbeats that reached
   Temporal (``RecordActivityTaskHeartbeat``) + timers, markers, search-attribute upserts, signals and child workflows
   recorded in the histories in the window. Per task-hour = actions / (tasks × window). History per task: every held
   task's event count at the end. Delivery probes (``--idle-probes`` per design): tasks back-dated to end at ages 10 …
   50 min, the server's poll wait (terminal → first ``tasks/get`` showing it) against max(pollInterval, 5 % of the age
   at the end).
2. **In flight.** ``--idle-inflight`` (10,000) idle tasks aged 10 min … 1 h on one worker, and
   ``--idle-inflight-before`` (2,000) heartbeating ones on another run of the same phase: worker CPU (% of a core), RSS,
   the dev server's CPU and RPCs/s, MCP requests/s, and whether every task is polled on schedule (gaps measured by the
   bench server against the schedule).
3. **Cancel.** ``--idle-cancels`` of the idle in-flight tasks, each between two polls (next poll 30 s … 3 min away),
   cancelled with the workflow's ``cancel`` update: seconds until the outcome (tasks/cancel sent and the end settled),
   against max(5 s, the gap the task was in).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from typing import Any

from mcp_temporal_tasks.workflows.client import outcome_of, start_mcp_task
from mcp_temporal_tasks.workflows.mcp_task import McpTaskWorkflow

from .common import base_url, http_json, log, ours_request, percentile, sdk_requests
from .waiting import AGE_FRACTION, FIRST_MINUTE_S, HOUR_S, PHI, events_in_window, fetch_histories, phase_inflight_aged

DESIGNS: dict[str, dict[str, Any]] = {"idle": {}, "heartbeating": {"idle_gap_s": 0}}
ATTEMPT_ENDS = ("RespondActivityTaskCompleted", "RespondActivityTaskFailed", "RespondActivityTaskCanceled")
HEARTBEAT = "RecordActivityTaskHeartbeat"
#: History events Temporal Cloud bills besides activity attempts and heartbeats (counted by events_in_window).
WORKFLOW_ACTIONS = ("timers", "signals", "upserts", "markers", "children")
DELIVERY_SLACK_S = 1.0


def _actions(sdk0: Counter[str], sdk1: Counter[str], events: Counter[str]) -> dict[str, float]:
    attempts = sum(sdk1[k] - sdk0[k] for k in ATTEMPT_ENDS)
    heartbeats = sdk1[HEARTBEAT] - sdk0[HEARTBEAT]
    workflow = sum(events[k] for k in WORKFLOW_ACTIONS)
    return {
        "attempts": attempts,
        "heartbeats": heartbeats,
        "workflow": workflow,
        "total": attempts + heartbeats + workflow,
    }


class _Group:
    """Gated tasks of one design at given ages, on a worker of their own."""

    def __init__(self, env: Any, design: str, name: str, ages: list[float], url: str, gate: str) -> None:
        from mcp_temporal_tasks.worker.devserver import free_port

        self.env, self.design, self.name, self.ages, self.url, self.gate = env, design, name, ages, url, gate
        self.tq, self.port = f"bench-idle-{design}-{name}-{env.run_id}", free_port()
        self.ids = [f"idle-{design}-{name}-{env.run_id}-{i}" for i in range(len(ages))]
        self.worker: Any = None
        self.sdk0: Counter[str] = Counter()

    def start_worker(self) -> None:
        self.worker = self.env.worker("ours", self.tq, metrics_port=self.port)

    async def start_tasks(self) -> None:
        sem = asyncio.Semaphore(50)

        async def one(key: str, age: float) -> None:
            async with sem:
                await start_mcp_task(
                    self.env.client,
                    ours_request(
                        self.url, {"gate": self.gate, "age_s": round(age, 1)}, key, timeouts=DESIGNS[self.design]
                    ),
                    workflow_id=key,
                    task_queue=self.tq,
                )

        await asyncio.gather(*(one(k, a) for k, a in zip(self.ids, self.ages, strict=True)))


class CostPhase:
    """Phase 1, both designs at once (their windows overlap, so the machine's load is the same for both).

    The first-hour tiles are measured over ``window_s``. The old tasks' gaps are 6 … 10 minutes, and every one of them
    handed over at the same moment (they started together), so a short window would see all or none of their polls:
    they stay open behind the in-flight phases and are measured over the whole run (≥ 2 gaps each)."""

    def __init__(self, env: Any, *, tiles: int, old: int, probes: int, window_s: float, poll_ms: int) -> None:
        self.env, self.window_s, self.poll_ms, self.probes = env, window_s, poll_ms, probes
        self.tile_ages = [FIRST_MINUTE_S + (HOUR_S - FIRST_MINUTE_S) * i / tiles for i in range(tiles)]
        self.old_ages = [7200.0 + 3 * HOUR_S * ((i * PHI) % 1.0) for i in range(old)]
        self.out: dict[str, Any] = {
            "window_s": window_s,
            "tiles": tiles,
            "old": old,
            "poll_ms": poll_ms,
            **{d: {} for d in DESIGNS},
        }
        self.servers: dict[str, str] = {}
        self.groups: list[_Group] = []
        for design in DESIGNS:
            _, url = env.server(poll_ms, name=f"idle-cost-{design}", ttl_s=8 * 3600)
            self.servers[design] = url
            gate = f"idle-{design}-{env.run_id}"
            self.groups += [
                _Group(env, design, "first-hour", self.tile_ages, url, gate),
                _Group(env, design, "old", self.old_ages, url, gate),
                # The probes' starts, submits and payload reads must not count as the held tasks' cost.
                _Group(env, design, "probes", [], url, gate),
            ]
        self.old_w0 = 0.0

    async def start(self) -> None:
        await asyncio.gather(*(asyncio.to_thread(g.start_worker) for g in self.groups))
        t0 = time.monotonic()
        await asyncio.gather(*(g.start_tasks() for g in self.groups))
        want = len(self.tile_ages) + len(self.old_ages)
        while time.monotonic() - t0 < 600:
            if all(
                len(http_json(base_url(u) + "/bench/state")["aged"]) >= want
                and http_json(base_url(u) + "/bench/counts")["polled"] >= want
                for u in self.servers.values()
            ):
                break
            await asyncio.sleep(1)
        # Settle: every wait that hands over (to poll_task, or to the long-wait heartbeat) has done so.
        await asyncio.sleep(15)
        self.old_w0 = time.time()
        for g in self.groups:
            g.sdk0 = sdk_requests(g.port)
        log(f"idle cost: {len(self.groups)} groups started and polled in {time.monotonic() - t0:.0f}s")

    async def _measure(self, g: _Group, w0: float, w1: float, sdk1: Counter[str]) -> None:
        hist = await fetch_histories(self.env.client, g.ids)
        events = events_in_window(hist, w0, w1)
        acts = _actions(g.sdk0, sdk1, events)
        task_hours = len(g.ids) * (w1 - w0) / HOUR_S
        self.out[g.design][g.name] = {
            "tasks": len(g.ids),
            "window_s": round(w1 - w0),
            "actions_per_task_hour": round(acts["total"] / task_hours, 1),
            "attempts_per_task_hour": round(acts["attempts"] / task_hours, 1),
            "heartbeats_per_task_hour": round(acts["heartbeats"] / task_hours, 1),
            "workflow_actions_per_task_hour": round(acts["workflow"] / task_hours, 1),
            "history_events": sorted({len(h) for h in hist}),
            "history_events_added_per_task": round(events["events"] / len(g.ids), 2),
            "ages_s": f"{min(g.ages):.0f}…{max(g.ages) + (w1 - self.old_w0):.0f}",
        }

    async def first_hour(self) -> None:
        """The first-hour window, with the delivery probes ending inside it."""
        env, poll_ms = self.env, self.poll_ms
        probe_specs = []
        for j in range(self.probes):
            end_age = 600.0 + 2400.0 * j / max(1, self.probes - 1)
            seconds = round(5.0 + 20.0 * ((j * PHI) % 1.0), 1)
            probe_specs.append({"end_age_s": end_age, "seconds": seconds, "age_s": round(end_age - seconds, 1)})

        async def probe(g: _Group, j: int, p: dict[str, Any]) -> dict[str, Any]:
            key = f"idle-probe-{g.design}-{env.run_id}-{j}"
            h = await start_mcp_task(
                env.client,
                ours_request(g.url, {"seconds": p["seconds"], "age_s": p["age_s"]}, key, timeouts=DESIGNS[g.design]),
                workflow_id=key,
                task_queue=g.tq,
            )
            o = await outcome_of(h)
            return {**p, "task_id": o.task_id, "ok": o.outcome.value == "completed"}

        tiles = [g for g in self.groups if g.name == "first-hour"]
        w0 = time.time()
        sdk0 = {g.tq: sdk_requests(g.port) for g in tiles}
        futs = {
            g.design: [asyncio.ensure_future(probe(g, j, p)) for j, p in enumerate(probe_specs)]
            for g in self.groups
            if g.name == "probes"
        }
        await asyncio.sleep(self.window_s)
        w1 = time.time()
        for g in tiles:
            g.sdk0 = sdk0[g.tq]
            await self._measure(g, w0, w1, sdk_requests(g.port))
        results = {d: await asyncio.gather(*fs, return_exceptions=True) for d, fs in futs.items()}
        for design, url in self.servers.items():
            st = http_json(base_url(url) + "/bench/state")
            rows = []
            for r in results[design]:
                if isinstance(r, BaseException) or not r.get("ok"):
                    rows.append({"ok": False, "error": repr(r) if isinstance(r, BaseException) else "not completed"})
                    continue
                tid = r["task_id"]
                a = st["aged"].get(tid)
                if tid not in st["terminal"] or tid not in st["observed"] or a is None:
                    rows.append({"ok": False, "error": "no server record"})
                    continue
                age_end = st["terminal"][tid] - a["created"]
                wait = st["observed"][tid] - st["terminal"][tid]
                bound = max(poll_ms / 1000, AGE_FRACTION * age_end)
                rows.append(
                    {
                        "ok": True,
                        "age_at_end_s": round(age_end),
                        "poll_wait_s": round(wait, 2),
                        "bound_s": round(bound, 1),
                        "within": wait <= bound + DELIVERY_SLACK_S,
                    }
                )
            self.out[design]["probes"] = rows
        log(f"idle cost, first hour: { {d: self.out[d].get('first-hour') for d in DESIGNS} }")

    async def finish(self) -> dict[str, Any]:
        """The old tasks' window (from their settling to now), then release everything."""
        env = self.env
        w1 = time.time()
        for g in self.groups:
            if g.name == "old":
                await self._measure(g, self.old_w0, w1, sdk_requests(g.port))
        for g in self.groups:
            http_json(base_url(g.url) + f"/bench/open?gate={g.gate}", method="POST")
        await asyncio.gather(
            *(
                env.client.get_workflow_handle(w).terminate(reason="bench: idle cost phase over")
                for g in self.groups
                for w in g.ids
            ),
            return_exceptions=True,
        )
        await asyncio.gather(*(asyncio.to_thread(env.stop_worker, g.worker) for g in self.groups))
        for design in DESIGNS:
            env.stop_server(self.poll_ms, name=f"idle-cost-{design}")
        log(f"idle cost: {self.out}")
        return self.out


def _schedule_check(aged: dict[str, Any], poll_s: float, w0: float, w1: float) -> dict[str, Any]:
    """Gaps between consecutive polls of each task inside the window, against the schedule at the earlier poll's age
    (5 % of it; the idle design adds nothing, the heartbeating one may be up to a heartbeat late)."""
    late, gaps = 0, 0
    worst = 0.0
    for a in aged.values():
        polls = [p for p in a["polls"] if w0 <= p <= w1]
        for p0, p1 in zip(polls, polls[1:], strict=False):
            want = max(poll_s, AGE_FRACTION * (p0 - a["created"]))
            gaps += 1
            worst = max(worst, (p1 - p0) / want)
            if p1 - p0 > want * 1.1 + 2.0:
                late += 1
    return {"gaps": gaps, "late": late, "worst_gap_over_schedule": round(worst, 3)}


async def phase_inflight(
    env: Any, *, n: int, design: str, poll_ms: int, window_s: float, cancels: int = 0
) -> dict[str, Any]:
    """Phase 2 (and 3 for the idle design): ``n`` tasks of ``design`` aged 10 min … 1 h on one worker."""
    hooks: dict[str, Any] = {}

    async def cancel_some(client: Any, url: str, keys: list[str]) -> None:
        picked = random.Random(7).sample(keys, min(cancels, len(keys)))
        rows = []
        for key in picked:
            handle = client.get_workflow_handle(key)
            t = time.monotonic()
            await handle.execute_update(McpTaskWorkflow.cancel, "bench")
            o = await asyncio.wait_for(outcome_of(handle), 120)
            rows.append({"seconds": round(time.monotonic() - t, 2), "outcome": o.outcome.value})
        hooks["cancels"] = rows

    def check(url: str, w0: float, w1: float) -> None:
        hooks["schedule"] = _schedule_check(http_json(base_url(url) + "/bench/state")["aged"], poll_ms / 1000, w0, w1)

    out = await phase_inflight_aged(
        env,
        n=n,
        poll_ms=poll_ms,
        window_s=window_s,
        cache=0,
        timeouts=DESIGNS[design],
        name=f"inflight-{design}",
        after_window=check,
        before_release=cancel_some if cancels else None,
        handover=design == "heartbeating",
        settle_polls=2 if design == "idle" else 1,
        timeout_s=1200,
    )
    out.update(hooks)
    out["design"] = design
    if "cancels" in out:
        secs = [c["seconds"] for c in out["cancels"]]
        out["cancel_s"] = {
            "p50": percentile(secs, 50),
            "max": max(secs) if secs else None,
            "all_cancelled": all(c["outcome"] == "cancelled" for c in out["cancels"]),
        }
    return out


def idle_targets(res: dict[str, Any]) -> list[dict[str, Any]]:
    idle = res.get("idle_waits") or {}
    cost, inf, before = idle.get("cost") or {}, idle.get("inflight") or {}, idle.get("inflight_before") or {}
    rows: list[dict[str, Any]] = []
    if cost:
        new, old = cost["idle"], cost["heartbeating"]
        rows.append(
            {
                "target": "billable actions per task-hour, task aged 2 h+: ≤ 12",
                "value": f"{new['old']['actions_per_task_hour']:g} (before: {old['old']['actions_per_task_hour']:g})",
                "met": new["old"]["actions_per_task_hour"] <= 12,
            }
        )
        rows.append(
            {
                "target": "billable actions per task-hour, a task's first hour (ages 60 s … 1 h): ≤ 90",
                "value": f"{new['first-hour']['actions_per_task_hour']:g} "
                f"(before: {old['first-hour']['actions_per_task_hour']:g})",
                "met": new["first-hour"]["actions_per_task_hour"] <= 90,
            }
        )
        hist = new["first-hour"]["history_events"] + new["old"]["history_events"]
        added = new["old"]["history_events_added_per_task"]
        rows.append(
            {
                "target": "history per task constant in its age",
                "value": f"{added:g} events added per task aged 2 h+ over {new['old']['window_s']} s; every "
                f"history {min(hist)}–{max(hist)} events at ages 1 min … 5 h (13 before the hand-over "
                "to idle polls, 21 after)",
                "met": added == 0 and max(hist) <= 29,
            }
        )
        probes = new.get("probes") or []
        within = sum(1 for p in probes if p.get("within"))
        rows.append(
            {
                "target": "delivery ≤ max(pollInterval, 5 % of the age at the end) (+1 s)",
                "value": f"{within}/{len(probes)} probes within; "
                + ", ".join(
                    f"{p['poll_wait_s']:g}/{p['bound_s']:g} s at {p['age_at_end_s']} s" for p in probes if p.get("ok")
                ),
                "met": bool(probes) and within == len(probes),
            }
        )
    if inf:
        rows.append(
            {
                "target": f"{inf['tasks']:,} tasks aged 10 min–1 h on one worker: CPU ≤ 30 % of a core",
                "value": f"{inf['worker_cpu_pct_of_core']:g} % (before, {before.get('tasks', 0):,} tasks: "
                f"{before.get('worker_cpu_pct_of_core', '–')} %)",
                "met": inf["worker_cpu_pct_of_core"] <= 30,
            }
        )
        rows.append(
            {
                "target": "… RSS < 500 MB",
                "value": f"{inf['rss_peak_mb']:g} MB (before: {before.get('rss_peak_mb', '–')} MB)",
                "met": inf["rss_peak_mb"] < 500,
            }
        )
        sched = inf.get("schedule") or {}
        rows.append(
            {
                "target": "… all polled on schedule",
                "value": f"{sched.get('late')} of {sched.get('gaps')} gaps late "
                f"(worst gap {sched.get('worst_gap_over_schedule')}× the schedule's)",
                "met": sched.get("gaps", 0) > 0 and sched.get("late") == 0,
            }
        )
        c = inf.get("cancel_s") or {}
        if c:
            rows.append(
                {
                    "target": "a cancel reaches a waiting old task within max(5 s, its poll gap)",
                    "value": f"cancel → outcome p50 {c['p50']} s, max {c['max']} s over {len(inf['cancels'])} "
                    "tasks between polls 30 s … 3 min apart",
                    "met": c["all_cancelled"] and (c["max"] or 99) <= 5,
                }
            )
    return rows


def render_idle(res: dict[str, Any]) -> list[str]:
    idle = res.get("idle_waits")
    if not idle:
        return []
    lines = [
        "",
        "### Waiting at the limit: nothing running between polls (idle) vs one heartbeating activity per wait",
        "",
    ]
    cost = idle.get("cost")
    if cost:
        lines += [
            f"Billable actions per task-hour ({cost['tiles']} tasks aged 60 s … 1 h and {cost['old']} aged 2 … 5 h per "
            f"design, held open; pollInterval {cost['poll_ms']} ms):",
            "",
            "| design | ages | window s | actions/task-hour | = attempts | + heartbeats | + workflow | "
            "history events |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for design in DESIGNS:
            for name in ("first-hour", "old"):
                r = cost[design][name]
                lines.append(
                    f"| {design} | {r['ages_s']} s | {r['window_s']} | **{r['actions_per_task_hour']:g}** | "
                    f"{r['attempts_per_task_hour']:g} | {r['heartbeats_per_task_hour']:g} | "
                    f"{r['workflow_actions_per_task_hour']:g} | {r['history_events']} |"
                )
    rows = [r for r in (idle.get("inflight"), idle.get("inflight_before")) if r]
    if rows:
        lines += [
            "",
            "| in flight | tasks | worker CPU % of a core | RSS peak MB | Temporal CPU % | dev server RPCs/s | "
            "worker RPCs/s | MCP req/s | heartbeats/s | late gaps |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in rows:
            s = r.get("schedule") or {}
            lines.append(
                f"| {r['design']} | {r['tasks']:,} | {r['worker_cpu_pct_of_core']:g} | {r['rss_peak_mb']:g} | "
                f"{r['temporal_cpu_pct_of_core']:g} | {r['dev_server_rpcs_per_s_all_workers']:g} | "
                f"{r['worker_temporal_rpcs_per_s']:g} | {r['mcp_requests_per_s']:g} | {r['heartbeats_per_s']:g} | "
                f"{s.get('late')}/{s.get('gaps')} |"
            )
    targets = idle_targets(res)
    if targets:
        lines += ["", "| target | value | met |", "|---|---|---|"]
        for t in targets:
            lines.append(f"| {t['target']} | {t['value']} | {'met' if t['met'] else 'NOT MET'} |")
    return lines


async def phase_idle_waits(env: Any, args: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    cost = CostPhase(
        env,
        tiles=args.idle_tiles,
        old=args.idle_old,
        probes=args.idle_probes,
        window_s=args.idle_window,
        poll_ms=args.poll_ms,
    )
    await cost.start()
    await cost.first_hour()
    if args.idle_inflight:
        out["inflight"] = await phase_inflight(
            env,
            n=args.idle_inflight,
            design="idle",
            poll_ms=args.poll_ms,
            window_s=args.inflight_aged_window,
            cancels=args.idle_cancels,
        )
    if args.idle_inflight_before:
        out["inflight_before"] = await phase_inflight(
            env,
            n=args.idle_inflight_before,
            design="heartbeating",
            poll_ms=args.poll_ms,
            window_s=args.inflight_aged_window,
        )
    # The old tasks need a window of at least two of their 6–10 minute gaps.
    while time.time() - cost.old_w0 < args.idle_old_window:
        await asyncio.sleep(5)
    out["cost"] = await cost.finish()
    return out
