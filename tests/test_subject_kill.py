"""A worker SIGKILLed between the authorization server's refresh answer and storing it; then every token the run
handed out searched for everywhere it must not be.

Real parts: oidc-provider (``tests/peers/ts/oauth_user.mjs``: rotation on, 7 s access tokens, introspection) in front
of the TypeScript SDK's server (``whoami``: the ``sub`` its introspection gave for the call's token), a Temporal dev
server on a SQLite file of this test, an ``mcp-tasks worker`` process, ``mcp-tasks login --callback``.

The kill: worker A (a process) runs with ``MCP_TASKS_TEST_PAUSE_AFTER_REFRESH`` (``authorization_code._test_pause``):
once it holds the authorization server's answer to its refresh, before the store has it, it writes its pid and waits;
the test sends SIGKILL to that pid. The refresh token A sent is spent (rotation), its answer lost. Worker B (in this
process) takes the task's wait over: it finds the grant marked "refreshing", never sends that refresh token again,
and its first read refused asks for the subject's consent again: the task waits in AWAITING_AUTHORIZATION (the URL
in its memo), reading no more. The person follows the URL, ``mcp-tasks login --callback`` stores the new grant and
wakes the task, its next read succeeds and the task completes as its subject with the one ``tools/call`` A sent: no
replay, no loop, no ``invalid_grant``.

Then the search (issue 55: no secret in workflow inputs, histories, memo, search attributes or logs): every access and
refresh token the authorization server issued (its ``OAUTH_ISSUED`` file: the tokens lost with A too) is looked for in
every event of every workflow's history, their descriptions (memo, search attributes), A's stdout and stderr, B's
log records, the CLI's stdout and stderr, Temporal's SQLite file (with its WAL) and the token store's raw bytes: none
is anywhere. The subject's name is looked for in the same places as a control that the search reads what it claims to.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import signal
from pathlib import Path
from typing import Any

import pytest
from cryptography.fernet import Fernet
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from mcp_temporal_tasks.activities.activity_io import AUTHORIZATION_MEMO
from mcp_temporal_tasks.activities.wire.auth.authorization_code import TEST_PAUSE_ENV
from mcp_temporal_tasks.worker.config import load_config
from mcp_temporal_tasks.worker.devserver import DevServer, free_port
from mcp_temporal_tasks.workflows.client import outcome_of, start_mcp_task
from mcp_temporal_tasks.workflows.records import McpTaskRequest, Outcome, Timeouts
from tests.peers.harness import consent_as, oauth_user_server, read_peer_log, ts_http_peer
from tests.temporal_harness import (
    TRUSTED,
    WorkerProcess,
    cli,
    eventually,
    in_process_worker,
    tool_calls,
    unique,
    until,
    write_config,
)

CLIENT = "mcp-tasks-test"
REDIRECT = "http://127.0.0.1:9/callback"  # never reached: the person stops at the redirect to it
RESOURCE_SERVER = {"client_id": "mcp-rs", "client_secret": "rs-introspection-secret"}
SUBJECT = "alice-kill"
#: Refreshed 2 s before expiry (refresh_margin_s): due 8 s after the consent, long after the task's tools/call (sent
#: at once), so that the refresh falls in its wait.
TTL_S = 10
#: Heartbeats every 2 s: worker B takes the dead worker's wait over 2 s after the kill.
KILL = Timeouts(heartbeat_s=2.0, poll_floor_s=0.05, owner_pickup_s=4, submit_s=60)


async def person(url: str, subject: str) -> str:
    return await consent_as(url, subject, REDIRECT)


#: A consent URL at oidc-provider (its authorization endpoint is ``/auth``).
CONSENT_URL = re.compile(r"https?://[^\s\"'()]+/auth\?[^\s\"'()]+")


async def consent_asked(handle: Any) -> str | None:
    """The consent URL the running task waits for (AWAITING_AUTHORIZATION, ``consent-read``): in its memo, as the
    UI shows it."""
    asked = (await (await handle.describe()).memo()).get(AUTHORIZATION_MEMO)
    url = asked.get("url") if isinstance(asked, dict) else None
    return url if isinstance(url, str) and CONSENT_URL.fullmatch(url) else None


async def test_worker_killed_between_refresh_answer_and_store_then_no_token_anywhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    issued = tmp_path / "issued.jsonl"
    store_dir = tmp_path / "store"
    env = {
        "MCP_TASKS_TOKEN_KEY": Fernet.generate_key().decode(),
        "MCP_TASKS_TOKEN_DIR": str(store_dir),
        "MCP_TASKS_STATE_DIR": str(tmp_path / "state"),
    }
    for name, value in env.items():  # the in-process worker's (B's) store: the same as A's
        monkeypatch.setenv(name, value)
    caplog.set_level(logging.DEBUG)  # B's logs, searched with the others
    clients = [
        {"client_id": CLIENT, "redirect_uris": [REDIRECT]},
        {
            **RESOURCE_SERVER,
            "token_endpoint_auth_method": "client_secret_basic",
            "grant_types": [],
            "response_types": [],
            "redirect_uris": [],
        },
    ]
    server = DevServer(db=tmp_path / "temporal.db", port=free_port(), ui_port=None)
    starting = asyncio.create_task(asyncio.to_thread(server.start, timeout_s=90))
    first: WorkerProcess | None = None
    try:
        with (
            oauth_user_server(tmp_path, clients=clients, token_ttl_s=TTL_S, issued=issued) as auth_server,
            ts_http_peer(
                tmp_path, stateless=True, auth={"issuer": auth_server.url or "", **RESOURCE_SERVER}, name="ts-whoami"
            ) as peer,
        ):
            await starting
            client = await Client.connect(server.address, data_converter=pydantic_data_converter)
            auth = {"type": "authorization_code", "client_id": CLIENT, "redirect_uri": REDIRECT}
            cfg = write_config(tmp_path / "w.toml", {"s": {"url": peer.url, "auth": auth}})
            queue = unique("kill-refresh")
            pid_file = tmp_path / "paused.pid"
            first = WorkerProcess(server.address, queue, cfg, env={**env, TEST_PAUSE_ENV: str(pid_file)})
            await asyncio.to_thread(first.wait_ready)

            async def task(seconds: float) -> Any:
                return await start_mcp_task(
                    client,
                    McpTaskRequest(
                        server="s", tool="whoami", arguments={"seconds": seconds}, principal=SUBJECT, timeouts=KILL
                    ),
                    workflow_id=unique("whoami"),
                    task_queue=queue,
                )

            # No grant yet: the task waits for the subject's consent (the URL in its memo, as the UI shows it); the
            # person gives it and hands the answer with `mcp-tasks login --callback`, and the same task completes.
            consenting = await task(0)

            async def waiting_url() -> str | None:
                memo = await (await consenting.describe()).memo()
                asked = memo.get(AUTHORIZATION_MEMO)
                return asked.get("url") if isinstance(asked, dict) else None

            url = await eventually(waiting_url, 60, "the task waiting for consent")
            code, out, err = await cli(
                "login", "--callback", await person(url, SUBJECT), "--json", "--address", server.address, env=env
            )
            assert code == 0, (code, out[-1500:], err[-1500:])
            consented = await asyncio.wait_for(outcome_of(consenting), 60)
            assert consented.outcome == Outcome.COMPLETED, consented
            # A task longer than its token: tools/call with the consented token, then a wait whose polls need a
            # refresh. A, holding the authorization server's answer, pauses before the store; it is killed there.
            mark = peer.log_mark()
            handle = await task(TTL_S + 2)
            await until(lambda: pid_file.exists() and pid_file.read_text().endswith("\n"), 30, "the paused refresh")
            assert len(tool_calls(peer, mark, "whoami")) == 1, "the refresh came before the task's tools/call"
            pid = int(pid_file.read_text())
            assert pid == first.proc.pid
            os.kill(pid, signal.SIGKILL)
            first.proc.wait(10)
            refreshes = [e for e in auth_server.log() if e.get("grant_type") == "refresh_token"]
            assert [e["ok"] for e in refreshes] == [True], refreshes  # the one A sent: answered, then lost
            servers = load_config(cfg).servers
            settings = TRUSTED.model_copy(update={"allow_mixed_servers": True})  # A is still listed as a poller
            async with in_process_worker(client, task_queue=queue, servers=servers, settings=settings):
                # B takes the wait over: the grant is marked "refreshing", so its refresh token is not sent again;
                # B's read is refused (401) and asks for the subject's consent again: the task waits for it (the URL in
                # its memo), never a replay.
                again = await eventually(lambda: consent_asked(handle), 40, "the consent asked again")
                # The person consents again (`mcp-tasks login --callback`): the wait's next read has a token, and
                # the task completes as its subject, with the one tools/call A sent.
                code, out, err = await cli(
                    "login", "--callback", await person(again, SUBJECT), "--json", "--address", server.address, env=env
                )
                cli_output = out + err
                assert code == 0, (code, out[-1500:], err[-1500:])
                done = await asyncio.wait_for(outcome_of(handle), 60)
            assert done.outcome == Outcome.COMPLETED, done
            assert done.result is not None and done.result["structuredContent"] == {"subject": SUBJECT}, done.result
            assert len(tool_calls(peer, mark, "whoami")) == 1  # no replay
            log = auth_server.log()
            assert [e for e in log if not e.get("ok")] == [], log  # no invalid_grant: no refresh token sent twice
            assert [e["grant_type"] for e in log] == ["authorization_code", "refresh_token", "authorization_code"]
            histories, described = await everything_temporal_holds(client)
            first.stop()
        tokens = issued_tokens(issued)
        assert len(tokens) == 6, tokens.values()  # 3 token answers (2 consents, 1 refresh), each access + refresh
    finally:
        if first is not None:
            first.stop()
        await asyncio.to_thread(server.stop)
    store_bytes = b"".join(p.read_bytes() for p in store_dir.iterdir() if p.is_file())
    sqlite = b"".join(p.read_bytes() for p in tmp_path.glob("temporal.db*"))
    places = {
        "histories": histories,
        "memo and search attributes": described,
        "worker A's stdout/stderr": "\n".join(first.lines).encode(),
        "worker B's logs": caplog.text.encode(),
        "the CLI's stdout/stderr": cli_output.encode(),
        "Temporal's SQLite file": sqlite,
        "the token store's raw bytes": store_bytes,
    }
    hits = {(where, kind) for where, data in places.items() for token, kind in tokens.items() if token in data}
    sizes = ", ".join(f"{where} {len(data)} B" for where, data in places.items())
    print(f"{len(tokens)} tokens searched for in {sizes}: {len(hits)} hits")
    assert hits == set(), sorted(hits)
    # The control: the search reads what it claims to (the subject, the task's principal, is there in plain text;
    # the consent URLs are in the logs).
    for where in ("histories", "Temporal's SQLite file", "worker A's stdout/stderr", "worker B's logs"):
        assert SUBJECT.encode() in places[where], where
    assert b"whoami" in described
    # ... and Temporal's file keeps history payloads as they are (the tool's answer, only in history events, is there).
    assert f"subject={SUBJECT}".encode() in sqlite
    assert SUBJECT.encode() not in store_bytes  # encrypted: not even the subject's name


def issued_tokens(path: Path) -> dict[bytes, str]:
    tokens: dict[bytes, str] = {}
    for line in read_peer_log(path):
        for kind in ("access_token", "refresh_token"):
            if line.get(kind):
                tokens[line[kind].encode()] = kind
    return tokens


async def everything_temporal_holds(client: Client) -> tuple[bytes, bytes]:
    """Every event of every workflow's history (this dev server is the test's own), and every workflow's description
    (memo, search attributes), as the raw protobuf bytes Temporal serves."""
    histories: list[bytes] = []
    described: list[bytes] = []
    async for wf in client.list_workflows():
        handle = client.get_workflow_handle(wf.id, run_id=wf.run_id)
        history = await handle.fetch_history()
        histories.extend(event.SerializeToString() for event in history.events)
        described.append((await handle.describe()).raw_description.SerializeToString())
    assert histories and described
    return b"".join(histories), b"".join(described)
