"""Content-addressed store for results too large for workflow history.

Temporal fails a payload above 2 MiB and warns at 512 KiB. A result above ``inline_limit`` is written
here once, under its sha256, and the workflow carries only a reference. Writes are atomic (temp file
then rename), so a crashed worker never leaves a truncated blob under a valid name; writing the same
content twice is a no-op, so activity retries are harmless.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

INLINE_LIMIT = 256 * 1024  # well under Temporal's 512 KiB warning, leaving room for the rest of the outcome


def state_dir() -> Path:
    """The project's state directory (``$MCP_TASKS_STATE_DIR``, else ``~/.local/state/mcp-tasks``): the one
    default, shared by the result store and the embedded Temporal's SQLite file."""
    return Path(os.environ.get("MCP_TASKS_STATE_DIR") or Path.home() / ".local" / "state" / "mcp-tasks")


def default_root() -> Path:
    return state_dir() / "results"


class ResultStore:
    def __init__(self, root: str | Path | None = None, *, inline_limit: int = INLINE_LIMIT) -> None:
        self.root = Path(root) if root else default_root()
        self.inline_limit = inline_limit

    def ensure_writable(self) -> None:
        """Raise ``OSError`` unless a result can be written here (checked at worker start, not per result)."""
        self.root.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=self.root, prefix=".probe-")
        os.close(fd)
        os.unlink(probe)

    def put(self, value: Any) -> dict[str, Any]:
        data = json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
        digest = hashlib.sha256(data).hexdigest()
        path = self.root / digest[:2] / f"{digest}.json"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, path)
        return {"digest": f"sha256:{digest}", "size": len(data), "uri": path.as_uri()}

    def maybe_offload(self, value: dict[str, Any]) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """(inline value, None) when small enough, else (None, reference)."""
        size = len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())
        if size <= self.inline_limit:
            return value, None
        return None, self.put(value)

    @staticmethod
    def get(ref: dict[str, Any]) -> Any:
        uri: str = ref["uri"]
        if not uri.startswith("file://"):
            raise ValueError(f"unsupported result store URI {uri!r}")
        data = Path(uri[len("file://") :]).read_bytes()
        if "sha256:" + hashlib.sha256(data).hexdigest() != ref["digest"]:
            raise ValueError(f"stored result at {uri} does not match its digest {ref['digest']}")
        return json.loads(data)
