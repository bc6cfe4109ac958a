"""A stdio MCP server as a child process of ours: started tied to us, ended by the spec's shutdown, always.

Every child we start is gone within :data:`SHUTDOWN_BOUND_S` of its close starting, whatever it ignores, and none
outlives this process (``PR_SET_PDEATHSIG``): the why and the steps are on :class:`StdioChild`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator
from typing import Any

import mcp_types

from mcp_temporal_tasks.protocol.limits import MAX_REPLY_BYTES

log = logging.getLogger(__name__)

#: After stdin is closed: how long the child has to exit by itself (the spec's "wait for the server to exit").
EOF_WAIT_S = 2.0
#: After SIGTERM to its process group: how long before SIGKILL.
TERM_WAIT_S = 2.0
#: After SIGKILL: how long the kernel gets to end and reap it (only a process in uninterruptible sleep takes long).
KILL_WAIT_S = 1.0
#: A child is gone within this of its close starting, whatever it does.
SHUTDOWN_BOUND_S = EOF_WAIT_S + TERM_WAIT_S + KILL_WAIT_S
#: A write the child does not take (it stopped reading stdin and the pipe is full) fails after this.
WRITE_TIMEOUT_S = 30.0
#: How long the exec shim may take to become the server (it reports a failed exec before that).
_EXEC_WAIT_S = 10.0
_POLL_S = 0.01

#: The exec shim: argv = [our pid, exec-report fd, command...]. Ties the child to us, then becomes the command; a
#: failed exec is reported on the fd (closed on exec otherwise), as subprocess reports one.
_SHIM = r"""
import os, sys
parent, report, argv = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
try:
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL
except Exception:
    pass
if os.getppid() != parent:  # our parent died before the tie was made
    os._exit(1)
os.set_inheritable(report, False)
try:
    os.execvp(argv[0], argv)
except OSError as exc:
    os.write(report, f"{type(exc).__name__}: [Errno {exc.errno}] {exc.strerror}: {argv[0]!r}".encode())
    os._exit(127)
"""

#: Every child started by this process and not yet known gone: what :func:`kill_all` ends.
_live: set[StdioChild] = set()


class ChildStartError(OSError):
    """The command could not be started (not found, not executable): nothing was sent to it."""


class StdioChild:
    """One stdio server process. :meth:`start` it, read :meth:`messages`, :meth:`send`, then :meth:`aclose`.

    Shutdown (https://modelcontextprotocol.io/specification/2025-11-25/basic/lifecycle#shutdown),
    :meth:`StdioChild.aclose`:

    1. close the child's stdin, then wait up to :data:`EOF_WAIT_S` (2 s) for it (and its process group) to exit;
    2. ``SIGTERM`` to its process group, then wait up to :data:`TERM_WAIT_S` (2 s);
    3. ``SIGKILL`` to its process group, then wait up to :data:`KILL_WAIT_S` (1 s) for the kernel to reap it.

    So every child we start is gone within :data:`SHUTDOWN_BOUND_S` (5 s) of its close starting, whatever it ignores. A
    caller that cannot wait that long (it is cancelled, or ``run``'s interrupt deadline is up) ends it at once: a
    cancelled ``aclose`` sends ``SIGKILL`` before it returns, and :func:`kill_all` does the same for every live child,
    synchronously, on the way out of a process.

    Tied to us: the child is started through a tiny exec shim that sets ``PR_SET_PDEATHSIG`` (Linux) to ``SIGKILL``
    before it becomes the server, so even a ``SIGKILL`` of this process leaves no child (the shim replaces itself with
    the command: the child *is* the server). Not ``preexec_fn``: a worker has threads (the Temporal core's), and
    ``preexec_fn`` after ``fork`` in a threaded process can deadlock. The child leads a process group of its own, as
    with the SDK, so that a terminal's Ctrl-C reaches ``run`` alone (which cancels the task through this child, that
    must still be alive for it) and so that steps 2 and 3 reach whatever the server itself started. What a server starts
    and moves out of its group (a daemon) is out of reach by design; a ``SIGKILL`` of us kills the child itself, not
    descendants it left in its group (they get EOF on the pipes they inherited).

    Why not the SDK's ``mcp.client.stdio.stdio_client`` (``mcp==2.3.0``), which we used before: its shutdown runs in the
    task that entered the context, in an anyio shielded scope, and an asyncio ``task.cancel()`` (how Temporal and
    ``asyncio.wait_for`` cancel) is not held off by that shield, as its own comment says. Our bounded close
    (``wait_for(pool.aclose(), 2 s)``) cancelled it after exactly its 2 s stdin grace, right before its ``SIGTERM``; its
    task group then waited without end on its shielded drain of the child's stdout, which ends only when the child does,
    and a child kept alive by its own timers (the reference server-everything) never did: ``run`` hung after the
    outcome, and after a ``SIGKILL`` the child lived on under PID 1 (no parent-death tie in a new session). Its bounds
    are module constants, its process is private, so none of this can be fixed from outside.

    Kept from the SDK: the message framing (one JSON-RPC message per line, validated by
    ``mcp_types.jsonrpc_message_adapter``, written as ``model_dump_json(by_alias=True, exclude_unset=True)``) and the
    safe inherited environment (:func:`.sdk_compat.default_stdio_environment`, given by the caller). Added: a line is
    bounded (:data:`~protocol.limits.MAX_REPLY_BYTES`; a longer one is skipped and reported, never buffered), invalid
    UTF-8 in a line is that line's error (the SDK's strict decoding ended the whole session), and a write is bounded in
    time (a child that stops reading its stdin cannot hold a request forever).
    """

    def __init__(self, process: asyncio.subprocess.Process, name: str) -> None:
        self.process = process
        self.name = name
        self.pid = process.pid
        self._write_lock = asyncio.Lock()
        self._closing: asyncio.Task[None] | None = None
        #: Its process group was seen empty: never signal that id again (it may be reused).
        self._group_gone = False
        _live.add(self)

    @classmethod
    async def start(
        cls, command: list[str], *, cwd: str | None = None, env: dict[str, str] | None = None, errlog: Any = None
    ) -> StdioChild:
        """Start ``command`` (its stderr goes to ``errlog``, default ours). Raises :class:`ChildStartError`."""
        if not command or any("\0" in part for part in command):
            raise ChildStartError("empty command or a NUL in it")
        read_fd, write_fd = os.pipe()
        try:
            try:
                process = await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-I",
                    "-S",
                    "-c",
                    _SHIM,
                    str(os.getpid()),
                    str(write_fd),
                    *command,
                    stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=errlog if errlog is not None else sys.stderr,
                    env=env,
                    cwd=cwd,
                    start_new_session=True,
                    pass_fds=(write_fd,),
                )
            except OSError as exc:  # cwd missing, our own interpreter gone
                raise ChildStartError(f"{type(exc).__name__}: {exc}") from exc
            os.close(write_fd)
            write_fd = -1
            child = cls(process, command[0])
            try:
                report = await _exec_report(read_fd)
            except BaseException:
                child.kill()
                raise
            if report:
                child.kill()
                raise ChildStartError(report.decode("utf-8", "replace"))
            return child
        finally:
            os.close(read_fd)
            if write_fd >= 0:
                os.close(write_fd)

    @property
    def returncode(self) -> int | None:
        return self.process.returncode

    async def messages(self) -> AsyncIterator[mcp_types.JSONRPCMessage | Exception]:
        """Each line of the child's stdout as a JSON-RPC message, or the error that line is; ends when the child
        closes its stdout, or soon after it exits when something it started keeps the pipe open."""
        stdout = self.process.stdout
        assert stdout is not None
        pending = b""
        skipping = False  # inside a line over the bound: dropped up to its end
        while True:
            read = asyncio.ensure_future(stdout.read(65536))
            exited_at: float | None = None
            try:
                while not read.done():
                    await asyncio.wait({read}, timeout=0.25)
                    if read.done() or self.process.returncode is None:
                        continue
                    # It exited and something it started may hold the pipe: what it wrote is read, then we stop.
                    now = asyncio.get_running_loop().time()
                    exited_at = exited_at or now
                    if now - exited_at >= 0.5:
                        return
            finally:
                if not read.done():
                    read.cancel()
            chunk = read.result()
            if not chunk:
                return
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                if skipping:
                    skipping = False
                    continue
                if line.strip():
                    yield _parse_line(line)
            if len(pending) > MAX_REPLY_BYTES:
                if not skipping:
                    yield ValueError(f"a line over {MAX_REPLY_BYTES} bytes from the server (skipped)")
                pending, skipping = b"", True

    async def send(self, message: mcp_types.JSONRPCMessage) -> None:
        """Write one message (a line). Raises ``OSError`` (``BrokenPipeError``: the child is gone) or ``TimeoutError``
        (it has not taken the line within :data:`WRITE_TIMEOUT_S`)."""
        stdin = self.process.stdin
        assert stdin is not None
        data = (message.model_dump_json(by_alias=True, exclude_unset=True) + "\n").encode()
        async with self._write_lock:
            if self._closing is not None or stdin.is_closing():
                raise BrokenPipeError(f"stdio server {self.name!r} is closing")
            stdin.write(data)
            await asyncio.wait_for(stdin.drain(), WRITE_TIMEOUT_S)

    async def aclose(self) -> None:
        """The spec's shutdown (module docstring), within :data:`SHUTDOWN_BOUND_S`. Safe to call twice and from
        several tasks. If the caller is cancelled meanwhile, the child is killed (``SIGKILL``) before this returns."""
        if self._closing is None:
            self._closing = asyncio.get_running_loop().create_task(self._shutdown(), name=f"stdio-close:{self.name}")
        try:
            await asyncio.shield(self._closing)
        except asyncio.CancelledError:
            self.kill()
            raise

    async def _shutdown(self) -> None:
        stdin = self.process.stdin
        try:
            if stdin is not None:
                with contextlib.suppress(Exception):
                    stdin.close()
            if await self._ended(EOF_WAIT_S):
                return
            self._signal(signal.SIGTERM)
            if await self._ended(TERM_WAIT_S):
                return
            log.warning(
                "stdio server %s (pid %d) ignored EOF and SIGTERM for %.0f s: killed",
                self.name,
                self.pid,
                EOF_WAIT_S + TERM_WAIT_S,
            )
            self._signal(signal.SIGKILL)
            if not await self._ended(KILL_WAIT_S):
                log.warning(
                    "stdio server %s (pid %d) still there %.0f s after SIGKILL", self.name, self.pid, KILL_WAIT_S
                )
        finally:
            self._release()

    async def _ended(self, within: float) -> bool:
        """Whether the child and every process left in its group are gone within ``within`` seconds."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        while True:
            if self.process.returncode is not None and not self._group_alive():
                return True
            if loop.time() >= deadline:
                return False
            await asyncio.sleep(_POLL_S)

    def _group_alive(self) -> bool:
        if self._group_gone:
            return False
        try:
            os.killpg(self.pid, 0)
        except ProcessLookupError:
            self._group_gone = True
            return False
        except PermissionError:
            pass  # a member we may not signal (or a zombie on some systems): alive as far as we can tell
        return True

    def _signal(self, sig: int) -> None:
        # The child leads its group (start_new_session): its pid is the group id, valid while any member lives.
        if self._group_gone:
            return
        try:
            os.killpg(self.pid, sig)
        except ProcessLookupError:
            self._group_gone = True
        except PermissionError:
            with contextlib.suppress(OSError):
                os.kill(self.pid, sig)

    def kill(self) -> None:
        """``SIGKILL`` to the child's process group, now (synchronous: usable on the way out of a process)."""
        self._signal(signal.SIGKILL)
        if self.process.returncode is not None:
            self._release()

    def _release(self) -> None:
        _live.discard(self)
        transport = getattr(self.process, "_transport", None)
        if transport is not None and self.process.returncode is not None:
            with contextlib.suppress(Exception):
                transport.close()  # the pipes; a descendant holding one must not keep them open here


def kill_all() -> int:
    """``SIGKILL`` every child this process started that is not known gone (and its process group); returns how
    many. For the last moments of a process that must leave now (``run``'s interrupt deadline, ``os._exit``)."""
    children = list(_live)
    for child in children:
        child.kill()
    _live.clear()
    return len(children)


def live_pids() -> list[int]:
    """The pids of the children this process started that are not known gone (each leads its process group)."""
    return [c.pid for c in _live]


async def _exec_report(fd: int) -> bytes:
    """What the shim wrote on the report pipe before its end closed (on exec, or on its exit): b"" once the child
    became the command."""
    os.set_blocking(fd, False)
    out = b""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + _EXEC_WAIT_S
    while True:
        try:
            chunk = os.read(fd, 4096)
        except BlockingIOError:
            if loop.time() >= deadline:
                raise ChildStartError(f"the server command did not start within {_EXEC_WAIT_S:g} s") from None
            await asyncio.sleep(0.005)
            continue
        if not chunk:
            return out
        out += chunk


def _parse_line(line: bytes) -> mcp_types.JSONRPCMessage | Exception:
    """One stdout line as the SDK reads it (``mcp_types.jsonrpc_message_adapter``), or the error it is."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc
    try:
        return mcp_types.jsonrpc_message_adapter.validate_json(text, by_name=False)
    except ValueError as exc:
        return exc
