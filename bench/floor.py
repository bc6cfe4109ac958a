"""The floor: a non-durable asyncio client (``mcp_temporal_tasks.activities.wire.WireSession``) that calls, polls at
the server's pollInterval and reads the inline result. No Temporal, no retries beyond what the loop does."""

from __future__ import annotations

import asyncio
import time

from mcp_temporal_tasks.activities.wire import Endpoint, TaskState, WireSession

from .common import TaskRecord


async def _one(client: WireSession, rec: TaskRecord, args: dict, poll_s: float | None) -> None:
    rec.submitted = time.time()
    try:
        start = await client.start("bench_task", args)
        if start.task is None:  # the server answered inline
            rec.delivered = time.time()
            rec.ok = start.result is not None
            return
        state: TaskState = start.task
        rec.task_id = state.task_id
        polls = 0
        while not state.terminal:
            interval = poll_s if poll_s is not None else (state.poll_interval_ms or 500) / 1000.0
            await asyncio.sleep(interval)
            state = await client.get(state.task_id)
            polls += 1
        payload = await client.result(state)  # inline on the extension: no request
        rec.delivered = time.time()
        rec.ok = state.status == "completed" and payload.result is not None
        rec.extra["polls"] = polls
    except Exception as exc:  # noqa: BLE001 - a benchmark reports, it does not crash
        rec.error = f"{type(exc).__name__}: {exc}"


async def run_floor(
    url: str, *, n: int, concurrency: int, args: dict | list[dict], poll_s: float | None = None, prefix: str = "floor"
) -> tuple[list[TaskRecord], float, float]:
    """Closed loop: at most ``concurrency`` tasks in flight until ``n`` are done. Returns (records, t0, t1)."""
    client = await WireSession.connect(Endpoint(url=url), era="2026-07-28")
    sem = asyncio.Semaphore(concurrency)
    records = [TaskRecord(key=f"{prefix}-{i}") for i in range(n)]
    per_task = args if isinstance(args, list) else [args] * n

    async def guarded(rec: TaskRecord, a: dict) -> None:
        async with sem:
            await _one(client, rec, a, poll_s)

    t0 = time.time()
    try:
        await asyncio.gather(*(guarded(r, a) for r, a in zip(records, per_task)))
    finally:
        await client.aclose()
    return records, t0, time.time()
