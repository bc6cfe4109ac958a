"""Issue 43: every command the CLI prints works when typed as printed (it carries --config, --address and
--task-queue), and a command that finds no Temporal says where it looked, why in words, and how to start one."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

from tests.peers.harness import Peer
from tests.temporal_harness import ENV, address_of, cli, one_json, stop_process, unique


async def test_the_worker_hint_of_a_detached_run_completes_the_task(temporal_env: Any, fastmcp_server: Peer,
                                                                    tmp_path: Path) -> None:
    """`run … --server demo --config good.toml --detach`, then `status` with no worker: its hint names the
    configuration the task was started with; typed as printed, that worker completes the task."""
    address, queue, wid = address_of(temporal_env), unique("hints"), unique("hint")
    good = tmp_path / "good.toml"
    good.write_text(f'[temporal]\ntask_queue = "{queue}"\n[servers.demo]\nurl = "{fastmcp_server.url}"\n')
    rc, _, err = await cli("run", "slow_echo", "--server", "demo", "--config", str(good), "--detach", "--id", wid,
                           "--args", '{"seconds": 0.2, "text": "hint"}', "--address", address)
    assert rc == 0, err
    wanted = f"worker --task-queue {queue} --address {address} --config {good}"
    assert wanted in err, err
    rc, _, err = await cli("status", wid, "--address", address)  # another shell: no --config
    assert rc == 3 and wanted in err and "Traceback" not in err, err
    command = re.search(r"start one: (.+)$", err.strip()).group(1)  # type: ignore[union-attr]
    worker = subprocess.Popen(shlex.split(command), cwd=tmp_path, env=ENV, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        rc, out, err = await cli("result", wid, "--wait", "--json", "--address", address, timeout=60)
        assert rc == 0 and one_json(out)["outcome"] == "completed", err[-2000:]
    finally:
        stop_process(worker)


async def test_no_temporal_says_where_why_and_how_to_start_one() -> None:
    from mcp_temporal_tasks.worker.devserver import free_port

    address = f"127.0.0.1:{free_port()}"
    # status, result, list and cancel connect through one function (worker/cli/connection.py: temporal()).
    for argv in (["status", "x"], ["list"]):
        rc, _, err = await cli(*argv, "--address", address)
        assert rc == 3 and "Traceback" not in err, err
        assert f"Temporal is unreachable at {address}: nothing listens there (connection refused); " in err, err
        assert "tonic" not in err and "dev-server" in err and "--address localhost:7233" in err, err
