"""remoting/read_buffer.py: connections that share their thread's receive buffer each keep
exactly the bytes they were sent, on asyncio's loop and on uvloop, with and without TLS; and
each thread has a buffer of its own."""

from __future__ import annotations

import asyncio
import ssl
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
import uvloop

from remoting import read_buffer
from remoting.read_buffer import CopyingProtocol
from tests.support.tls import Pki, make_ca


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
