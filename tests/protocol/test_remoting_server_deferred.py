"""The remoting server's deferred answers: handlers that return a DeferredAnswer (written when
answered, nothing scheduled), an asyncio.Future (answered from its done-callback, no task) or a
coroutine (run as a task), over a real socket."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence

import pytest

from protocol.codes import ResponseCode
from protocol.fields import FieldError
from protocol.remoting import Frame, FrameDecoder, encode_frame, request, response
from remoting.server import Connection, DeferredAnswer, Handler, RemotingServer, ServerLimits
from tests.support.wait import stays_async, wait_until_async

PARKED = 100  # answered by a future the test completes
CORO = 101  # answered by a coroutine
PLAIN = 102  # answered at once
UNENCODABLE = 103  # answered with a header msgpack cannot encode
DEFERRED = 104  # answered by a DeferredAnswer the test answers


class Parking:
    """A server whose PARKED handler parks each request in ``parked`` (opaque -> future)."""

    def __init__(self, limits: ServerLimits | None = None) -> None:
        self.server = RemotingServer(limits or ServerLimits(), name="test")
        self.parked: dict[int, asyncio.Future[Frame | None]] = {}
        self.conns: list[Connection] = []
        self.server.register(PARKED, self.park)
        self.server.register(CORO, self.coro)
        self.server.register(PLAIN, lambda _c, req: response(req, ResponseCode.SUCCESS))
        self.server.register(
            UNENCODABLE,
            lambda _c, req: response(req, ResponseCode.SUCCESS, {"x": object()}),  # type: ignore[dict-item]
        )
        self.server.register(DEFERRED, self.defer)
        self.deferred: dict[int, DeferredAnswer] = {}
        self.server.on_open.append(self.conns.append)

    def defer(self, conn: Connection, req: Frame) -> DeferredAnswer:
        d = self.deferred[req.opaque] = DeferredAnswer()
        return d

    def park(self, conn: Connection, req: Frame) -> asyncio.Future[Frame | None]:
        fut: asyncio.Future[Frame | None] = asyncio.get_running_loop().create_future()
        self.parked[req.opaque] = fut
        return fut

    async def coro(self, conn: Connection, req: Frame) -> Frame:
        await asyncio.sleep(0.01)
        return response(req, ResponseCode.SUCCESS, {"via": "task"})

    def answer(self, opaque: int, **header: str | int) -> None:
        fut = self.parked[opaque]
        fut.set_result(Frame(kind=1, code=ResponseCode.SUCCESS, opaque=opaque, header=header))


class Peer:
    """A raw client: writes request frames, reads response frames in arrival order."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.decoder = FrameDecoder()
        self.frames: list[Frame] = []

    def send(self, code: int, opaque: int) -> None:
        self.writer.write(encode_frame(request(code, opaque, {"n": opaque})))

    async def read(self, count: int, timeout: float = 5.0) -> list[Frame]:
        async with asyncio.timeout(timeout):
            while len(self.frames) < count:
                data = await self.reader.read(1 << 16)
                assert data, "connection closed"
                self.frames += self.decoder.feed(data)
        out, self.frames = self.frames[:count], self.frames[count:]
        return out

    def close(self) -> None:
        self.writer.close()


Hold = Callable[[Parking, Peer, int, int], Awaitable[Connection]]
"""Sends requests on a peer and waits until the server holds them (:func:`park`, :func:`defer`)."""


@pytest.fixture
async def parking() -> AsyncIterator[tuple[Parking, int]]:
    p = Parking(ServerLimits(max_inflight=3))
    port = await p.server.start("127.0.0.1", 0)
    try:
        yield p, port
    finally:
        await p.server.stop()


async def connect(port: int) -> Peer:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    return Peer(reader, writer)


async def held(
    p: Parking,
    peer: Peer,
    code: int,
    table: Mapping[int, object],
    what: str,
    opaques: Sequence[int],
) -> Connection:
    """Send ``code`` requests and wait until their handler put them in ``table``; their
    connection."""
    want = len(table) + len(opaques)
    for opaque in opaques:
        peer.send(code, opaque)
    await wait_until_async(lambda: len(table) == want, f"{want} {what} requests")
    return p.conns[0]


async def park(p: Parking, peer: Peer, *opaques: int) -> Connection:
    """Send PARKED requests and wait until the handler parked them; their connection."""
    return await held(p, peer, PARKED, p.parked, "parked", opaques)


async def finish(peer: Peer, conn: Connection) -> None:
    await wait_until_async(lambda: conn.inflight == 0, "in-flight count back to 0")
    peer.close()


async def test_future_answers_go_out_in_the_order_they_complete(
    parking: tuple[Parking, int],
) -> None:
    p, port = parking
    peer = await connect(port)
    conn = await park(p, peer, 1, 2, 3)
    assert conn.inflight == 3
    p.answer(3, order=1)
    assert [f.opaque for f in await peer.read(1)] == [3]
    p.answer(1, order=2)
    p.answer(2, order=3)
    frames = await peer.read(2)
    assert [f.opaque for f in frames] == [1, 2]
    assert [f.header["order"] for f in frames] == [2, 3]
    await finish(peer, conn)


async def test_plain_and_task_answers_mix_with_future_ones(parking: tuple[Parking, int]) -> None:
    p, port = parking
    peer = await connect(port)
    peer.send(PARKED, 1)
    peer.send(CORO, 2)
    peer.send(PLAIN, 3)
    first = await peer.read(2)
    assert [f.opaque for f in first] == [3, 2]  # the plain answer at once, the task's later
    assert first[1].header == {"via": "task"}
    p.answer(1)
    assert [f.opaque for f in await peer.read(1)] == [1]
    await finish(peer, p.conns[0])


async def test_a_failed_future_answers_an_error(parking: tuple[Parking, int]) -> None:
    p, port = parking
    peer = await connect(port)
    conn = await park(p, peer, 1, 2)
    p.parked[1].set_exception(RuntimeError("boom"))
    p.parked[2].set_exception(FieldError("bad field"))
    frames = {f.opaque: f for f in await peer.read(2)}
    assert frames[1].code == ResponseCode.SYSTEM_ERROR
    assert "boom" in str(frames[1].header["remark"])
    assert frames[2].code == ResponseCode.BAD_REQUEST
    await finish(peer, conn)


async def test_pending_futures_count_against_the_inflight_limit(
    parking: tuple[Parking, int],
) -> None:
    p, port = parking  # max_inflight = 3
    peer = await connect(port)
    conn = await park(p, peer, 1, 2, 3)
    assert conn.inflight == 3
    for opaque in (4, 5, 6):  # the server stopped reading: these wait in the socket
        peer.send(PARKED, opaque)
    await stays_async(
        lambda: len(p.parked) == 3,
        0.2,
        "reading paused at the in-flight limit (3 parked)",
        on_failure=lambda: f"parked: {sorted(p.parked)}",
    )
    p.answer(1)
    await wait_until_async(lambda: len(p.parked) == 6, "reading resumes after one answer")
    for opaque in range(2, 7):
        p.answer(opaque)
    frames = await peer.read(6)
    assert sorted(f.opaque for f in frames) == [1, 2, 3, 4, 5, 6]
    await finish(peer, conn)


async def closed_with_two_held(p: Parking, port: int, hold: Hold) -> Connection:
    """Two requests held by ``hold`` (:func:`park` or :func:`defer`), then the peer closes: the
    connection, once the server saw the close and nothing is in flight."""
    peer = await connect(port)
    conn = await hold(p, peer, 1, 2)
    assert conn.inflight == 2
    peer.close()
    await wait_until_async(
        lambda: conn.closed and conn not in p.server.connections, "the server to see it"
    )
    assert conn.inflight == 0
    return conn


async def test_closing_with_pending_futures_releases_them(parking: tuple[Parking, int]) -> None:
    p, port = parking
    conn = await closed_with_two_held(p, port, park)
    assert all(f.cancelled() for f in p.parked.values())
    # The cancelled futures' callbacks run: nothing counted again, no error.
    await stays_async(lambda: conn.inflight == 0, 0.1, "no request in flight on the closed conn")


@contextlib.asynccontextmanager
async def answered_once(code: int, handler: Handler) -> AsyncIterator[tuple[RemotingServer, Frame]]:
    """A server with ``handler`` alone (for ``code``), a peer that sent it one request (opaque
    7): the server, still open, and the answer the peer read. Both closed after."""
    server = RemotingServer(name="test")
    server.register(code, handler)
    port = await server.start("127.0.0.1", 0)
    try:
        peer = await connect(port)
        try:
            peer.send(code, 7)
            (frame,) = await peer.read(1)
            yield server, frame
        finally:
            peer.close()
    finally:
        await server.stop()


async def test_a_future_completed_before_it_is_returned_is_answered() -> None:
    def ready(conn: Connection, req: Frame) -> asyncio.Future[Frame | None]:
        fut: asyncio.Future[Frame | None] = asyncio.get_running_loop().create_future()
        fut.set_result(response(req, ResponseCode.SUCCESS, {"ready": 1}))
        return fut

    async with answered_once(PARKED, ready) as (_, frame):
        assert frame.opaque == 7 and frame.header == {"ready": 1}


async def test_an_answer_that_cannot_be_encoded_is_answered_as_a_system_error(
    parking: tuple[Parking, int],
) -> None:
    p, port = parking
    peer = await connect(port)
    peer.send(UNENCODABLE, 1)
    peer.send(PLAIN, 2)
    first, second = await peer.read(2)
    assert (first.opaque, first.code) == (1, ResponseCode.SYSTEM_ERROR)
    assert "TypeError" in str(first.header.get("remark"))
    assert (second.opaque, second.code) == (2, ResponseCode.SUCCESS)  # the connection serves on
    await finish(peer, p.conns[0])


async def defer(p: Parking, peer: Peer, *opaques: int) -> Connection:
    """Send DEFERRED requests and wait until the handler deferred them; their connection."""
    return await held(p, peer, DEFERRED, p.deferred, "deferred", opaques)


def ok(opaque: int, **header: str | int) -> Frame:
    return Frame(kind=1, code=ResponseCode.SUCCESS, opaque=opaque, header=header)


async def test_deferred_answers_go_out_when_answered_and_count_as_in_flight(
    parking: tuple[Parking, int],
) -> None:
    p, port = parking  # max_inflight = 3
    peer = await connect(port)
    conn = await defer(p, peer, 1, 2, 3)
    assert conn.inflight == 3 and all(d.pending for d in p.deferred.values())
    peer.send(DEFERRED, 4)  # the server stopped reading at the limit: this one waits
    await stays_async(lambda: 4 not in p.deferred, 0.2, "request 4 unread (at the limit)")
    p.deferred[2].answer(ok(2, order=1))
    assert not p.deferred[2].pending
    assert [f.opaque for f in await peer.read(1)] == [2]
    await wait_until_async(lambda: 4 in p.deferred, "reading resumes after one answer")
    p.deferred[2].answer(ok(2, order=9))  # a second answer is a no-op
    for opaque in (3, 1, 4):
        p.deferred[opaque].answer(ok(opaque))
    assert [f.opaque for f in await peer.read(3)] == [3, 1, 4]
    await finish(peer, conn)
    assert peer.frames == []


async def test_a_deferred_answer_answered_before_it_is_returned_is_written() -> None:
    def ready(conn: Connection, req: Frame) -> DeferredAnswer:
        d = DeferredAnswer()
        d.answer(response(req, ResponseCode.SUCCESS, {"ready": 1}))
        return d

    async with answered_once(DEFERRED, ready) as (server, frame):
        assert frame.opaque == 7 and frame.header == {"ready": 1}
        assert server.connections and next(iter(server.connections)).inflight == 0


async def test_closing_with_deferred_answers_drops_them(parking: tuple[Parking, int]) -> None:
    p, port = parking
    conn = await closed_with_two_held(p, port, defer)
    assert not any(d.pending for d in p.deferred.values())
    p.deferred[1].answer(ok(1))  # too late: nothing written, nothing counted, no error
    assert conn.inflight == 0
