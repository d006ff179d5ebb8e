"""remoting/read_buffer.py: connections that share their thread's receive buffer each keep
exactly the bytes they were sent, on asyncio's loop and on uvloop, with and without TLS; and
each thread has a buffer of its own. The remoting server reads into it under TLS only: without
TLS its connections are plain protocols, one call into Python per read (issue 34); either way a
frame split over many reads and many frames in one read are answered in order."""

from __future__ import annotations

import asyncio
import ssl
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
import uvloop

from protocol.codes import ResponseCode
from protocol.remoting import Frame, encode_frame, request, response
from remoting import read_buffer
from remoting.read_buffer import CopyingProtocol
from remoting.server import Connection, RemotingServer, TlsConnection
from tests.support.frames import read_frames
from tests.support.tls import Pki, make_ca

CODE = 102
FRAMES = 50


class Keeper(CopyingProtocol):
    """Keeps every chunk it is handed, as the HA slave's link queues them."""

    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.closed = asyncio.get_running_loop().create_future()

    def data_received(self, data: bytes) -> None:
        self.chunks.append(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)


@pytest.fixture(scope="module")
def contexts(tmp_path_factory: pytest.TempPathFactory) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    pki: Pki = make_ca(tmp_path_factory.mktemp("pki"))
    cert, key = pki.issue("server")
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(cert, key)
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client.load_verify_locations(Path(pki.ca))
    return server, client


async def _two_senders(
    server_ctx: ssl.SSLContext | None, client_ctx: ssl.SSLContext | None
) -> None:
    loop = asyncio.get_running_loop()
    kept: list[Keeper] = []

    def make() -> Keeper:
        kept.append(Keeper())
        return kept[-1]

    srv = await loop.create_server(make, "127.0.0.1", 0, ssl=server_ctx)
    port = srv.sockets[0].getsockname()[1]
    hostname = "127.0.0.1" if client_ctx else None
    writers = [
        (
            await asyncio.open_connection(
                "127.0.0.1", port, ssl=client_ctx, server_hostname=hostname
            )
        )[1]
        for _ in range(2)
    ]
    sent = [bytearray(), bytearray()]
    for i in range(200):  # interleaved, of varying sizes: later reads reuse the buffer
        for n, w in enumerate(writers):
            chunk = bytes([65 + n]) * (1 + (i * 997) % 70_000)
            sent[n] += chunk
            w.write(chunk)
            await w.drain()
    for w in writers:
        w.close()
    await asyncio.wait_for(asyncio.gather(*(k.closed for k in kept)), 30)
    srv.close()
    got = sorted((b"".join(k.chunks) for k in kept), key=lambda b: b[:1])
    assert [len(g) for g in got] == [len(s) for s in sent]
    assert got == [bytes(s) for s in sent]


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
def test_each_connection_keeps_exactly_what_it_was_sent(
    loop: str, tls: bool, contexts: tuple[ssl.SSLContext, ssl.SSLContext]
) -> None:
    server_ctx, client_ctx = contexts if tls else (None, None)
    runner: Callable[[Coroutine[Any, Any, None]], None] = (
        asyncio.run if loop == "asyncio" else uvloop.run
    )
    runner(_two_senders(server_ctx, client_ctx))


async def _split_and_batched(
    server_ctx: ssl.SSLContext | None, client_ctx: ssl.SSLContext | None
) -> None:
    server = RemotingServer(name="test")
    seen: list[type[Connection]] = []

    def echo(conn: Connection, req: Frame) -> Frame:
        seen.append(type(conn))
        return response(req, ResponseCode.SUCCESS, {"n": req.opaque}, req.body)

    server.register(CODE, echo)
    port = await server.start("127.0.0.1", 0, server_ctx)
    hostname = "127.0.0.1" if client_ctx else None
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=client_ctx, server_hostname=hostname
    )
    try:
        big = encode_frame(request(CODE, 0, {}, b"x" * 300_000))
        for i in range(0, len(big), 7_001):  # one frame over many reads
            writer.write(big[i : i + 7_001])
            await writer.drain()
        # Then many frames in one write (mostly one read).
        writer.write(b"".join(encode_frame(request(CODE, i, {})) for i in range(1, FRAMES)))
        answers = await read_frames(reader, FRAMES, 20)
    finally:
        writer.close()
        await server.stop()
    assert [a.header["n"] for a in answers] == list(range(FRAMES))
    assert answers[0].body == b"x" * 300_000
    kind = Connection if server_ctx is None else TlsConnection
    assert set(seen) == {kind}
    assert issubclass(kind, CopyingProtocol) == (server_ctx is not None)


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
def test_split_frames_and_many_frames_a_read_are_answered_in_order(
    loop: str, tls: bool, contexts: tuple[ssl.SSLContext, ssl.SSLContext]
) -> None:
    server_ctx, client_ctx = contexts if tls else (None, None)
    runner: Callable[[Coroutine[Any, Any, None]], None] = (
        asyncio.run if loop == "asyncio" else uvloop.run
    )
    runner(_split_and_batched(server_ctx, client_ctx))


def test_each_thread_reads_into_a_buffer_of_its_own() -> None:
    views: list[memoryview] = []

    def take() -> None:
        views.append(Keeper.get_buffer(CopyingProtocol(), -1))

    threads = [threading.Thread(target=take) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    take()
    take()
    assert len(views) == 4
    assert views[2] is views[3]  # one thread: the same buffer every time
    assert len({id(v.obj) for v in views}) == 3
    assert all(len(v) == read_buffer.READ_BUFFER_BYTES for v in views)
