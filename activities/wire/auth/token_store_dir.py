"""Where subjects' OAuth grants live: one encrypted file per record in a directory, each locked across processes.

Three kinds of record, each keyed so that nothing crosses: a grant by (subject, issuer, resource, client id); a
registered client by issuer (SEP-2352: another authorization server, another registration); a pending consent by its
``state``. A record's file name is a hash of its key; its content is Fernet (AES-128-CBC + HMAC-SHA256, from
``cryptography``) under the key in ``MCP_TASKS_TOKEN_KEY``, so the raw bytes hold no token and no subject.

Why a directory: one machine's workers (every process of it) share it with nothing more to run; the lock is
``fcntl.flock`` on the record's own lock file and every write is an atomic rename, so a reader never sees half a
record. Workers on many machines share one store by mounting one directory whose file system honours ``flock``
(NFSv4, not every network file system does); a store on a database with a compare-and-swap is the same three
methods (:meth:`TokenStore.read`, :meth:`TokenStore.write`, :meth:`TokenStore.locked`), not written yet.

Workflows see only a grant's id (:func:`grant_id`), never a token.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import json
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

#: The environment variable holding the store's Fernet key (``mcp-tasks login --new-key`` prints one).
KEY_ENV = "MCP_TASKS_TOKEN_KEY"
#: The environment variable naming the store's directory (default: ``token-store`` in the CLI's state directory).
DIR_ENV = "MCP_TASKS_TOKEN_DIR"
#: How long one process waits for another's lock on a record (a refresh holds it for one token request).
LOCK_WAIT_S = 30.0
#: A record larger than this is not ours.
MAX_RECORD = 256 * 1024


class StoreError(Exception):
    """The token store cannot be used: no key, a wrong key, a record that does not decrypt, a lock not had in time."""


def grant_id(subject: str, issuer: str, resource: str, client_id: str) -> str:
    """The opaque id of a subject's grant: what a workflow's input, history, memo and logs may carry."""
    return "grant-" + _digest("grant", subject, issuer, resource, client_id)[:32]


def _digest(*parts: str) -> str:
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


def new_key() -> str:
    """A fresh key for ``MCP_TASKS_TOKEN_KEY``."""
    from cryptography.fernet import Fernet

    return Fernet.generate_key().decode()


def default_directory() -> Path:
    base = os.environ.get(DIR_ENV)
    if base:
        return Path(base)
    state = os.environ.get("MCP_TASKS_STATE_DIR") or os.path.join(
        os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state"), "mcp-tasks"
    )
    return Path(state) / "token-store"


class TokenStore:
    """The directory store: records by kind and key, encrypted, each behind its own inter-process lock."""

    def __init__(self, directory: Path, key: str) -> None:
        from cryptography.fernet import Fernet

        try:
            self._fernet = Fernet(key.encode())
        except (ValueError, TypeError):
            raise StoreError(f"{KEY_ENV} is not a Fernet key (32 url-safe base64-encoded bytes)") from None
        self.directory = directory
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)

    @classmethod
    def from_env(cls) -> TokenStore:
        key = os.environ.get(KEY_ENV)
        if not key:
            raise StoreError(
                f"{KEY_ENV} is not set: the token store encrypts every grant with it "
                "(`mcp-tasks login --new-key` prints a new one)"
            )
        return cls(default_directory(), key)

    def _path(self, kind: str, key: tuple[str, ...]) -> Path:
        return self.directory / f"{kind}-{_digest(kind, *key)[:40]}"

    def read(self, kind: str, key: tuple[str, ...]) -> dict[str, Any] | None:
        from cryptography.fernet import InvalidToken

        path = self._path(kind, key)
        try:
            with path.open("rb") as fh:
                raw = fh.read(MAX_RECORD + 1)
        except FileNotFoundError:
            return None
        if len(raw) > MAX_RECORD:
            raise StoreError(f"token store record {path.name} is larger than {MAX_RECORD} bytes")
        try:
            record = json.loads(self._fernet.decrypt(raw))
        except InvalidToken:
            raise StoreError(f"token store record {path.name} does not decrypt with {KEY_ENV}") from None
        if not isinstance(record, dict) or record.get("_key") != [kind, *key]:
            raise StoreError(f"token store record {path.name} is not the record of its key")
        expires = record.get("_expires_at")
        if isinstance(expires, (int, float)) and expires < time.time():
            return None
        return record

    def write(self, kind: str, key: tuple[str, ...], record: dict[str, Any], *, ttl_s: float | None = None) -> None:
        body = {**record, "_key": [kind, *key]}
        if ttl_s is not None:
            body["_expires_at"] = time.time() + ttl_s
            self._sweep(kind, ttl_s)
        path = self._path(kind, key)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{time.monotonic_ns()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(self._fernet.encrypt(json.dumps(body).encode()))
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)  # atomic: a reader sees the old record or the new one
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise

    def _sweep(self, kind: str, ttl_s: float) -> None:
        """Records of a kind that expires (pending consents) older than ``ttl_s`` are deleted as new ones come: the
        directory stays bounded by what one ``ttl_s`` can write."""
        cutoff = time.time() - ttl_s
        for path in self.directory.glob(f"{kind}-*"):
            with contextlib.suppress(OSError):
                if path.stat().st_mtime < cutoff:
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
