"""External Storage without servers: the experimental SDK parts worker/storage.py relies on (temporalio==1.35.0),
the embedded store's driver, its cleanup, and old ``file://`` references."""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import os
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.contrib.aws.s3driver import S3StorageDriver, S3StorageDriverClient
from temporalio.contrib.gcp.gcsdriver import GCSStorageDriver
from temporalio.converter import (
    DataConverter,
    ExternalStorage,
    PayloadCodec,
    StorageDriver,
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
    StorageDriverWorkflowInfo,
)

from mcp_temporal_tasks.activities.result_store import ResultStore
from mcp_temporal_tasks.worker.config import ConfigError, StorageSettings, load_config
from mcp_temporal_tasks.worker.runner import DATA_CONVERTER
from mcp_temporal_tasks.worker.storage import (
    LOCAL_DRIVER_NAME,
    LocalStorageDriver,
    ManagedDriver,
    PayloadStoreError,
    external_storage,
    prune_local_store,
    with_storage,
)
from mcp_temporal_tasks.workflows.records import McpTaskOutcome

pytestmark = pytest.mark.fast

CTX = StorageDriverStoreContext(
    target=StorageDriverWorkflowInfo(namespace="default", id="wf-1", run_id="r", type="McpTaskWorkflow")
)


def test_sdk_external_storage_surface() -> None:
    """The names and signatures worker/storage.py uses; an upgrade that moves them fails here first."""
    assert {"drivers", "driver_selector", "payload_size_threshold"} <= {
        f.name for f in dataclasses.fields(ExternalStorage)
    }
    assert "external_storage" in {f.name for f in dataclasses.fields(DataConverter)}
    for method in ("name", "store", "retrieve"):
        assert callable(getattr(StorageDriver, method))
    assert list(inspect.signature(S3StorageDriver.__init__).parameters)[:4] == [
        "self",
        "client",
        "bucket",
        "driver_name",
    ]
    assert {"put_object", "object_exists", "get_object"} <= set(dir(S3StorageDriverClient))
    assert list(inspect.signature(GCSStorageDriver.__init__).parameters)[:3] == ["self", "client", "bucket"]
    assert S3StorageDriver.type(S3StorageDriver.__new__(S3StorageDriver)) == "aws.s3driver"


class Recording(StorageDriver):
    def __init__(self) -> None:
        self.stored: list[bytes] = []

    def name(self) -> str:
        return "recording"

    async def store(self, context: StorageDriverStoreContext, payloads: Sequence[Payload]) -> list[StorageDriverClaim]:
        self.stored += [p.SerializeToString() for p in payloads]
        return [StorageDriverClaim({"i": str(len(self.stored) - len(payloads) + i)}) for i in range(len(payloads))]

    async def retrieve(
        self, context: StorageDriverRetrieveContext, claims: Sequence[StorageDriverClaim]
    ) -> list[Payload]:
        out = []
        for c in claims:
            p = Payload()
            p.ParseFromString(self.stored[int(c.claim_data["i"])])
            out.append(p)
        return out


class Reverse(PayloadCodec):
    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [Payload(metadata={"encoding": b"binary/rev"}, data=p.SerializeToString()[::-1]) for p in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        out = []
        for p in payloads:
            q = Payload()
            q.ParseFromString(p.data[::-1])
            out.append(q)
        return out


async def test_codec_runs_before_the_store_and_only_a_claim_remains() -> None:
    """The SDK encodes with the user's codec first and stores what the codec made: an encrypting codec leaves no
    plaintext in the store. Below the threshold nothing is stored; above it the payload is only a claim."""
    driver = Recording()
    conv = dataclasses.replace(
        DATA_CONVERTER,
        payload_codec=Reverse(),
        external_storage=ExternalStorage(drivers=[driver], payload_size_threshold=1024),
    )
    small, big = {"x": "SECRET-small"}, {"x": "SECRET-big" + "." * 4096}
    [p_small, p_big] = await conv.encode([small, big])
    assert len(driver.stored) == 1 and b"SECRET" not in driver.stored[0]
    assert p_big.metadata["encoding"] == b"json/protobuf" and p_big.ByteSize() < 512
    assert b"ExternalStorageReference" in p_big.metadata.get("messageType", b"")
    assert await conv.decode([p_small, p_big], [dict, dict]) == [small, big]


async def test_local_driver_round_trip_digest_and_bounds(tmp_path: Path) -> None:
    driver = LocalStorageDriver(tmp_path)
    payload = Payload(metadata={"encoding": b"json/plain"}, data=b'"' + b"a" * 1000 + b'"')
    [claim] = await driver.store(CTX, [payload])
    assert claim.claim_data["hash_value"] == hashlib.sha256(payload.SerializeToString()).hexdigest()
    assert [await driver.store(CTX, [payload])][0] == [claim]  # content-addressed: a second store is a no-op
    assert (await driver.retrieve(StorageDriverRetrieveContext(), [claim])) == [payload]
    path = tmp_path / claim.claim_data["path"]
    path.write_bytes(b"changed")
    with pytest.raises(PayloadStoreError, match="digest mismatch"):
        await driver.retrieve(StorageDriverRetrieveContext(), [claim])
    path.unlink()
    with pytest.raises(PayloadStoreError, match="does not exist"):
        await driver.retrieve(StorageDriverRetrieveContext(), [claim])
    for hostile in ("../../etc/passwd", "/etc/passwd", ""):
        with pytest.raises(PayloadStoreError, match="not inside it"):
            await driver.retrieve(
                StorageDriverRetrieveContext(),
                [StorageDriverClaim({"path": hostile, "hash_algorithm": "sha256", "hash_value": "0" * 64})],
            )


async def test_managed_driver_retries_only_what_may_pass(tmp_path: Path) -> None:
    class Flaky(LocalStorageDriver):
        calls = 0

        async def retrieve(
            self, context: StorageDriverRetrieveContext, claims: Sequence[StorageDriverClaim]
        ) -> list[Payload]:
            Flaky.calls += 1
            if Flaky.calls < 3:
                raise ConnectionError("store not answering")
            return await super().retrieve(context, claims)

    inner = Flaky(tmp_path)
    managed = ManagedDriver(inner, where="test store", retry_s=10)
    assert managed.name() == LOCAL_DRIVER_NAME  # claims stay readable by the plain driver
    [claim] = await managed.store(CTX, [Payload(data=b"x" * 10)])
    assert len(await managed.retrieve(StorageDriverRetrieveContext(), [claim])) == 1 and Flaky.calls == 3
    gone = StorageDriverClaim({**claim.claim_data, "path": "v0/none/none/missing.bin"})
    t0 = time.monotonic()
    with pytest.raises(PayloadStoreError, match="does not exist"):
        await ManagedDriver(LocalStorageDriver(tmp_path), where="t", retry_s=10).retrieve(
            StorageDriverRetrieveContext(), [gone]
        )
    assert time.monotonic() - t0 < 1
    always_down = ManagedDriver(Flaky(tmp_path), where="test store", retry_s=0.2)
    Flaky.calls = -100
    with pytest.raises(PayloadStoreError, match="gave up after"):
        await always_down.retrieve(StorageDriverRetrieveContext(), [claim])


def test_embedded_store_cleanup(tmp_path: Path) -> None:
    old, new = tmp_path / "v0/a/old.bin", tmp_path / "v0/a/new.bin"
    old.parent.mkdir(parents=True)
    old.write_bytes(b"1")
    new.write_bytes(b"2")
    os.utime(old, (time.time() - 10 * 86400,) * 2)
    assert prune_local_store(tmp_path, 7 * 86400) == 1
    assert not old.exists() and new.exists()


def test_storage_configuration() -> None:
    cfg = load_config(env={"MCP_TASKS_STORAGE_BUCKET": "tasks", "MCP_TASKS_STORAGE_ENDPOINT": "http://minio:9000"})
    assert cfg.temporal.storage.kind == "s3" and cfg.temporal.storage.endpoint == "http://minio:9000"
    assert load_config(env={}).temporal.storage.kind == "local"
    for env, said in [
        ({"MCP_TASKS_STORAGE_DRIVER": "gcs"}, "needs a bucket"),
        ({"MCP_TASKS_STORAGE_DRIVER": "local", "MCP_TASKS_STORAGE_BUCKET": "abc"}, "takes no bucket"),
        ({"MCP_TASKS_STORAGE_BUCKET": "abc", "MCP_TASKS_STORAGE_ENDPOINT": "minio:9000"}, r"http\(s\) URL"),
        ({"MCP_TASKS_STORAGE_DRIVER": "ftp"}, "temporal.storage.driver"),
    ]:
        with pytest.raises(ConfigError, match=said):
            load_config(env=env)
    # A converter's own External Storage is kept; otherwise ours is added.
    own = dataclasses.replace(DATA_CONVERTER, external_storage=ExternalStorage(drivers=[Recording()]))
    assert with_storage(own) is own
    assert with_storage(DATA_CONVERTER, StorageSettings(local_dir="/tmp/x")).external_storage is not None
    assert (
        external_storage(StorageSettings(bucket="abc", endpoint="http://127.0.0.1:1")).drivers[0].name()
        == "aws.s3driver"
    )


def test_old_file_references_still_resolve(tmp_path: Path) -> None:
    """A history written before External Storage carries ``result_ref`` with a ``file://`` URI: still read."""
    ref = ResultStore(tmp_path).put({"content": [{"type": "text", "text": "old"}], "isError": False})
    outcome = McpTaskOutcome.model_validate(
        {
            "workflow_id": "w",
            "outcome": "completed",
            "result_ref": ref,
            "ledger": {"server": "s", "tool": "t", "request_digest": "d", "created_at": "2026-01-01T00:00:00Z"},
        }
    )
    assert outcome.result_ref is not None and outcome.result_ref.uri.startswith("file://")
    assert ResultStore.get(outcome.result_ref.model_dump())["content"][0]["text"] == "old"
