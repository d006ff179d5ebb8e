"""The remoting server: accepts connections and dispatches requests to handlers.

A handler gets ``(connection, frame)`` and returns a response frame, ``None`` (no response), or
something that gives one later:

- a :class:`DeferredAnswer`: the response is written when its holder calls
  :meth:`DeferredAnswer.answer` (on the loop thread), right then: no callback is scheduled, no
  task, no future. The cheapest way for a handler that parks a request until an event, such as a
  send waiting for its flush or for the replicas' acks (one per send). It may be answered before
  the handler returns it; when the connection closes first, the answer is dropped;
- an :class:`asyncio.Future`: the response is written when it completes, from a done-callback.
  When the connection closes first the future is cancelled; whoever completes it must check
  ``done()`` first;
- any other awaitable (a coroutine): run as a task, cancelled when the connection closes.

Plain return values are written at once (the fast path). Either way slow requests (long polling,
waits for flush or replicas) never block the connection, and responses go out in the order they
complete.

Fairness: one connection dispatches at most ``max_frames_per_turn`` frames per event-loop turn;
the frames of a larger read wait for the next turn, with reading paused meanwhile, so a flood of
requests on some connections delays timers and the other connections by one turn's work, not by
the whole flood's.

Bounds per connection, so one slow or malicious client cannot exhaust memory:
- at most ``max_inflight`` requests awaiting a response; past it the server stops reading from
  that socket until some complete (TCP pushes back on the client);
- the transport's write buffer has a high-water mark; past it the server stops reading too, so a
  client that does not read its responses stops being served instead of growing our buffer.

Bounds across connections: the bytes of incomplete frames that all connections of a server hold
together are at most ``max_partial_frame_bytes`` (a frame's declared length is a claim, checked
against ``max_frame_bytes`` before any of its bytes are kept; only bytes that arrived count).
Past the budget the server closes the connection whose incomplete frame has waited longest for
more bytes (a peer that stalls mid-frame, never the one streaming a frame right now) until the
total fits, with one logged line each, and counts it (``on_drop`` callbacks, reason
``partial_frame_budget``).

A frame that cannot be decoded, or one longer than ``max_frame_bytes``, closes the connection with
one logged line (reason ``bad_frame``).

A second door: with :attr:`RemotingServer.second_door` set, the first bytes of each connection
decide which protocol it speaks (:meth:`SecondDoor.sniff`); a connection of the other protocol is
handed to the door's session (:meth:`SecondDoor.open`), whose decoder replaces ours (same bad-frame
closing and incomplete-frame budget) and which handles the decoded commands itself. The brokers and
controllers serve RocketMQ's own remoting protocol this way (:mod:`remoting.classic_door`). A handler that raises answers SYSTEM_ERROR (or BAD_REQUEST for a FieldError); the
process keeps serving everyone else.
"""

from __future__ import annotations

import asyncio
import inspect
import socket
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, cast

import structlog

from protocol.codes import RequestCode, ResponseCode
from protocol.fields import FieldError
from protocol.remoting import (
    DEFAULT_MAX_FRAME_BYTES,
    Frame,
    FrameDecoder,
    ProtocolError,
    encode_frame,
    encode_frame_parts,
    response,
)
from remoting.ports import bind_listeners
from remoting.read_buffer import CopyingProtocol
from remoting.write_batch import WriteBatch

log = structlog.get_logger(__name__)


class DeferredAnswer:
    """A response a handler gives later: return it, then call :meth:`answer` once (see the
    module docstring). Subclass it to carry what the answer needs (``__slots__``)."""

    __slots__ = ("_conn", "_early", "_frame", "_state")

    _NEW, _BOUND, _ANSWERED, _DROPPED = range(4)

    def __init__(self) -> None:
        self._state = DeferredAnswer._NEW
        self._conn: Connection | None = None
        self._frame: Frame | None = None
        self._early: Frame | None = None

    @property
    def pending(self) -> bool:
        """Not answered yet, and its connection still open."""
        return self._state < DeferredAnswer._ANSWERED

    def answer(self, resp: Frame | None) -> None:
        """Write ``resp`` (None: no response) to the request's connection now; a no-op after
        the first call, or once the connection closed."""
        state = self._state
        if state == DeferredAnswer._BOUND:
            self._state = DeferredAnswer._ANSWERED
            conn, frame = self._conn, self._frame
            self._conn = self._frame = None
            assert conn is not None and frame is not None
            conn._answered(self, frame, resp)
        elif state == DeferredAnswer._NEW:  # before the handler returned it
            self._state = DeferredAnswer._ANSWERED
            self._early = resp


HandlerResult = (
    Frame | None | DeferredAnswer | asyncio.Future[Frame | None] | Awaitable[Frame | None]
)
Handler = Callable[["Connection", Frame], HandlerResult]
Guard = Callable[["Connection", Frame], Frame | None]
"""Runs before the handler of every request: None lets it through, a frame is the answer instead
(a refusal; not sent for a oneway request). :class:`remoting.auth.RequestGuard` is the one in
use. AUTHENTICATE has no handler: it reaches the guard, whose frame answers it (a server without
a guard, or a guard that lets it through, answers REQUEST_CODE_NOT_SUPPORTED)."""


class DoorDecoder(Protocol):
    """A second door's stream decoder: :class:`protocol.remoting.FrameDecoder`'s interface."""

    @property
    def buffered(self) -> int: ...

    @property
    def declared(self) -> int | None: ...

    def clear(self) -> None: ...

    def feed(self, data: bytes) -> list[Any]: ...


class DoorSession(Protocol):
    """One connection of the second door's protocol: decodes its frames and handles them."""

    @property
    def decoder(self) -> DoorDecoder: ...

    def handle(self, commands: list[Any]) -> None: ...

    def closed(self) -> None: ...


class SecondDoor(Protocol):
    """Another protocol served on the same port, told apart by a connection's first bytes."""

    def sniff(self, prefix: bytes) -> bool | None:
        """True: the other protocol; False: ours; None: more bytes are needed."""
        ...

    def open(self, conn: Connection) -> DoorSession: ...


#: Default bound on the bytes of incomplete frames held by all connections of one server.
DEFAULT_MAX_PARTIAL_FRAME_BYTES = 4 * DEFAULT_MAX_FRAME_BYTES
SPLIT_BODY = 4096
"""A frame whose body is at least this long is queued as its head and its body
(:func:`~protocol.remoting.encode_frame_parts`): the body is copied once, where the writes of
the loop's turn are joined."""

#: Reasons a connection is closed by the server (``on_drop`` callbacks get one).
DROP_BAD_FRAME = "bad_frame"
DROP_PARTIAL_FRAME_BUDGET = "partial_frame_budget"


@dataclass(kw_only=True)
class ServerLimits:
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    max_partial_frame_bytes: int = DEFAULT_MAX_PARTIAL_FRAME_BYTES
    max_inflight: int = 1024
    write_buffer_high: int = 8 * 1024 * 1024
    max_frames_per_turn: int = 64
    """Frames one connection dispatches per event-loop turn; the rest wait for the next turn
    (reading paused meanwhile), so a flood on some connections cannot starve the timers and
    the other connections (a controller's Raft heartbeats) for long."""


def error_response(req: Frame, code: int, remark: str) -> Frame:
    return response(req, code, {"remark": remark})


class Connection(asyncio.BaseProtocol):
    """One accepted connection, without TLS: a plain protocol (not an ``asyncio.Protocol``,
    which uvloop would not take as buffered either), handed each read as a bytes object by the
    loop, one call into Python per read. :class:`TlsConnection` serves TLS."""

    def __init__(self, server: RemotingServer) -> None:
        self._server = server
        self._decoder: DoorDecoder | FrameDecoder = FrameDecoder(server.limits.max_frame_bytes)
        self._door: DoorSession | None = None
        self._sniffed = server.second_door is None
        self._head = b""
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.inflight = 0
        self._reading_paused = False
        self._write_paused = False
        self.closed = False
        self.attrs: dict[str, Any] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._pending: dict[asyncio.Future[Frame | None], Frame] = {}  # future -> its request
        self._deferred: set[DeferredAnswer] = set()  # bound, not answered yet
        self._batch = WriteBatch(self._send_now)
        self._backlog: list[Frame] = []  # decoded frames left for the next loop turn
        self._loop: asyncio.AbstractEventLoop | None = None
        self.partial_bytes = 0  # bytes of an incomplete frame, as charged to the server's budget

    # asyncio.Protocol -------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses but have its interface.
        self.transport = tr = cast(asyncio.Transport, transport)
        self._loop = asyncio.get_running_loop()
        peer = tr.get_extra_info("peername")
        if isinstance(peer, tuple) and len(peer) >= 2:
            self.peer = f"{peer[0]}:{peer[1]}"
        tr.set_write_buffer_limits(high=self._server.limits.write_buffer_high)
        self._server._opened(self)

    def data_received(self, data: bytes) -> None:
        if not self._sniffed:
            data = self._sniff(data)
            if not data:
                return
        decoder = self._decoder
        try:
            frames = decoder.feed(data)
        except ProtocolError as exc:
            log.warning("closing connection: bad frame", peer=self.peer, reason=str(exc))
            self.close()
            self._server._dropped(self, DROP_BAD_FRAME)
            return
        held = decoder.buffered
        if held or self.partial_bytes:  # small frames arrive whole: nothing to account
            self._server._partial(self, held)
        if self._door is not None:
            if frames:
                self._door.handle(frames)
            return
        if self._backlog:  # frames of an earlier read are still waiting: keep the order
            self._backlog.extend(frames)
            return
        self._handle(frames)

    def _sniff(self, data: bytes) -> bytes:
        """The bytes to decode once the first ones told the protocol (b"": not yet)."""
        door = self._server.second_door
        assert door is not None
        head = self._head + data if self._head else data
        verdict = door.sniff(head)
        if verdict is None:
            self._head = head
            return b""
        self._sniffed = True
        self._head = b""
        if verdict:
            self._door = door.open(self)
            self._decoder = self._door.decoder
        return head

    def _handle(self, frames: list[Frame]) -> None:
        """Dispatch up to ``max_frames_per_turn`` frames now, the rest in later loop turns."""
        limit = self._server.limits.max_frames_per_turn
        for i, frame in enumerate(frames):
            if self.closed:
                return
            if i == limit:
                self._backlog = frames[i:]
                self._update_reading()
                (self._loop or asyncio.get_running_loop()).call_soon(self._next_turn)
                return
            if frame.is_request:
                self._dispatch(frame)
            else:
                self._server._on_response(self, frame)

    def _next_turn(self) -> None:
        frames, self._backlog = self._backlog, []
        if self.closed:
            return
        self._handle(frames)
        if not self._backlog:
            self._update_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._release_partial()
        if self._door is not None:
            self._door.closed()
        for task in list(self._tasks):
            task.cancel()
        # Pending futures no longer count; cancelling them tells whoever completes them.
        pending, self._pending = self._pending, {}
        self.inflight -= len(pending)
        for fut in pending:
            fut.cancel()
        deferred, self._deferred = self._deferred, set()
        self.inflight -= len(deferred)
        for d in deferred:
            d._state = DeferredAnswer._DROPPED
            d._conn = d._frame = None
        self._server._closed(self)

    def eof_received(self) -> bool | None:
        return None  # the transport closes

    def pause_writing(self) -> None:
        self._write_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        self._update_reading()

    # API --------------------------------------------------------------------------------------
    def send(self, frame: Frame) -> None:
        """Queue a frame; every frame queued in one loop iteration goes out in one write."""
        body = frame.body
        if body is not None and len(body) >= SPLIT_BODY:
            head, body = encode_frame_parts(frame)
            self.send_bytes(head)
            self.send_bytes(body)
            return
        self.send_bytes(encode_frame(frame))

    def send_bytes(self, data: bytes) -> None:
        """Queue an encoded frame (a second door's: :meth:`send` for our own frames); it goes
        out in the same write as the rest queued in this loop iteration."""
        if self.transport is None or self.closed:
            return
        self._batch.add(data, self._loop or asyncio.get_running_loop())

    def _send_now(self, data: bytes) -> None:
        if self.transport is not None and not self.closed:
            self.transport.write(data)

    def close(self) -> None:
        self.closed = True
        self._release_partial()
        if self.transport is not None:
            self.transport.close()

    def close_after_answers(self) -> None:
        """Close once the answers queued in this loop turn (and the one being made) are
        written."""
        (self._loop or asyncio.get_running_loop()).call_soon(self._flush_and_close)

    def _flush_and_close(self) -> None:
        self._batch.flush()
        self.close()

    def add_inflight(self, n: int) -> None:
        """A second door's session took on ``n`` requests to answer later (negative: answered
        them); reading pauses at ``max_inflight`` as for ours."""
        self.inflight += n
        self._update_reading()

    @property
    def declared_frame_bytes(self) -> int | None:
        """The length the incomplete frame claims, once its prefix arrived."""
        return self._decoder.declared

    # internals --------------------------------------------------------------------------------
    def _release_partial(self) -> None:
        """Give the incomplete frame's bytes back, to the budget and to the allocator."""
        if self.partial_bytes:
            self._server._partial(self, 0)
        self._decoder.clear()

    def _update_reading(self) -> None:
        if self.transport is None or self.closed:
            return
        want_pause = (
            self._write_paused
            or self.inflight >= self._server.limits.max_inflight
            or bool(self._backlog)
        )
        if want_pause and not self._reading_paused:
            self._reading_paused = True
            self.transport.pause_reading()
        elif not want_pause and self._reading_paused:
            self._reading_paused = False
            self.transport.resume_reading()

    def _dispatch(self, frame: Frame) -> None:
        handler = self._server.handlers.get(frame.code)
        guard = self._server.guard
        if handler is None and (guard is None or frame.code != RequestCode.AUTHENTICATE):
            if not frame.is_oneway:
                self.send(
                    error_response(
                        frame,
                        ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                        f"request code {frame.code} is not supported",
                    )
                )
            return
        if guard is not None:
            refused = guard(self, frame)
            if refused is not None:
                if not frame.is_oneway:
                    self.send(refused)
                return
        if handler is None:  # AUTHENTICATE, let through by a guard without sessions
            self._reply(
                frame,
                error_response(
                    frame,
                    ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                    "this server does not authenticate connections",
                ),
            )
            return
        try:
            result = handler(self, frame)
        except Exception as exc:  # a bad request must never take the server down
            self._reply(frame, self._server._failure(frame, exc))
            return
        if result is None or type(result) is Frame:
            self._reply(frame, result)
        elif isinstance(result, DeferredAnswer):
            if result._state != DeferredAnswer._NEW:  # answered before it was returned
                self._reply(frame, result._early)
                result._early = None
                return
            result._state = DeferredAnswer._BOUND
            result._conn = self
            result._frame = frame
            self._deferred.add(result)
            self.inflight += 1
            if self.inflight >= self._server.limits.max_inflight:
                self._update_reading()
        elif isinstance(result, asyncio.Future):
            self.inflight += 1
            if self.inflight >= self._server.limits.max_inflight:
                self._update_reading()
            self._pending[result] = frame
            result.add_done_callback(self._future_done)
        elif inspect.isawaitable(result):
            self.inflight += 1
            self._update_reading()
            task = asyncio.ensure_future(self._await(frame, result))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        else:
            self._reply(frame, result)

    def _answered(self, d: DeferredAnswer, frame: Frame, resp: Frame | None) -> None:
        self._deferred.discard(d)
        self.inflight -= 1
        if self._reading_paused:
            self._update_reading()
        self._reply(frame, resp)

    def _future_done(self, fut: asyncio.Future[Frame | None]) -> None:
        frame = self._pending.pop(fut, None)
        if frame is None:  # the connection closed first and released it
            return
        self.inflight -= 1
        if self._reading_paused:
            self._update_reading()
        if fut.cancelled():
            return
        exc = fut.exception()
        if exc is None:
            self._reply(frame, fut.result())
        else:
            if not isinstance(exc, Exception):
                exc = RuntimeError(repr(exc))
            self._reply(frame, self._server._failure(frame, exc))

    async def _await(self, frame: Frame, result: Awaitable[Frame | None]) -> None:
        try:
            try:
                resp = await result
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                resp = self._server._failure(frame, exc)
            self._reply(frame, resp)
        finally:
            self.inflight -= 1
            self._update_reading()

    def _reply(self, frame: Frame, resp: Frame | None) -> None:
        if resp is not None and not frame.is_oneway:
            try:
                self.send(resp)
            except (TypeError, ValueError, OverflowError) as exc:
                # A handler's answer that cannot be encoded is a bug of ours: answer it as one,
                # rather than leave the peer to time out and resend the request elsewhere.
                self.send(self._server._failure(frame, exc))


class TlsConnection(Connection, CopyingProtocol):
    """One accepted connection over TLS: a buffered protocol, into which the loop's SSL layer
    decrypts (:mod:`remoting.read_buffer`: a plain one would cost a 256 KiB bytes object a
    read). Without TLS the buffered way costs a second call into Python per read (the loop asks
    for the buffer, then says what it holds) and a copy out of the buffer, for the same bytes
    object in the end."""


class RemotingServer:
    def __init__(self, limits: ServerLimits | None = None, name: str = "remoting") -> None:
        self.limits = limits or ServerLimits()
        self.name = name
        self.handlers: dict[int, Handler] = {}
        self.guard: Guard | None = None
        #: Another protocol served on this port (None: ours only); see :class:`SecondDoor`.
        self.second_door: SecondDoor | None = None
        self.connections: set[Connection] = set()
        self._servers: list[asyncio.Server] = []
        self._socks: list[socket.socket] = []
        self.on_open: list[Callable[[Connection], None]] = []
        self.on_close: list[Callable[[Connection], None]] = []
        self.on_response: Callable[[Connection, Frame], None] | None = None
        #: Called with the connection and a reason (``DROP_*``) when the server closes it.
        self.on_drop: list[Callable[[Connection, str], None]] = []
        #: Bytes of incomplete frames held by all connections, against ``max_partial_frame_bytes``.
        self.partial_bytes = 0
        # Connections holding an incomplete frame, the one whose bytes arrived longest ago first.
        self._partial_holders: dict[Connection, None] = {}
        # One frame of the largest size (and its prefix) always fits.
        self._partial_limit = max(
            self.limits.max_partial_frame_bytes, self.limits.max_frame_bytes + 4
        )

    def register(self, code: int, handler: Handler) -> None:
        self.handlers[int(code)] = handler

    def bind(self, host: str, port: int) -> int:
        """Take the port now, without serving yet (connections wait in the kernel's backlog
        until :meth:`start`); returns the bound port. Raises :class:`PortUnavailable`."""
        if not self._socks:
            self._socks = bind_listeners(host, port, self.name)
        return int(self._socks[0].getsockname()[1])

    async def start(self, host: str, port: int, tls: ssl.SSLContext | None = None) -> int:
        """Listen (on the sockets :meth:`bind` took, if any), over TLS with ``tls``; returns
        the bound port (useful with port 0)."""
        loop = asyncio.get_running_loop()
        kind = Connection if tls is None else TlsConnection
        socks, self._socks = self._socks, []
        if socks:
            for sock in socks:
                self._servers.append(
                    await loop.create_server(lambda: kind(self), sock=sock, ssl=tls)
                )
        else:
            self._servers.append(
                await loop.create_server(
                    lambda: kind(self), host, port, reuse_address=True, ssl=tls
                )
            )
        return int(self._servers[0].sockets[0].getsockname()[1])

    def unbind(self) -> None:
        """Release a port taken by :meth:`bind` and never served."""
        socks, self._socks = self._socks, []
        for sock in socks:
            sock.close()

    async def stop(self) -> None:
        self.unbind()
        servers, self._servers = self._servers, []
        for server in servers:
            server.close()
        for conn in list(self.connections):
            conn.close()
        for server in servers:
            await server.wait_closed()

    def _opened(self, conn: Connection) -> None:
        self.connections.add(conn)
        for cb in self.on_open:
            cb(conn)

    def _closed(self, conn: Connection) -> None:
        if conn in self.connections:
            self.connections.discard(conn)
            for cb in self.on_close:
                cb(conn)

    def _partial(self, conn: Connection, held: int) -> None:
        """``conn`` now holds ``held`` bytes of an incomplete frame. Enforce the budget."""
        self.partial_bytes += held - conn.partial_bytes
        conn.partial_bytes = held
        holders = self._partial_holders
        holders.pop(conn, None)
        if held == 0:
            return
        holders[conn] = None  # bytes just arrived: the last to be dropped
        limit = self._partial_limit
        while self.partial_bytes > limit and holders:
            victim = next(iter(holders))
            log.warning(
                "closing connection: incomplete frames over budget",
                server=self.name,
                peer=victim.peer,
                held_bytes=victim.partial_bytes,
                declared_bytes=victim.declared_frame_bytes,
                total_bytes=self.partial_bytes,
                max_partial_frame_bytes=limit,
            )
            victim.close()  # releases its bytes, so the loop ends
            self._dropped(victim, DROP_PARTIAL_FRAME_BUDGET)

    def _dropped(self, conn: Connection, reason: str) -> None:
        for cb in self.on_drop:
            cb(conn, reason)

    def _on_response(self, conn: Connection, frame: Frame) -> None:
        if self.on_response is not None:
            self.on_response(conn, frame)

    def _failure(self, frame: Frame, exc: Exception) -> Frame:
        if isinstance(exc, FieldError):
            return error_response(frame, ResponseCode.BAD_REQUEST, str(exc))
        log.error(
            "request failed",
            server=self.name,
            code=frame.code,
            error=f"{type(exc).__name__}: {exc}",
            exc_info=exc,
        )
        return error_response(frame, ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")
