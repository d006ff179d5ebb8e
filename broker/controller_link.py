"""The broker's link to the active controller for what keeps it alive there: registration and
heartbeats, on a thread of their own with their own event loop and connections.

A master under load spends long turns of its event loop on the send path (decoding, appending,
replicating 64 requests at a time, on a CPU shared with other processes). Heartbeats sent from
that loop leave late, and their answers are read late, by as much as the longest turn; with a
broker timeout of about a second, a healthy master would be declared dead (a false failover).
Here they have a loop nobody else uses: the interpreter hands the thread its turn within a
switch interval (5 ms) however long the main loop's turn is. The write lease this thread
renews is read by every write as one monotonic deadline (:class:`broker.role.RoleState`), so
the check stays as cheap as it was.

The controllers bind a broker id to the connection that registered it
(CONTROLLER_REGISTER_BROKER) and count heartbeats only from that connection, so registration
goes through this link as well: :meth:`ControllerLink.call` runs a request on the link's loop
and is awaited from the broker's main loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine, Mapping
from typing import Any

import structlog

from daemon.tasks import cancel_and_wait
from protocol.remoting import Frame, Scalar
from protocol.request_auth import Credentials
from remoting.client import ConnectionPool
from remoting.failover import AddressFailover

log = structlog.get_logger(__name__)

__all__ = ["ControllerLink"]


class ControllerLink:
    """A thread running an event loop with an :class:`AddressFailover` over the controllers."""

    def __init__(
        self,
        addresses: str | list[str],
        credentials: Credentials | None,
        *,
        name: str = "controller-link",
    ) -> None:
        self._addresses = addresses
        self._credentials = credentials
        self._name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._failover: AddressFailover | None = None
        self._heartbeats: AddressFailover | None = None
        self._pool: ConnectionPool | None = None
        self._thread: threading.Thread | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        """Start the thread; returns once its loop runs."""
        ready = threading.Event()
        self._thread = threading.Thread(target=self._main, args=(ready,), name=self._name)
        self._thread.daemon = True  # never keeps a stopping broker alive
        self._thread.start()
        ready.wait()

    def _main(self, ready: threading.Event) -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        self._pool = ConnectionPool(connect_timeout=2.0, credentials=self._credentials)
        self._failover = AddressFailover(self._addresses, self._pool, timeout=3.0, busy_rounds=3)
        # Heartbeats go out on the same connections but are never retried after a back-off:
        # the next one is due within an interval anyway, and a heartbeat held back would
        # hold back the ones behind it.
        self._heartbeats = AddressFailover(self._addresses, self._pool, timeout=3.0, busy_rounds=1)
        self._loop = loop
        loop.call_soon(ready.set)
        try:
            loop.run_forever()
        finally:
            loop.close()

    async def stop(self) -> None:
        """Cancel what runs on the link, close its connections, end the thread."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None or loop.is_closed():
            return
        done = asyncio.run_coroutine_threadsafe(self._shutdown(), loop)
        await asyncio.wrap_future(done)
        loop.call_soon_threadsafe(loop.stop)
        await asyncio.to_thread(thread.join, 5.0)

    async def _shutdown(self) -> None:
        await cancel_and_wait(self._tasks)
        if self._pool is not None:
            self._pool.close()

    # -- use -----------------------------------------------------------------------------------
    @property
    def failover(self) -> AddressFailover:
        """The link's failover: use it only from coroutines running on the link
        (:meth:`spawn`)."""
        assert self._failover is not None, "ControllerLink.start() first"
        return self._failover

    @property
    def heartbeats(self) -> AddressFailover:
        """The failover heartbeats use (same connections, no busy rounds); from the link only."""
        assert self._heartbeats is not None, "ControllerLink.start() first"
        return self._heartbeats

    def spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        """Run ``coro`` on the link's loop until it ends or the link stops."""
        loop = self._loop
        assert loop is not None, "ControllerLink.start() first"

        def create() -> None:
            task = loop.create_task(coro, name=name)
            self._tasks.add(task)
            task.add_done_callback(self._ended)

        loop.call_soon_threadsafe(create)

    def _ended(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("controller link task failed", task=task.get_name(), exc=task.exception())

    async def call(
        self,
        code: int,
        header: Mapping[str, Scalar] | None = None,
        body: bytes | None = None,
        timeout: float | None = None,
    ) -> Frame:
        """``failover.call`` run on the link's loop, awaited from any other loop."""
        loop = self._loop
        assert loop is not None, "ControllerLink.start() first"
        future: concurrent.futures.Future[Frame] = asyncio.run_coroutine_threadsafe(
            self.failover.call(code, header, body, timeout=timeout), loop
        )
        return await asyncio.wrap_future(future)
