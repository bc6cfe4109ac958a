"""What one idle attempt costs a Python worker before any work of ours: the SDK's floor.

``N`` workflows each run one activity whose every attempt ends at once with a benign, retryable
``ApplicationError(next_retry_delay=gap)``, as ``poll_task`` does between polls, but with no HTTP, no pydantic input
and no converter of ours. The worker's CPU per attempt, split into the Python main thread and the Temporal core's
threads (``/proc/PID/task/*/stat``), is the part of an idle poll no change of ours can remove: at the 89 polls/s of
10,000 tasks aged 10 min … 1 h it is what is left of the 30 % target for the ``tasks/get`` itself.

    python -m bench.attempt_floor [--tasks 600] [--gap-s 7] [--window-s 60]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import sys
import time
from collections.abc import Coroutine
from datetime import timedelta
from typing import Any, TypeVar

from temporalio import activity, workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from mcp_temporal_tasks.worker.devserver import temporal_binary

ATTEMPTS = [0]
T = TypeVar("T")


@activity.defn(name="bench.idle_attempt")
async def idle_attempt(gap_s: float) -> None:
    ATTEMPTS[0] += 1
    raise ApplicationError(
        "working",
        {"status": "working"},
        type="TaskStillWorking",
        next_retry_delay=timedelta(seconds=gap_s),
        category=ApplicationErrorCategory.BENIGN,
    )


@workflow.defn(name="bench.HoldIdle", sandboxed=False)
class HoldIdle:
    @workflow.run
    async def run(self, gap_s: float) -> None:
        await workflow.execute_activity(
            idle_attempt,
            gap_s,
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=RetryPolicy(maximum_attempts=0),
        )


def thread_cpu_s(pid: int) -> dict[str, float]:
    """CPU seconds per thread of ``pid``: the main thread as ``main``, the others summed by name."""
    out: dict[str, float] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                stat = f.read()
        except OSError:  # a thread that ended meanwhile
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        name = "main" if tid == str(pid) else stat[stat.index("(") + 1 : stat.rindex(")")]
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return out


async def measure(tasks: int, gap_s: float, window_s: float) -> dict[str, float]:
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_binary(), dev_server_log_level="error"
    )
    async with env:
        async with Worker(
            env.client,
            task_queue="attempt-floor",
            workflows=[HoldIdle],
            activities=[idle_attempt],
            max_concurrent_activities=2000,
        ):
            for i in range(tasks):
                await env.client.start_workflow(
                    HoldIdle.run, gap_s * random.uniform(0.8, 1.2), id=f"hold-{i}", task_queue="attempt-floor"
                )
            await asyncio.sleep(3 * gap_s)  # every workflow past its first attempt: only retries from here
            a0, c0, t0 = ATTEMPTS[0], thread_cpu_s(os.getpid()), time.monotonic()
            await asyncio.sleep(window_s)
            a1, c1, t1 = ATTEMPTS[0], thread_cpu_s(os.getpid()), time.monotonic()
    wall, attempts = t1 - t0, max(1, a1 - a0)
    used = {k: v - c0.get(k, 0.0) for k, v in c1.items()}
    total = sum(used.values())
    return {
        "attempts_per_s": round(attempts / wall, 1),
        "cpu_pct_of_core": round(100 * total / wall, 1),
        "ms_per_attempt": round(1000 * total / attempts, 2),
        "main_thread_ms": round(1000 * used.get("main", 0.0) / attempts, 2),
        "other_threads_ms": round(1000 * (total - used.get("main", 0.0)) / attempts, 2),
    }


async def _stoppable(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro``; SIGINT or SIGTERM cancels it, so the worker and the dev server it started are shut down."""
    task = asyncio.ensure_future(coro)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, task.cancel)
    return await task


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", type=int, default=600)
    p.add_argument("--gap-s", type=float, default=7.0, help="seconds between a workflow's attempts (±20 %%)")
    p.add_argument("--window-s", type=float, default=60.0)
    args = p.parse_args()
    try:
        out = asyncio.run(_stoppable(measure(args.tasks, args.gap_s, args.window_s)))
    except asyncio.CancelledError:  # SIGINT/SIGTERM: the worker and the dev server were stopped on the way out
        print("attempt_floor: stopped", file=sys.stderr)
        raise SystemExit(130) from None
    print(
        f"{args.tasks} idle workflows, one attempt per {args.gap_s:g} s: {out['attempts_per_s']} attempts/s, worker "
        f"{out['cpu_pct_of_core']} % of a core = {out['ms_per_attempt']} ms per attempt (Python main thread "
        f"{out['main_thread_ms']} ms, Temporal core threads {out['other_threads_ms']} ms)",
        flush=True,
    )
    # The core's threads can still call into Python while the interpreter finalizes (a fatal PyGILState_Release
    # at exit); everything is measured and printed, so leave without finalizing.
    os._exit(0)


if __name__ == "__main__":
    main()
