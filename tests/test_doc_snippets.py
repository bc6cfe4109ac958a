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
            wide += [f"{name}: {len(line)}: {line}" for line in code.splitlines() if len(line) > SITE_CODE_CHARS]
    assert not wide, "\n".join(wide)


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
async def test_the_service_example_runs_as_printed(temporal_env: Any, fastmcp_server: Peer, tmp_path: Path) -> None:
    from mcp_temporal_tasks.worker.devserver import port_open
    from mcp_temporal_tasks.workflows.records import DEFAULT_TASK_QUEUE

    if port_open("127.0.0.1", 7233):
        pytest.fail("something already listens on localhost:7233; this test needs it free")
    script = tmp_path / "service.py"
    script.write_text(_service_snippet())
    env = _clean_env(tmp_path)
    async with forward(7233, address_of(temporal_env)):
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
            temporal_env.client,
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
