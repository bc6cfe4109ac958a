"""Large payloads on Temporal's External Storage (worker/storage.py) against a real S3-compatible server.

The S3 server is moto's (``moto[server]``, pinned in the [test] extra): a separate HTTP process speaking the S3 API
over the wire, which aioboto3 talks to exactly as to AWS or MinIO (no MinIO server installs from the registries
here; docker-compose.yml runs MinIO). What it does not check: durability and lifecycle rules (it does not expire
objects), so retention is checked on the embedded store and stated in the docs.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.client import Client
from temporalio.converter import PayloadCodec, StorageDriverClaim, StorageDriverRetrieveContext
from temporalio.worker import Worker

from mcp_temporal_tasks import McpTasksPlugin
from mcp_temporal_tasks.activities.activity_io import Endpoint
from mcp_temporal_tasks.worker.config import StorageSettings
from mcp_temporal_tasks.worker.runner import DATA_CONVERTER
from mcp_temporal_tasks.worker.storage import PayloadStoreError, storage_driver, with_storage
from mcp_temporal_tasks.workflows.client import get_outcome, start_mcp_task
from mcp_temporal_tasks.workflows.records import McpTaskRequest, Outcome, Timeouts
from tests.fixtures.user_app import Plan, Step, UserAgent
from tests.peers.harness import Peer
from tests.peers.s3 import AWS, BUCKET, S3Server, _free_port, running_s3
from tests.temporal_harness import (
    cli,
    eventually,
    in_process_worker,
    settled_calls,
    tool_calls,
    unique,
    worker_process,
)

pytestmark = pytest.mark.slow

MB = 1024 * 1024


@pytest.fixture(scope="module")
def s3_server() -> Iterator[S3Server]:
    with running_s3() as server:
        yield server


@pytest.fixture(autouse=True)
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in AWS.items():
        monkeypatch.setenv(k, v)


def settings(s3: S3Server, **kw: Any) -> StorageSettings:
    return StorageSettings(bucket=kw.pop("bucket", BUCKET), endpoint=s3.endpoint, **kw)


def stored_client(base: Client, storage: StorageSettings, codec: PayloadCodec | None = None) -> Client:
    converter = dataclasses.replace(DATA_CONVERTER, payload_codec=codec) if codec else DATA_CONVERTER
    return Client(base.service_client, namespace=base.namespace, data_converter=with_storage(converter, storage))


def big_request(peer: Peer, marker: str, kb: int = 5120) -> McpTaskRequest:
    return McpTaskRequest(
        server=Endpoint(url=peer.url or ""), tool="big_echo", arguments={"kb": kb, "marker": marker, "seconds": 0.2}
    )


class XorCodec(PayloadCodec):
    """An encrypting codec for the test (a SHA-256 keystream): what leaves it has no plaintext in it."""

    KEY = b"test key: never in the bucket"

    @classmethod
    def _xor(cls, data: bytes) -> bytes:
        stream = bytearray()
        counter = 0
        while len(stream) < len(data):
            stream += hashlib.sha256(cls.KEY + counter.to_bytes(8, "big")).digest()
            counter += 1
        return bytes(a ^ b for a, b in zip(data, stream))

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [
            Payload(metadata={"encoding": b"binary/xor-test"}, data=self._xor(p.SerializeToString())) for p in payloads
        ]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        out = []
        for p in payloads:
            if p.metadata.get("encoding") != b"binary/xor-test":
                out.append(p)
                continue
            inner = Payload()
            inner.ParseFromString(self._xor(p.data))
            out.append(inner)
        return out


async def test_encrypting_codec_leaves_no_plaintext_in_the_bucket(
    s3_server: S3Server, client: Client, ts_http_stateful: Peer
) -> None:
    marker = unique("PLAINTEXT-MARKER")
    prefix = unique("codec") + "/"
    c = stored_client(client, settings(s3_server, prefix=prefix), codec=XorCodec())
    queue = unique("q-codec")
    async with in_process_worker(c, task_queue=queue):
        handle = await start_mcp_task(
            c, big_request(ts_http_stateful, marker, kb=400), workflow_id=unique("codec"), task_queue=queue
        )
        out = await get_outcome(c, handle.id)
    assert out.outcome == Outcome.COMPLETED and out.result is not None
    assert out.result["content"][0]["text"].startswith(marker)
    keys = s3_server.keys(prefix=prefix)
    assert keys, "nothing was stored in the bucket"
    s3 = s3_server.s3()
    found = [k for k in keys if marker.encode() in s3.get_object(Bucket=BUCKET, Key=k)["Body"].read()]
    print(f"objects under {prefix}: {len(keys)}; objects containing the plaintext marker: {len(found)}")
    assert found == []


async def test_two_machines(s3_server: S3Server, client: Client, ts_http_stateful: Peer, tmp_path: Path) -> None:
    """Worker A (own HOME and state dir) stores a 5 MB result; a client with another HOME and state dir reads it
    with get_outcome and `mcp-tasks result`; the bucket holds the objects, the history only claims."""
    prefix = unique("two") + "/"
    queue = unique("q-two")
    home_a, home_c = tmp_path / "a", tmp_path / "c"
    cfg = tmp_path / "a.toml"
    cfg.write_text(
        f'[temporal.storage]\nbucket = "{BUCKET}"\nendpoint = "{s3_server.endpoint}"\nprefix = "{prefix}"\n'
        "[worker]\nallow_inline_endpoints = true\n"
        f'[servers.big]\nurl = "{ts_http_stateful.url}"\n'
    )
    env_a = {**AWS, "HOME": str(home_a), "MCP_TASKS_STATE_DIR": str(home_a / "state")}
    marker = unique("TWO-MACHINES")
    mark = ts_http_stateful.log_mark()
    with worker_process(address_of_client(client), queue, cfg, env=env_a):
        c = stored_client(client, settings(s3_server, prefix=prefix))
        handle = await start_mcp_task(
            c, big_request(ts_http_stateful, marker), workflow_id=unique("two"), task_queue=queue
        )
        out = await asyncio.wait_for(get_outcome(c, handle.id), 120)
        # A parent workflow on worker B (in this process: another queue, the same storage) whose child runs on A.
        queue_b = unique("q-two-b")
        parent_marker = unique("PARENT")
        worker_b = Worker(
            c,
            task_queue=queue_b,
            workflows=[UserAgent],
            plugins=[McpTasksPlugin(storage=settings(s3_server, prefix=prefix))],
        )
        async with worker_b:
            parent_id = unique("two-parent")
            steps = await asyncio.wait_for(
                c.execute_workflow(
                    UserAgent.run,
                    Plan([Step("call", "big", "big_echo", {"kb": 5120, "marker": parent_marker}, task_queue=queue)]),
                    id=parent_id,
                    task_queue=queue_b,
                ),
                120,
            )
        calls = await settled_calls(
            ts_http_stateful, mark, "big_echo", client=client, workflows=[handle.id, f"{parent_id}/mcp/1"]
        )
    child_text = steps[0].get("text") or ""
    print(
        f"parent on worker B: child {parent_id}/mcp/1 ran on worker A; result {len(child_text)} chars, "
        f"starts {child_text[: len(parent_marker)]!r}"
    )
    assert child_text.startswith(parent_marker) and len(child_text) >= 5 * MB
    child = await client.get_workflow_handle(f"{parent_id}/mcp/1").describe()
    assert child.task_queue == queue and child.parent_id == parent_id  # the child ran on worker A's queue
    text = out.result["content"][0]["text"] if out.result else ""
    print(
        f"get_outcome: {out.outcome.value}, result {len(text)} chars, starts {text[: len(marker)]!r}, "
        f"tools/call {calls} (this task and the parent's child: one each)"
    )
    assert out.outcome == Outcome.COMPLETED and text.startswith(marker) and len(text) >= 5 * MB and calls == 2
    assert not any(home_c.glob("**/*")) and not (Path.home() / ".local/state/mcp-tasks/payloads" / prefix).exists()
    # Another machine: its own HOME and state dir, the same [temporal] table.
    cfg_c = tmp_path / "c.toml"
    cfg_c.write_text(
        f'[temporal.storage]\nbucket = "{BUCKET}"\nendpoint = "{s3_server.endpoint}"\nprefix = "{prefix}"\n'
    )
    code, stdout, stderr = await cli(
        "result",
        handle.id,
        "--json",
        "--address",
        address_of_client(client),
        "--config",
        str(cfg_c),
        timeout=120,
        env={**AWS, "HOME": str(home_c), "MCP_TASKS_STATE_DIR": str(home_c / "state")},
    )
    assert code == 0, stderr
    printed = json.loads(stdout)
    got = printed.get("result") or printed.get("outcome", {}).get("result")
    assert got is not None, stdout[:500]
    print(f"mcp-tasks result: exit {code}, result text {len(got['content'][0]['text'])} chars")
    assert got["content"][0]["text"] == text
    keys = s3_server.keys(prefix=prefix)
    print("bucket listing:\n" + "\n".join(f"  {size:>9}  {key}" for key, size in sorted(keys.items())))
    assert len(keys) >= 4 and all(size > 5 * MB for size in keys.values())
    history = await handle.fetch_history()
    biggest = max(e.ByteSize() for e in history.events)
    claims = sum(b"temporal.api.sdk.v1.ExternalStorageReference" in e.SerializeToString() for e in history.events)
    print(f"history: {len(history.events)} events, biggest {biggest} bytes, {claims} holding a storage claim")
    assert biggest < 16 * 1024 and claims >= 2


def address_of_client(client: Client) -> str:
    return client.service_client.config.target_host


async def test_store_down_during_a_read_is_retried_never_replayed(
    s3_server: S3Server, client: Client, ts_http_stateful: Peer
) -> None:
    """The store stops answering (SIGSTOP: connections hang) while a client reads the outcome: each request times
    out, the read is retried within its bound and succeeds once the store is back; the tool ran once. 4 s of
    outage stand for 30: the code path (request timeout, retry, back-off) is the same, only the count differs."""
    prefix = unique("down") + "/"
    queue = unique("q-down")
    worker_client = stored_client(client, settings(s3_server, prefix=prefix))
    reader = stored_client(client, settings(s3_server, prefix=prefix, request_timeout_s=1.0, read_retry_s=30))
    mark = ts_http_stateful.log_mark()
    async with in_process_worker(worker_client, task_queue=queue):
        handle = await start_mcp_task(
            worker_client,
            big_request(ts_http_stateful, unique("DOWN"), kb=600),
            workflow_id=unique("down"),
            task_queue=queue,
        )
        await asyncio.wait_for(handle.result(), 60)  # done; now read it while the store is down
        os.kill(s3_server.proc.pid, signal.SIGSTOP)
        try:
            read = asyncio.create_task(get_outcome(reader, handle.id))
            await asyncio.sleep(4)
            assert not read.done(), "the read ended while the store was down"
        finally:
            os.kill(s3_server.proc.pid, signal.SIGCONT)
        out = await asyncio.wait_for(read, 30)
        calls = await settled_calls(ts_http_stateful, mark, "big_echo", client=client, workflows=[handle.id])
    print(f"store down 4 s during the read: outcome {out.outcome.value}, tools/call {calls}")
    assert out.outcome == Outcome.COMPLETED and out.result is not None and calls == 1


async def test_worker_killed_mid_store_loses_nothing(
    s3_server: S3Server, client: Client, ts_http_stateful: Peer, tmp_path: Path
) -> None:
    """Worker A has read the task's 5 MB result and is storing it when it is SIGKILLed (the store is frozen so the
    kill lands mid-store). Its attempt times out (heartbeat), worker B reads the task's result again and stores it:
    the outcome is complete, and the tool ran once."""
    prefix = unique("kill") + "/"
    queue = unique("q-kill")
    cfg = tmp_path / "a.toml"
    cfg.write_text(
        f'[temporal.storage]\nbucket = "{BUCKET}"\nendpoint = "{s3_server.endpoint}"\nprefix = "{prefix}"\n'
        "request_timeout_s = 120\n[worker]\nallow_inline_endpoints = true\n"
    )
    env_a = {**AWS, "HOME": str(tmp_path / "a"), "MCP_TASKS_STATE_DIR": str(tmp_path / "a" / "state")}
    c = stored_client(client, settings(s3_server, prefix=prefix))
    marker = unique("KILLED")
    mark = ts_http_stateful.log_mark()
    request = big_request(ts_http_stateful, marker).model_copy(update={"timeouts": Timeouts(heartbeat_s=3)})
    frozen = False
    try:
        with worker_process(address_of_client(client), queue, cfg, env=env_a) as worker_a:
            handle = await start_mcp_task(c, request, workflow_id=unique("kill"), task_queue=queue)
            os.kill(s3_server.proc.pid, signal.SIGSTOP)
            frozen = True
            await eventually(
                lambda: _async_true(tool_calls(ts_http_stateful, mark, method="tasks/result")),
                30,
                "worker A reading the task's result",
            )
            await asyncio.sleep(1.5)  # it has the 5 MB now and waits on the frozen store
            worker_a.kill()
        os.kill(s3_server.proc.pid, signal.SIGCONT)
        frozen = False
        async with in_process_worker(c, task_queue=queue):
            out = await asyncio.wait_for(get_outcome(c, handle.id), 90)
            calls = await settled_calls(ts_http_stateful, mark, "big_echo", client=client, workflows=[handle.id])
    finally:
        if frozen:
            os.kill(s3_server.proc.pid, signal.SIGCONT)
    text = out.result["content"][0]["text"] if out.result else ""
    print(f"worker killed mid-store: outcome {out.outcome.value}, result {len(text)} chars, tools/call {calls}")
    assert out.outcome == Outcome.COMPLETED and text.startswith(marker) and len(text) >= 5 * MB and calls == 1


async def _async_true(value: Any) -> bool:
    return bool(value)


async def test_bad_store_input_is_named(
    s3_server: S3Server, client: Client, ts_http_stateful: Peer, tmp_path: Path
) -> None:
    """A missing bucket, a deleted object and a changed object: one clear error naming it, no replay, no None."""
    prefix = unique("bad") + "/"
    queue = unique("q-bad")
    c = stored_client(client, settings(s3_server, prefix=prefix, read_retry_s=2))
    async with in_process_worker(c, task_queue=queue):
        handle = await start_mcp_task(
            c, big_request(ts_http_stateful, unique("BAD"), kb=400), workflow_id=unique("bad"), task_queue=queue
        )
        await asyncio.wait_for(handle.result(), 60)
    s3 = s3_server.s3()
    keys = sorted(s3_server.keys(prefix=prefix))
    # A changed object: the digest in the claim no longer matches.
    for key in keys:
        s3.put_object(Bucket=BUCKET, Key=key, Body=b"tampered")
    with pytest.raises(Exception) as exc_info:
        await get_outcome(c, handle.id)
    assert "digest mismatch" in _chain(exc_info.value), _chain(exc_info.value)
    # A deleted object.
    for key in keys:
        s3.delete_object(Bucket=BUCKET, Key=key)
    t0 = time.monotonic()
    with pytest.raises(Exception) as exc_info:
        await get_outcome(c, handle.id)
    # Every object is gone: the error names the one the read asked for first, whichever of them that is.
    assert "does not exist" in _chain(exc_info.value) and any(k in _chain(exc_info.value) for k in keys)
    assert time.monotonic() - t0 < 10  # not retried: it cannot come back
    # `mcp-tasks result` says so: the task ended, its stored outcome is what cannot be read (issue 57: it said
    # "workflow did not produce an outcome").
    cfg = tmp_path / "reader.toml"
    cfg.write_text(
        f'[temporal.storage]\nbucket = "{BUCKET}"\nendpoint = "{s3_server.endpoint}"\nprefix = "{prefix}"\n'
        "read_retry_s = 2\n"
    )
    code, _, stderr = await cli(
        "result", handle.id, "--address", address_of_client(client), "--config", str(cfg), timeout=60
    )
    print(f"mcp-tasks result of a deleted object: exit {code}: {stderr.strip()[-400:]}")
    assert code == 1 and f"{handle.id} ended, but its outcome, stored outside the history, cannot be read" in stderr
    assert "does not exist" in stderr and "did not produce an outcome" not in stderr
    # A bucket that does not exist: the store fails naming it (the activity's result cannot be stored: bounded
    # retries of that read, never a tools/call again).
    missing = stored_client(client, settings(s3_server, bucket="no-such-bucket-here"))
    mark = ts_http_stateful.log_mark()
    queue2 = unique("q-nobucket")
    async with in_process_worker(missing, task_queue=queue2):
        handle2 = await start_mcp_task(
            missing,
            big_request(ts_http_stateful, unique("NOBUCKET"), kb=400),
            workflow_id=unique("nobucket"),
            task_queue=queue2,
        )
        failures = await _activity_failures(handle2, timeout_s=30)
        await handle2.terminate("test: the bucket does not exist")
        calls = await settled_calls(ts_http_stateful, mark, "big_echo", client=client, workflows=[handle2.id])
    print(f"missing bucket: {failures[0][:200]!r}; tools/call {calls}")
    assert "bucket does not exist" in failures[0] and "no-such-bucket-here" in failures[0] and calls == 1


def _chain(exc: BaseException | None) -> str:
    parts = []
    while exc is not None:
        parts.append(f"{type(exc).__name__}: {exc}")
        exc = exc.__cause__ or exc.__context__
    return " <- ".join(parts)


async def _activity_failures(handle: Any, timeout_s: float) -> list[str]:
    """The last failure of each pending activity of ``handle`` (how a retried activity says why)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        desc = await handle.describe()
        found = [p.last_failure.message for p in desc.raw_description.pending_activities if p.last_failure.message]
        if found:
            return found
        await asyncio.sleep(0.5)
    raise AssertionError("no activity failure within the bound")


TS_SERVICE = Path(__file__).resolve().parent / "peers" / "ts" / "temporal_service.mjs"


async def _ts_service(spec: dict[str, Any]) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        "node",
        str(TS_SERVICE),
        json.dumps(spec),
        cwd=TS_SERVICE.parent,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, **AWS},
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    return proc.returncode or 0, out.decode(), err.decode()


async def test_typescript_service_starts_and_reads(s3_server: S3Server, client: Client, ts_http_stateful: Peer) -> None:
    """A TypeScript service (@temporalio/client) starts McpTaskWorkflow on our worker with a plain JSON request and
    reads the outcome; through the TS SDK's External Storage (a reader of aws.s3driver claims) the 5 MB one too."""
    prefix = unique("ts") + "/"
    queue = unique("q-ts")
    c = stored_client(client, settings(s3_server, prefix=prefix))
    address = address_of_client(client)
    marker = unique("TS-BIG")
    async with in_process_worker(c, task_queue=queue):
        small = {
            "server": {"url": ts_http_stateful.url},
            "tool": "slow_echo",
            "arguments": {"seconds": 0.2, "text": "hello from TypeScript"},
        }
        code, out, err = await _ts_service(
            {"address": address, "taskQueue": queue, "workflowId": unique("ts-small"), "request": small}
        )
        print(f"node temporal_service.mjs (plain request) -> exit {code}: {out.strip()}")
        assert code == 0, err
        got = json.loads(out)
        assert got["outcome"] == "completed" and got["resultStart"] == "hello from TypeScript"
        big = {"server": {"url": ts_http_stateful.url}, "tool": "big_echo", "arguments": {"kb": 5120, "marker": marker}}
        code, out, err = await _ts_service(
            {
                "address": address,
                "taskQueue": queue,
                "workflowId": unique("ts-big"),
                "request": big,
                "s3": {"endpoint": s3_server.endpoint, "region": "us-east-1"},
            }
        )
        print(f"node temporal_service.mjs (5 MB result via S3 claim) -> exit {code}: {out.strip()}")
        assert code == 0, err
        got = json.loads(out)
        assert got["outcome"] == "completed" and got["resultStart"].startswith(marker) and got["resultChars"] >= 5 * MB


@pytest.fixture(scope="module")
def gcs_emulator() -> Iterator[str]:
    """gcp-storage-emulator (PyPI; pinned in [test]): the GCS JSON API over HTTP, in memory, with one bucket."""
    port = _free_port()
    exe = Path(sys.executable).parent / "gcp-storage-emulator"
    proc = subprocess.Popen(
        [str(exe), "start", "--host", "127.0.0.1", "--port", str(port), "--default-bucket", "mcp-gcs", "--in-memory"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                break
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise
            time.sleep(0.2)
    yield endpoint
    proc.kill()
    proc.wait(10)


async def test_gcs_driver_round_trip(gcs_emulator: str, client: Client, ts_http_stateful: Peer) -> None:
    """The GCS driver (Temporal's, over gcloud-aio-storage) against gcp-storage-emulator: a large result is stored
    under the prefix and read back by get_outcome; the history holds only claims."""
    import urllib.request

    prefix = unique("gcs") + "/"
    storage = StorageSettings(driver="gcs", bucket="mcp-gcs", endpoint=gcs_emulator, prefix=prefix)
    c = Client(client.service_client, namespace=client.namespace, data_converter=with_storage(DATA_CONVERTER, storage))
    queue = unique("q-gcs")
    marker = unique("GCS")
    async with in_process_worker(c, task_queue=queue):
        handle = await start_mcp_task(
            c, big_request(ts_http_stateful, marker, kb=600), workflow_id=unique("gcs"), task_queue=queue
        )
        out = await asyncio.wait_for(get_outcome(c, handle.id), 60)
    assert out.outcome == Outcome.COMPLETED and out.result is not None
    assert out.result["content"][0]["text"].startswith(marker)
    with urllib.request.urlopen(f"{gcs_emulator}/storage/v1/b/mcp-gcs/o?prefix={prefix}", timeout=10) as res:
        names = [item["name"] for item in json.loads(res.read()).get("items", [])]
    print(f"GCS objects under {prefix}: {len(names)}")
    assert len(names) >= 2 and all(n.startswith(prefix + "v0/") for n in names)
    history = await handle.fetch_history()
    assert max(e.ByteSize() for e in history.events) < 16 * 1024


async def test_wrong_credentials_are_named_not_retried() -> None:
    """moto with authentication on (INITIAL_NO_AUTH_ACTION_COUNT=0): an unknown access key is refused; the read
    fails at once naming the credentials, not after the retry budget."""
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        env={**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "0"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                assert time.monotonic() < deadline and proc.poll() is None, "moto did not start"
                await asyncio.sleep(0.2)
        driver = storage_driver(StorageSettings(bucket=BUCKET, endpoint=f"http://127.0.0.1:{port}", read_retry_s=30))
        claim = StorageDriverClaim(
            {"bucket": BUCKET, "key": "v0/x", "hash_algorithm": "sha256", "hash_value": "0" * 64}
        )
        t0 = time.monotonic()
        with pytest.raises(PayloadStoreError) as exc_info:
            await driver.retrieve(StorageDriverRetrieveContext(), [claim])
        print(f"wrong credentials: {exc_info.value}")
        assert "refused" in str(exc_info.value) and BUCKET in str(exc_info.value) and time.monotonic() - t0 < 10
    finally:
        proc.kill()
        proc.wait(10)
