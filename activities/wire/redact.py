"""Keeping resolved secret values out of error texts and log lines.

Credentials reach the worker only by reference (an environment variable name); their *values* are read
at connect time (``client.resolve_refs``). A server may still echo one back (a 401 body that quotes the
``Authorization`` header, a stdio child that prints its environment in an error). So:

* every transport knows the values it resolved (its header values, its stdio child's referenced env) and
  scrubs each :class:`~.errors.McpWireError` leaving it (``message``, ``args``, ``raw``, ``data``);
* every value ever resolved in this process is also kept in a process-wide registry, and
  :class:`RedactingFilter` (installed on the log handlers by ``mcp_temporal_tasks.worker.runner.setup_logging``) scrubs log
  records with it: message, arguments, exception and stack text.

A value is replaced by ``[redacted]`` wherever it occurs. Values shorter than :data:`MIN_SECRET_LEN`
are not tracked: scrubbing them would mangle ordinary text and they protect nothing.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Iterable
from typing import Any

REDACTED = "[redacted]"
MIN_SECRET_LEN = 4
#: The marker of a capped text (``limits.cap_text``/``safe_raw``): a secret cut there must not leak its prefix.
_TRUNCATED = re.compile(r"…\[truncated(?: \d+ chars)?\]$")

_lock = threading.Lock()
_registry: frozenset[str] = frozenset()


def secret_forms(values: Iterable[str]) -> frozenset[str]:
    """The strings to scrub for these values: each value, and the credential of ``Scheme credential`` forms."""
    out: set[str] = set()
    for value in values:
        if not isinstance(value, str):
            continue
        value = value.strip()
        scheme, _, credential = value.partition(" ")
        for form in (value, credential.strip()):  # "Bearer abc…": a server may echo only the token
            if len(form) >= MIN_SECRET_LEN:
                out.add(form)
                out.add(json.dumps(form)[1:-1])  # as it appears inside JSON text (raw payloads)
    return frozenset(out)


def register(values: Iterable[str]) -> frozenset[str]:
    """Add resolved secret values to the process-wide registry; returns their scrub forms."""
    global _registry
    forms = secret_forms(values)
    if forms and not forms <= _registry:
        with _lock:
            _registry = _registry | forms
    return forms


def registered() -> frozenset[str]:
    return _registry


def scrub(text: str, secrets: Iterable[str] | None = None) -> str:
    """``text`` with every secret (default: the registry) replaced by ``[redacted]``."""
    pool = _registry if secrets is None else secrets
    if not pool or not text:
        return text
    for secret in sorted(pool, key=len, reverse=True):
        if secret in text:
            text = text.replace(secret, REDACTED)
    cut = _TRUNCATED.search(text)
    if cut is not None:
        body = text[: cut.start()]
        for secret in pool:  # a capped text may end in the first characters of a secret
            for k in range(len(secret) - 1, MIN_SECRET_LEN - 1, -1):
                if body.endswith(secret[:k]):
                    body = body[:-k] + REDACTED
                    break
        text = body + cut.group(0)
    return text


def scrub_obj(obj: Any, secrets: Iterable[str] | None = None) -> Any:
    """A JSON-like value with every string (keys too) scrubbed; other values unchanged."""
    if isinstance(obj, str):
        return scrub(obj, secrets)
    if isinstance(obj, dict):
        return {scrub_obj(k, secrets): scrub_obj(v, secrets) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(scrub_obj(v, secrets) for v in obj)
    return obj


def scrub_error(exc: Any, secrets: Iterable[str] | None) -> Any:
    """Scrub a wire error in place (message, str(), raw, data) and return it."""
    pool = frozenset(secrets or ())
    if not pool:
        return exc
    exc.message = scrub(exc.message, pool)
    exc.args = (exc.message,)
    exc.raw = scrub_obj(exc.raw, pool)
    exc.data = scrub_obj(exc.data, pool)
    return exc


class RedactingFilter(logging.Filter):
    """Scrubs registered secret values from a record's message, arguments, exception and stack text.

    Install it on *handlers* (a logger's own filters do not see records propagated from its children).
    """

    def filter(self, record: logging.LogRecord) -> bool:
        pool = _registry
        if not pool:
            return True
        try:
            message = record.getMessage()
        except Exception:  # a broken format string: leave it to the handler to report
            return True
        record.msg, record.args = scrub(message, pool), None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = scrub(record.exc_text, pool)
        if record.stack_info:
            record.stack_info = scrub(record.stack_info, pool)
        return True


def install_log_redaction(*handlers: logging.Handler) -> None:
    """Put one :class:`RedactingFilter` on these handlers (default: the root logger's and ``lastResort``)."""
    targets = list(handlers) or [*logging.getLogger().handlers, *([logging.lastResort] if logging.lastResort else [])]
    for handler in targets:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())


__all__ = ["REDACTED", "MIN_SECRET_LEN", "RedactingFilter", "install_log_redaction", "register", "registered",
           "scrub", "scrub_error", "scrub_obj", "secret_forms"]
