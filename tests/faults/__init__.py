"""Fault injection for MCP streamable HTTP: :class:`FaultProxy` and its faults (see ``proxy.py``)."""

from tests.faults.proxy import (
    Fault,
    FaultProxy,
    Malformed,
    RateLimit,
    Refuse,
    ResetAfterSend,
    Rewrite,
    Rule,
    Seen,
    Stall,
    Status,
    Truncated,
)

__all__ = [
    "Fault",
    "FaultProxy",
    "Malformed",
    "RateLimit",
    "Refuse",
    "ResetAfterSend",
    "Rewrite",
    "Rule",
    "Seen",
    "Stall",
    "Status",
    "Truncated",
]
