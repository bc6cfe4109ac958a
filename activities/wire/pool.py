"""Live sessions of this process, reused across activity calls; a stdio task is reachable only while its child lives."""

from __future__ import annotations

import asyncio
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

from mcp_temporal_tasks.activities.wire.auth import for_subject
from mcp_temporal_tasks.activities.wire.session import WireSession
from mcp_temporal_tasks.activities.wire.stdio_transport import StdioTransport
from mcp_temporal_tasks.protocol.tasks import Endpoint, Era, SessionRef
from mcp_temporal_tasks.protocol.wire_errors import RateLimited, SessionGone, TaskUnreachable, TransportError


def _subjected(ref: SessionRef, principal: str | None) -> SessionRef:
    """``ref`` re-attached for ``principal``: a subject's grant is the task's own (``auth.for_subject``)."""
    endpoint = for_subject(ref.endpoint, principal)
    return ref if endpoint is ref.endpoint else ref.model_copy(update={"endpoint": endpoint})


T = TypeVar("T")

#: This process's identity. Stdio sessions record it as their owner; the worker serves a task queue
#: of this name so that every later activity of a stdio task lands in the process holding the child.
PROCESS_ID = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


@dataclass
class _Entry:
    client: WireSession
    last_used: float = field(default_factory=time.monotonic)
    tasks: set[str] = field(default_factory=set)


class SessionPool:
    """This process's live sessions, by server and principal for new calls and by session for tasks.

    Keyed by (server, principal, era pin) for new calls, and by (server, session id) for legacy HTTP tasks (which are
    bound to the session that created them: a session id is the server's to choose, so two servers may issue the same
    one, and a read keyed by the id alone would ask the wrong server). Stdio servers are children of this process: their
    tasks can be reached only from here, and only while the child lives.

    Rules:
    * an idle session closes after ``idle_s``, except a stdio child that still holds unfinished tasks (closing it would
      kill them);
    * a dead session used for a *new* call is re-opened once; a dead stdio session that holds a task cannot be re-opened
      in its place (the task died with the child) and the caller gets :class:`TaskUnreachable`;
    * an HTTP session the server calls gone (404 on ``Mcp-Session-Id``) is not yet a task gone (:meth:`read_task`).
    """

    def __init__(self, *, idle_s: float = 300.0, owner: str = PROCESS_ID) -> None:
        self.idle_s = idle_s
        self.owner = owner
        self._by_key: dict[tuple[str, str, str], _Entry] = {}
        self._by_session: dict[tuple[str, str], _Entry] = {}
        self._lock = asyncio.Lock()

    @staticmethod
    def _key(endpoint: Endpoint, principal: str | None, era: Era | None) -> tuple[str, str, str]:
        return (endpoint.model_dump_json(), principal or "", era or "")

    @staticmethod
    def _session_key(endpoint: Endpoint, session_id: str) -> tuple[str, str]:
        return (endpoint.model_dump_json(), session_id)

    async def _sweep(self) -> None:
        now = time.monotonic()
        stale = [self._by_key.pop(k) for k in [k for k, e in self._by_key.items() if self._stale(e, now)]]
        stale += [self._by_session.pop(k) for k in [k for k, e in self._by_session.items() if self._stale(e, now)]]
        for entry in {id(e): e for e in stale}.values():
            if entry not in self._by_key.values() and entry not in self._by_session.values():
                await entry.client.aclose()

    def _stale(self, entry: _Entry, now: float) -> bool:
        idle = now - entry.last_used > self.idle_s
        holds_tasks = isinstance(entry.client.transport, StdioTransport) and bool(entry.tasks)
        return not entry.client.alive or (idle and not holds_tasks)

    async def for_new_call(self, endpoint: Endpoint, *, principal: str | None, era: Era | None) -> WireSession:
        """A live session for a new ``tools/call``; connects (and detects the era) when needed."""
        async with self._lock:
            await self._sweep()
            key = self._key(endpoint, principal, era)
            entry = self._by_key.get(key)
            if entry is None or not entry.client.alive:
                entry = _Entry(await WireSession.connect(for_subject(endpoint, principal), era=era, owner=self.owner))
                self._by_key[key] = entry
                if entry.client.transport.session_id:
                    self._by_session[self._session_key(endpoint, entry.client.transport.session_id)] = entry
            entry.last_used = time.monotonic()
            return entry.client

    async def for_task(self, ref: SessionRef, *, principal: str | None) -> WireSession:
        """The session that can reach a task created under ``ref``, re-attached when that is possible."""
        async with self._lock:
            await self._sweep()
            if ref.endpoint.command is not None:
                # The task lives in the very child that created it (named by the ref's session id): a child
                # re-opened for the same endpoint after a crash does not hold it.
                entry = (
                    self._by_session.get(self._session_key(ref.endpoint, ref.session_id))
                    if ref.session_id
                    else (
                        self._by_key.get(self._key(ref.endpoint, principal, None))
                        or self._by_key.get(self._key(ref.endpoint, principal, ref.era))
                    )
                )
                if ref.owner != self.owner or entry is None or not entry.client.alive:
                    raise TaskUnreachable(
                        f"the stdio server holding this task was started by {ref.owner!r} and is gone "
                        f"(this is {self.owner!r})"
                    )
            elif ref.session_id:
                skey = self._session_key(ref.endpoint, ref.session_id)
                entry = self._by_session.get(skey)
                if entry is None or not entry.client.alive:
                    entry = _Entry(await WireSession.attach(_subjected(ref, principal)))
                    self._by_session[skey] = entry
            else:
                key = self._key(ref.endpoint, principal, ref.era)
                entry = self._by_key.get(key)
                if entry is None or not entry.client.alive:
                    entry = _Entry(await WireSession.attach(_subjected(ref, principal)))
                    self._by_key[key] = entry
            entry.last_used = time.monotonic()
            return entry.client

    async def read_task(
        self, ref: SessionRef, *, principal: str | None, fn: Callable[[WireSession], Awaitable[T]]
    ) -> tuple[WireSession, T]:
        """``fn`` (a read of the task) on the session that can reach the task: (that session, what ``fn`` returned).

        A session gone is not a task gone. When the server answers 404 to the task's session (restarted, or it purged
        the session), a new session is opened and ``fn`` asks again there; what the server says *then* decides:
        ``-32602`` (``TaskNotFound``: on servers that scope tasks to sessions, every task of the old one) ends the
        wait as gone, the task's state means it lives on (the new session serves this task from now on, in this
        process), a fault is a fault. A new session answered 404 too says nothing about the task: a
        :class:`TransportError`, retried within the read's budget like any other fault. Never raises
        :class:`SessionGone`."""
        client = await self.for_task(ref, principal=principal)
        try:
            return client, await fn(client)
        except SessionGone as gone:
            first = gone
        client = await self._new_session_for(ref, principal)
        try:
            return client, await fn(client)
        except SessionGone as again:
            raise TransportError(
                f"{first.message}; a new session was refused too: {again.message}", sent=True
            ) from None

    async def _new_session_for(self, ref: SessionRef, principal: str | None) -> WireSession:
        """A fresh handshake with ``ref``'s server, put in the place of ``ref``'s session for this process."""
        async with self._lock:
            old = (
                self._by_session.pop(self._session_key(ref.endpoint, ref.session_id), None) if ref.session_id else None
            )
        if old is not None:
            await old.client.aclose()
        client = await WireSession.connect(for_subject(ref.endpoint, principal), era=ref.era, owner=self.owner)
        async with self._lock:
            if ref.session_id:
                self._by_session[self._session_key(ref.endpoint, ref.session_id)] = _Entry(client)
            else:
                self._by_key[self._key(ref.endpoint, principal, ref.era)] = _Entry(client)
        return client

    def track(self, client: WireSession, task_id: str, *, done: bool = False) -> None:
        """Note that ``client`` holds (or no longer holds) ``task_id``; stdio children are kept while they do."""
        for entry in (*self._by_key.values(), *self._by_session.values()):
            if entry.client is client:
                (entry.tasks.discard if done else entry.tasks.add)(task_id)

    async def run_new_call(
        self, endpoint: Endpoint, *, principal: str | None, era: Era | None, fn: Callable[[WireSession], Awaitable[T]]
    ) -> T:
        """Run ``fn`` on a pooled session; if that session proves dead and nothing was sent, re-open once.

        A stale pooled session (stdio child exited, HTTP session purged, connection refused) fails
        before the server saw the request, so one fresh attempt cannot duplicate a side effect.
        """
        client = await self.for_new_call(endpoint, principal=principal, era=era)
        try:
            return await fn(client)
        except (TaskUnreachable, TransportError) as exc:
            # A 429 did not reach the tool either, but its Retry-After is the workflow's to honour.
            if exc.may_have_reached_server or isinstance(exc, RateLimited):
                raise
            await self.discard(client)
            client = await self.for_new_call(endpoint, principal=principal, era=era)
            return await fn(client)

    async def discard(self, client: WireSession) -> None:
        async with self._lock:
            for key in [k for k, e in self._by_key.items() if e.client is client]:
                del self._by_key[key]
            for sid in [k for k, e in self._by_session.items() if e.client is client]:
                del self._by_session[sid]
            await client.aclose()

    async def aclose(self) -> None:
        """Close every session at once: stdio children end side by side, so the whole close takes one child's
        shutdown bound (:data:`.stdio.SHUTDOWN_BOUND_S`), not one per child. Cancelled, each close kills its child."""
        async with self._lock:
            clients = {id(e.client): e.client for e in (*self._by_key.values(), *self._by_session.values())}
            self._by_key.clear()
            self._by_session.clear()
        await asyncio.gather(*(client.aclose() for client in clients.values()), return_exceptions=True)
