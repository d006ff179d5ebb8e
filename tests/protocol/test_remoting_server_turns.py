"""The remoting server's fairness (issue 17, item 4): one connection dispatches at most
``max_frames_per_turn`` frames per event-loop turn, so a flood on one connection cannot hold
the loop's timers (a controller's Raft heartbeats) for the whole flood."""

from __future__ import annotations

import asyncio

from protocol.codes import ResponseCode
from protocol.remoting import Frame, encode_frame, request, response
from remoting.server import Connection, RemotingServer, ServerLimits
from tests.support.frames import read_frames

PLAIN = 102
FLOOD = 200
TURN = 16


async def test_a_flood_in_one_read_is_dispatched_over_several_loop_turns() -> None:
    server = RemotingServer(ServerLimits(max_frames_per_turn=TURN), name="test")
    dispatched: list[int] = []
    seen_by_probe: list[int] = []

    def handler(_conn: Connection, req: Frame) -> Frame:
        if not dispatched:
            # Runs in the next loop turn: counts what this turn dispatched.
            asyncio.get_running_loop().call_soon(lambda: seen_by_probe.append(len(dispatched)))
        dispatched.append(req.opaque)
        return response(req, ResponseCode.SUCCESS)

    server.register(PLAIN, handler)
    port = await server.start("127.0.0.1", 0)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        # One write: the frames arrive together, mostly in one read.
        writer.write(b"".join(encode_frame(request(PLAIN, i, {})) for i in range(FLOOD)))
        answers = await read_frames(reader, FLOOD, 10)
    finally:
        writer.close()
        await server.stop()
    assert [f.opaque for f in answers] == list(range(FLOOD))  # all answered, in order
    assert dispatched == list(range(FLOOD))
    assert seen_by_probe and seen_by_probe[0] <= TURN, seen_by_probe


def test_the_busy_back_off_doubles_with_jitter_up_to_its_ceiling() -> None:
    from remoting.failover import AddressFailover

    failover = AddressFailover("127.0.0.1:1", busy_delay=0.25, busy_delay_max=2.0)
    for round_no, ceiling in enumerate((0.25, 0.5, 1.0, 2.0, 2.0)):
        delays = [failover.backoff(round_no) for _ in range(50)]
        assert all(ceiling / 2 <= d <= ceiling for d in delays), (round_no, delays)
        assert len(set(delays)) > 1  # jitter
    failover.close()
