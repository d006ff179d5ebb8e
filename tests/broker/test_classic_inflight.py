"""The classic door's requests count against a connection's ``max_inflight`` as ours do: with
that many awaiting their answer (long polls), the server stops reading the connection, and a
later request is read (and answered) only once one of them is answered. A real server on a
loopback socket, in the test's loop."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from protocol.rocketmq_remoting.frame import (
    CommandDecoder,
    RemotingCommand,
    encode_command,
    make_response,
)
from remoting.classic_door import ClassicAnswer, ClassicDoor, ClassicHandler, ClassicSession
from remoting.server import RemotingServer, ServerLimits
from tests.support.wait import wait_until_async

SLOW, FAST = 1001, 1002


Door = tuple[RemotingServer, asyncio.StreamReader, asyncio.StreamWriter, CommandDecoder]


@contextlib.asynccontextmanager
async def classic_door(
    max_inflight: int, handlers: dict[int, ClassicHandler]
) -> AsyncIterator[Door]:
    """A server whose classic door serves ``handlers`` (code -> handler), and a connection to
    it: (server, reader, writer, the connection's decoder). Both closed after."""
    server = RemotingServer(ServerLimits(max_inflight=max_inflight), name="test")
    door = ClassicDoor("test", 1 << 20)
    for code, handler in handlers.items():
        door.register(code, handler)
    server.second_door = door
    port = await server.start("127.0.0.1", 0)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        yield server, reader, writer, CommandDecoder()
    finally:
        writer.close()
        await server.stop()


async def test_awaited_classic_requests_hold_back_reading_at_max_inflight() -> None:
    release = asyncio.Event()

    async def slow(session: ClassicSession, req: RemotingCommand) -> RemotingCommand:
        await release.wait()
        return make_response(req, 0, remark="slow")

    def fast(session: ClassicSession, req: RemotingCommand) -> RemotingCommand:
        return make_response(req, 0, remark="fast")

    async with classic_door(2, {SLOW: slow, FAST: fast}) as (server, reader, writer, decoder):
        for opaque in (1, 2):
            writer.write(encode_command(RemotingCommand(code=SLOW, opaque=opaque)))
            await writer.drain()
            # each read on its own: the next is written once this one is in flight
            await wait_until_async(
                lambda n=opaque: [c.inflight for c in server.connections] == [n],
                f"request {opaque} in flight",
                5,
            )
        (conn,) = server.connections
        assert conn.inflight == 2
        writer.write(encode_command(RemotingCommand(code=FAST, opaque=3)))
        await writer.drain()
        # Not read while two requests await their answers: nothing comes back.
        assert await _answers(reader, decoder, 0.5) == []
        release.set()
        got: list[tuple[int, str | None]] = []
        while len(got) < 3:
            got += await _answers(reader, decoder, 5)
        assert sorted(got) == [(1, "slow"), (2, "slow"), (3, "fast")]
        assert conn.inflight == 0


async def _answers(
    reader: asyncio.StreamReader, decoder: CommandDecoder, timeout: float
) -> list[tuple[int, str | None]]:
    try:
        data = await asyncio.wait_for(reader.read(65536), timeout)
    except TimeoutError:
        return []
    assert data
    return [(c.opaque, c.remark) for c in decoder.feed(data)]


async def test_a_future_answer_counts_in_flight_goes_out_when_set_and_is_cancelled_on_close() -> (
    None
):
    """A handler that answers from a callback returns a future (the classic send does, from
    the durability wait): it is in flight until set, its answer is written then, and a
    connection that closes first cancels it (nothing written, no error)."""
    futures: list[asyncio.Future[RemotingCommand | None]] = []

    def later(session: ClassicSession, req: RemotingCommand) -> ClassicAnswer:
        fut: asyncio.Future[RemotingCommand | None] = asyncio.get_running_loop().create_future()
        futures.append(fut)
        return fut

    async with classic_door(8, {SLOW: later}) as (server, reader, writer, decoder):
        writer.write(encode_command(RemotingCommand(code=SLOW, opaque=7)))
        await writer.drain()
        await wait_until_async(lambda: len(futures) == 1, "the request handled", 5)
        (conn,) = server.connections
        assert conn.inflight == 1
        assert await _answers(reader, decoder, 0.3) == []  # not answered before it is set
        req = RemotingCommand(code=SLOW, opaque=7)
        futures[0].set_result(make_response(req, 0, remark="durable"))
        assert await _answers(reader, decoder, 5) == [(7, "durable")]
        assert conn.inflight == 0

        writer.write(encode_command(RemotingCommand(code=SLOW, opaque=8)))
        await writer.drain()
        await wait_until_async(lambda: len(futures) == 2, "the second request handled", 5)
        writer.close()
        await wait_until_async(
            lambda: futures[1].cancelled(), "the future cancelled by the close", 5
        )
        assert not server.connections
