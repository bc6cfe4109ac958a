"""A worker process for the benchmark, so its resident memory is measured alone.

``--design ours``: exactly the project's worker: ``mcp_temporal_tasks.worker.runner.build_workers`` with
``mcp_temporal_tasks.worker.runner.make_activities`` (a Worker with McpTasksPlugin: shared queue + per-process queue),
connected with ``mcp_temporal_tasks.worker.runner.connect`` (pydantic converter). ``--max-cached-workflows N`` and
``--experiment`` change one setting of it (WorkerSettings, or a Worker option passed through ``build_workers``) to price
one cost; the report then says the worker is not ours as shipped.

``--design naive``: ``bench.naive`` workflow and activities, same limits as ours.
``--design minimal``: ``bench.minimal`` (the lower bound: one workflow, one activity), same limits.

Prints ``READY <pid>`` on stdout once polling; SIGTERM shuts down gracefully.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from datetime import timedelta
from typing import Any

from temporalio.worker import Worker

from mcp_temporal_tasks.worker.config import WorkerConfig, WorkerSettings
from mcp_temporal_tasks.worker.runner import (
    build_workers,
    connect,
    make_activities,
    shutdown_executors,
    wait_until_polling,
)


async def main_async(args: argparse.Namespace) -> None:
    experiments = dict(e.partition("=")[::2] for e in args.experiment.split(",") if e)
    if "no-upserts" in experiments:
        # Experiment: price search-attribute and memo upserts (visibility writes) by turning them into no-ops.
        # temporalio.workflow is passed through the sandbox, so the patch reaches the sandboxed workflow.
        import temporalio.workflow as wf

        wf.upsert_search_attributes = lambda *a, **k: None  # type: ignore[assignment]
        wf.upsert_memo = lambda *a, **k: None  # type: ignore[assignment]
    client = await connect(args.address, "default", metrics_port=args.metrics_port)
    closers: list[Any] = []
    if args.design == "ours":
        # The bench simulates a task's age through the server's createdAt (bench.server's age_s); the shipped worker
        # counts a task's age from its own send time (a server clock hours behind must not stretch a fresh task's
        # polls), which would make every back-dated task look fresh. The bench's worker alone reads createdAt.
        from mcp_temporal_tasks.activities import waiting

        age_from_send_time = waiting.task_age_s
        waiting.task_age_s = lambda created_at, submitted_at, now: (
            age_from_send_time(  # type: ignore[assignment]
                created_at, None, now
            )
            if created_at
            else age_from_send_time(created_at, submitted_at, now)
        )
        # The benchmark's requests name their server inline (a trusted caller): allowed explicitly.
        acts = make_activities(WorkerConfig(worker=WorkerSettings(allow_inline_endpoints=True)))
        settings = WorkerSettings(max_concurrent_activities=args.max_activities)
        overrides: dict[str, Any] = {}  # Worker options of the shared worker that WorkerSettings does not have
        if args.max_cached_workflows:
            settings.max_cached_workflows = args.max_cached_workflows
        if experiments.get("wft-slots"):
            settings.max_concurrent_workflow_tasks = int(experiments["wft-slots"])
        if experiments.get("wft-threads"):
            settings.workflow_threads = int(experiments["wft-threads"])
        if "sdk-threads" in experiments:  # the SDK's default pool: one thread per workflow-task slot
            overrides["workflow_task_executor"] = None
        if experiments.get("sticky"):
            overrides["sticky_queue_schedule_to_start_timeout"] = timedelta(seconds=float(experiments["sticky"]))
        if "unsandboxed" in experiments:
            from temporalio.worker import UnsandboxedWorkflowRunner

            overrides["workflow_runner"] = UnsandboxedWorkflowRunner()
        elif "passthrough-wf" in experiments:
            from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

            overrides["workflow_runner"] = SandboxedWorkflowRunner(
                restrictions=SandboxRestrictions.default.with_passthrough_modules("mcp_temporal_tasks")
            )
        workers = build_workers(client, args.task_queue, acts, settings, **overrides)
        closers.append(acts.pool.aclose)
    else:  # the comparison designs: one Worker, same limits as ours
        from bench.minimal import MinimalActivities, MinimalWorkflow
        from bench.naive import NaiveActivities, NaivePollWorkflow

        acts_c, wf = (
            (MinimalActivities(), MinimalWorkflow)
            if args.design == "minimal"
            else (NaiveActivities(), NaivePollWorkflow)
        )
        kw: dict[str, Any] = {}
        if args.max_cached_workflows:
            kw["max_cached_workflows"] = args.max_cached_workflows
        workers = [
            Worker(
                client,
                task_queue=args.task_queue,
                workflows=[wf],
                activities=acts_c.all(),
                max_concurrent_workflow_tasks=200,
                max_concurrent_activities=args.max_activities,
                graceful_shutdown_timeout=timedelta(seconds=5),
                **kw,
            )
        ]
        closers.append(acts_c.aclose)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    tasks = [asyncio.create_task(w.run()) for w in workers]
    if experiments.get("gc"):
        import gc

        async def collect(every_s: float) -> None:
            while True:
                await asyncio.sleep(every_s)
                gc.collect()

        tasks.append(asyncio.create_task(collect(float(experiments["gc"]))))
    if not await wait_until_polling(client, args.task_queue, client.identity, timeout_s=30):
        print("NOT-POLLING", flush=True)
    print(f"READY {os.getpid()}", flush=True)
    await stop.wait()
    await asyncio.gather(*(w.shutdown() for w in workers), return_exceptions=True)
    shutdown_executors(workers)
    for t in tasks:
        t.cancel()
    for close in closers:
        await close()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--design", choices=["ours", "naive", "minimal"], required=True)
    p.add_argument("--address", required=True)
    p.add_argument("--task-queue", required=True)
    p.add_argument("--max-activities", type=int, default=4000)
    p.add_argument("--max-cached-workflows", type=int, default=0)
    p.add_argument("--metrics-port", type=int, default=0, help="serve the SDK's Prometheus metrics here")
    p.add_argument(
        "--experiment",
        default="",
        help="comma-separated: no-upserts, wft-slots=N (max_concurrent_workflow_tasks), sticky=S "
        "(sticky_queue_schedule_to_start_timeout), wft-threads=N (WorkerSettings.workflow_threads), "
        "sdk-threads (the SDK's pool: a thread per slot), gc=S (gc.collect() every S s), unsandboxed, "
        "passthrough-wf (workflow modules passed through the sandbox), uvloop (the worker on uvloop's "
        "event loop; `pip install uvloop` first). Not ours as shipped",
    )
    p.add_argument("--profile", default="", help="write a cProfile of the whole process here")
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    if args.profile:
        import cProfile

        prof = cProfile.Profile()
        prof.enable()
        try:
            asyncio.run(main_async(args))
        finally:
            prof.disable()
            prof.dump_stats(args.profile)
    elif "uvloop" in args.experiment.split(","):
        import uvloop

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(main_async(args))
    else:
        asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
