"""Issue 29's acceptance, as a user runs it: ``mcp-tasks run charge --url … --replay always --idempotent`` against
the scripted keep-alive server (tests/wire_scripted_server.py) whose ``tasks/get`` replies #2-#4 carry broken
chunked framing followed, on the same connection, by a stale ``404 Not Found``.

A reply that cannot be framed is a transport fault on a read: read again, on a new connection. So for every broken
framing the task ends ``completed`` with exactly one ``tools/call`` at the server; never "session gone", never a
replay, even though replay is allowed.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from mcp_temporal_tasks.workflows.records import McpTaskOutcome
from tests.temporal_harness import address_of, cli, one_json, unique
from tests.wire_scripted_server import FRAMINGS, RESULT_TEXT, acceptance_server, summary


@pytest.mark.parametrize("framing", sorted(FRAMINGS))
async def test_broken_framing_then_a_stale_404_is_read_again_never_replayed(temporal_env: Any, framing: str) -> None:
    server = await acceptance_server(framing).start()
    try:
        code, out, err = await cli(
            "run",
            "charge",
            "--url",
            server.url,
            "--replay",
            "always",
            "--idempotent",
            "--args",
            json.dumps({"amount": 42}),
            "--json",
            "--id",
            unique(f"charge-{framing}"),
            "--address",
            address_of(temporal_env),
            timeout=120,
        )
    finally:
        await server.stop()
    seen = summary(server)
    assert len(server.seen("tasks/get")) >= 5, f"the broken replies were never read: {seen}"
    outcome = McpTaskOutcome.model_validate(one_json(out)) if out.strip() else None
    assert outcome is not None, f"exit {code}, no outcome; {seen}; stderr: {err[-2000:]}"
    calls = len(server.seen("tools/call"))
    assert (code, outcome.outcome.value, calls) == (0, "completed", 1), (
        f"{framing}: exit {code}, {outcome.outcome.value} ({outcome.reason}), {calls} tools/call; {seen}"
    )
    assert outcome.result is not None and outcome.result["content"][0]["text"] == RESULT_TEXT
    assert len(outcome.operation_attempts) == 1
