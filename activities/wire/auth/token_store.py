"""Where subjects' OAuth grants live: the token store this process opens, the directory or the object store, by env.

``MCP_TASKS_TOKEN_STORE`` unset: the directory store (``token_store_dir``; ``MCP_TASKS_TOKEN_DIR``, default
``token-store`` in the CLI's state directory), for one machine's workers. ``MCP_TASKS_TOKEN_STORE=s3://BUCKET/PREFIX``:
the object store (``token_store_s3``), for workers on many machines, each reaching the bucket with the AWS environment
the ``[temporal.storage]`` S3 driver reads (``AWS_ENDPOINT_URL_S3`` for MinIO and other S3-compatible stores). Both
seal records with ``MCP_TASKS_TOKEN_KEY``. The environment, not the worker's TOML, because the CLI
(``mcp-tasks login``) and every worker must open the same store, and the key is already there.

Workflows see only a grant's id (:func:`grant_id`), never a token.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from urllib.parse import urlsplit

from mcp_temporal_tasks.activities.wire.auth.token_records import (
    KEY_ENV,
    LOCK_WAIT_S,
    MAX_RECORD,
    Store,
    StoreError,
    grant_id,
    new_key,
)
from mcp_temporal_tasks.activities.wire.auth.token_store_dir import DIR_ENV, TokenStore, default_directory

#: The environment variable choosing the store: unset, the directory; ``s3://BUCKET[/PREFIX]``, the object store.
STORE_ENV = "MCP_TASKS_TOKEN_STORE"

#: S3's bucket names (3-63 lower-case letters, digits, dots and hyphens, a letter or digit at each end).
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")


def s3_location(value: str) -> tuple[str, str]:
    """The bucket and key prefix (``""`` or ending in ``/``) of ``s3://BUCKET[/PREFIX]``; anything else is one
    :class:`StoreError` saying what is wrong with it."""
    where = f"{STORE_ENV}={value[:120]!r}" if "@" not in value else STORE_ENV
    if len(value) > 300 or any(c.isspace() or ord(c) < 32 for c in value):
        raise StoreError(f"{where}: must be s3://BUCKET[/PREFIX], at most 300 characters with no spaces")
    parts = urlsplit(value)
    if parts.scheme != "s3":
        raise StoreError(
            f"{where}: must be s3://BUCKET[/PREFIX] (the object store); leave it unset for the directory store "
            f"({DIR_ENV})"
        )
    if parts.query or parts.fragment or "@" in parts.netloc or ":" in parts.netloc:
        raise StoreError(
            f"{where}: s3://BUCKET[/PREFIX] takes no credentials, port, query or fragment (credentials and the "
            "endpoint come from the AWS environment: AWS_ACCESS_KEY_ID, AWS_ENDPOINT_URL_S3...)"
        )
    if not _BUCKET.fullmatch(parts.netloc) or ".." in parts.netloc:
        raise StoreError(f"{where}: {parts.netloc!r} is not an S3 bucket name (3-63 of a-z 0-9 . -)")
    prefix = parts.path.strip("/")
    if prefix and any(seg in ("", ".", "..") for seg in prefix.split("/")):
        raise StoreError(f"{where}: the prefix has an empty, '.' or '..' segment")
    return parts.netloc, prefix + "/" if prefix else ""


def open_store(env: Mapping[str, str] | None = None) -> Store:
    """The store ``env`` (default: this process's environment) names, its key checked; every bad value is one
    :class:`StoreError` naming the variable."""
    env = os.environ if env is None else env
    key = env.get(KEY_ENV)
    if not key:
        raise StoreError(
            f"{KEY_ENV} is not set: the token store encrypts every grant with it "
            "(`mcp-tasks login --new-key` prints a new one)"
        )
    where = env.get(STORE_ENV)
    if not where:
        return TokenStore(default_directory(env), key)
    bucket, prefix = s3_location(where)
    if env.get(DIR_ENV):
        raise StoreError(f"{STORE_ENV} and {DIR_ENV} are both set: one store only (unset {DIR_ENV})")
    from mcp_temporal_tasks.activities.wire.auth.token_store_s3 import S3TokenStore

    return S3TokenStore(bucket, prefix, key)


__all__ = [
    "DIR_ENV",
    "KEY_ENV",
    "LOCK_WAIT_S",
    "MAX_RECORD",
    "STORE_ENV",
    "Store",
    "StoreError",
    "TokenStore",
    "grant_id",
    "new_key",
    "open_store",
    "s3_location",
]
