"""Which subjects a server's tasks may act for: ``[servers.NAME] subjects``, a pattern from trusted configuration.

A caller is trusted to name a task's subject (its ``principal``); the server's configuration says which subjects exist
there at all. A task naming any other, or none, is refused before anything is sent: no session, no consent asked, no
``tools/call``.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from mcp_temporal_tasks.activities.activity_io import ServerConfig
from mcp_temporal_tasks.worker.config import ConfigError, server_config
from mcp_temporal_tasks.workflows.client import outcome_of, start_mcp_task
from mcp_temporal_tasks.workflows.records import MAX_PRINCIPAL, McpTaskRequest, Outcome
from tests.peers.harness import Peer
from tests.temporal_harness import in_process_worker, unique

PEOPLE = r"[a-z][a-z0-9.-]{0,62}@example\.com"


@pytest.mark.fast
def test_the_pattern_admits_its_subjects_only() -> None:
    cfg = server_config("s", {"url": "https://mcp.example.com/mcp", "subjects": PEOPLE})
    assert cfg.subject_refusal("ada@example.com") is None
    for who in ("eve@evil.example", "ada@example.com.evil.example", "x" * 200 + "@example.com", ""):
        assert "is not one of this server's subjects" in (cfg.subject_refusal(who) or ""), who
    assert "names no subject" in (cfg.subject_refusal(None) or "")
    assert server_config("s", {"url": "https://mcp.example.com/mcp"}).subject_refusal(None) is None  # unset: any


@pytest.mark.fast
@pytest.mark.parametrize(
    ("value", "said"),
    [("([", "is not a regular expression"), ("", "at least 1 character"), ("a" * 501, "at most 500 characters")],
)
def test_a_bad_pattern_is_one_clear_config_error(value: str, said: str) -> None:
    with pytest.raises(ConfigError) as caught:
        server_config("s", {"url": "https://mcp.example.com/mcp", "subjects": value})
    assert str(caught.value).startswith("servers.s.subjects") and said in str(caught.value), caught.value


@pytest.mark.fast
def test_a_principal_is_bounded() -> None:
    McpTaskRequest(server="s", tool="t", principal="p" * MAX_PRINCIPAL)
    for bad in ("p" * (MAX_PRINCIPAL + 1), ""):
        with pytest.raises(ValidationError, match="principal"):
            McpTaskRequest(server="s", tool="t", principal=bad)


async def test_a_subject_the_server_does_not_have_is_refused_with_nothing_sent(
    client: Any, fastmcp_server: Peer, queue: str
) -> None:
    servers = {"s": ServerConfig(url=fastmcp_server.url, subjects=PEOPLE)}
    mark = fastmcp_server.log_mark()
    async with in_process_worker(client, task_queue=queue, servers=servers):
        refused = await outcome_of(
            await start_mcp_task(
                client,
                McpTaskRequest(server="s", tool="quick_sync", arguments={"text": "x"}, principal="eve@evil.example"),
                workflow_id=unique("subject-refused"),
                task_queue=queue,
            )
        )
        allowed = await outcome_of(
            await start_mcp_task(
                client,
                McpTaskRequest(server="s", tool="quick_sync", arguments={"text": "x"}, principal="ada@example.com"),
                workflow_id=unique("subject-allowed"),
                task_queue=queue,
            )
        )
    assert refused.outcome == Outcome.REJECTED and refused.reason == "SubjectRefused", refused
    assert (
        refused.error is not None and "'eve@evil.example' is not one of this server's subjects" in refused.error.message
    )
    assert allowed.outcome == Outcome.COMPLETED, allowed
    calls = [line for line in fastmcp_server.log_since(mark) if line["method"] == "tools/call"]
    assert len(calls) == 1  # the allowed subject's; the refused one sent nothing
