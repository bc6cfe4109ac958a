"""The directory store: one encrypted file per token-store record, each locked across the machine's processes.

Why a directory: one machine's workers (every process of it) share it with nothing more to run; the lock is
``fcntl.flock`` on the record's own lock file and every write is an atomic rename, so a reader never sees half a
record. Workers on many machines share the object store instead (``token_store_s3``): a directory mounted on many
machines shares the lock only where its file system honours ``flock`` (NFSv4; not every network file system does).
Records, names and sealing: ``token_records``.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

from mcp_temporal_tasks.activities.wire.auth.token_records import LOCK_WAIT_S, MAX_RECORD, Store, StoreError

#: The environment variable naming the store's directory (default: ``token-store`` in the CLI's state directory).
DIR_ENV = "MCP_TASKS_TOKEN_DIR"


def default_directory(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    base = env.get(DIR_ENV)
    if base:
        return Path(base)
    state = env.get("MCP_TASKS_STATE_DIR") or os.path.join(
        env.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state"), "mcp-tasks"
    )
    return Path(state) / "token-store"


class TokenStore(Store):
    """The directory store: records by kind and key, encrypted, each behind its own inter-process lock."""

    def __init__(self, directory: Path, key: str) -> None:
        super().__init__(key)
        self.directory = directory
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)

    def _path(self, kind: str, key: tuple[str, ...]) -> Path:
        return self.directory / self.name(kind, key)

    def read(self, kind: str, key: tuple[str, ...]) -> dict[str, Any] | None:
        path = self._path(kind, key)
        try:
            with path.open("rb") as fh:
                raw = fh.read(MAX_RECORD + 1)
        except FileNotFoundError:
            return None
        return self.unseal(kind, key, raw)

    def write(self, kind: str, key: tuple[str, ...], record: dict[str, Any], *, ttl_s: float | None = None) -> None:
        sealed = self.seal(kind, key, record, ttl_s)
        if ttl_s is not None:
            self._sweep(kind)
        path = self._path(kind, key)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{time.monotonic_ns()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(sealed)
                fh.flush()
                os.fsync(fh.fileno())
            if ttl_s is not None:
                # The file's mtime is its expiry: the sweep needs no key, and records of one kind may differ in ttl.
                expires = time.time() + ttl_s
                os.utime(tmp, (expires, expires))
            os.replace(tmp, path)  # atomic: a reader sees the old record or the new one
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise

    def _sweep(self, kind: str) -> None:
        """Records of a kind that expires (pending consents, their answers) past their time are deleted as new ones
        come (a record that expires carries its expiry as its file's mtime): the directory stays bounded by what the
        records' lifetimes can write."""
        now = time.time()
        for path in self.directory.glob(f"{kind}-*"):
            if path.suffix == ".lock":
                continue  # a lock file another process may hold: never replaced under it
            with contextlib.suppress(OSError):
                if path.stat().st_mtime < now:
                    path.unlink()

    def delete(self, kind: str, key: tuple[str, ...]) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._path(kind, key).unlink()

    @contextlib.asynccontextmanager
    async def locked(self, kind: str, key: tuple[str, ...], *, wait_s: float = LOCK_WAIT_S) -> AsyncIterator[None]:
        """Hold the record's lock (every process on the machine, and on a shared ``flock``-honouring mount): the
        compare-and-swap section of a refresh. Waits at most ``wait_s``; the lock dies with its process."""
        path = self._path(kind, key).with_suffix(".lock")
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            deadline = time.monotonic() + wait_s
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise StoreError(f"token store record {path.stem} stayed locked for {wait_s:g} s") from None
                    await asyncio.sleep(0.05)
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
