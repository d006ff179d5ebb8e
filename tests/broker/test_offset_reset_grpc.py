"""An offset reset reaches the official gRPC clients through their POP state (they consume by
ReceiveMessage, which POPs): after INVOKE_BROKER_TO_RESET_OFFSET the group's next
ReceiveMessage reads from the reset offset, and one long-polling at the queues' end when the
reset lands answers at once with the messages from there (docs/operations.md, "Resetting
offsets"). A master with a real gRPC port runs in this event loop."""

from __future__ import annotations

import asyncio

from broker.broker import Broker
from protocol.broker_requests.offsets import OffsetsReset, ResetOffset
from remoting.client import RemotingClient
from tests.broker.support import grpc_master_and_slave, grpc_receive, grpc_send
from tests.support.wait import wait_until_async

TOPIC = "ResetOverGrpc"
GROUP = "ResetOverGrpcGroup"

a, b = grpc_master_and_slave(TOPIC, 1)


async def _receive(broker: Broker, poll_s: int) -> list[bytes]:
    _, got = await grpc_receive(broker, GROUP, TOPIC, "*", poll_s)
    return [m.body for m in got]


async def _reset(broker: Broker, offset: int) -> OffsetsReset:
    conn = await RemotingClient.connect(broker.cfg.listen, timeout=2.0)
    try:
        ask = ResetOffset(topic=TOPIC, group=GROUP, queue_id=0, offset=offset)
        frame = await conn.call(ask.code, *ask.encode(), 5)
        return OffsetsReset.parse(frame.header, frame.body)
    finally:
        conn.close()


async def test_a_grpc_consumer_receives_from_the_reset_offset(a: Broker) -> None:
    await grpc_send(a, TOPIC, b"m0", b"m1", b"m2", b"m3")
    assert sorted(await _receive(a, 1)) == [b"m0", b"m1", b"m2", b"m3"]
    assert (await _reset(a, 1)).queues[0].outcome == "reset"
    assert sorted(await _receive(a, 1)) == [b"m1", b"m2", b"m3"]

    # A ReceiveMessage long-polling at the end is answered at once when the reset lands.
    waiting = asyncio.ensure_future(_receive(a, 15))
    await wait_until_async(lambda: a.ctx.waiters.waiting > 0, "the receive to park", 10)
    await _reset(a, 2)
    # Well before its 15 s long poll ends.
    assert sorted(await asyncio.wait_for(waiting, 8)) == [b"m2", b"m3"]
