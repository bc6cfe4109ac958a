"""The token store's two backends for the tests that run one contract against both: the directory and the object store.

A :class:`Backend` is picklable (a spawned process opens its own store from it, as another machine would: the object
store's processes share only the bucket). The S3 server is moto's (``tests/peers/s3.py``'s
:func:`~tests.peers.s3.running_s3`); the S3 client finds it through ``AWS_ENDPOINT_URL_S3``, as a
deployment's workers find MinIO.
"""

from __future__ import annotations

import dataclasses
import secrets
from pathlib import Path
from typing import Any

import boto3
import pytest

from mcp_temporal_tasks.activities.wire.auth.token_store import KEY_ENV, STORE_ENV, Store, TokenStore, open_store
from tests.peers.s3 import AWS, BUCKET


@dataclasses.dataclass(frozen=True)
class Backend:
    kind: str
    #: The directory, or ``s3://BUCKET/PREFIX/``.
    where: str
    key: str

    def open(self, key: str | None = None) -> Store:
        """A store on this backend (another process's, another machine's: nothing shared but the location)."""
        if self.kind == "dir":
            return TokenStore(Path(self.where), key or self.key)
        return open_store({KEY_ENV: key or self.key, STORE_ENV: self.where})

    def objects(self) -> dict[str, bytes]:
        """Every record's name and raw bytes, as the store keeps them."""
        if self.kind == "dir":
            return {p.name: p.read_bytes() for p in Path(self.where).iterdir()}
        s3, prefix = raw_s3(), self.where.removeprefix(f"s3://{BUCKET}/")
        listing = s3.list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", [])
        return {o["Key"][len(prefix) :]: s3.get_object(Bucket=BUCKET, Key=o["Key"])["Body"].read() for o in listing}

    def put_raw(self, name: str, data: bytes) -> None:
        """Bytes written at a record's name by someone else (not through a store)."""
        if self.kind == "dir":
            (Path(self.where) / name).write_bytes(data)
        else:
            raw_s3().put_object(Bucket=BUCKET, Key=self.where.removeprefix(f"s3://{BUCKET}/") + name, Body=data)


def raw_s3() -> Any:
    return boto3.client("s3", region_name=AWS["AWS_DEFAULT_REGION"])


def backend_for(kind: str, tmp_path: Path, key: str, monkeypatch: pytest.MonkeyPatch, endpoint: str | None) -> Backend:
    """A fresh store location of ``kind`` (a directory under ``tmp_path``, or a prefix of its own in the bucket), the
    AWS environment pointed at ``endpoint`` for the object store (spawned processes inherit it)."""
    if kind == "dir":
        return Backend("dir", str(tmp_path / "store"), key)
    assert endpoint is not None
    for name, value in AWS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", endpoint)
    return Backend("s3", f"s3://{BUCKET}/{tmp_path.name}-{secrets.token_hex(4)}/", key)
