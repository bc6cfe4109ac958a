"""What an own-path worker lists at start and its workflows read: imported passed through the workflow sandbox, so the
sandbox sees this process's objects (a module it re-imports would start empty)."""

from __future__ import annotations

from typing import Any

#: The tools of langchain-mcp-adapters, listed (and wrapped) when the worker starts.
TOOLS: list[Any] = []
