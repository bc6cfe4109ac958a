"""The token store's one interface and what its backends share: records named by a hash of their key, sealed by Fernet.

Kinds of record, each keyed so that nothing crosses: a grant by (subject, issuer, resource, client id); a registered
client by issuer (SEP-2352: another authorization server, another registration); a pending consent by its ``state``;
a consent's answer (the authorization code a callback received) by an opaque random id, the only thing of it a
workflow is handed (and, by a grant's opaque id, the tasks waiting for it); a subject's identity-provider ID token by
(subject, IdP issuer). A record's name is a hash of its key; its content is Fernet (AES-128-CBC + HMAC-SHA256, from
``cryptography``) under the key in ``MCP_TASKS_TOKEN_KEY``, so neither names nor bytes hold a token or a subject.

Every backend is the same four methods (:meth:`Store.read`, :meth:`Store.write`, :meth:`Store.delete` and
:meth:`Store.locked`, the section in which a refresh compares the grant's generation and swaps it): the directory
(``token_store_dir``) and the object store (``token_store_s3``), side by side; ``token_store`` chooses one.
"""

from __future__ import annotations

import abc
import contextlib
import hashlib
import json
import time
from typing import Any

#: The environment variable holding the store's Fernet key (``mcp-tasks login --new-key`` prints one).
KEY_ENV = "MCP_TASKS_TOKEN_KEY"
#: How long one process waits for another's lock on a record (a refresh holds it for one token request).
LOCK_WAIT_S = 30.0
#: A record larger than this is not ours.
MAX_RECORD = 256 * 1024


class StoreError(Exception):
    """The token store cannot be used: no key, a wrong key, a record that does not decrypt, a lock not had in time,
    a store that cannot be reached, a conditional write refused."""


def grant_id(subject: str, issuer: str, resource: str, client_id: str) -> str:
    """The opaque id of a subject's grant: what a workflow's input, history, memo and logs may carry."""
    return "grant-" + _digest("grant", subject, issuer, resource, client_id)[:32]


def _digest(*parts: str) -> str:
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


def new_key() -> str:
    """A fresh key for ``MCP_TASKS_TOKEN_KEY``."""
    from cryptography.fernet import Fernet

    return Fernet.generate_key().decode()


class Store(abc.ABC):
    """Records by kind and key, encrypted, each with its own lock across every process that shares the store."""

    def __init__(self, key: str) -> None:
        from cryptography.fernet import Fernet

        try:
            self._fernet = Fernet(key.encode())
        except (ValueError, TypeError):
            raise StoreError(f"{KEY_ENV} is not a Fernet key (32 url-safe base64-encoded bytes)") from None

    @staticmethod
    def name(kind: str, key: tuple[str, ...]) -> str:
        """The record's name in the store: its kind and a hash of its key (no subject, no token)."""
        return f"{kind}-{_digest(kind, *key)[:40]}"

    def seal(self, kind: str, key: tuple[str, ...], record: dict[str, Any], ttl_s: float | None) -> bytes:
        body = {**record, "_key": [kind, *key]}
        if ttl_s is not None:
            body["_expires_at"] = time.time() + ttl_s
        return self._fernet.encrypt(json.dumps(body).encode())

    def expired(self, raw: bytes) -> bool:
        """Whether a sealed record is past its own expiry (a sweep's test: records of one kind differ in lifetime). A
        record that does not decrypt, or has no expiry, is not expired: a sweep leaves what it cannot judge."""
        from cryptography.fernet import InvalidToken

        try:
            expires = json.loads(self._fernet.decrypt(raw[: MAX_RECORD + 1])).get("_expires_at")
        except (InvalidToken, ValueError, AttributeError):
            return False
        return isinstance(expires, (int, float)) and expires < time.time()

    def unseal(self, kind: str, key: tuple[str, ...], raw: bytes) -> dict[str, Any] | None:
        """The record in ``raw`` (None once expired); a record that is too large, does not decrypt or is another
        key's is a :class:`StoreError` naming it."""
        from cryptography.fernet import InvalidToken

        name = self.name(kind, key)
        if len(raw) > MAX_RECORD:
            raise StoreError(f"token store record {name} is larger than {MAX_RECORD} bytes")
        try:
            record = json.loads(self._fernet.decrypt(raw))
        except InvalidToken:
            raise StoreError(f"token store record {name} does not decrypt with {KEY_ENV}") from None
        if not isinstance(record, dict) or record.get("_key") != [kind, *key]:
            raise StoreError(f"token store record {name} is not the record of its key")
        expires = record.get("_expires_at")
        if isinstance(expires, (int, float)) and expires < time.time():
            return None
        return record

    @abc.abstractmethod
    def read(self, kind: str, key: tuple[str, ...]) -> dict[str, Any] | None:
        """The record, or None (none, or expired)."""

    @abc.abstractmethod
    def write(self, kind: str, key: tuple[str, ...], record: dict[str, Any], *, ttl_s: float | None = None) -> None:
        """Replace the record whole (a reader sees the old one or the new one). Under :meth:`locked` of the same
        record, a write replaces only the version this holder last saw: another's write meanwhile is a
        :class:`StoreError`, never overwritten."""

    @abc.abstractmethod
    def delete(self, kind: str, key: tuple[str, ...]) -> None:
        """Forget the record (nothing if there is none)."""

    @abc.abstractmethod
    def locked(
        self, kind: str, key: tuple[str, ...], *, wait_s: float = LOCK_WAIT_S
    ) -> contextlib.AbstractAsyncContextManager[None]:
        """Hold the record's lock, every process sharing the store excluded: the compare-and-swap section of a
        refresh. Waits at most ``wait_s`` (then :class:`StoreError`); a holder that dies loses it."""
