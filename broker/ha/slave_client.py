"""The slave's HA client: connect to the master's HA port and replicate (thin asyncio driver).

Every decision is in :class:`~broker.ha.slave_conn.SlaveConnection` (one per TCP connection);
this module carries out its actions, in order, against the store and the epoch file:

==================  ===============================================================================
TruncateLog         ``store.truncate`` (durable) then ``epoch_file.truncate_suffix_from_offset``
                    (durable, in the worker thread): the store first, so a crash in between leaves
                    an epoch entry with an empty range, never bytes labelled with the wrong epoch
StartLogAt          the empty store must already start there (see the note below)
AppendEpoch         ``epoch_file.append`` in the worker thread, awaited before the bytes that follow
AppendBytes         ``append`` (the broker's one append operation, broker.appender), else
                    ``store.append_raw`` (validates every record, dispatches the ConsumeQueues)
UpdateConfirmOffset ``store.confirm_offset`` (already ``min(master's confirm, local max offset)``);
                    the store only raises it: a master's lower figure (a new master that learnt
                    less) lowers nothing, only a truncation does
SendBytes           an ack; acks are cumulative, so only the last one of the chunks read together
                    is written, after every action before it
ReplicationRefused  one error line; the client stays SUSPENDED (never truncating) and tries again
                    after ``suspended_retry_ms`` or at :meth:`SlaveClient.retry`
Reconnect           close, back off, connect again with a new SlaveConnection
==================  ===============================================================================

The connection's decision (:func:`~broker.ha.truncation.decide_truncation`) is given the epoch
the controllers named the master for (``master_epoch``) and the store's confirm offset (persisted
in its checkpoint): a peer that is not master of exactly that epoch never makes this slave
truncate, and no master makes it cut below the confirm offset unless the operator set
``allow_truncate_below_confirm``. A reply at another epoch, a refused connection, a lost one,
silence for ``connection_idle_timeout_ms`` (the master heartbeats every 500 ms) and errors from
the store all lead to a reconnect after a back-off of ``reconnect_min_ms`` doubling up to
``reconnect_max_ms`` (:func:`reconnect_delay_ms`); the back-off restarts after a handshake
succeeds, and ends at once when the controllers name the same master at a newer epoch.

``store.truncate`` runs on the event-loop thread: the store allows only ``flush`` in another
thread. It happens once per handshake and syncs only what it cut. The epoch file's fsyncs run in
the ``run_blocking`` worker.

A slave whose log is empty while the master's starts above 0 receives ``StartLogAt``; the store
cannot yet start an empty CommitLog at a non-zero offset, so the client suspends with a clear
reason in that case.

Streaming is handled inline: once the handshake is done, each chunk from the master is decoded
and stored in the socket's ``data_received`` and acked at once with one write (no task wake-up,
no timer per chunk), as long as nothing is pending. Chunks that need an await (the handshake, a
new epoch's entry, a reconnect) and every chunk that arrives while one is pending go to the
session's task instead, in order. Reading is flow-controlled there: above ``read_buffer_bytes``
of received, unprocessed bytes the client pauses reading, so a slow disk pushes back on the
master through TCP. Silence is watched by one timer per wait of the task, measured from the last
chunk received.
"""

from __future__ import annotations

import asyncio
import enum
import os
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Final, TypeVar, cast

import structlog

from broker.ha.actions import (
    AppendBytes,
    AppendEpoch,
    Reconnect,
    ReplicationRefused,
    SendBytes,
    SlaveAction,
    StartLogAt,
    TruncateLog,
    UpdateConfirmOffset,
)
from broker.ha.config import HAConfig
from broker.ha.slave_conn import SlaveConnection
from broker.ha.truncation import EpochNotNamed, TruncationDecision
from daemon.tasks import cancel_and_wait, sleep_or_wake
from protocol import ha_auth
from remoting.read_buffer import CopyingProtocol
from storage.epoch_file import EpochFile
from storage.store import MessageStore

__all__ = [
    "AppendReplicated",
    "RunBlocking",
    "SlaveClient",
    "SlaveState",
    "reconnect_delay_ms",
    "split_address",
]

log = structlog.get_logger(__name__)

_T = TypeVar("_T")
RunBlocking = Callable[[Callable[[], Any]], Awaitable[Any]]
AppendReplicated = Callable[[int, bytes | memoryview], int]
"""Append the master's CommitLog bytes at an offset; the new max offset (``append_raw``)."""
"""Run a blocking call in the HA worker thread and await its result."""

_YIELD_EVERY_BYTES: Final = 8 << 20


class SlaveState(enum.Enum):
    CONNECTING = "connecting"
    HANDSHAKE = "handshake"
    TRANSFER = "transfer"
    BACKOFF = "backoff"
    SUSPENDED = "suspended"
    STOPPED = "stopped"


def reconnect_delay_ms(failures: int, *, min_ms: int, max_ms: int) -> int:
    """The wait before reconnect attempt number ``failures`` (1 = after the first failure)."""
    if failures <= 0:
        return 0
    return min(max_ms, min_ms << min(failures - 1, 32))


def split_address(address: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` too) -> (host, port); ValueError when malformed."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"bad HA address {address!r} (expected host:port)")
    return host.strip("[]"), int(port)


@dataclass(frozen=True, slots=True)
class _Outcome:
    suspend: bool
    reason: str


@dataclass(frozen=True, slots=True)
class _Rest:
    """What inline handling left to the task: actions from the first that must be awaited, and
    the ack seen before them (written after them)."""

    actions: list[SlaveAction]
    ack: bytes | None


@dataclass(frozen=True, slots=True)
class _Failed:
    """Inline handling raised (a store error): the task ends the session with it."""

    error: Exception


_Item = bytes | _Rest | _Failed
Inline = Callable[[bytes], "_Rest | _Failed | None"]


MASTER_CLOSED: Final = "connection closed by the master"
"""The reason of a session the master ended by closing its socket (what it does when it stops
or steps down)."""


class _MasterLink(CopyingProtocol):
    """The socket to the master: chunks go to ``inline`` while the task is idle and nothing is
    queued; otherwise they queue up until the task takes them."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._items: deque[_Item] = deque()
        self._size = 0
        self._paused = False
        self._waiter: asyncio.Future[None] | None = None
        self._busy = True  # the task is handling what it took (or has not waited yet)
        self._loop = asyncio.get_running_loop()
        self.inline: Inline | None = None
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.close_reason = MASTER_CLOSED
        self.last_recv = self._loop.time()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.last_recv = self._loop.time()
        inline = self.inline
        if inline is not None and not self._busy and not self._items:
            item = inline(data)
            if item is None:
                return
            self._items.append(item)
        else:
            self._items.append(data)
            self._size += len(data)
            if self._size >= self._limit and not self._paused and self.transport is not None:
                self._paused = True
                self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if exc is not None:
            self.close_reason = f"connection lost: {exc}"
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def take(self, idle_s: float) -> list[_Item] | None:
        """Everything queued (waiting for something), or None once the socket is closed.
        While the task waits here chunks are handled inline. TimeoutError after ``idle_s``
        seconds without any chunk from the master (inline ones included)."""
        self._busy = False
        loop = self._loop
        while not self._items:
            if self.closed:
                return None
            remaining = self.last_recv + idle_s - loop.time()
            if remaining <= 0:
                raise TimeoutError
            waiter = self._waiter = loop.create_future()
            timer = loop.call_later(remaining, _wake_up, waiter)
            try:
                await waiter
            finally:
                timer.cancel()
                self._waiter = None
        self._busy = True
        items = list(self._items)
        self._items.clear()
        self._size = 0
        if self._paused and self.transport is not None and not self.closed:
            self._paused = False
            self.transport.resume_reading()
        return items


def _wake_up(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class SlaveClient:
    """Replicates from one master until stopped; see the module docstring."""

    def __init__(
        self,
        *,
        store: MessageStore,
        epoch_file: EpochFile,
        config: HAConfig,
        master_address: str,
        master_epoch: int,
        broker_id: int,
        address: str,
        run_blocking: RunBlocking,
        on_confirm: Callable[[int], None] | None = None,
        append: AppendReplicated | None = None,
    ) -> None:
        self._store = store
        self._append = append
        self._epochs = epoch_file
        self._cfg = config
        self.master_address = master_address
        self._master_epoch = master_epoch
        self._conn: SlaveConnection | None = None
        self._broker_id = broker_id
        self._address = address
        self._run_blocking = run_blocking
        self._on_confirm = on_confirm
        self._task: asyncio.Task[None] | None = None
        self._transport: asyncio.Transport | None = None
        self._stopping = False
        self._wakeup = asyncio.Event()
        self.state = SlaveState.CONNECTING
        self.suspended_reason: str | None = None
        self.last_error: str | None = None
        self.decision: TruncationDecision | None = None
        """The truncation decision of the last handshake."""
        self.master_confirm_offset: int | None = None
        self.handshakes = 0
        self.refusals = 0
        """Handshakes that ended SUSPENDED (no consistent point, or one below the confirm
        offset)."""
        self.bytes_received = 0
        self._last_ack: bytes | None = None
        self._last_ack_at = 0.0
        self._repeat_ack_s = config.heartbeat_interval_ms / 2000

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        if self._task is not None:
            raise RuntimeError("already started")
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"ha-slave->{self.master_address}"
        )

    async def stop(self) -> None:
        """Stop replicating; returns once no action is running on the loop thread (a blocking
        call already handed to the worker thread may still finish there: the caller waits for
        the worker before touching the epoch file)."""
        self._stopping = True
        self._wakeup.set()
        if self._transport is not None:
            self._transport.abort()
        task, self._task = self._task, None
        if task is not None:
            await cancel_and_wait([task])
        self.state = SlaveState.STOPPED

    def retry(self) -> None:
        """Leave SUSPENDED now (an operator cleaned the data, or another master was named);
        otherwise a suspended client tries again every ``suspended_retry_ms``."""
        if self.state is SlaveState.SUSPENDED:
            self._wakeup.set()

    @property
    def master_epoch(self) -> int:
        """The epoch the controllers named this master for: the master must answer at exactly
        this epoch and stream nothing newer (:func:`~broker.ha.truncation.decide_truncation`)."""
        return self._master_epoch

    @master_epoch.setter
    def master_epoch(self, epoch: int) -> None:
        """The controllers named the same master again at ``epoch``: a handshake that was left
        for answering at that epoch is retried at once."""
        if epoch == self._master_epoch:
            return
        self._master_epoch = epoch
        if self._conn is not None:
            self._conn.named_epoch = epoch
        if self.state is SlaveState.BACKOFF:
            self._wakeup.set()

    @property
    def suspended(self) -> bool:
        return self.state is SlaveState.SUSPENDED

    # ------------------------------------------------------------ the loop

    async def _run(self) -> None:
        failures = 0
        last_reason: tuple[str, bool] | None = None
        refused_kind = ""
        while not self._stopping:
            if self.state is SlaveState.SUSPENDED:
                self._wakeup.clear()
                # Then try again: the master may have become another (e.g. the real one).
                await sleep_or_wake(self._wakeup, self._cfg.suspended_retry_ms / 1000)
                if self._stopping:
                    break
                failures = 0
            self.state = SlaveState.CONNECTING
            try:
                outcome = await self._session()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                outcome = _Outcome(False, f"{type(exc).__name__}: {exc}")
            if self._stopping:
                break
            streamed = self.state is SlaveState.TRANSFER
            if streamed:
                failures = 0
            self.last_error = outcome.reason
            if outcome.suspend:
                self.state = SlaveState.SUSPENDED
                # One line per refusal, not one per retry (the figures in the reason may move).
                kind = type(self.decision).__name__
                if self.suspended_reason is None or kind != refused_kind:
                    refused_kind = kind
                    log.error(
                        f"replication from {self.master_address} suspended: {outcome.reason}",
                        master=self.master_address,
                        retry_ms=self._cfg.suspended_retry_ms,
                    )
                self.suspended_reason = outcome.reason
                self.refusals += 1
                continue
            self.suspended_reason = None
            failures += 1
            delay = reconnect_delay_ms(
                failures, min_ms=self._cfg.reconnect_min_ms, max_ms=self._cfg.reconnect_max_ms
            )
            # Info, not a warning, for what a healthy group does: a master closes its slaves'
            # connections when it stops or steps down (a stream it ended cleanly; the
            # controllers name the next master), and a master just elected refuses slaves
            # until it has switched roles (a first attempt that fails, retried at once).
            # A stream lost otherwise, or a second attempt in a row that fails, is a warning.
            quiet = outcome.reason == MASTER_CLOSED if streamed else failures == 1
            if (outcome.reason, quiet) != last_reason:
                (log.info if quiet else log.warning)(
                    "HA connection to the master ended; reconnecting",
                    master=self.master_address,
                    reason=outcome.reason,
                    delay_ms=delay,
                )
                last_reason = (outcome.reason, quiet)
            self.state = SlaveState.BACKOFF
            self._wakeup.clear()
            await sleep_or_wake(self._wakeup, delay / 1000)
        self.state = SlaveState.STOPPED

    async def _session(self) -> _Outcome:
        cfg = self._cfg
        host, port = split_address(self.master_address)
        loop = asyncio.get_running_loop()
        tls = cfg.client_tls
        context = tls() if callable(tls) else tls
        try:
            async with asyncio.timeout(cfg.connect_timeout_ms / 1000):
                transport, link = await loop.create_connection(
                    lambda: _MasterLink(cfg.read_buffer_bytes),
                    host,
                    port,
                    ssl=context,
                    server_hostname=host if context is not None else None,
                )
        except (OSError, TimeoutError) as exc:
            return _Outcome(False, f"cannot connect: {type(exc).__name__}: {exc}")
        self._transport = transport
        try:
            return await self._replicate(self._transport, link)
        finally:
            self._transport.abort()
            self._transport = None

    async def _authenticate(self, transport: asyncio.Transport, link: _MasterLink) -> str | None:
        """The exchange before the handshake (:mod:`protocol.ha_auth`): answer the master's
        challenge, then check its proof. None when both sides proved they hold the cluster's
        auth key, else why not."""
        key = self._cfg.auth_key
        assert key is not None
        idle_s = self._cfg.connection_idle_timeout_ms / 1000

        async def read(count: int) -> bytes | None:
            got = b""
            while len(got) < count:
                items = await link.take(idle_s)
                if items is None:
                    return None
                for item in items:
                    if not isinstance(item, bytes):  # nothing is handled inline yet
                        return None
                    got += item
            if len(got) > count:  # the master sends nothing more until it has our answer
                return None
            return got

        try:
            data = await read(ha_auth.CHALLENGE_BYTES)
            if data is None:
                return f"{link.close_reason} before the authentication challenge"
            master_nonce = ha_auth.parse_challenge(data)
            nonce = os.urandom(ha_auth.NONCE_BYTES)
            transport.write(ha_auth.answer(key, master_nonce, nonce))
            data = await read(ha_auth.PROOF_BYTES)
            if data is None:
                return "the master refused our authentication (another auth key?)"
            ha_auth.check_master_proof(key, master_nonce, nonce, data)
        except TimeoutError:
            return "the master sent no authentication challenge (authentication off there?)"
        except ha_auth.HAAuthError as exc:
            return str(exc)
        return None

    async def _replicate(self, transport: asyncio.Transport, link: _MasterLink) -> _Outcome:
        cfg = self._cfg
        store = self._store
        if cfg.auth_key is not None:
            refused = await self._authenticate(transport, link)
            if refused is not None:
                return _Outcome(False, refused)
        conn = self._conn = SlaveConnection(
            broker_id=self._broker_id,
            address=self._address,
            sync_from_last_file=cfg.sync_from_last_file,
            async_learner=cfg.async_learner,
            max_body_bytes=cfg.max_body_bytes,
            named_epoch=self._master_epoch,
            allow_below_confirm=cfg.allow_truncate_below_confirm,
        )
        transport.write(
            conn.start(
                epoch_entries=self._epochs.entries(),
                max_offset=store.max_offset,
                confirm_offset=store.confirm_offset,
            )
        )
        self.state = SlaveState.HANDSHAKE
        self._last_ack = None  # a new connection: its first ack is always written
        idle_s = cfg.connection_idle_timeout_ms / 1000
        since_yield = 0
        checked = False
        while True:
            try:
                items = await link.take(idle_s)
            except TimeoutError:
                return _Outcome(False, f"heard nothing from the master for {idle_s:g} s")
            if items is None:
                return _Outcome(False, link.close_reason)
            ack: bytes | None = None
            for item in items:
                if isinstance(item, _Failed):
                    raise item.error
                if isinstance(item, _Rest):
                    actions, ack = item.actions, item.ack or ack
                else:
                    self.bytes_received += len(item)
                    actions = conn.receive_data(item)
                    if not checked and conn.master_handshake is not None:
                        checked = True
                        self.decision = conn.decision
                        if not isinstance(conn.decision, EpochNotNamed):
                            self.handshakes += 1
                i = 0
                while True:
                    i, sent = self._apply(actions, i)
                    ack = sent or ack
                    if i == len(actions):
                        break
                    outcome = await self._apply_async(actions[i])
                    if outcome is not None:
                        return outcome
                    i += 1
                since_yield += len(item) if isinstance(item, bytes) else 0
                if since_yield >= _YIELD_EVERY_BYTES:
                    since_yield = 0
                    await asyncio.sleep(0)  # let the broker serve in between
            if ack is not None:
                self._write_ack(transport, ack)
            if checked and link.inline is None and self.state is SlaveState.TRANSFER:
                link.inline = partial(self._inline, conn, transport)

    def _apply(self, actions: list[SlaveAction], i: int) -> tuple[int, bytes | None]:
        """Carry out ``actions[i:]`` up to the first that must be awaited: (its index, or the
        length when none is left; the last ack met, to write after them)."""
        store = self._store
        append = self._append or store.append_raw
        ack: bytes | None = None
        n = len(actions)
        while i < n:
            action = actions[i]
            if isinstance(action, AppendBytes):
                append(action.offset, action.data)
            elif isinstance(action, SendBytes):
                ack = action.data
            elif isinstance(action, UpdateConfirmOffset):
                offset = action.offset
                before = store.confirm_offset
                store.confirm_offset = offset  # clamped: never above the log, never back
                self.master_confirm_offset = offset
                if store.confirm_offset > before and self._on_confirm is not None:
                    self._on_confirm(store.confirm_offset)
            else:
                return i, ack
            i += 1
        return n, ack

    async def _apply_async(self, action: SlaveAction) -> _Outcome | None:
        """One action that needs the task; an outcome ends the session."""
        match action:
            case AppendEpoch(epoch=epoch, start_offset=start):
                await self._blocking(partial(self._epochs.append, epoch, start))
            case TruncateLog(offset=offset):
                await self._truncate(offset)
                self.state = SlaveState.TRANSFER
            case StartLogAt(offset=offset):
                if self._store.max_offset != offset:
                    return _Outcome(
                        True,
                        f"the master starts this empty log at offset {offset}, but "
                        "the store cannot start a CommitLog above 0 yet",
                    )
            case ReplicationRefused(reason=reason):
                return _Outcome(True, reason)
            case Reconnect(reason=reason):
                return _Outcome(False, reason)
        return None

    def _inline(
        self, conn: SlaveConnection, transport: asyncio.Transport, data: bytes
    ) -> _Rest | _Failed | None:
        """A chunk handled in ``data_received`` (nothing pending): stored and acked at once;
        what needs an await is left to the task."""
        self.bytes_received += len(data)
        try:
            actions = conn.receive_data(data)
            i, ack = self._apply(actions, 0)
        except Exception as exc:
            return _Failed(exc)
        if i < len(actions):
            return _Rest(actions[i:], ack)
        if ack is not None:
            self._write_ack(transport, ack)
        return None

    def _write_ack(self, transport: asyncio.Transport, ack: bytes) -> None:
        """Write ``ack``, unless it repeats the last one written less than half a heartbeat
        interval ago: a transfer with no body (the master pushing its confirm offset, or a
        heartbeat) changes nothing the master does not know, and under load the master pushes
        its confirm offset every few milliseconds. The master still hears from an idle slave at
        every heartbeat (``connection_idle_timeout_ms`` is many of them)."""
        now = time.monotonic()
        if ack == self._last_ack and now - self._last_ack_at < self._repeat_ack_s:
            return
        self._last_ack, self._last_ack_at = ack, now
        transport.write(ack)

    async def _blocking(self, fn: Callable[[], _T]) -> _T:
        return cast(_T, await self._run_blocking(fn))

    async def _truncate(self, offset: int) -> None:
        """Cut the log to the consistent point, durably, before the ack that follows."""
        if offset != self._store.max_offset:
            log.warning(
                "truncating the CommitLog to the consistent point",
                offset=offset,
                max_offset=self._store.max_offset,
                master=self.master_address,
            )
        # The store first: a crash in between leaves an epoch entry with an empty range.
        if offset != self._store.max_offset:
            self._store.truncate(offset)
        await self._blocking(partial(self._epochs.truncate_suffix_from_offset, offset))
