"""The object store: token-store records in an S3 bucket, for workers on many machines (conditional writes, leases).

Why an object store: it is what a deployment of workers on many machines already shares (``[temporal.storage]``
keeps large payloads in one), it needs no file system that honours ``flock``, and S3 (since 2024) and every
S3-compatible store worth running decide a conditional write on the server, atomically: ``If-None-Match: *`` creates
an object only if there is none, ``If-Match: ETAG`` replaces only the version that was read.

* A record is one object, ``PREFIX`` + its name (a hash of its key: no subject, no token), sealed with Fernet as the
  directory store's files are.
* :meth:`S3TokenStore.locked` is a lease: the object ``NAME.lease``, created with ``If-None-Match: *``. A lease older
  than :data:`LEASE_S` (by the store's own clock: its ``Last-Modified`` against the ``Date`` of the answer, so no
  machine's clock matters) is taken over with ``If-Match`` on its ETag, so one machine wins it; a machine that dies
  holding a lease loses it after at most :data:`LEASE_S`.
* Under its lease a holder's writes of the record are compare-and-swaps on the ETag it last saw (``If-None-Match: *``
  if it saw none): a lease outlived (a holder stalled past :data:`LEASE_S` while another took over) cannot overwrite
  the other's record; the write is refused with a :class:`StoreError` naming it. With the refresh's own rule (a grant
  marked ``refreshing`` is never refreshed again: ``authorization_code``), no refresh token is sent twice.

Every request is bounded (:data:`REQUEST_TIMEOUT_S`, one retry); the calls are synchronous like the directory
store's file I/O. Credentials, region and endpoint are the AWS environment's (``AWS_ENDPOINT_URL_S3`` for MinIO and
other S3-compatible stores), as for ``[temporal.storage]``'s S3 driver.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import email.utils
import functools
import os
import secrets
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

from mcp_temporal_tasks.activities.wire.auth.token_records import LOCK_WAIT_S, MAX_RECORD, Store, StoreError

#: How long a lease holds without its holder: longer than any holder keeps it (a refresh's whole flow is bounded at
#: 20 s, ``authorization_code.FLOW_TIMEOUT_S``), short enough that a dead machine's lease ends within one activity
#: retry or two.
LEASE_S = 30.0
#: Each request's connect and read timeout.
REQUEST_TIMEOUT_S = 10.0
#: The most consents one write sweeps (their listing is bounded too).
SWEEP_MAX = 1000


class WriteRefused(StoreError):
    """A conditional write refused: the object changed since this holder saw it (or exists, for a create)."""


@dataclasses.dataclass
class _Held:
    """One lease held by this task: the record's ETag as this holder last saw it (None: it saw no record)."""

    etag: str | None


#: The leases the running task holds, by record name (copied on entry: a sibling task never sees them).
_held: contextvars.ContextVar[dict[str, _Held] | None] = contextvars.ContextVar("token_store_s3_held", default=None)


@functools.lru_cache(maxsize=4)
def _client(aws_env: tuple[tuple[str, str], ...]) -> Any:
    """One S3 client per AWS environment (where it reaches, as whom), shared by every store of the process: a client
    is thread-safe and costly to build (its service model)."""
    try:
        import boto3
        from botocore.config import Config
    except ImportError as exc:
        raise StoreError(f"the object token store needs boto3: pip install 'mcp-temporal-tasks[s3]' ({exc})") from None
    config = Config(
        connect_timeout=REQUEST_TIMEOUT_S,
        read_timeout=REQUEST_TIMEOUT_S,
        retries={"total_max_attempts": 2, "mode": "standard"},
    )
    return boto3.session.Session().client("s3", config=config)


class S3TokenStore(Store):
    """The object store: records in ``bucket`` under ``prefix``, encrypted, each with a lease across machines."""

    def __init__(self, bucket: str, prefix: str, key: str, *, client: Any = None, lease_s: float = LEASE_S) -> None:
        super().__init__(key)
        self.bucket = bucket
        self.prefix = prefix
        self.lease_s = lease_s
        self.where = f"s3://{bucket}/{prefix}"
        self._client = client

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = _client(tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("AWS_"))))
        return self._client

    def _key(self, name: str) -> str:
        return self.prefix + name

    @contextlib.contextmanager
    def _calling(self, what: str, name: str) -> Iterator[None]:
        """One request, its failure a :class:`StoreError` naming the store, the object and why."""
        from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

        try:
            yield
        except ClientError as exc:
            error = exc.response.get("Error", {})
            code = str(error.get("Code") or exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode"))
            if code in ("PreconditionFailed", "412", "ConditionalRequestConflict", "409"):
                raise WriteRefused(
                    f"token store record {name} in {self.where}: the conditional write was refused (another "
                    "machine changed it since this one read it)"
                ) from None
            reasons = {
                "NoSuchBucket": "the bucket does not exist",
                "AccessDenied": "access denied",
                "InvalidAccessKeyId": "the access key is unknown",
                "SignatureDoesNotMatch": "the secret key is refused",
            }
            why = reasons.get(code, f"the store answered {code[:60]}")
            raise StoreError(f"token store {self.where} cannot {what} {name}: {why}") from None
        except NoCredentialsError:
            raise StoreError(f"token store {self.where}: no AWS credentials in the environment") from None
        except BotoCoreError as exc:
            why = type(exc).__name__
            raise StoreError(f"token store {self.where} cannot be reached to {what} {name}: {why}") from None

    def _get_or_none(self, name: str) -> tuple[bytes, str, dict[str, Any]] | None:
        """The object's bytes (bounded), ETag and HTTP headers, or None if there is none."""
        from botocore.exceptions import ClientError

        with self._calling("read", name):
            try:
                answer = self.client.get_object(Bucket=self.bucket, Key=self._key(name))
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                    return None
                raise
            body = answer["Body"]
            try:
                raw = body.read(MAX_RECORD + 1)
            finally:
                body.close()
        return raw, str(answer["ETag"]), answer.get("ResponseMetadata", {}).get("HTTPHeaders", {})

    def _put(self, name: str, data: bytes, *, if_match: str | None = None, create: bool = False) -> str:
        """Store ``data`` as ``name`` (only over ETag ``if_match``, or only where there is none: ``create``)."""
        conditions: dict[str, str] = {}
        if if_match is not None:
            conditions["IfMatch"] = if_match
        elif create:
            conditions["IfNoneMatch"] = "*"
        with self._calling("write", name):
            answer = self.client.put_object(Bucket=self.bucket, Key=self._key(name), Body=data, **conditions)
        return str(answer["ETag"])

    # --- the interface ----------------------------------------------------------------------------------------

    def read(self, kind: str, key: tuple[str, ...]) -> dict[str, Any] | None:
        name = self.name(kind, key)
        got = self._get_or_none(name)
        held = (_held.get() or {}).get(name)
        if held is not None:
            held.etag = got[1] if got is not None else None
        if got is None:
            return None
        return self.unseal(kind, key, got[0])

    def write(self, kind: str, key: tuple[str, ...], record: dict[str, Any], *, ttl_s: float | None = None) -> None:
        name = self.name(kind, key)
        sealed = self.seal(kind, key, record, ttl_s)
        if ttl_s is not None:
            self._sweep(kind, ttl_s)
        held = (_held.get() or {}).get(name)
        if held is None:
            self._put(name, sealed)
            return
        held.etag = self._put(name, sealed, if_match=held.etag, create=held.etag is None)

    def _sweep(self, kind: str, ttl_s: float) -> None:
        """Records of a kind that expires (pending consents, their answers) past their own time are deleted as new
        ones come (at most :data:`SWEEP_MAX` looked at a time): the prefix stays bounded by what the records' lifetimes
        can write. Records of one kind differ in lifetime (a task's consent waits as long as the task does), so a
        record older than this one's ``ttl_s`` is read and goes only if its sealed expiry has passed."""
        import datetime

        # This machine's clock against the store's: off by less than a consent's life (15 minutes), it only moves
        # when a stale consent goes (one read past its time is refused anyway, by its own sealed expiry).
        cutoff = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=ttl_s)
        with self._calling("list", f"{kind}-*"):
            listing = self.client.list_objects_v2(Bucket=self.bucket, Prefix=self._key(f"{kind}-"), MaxKeys=SWEEP_MAX)
        for item in listing.get("Contents", []):
            if item["LastModified"] < cutoff:
                name = item["Key"][len(self.prefix) :]
                with contextlib.suppress(StoreError):
                    got = self._get_or_none(name)
                    if got is not None and self.expired(got[0]):
                        with self._calling("delete", name):
                            self.client.delete_object(Bucket=self.bucket, Key=item["Key"], IfMatch=got[1])

    def delete(self, kind: str, key: tuple[str, ...]) -> None:
        name = self.name(kind, key)
        with self._calling("delete", name):
            self.client.delete_object(Bucket=self.bucket, Key=self._key(name))

    @contextlib.asynccontextmanager
    async def locked(self, kind: str, key: tuple[str, ...], *, wait_s: float = LOCK_WAIT_S) -> AsyncIterator[None]:
        """Hold the record's lease (every machine sharing the bucket excluded); under it, writes of the record are
        compare-and-swaps on the ETag this holder last saw. Waits at most ``wait_s``."""
        name = self.name(kind, key)
        lease = f"{name}.lease"
        etag = await self._take(lease, wait_s)
        try:
            got = self._get_or_none(name)  # the version this holder's first write may replace
            token = _held.set({**(_held.get() or {}), name: _Held(got[1] if got is not None else None)})
            try:
                yield
            finally:
                _held.reset(token)
        finally:
            self._release(lease, etag)

    async def _take(self, lease: str, wait_s: float) -> str:
        deadline = time.monotonic() + wait_s
        pause = 0.05
        while True:
            holder = secrets.token_hex(16).encode()
            with contextlib.suppress(WriteRefused):
                return self._put(lease, holder, create=True)
            current = self._get_or_none(lease)
            if current is not None and self._expired(current[2]):
                with contextlib.suppress(WriteRefused):  # another machine took it over first
                    return self._put(lease, holder, if_match=current[1])
            if time.monotonic() > deadline:
                raise StoreError(f"token store record {lease.removesuffix('.lease')} stayed locked for {wait_s:g} s")
            await asyncio.sleep(pause)
            pause = min(pause * 2, 0.5)

    def _expired(self, headers: dict[str, Any]) -> bool:
        """Whether a lease is older than :attr:`lease_s` by the store's clock (``Last-Modified`` against ``Date``)."""
        try:
            written = email.utils.parsedate_to_datetime(headers["last-modified"])
            now = email.utils.parsedate_to_datetime(headers["date"])
        except (KeyError, TypeError, ValueError):
            return False
        return (now - written).total_seconds() > self.lease_s

    def _release(self, lease: str, etag: str) -> None:
        """Delete the lease if it is still ours (``If-Match``): one taken over meanwhile is another holder's."""
        with contextlib.suppress(StoreError), self._calling("release", lease):
            self.client.delete_object(Bucket=self.bucket, Key=self._key(lease), IfMatch=etag)
