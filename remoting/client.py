"""One client connection: requests are futures keyed by opaque, answered out of order.

On close every pending request fails with :class:`ConnectionClosedError`, the cause chained.
With a :class:`~protocol.request_auth.RequestSigner` every request is signed as it is written
(:func:`signer_for` makes one from credentials); a pool gives its signer to every connection.
Over TLS, a connection with a signer first sends one signed AUTHENTICATE bound to the TLS
connection; when the server accepts it, the connection's requests go unsigned from then on (the
server knows who is at the other end: docs/protocol.md, "Sessions over TLS"). Otherwise (plain
TCP, a server with authentication off or without sessions, a refusal) every request is signed.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import itertools
import os
import ssl
import time
from collections.abc import Callable, Iterator, Mapping
from typing import cast

from protocol.codes import RequestCode, ResponseCode
from protocol.remoting import (
    DEFAULT_MAX_FRAME_BYTES,
    FLAG_ONEWAY,
    Frame,
    FrameDecoder,
    ProtocolError,
    Scalar,
    encode_frame,
    request,
)
from protocol.request_auth import (
    CHANNEL_BINDING,
    Credentials,
    RequestSigner,
    channel_binding_field,
)
from remoting.channel_binding import tls_unique
from remoting.errors import (
    ConnectError,
    ConnectionClosedError,
    NotSentError,
    RequestTimeoutError,
    ResponseError,
)
from remoting.port_probe import speaks_http2, speaks_tls
from remoting.read_buffer import CopyingProtocol
from remoting.write_batch import WriteBatch

DEFAULT_TIMEOUT = 5.0

RequestHandler = Callable[[Frame], None]


_process_credentials: Credentials | None = None


_task_credentials: contextvars.ContextVar[Credentials | None] = contextvars.ContextVar(
    "rmq_task_credentials", default=None
)


@contextlib.contextmanager
def task_credentials(credentials: Credentials | None) -> Iterator[None]:
    """Pools and connections made in this context (this task, and the tasks it starts) without
    credentials of their own sign with ``credentials`` rather than the process's: for a server
    acting for several users, one request each (rmq-console's logged-in users)."""
    token = _task_credentials.set(credentials)
    try:
        yield
    finally:
        _task_credentials.reset(token)


def _default_credentials() -> Credentials | None:
    return _task_credentials.get() or _process_credentials


def use_credentials(credentials: Credentials | None) -> None:
    """Every pool created from now on without credentials of its own, and every connection made
    without a signer, signs with these: for a command-line tool whose one process has one
    identity (rmqctl, benchmarks). Daemons never call it."""
    global _process_credentials
    _process_credentials = credentials


TlsSource = ssl.SSLContext | Callable[[], ssl.SSLContext]
"""A TLS context, or what gives the current one (a daemon's, which SIGHUP may replace)."""

_process_tls: TlsSource | None = None


def use_tls(tls: TlsSource | None) -> None:
    """Every connection made from now on without a TLS choice of its own goes over TLS with
    this context: for a command-line tool (rmqctl, benchmarks) and for a daemon with TLS on (all
    the ports it connects to serve TLS then)."""
    global _process_tls
    _process_tls = tls


_tls_advice = ("pass tls=remoting.tls.client_context(CA file)", "connect without tls")


def advise_tls(use: str, drop: str) -> None:
    """How this program's user turns TLS on and off (rmqctl: its flags), said when a plaintext
    connection reached a port that speaks TLS, ``this port speaks TLS (<use>)``, and when a TLS
    one reached a plaintext port, ``this port does not speak TLS (<drop>)``."""
    global _tls_advice
    _tls_advice = (use, drop)


def _tls_context(tls: TlsSource | None) -> ssl.SSLContext | None:
    if tls is None:
        tls = _process_tls
    if tls is None or isinstance(tls, ssl.SSLContext):
        return tls
    return tls()


def signer_for(credentials: Credentials | None) -> RequestSigner | None:
    """A signer for ``credentials`` with a random nonce prefix (None: requests go unsigned)."""
    if credentials is None:
        return None
    return RequestSigner(credentials, os.urandom(9).hex())


def wall_ms() -> int:
    """The wall clock in epoch ms: what a request's Timestamp carries."""
    return time.time_ns() // 1_000_000


def split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"not a host:port address: {address!r}")
    return host, int(port)


def _what_answered(data: bytes) -> str:
    """What sent ``data`` instead of a remoting frame, as far as its first bytes tell."""
    if data.startswith(b"HTTP/"):
        return "an HTTP server answered (a proxy in the way, or the wrong port?)"
    if data.startswith(b"\x16\x03"):
        return "a TLS server answered"
    return "the peer answered with bytes that are no remoting frame"


async def _what_port_speaks(host: str, port: int, timeout: float) -> str | None:
    """Why a port closed a plaintext connection unanswered, when it speaks TLS or HTTP/2
    (gRPC) instead of remoting; None when neither answered."""
    probe_timeout = min(timeout, 2.0)
    if await speaks_tls(host, port, probe_timeout):
        return f"this port speaks TLS ({_tls_advice[0]})"
    if await speaks_http2(host, port, probe_timeout):
        return (
            "a gRPC (HTTP/2) server answered: this is a gRPC port (a broker's, for the official "
            "RocketMQ 5 clients, is its listen port + 2); connect to the listen port"
        )
    return None


class _Expired(Exception):
    """Internal: a request's timer fired before its response arrived."""


def _expire(fut: asyncio.Future[Frame]) -> None:
    if not fut.done():
        fut.set_exception(_Expired())


class _ClientProtocol(CopyingProtocol):
    def __init__(self, conn: RemotingClient) -> None:
        self._conn = conn

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._conn._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self._conn._data_received(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self._conn._lost(exc)

    def pause_writing(self) -> None:
        self._conn._writable.clear()

    def resume_writing(self) -> None:
        self._conn._writable.set()


class RemotingClient:
    """A connection to one peer. Create with :meth:`connect`."""

    def __init__(
        self,
        address: str,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        signer: RequestSigner | None = None,
    ) -> None:
        self.address = address
        self.signer = signer
        self._decoder = FrameDecoder(max_frame_bytes)
        self._transport: asyncio.Transport | None = None
        self._pending: dict[int, asyncio.Future[Frame]] = {}
        self._opaque = itertools.count(1)
        self._writable = asyncio.Event()
        self._writable.set()
        self._closed = False
        self._close_cause: BaseException | None = None
        self.on_request: RequestHandler | None = None
        self._batch = WriteBatch(self._send_now)
        self._answered = False  # a whole frame arrived on this connection
        self._tls = False  # connected over TLS
        self._closing = False  # closed by this side (close()), not by the peer
        self._port_probe: asyncio.Task[str | None] | None = None  # once per connection
        self.closed_event = asyncio.Event()
        self.session = False
        """The server authenticated this TLS connection: requests go unsigned."""

    @classmethod
    async def connect(
        cls,
        address: str,
        timeout: float = DEFAULT_TIMEOUT,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        signer: RequestSigner | None = None,
        tls: TlsSource | None = None,
    ) -> RemotingClient:
        """Connect; requests are signed with ``signer``, or when it is None with the process's
        credentials if :func:`use_credentials` set some. Over TLS with ``tls``, or when it is
        None with the process's context if :func:`use_tls` set one."""
        if signer is None:
            signer = signer_for(_default_credentials())
        conn = cls(address, max_frame_bytes, signer)
        host, port = split_address(address)
        loop = asyncio.get_running_loop()
        context = _tls_context(tls)
        try:
            # asyncio.timeout, not asyncio.wait_for: on 3.11 wait_for returns the connection
            # when the caller is cancelled just as it is made, and the cancellation is lost (a
            # task stopping during a reconnect then runs on).
            async with asyncio.timeout(timeout):
                await loop.create_connection(
                    lambda: _ClientProtocol(conn),
                    host,
                    port,
                    ssl=context,
                    server_hostname=host if context is not None else None,
                )
        except (TimeoutError, OSError) as exc:
            cause: BaseException = exc
            if (
                context is not None
                and isinstance(exc, ConnectionResetError | ConnectionAbortedError | ssl.SSLEOFError)
                and not await speaks_tls(host, port, min(timeout, 2.0))
            ):  # the handshake's ClientHello read as a frame: a plaintext port hung up
                cause = ProtocolError(f"this port does not speak TLS ({_tls_advice[1]})")
            raise ConnectError(f"cannot connect to {address}: {cause or 'timeout'}") from cause
        conn._tls = context is not None
        if signer is not None and context is not None:
            await conn._open_session(timeout)
        return conn

    async def _open_session(self, timeout: float) -> None:
        """Authenticate this TLS connection once (see the module docstring)."""
        binding = self.tls_unique
        if binding is None:
            return
        header: dict[str, Scalar] = {CHANNEL_BINDING: channel_binding_field(binding)}
        try:
            resp = await self.request(RequestCode.AUTHENTICATE, header, timeout=timeout)
        except (RequestTimeoutError, ConnectionClosedError) as exc:
            self.close()
            raise ConnectError(f"cannot connect to {self.address}: {exc}") from exc
        self.session = resp.code == ResponseCode.SUCCESS

    @property
    def tls_unique(self) -> bytes | None:
        """The connection's ``tls-unique`` channel binding (None: not TLS)."""
        return tls_unique(self._transport)

    @property
    def is_closed(self) -> bool:
        return self._closed

    async def request(
        self,
        code: int,
        header: Mapping[str, Scalar] | None = None,
        body: bytes | None = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> Frame:
        """Send a request and wait for its response (any response code)."""
        if self._closed or self._transport is None:
            raise NotSentError(f"connection to {self.address} is closed") from self._close_cause
        opaque = next(self._opaque)
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Frame] = loop.create_future()
        self._pending[opaque] = fut
        # A timer handle instead of asyncio.wait_for: no extra task per request on the hot path.
        timer = loop.call_later(timeout, _expire, fut)
        try:
            if not self._writable.is_set():
                await self._writable.wait()
                if self._closed:  # closed while the write waited: nothing left
                    raise NotSentError(
                        f"connection to {self.address} closed before the request was written"
                    ) from self._close_cause
            if self.signer is not None and not self.session:  # as late as possible: fresh
                header = self.signer.sign(code, 0, header, body, wall_ms())
            self._write(encode_frame(request(code, opaque, header, body)))
            return await fut
        except NotSentError:
            raise
        except ConnectionClosedError as exc:
            if await self._closed_by_another_protocol(timeout):
                raise ConnectionClosedError(str(exc)) from self._close_cause
            raise
        except _Expired:
            raise RequestTimeoutError(
                f"request {int(code)} to {self.address} timed out after {timeout:g}s"
            ) from None
        finally:
            timer.cancel()
            self._pending.pop(opaque, None)

    async def _closed_by_another_protocol(self, timeout: float) -> bool:
        """Was this plaintext connection closed, unanswered, by a port that speaks TLS or
        HTTP/2 (gRPC)? Then the close's cause says so (asked once per connection:
        :mod:`remoting.port_probe`)."""
        if self._tls or self._answered or self._closing:
            return False
        if isinstance(self._close_cause, ProtocolError):  # its first bytes told already
            return False
        if self._port_probe is None:
            host, port = split_address(self.address)
            self._port_probe = asyncio.ensure_future(_what_port_speaks(host, port, timeout))
        cause = await asyncio.shield(self._port_probe)
        if cause is None:
            return False
        self._close_cause = ProtocolError(cause)
        return True

    async def call(
        self,
        code: int,
        header: Mapping[str, Scalar] | None = None,
        body: bytes | None = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> Frame:
        """Like :meth:`request`, but a non-success response raises :class:`ResponseError`."""
        resp = await self.request(code, header, body, timeout)
        if resp.code != ResponseCode.SUCCESS:
            raise ResponseError.of(resp, self.address)
        return resp

    def send_oneway(
        self, code: int, header: Mapping[str, Scalar] | None = None, body: bytes | None = None
    ) -> None:
        if self._closed or self._transport is None:
            raise ConnectionClosedError(f"connection to {self.address} is closed")
        if self.signer is not None and not self.session:
            header = self.signer.sign(code, FLAG_ONEWAY, header, body, wall_ms())
        self._transport.write(
            encode_frame(request(code, next(self._opaque), header, body, oneway=True))
        )

    def send_frame(self, frame: Frame) -> None:
        """Write a frame as is (used to answer requests the peer pushes to us)."""
        if self._transport is not None and not self._closed:
            self._write(encode_frame(frame))

    def _write(self, data: bytes) -> None:
        """Queue bytes; everything queued in one loop iteration goes out in one write."""
        self._batch.add(data, asyncio.get_running_loop())

    def _send_now(self, data: bytes) -> None:
        if self._transport is not None and not self._closed:
            self._transport.write(data)

    def close(self) -> None:
        self._closing = True
        if self._transport is not None:
            self._transport.close()
        self._lost(None)

    def _data_received(self, data: bytes) -> None:
        try:
            frames = self._decoder.feed(data)
        except ProtocolError as exc:
            cause = exc
            if not self._answered:
                # Its very first bytes: another kind of server (or a proxy) is at that address.
                cause = ProtocolError(f"not an rmq server: {_what_answered(data)}")
            self._lost(cause)
            if self._transport is not None:
                self._transport.close()
            return
        if frames:
            self._answered = True
        for frame in frames:
            if frame.is_request:
                if self.on_request is not None:
                    self.on_request(frame)
                continue
            fut = self._pending.get(frame.opaque)
            if fut is not None and not fut.done():
                fut.set_result(frame)

    def _lost(self, exc: BaseException | None) -> None:
        if self._closed:
            return
        self._closed = True
        self._close_cause = exc
        self._writable.set()
        for fut in self._pending.values():
            if not fut.done():
                err = ConnectionClosedError(f"connection to {self.address} closed")
                err.__cause__ = exc
                fut.set_exception(err)
        self._pending.clear()
        self.closed_event.set()


class ConnectionPool:
    """At most one live connection per address, re-created when it closes."""

    def __init__(
        self,
        connect_timeout: float = DEFAULT_TIMEOUT,
        credentials: Credentials | None = None,
        tls: TlsSource | None = None,
    ) -> None:
        self.signer = signer_for(credentials if credentials is not None else _default_credentials())
        self.tls = tls
        self._conns: dict[str, RemotingClient] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._timeout = connect_timeout

    async def get(self, address: str) -> RemotingClient:
        conn = self._conns.get(address)
        if conn is not None and not conn.is_closed:
            return conn
        lock = self._locks.setdefault(address, asyncio.Lock())
        async with lock:
            conn = self._conns.get(address)
            if conn is None or conn.is_closed:
                conn = await RemotingClient.connect(
                    address, self._timeout, signer=self.signer, tls=self.tls
                )
                self._conns[address] = conn
            return conn

    def drop(self, address: str) -> None:
        conn = self._conns.pop(address, None)
        if conn is not None:
            conn.close()

    def close(self) -> None:
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()
