"""Large payloads on Temporal's External Storage: the S3, GCS and embedded local drivers, on every client and worker.

From ``[temporal.storage]``: every payload at least ``threshold_bytes`` big goes to the store and the history keeps a
claim. A payload is never silently dropped: a read that fails for a reason that may pass is retried for
``read_retry_s``, one that cannot raises :class:`PayloadStoreError` at once, naming it (:class:`ManagedDriver`).
Stores, codec order, faults and retention: docs/operating.md ("Large payloads").
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import logging
import os
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from temporalio.api.common.v1 import Payload
from temporalio.converter import (
    DataConverter,
    ExternalStorage,
    StorageDriver,
    StorageDriverActivityInfo,
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
    StorageDriverWorkflowInfo,
)

from mcp_temporal_tasks.activities.result_store import state_dir
from mcp_temporal_tasks.worker.config import ConfigError, StorageSettings

log = logging.getLogger("mcp_tasks.storage")

#: The embedded store's driver name, written into every claim it makes (a claim names the driver that reads it).
LOCAL_DRIVER_NAME = "mcp_tasks.local"
#: The largest payload a driver accepts (the S3 driver's own default bound).
MAX_PAYLOAD_BYTES = 50 * 1024 * 1024


class PayloadStoreError(RuntimeError):
    """A payload could not be stored or read back; the message names the store, the object and why."""

    def __init__(self, message: str, *, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable


# --- the embedded store ---------------------------------------------------------------------------------------


def local_root(settings: StorageSettings) -> Path:
    return Path(settings.local_dir) if settings.local_dir else state_dir() / "payloads"


def _segment(value: str | None) -> str:
    """A path segment from an id: only safe characters, bounded (the digest makes the name unique anyway)."""
    if not value:
        return "null"
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in value)[:80].lstrip(".")
    return safe or "null"


class LocalStorageDriver(StorageDriver):
    """Payloads as files under ``root``, named by the SHA-256 of their bytes (written once, atomically: a
    crashed writer leaves no truncated file under a valid name; writing the same payload twice is a no-op).
    File I/O runs in a thread, off the event loop."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def name(self) -> str:
        return LOCAL_DRIVER_NAME

    def type(self) -> str:
        return LOCAL_DRIVER_NAME

    def ensure_writable(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=self.root, prefix=".probe-")
        os.close(fd)
        os.unlink(probe)

    async def store(self, context: StorageDriverStoreContext, payloads: Sequence[Payload]) -> list[StorageDriverClaim]:
        target = context.target
        ns = _segment(target.namespace) if target is not None else "null"
        owner = (
            f"wf/{_segment(target.id)}"
            if isinstance(target, StorageDriverWorkflowInfo)
            else f"act/{_segment(target.id)}"
            if isinstance(target, StorageDriverActivityInfo)
            else "none"
        )
        claims = []
        for payload in payloads:
            data = payload.SerializeToString()
            if len(data) > MAX_PAYLOAD_BYTES:
                raise PayloadStoreError(
                    f"payload of {len(data)} bytes is over the store's bound of {MAX_PAYLOAD_BYTES}", retryable=False
                )
            digest = hashlib.sha256(data).hexdigest()
            rel = f"v0/{ns}/{owner}/{digest}.bin"
            await asyncio.to_thread(self._write, self.root / rel, data)
            claims.append(StorageDriverClaim({"path": rel, "hash_algorithm": "sha256", "hash_value": digest}))
        return claims

    @staticmethod
    def _write(path: Path, data: bytes) -> None:
        if path.exists():
            os.utime(path)  # written again: it lives as long as its newest history
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def _path(self, claim: StorageDriverClaim) -> Path:
        rel = claim.claim_data.get("path", "")
        path = (self.root / rel).resolve()
        if (
            not rel
            or Path(rel).is_absolute()
            or ".." in Path(rel).parts
            or not path.is_relative_to(self.root.resolve())
        ):
            raise PayloadStoreError(
                f"local payload store {self.root}: claim path {rel[:200]!r} is not inside it", retryable=False
            )
        return path

    async def retrieve(
        self, context: StorageDriverRetrieveContext, claims: Sequence[StorageDriverClaim]
    ) -> list[Payload]:
        out = []
        for claim in claims:
            path = self._path(claim)
            try:
                data = await asyncio.to_thread(_read_bounded, path)
            except FileNotFoundError:
                raise PayloadStoreError(
                    f"local payload store {self.root}: {claim.claim_data.get('path')} does not "
                    "exist (deleted by cleanup, or written on another machine)",
                    retryable=False,
                ) from None
            except OSError as exc:
                raise PayloadStoreError(
                    f"local payload store {self.root}: cannot read {path}: {exc.strerror or exc}", retryable=False
                ) from None
            _check_digest(claim, data, f"local payload store {self.root}: {claim.claim_data.get('path')}")
            payload = Payload()
            payload.ParseFromString(data)
            out.append(payload)
        return out


def _read_bounded(path: Path) -> bytes:
    with path.open("rb") as fh:
        data = fh.read(MAX_PAYLOAD_BYTES + 1)
    if len(data) > MAX_PAYLOAD_BYTES:
        raise OSError(f"over {MAX_PAYLOAD_BYTES} bytes")
    return data


def _check_digest(claim: StorageDriverClaim, data: bytes, where: str) -> None:
    if claim.claim_data.get("hash_algorithm") != "sha256" or not claim.claim_data.get("hash_value"):
        raise PayloadStoreError(f"{where}: the claim carries no sha256 digest", retryable=False)
    actual = hashlib.sha256(data).hexdigest()
    if actual != claim.claim_data["hash_value"].lower():
        raise PayloadStoreError(
            f"{where}: digest mismatch (claim sha256:{claim.claim_data['hash_value'][:64]}, "
            f"stored sha256:{actual}): the object was changed after it was written",
            retryable=False,
        )


def prune_local_store(root: str | Path, older_than_s: float, *, now: float | None = None) -> int:
    """Delete the embedded store's payloads not written (or rewritten) for ``older_than_s``; how many went."""
    cutoff = (time.time() if now is None else now) - older_than_s
    removed = 0
    base = Path(root)
    if not base.is_dir():
        return 0
    for path in base.rglob("*.bin"):
        with contextlib.suppress(FileNotFoundError):
            if path.stat().st_mtime < cutoff:
                path.unlink()
                removed += 1
    return removed


# --- S3 and GCS clients, opened lazily per event loop -----------------------------------------------------------


class _PerLoop:
    """One client per event loop (an aiohttp-based client is bound to the loop that opened it)."""

    def __init__(self) -> None:
        self._clients: dict[int, tuple[asyncio.AbstractEventLoop, Any, contextlib.AsyncExitStack]] = {}
        self._lock: dict[int, asyncio.Lock] = {}

    async def get(self, open_client: Any) -> Any:
        loop = asyncio.get_running_loop()
        key = id(loop)
        entry = self._clients.get(key)
        if entry is not None and entry[0] is loop:
            return entry[1]
        lock = self._lock.setdefault(key, asyncio.Lock())
        async with lock:
            entry = self._clients.get(key)
            if entry is not None and entry[0] is loop:
                return entry[1]
            stack = contextlib.AsyncExitStack()
            client = await open_client(stack)
            self._clients[key] = (loop, client, stack)
            return client

    async def aclose(self) -> None:
        loop = asyncio.get_running_loop()
        entry = self._clients.pop(id(loop), None)
        if entry is not None:
            await entry[2].aclose()


def _s3_driver(settings: StorageSettings) -> StorageDriver:
    try:
        import aioboto3  # type: ignore[import-untyped,unused-ignore]
        from botocore.config import Config
        from temporalio.contrib.aws.s3driver import S3StorageDriver, S3StorageDriverClient
        from temporalio.contrib.aws.s3driver.aioboto3 import new_aioboto3_client
    except ImportError as exc:
        raise ConfigError(
            f"[temporal.storage] driver = \"s3\" needs aioboto3: pip install 'mcp-temporal-tasks[s3]' ({exc})"
        ) from None
    clients = _PerLoop()
    timeout = settings.request_timeout_s

    async def open_client(stack: contextlib.AsyncExitStack) -> Any:
        session: Any = aioboto3.Session()
        raw = await stack.enter_async_context(
            session.client(
                "s3",
                endpoint_url=settings.endpoint,
                region_name=settings.region
                or os.environ.get("AWS_REGION")
                or os.environ.get("AWS_DEFAULT_REGION")
                or "us-east-1",
                config=Config(
                    connect_timeout=timeout,
                    read_timeout=timeout,
                    retries={"max_attempts": 1},
                    s3={"addressing_style": "path"} if settings.endpoint else None,
                ),
            )
        )
        return new_aioboto3_client(raw)

    class LazyClient(S3StorageDriverClient):
        async def put_object(self, *, bucket: str, key: str, data: bytes) -> None:
            await (await clients.get(open_client)).put_object(bucket=bucket, key=key, data=data)

        async def object_exists(self, *, bucket: str, key: str) -> bool:
            return bool(await (await clients.get(open_client)).object_exists(bucket=bucket, key=key))

        async def get_object(self, *, bucket: str, key: str) -> bytes:
            return bytes(await (await clients.get(open_client)).get_object(bucket=bucket, key=key))

        def describe(self) -> dict[str, str]:
            return {"endpoint": settings.endpoint} if settings.endpoint else {}

    class Prefixed(S3StorageDriverClient):
        """Writes go under ``prefix``; :class:`ManagedDriver` writes the prefixed key into the claim (so any SDK's
        S3 driver reads it as it is) and reads use the claim's key unchanged."""

        def __init__(self, inner: S3StorageDriverClient, prefix: str) -> None:
            self.inner, self.prefix = inner, prefix

        async def put_object(self, *, bucket: str, key: str, data: bytes) -> None:
            await self.inner.put_object(bucket=bucket, key=self.prefix + key, data=data)

        async def object_exists(self, *, bucket: str, key: str) -> bool:
            return await self.inner.object_exists(bucket=bucket, key=self.prefix + key)

        async def get_object(self, *, bucket: str, key: str) -> bytes:
            return await self.inner.get_object(bucket=bucket, key=key)

        def describe(self) -> Any:
            return self.inner.describe()

    assert settings.bucket is not None
    client: S3StorageDriverClient = Prefixed(LazyClient(), settings.prefix) if settings.prefix else LazyClient()
    driver = S3StorageDriver(client, settings.bucket, max_payload_size=MAX_PAYLOAD_BYTES)
    # Closed by aclose_storage.
    driver._mcp_clients = clients  # type: ignore[attr-defined]
    return driver


def _gcs_driver(settings: StorageSettings) -> StorageDriver:
    try:
        import aiohttp
        from gcloud.aio.storage import Storage  # type: ignore[import-untyped,unused-ignore]
        from temporalio.contrib.gcp.gcsdriver import GCSStorageDriver, GCSStorageDriverClient
        from temporalio.contrib.gcp.gcsdriver.gcloud_aio import new_gcloud_aio_client
    except ImportError as exc:
        raise ConfigError(
            f'[temporal.storage] driver = "gcs" needs gcloud-aio-storage: pip install '
            f"'mcp-temporal-tasks[gcs]' ({exc})"
        ) from None
    clients = _PerLoop()

    async def open_client(stack: contextlib.AsyncExitStack) -> Any:
        session = await stack.enter_async_context(
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=settings.request_timeout_s))
        )
        kw: dict[str, Any] = {"session": session}
        if settings.endpoint:
            kw["api_root"] = settings.endpoint
        return new_gcloud_aio_client(Storage(**kw))

    class LazyClient(GCSStorageDriverClient):
        async def put_object(self, *, bucket: str, object_name: str, data: bytes) -> None:
            await (await clients.get(open_client)).put_object(
                bucket=bucket, object_name=self_prefix + object_name, data=data
            )

        async def object_exists(self, *, bucket: str, object_name: str) -> bool:
            return bool(
                await (await clients.get(open_client)).object_exists(
                    bucket=bucket, object_name=self_prefix + object_name
                )
            )

        async def get_object(self, *, bucket: str, object_name: str) -> bytes:
            return bytes(await (await clients.get(open_client)).get_object(bucket=bucket, object_name=object_name))

        def describe(self) -> dict[str, str]:
            return {"endpoint": settings.endpoint} if settings.endpoint else {}

    self_prefix = settings.prefix
    assert settings.bucket is not None
    driver = GCSStorageDriver(LazyClient(), settings.bucket)
    # Closed by aclose_storage.
    driver._mcp_clients = clients  # type: ignore[attr-defined]
    return driver


# --- the wrapper every driver gets ------------------------------------------------------------------------------

#: Words in a store's error that mean retrying cannot help.
_PERMANENT = {
    "NoSuchBucket": "the bucket does not exist",
    "NoSuchKey": "the object does not exist (deleted, e.g. by a lifecycle rule shorter than the history's life?)",
    "404": "the object does not exist (deleted, e.g. by a lifecycle rule shorter than the history's life?)",
    "InvalidAccessKeyId": "the store refused the credentials (unknown access key)",
    "SignatureDoesNotMatch": "the store refused the credentials (wrong secret key)",
    "AccessDenied": "the store refused access (credentials or bucket policy)",
    "403": "the store refused access (credentials or bucket policy)",
    "401": "the store refused the credentials",
    "integrity check failed": "digest mismatch: the object was changed after it was written",
    "missing required content hash": "the claim carries no digest",
    "exceeds the configured max_payload_size": "the payload is over the store's size bound",
}


def _explain(exc: BaseException) -> tuple[str, bool]:
    """(why, retryable) of a driver's error: its cause chain searched for a store's error code."""
    texts: list[str] = []
    seen: BaseException | None = exc
    while seen is not None and len(texts) < 5:
        code = getattr(seen, "response", None)
        if isinstance(code, dict):
            texts.append(str(code.get("Error", {}).get("Code", "")))
        status = getattr(seen, "status", None)
        if isinstance(status, int):
            texts.append(str(status))
        texts.append(f"{type(seen).__name__}: {seen}")
        seen = seen.__cause__ or seen.__context__
    joined = " | ".join(t for t in texts if t)
    for marker, why in _PERMANENT.items():
        if any(t == marker for t in texts) or (" " in marker and marker in joined):
            return why, False
    return joined[:500] or type(exc).__name__, True


class ManagedDriver(StorageDriver):
    """A driver with the same name (claims stay readable by the plain driver in any SDK), whose failures are one
    :class:`PayloadStoreError` naming the store, and whose reads retry a store that does not answer for
    ``retry_s`` (bounded; permanent errors at once: no such bucket, refused credentials, the object deleted, a digest
    mismatch). Either way the read fails: a workflow task that cannot read an activity's result is retried by
    Temporal (the activity is not run again), a client's read raises."""

    def __init__(self, inner: StorageDriver, *, where: str, prefix: str = "", retry_s: float = 60.0) -> None:
        self.inner, self.where, self.prefix, self.retry_s = inner, where, prefix, retry_s

    def name(self) -> str:
        return self.inner.name()

    def type(self) -> str:
        return self.inner.type()

    async def store(self, context: StorageDriverStoreContext, payloads: Sequence[Payload]) -> list[StorageDriverClaim]:
        try:
            claims = await self.inner.store(context, payloads)
        except PayloadStoreError:
            raise
        except Exception as exc:
            why, retryable = _explain(exc)
            raise PayloadStoreError(
                f"cannot store a payload of {sum(p.ByteSize() for p in payloads)} bytes in {self.where}: {why}",
                retryable=retryable,
            ) from None
        if self.prefix:  # the client wrote under the prefix: the claim names the object where it is
            field = "key" if self.inner.type() == "aws.s3driver" else "object_name"
            claims = [
                StorageDriverClaim({**c.claim_data, field: self.prefix + c.claim_data[field]})
                if field in c.claim_data
                else c
                for c in claims
            ]
        return claims

    async def retrieve(
        self, context: StorageDriverRetrieveContext, claims: Sequence[StorageDriverClaim]
    ) -> list[Payload]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.retry_s
        delay, attempt = 0.5, 0
        while True:
            attempt += 1
            try:
                return await self.inner.retrieve(context, claims)
            except PayloadStoreError as exc:
                err = exc
            except Exception as exc:
                why, retryable = _explain(exc)
                names = ", ".join(
                    str(c.claim_data.get("key") or c.claim_data.get("path") or c.claim_data.get("object_name") or "?")[
                        :300
                    ]
                    for c in claims
                )
                err = PayloadStoreError(f"cannot read {names} from {self.where}: {why}", retryable=retryable)
            if not err.retryable or loop.time() + delay > deadline:
                if err.retryable:
                    err = PayloadStoreError(
                        f"{err} (gave up after {attempt} attempts in {self.retry_s:.0f}s)", retryable=True
                    )
                raise err
            log.warning("payload store read failed (attempt %d, retrying in %.1fs): %s", attempt, delay, err)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)


# --- what a client or worker is configured with -----------------------------------------------------------------


def storage_driver(settings: StorageSettings) -> StorageDriver:
    """The managed driver ``settings`` name.

    * ``s3``: Temporal's ``S3StorageDriver`` (``temporalio.contrib.aws.s3driver``, aioboto3) on any S3-compatible
      endpoint; its claims (``bucket``, ``key``, ``hash_value``) are the ones the other SDKs' S3 drivers read.
    * ``gcs``: Temporal's ``GCSStorageDriver`` (``temporalio.contrib.gcp.gcsdriver``, gcloud-aio-storage).
    * ``local`` (no bucket): :class:`LocalStorageDriver`, one machine's directory; only processes that see that
      directory can read its claims.

    The S3 and GCS clients are opened lazily, once per event loop, with ``request_timeout_s`` on each request."""
    kind = settings.kind
    if kind == "s3":
        where = f"S3 bucket {settings.bucket!r}" + (f" at {settings.endpoint}" if settings.endpoint else "")
        inner = _s3_driver(settings)
    elif kind == "gcs":
        where = f"GCS bucket {settings.bucket!r}" + (f" at {settings.endpoint}" if settings.endpoint else "")
        inner = _gcs_driver(settings)
    else:
        root = local_root(settings)
        where = f"local payload store {root}"
        inner = LocalStorageDriver(root)
    return ManagedDriver(
        inner, where=where, prefix=settings.prefix if kind != "local" else "", retry_s=settings.read_retry_s
    )


def external_storage(settings: StorageSettings | None = None) -> ExternalStorage:
    """Temporal's External Storage for ``settings`` (default: the embedded store).

    temporalio 1.35's data converter offloads every payload at least ``threshold_bytes`` big (a result, a large
    argument, a failure's details) to the driver and keeps only a claim in the history; any client or worker whose
    data converter has the same storage resolves the claim, in any language whose SDK has the feature. The order is the
    SDK's: the user's codec first, then the store, so an encrypting codec leaves only ciphertext in the bucket
    (``tests/test_sdk_contract.py`` holds that order)."""
    settings = settings or StorageSettings()
    return ExternalStorage(drivers=[storage_driver(settings)], payload_size_threshold=settings.threshold_bytes)


def with_storage(converter: DataConverter, settings: StorageSettings | None = None) -> DataConverter:
    """``converter`` with the External Storage of ``settings``; one that already has its own is kept."""
    if converter.external_storage is not None:
        return converter
    return dataclasses.replace(converter, external_storage=external_storage(settings))


def prepare(settings: StorageSettings) -> None:
    """At a worker's start: the embedded store's directory writable, and its cleanup (``retention_days``)."""
    if settings.kind != "local":
        return
    root = local_root(settings)
    try:
        LocalStorageDriver(root).ensure_writable()
    except OSError as exc:
        raise ConfigError(
            f"temporal.storage: the local payload store {root} is not writable "
            f"({type(exc).__name__}: {exc.strerror or exc}); set [temporal.storage] local_dir, "
            "[worker] state_dir or MCP_TASKS_STATE_DIR to a writable directory"
        ) from None
    if settings.retention_days is not None:
        removed = prune_local_store(root, settings.retention_days * 86400)
        if removed:
            log.info(
                "local payload store %s: removed %d payloads older than %s days", root, removed, settings.retention_days
            )


async def aclose_storage(converter: DataConverter) -> None:
    """Close this event loop's store clients of ``converter`` (a later use opens new ones): at a worker's end."""
    storage = converter.external_storage
    for driver in storage.drivers if storage is not None else ():
        clients = getattr(getattr(driver, "inner", None), "_mcp_clients", None)
        if isinstance(clients, _PerLoop):
            try:
                await clients.aclose()
            except Exception as exc:  # noqa: BLE001  (closing must not mask how the worker ended)
                log.warning("closing the payload store's client: %s", exc)


def settings_of(temporal_storage: StorageSettings, state_dir_setting: str | None = None) -> StorageSettings:
    """``[temporal.storage]`` with the embedded store under ``[worker] state_dir`` when it names no directory."""
    if temporal_storage.kind == "local" and not temporal_storage.local_dir and state_dir_setting:
        return temporal_storage.model_copy(update={"local_dir": f"{state_dir_setting}/payloads"})
    return temporal_storage
