"""The README's and the docs' examples as printed (issue 43): every Python block compiles, the service example runs
on a machine with no Temporal environment set (``TEMPORAL_ADDRESS`` and profiles unset, so ``connect()`` goes to
``localhost:7233`` as Temporal's samples do), says when no worker polls its queue, and prints the outcome once one
does; and no code line is wider than the documentation site shows."""

from __future__ import annotations

import ast
import asyncio
import contextlib
import json
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.doc_pages import REPO_ROOT, blocks, page, pages, readme, section
from tests.peers.harness import Peer
from tests.temporal_harness import address_of, in_process_worker

#: The widest code line the mkdocs-material site shows without scrolling: measured in Chromium on the built site
#: (a code block's inner width over one monospace character's), 80.2 characters at 1280, 1600 and 1920 px wide
#: (the content column stops growing at 61rem).
SITE_CODE_CHARS = 80
#: The quick start's one line (install, then the demo), wider than the site by 4 characters: one line a person copies
#: whole matters more than a scroll bar on the site (the developers' guide: "one line installs and runs the demo").
QUICK_START = "python3 -m venv .venv && .venv/bin/pip install '.[demo]' && .venv/bin/mcp-tasks demo"


def _service_snippet() -> str:
    (code,) = blocks(section(readme(), "## From a service"), "python")
    assert code in blocks(page("temporal-apps.md"), "python"), "the README and docs/temporal-apps.md differ"
    return code


@pytest.mark.fast
def test_every_python_block_compiles() -> None:
    docs = {"README.md": readme(), **{f"docs/{k}": v for k, v in pages().items()}}
    for name, text in docs.items():
        for n, code in enumerate(blocks(text, "python")):  # a fragment may await at its top level
            compile(textwrap.dedent(code), f"{name} python block {n + 1}", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)


@pytest.mark.fast
def test_no_code_line_is_wider_than_the_site_shows() -> None:
    """Issue 43: the site clipped explanations written as 145-character TOML comments; they are tables now."""
    wide = []
    docs = {"README.md": readme(), **{f"docs/{k}": v for k, v in pages().items()}}
    for name, text in docs.items():
        for code in re.findall(r"```[\w-]*\n(.*?)```", text, flags=re.S):
            wide += [
                f"{name}: {len(line)}: {line}"
                for line in code.splitlines()
                if len(line) > SITE_CODE_CHARS and line != QUICK_START
            ]
    assert not wide, "\n".join(wide)


def test_the_quick_start_installs_and_runs_the_demo_in_one_line() -> None:
    """The README's and the site's quick start: its first block is the one line, nothing wrapped around it."""
    for name, text in {"README.md": readme(), "docs/index.md": page("index.md")}.items():
        first = re.search(r"```bash\n(.*?)```", section(text, "## Quick start"), flags=re.S)
        assert first is not None, name
        assert first.group(1).splitlines() == [QUICK_START], name


@contextlib.asynccontextmanager
async def forward(port: int, target: str) -> AsyncIterator[None]:
    """127.0.0.1:``port`` → ``target``, byte for byte (gRPC over HTTP/2 passes as is): the test's Temporal seen at
    the default address, so the snippet runs as printed without starting a second server."""
    host, _, tport = target.rpartition(":")

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(Exception):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        with contextlib.suppress(Exception):
            writer.close()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(host, int(tport))
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    server = await asyncio.start_server(serve, "127.0.0.1", port)
    try:
        yield
    finally:
        server.close()


def _clean_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TEMPORAL_")}
    return {
        **env,
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "PYTHONPATH": str(REPO_ROOT),
        "PYTHONUNBUFFERED": "1",
    }


@pytest.mark.xdist_group("embedded-temporal")  # localhost:7233: one such test at a time (tests/conftest.py)
async def test_the_service_example_runs_as_printed(fastmcp_server: Peer, tmp_path: Path) -> None:
    """On a dev server of its own: its "no worker has polled" line needs a default queue that no worker of another
    test polled in the last minutes (a stopped worker stays listed as a poller for a while)."""
    from mcp_temporal_tasks.worker.devserver import port_open
    from mcp_temporal_tasks.workflows.records import DEFAULT_TASK_QUEUE

    if port_open("127.0.0.1", 7233):
        pytest.fail("something already listens on localhost:7233; this test needs it free")
    script = tmp_path / "service.py"
    script.write_text(_service_snippet())
    env = _clean_env(tmp_path)
    async with _own_temporal() as own, forward(7233, address_of(own)):
        # No worker: within the stated bound (10 s), it says so and names the command; the task waits.
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(script), env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        assert proc.stderr is not None
        try:
            line = (await asyncio.wait_for(proc.stderr.readline(), 30)).decode()
        finally:
            proc.kill()
            await proc.wait()
        assert f"no worker has polled task queue {DEFAULT_TASK_QUEUE!r} for 10 s" in line, line
        assert f"mcp-tasks worker --task-queue {DEFAULT_TASK_QUEUE}" in line, line
        # With a worker serving [servers.billing]: the same script, run again, prints the outcome.
        from mcp_temporal_tasks.activities.activity_io import ServerConfig

        async with in_process_worker(
            own.client,
            task_queue=DEFAULT_TASK_QUEUE,
            servers={"billing": ServerConfig(url=fastmcp_server.url)},
        ):
            run = await asyncio.create_subprocess_exec(
                sys.executable, str(script), env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE
            )
            out, err = await asyncio.wait_for(run.communicate(), 90)
    outcome = json.loads(out)
    assert (outcome["workflow_id"], outcome["outcome"]) == ("charge-42", "completed"), err.decode()[-2000:]
    assert "Traceback" not in err.decode(), err.decode()[-2000:]


#: The worker's billing server for the large-result run: fastmcp over stdio, whose charge_card answers 1 MiB of text.
_BIG_BILLING = """
from fastmcp import FastMCP

mcp = FastMCP("billing")


@mcp.tool
def charge_card(amount_cents: int, idempotency_key: str = "") -> str:
    return f"RECEIPT {amount_cents} " + "r" * (1024 * 1024)


mcp.run()
"""


@contextlib.asynccontextmanager
async def _own_temporal() -> AsyncIterator[Any]:
    """A dev server of a test's own (the snippet's workflow id is fixed, and its default queue is every worker's)."""
    from temporalio.common import SearchAttributeKey
    from temporalio.contrib.pydantic import pydantic_data_converter
    from temporalio.testing import WorkflowEnvironment

    from mcp_temporal_tasks.workflows.records import SEARCH_ATTRIBUTE_NAMES
    from tests.temporal_harness import temporal_binary

    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_binary(),
        data_converter=pydantic_data_converter,
        search_attributes=[SearchAttributeKey.for_keyword(n) for n in SEARCH_ATTRIBUTE_NAMES],
        ui=False,
        dev_server_log_level="error",
    )
    try:
        yield env
    finally:
        await env.shutdown()


def _machine(home: Path, **extra: str) -> dict[str, str]:
    """A machine's environment: its own HOME, no Temporal, store or AWS variable of this one, then ``extra``."""
    env = {k: v for k, v in _clean_env(home).items() if not k.startswith(("MCP_TASKS_", "AWS_"))}
    return {**env, **extra}


@pytest.mark.xdist_group("embedded-temporal")  # localhost:7233: one such test at a time (tests/conftest.py)
async def test_the_service_example_reads_a_large_result(tmp_path: Path) -> None:
    """Issue 57: the snippet as printed reads a 1 MiB result (stored outside the history) on the worker's machine with
    nothing set, and on another machine (its own HOME and state directory) with only the store's environment set."""
    from mcp_temporal_tasks.worker.devserver import port_open
    from mcp_temporal_tasks.workflows.records import DEFAULT_TASK_QUEUE
    from tests.peers.s3 import AWS, BUCKET, running_s3
    from tests.temporal_harness import worker_process, write_config

    if port_open("127.0.0.1", 7233):
        pytest.fail("something already listens on localhost:7233; this test needs it free")
    script = tmp_path / "service.py"
    script.write_text(_service_snippet())
    billing = tmp_path / "billing.py"
    billing.write_text(_BIG_BILLING)
    cfg = write_config(tmp_path / "worker.toml", {"billing": {"command": [sys.executable, str(billing)]}})
    with running_s3() as s3:
        store = {
            "MCP_TASKS_STORAGE_BUCKET": BUCKET,
            "MCP_TASKS_STORAGE_ENDPOINT": s3.endpoint,
            "MCP_TASKS_STORAGE_PREFIX": "service-snippet/",
            **AWS,
        }
        machines = {
            # One machine, the embedded default: the worker and the service share HOME, nothing is set.
            "one machine": (_machine(tmp_path / "one"), _machine(tmp_path / "one")),
            # Two: each its own HOME (and so its own state directory); the same store's variables on both.
            "two machines": (_machine(tmp_path / "a", **store), _machine(tmp_path / "c", **store)),
        }
        for name, (worker_env, service_env) in machines.items():
            async with _own_temporal() as own, forward(7233, address := address_of(own)):
                with worker_process(address, DEFAULT_TASK_QUEUE, cfg, env=worker_env):
                    run = await asyncio.create_subprocess_exec(
                        sys.executable,
                        str(script),
                        env=service_env,
                        cwd=tmp_path,
                        stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE,
                    )
                    out, err = await asyncio.wait_for(run.communicate(), 120)
                # A client whose store cannot read the claim: our error, naming the setting, not the SDK's TMPRL1105.
                from temporalio.client import Client

                from mcp_temporal_tasks import NoPayloadStore, get_outcome
                from mcp_temporal_tasks.worker.config import StorageSettings
                from mcp_temporal_tasks.worker.storage import with_storage
                from mcp_temporal_tasks.worker.temporal_client import DATA_CONVERTER

                converter = (
                    DATA_CONVERTER
                    if name == "one machine"
                    else with_storage(DATA_CONVERTER, StorageSettings(local_dir=str(tmp_path / "elsewhere")))
                )
                storeless = await Client.connect(address, data_converter=converter)
                with pytest.raises(NoPayloadStore, match="MCP_TASKS_STORAGE_DRIVER") as refused:
                    await get_outcome(storeless, "charge-42", no_worker_s=None)
                print(f"{name}, a client without the store: {refused.value}")
                assert ("aws.s3driver" in str(refused.value)) == (name == "two machines")
            assert out, f"{name}: the snippet printed nothing: {err.decode()[-2000:]}"
            outcome = json.loads(out)
            text = outcome["result"]["content"][0]["text"]
            print(f"{name}: {outcome['outcome']}, result text {len(text)} chars, starts {text[:14]!r}")
            assert outcome["outcome"] == "completed" and text.startswith("RECEIPT 1000 ") and len(text) > 1024 * 1024
            assert "Traceback" not in err.decode(), err.decode()[-2000:]
        stored = list((tmp_path / "one" / ".local/state/mcp-tasks/payloads").rglob("*.bin"))
        assert stored, "the one-machine run stored nothing in the embedded store"
        # The figure docs/operating.md gives: the activity's result and the workflow's outcome, one object each.
        print("embedded store: " + ", ".join(f"{p.parent.parent.name}/{p.stat().st_size} B" for p in sorted(stored)))
        # Each holds the result once (the server's ~2 MiB: its text, and fastmcp's structuredContent copy of it); the
        # activity's output carried it twice (start.result and payload.result): 4.2 MB.
        assert len(stored) == 2 and all(p.stat().st_size < 2.5 * 1024 * 1024 for p in stored)
        assert not (tmp_path / "c" / ".local/state/mcp-tasks/payloads").exists()
        assert s3.keys(prefix="service-snippet/"), "the two-machine run stored nothing in the bucket"
