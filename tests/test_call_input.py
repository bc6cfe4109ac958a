"""A plain ``tools/call`` of a real runtime (the TypeScript SDK peer) whose server asks for input on the call's own
stream, or cycles that stream before its reply: answered, declined after the bound, refused when malformed, resumed;
never a second ``tools/call``.

The peer runs resumable (the SDK's InMemoryEventStore, ``retry`` 200 ms): ``ask_plain`` sends ``elicitation/create``
(form mode, SEP-1034 defaults) on its tools/call stream; ``cycling_sync`` closes its stream before answering.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from mcp_temporal_tasks.workflows.client import outcome_of, start_mcp_task
from mcp_temporal_tasks.workflows.records import McpTaskRequest, Outcome, Phase
from tests.peers.harness import Peer, ts_http_peer
from tests.temporal_harness import FAST, address_of, cli, keep_history, tool_calls, unique, wait_for_view


@pytest.fixture(scope="module")
def resumable(peer_logs: Path) -> Iterator[Peer]:
    with ts_http_peer(peer_logs, retry_ms=200, name="ts-http-resumable") as peer:
        yield peer


def text_of(out: Any) -> str:
    return str(out.result["content"][0]["text"])


async def start(
    client: Client, peer: Peer, queue: str, tool: str, args: dict[str, Any] | None = None, **kw: Any
) -> Any:
    request = McpTaskRequest(server=peer.endpoint, tool=tool, arguments=args or {}, timeouts=FAST, **kw)
    return await start_mcp_task(client, request, workflow_id=unique(tool), task_queue=queue)


async def test_a_question_on_a_plain_call_is_answered_through_the_cli_with_defaults(
    resumable: Peer, client: Client, queue: str, worker: Any, temporal_env: WorkflowEnvironment
) -> None:
    mark = resumable.log_mark()
    handle = await start(client, resumable, queue, "ask_plain")
    view = await wait_for_view(handle, lambda v: v.phase == Phase.INPUT_REQUIRED and v.pending_inputs)
    (pending,) = view.pending_inputs
    assert pending.method == "elicitation/create" and pending.message == "Approve the plain call?"
    assert pending.requested_schema["properties"]["name"]["default"] == "John Doe"
    # The operator's answer omits the fields that have defaults: SEP-1034 fills them on the way to the server.
    code, out, err = await cli(
        "answer",
        handle.id,
        "--address",
        address_of(temporal_env),
        "--json",
        "--response",
        json.dumps({"action": "accept", "content": {"ok": True}}),
    )
    assert code == 0, err
    assert json.loads(out)["answered"] == [pending.key]
    outcome = await asyncio.wait_for(outcome_of(handle), 60)
    assert outcome.outcome == Outcome.COMPLETED
    assert json.loads(text_of(outcome)) == {"action": "accept", "content": {"ok": True, "name": "John Doe", "age": 30}}
    assert len(tool_calls(resumable, mark, "ask_plain")) == 1
    await keep_history(handle, "plain_call_input_answered")


async def test_a_question_nobody_answers_is_declined_after_the_bound(
    resumable: Peer, client: Client, queue: str, worker: Any
) -> None:
    mark = resumable.log_mark()
    handle = await start(client, resumable, queue, "ask_plain", input_timeout_s=2, on_input_timeout="decline")
    await wait_for_view(handle, lambda v: v.phase == Phase.INPUT_REQUIRED)
    outcome = await asyncio.wait_for(outcome_of(handle), 60)
    assert outcome.outcome == Outcome.COMPLETED and json.loads(text_of(outcome)) == {"action": "decline"}
    assert outcome.reason is not None and "nobody answered within 2s" in outcome.reason
    assert len(tool_calls(resumable, mark, "ask_plain")) == 1
    await keep_history(handle, "plain_call_input_declined")


async def test_a_malformed_form_is_refused_with_a_clear_error_not_asked(
    resumable: Peer, client: Client, queue: str, worker: Any
) -> None:
    mark = resumable.log_mark()
    handle = await start(client, resumable, queue, "ask_plain", {"broken": True})
    outcome = await asyncio.wait_for(outcome_of(handle), 60)
    # The tool got our -32602 naming the problem and reported it as its own error.
    assert outcome.outcome == Outcome.TOOL_ERROR, outcome
    assert "no-such-type" in text_of(outcome) and "not a primitive" in text_of(outcome)
    assert len(tool_calls(resumable, mark, "ask_plain")) == 1


async def test_a_plain_call_whose_stream_the_server_cycles_is_resumed_once_sent(
    resumable: Peer, client: Client, queue: str, worker: Any
) -> None:
    mark = resumable.log_mark()
    gets = len(resumable.events(event="get_stream"))
    handle = await start(client, resumable, queue, "cycling_sync", {"seconds": 0.3, "closes": 2})
    outcome = await asyncio.wait_for(outcome_of(handle), 60)
    assert outcome.outcome == Outcome.COMPLETED and text_of(outcome) == "answered after 2 closed streams"
    assert len(tool_calls(resumable, mark, "cycling_sync")) == 1
    resumed = resumable.events(event="get_stream")[gets:]
    assert len([g for g in resumed if g.get("lastEventId")]) >= 2, resumed
