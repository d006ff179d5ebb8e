"""An offset reset reaches the official gRPC clients through their POP state (they consume by
ReceiveMessage, which POPs): after INVOKE_BROKER_TO_RESET_OFFSET the group's next
ReceiveMessage reads from the reset offset, and one long-polling at the queues' end when the
reset lands answers at once with the messages from there (docs/operations.md, "Resetting
offsets"). A master with a real gRPC port runs in this event loop."""

from __future__ import annotations

import asyncio

import grpc
from google.protobuf.duration_pb2 import Duration

from broker.broker import Broker
from protocol.broker_requests.offsets import OffsetsReset, ResetOffset
from protocol.rocketmq_v2 import definition_pb2 as pb
from protocol.rocketmq_v2 import service_pb2 as rpc
from protocol.rocketmq_v2.service_pb2_grpc import MessagingServiceStub
from remoting.client import RemotingClient
from tests.broker.support import grpc_master_and_slave
from tests.support.wait import wait_until_async

TOPIC = "ResetOverGrpc"
GROUP = "ResetOverGrpcGroup"

a, b = grpc_master_and_slave(TOPIC, 1)


async def _send(broker: Broker, *bodies: bytes) -> None:
    messages = []
    for body in bodies:
        m = pb.Message(topic=pb.Resource(name=TOPIC), body=body)
        m.system_properties.message_id = f"id-{body.decode()}"
        messages.append(m)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{broker.grpc_port}") as channel:
        stub = MessagingServiceStub(channel)  # type: ignore[no-untyped-call]
        sent = await stub.SendMessage(rpc.SendMessageRequest(messages=messages), timeout=10)
        assert sent.status.code == pb.OK, sent


async def _receive(broker: Broker, poll_s: int) -> list[bytes]:
    request = rpc.ReceiveMessageRequest(
        group=pb.Resource(name=GROUP),
        message_queue=pb.MessageQueue(topic=pb.Resource(name=TOPIC)),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
        batch_size=16,
        invisible_duration=Duration(seconds=30),
        long_polling_timeout=Duration(seconds=poll_s),
    )
    got: list[bytes] = []
    async with grpc.aio.insecure_channel(f"127.0.0.1:{broker.grpc_port}") as channel:
        stub = MessagingServiceStub(channel)  # type: ignore[no-untyped-call]
        async for answer in stub.ReceiveMessage(request, timeout=poll_s + 10):
            if answer.HasField("message"):
                got.append(answer.message.body)
    return got


async def _reset(broker: Broker, offset: int) -> OffsetsReset:
    conn = await RemotingClient.connect(broker.cfg.listen, timeout=2.0)
    try:
        ask = ResetOffset(topic=TOPIC, group=GROUP, queue_id=0, offset=offset)
        frame = await conn.call(ask.code, *ask.encode(), 5)
        return OffsetsReset.parse(frame.header, frame.body)
    finally:
        conn.close()


async def test_a_grpc_consumer_receives_from_the_reset_offset(a: Broker) -> None:
    await _send(a, b"m0", b"m1", b"m2", b"m3")
    assert sorted(await _receive(a, 1)) == [b"m0", b"m1", b"m2", b"m3"]
    assert (await _reset(a, 1)).queues[0].outcome == "reset"
    assert sorted(await _receive(a, 1)) == [b"m1", b"m2", b"m3"]

    # A ReceiveMessage long-polling at the end is answered at once when the reset lands.
    waiting = asyncio.ensure_future(_receive(a, 15))
    await wait_until_async(lambda: a.ctx.waiters.waiting > 0, "the receive to park", 10)
    await _reset(a, 2)
    # Well before its 15 s long poll ends.
    assert sorted(await asyncio.wait_for(waiting, 8)) == [b"m2", b"m3"]
