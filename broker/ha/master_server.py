"""The master's HA port: an asyncio server feeding each slave the CommitLog (thin driver).

Every decision is in :class:`~broker.ha.master_conn.MasterConnection` (one per socket); this
module moves bytes and reports what the slaves say to a :class:`SlaveEvents` listener (the
SyncStateSet logic in :class:`~broker.ha.service.HAService`).

Streaming. A connection is *pumped*: ``next_transfer`` plans a batch, ``store.read_raw`` returns
a memoryview of the mapped segment, and the header bytes and that view go to the transport in
one ``writelines`` (one system call, no copy of the body here). A pump sends at most
``pump_budget_bytes`` and then yields to the loop (reschedules itself), so a fast slave catching
up never starves other work. When the transport's buffer passes ``write_buffer_high_bytes``
asyncio calls ``pause_writing`` and the pump stops for that slave only; ``resume_writing`` starts
it again. A caught-up connection is parked in an *idle* set; :meth:`MasterServer.notify_appended`
(called after every put) schedules one wake-up per loop iteration for the parked connections, so
every put of one loop iteration goes to each slave in one write; it costs two attribute checks
when none is parked.

Heartbeats and silence. :meth:`MasterServer.tick` (the service calls it every
``tick_interval_ms``) sends an empty transfer to a streaming connection that sent nothing for
``heartbeat_interval_ms`` and closes one that heard nothing for ``connection_idle_timeout_ms``.
:meth:`MasterServer.push_confirm` sends a heartbeat to parked connections when the confirm
offset advanced, so slaves' consumers see new messages without waiting for the next heartbeat:
to those that were sent nothing for ``confirm_push_delay_ms`` (a busy stream carries the confirm
offset in its transfers, and is not doubled by them), re-checking every ``confirm_push_delay_ms``
until each has it.

Slaves it does not know yet. The master admits only the replicas the controllers list, as it
last heard them; a slave that registered since (a new replica, or one back at a new address)
would be refused until the master's next poll. So a handshake refused only for that
(:attr:`~broker.ha.refusals.Refusal.unknown_yet`) is *held*: what the connection had to do next
waits, the server asks for a fresh answer (``refresh_replicas``, the ReplicasManager's poll) and
decides once more when it was handed over, or after ``_REFRESH_BOUND_S``; only then is the peer
refused, counted and logged. A held connection buffers at most ``_HELD_BYTES`` from the peer.

Roles. The server listens for the broker's whole life; connections are accepted only between
:meth:`MasterServer.start_serving` and :meth:`MasterServer.stop_serving` (a slave broker closes
them at once). Stopping aborts every connection: buffered views of the CommitLog are dropped
before the log may be truncated.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Callable
from typing import Protocol, cast

import structlog

from broker.ha.actions import (
    CloseConnection,
    MasterAction,
    SendBytes,
    SlaveAcked,
    SlaveRegistered,
    StreamingStarted,
)
from broker.ha.config import HAConfig
from broker.ha.master_conn import MasterConnection
from broker.ha.refusals import DUPLICATE_ID, MALFORMED, UNAUTHENTICATED, Refusal, RefusalLog
from protocol import ha_auth
from protocol.ha import Buffer, EpochEntry
from remoting.read_buffer import CopyingProtocol
from storage.epoch_file import EpochFile
from storage.store import MessageStore

__all__ = ["MasterServer", "SlaveEvents", "StoreMasterLog"]

log = structlog.get_logger(__name__)

_REFRESH_BOUND_S = 2.0
"""How long a held handshake waits for the controllers' fresh list of replicas."""
_HELD_BYTES = 64 * 1024
"""What a held connection buffers from its peer (a slave waits for the master's handshake reply
before it acks: a few bytes at most)."""

RefreshReplicas = Callable[[Callable[[], None]], None]
"""``refresh(done)``: ask the controllers for the group's replicas now; ``done()`` once an answer
asked for after the call was handed to the HA service (or that request failed)."""

_GATHER_PARTS = 64
"""A pump gathers headers and bodies into one ``writelines`` up to this many parts or
``max_batch_bytes`` (catching up, each full batch is written at once, so backpressure stops the
pump within a batch of the high-water mark)."""


class SlaveEvents(Protocol):
    """What the server reports (on the loop thread, in order per connection)."""

    def slave_connected(self, broker_id: int, address: str, async_learner: bool) -> Refusal | None:
        """None to admit the connection, else why it is refused (it is closed)."""
        ...

    def slave_acked(self, broker_id: int, offset: int) -> None: ...
    def slave_disconnected(self, broker_id: int) -> None: ...


class StoreMasterLog:
    """The live :class:`~broker.ha.master_conn.MasterLog` of a master: store, epoch file and the
    confirm offset (read through ``confirm``)."""

    __slots__ = ("_confirm", "_epochs", "_store")

    def __init__(
        self, store: MessageStore, epoch_file: EpochFile, confirm: Callable[[], int]
    ) -> None:
        self._store = store
        self._epochs = epoch_file
        self._confirm = confirm

    @property
    def epoch_entries(self) -> tuple[EpochEntry, ...]:
        return self._epochs.entries()

    @property
    def max_offset(self) -> int:
        return self._store.max_offset

    @property
    def confirm_offset(self) -> int:
        return self._confirm()

    @property
    def min_offset(self) -> int:
        return self._store.min_offset

    @property
    def last_file_start(self) -> int:
        """Where the segment the next write goes into starts: the last segment's start, or
        the max offset when the log ends at its end (or holds no segment)."""
        end = self._store.max_offset
        segments = self._store.commitlog_segments()
        if segments and segments[-1][0] <= end < segments[-1][1]:
            return segments[-1][0]
        return end


class _SlaveLink(CopyingProtocol):
    """One slave's socket on the master."""

    def __init__(self, server: MasterServer) -> None:
        self._server = server
        self._cfg = server.config
        self.conn = MasterConnection(max_batch_bytes=self._cfg.max_batch_bytes)
        self.transport: asyncio.WriteTransport | None = None
        self._joined = False  # TLS: parts are joined into one write (see _write_parts)
        self.peer = "?"
        self.peer_host = "?"
        self.broker_id: int | None = None
        self.paused = False
        self.streaming = False
        self.closed = False
        self._pump_scheduled = False
        now = server.now_ms()
        self.last_send_ms = now
        self.last_recv_ms = now
        self.confirm_sent = -1
        self.bytes_sent = 0
        self._challenge: bytes | None = None
        """With authentication on: this connection's nonce, until the peer's answer verified."""
        self._pending = b""
        self._held: list[MasterAction] | None = None
        """While the handshake waits for the controllers' fresh list: what was to follow it."""
        self._held_data = bytearray()
        self.rechecked = False
        """The handshake was decided on a fresh list (no second wait)."""

    # ------------------------------------------------------------ asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # (uvloop's transports are not asyncio.Transport instances, hence the cast.)
        self.transport = cast(asyncio.WriteTransport, transport)
        self._joined = transport.get_extra_info("ssl_object") is not None
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.peer_host = str(peer[0]) if isinstance(peer, tuple) else self.peer
        if not self._server.accept(self):
            self.transport.abort()
            return
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.transport.set_write_buffer_limits(
            high=self._cfg.write_buffer_high_bytes, low=self._cfg.write_buffer_low_bytes
        )
        if self._cfg.auth_key is not None:  # prove yourself before the handshake
            self._challenge = os.urandom(ha_auth.NONCE_BYTES)
            self._write(ha_auth.challenge(self._challenge))

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        self.last_recv_ms = self._server.now_ms()
        if self._held is not None:
            self._held_data += data
            if len(self._held_data) > _HELD_BYTES:
                self._server.refuse(
                    self, MALFORMED, f"{len(self._held_data)} bytes sent before the handshake reply"
                )
            return
        if self._challenge is not None:
            data = self._authenticate(data)
            if not data:
                return
        self._carry_out(self.conn.receive_data(data, self._server.master_log))

    def _carry_out(self, actions: list[MasterAction]) -> None:
        for i, action in enumerate(actions):
            match action:
                case SendBytes(data=out):
                    self._write(out)
                case SlaveRegistered(handshake=hs):
                    self.broker_id = hs.broker_id
                    verdict = self._server.register(self, hs.address, hs.async_learner)
                    if verdict is None:
                        self._held = actions[i + 1 :]
                        return
                    if not verdict:
                        return
                case StreamingStarted():
                    self.streaming = True
                    self.pump()
                case SlaveAcked(broker_id=broker_id, offset=offset):
                    self._server.events.slave_acked(broker_id, offset)
                case CloseConnection(reason=reason, refusal=refusal):
                    if refusal is None:
                        self.close(reason)
                    else:
                        self._server.refuse(self, refusal, reason)
                    return

    def resume(self, admitted: bool) -> None:
        """The held handshake was decided: carry on with what followed it, or (refused: the
        server closed it) drop it."""
        held, self._held = self._held, None
        data, self._held_data = bytes(self._held_data), bytearray()
        if held is None or not admitted or self.closed:
            return
        self._carry_out(held)
        if data and not self.closed and self._held is None:
            self.data_received(data)

    def _authenticate(self, data: bytes) -> bytes:
        """Collect the answer to the challenge; once whole and verified, send this master's
        proof and return what followed it (the handshake, if already sent). A wrong answer
        closes the connection before any HA message is read."""
        key, nonce = self._cfg.auth_key, self._challenge
        assert key is not None and nonce is not None
        self._pending += data
        if len(self._pending) < ha_auth.ANSWER_BYTES:
            return b""
        answer = self._pending[: ha_auth.ANSWER_BYTES]
        rest = self._pending[ha_auth.ANSWER_BYTES :]
        self._pending = b""
        try:
            slave_nonce = ha_auth.check_answer(key, nonce, answer)
        except ha_auth.HAAuthError as exc:
            self._server.refuse(self, UNAUTHENTICATED, str(exc))
            return b""
        self._challenge = None
        self._write(ha_auth.master_proof(key, nonce, slave_nonce))
        return rest

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.conn.close("connection lost")
        self._server.lost(self, exc)

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        self.pump()

    # ------------------------------------------------------------ output

    def _write(self, data: bytes | memoryview) -> None:
        assert self.transport is not None
        self.transport.write(data)
        self.last_send_ms = self._server.now_ms()

    def close(self, reason: str, *, error: bool = True, quiet: bool = False) -> None:
        """Abort the socket (buffered CommitLog views are dropped, not sent); ``quiet``: the
        caller logged it (or chose not to)."""
        if self.closed:
            return
        if not quiet:
            (log.warning if error else log.info)(
                "closing HA connection", peer=self.peer, broker_id=self.broker_id, reason=reason
            )
        self.closed = True
        self.conn.close(reason)
        if self.transport is not None:
            self.transport.abort()

    def schedule_pump(self) -> None:
        if not self._pump_scheduled and not self.closed:
            self._pump_scheduled = True
            self._server.loop.call_soon(self._scheduled_pump)

    def _scheduled_pump(self) -> None:
        self._pump_scheduled = False
        self.pump()

    def pump(self) -> None:
        """Send batches until caught up (park in the idle set), paused, or out of budget."""
        if self.closed or self.paused or not self.streaming:
            return
        server = self._server
        log_view = server.master_log
        read = server.store.read_raw
        transport = self.transport
        assert transport is not None
        budget = self._cfg.pump_budget_bytes
        max_batch = self._cfg.max_batch_bytes
        sent = 0
        caught_up = False
        out: list[Buffer] = []
        gathered = 0
        try:
            while sent < budget and not self.paused:
                batch = self.conn.plan_transfer(log_view)
                if batch is None:
                    caught_up = True
                    break
                # At most what fills this write up to max_batch_bytes: a write never passes it,
                # so a paused stream holds at most the high-water mark plus one batch.
                body = read(batch.offset, min(batch.length, max_batch - gathered))
                if not len(body):
                    caught_up = True
                    break
                header = self.conn.commit_transfer(batch, body)
                out.append(header)
                out.append(body)  # the mapped segment's view: no copy here
                sent += len(body)
                gathered += len(body)
                if gathered >= max_batch or len(out) >= _GATHER_PARTS:
                    self._write_parts(transport, out)  # may pause writing
                    out = []
                    gathered = 0
        except Exception as exc:  # a store error, or a position the log cannot serve
            self.close(f"cannot stream to this slave: {type(exc).__name__}: {exc}")
            return
        if out:
            self._write_parts(transport, out)
        if sent:
            self.bytes_sent += sent
            self.last_send_ms = server.now_ms()
            self.confirm_sent = max(self.confirm_sent, log_view.confirm_offset)
        if caught_up:
            server.park(self)
            if self.confirm_sent < log_view.confirm_offset:
                self.heartbeat()
        elif not self.paused:
            self.schedule_pump()  # out of budget: let the loop breathe, then go on

    def _write_parts(self, transport: asyncio.WriteTransport, out: list[Buffer]) -> None:
        """Over TCP, ``writelines``: one system call, the bodies not copied. Over TLS the parts
        are joined first: the SSL layer makes a TLS record of each part it is given (a separate
        encryption, record header and tag, and on the slave a separate decryption), and one
        record per write costs less than copying a few KiB; a large batch is split into 16 KiB
        records either way."""
        if self._joined:
            transport.write(b"".join(out))
        else:
            transport.writelines(out)

    def heartbeat(self) -> None:
        if self.closed or self.paused:
            return
        log_view = self._server.master_log
        hb = self.conn.heartbeat(log_view)
        if hb is not None:
            self._write(hb)
            self.confirm_sent = max(self.confirm_sent, log_view.confirm_offset)


class MasterServer:
    """The HA port; see the module docstring."""

    def __init__(
        self,
        *,
        store: MessageStore,
        epoch_file: EpochFile,
        config: HAConfig,
        events: SlaveEvents,
        confirm: Callable[[], int],
        now_ms: Callable[[], int],
    ) -> None:
        self.store = store
        self.config = config
        self.events = events
        self.now_ms = now_ms
        self.master_log = StoreMasterLog(store, epoch_file, confirm)
        self._server: asyncio.Server | None = None
        self._links: set[_SlaveLink] = set()
        self._by_id: dict[int, _SlaveLink] = {}
        self._idle: set[_SlaveLink] = set()
        self._wake_pending = False
        self._confirm_pending = False
        self._serving = False
        self._master_id: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.refusals = RefusalLog()
        self.refresh_replicas: RefreshReplicas | None = None
        """Set by the broker's ReplicasManager (none without controllers)."""

    # ------------------------------------------------------------ lifecycle

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The loop the server listens on (or the running one)."""
        return self._loop or asyncio.get_running_loop()

    async def listen(self) -> None:
        self._loop = loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: _SlaveLink(self),
            self.config.listen_host,
            self.config.listen_port,
            reuse_address=True,
            ssl=self.config.server_tls,
        )

    @property
    def address(self) -> tuple[str, int]:
        """(host, port) actually bound."""
        if self._server is None or not self._server.sockets:
            raise RuntimeError("the HA server is not listening")
        host, port = self._server.sockets[0].getsockname()[:2]
        return str(host), int(port)

    @property
    def serving(self) -> bool:
        return self._serving

    def start_serving(self, master_id: int) -> None:
        """Accept slaves from now on (this broker is master ``master_id``)."""
        self._master_id = master_id
        self._serving = True

    def stop_serving(self, reason: str) -> None:
        """Refuse new slaves and abort every connection (their buffered views included)."""
        self._serving = False
        for link in list(self._links):
            link.close(reason, error=False)
        self._idle.clear()

    async def close(self) -> None:
        self.stop_serving("shutting down")
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    # ------------------------------------------------------------ links

    def accept(self, link: _SlaveLink) -> bool:
        if not self._serving:
            log.info("refusing an HA connection: not master", peer=link.peer)
            return False
        self._links.add(link)
        return True

    def register(self, link: _SlaveLink, address: str, async_learner: bool) -> bool | None:
        """Admit a slave that handshook (True), or close it (False), or hold it (None) until the
        controllers' fresh list of replicas decides (see the module docstring). A broker id has
        one live connection at a time: a second one is refused until the first is lost (and
        reported)."""
        broker_id = link.broker_id
        assert broker_id is not None
        old = self._by_id.get(broker_id)
        if old is not None and old.closed:
            self._forget(old, None)  # closed, its connection_lost not run yet: report it now
        elif old is not None:
            self.refuse(
                link,
                DUPLICATE_ID,
                f"broker id {broker_id} already has a live HA connection from {old.peer}; "
                "refused until that one is lost",
            )
            return False
        refused = self.events.slave_connected(broker_id, address, async_learner)
        refresh = self.refresh_replicas
        if refused is not None and refused.unknown_yet and refresh and not link.rechecked:
            link.rechecked = True
            self._decide_on_fresh_replicas(link, refresh, address, async_learner)
            return None
        if refused is not None and refused.reason is not None:
            self.refuse(link, refused.reason, refused.detail)
            return False
        if refused is not None:
            link.close(f"refused: {refused.detail}")
            return False
        self._by_id[broker_id] = link
        log.info(
            "slave connected",
            broker_id=broker_id,
            address=address,
            peer=link.peer,
            async_learner=async_learner,
        )
        return True

    def _decide_on_fresh_replicas(
        self, link: _SlaveLink, refresh: RefreshReplicas, address: str, async_learner: bool
    ) -> None:
        """Register ``link`` again once the controllers' fresh answer is in, or after
        ``_REFRESH_BOUND_S`` (whichever first), and resume or close it."""
        decided = False

        def decide() -> None:
            nonlocal decided
            if decided:
                return
            decided = True
            bound.cancel()
            if link.closed:
                return
            if not self._serving:
                link.close("not master any more", error=False)
                return
            link.resume(self.register(link, address, async_learner) is True)

        bound = self.loop.call_later(_REFRESH_BOUND_S, decide)
        refresh(decide)

    def refuse(self, link: _SlaveLink, refusal: str, detail: str) -> None:
        """Close ``link``, which broke rule ``refusal`` (:mod:`broker.ha.refusals`): counted,
        and logged at most once per reason and peer host a minute (an attacker reconnecting in
        a loop does not flood the log; the next line says how many went unlogged)."""
        unlogged = self.refusals.record(refusal, link.peer_host, self.now_ms())
        if unlogged is not None:
            log.warning(
                "refused an HA peer",
                peer=link.peer,
                broker_id=link.broker_id,
                reason=refusal,
                detail=detail,
                not_logged_since=unlogged,
            )
        link.close(detail, quiet=True)

    def lost(self, link: _SlaveLink, exc: Exception | None) -> None:
        self._links.discard(link)
        self._idle.discard(link)
        self._forget(link, exc)

    def _forget(self, link: _SlaveLink, exc: Exception | None) -> None:
        broker_id = link.broker_id
        if broker_id is not None and self._by_id.get(broker_id) is link:
            del self._by_id[broker_id]
            log.info(
                "slave disconnected",
                broker_id=broker_id,
                peer=link.peer,
                reason=link.conn.close_reason if exc is None else str(exc),
            )
            self.events.slave_disconnected(broker_id)

    def park(self, link: _SlaveLink) -> None:
        self._idle.add(link)

    def connection_count(self) -> int:
        return len(self._links)

    def link_for(self, broker_id: int) -> _SlaveLink | None:
        return self._by_id.get(broker_id)

    # ------------------------------------------------------------ wake-ups

    def notify_appended(self) -> None:
        """New bytes in the CommitLog: feed the parked connections (once per loop iteration)."""
        if self._idle and not self._wake_pending:
            self._wake_pending = True
            self.loop.call_soon(self._wake)

    def _wake(self) -> None:
        self._wake_pending = False
        idle, self._idle = self._idle, set()
        for link in idle:
            link.pump()

    def push_confirm(self) -> None:
        """The confirm offset advanced: tell the parked connections within
        ``confirm_push_delay_ms`` (one timer at a time; transfers sent meanwhile carry it)."""
        if self._idle and not self._confirm_pending:
            self._confirm_pending = True
            loop = self.loop
            delay = self.config.confirm_push_delay_ms
            if delay:
                loop.call_later(delay / 1000, self._push_confirm)
            else:
                loop.call_soon(self._push_confirm)

    def _push_confirm(self) -> None:
        self._confirm_pending = False
        confirm = self.master_log.confirm_offset
        quiet_since = self.now_ms() - self.config.confirm_push_delay_ms
        later = False
        for link in self._idle:
            if link.confirm_sent < confirm:
                if link.last_send_ms <= quiet_since:
                    link.heartbeat()
                else:  # a transfer just went out; the next one may carry it
                    later = True
        if later:
            self.push_confirm()

    def tick(self, now_ms: int) -> None:
        hb = self.config.heartbeat_interval_ms
        idle_timeout = self.config.connection_idle_timeout_ms
        for link in list(self._links):
            if now_ms - link.last_recv_ms >= idle_timeout:
                link.close(f"heard nothing for {now_ms - link.last_recv_ms} ms")
            elif link.streaming and now_ms - link.last_send_ms >= hb:
                link.heartbeat()
