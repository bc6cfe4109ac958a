"""The fault matrix: McpTaskWorkflow on a real Temporal dev server, talking to the real peers through a
:class:`~tests.faults.FaultProxy` that injects one fault, once, on the first request of one method.

faults × methods, on the TS SDK stateful HTTP peer (2025-11-25, "legacy") and the fastmcp peer (2026-07-28,
"extension"). Per cell: the outcome, the number of ``tools/call`` the *server* received, and the time to the
outcome (bounded). Retrieval cells and every cell before ``tools/call`` also run with ``replay=always,
idempotent=True``: a resend of a lost read must never become a second ``tools/call``.

Each cell's measurements go to ``tests/faults/last_matrix.json``; ``python -m tests.faults.table`` prints them
as markdown.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError

from mcp_temporal_tasks.activities.wire import Endpoint
from mcp_temporal_tasks.workflows.client import outcome_of, start_mcp_task
from mcp_temporal_tasks.workflows.mcp_task import McpTaskWorkflow
from mcp_temporal_tasks.workflows.records import McpTaskOutcome, McpTaskRequest, Phase, ReplayPolicy, Timeouts
from tests.faults import (
    Fault,
    FaultProxy,
    Malformed,
    RateLimit,
    Refuse,
    ResetAfterSend,
    Rewrite,
    Stall,
    Status,
    Truncated,
)
from tests.peers.harness import Peer
from tests.temporal_harness import settled_calls, unique, wait_for_view

# --- the expectations ------------------------------------------------------------------------------

C, U, X = "completed", "unknown_outcome", "cancelled"
LEG_C_EXT_U = "completed|unknown_outcome"  # legacy|extension

#: method -> fault -> expected outcome ("legacy|extension" where the eras differ). Exactly 1 tools/call, except NO_CALL
#: below.
EXPECTED: dict[str, dict[str, str]] = {
    #                 Refuse  ResetAfterSend  Stall  Malformed    Truncated    Status500    RateLimit
    "initialize": dict(Refuse=C, ResetAfterSend=C, Stall=C, Malformed=C, Truncated=C, Status500=C, RateLimit=C),
    "server/discover": dict(Refuse=C, ResetAfterSend=C, Stall=C, Malformed=C, Truncated=C, Status500=C, RateLimit=C),
    "tools/list": dict(Refuse=C, ResetAfterSend=C, Stall=C, Malformed=C, Truncated=C, Status500=C, RateLimit=C),
    "tools/call": dict(
        Refuse=U,
        ResetAfterSend=LEG_C_EXT_U,
        Stall=C,
        Malformed=LEG_C_EXT_U,
        Truncated=LEG_C_EXT_U,
        Status500=LEG_C_EXT_U,
        RateLimit=C,
    ),
    "tasks/get": dict(Refuse=C, ResetAfterSend=C, Stall=C, Malformed=C, Truncated=C, Status500=C, RateLimit=C),
    "tasks/result": dict(Refuse=C, ResetAfterSend=C, Stall=C, Malformed=C, Truncated=C, Status500=C, RateLimit=C),
    "tasks/update": dict(Refuse=C, ResetAfterSend=C, Stall=C, Malformed=C, Truncated=C, Status500=C, RateLimit=C),
    "tasks/cancel": dict(Refuse=X, ResetAfterSend=X, Stall=X, Malformed=X, Truncated=X, Status500=X, RateLimit=X),
}

#: Which methods each era's client sends (unpinned, the server/discover probe goes first to every server; the TS peer
#: refuses it and gets initialize: its faults are the extension cells' concern, where the probe's answer is used).
METHODS = {
    "legacy": ["initialize", "tools/list", "tools/call", "tasks/get", "tasks/result", "tasks/cancel"],
    "extension": ["server/discover", "tools/list", "tools/call", "tasks/get", "tasks/update", "tasks/cancel"],
}
PRE_CALL = {"initialize", "server/discover", "tools/list"}
#: Cells also run with replay=always, idempotent=True (must still count exactly one tools/call).
REPLAY_METHODS = PRE_CALL | {"tasks/get", "tasks/result", "tasks/update", "tasks/cancel"}

HEARTBEAT_S = 2.0
STALL_S = HEARTBEAT_S + 1.5
REFUSE_S = 2.0
RETRY_AFTER_S = 2
UNREACHABLE_S = 10.0
SLACK_S = 15.0

FAULTS: dict[str, tuple[Callable[[], Fault], float]] = {  # name -> (factory, how long the fault itself lasts)
    "Refuse": (lambda: Refuse(seconds=REFUSE_S), REFUSE_S),
    "ResetAfterSend": (ResetAfterSend, 0.0),
    "Stall": (lambda: Stall(STALL_S), STALL_S),
    "Malformed": (Malformed, 0.0),
    "Truncated": (Truncated, 0.0),
    "Status500": (lambda: Status(500), 0.0),
    "RateLimit": (lambda: RateLimit(retry_after_s=RETRY_AFTER_S), float(RETRY_AFTER_S)),
}

TIMEOUTS = Timeouts(
    heartbeat_s=HEARTBEAT_S, poll_floor_s=0.05, owner_pickup_s=4, submit_s=60, unreachable_s=UNREACHABLE_S
)
PEER_OF = {"legacy": "ts_http_stateful", "extension": "fastmcp_server"}
APPROVE = {"action": "accept", "content": {"account": "acct-7", "approve": True}}
MATRIX_FILE = Path(__file__).parent / "faults" / "last_matrix.json"


#: Cells whose server sees no tools/call at all. Refuse drops the connection *after* the client wrote tools/call
#: and never forwards it: to the client that is a disconnect after sending (it cannot know the request went
#: nowhere), so the honest outcome is unknown_outcome; on 2025-11-25, tasks/list on the session shows no new task
#: either, which still does not prove the call will never arrive, so it is not resent.
NO_CALL = {("tools/call", "Refuse")}


def expected_calls(method: str, fault: str) -> int:
    return 0 if (method, fault) in NO_CALL else 1


def expected(method: str, fault: str, era: str) -> str:
    value = EXPECTED[method][fault]
    if "|" in value:
        legacy, extension = value.split("|")
        return legacy if era == "legacy" else extension
    return value


def bound_s(fault: str) -> float:
    """Heartbeat timeout + the fault's own duration + generous slack."""
    return HEARTBEAT_S + FAULTS[fault][1] + SLACK_S


def min_elapsed_s(method: str, fault: str) -> float:
    """RateLimit before the task exists must honour Retry-After."""
    if fault == "RateLimit" and (method in PRE_CALL or method == "tools/call"):
        return float(RETRY_AFTER_S)
    return 0.0


def cells() -> Iterator[Any]:
    for era, methods in METHODS.items():
        for method in methods:
            for fault in FAULTS:
                for replay in [False, True] if method in REPLAY_METHODS else [False]:
                    yield pytest.param(
                        era, method, fault, replay, id=f"{era}-{method}-{fault}{'-replay' if replay else ''}"
                    )


# --- recording -----------------------------------------------------------------------------------


def record(cell: dict[str, Any]) -> None:
    """Merge one cell's measurements into tests/faults/last_matrix.json (the latest run of each cell wins), under
    an exclusive lock of the file: xdist workers record their cells at the same time."""
    with open(MATRIX_FILE, "a+", encoding="utf-8") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        fh.seek(0)
        try:
            data = json.loads(fh.read())
        except ValueError:  # empty (just created) or cut short by a run that was killed while writing
            data = {"cells": {}}
        key = f"{cell['era']}|{cell['method']}|{cell['fault']}|{'replay' if cell['replay'] else 'never'}"
        data["cells"][key] = cell
        data["updated"] = time.strftime("%Y-%m-%dT%H:%M:%S")
        fh.seek(0)
        fh.truncate()
        fh.write(json.dumps(data, indent=1, sort_keys=True))


# --- one cell ------------------------------------------------------------------------------------


async def drive(
    client: Client, queue: str, proxy: FaultProxy, method: str, replay: bool, hard_cap_s: float
) -> tuple[str, McpTaskOutcome | None, str, Any]:
    """Run one workflow through the proxy; (outcome or failure, outcome object, tool, handle)."""
    tool, args = "slow_echo", {"seconds": 1, "text": unique("fault")}
    if method == "tasks/update":
        tool, args = "ask_user", {}
    elif method == "tasks/cancel":
        tool, args = "cancellable", {"seconds": 60}
    extra: dict[str, Any] = {"replay": ReplayPolicy.ALWAYS, "idempotent": True} if replay else {}
    request = McpTaskRequest(server=Endpoint(url=proxy.url), tool=tool, arguments=args, timeouts=TIMEOUTS, **extra)
    handle = await start_mcp_task(client, request, workflow_id=unique("fault"), task_queue=queue)

    async def steer() -> None:
        if method == "tasks/update":
            view = await wait_for_view(
                handle, lambda v: v.phase == Phase.INPUT_REQUIRED and v.pending_inputs, timeout_s=hard_cap_s
            )
            await handle.execute_update(McpTaskWorkflow.provide_input, {view.pending_inputs[0].key: APPROVE})
        elif method == "tasks/cancel":
            await wait_for_view(handle, lambda v: v.phase == Phase.WORKING and v.task_id, timeout_s=hard_cap_s)
            await handle.cancel()

    try:
        await asyncio.wait_for(steer(), hard_cap_s)
        out = await asyncio.wait_for(outcome_of(handle), hard_cap_s)
        return out.outcome.value, out, tool, handle
    except WorkflowFailureError as exc:
        return f"workflow_failed: {exc.cause}", None, tool, handle
    except (TimeoutError, AssertionError) as exc:
        try:
            await handle.terminate("fault matrix: no outcome in time")
        except Exception:  # noqa: BLE001
            pass
        return f"no_outcome ({type(exc).__name__})", None, tool, handle


@pytest.mark.parametrize("era, method, fault, replay", list(cells()))
async def test_fault_cell(
    request: pytest.FixtureRequest,
    era: str,
    method: str,
    fault: str,
    replay: bool,
    client: Client,
    queue: str,
    worker: Any,
) -> None:
    peer: Peer = request.getfixturevalue(PEER_OF[era])
    want = expected(method, fault, era)
    bound = bound_s(fault)
    with FaultProxy(peer.url or "") as proxy:
        rule = proxy.add(method, FAULTS[fault][0]())
        mark = peer.log_mark()
        t0 = time.monotonic()
        got, out, tool, handle = await drive(client, queue, proxy, method, replay, hard_cap_s=bound + 30)
        elapsed = time.monotonic() - t0
        calls = await settled_calls(peer, mark, tool, client=client, workflows=[handle.id])
        fired = rule.fired
    floor = min_elapsed_s(method, fault)
    checks = {
        "outcome": got == want,
        "one_call": calls == expected_calls(method, fault),
        "bounded": elapsed < bound,
        "fault_fired": fired == 1,
        "retry_after": elapsed >= floor,
    }
    record(
        {
            "era": era,
            "method": method,
            "fault": fault,
            "replay": replay,
            "expected": want,
            "outcome": got,
            "tools_call": calls,
            "seconds": round(elapsed, 2),
            "bound_s": bound,
            "passed": all(checks.values()),
            "failed_checks": [k for k, ok in checks.items() if not ok],
            "reason": out.reason if out else None,
            "attempts": [a.reason for a in out.operation_attempts] if out else None,
        }
    )
    assert fired == 1, f"the fault never fired on {method} (requests seen: {proxy.seen(method)})"
    assert got == want, f"outcome {got!r}, expected {want!r}; reason: {out.reason if out else '-'}"
    assert calls == expected_calls(method, fault), f"the server received {calls} tools/call"
    assert elapsed < bound, f"took {elapsed:.1f}s, bound {bound:.1f}s"
    assert elapsed >= floor, f"took {elapsed:.1f}s: Retry-After {floor:g}s not honoured"


# --- hostile payloads (Rewrite) ----------------------------------------------------------------------

MB = 1024 * 1024
DEEP = 5000
HISTORY_EVENT_CAP = 1 * MB
#: kind -> (expected outcome, which reply is rewritten: "payload" = legacy tasks/result / extension terminal
#: tasks/get, "status" = every tasks/get)
HOSTILE: dict[str, tuple[str, str]] = {
    "result_3MB": (C, "payload"),
    "result_10MB": (C, "payload"),
    "statusMessage_1MiB": (C, "status"),
    "nested_5000": ("decode_failed", "payload"),
    "lone_surrogate": ("decode_failed", "payload"),
}


def _payload_of(message: dict[str, Any], era: str) -> dict[str, Any] | None:
    """The CallToolResult inside a reply: legacy tasks/result's result; extension's completed tasks/get."""
    res = message.get("result")
    if not isinstance(res, dict):
        return None
    if era == "legacy":
        return res if "content" in res else None
    inner = res.get("result")
    return inner if res.get("status") == "completed" and isinstance(inner, dict) else None


def hostile_rewrite(kind: str, era: str) -> Callable[[dict[str, Any]], dict[str, Any] | str]:
    def fn(message: dict[str, Any]) -> dict[str, Any] | str:
        if kind == "statusMessage_1MiB":
            res = message.get("result")
            if isinstance(res, dict) and "status" in res:
                res["statusMessage"] = "s" * MB
            return message
        payload = _payload_of(message, era)
        if payload is None:
            return message
        if kind.startswith("result_"):
            size = int(kind.split("_")[1].removesuffix("MB")) * MB
            payload["content"] = [{"type": "text", "text": "x" * size}]
            return message
        placeholder = "__FAULT_PROXY_PLACEHOLDER__"
        if kind == "nested_5000":
            payload.setdefault("structuredContent", {})["deep"] = placeholder
            return json.dumps(message).replace(f'"{placeholder}"', "[" * DEEP + "]" * DEEP)
        payload["content"] = [{"type": "text", "text": placeholder}]
        # A lone high surrogate, as a JSON escape: valid JSON text, not encodable as UTF-8 once decoded.
        return json.dumps(message).replace(placeholder, "bad \\ud800 text")

    return fn


@pytest.mark.parametrize("kind", list(HOSTILE))
@pytest.mark.parametrize("era", ["legacy", "extension"])
async def test_hostile_payload(
    request: pytest.FixtureRequest, era: str, kind: str, client: Client, queue: str, worker: Any
) -> None:
    peer: Peer = request.getfixturevalue(PEER_OF[era])
    want, target = HOSTILE[kind]
    method = "tasks/get" if (target == "status" or era == "extension") else "tasks/result"
    bound = 30.0
    with FaultProxy(peer.url or "") as proxy:
        proxy.add(method, Rewrite(hostile_rewrite(kind, era)), times=10_000)
        mark = peer.log_mark()
        t0 = time.monotonic()
        req = McpTaskRequest(
            server=Endpoint(url=proxy.url),
            tool="slow_echo",
            arguments={"seconds": 0.5, "text": unique("hostile")},
            timeouts=TIMEOUTS,
        )
        handle = await start_mcp_task(client, req, workflow_id=unique("hostile"), task_queue=queue)
        out: McpTaskOutcome | None = None
        try:
            out = await asyncio.wait_for(outcome_of(handle), bound + 30)
            got = out.outcome.value
        except WorkflowFailureError as exc:
            got = f"workflow_failed: {exc.cause}"
        except TimeoutError:
            got = "no_outcome"
            await handle.terminate("hostile payload: no outcome in time")
        elapsed = time.monotonic() - t0
        calls = await settled_calls(peer, mark, "slow_echo", client=client, workflows=[handle.id])
    history = await handle.fetch_history()
    biggest = max(e.ByteSize() for e in history.events)
    checks: dict[str, bool] = {
        "outcome": got == want,
        "one_call": calls == 1,
        "bounded": elapsed < bound,
        "history_events_under_1MB": biggest < HISTORY_EVENT_CAP,
    }
    if out is not None and kind.startswith("result_"):
        checks["result_ref"] = (
            out.result_ref is not None
            and out.result is None
            and out.result_ref.size > int(kind.split("_")[1].removesuffix("MB")) * MB
        )
    if out is not None and kind == "statusMessage_1MiB":
        checks["status_message_capped"] = (
            bool(out.status_message)
            and len(out.status_message or "") <= 8 * 1024
            and "truncated" in (out.status_message or "")
        )
    if want == "decode_failed":
        raw = json.dumps(out.raw_payload, ensure_ascii=True) if out is not None and out.raw_payload else ""
        checks["raw_payload_kept_and_capped"] = 0 < len(raw) <= 20 * 1024
    record(
        {
            "era": era,
            "method": method,
            "fault": f"Rewrite:{kind}",
            "replay": False,
            "expected": want,
            "outcome": got,
            "tools_call": calls,
            "seconds": round(elapsed, 2),
            "bound_s": bound,
            "passed": all(checks.values()),
            "failed_checks": [k for k, ok in checks.items() if not ok],
            "reason": out.reason if out else None,
            "biggest_history_event": biggest,
            "attempts": [a.reason for a in out.operation_attempts] if out else None,
        }
    )
    failed = [k for k, ok in checks.items() if not ok]
    assert not failed, (
        f"{failed}: outcome {got!r} (expected {want!r}), {calls} tools/call, {elapsed:.1f}s, "
        f"biggest history event {biggest} B; reason: {out.reason if out else '-'}"
    )


# --- JSON-RPC errors on reads ------------------------------------------------------------------------------
#
# A read of an existing task answered with a JSON-RPC error is a retrieval fault (protocol/wire_errors.py,
# READ_ERROR_RULES): retried within the read's budget, never the task's ending before it, never a replay. The
# reply is replaced after the server answered (the request was forwarded), so a resent tasks/update or
# tasks/cancel also shows that the server takes it twice. Only -32602 on tasks/get says "gone".

TRANSIENT = {"code": -32603, "message": "temporarily unavailable, try again"}
RPC_UNREACHABLE_S = 6.0
RPC_TIMEOUTS = TIMEOUTS.model_copy(update={"unreachable_s": RPC_UNREACHABLE_S})
#: Requested TTL of the tasks/result cells: it is the retrieval budget (less the task's age), so "longer than the
#: budget" ends within it.
RESULT_TTL_S = 12.0
#: How many replies are replaced: once, three times, and for longer than any budget here.
TIMES = {"once": 1, "thrice": 3, "always": 10_000}

#: (read, tool) → duration → expected outcome. "tasks/result:failed" is a failed task's payload read: on 2025-11-25
#: tasks/result answers it with the stored JSON-RPC error, so an injected one cannot be told from it and is taken
#: as the payload (the outcome is still the server's `failed`); on 2026-07-28 it is the terminal tasks/get.
RPC_CELLS: dict[str, dict[tuple[str, str], dict[str, str]]] = {
    "legacy": {
        ("tasks/get", "slow_echo"): dict(once=C, thrice=C, always="lost"),
        ("tasks/result", "slow_echo"): dict(once=C, thrice=C, always="result_unavailable"),
        ("tasks/result:failed", "rpc_error"): dict(once="failed", thrice="failed", always="failed"),
        ("tasks/cancel", "cancellable"): dict(once=X, thrice=X, always=X),
    },
    "extension": {
        ("tasks/get", "slow_echo"): dict(once=C, thrice=C, always="lost"),
        ("tasks/result", "slow_echo"): dict(once=C, thrice=C, always="lost"),
        ("tasks/result:failed", "rpc_error"): dict(once="failed", thrice="failed", always="lost"),
        ("tasks/update", "ask_user"): dict(once=C, thrice=C, always="lost"),
        ("tasks/cancel", "cancellable"): dict(once=X, thrice=X, always=X),
    },
    # The official Python SDK (mcp 1.30.0) task runtime, where the fault was first seen.
    "legacy-py1": {
        ("tasks/get", "slow_echo"): dict(once=C, thrice=C, always="lost"),
        ("tasks/result", "slow_echo"): dict(once=C, thrice=C, always="result_unavailable"),
    },
}
RPC_PEER_OF = {**PEER_OF, "legacy-py1": "py1_http"}


def rpc_cells() -> Iterator[Any]:
    for era, reads in RPC_CELLS.items():
        for (read, tool), durations in reads.items():
            for duration in durations:
                for replay in (False, True):
                    yield pytest.param(
                        era, read, tool, duration, replay, id=f"{era}-{read}-{duration}{'-replay' if replay else ''}"
                    )


class TerminalReplyError:
    """A Rewrite that answers ``times`` terminal replies (status completed/failed) of tasks/get with an error:
    on 2026-07-28 the payload read is the tasks/get that shows the task ended."""

    def __init__(self, times: int, error: dict[str, Any]) -> None:
        self.left, self.error, self.fired = times, error, 0

    def __call__(self, message: dict[str, Any]) -> dict[str, Any]:
        res = message.get("result")
        if self.left > 0 and isinstance(res, dict) and res.get("status") in ("completed", "failed"):
            self.left -= 1
            self.fired += 1
            return {"jsonrpc": "2.0", "id": message.get("id"), "error": self.error}
        return message


def error_reply(error: dict[str, Any]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    return lambda message: {"jsonrpc": "2.0", "id": message.get("id"), "error": error}


def rpc_bound_s(read: str, duration: str) -> float:
    """Backoff of three faults (1 + 2 + 4 s), or the whole budget, plus the task's own time and slack."""
    if duration == "always":
        return (RESULT_TTL_S if read == "tasks/result" else RPC_UNREACHABLE_S) + 8.0 + SLACK_S
    return 7.0 + SLACK_S


async def run_read_fault(
    client: Client,
    queue: str,
    peer: Peer,
    era: str,
    read: str,
    tool: str,
    times: int,
    replay: bool,
    error: dict[str, Any],
) -> dict[str, Any]:
    """One workflow through a proxy that answers ``times`` replies to ``read`` with ``error``: the measurements."""
    method = read.split(":")[0]
    with FaultProxy(peer.url or "") as proxy:
        terminal = TerminalReplyError(times, error) if era == "extension" and method == "tasks/result" else None
        if terminal is not None:
            proxy.add("tasks/get", Rewrite(terminal), times=10_000)
        else:
            rule = proxy.add(method, Rewrite(error_reply(error)), times=times)
        args: dict[str, Any] = {"seconds": 1, "text": unique("rpc")} if tool == "slow_echo" else {}
        if tool == "cancellable":
            args = {"seconds": 60}
        extra: dict[str, Any] = {"replay": ReplayPolicy.ALWAYS, "idempotent": True} if replay else {}
        request = McpTaskRequest(
            server=Endpoint(url=proxy.url),
            tool=tool,
            arguments=args,
            timeouts=RPC_TIMEOUTS,
            ttl_s=RESULT_TTL_S if method == "tasks/result" and era != "extension" else None,
            **extra,
        )
        mark = peer.log_mark()
        t0 = time.monotonic()
        handle = await start_mcp_task(client, request, workflow_id=unique("rpcfault"), task_queue=queue)
        out: McpTaskOutcome | None = None
        try:
            if method == "tasks/update":
                view = await wait_for_view(
                    handle, lambda v: v.phase == Phase.INPUT_REQUIRED and v.pending_inputs, timeout_s=60
                )
                await handle.execute_update(McpTaskWorkflow.provide_input, {view.pending_inputs[0].key: APPROVE})
            elif method == "tasks/cancel":
                await wait_for_view(handle, lambda v: v.phase == Phase.WORKING and v.task_id, timeout_s=60)
                await handle.cancel()
            out = await asyncio.wait_for(outcome_of(handle), 120)
            got = out.outcome.value
        except WorkflowFailureError as exc:
            got = f"workflow_failed: {exc.cause}"
        except (TimeoutError, AssertionError) as exc:
            got = f"no_outcome ({type(exc).__name__})"
            await handle.terminate("fault matrix: no outcome in time")
        elapsed = time.monotonic() - t0
        calls = await settled_calls(peer, mark, tool, client=client, workflows=[handle.id])
        fired = terminal.fired if terminal is not None else rule.fired
        return {
            "outcome": got,
            "out": out,
            "calls": calls,
            "seconds": elapsed,
            "fired": fired,
            "seen": proxy.seen(method),
        }


@pytest.mark.parametrize("era, read, tool, duration, replay", list(rpc_cells()))
async def test_rpc_error_on_read(
    request: pytest.FixtureRequest,
    era: str,
    read: str,
    tool: str,
    duration: str,
    replay: bool,
    client: Client,
    queue: str,
    worker: Any,
) -> None:
    peer: Peer = request.getfixturevalue(RPC_PEER_OF[era])
    want = RPC_CELLS[era][(read, tool)][duration]
    times = TIMES[duration]
    bound = rpc_bound_s(read.split(":")[0], duration)
    got = await run_read_fault(client, queue, peer, era, read, tool, times, replay, TRANSIENT)
    out: McpTaskOutcome | None = got["out"]
    checks = {
        "outcome": got["outcome"] == want,
        "one_call": got["calls"] == 1,
        "bounded": got["seconds"] < bound,
        # A legacy failed task's error reply is its payload: read once, whatever the rule would inject next.
        "fault_fired": got["fired"] == (1 if read == "tasks/result:failed" and era != "extension" else times)
        if duration != "always" or (read == "tasks/result:failed" and era != "extension")
        else got["fired"] >= 2,
    }
    if duration == "always" and want in ("lost", "result_unavailable"):
        # Spent budget: the outcome carries the server's last error, and the reason says how many reads failed.
        checks["error_is_servers"] = (
            out is not None
            and out.error is not None
            and out.error.code == -32603
            and "temporarily unavailable" in out.error.message
        )
        checks["reason_counts_attempts"] = out is not None and "attempts over" in (out.reason or "")
    if out is not None and duration != "always" and want == C:
        checks["result_delivered"] = out.result is not None
    record(
        {
            "era": era,
            "method": read,
            "fault": f"RpcError-32603×{duration}",
            "replay": replay,
            "expected": want,
            "outcome": got["outcome"],
            "tools_call": got["calls"],
            "seconds": round(got["seconds"], 2),
            "bound_s": bound,
            "passed": all(checks.values()),
            "failed_checks": [k for k, ok in checks.items() if not ok],
            "reason": out.reason if out else None,
            "attempts": [a.reason for a in out.operation_attempts] if out else None,
        }
    )
    failed = [k for k, ok in checks.items() if not ok]
    assert not failed, (
        f"{failed}: outcome {got['outcome']!r} (expected {want!r}), {got['calls']} tools/call, "
        f"{got['seconds']:.1f}s (bound {bound:.0f}s), fault fired {got['fired']}× "
        f"(requests seen {got['seen']}); reason: {out.reason if out else '-'}; "
        f"error: {out.error if out else '-'}"
    )


@pytest.mark.parametrize("era", ["legacy", "extension"])
async def test_rpc_error_huge_message_on_payload_read(
    request: pytest.FixtureRequest, era: str, client: Client, queue: str, worker: Any
) -> None:
    """A 3 MiB JSON-RPC error message on the payload read, twice: a fault like any other; the task completes."""
    peer: Peer = request.getfixturevalue(PEER_OF[era])
    huge = {"code": -32603, "message": "m" * (3 * MB)}
    got = await run_read_fault(client, queue, peer, era, "tasks/result", "slow_echo", 2, False, huge)
    assert got["fired"] == 2
    assert (got["outcome"], got["calls"]) == (C, 1), (
        f"{got['outcome']}, {got['calls']} tools/call; reason: {got['out'].reason if got['out'] else '-'}"
    )
    assert got["seconds"] < 7.0 + SLACK_S


@pytest.mark.parametrize("era", ["legacy", "extension"])
async def test_invalid_params_on_poll_is_gone(
    request: pytest.FixtureRequest, era: str, client: Client, queue: str, worker: Any
) -> None:
    """-32602 on tasks/get is the one error reply that says the task is gone: lost at once, no budget spent."""
    peer: Peer = request.getfixturevalue(PEER_OF[era])
    gone = {"code": -32602, "message": "Task not found"}
    got = await run_read_fault(client, queue, peer, era, "tasks/get", "slow_echo", 1, False, gone)
    assert (got["outcome"], got["calls"]) == ("lost", 1), got["out"].reason if got["out"] else got["outcome"]
    assert got["seconds"] < 5.0 + SLACK_S / 3
    assert "-32602" in (got["out"].reason or "")
