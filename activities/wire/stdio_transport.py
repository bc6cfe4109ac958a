"""A stdio MCP server as a transport: the SDK's message framing on a child process of our own.

Not the SDK's ``stdio_client``: it could not be made to end its child in bounded time (:mod:`.stdio` says why).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from typing import Any

from mcp_temporal_tasks.activities.wire.jsonrpc import (
    DEFAULT_TIMEOUT_S,
    NotificationHandler,
    ServerRequestHandler,
    request_body,
    result_of,
    scrubbed,
    server_reply,
)
from mcp_temporal_tasks.activities.wire.redact import register as register_secrets
from mcp_temporal_tasks.activities.wire.stdio import WRITE_TIMEOUT_S, ChildStartError, StdioChild
from mcp_temporal_tasks.protocol.wire_errors import McpWireError, ProcessGone, TaskUnreachable, TransportError

log = logging.getLogger(__name__)


class StdioTransport:
    """A child process speaking newline-delimited JSON-RPC (:class:`.stdio.StdioChild`: the SDK's framing, our
    process lifecycle).

    The child lives as long as this object; tasks on it die with it. When the child exits every open
    request fails with :class:`TaskUnreachable`, never hangs. :meth:`aclose` ends the child by the spec's
    shutdown within :data:`.stdio.SHUTDOWN_BOUND_S`, whatever it does.
    """

    def __init__(
        self, command: list[str], *, cwd: str | None = None, env: dict[str, str] | None = None, secrets: Any = None
    ) -> None:
        self.command = command
        self.cwd = cwd
        self.env = env
        #: The child's referenced (credential) environment values: never in an error text.
        self.secrets = register_secrets(secrets or ())
        self._pending: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._handlers: dict[str, ServerRequestHandler | None] = {}
        self._notified: dict[str, NotificationHandler] = {}
        self._child: StdioChild | None = None
        #: Every notification the child writes, whatever request is open (task status pushes: .notifications).
        self.on_notification: NotificationHandler | None = None
        self._runner: asyncio.Task[None] | None = None
        self._death: str | None = None
        self.closed = False
        # Stdio has no protocol session id; this one names *this child process*, so that a SessionRef of a
        # task created here never leads to another child of the same command (the task died with this one).
        self.session_id: str | None = f"stdio-{uuid.uuid4().hex}"
        self.protocol_version: str | None = None  # accepted for interface parity with HTTP

    @property
    def alive(self) -> bool:
        return self._death is None and not self.closed

    @scrubbed
    async def start(self) -> None:
        try:
            self._child = await StdioChild.start(self.command, cwd=self.cwd, env=self.env)
        except (ChildStartError, ValueError) as exc:
            self._death = str(exc)
            raise TransportError(f"cannot start stdio server {self.command[0]!r}: {exc}", sent=False) from None
        self._runner = asyncio.create_task(self._read(self._child), name=f"mcp-stdio:{self.command[0]}")

    async def _read(self, child: StdioChild) -> None:
        try:
            async for item in child.messages():
                if isinstance(item, Exception):
                    log.warning("stdio server %s sent an unreadable line: %s", self.command[0], item)
                    continue
                self._dispatch(item.model_dump(by_alias=True, mode="json", exclude_unset=True))
            self._death = "server process closed its output"
        except asyncio.CancelledError:
            self._death = "transport closed"
            raise
        except Exception as exc:  # the reader broke (the pipe, a bug of ours): the session is over either way
            self._death = f"{type(exc).__name__}: {exc}"
        finally:
            if self._death is None:
                self._death = "server process exited"
            for fut in self._pending.values():
                if not fut.done():
                    fut.set_exception(TaskUnreachable(f"stdio server {self.command[0]!r} is gone: {self._death}"))
            self._pending.clear()

    def _dispatch(self, message: dict[str, Any]) -> None:
        if "method" in message and "id" in message:
            # A server request is answered on its own task so the reader keeps reading meanwhile.
            handler = next((h for h in self._handlers.values() if h is not None), None)
            asyncio.create_task(self._answer(message, handler))
        elif "method" in message:
            for listener in list(self._notified.values()):
                listener(message)
            if self.on_notification is not None:
                self.on_notification(message)
        else:
            fut = self._pending.pop(str(message.get("id")), None)
            if fut is not None and not fut.done():
                fut.set_result(message)

    async def _answer(self, message: dict[str, Any], handler: ServerRequestHandler | None) -> None:
        with contextlib.suppress(McpWireError):  # the child went away before our answer: nothing waits for it
            await self._send(await server_reply(message, handler))

    async def _send(self, body: dict[str, Any]) -> None:
        from mcp_types import jsonrpc_message_adapter

        if not self.alive or self._child is None:
            raise ProcessGone(f"stdio server {self.command[0]!r} is gone: {self._death or 'closed'}")
        message = jsonrpc_message_adapter.validate_python(body, by_name=False)
        try:
            await self._child.send(message)
        except TimeoutError as exc:
            raise TransportError(
                f"stdio server {self.command[0]!r} has not read its input for {WRITE_TIMEOUT_S:g} s", sent=True
            ) from exc
        except OSError as exc:  # the pipe is gone: nothing of this message reached it
            raise ProcessGone(f"stdio server {self.command[0]!r} is gone: {exc}") from exc

    @scrubbed
    async def request(
        self,
        method: str,
        params: dict[str, Any] | None,
        *,
        headers: dict[str, str] | None = None,
        on_server_request: ServerRequestHandler | None = None,
        timeout_s: float | None = None,
        on_notification: NotificationHandler | None = None,
    ) -> dict[str, Any]:
        msg_id, body = request_body(method, params)
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[msg_id] = fut
        self._handlers[msg_id] = on_server_request
        if on_notification is not None:
            self._notified[msg_id] = on_notification
        try:
            try:
                await self._send(body)
            except McpWireError:
                raise
            except Exception as exc:
                raise TransportError(f"{method}: write to stdio server failed: {exc}", sent=False) from exc
            try:
                message = await asyncio.wait_for(fut, timeout_s or DEFAULT_TIMEOUT_S)
            except TimeoutError as exc:
                raise TransportError(f"{method}: no reply from stdio server in time", sent=True) from exc
        finally:
            self._pending.pop(msg_id, None)
            self._handlers.pop(msg_id, None)
            self._notified.pop(msg_id, None)
        return result_of(message, method=method)

    @scrubbed
    async def respond(self, request_id: Any, result: dict[str, Any]) -> None:
        await self._send({"jsonrpc": "2.0", "id": request_id, "result": result})

    @scrubbed
    async def notify(
        self, method: str, params: dict[str, Any] | None = None, *, headers: dict[str, str] | None = None
    ) -> None:
        body: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            body["params"] = params
        await self._send(body)

    async def aclose(self, *, terminate: bool = False) -> None:
        """End the child (:meth:`.stdio.StdioChild.aclose`: stdin closed, SIGTERM, SIGKILL; within
        :data:`.stdio.SHUTDOWN_BOUND_S`). Cancelled meanwhile, it kills the child before it returns."""
        self.closed = True
        try:
            if self._child is not None:
                await self._child.aclose()
        finally:
            if self._runner is not None and not self._runner.done():
                # The child is gone; what it still wrote is not waited for (a descendant may hold its stdout).
                self._runner.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await asyncio.wait({self._runner}, timeout=1.0)
