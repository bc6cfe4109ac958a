"""What ``mcp-tasks demo`` runs: the dev server, the demo MCP server as a child process, a worker.

This module holds what the demo runs (its server, configuration, tasks and how each ended); the command that runs it,
with its messages, exit codes, Temporal and task queue, is ``worker/cli/serving.py`` (docs/cli.md, ``demo``). Nothing
here imports the CLI.
"""

from __future__ import annotations

import subprocess
import sys

from mcp_temporal_tasks.activities.activity_io import JobBinding, ServerConfig, ToolPolicy
from mcp_temporal_tasks.worker.config import WorkerConfig
from mcp_temporal_tasks.worker.devserver import die_with_parent
from mcp_temporal_tasks.workflows.records import McpTaskOutcome, McpTaskRequest

EXPECTED = {"build": "completed", "export": "tool_error", "payment": "cancelled", "report": "completed"}
#: The demo server's job tools, bound as one job (docs/configuration.md "Three shapes of long work").
REPORT_JOB = JobBinding(
    submit="start_export",
    status="get_export_status",
    result="download_export",
    cancel="cancel_export",
    poll_interval_s=0.5,
    states={"running": "working", "succeeded": "completed", "failed": "failed", "cancelled": "cancelled"},
)


def start_demo_server() -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mcp_temporal_tasks.demo.server",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--poll-interval-ms",
            "250",
        ],
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=die_with_parent,
    )
    assert proc.stderr is not None
    line = proc.stderr.readline()
    if not line.startswith("LISTENING "):
        proc.kill()
        raise RuntimeError(f"demo MCP server did not start: {line.strip() or 'no output'}")
    return proc, line.split()[1]


def demo_config(url: str, task_queue: str) -> WorkerConfig:
    """The worker configuration of the demo: the demo server at ``url``, its tools' policies and its job."""
    cfg = WorkerConfig(
        servers={
            "demo": ServerConfig(
                url=url,
                principal="demo",
                tools={
                    "slow_echo": ToolPolicy(idempotent=True, replay="if_idempotent"),
                    "charge_card": ToolPolicy(idempotent=False, replay="with_approval"),
                },
                jobs={"monthly_report": REPORT_JOB},
            )
        }
    )
    cfg.temporal.task_queue = task_queue
    return cfg


def demo_requests() -> dict[str, McpTaskRequest]:
    """The four tasks, by name (``EXPECTED`` says how each should end), each showing what the project is for:

    1. ``build``: a slow tool that completes (``slow_echo``);
    2. ``export``: a tool that fails with a stored ``429 … retry-after=30`` diagnostic, recovered and classified
       ``retryable`` with ``retry_after_s = 30`` instead of a generic "task failed";
    3. ``payment``: a long tool cancelled mid-flight (``tasks/cancel`` reaches the server; outcome ``cancelled``);
    4. ``report``: a job of plain tools (``start_export`` → ``get_export_status`` → ``download_export``) bound in
       configuration and run as a task, for servers without MCP tasks.
    """
    return {
        "build": McpTaskRequest(
            server="demo", tool="slow_echo", arguments={"seconds": 3, "text": "build #42: 118 tests passed"}
        ),
        "export": McpTaskRequest(server="demo", tool="rate_limited"),
        "payment": McpTaskRequest(server="demo", tool="cancellable", arguments={"seconds": 60}),
        "report": McpTaskRequest(server="demo", tool="monthly_report", arguments={"seconds": 2, "rows": 3}),
    }


def detail(o: McpTaskOutcome) -> str:
    """What the demo's closing table shows of one outcome."""
    if o.outcome.value == "completed" and o.result and o.task_id and o.task_id.startswith("exp-"):
        rows = (o.result.get("structuredContent") or {}).get("rows") or []
        return f"job {o.task_id}: {len(rows)} rows (job tools on a server without MCP tasks)"
    if o.outcome.value == "completed" and o.result:
        return "result: " + " ".join(b.get("text", "") for b in o.result.get("content", []))
    if o.classification is not None:
        text = " ".join(b.get("text", "") for b in (o.result or {}).get("content", []))
        return (
            f"{o.classification.value}, retry after {o.retry_after_s:g}s — stored diagnostic recovered: “{text}”"
            if o.retry_after_s is not None
            else f"{o.classification.value}: {text}"
        )
    return o.reason or ""
