"""A real S3-compatible server for the tests: moto's (``moto[server]``, pinned in [test]), a process of its own speaking
the S3 API on a port, with the test bucket. Light to import: a spawned test process that opens a store on it loads
this, not the suites that use it (tests/test_external_storage.py, the token store's tests).
"""

from __future__ import annotations

import contextlib
import dataclasses
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import boto3

AWS = {"AWS_ACCESS_KEY_ID": "test-key", "AWS_SECRET_ACCESS_KEY": "test-secret", "AWS_DEFAULT_REGION": "us-east-1"}
BUCKET = "mcp-tasks-test"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclasses.dataclass
class S3Server:
    proc: subprocess.Popen[bytes]
    endpoint: str

    def s3(self) -> Any:
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            aws_access_key_id=AWS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=AWS["AWS_SECRET_ACCESS_KEY"],
        )

    def keys(self, bucket: str = BUCKET, prefix: str = "") -> dict[str, int]:
        listing = self.s3().list_objects_v2(Bucket=bucket, Prefix=prefix)
        return {o["Key"]: o["Size"] for o in listing.get("Contents", [])}


@contextlib.contextmanager
def running_s3() -> Iterator[S3Server]:
    """moto's S3 server in its own process, with the test bucket; killed on the way out."""
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    server = S3Server(proc, f"http://127.0.0.1:{port}")
    deadline = time.monotonic() + 30
    while True:
        try:
            server.s3().create_bucket(Bucket=BUCKET)
            break
        except Exception:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise
            time.sleep(0.2)
    try:
        yield server
    finally:
        proc.kill()
        proc.wait(10)
