"""One pass through the CLI: a command works out what it needs (its configuration, where Temporal is) once, at its
start, and hands it down. Counted on the real functions while `run` goes all the way to connecting to Temporal
(nothing listens there: the command ends with exit 3, as a user would see it), and on `answer`, which talks to
Temporal twice (the query, then the update)."""

from __future__ import annotations

import asyncio
import logging
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from mcp_temporal_tasks.worker import config, runner
from mcp_temporal_tasks.worker.cli import calling, operations
from mcp_temporal_tasks.worker.cli.parser import EXIT_UNREACHABLE, CliError, build_parser
from mcp_temporal_tasks.worker.devserver import free_port

pytestmark = pytest.mark.fast

#: What is counted: the configuration file read, and the one address rule (it reads temporal.toml too).
COUNTED = {"load_config": config.load_config, "connect_options": runner.connect_options}


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Counter[str]]:
    """Every binding of the counted functions in the package's loaded modules, wrapped to count its calls; the
    state directory in ``tmp_path``; the root logger (which `run` points at its log file) restored after."""
    seen: Counter[str] = Counter()

    def counting(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            seen[name] += 1
            return fn(*args, **kwargs)

        return wrapper

    for module in [m for n, m in sys.modules.items() if n.startswith("mcp_temporal_tasks") and m is not None]:
        for name, fn in COUNTED.items():
            if getattr(module, name, None) is fn:
                monkeypatch.setattr(module, name, counting(name, fn))
    for var in ("TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE", "MCP_TASKS_CONFIG", "MCP_TASKS_UI_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("MCP_TASKS_STATE_DIR", str(tmp_path / "state"))
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        yield seen
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


def unreachable(argv: list[str], run: Callable[[Any], Any]) -> CliError:
    with pytest.raises(CliError) as caught:
        run(build_parser().parse_args(argv))
    assert caught.value.code == EXIT_UNREACHABLE and "Temporal is unreachable at" in str(caught.value), caught.value
    return caught.value


def test_run_reads_its_configuration_and_finds_temporal_once(
    calls: Counter[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = tmp_path / "worker.toml"
    cfg.write_text('[temporal]\nnamespace = "counted"\n[worker]\nallow_inline_endpoints = true\n')

    async def reachable(*_: Any, **__: Any) -> None:  # the MCP server's check at start: not what is counted here
        return None

    monkeypatch.setattr(calling, "_preflight", reachable)
    address = f"127.0.0.1:{free_port()}"
    for extra in ([], ["--no-worker"]):  # its own worker, and the running workers'
        calls.clear()
        unreachable(
            ["run", "echo", "--url", "http://127.0.0.1:1/mcp", "--config", str(cfg), "--address", address, *extra],
            lambda args: asyncio.run(calling.cmd_run(args)),
        )
        assert calls == {"load_config": 1, "connect_options": 1}, (extra, calls)


def test_answer_reads_its_configuration_and_finds_temporal_once(calls: Counter[str]) -> None:
    # The query fails (nothing listens): with the target built once, the update would reuse it too.
    unreachable(
        ["answer", "some-task", "--response", "{}", "--address", f"127.0.0.1:{free_port()}"], operations.cmd_answer
    )
    assert calls == {"load_config": 1, "connect_options": 1}, calls
