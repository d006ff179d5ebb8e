"""The remoting server's budget for incomplete frames, over real sockets in one process.

Every byte a connection holds of an incomplete frame is charged to the server; past
``max_partial_frame_bytes`` the connection that has waited longest for more bytes is closed
(and reported to ``on_drop``), never the one whose bytes are arriving; completing a frame or
closing gives the bytes back.
"""

from __future__ import annotations

import asyncio

from protocol.codes import ResponseCode
from protocol.remoting import FrameDecoder, encode_frame, request, response
from remoting.client import RemotingClient
from remoting.server import DROP_PARTIAL_FRAME_BUDGET, Connection, RemotingServer, ServerLimits
from tests.support.wait import wait_until_async

KIB = 1024
PING = 100
HELD = 120 * KIB  # what each peer sends of its frame before it stalls


async def test_the_peer_stalled_longest_is_dropped_and_bytes_are_given_back() -> None:
    server = RemotingServer(
        ServerLimits(max_frame_bytes=256 * KIB, max_partial_frame_bytes=300 * KIB), name="test"
    )
    server.register(PING, lambda _c, req: response(req, ResponseCode.SUCCESS))
    dropped: list[tuple[Connection, str]] = []
    server.on_drop.append(lambda conn, reason: dropped.append((conn, reason)))
    opened: list[Connection] = []
    server.on_open.append(opened.append)
    port = await server.start("127.0.0.1", 0)
    big = encode_frame(request(PING, 7, body=b"x" * (250 * KIB)))
    peers: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    try:
        # Three peers each send 120 KiB of a 250 KiB frame: the third goes over 300 KiB and the
        # first, stalled longest, is closed.
        for i in range(3):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            peers.append((reader, writer))
            writer.write(big[:HELD])
            await writer.drain()
            if i < 2:
                await wait_until_async(
                    lambda n=i: server.partial_bytes == (n + 1) * HELD, "bytes held"
                )
        await wait_until_async(lambda: len(dropped) == 1, "one connection dropped")
        assert dropped == [(opened[0], DROP_PARTIAL_FRAME_BUDGET)]
        assert server.partial_bytes == 2 * HELD
        assert await asyncio.wait_for(peers[0][0].read(), 5) == b""

        # The second peer streams more of its frame: over budget again, but the third peer
        # (stalled) is closed, not the one whose bytes are arriving. Sent in two writes, the
        # first short of the frame's end: in one, a loaded machine's server may read it whole
        # in one go, the frame complete before anything is over budget (a flaky test, once).
        more = HELD + 70 * KIB  # 240 KiB held + 70 > 300
        peers[1][1].write(big[HELD:more])
        await wait_until_async(lambda: len(dropped) == 2, "the stalled peer dropped")
        assert dropped[1:] == [(opened[2], DROP_PARTIAL_FRAME_BUDGET)]
        peers[1][1].write(big[more:])  # the rest: its frame is answered
        answer = FrameDecoder()
        frames = answer.feed(await asyncio.wait_for(peers[1][0].read(1 << 16), 5))
        assert [(f.opaque, f.code) for f in frames] == [(7, ResponseCode.SUCCESS)]
        await wait_until_async(lambda: server.partial_bytes == 0, "every byte back")

        # A client sending whole frames is served; a peer that leaves mid-frame gives back.
        client = await RemotingClient.connect(f"127.0.0.1:{port}")
        try:
            assert (await client.request(PING, {})).code == ResponseCode.SUCCESS
        finally:
            client.close()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        peers.append((reader, writer))
        writer.write(big[:HELD])
        await wait_until_async(lambda: server.partial_bytes == HELD, "bytes held")
        writer.close()
        await wait_until_async(
            lambda: server.partial_bytes == 0, "the bytes back after the peer left"
        )
        assert len(dropped) == 2
    finally:
        for _, writer in peers:
            writer.close()
        await server.stop()
