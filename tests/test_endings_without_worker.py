"""Issue 57: how a task ended stays readable in the Temporal UI after every worker is gone. The UI's details of a
finished task are read by query (a worker answers it); its memo and search attributes are read from Temporal itself:
the memo's ``ending`` (outcome, class, the server's words, reason) on the workflow's page, ``McpOutcome`` as a
column of the UI's list, which tells ``tool_error`` from ``rejected`` where the Status column says Failed for both."""

from __future__ import annotations

import json
from typing import Any

from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle

from mcp_temporal_tasks.activities.activity_io import Endpoint
from mcp_temporal_tasks.workflows.client import outcome_of, start_mcp_task
from mcp_temporal_tasks.workflows.records import SA_OUTCOME, McpTaskRequest, Outcome
from mcp_temporal_tasks.workflows.task_error import ENDING_MEMO, ENDING_TEXT_CAP
from tests.peers.harness import Peer
from tests.temporal_harness import eventually, in_process_worker, keep_history, unique


async def test_every_ending_is_readable_with_no_worker(client: Client, fastmcp_server: Peer) -> None:
    queue = unique("q-endings")
    server = Endpoint(url=fastmcp_server.url or "")
    requests = {
        "tool_error": McpTaskRequest(server=server, tool="rate_limited"),
        "rejected": McpTaskRequest(server=server, tool=unique("no_such_tool")),
        "cancelled": McpTaskRequest(server=server, tool="cancellable", arguments={"seconds": 60}),
    }
    async with in_process_worker(client, task_queue=queue):
        handles = {
            name: await start_mcp_task(client, request, workflow_id=unique(f"ending-{name}"), task_queue=queue)
            for name, request in requests.items()
        }
        await handles["cancelled"].cancel()
        outcomes = {name: await outcome_of(handle) for name, handle in handles.items()}
        for name, handle in handles.items():  # with the `ending-in-memo` marker, for tests/test_replay.py
            await keep_history(handle, f"ending_in_memo_{name}")
    # No worker polls the queue any more: what follows is what the UI reads (DescribeWorkflowExecution).
    assert {n: o.outcome.value for n, o in outcomes.items()} == {n: n for n in requests}
    for name, handle in handles.items():
        desc = await handle.describe()
        ending = (await desc.memo())[ENDING_MEMO]
        outcome = outcomes[name]
        print(f"{name}: status {desc.status.name if desc.status else None}, memo ending {json.dumps(ending)}")
        assert ending["outcome"] == name and ending["tool"] == requests[name].tool
        assert ending["reason"] == (outcome.reason and " ".join(outcome.reason.split())[:ENDING_TEXT_CAP])
        assert ending["classification"] == (outcome.classification.value if outcome.classification else None)
        assert len(json.dumps(ending)) < 4 * ENDING_TEXT_CAP  # bounded, whatever the server said

        # The list's McpOutcome column tells the endings apart, where Status says Failed for two of them.
        async def listed(h: WorkflowHandle[Any, Any] = handle, n: str = name) -> bool:
            return (await h.describe()).typed_search_attributes.get(SA_OUTCOME) == n

        await eventually(listed, 10, f"McpOutcome = {name!r}")
    assert outcomes["tool_error"].error is None and "429" in (
        (await (await handles["tool_error"].describe()).memo())[ENDING_MEMO]["server_says"] or ""
    )
    statuses = {n: (await h.describe()).status for n, h in handles.items()}
    assert statuses["tool_error"] == statuses["rejected"] == WorkflowExecutionStatus.FAILED
    assert statuses["cancelled"] == WorkflowExecutionStatus.CANCELED
    assert outcomes["cancelled"].outcome == Outcome.CANCELLED
