"""Issue 39: an operator is never told "still WORKING" about a workflow that cannot move. A test-only fault (a
workflow registered under ``McpTaskWorkflow``'s name, only in this test's worker, whose second workflow task fails
on purpose; its first completes, so its ``status`` query is answered, saying WORKING, as in the issue's report):
``mcp-tasks run`` (following it) and ``mcp-tasks status`` say ``workflow task failing (attempt N): <error>`` within
5 s, from ``describe``'s pending workflow task and the last ``WorkflowTaskFailed`` event. ``list`` shows it too.

And a task whose reads fail: the live view says since when, how many attempts, the last error and when the read
budget runs out (``read_trouble``, from the waiting activity's heartbeat details)."""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

from temporalio import workflow
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from mcp_temporal_tasks.worker.cli.following import read_trouble
from mcp_temporal_tasks.workflows.records import Ledger, Phase, TaskView
from tests.temporal_harness import CLI, ENV, REPO_ROOT, address_of, cli, one_json, unique

FAULT = "test-only fault: this workflow task fails on purpose"


@workflow.defn(name="McpTaskWorkflow", sandboxed=False)
class FailsOnPurpose:
    """Test-only: never registered by a real worker."""

    @workflow.run
    async def run(self, request: Any) -> None:
        await workflow.sleep(0.2)  # the first workflow task completes: queries are answered from here on
        raise RuntimeError(FAULT)

    @workflow.query
    def status(self) -> TaskView:
        return TaskView(
            workflow_id=workflow.info().workflow_id,
            phase=Phase.WORKING,
            tool="charge",
            server="fake",
            task_id="t-1",
            task_status="working",
            status_message="charging",
            ledger=Ledger(server="fake", tool="charge", request_digest="x", created_at=workflow.now()),
        )


async def test_run_status_and_list_say_the_workflow_task_is_failing(temporal_env: WorkflowEnvironment) -> None:
    queue, wid, address = unique("stuck"), unique("stuck"), address_of(temporal_env)
    async with Worker(temporal_env.client, task_queue=queue, workflows=[FailsOnPurpose]):
        proc = await asyncio.create_subprocess_exec(
            *CLI,
            "run",
            "charge",
            "--server",
            "fake",
            "--no-worker",
            "--task-queue",
            queue,
            "--id",
            wid,
            "--address",
            address,
            cwd=REPO_ROOT,
            env=ENV,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        lines: list[str] = []
        seen: str | None = None
        try:
            assert proc.stderr is not None
            deadline = time.monotonic() + 40
            while seen is None and time.monotonic() < deadline:
                raw = await asyncio.wait_for(proc.stderr.readline(), max(0.1, deadline - time.monotonic()))
                if not raw:
                    break
                lines.append(raw.decode())
                if "workflow task failing (attempt" in lines[-1]:
                    seen = lines[-1]
        finally:
            proc.kill()
            await proc.wait()
        assert seen is not None, "run never said the workflow task fails:\n" + "".join(lines)
        elapsed = float(re.search(r"\[\s*([\d.]+)s\]", seen).group(1))  # type: ignore[union-attr]
        # Said within seconds of the start: 3.1 s on a quiet machine (issue 39's acceptance, by hand); CI's 4 test
        # processes on 2 cores once took 5.6 s for the same lines, hence the room.
        assert elapsed <= 8.0 and FAULT in seen, seen
        assert not any("still WORKING" in line for line in lines), "".join(lines)

        code, out, err = await cli("status", wid, "--address", address)
        assert "workflow task failing (attempt" in out and FAULT in out, (code, out, err)
        assert "WORKING" not in out, out
        print("".join(lines) + out)
        code, out, err = await cli("status", wid, "--address", address, "--json")
        assert "workflow task failing (attempt" in one_json(out)["trouble"], out

        code, out, err = await cli("list", "--address", address, "--json")
        row = next(r for r in one_json(out)["workflows"] if r["workflow_id"] == wid)
        assert "workflow task failing (attempt" in row["trouble"], row
        await temporal_env.client.get_workflow_handle(wid).terminate("test over")


def test_failing_reads_say_since_when_how_often_the_last_error_and_the_budget() -> None:
    now = time.time()
    text = read_trouble(
        {
            "status": "working",
            "failingSince": now - 46,
            "faults": 7,
            "readBudgetEndsAt": now + 254,
            "transportError": "TransportError: connection refused",
        },
        now,
    )
    assert text is not None
    assert text.startswith("reads failing since ") and "(7 attempts; " in text
    assert time.strftime("%H:%M:%S", time.localtime(now - 46)) in text
    assert "last: TransportError: connection refused" in text
    assert f"gives up at {time.strftime('%H:%M:%S', time.localtime(now + 254))}" in text
    assert read_trouble({"failingSince": now - 46, "faults": 8}, now + 1) != text  # a new attempt: a new line
    assert (
        read_trouble(
            {
                "failingSince": now - 46,
                "faults": 7,
                "readBudgetEndsAt": now + 254,
                "transportError": "TransportError: connection refused",
            },
            now + 0.5,
        )
        == text
    )  # else stable
    assert read_trouble({"status": "working", "polls": 3}, now) is None
