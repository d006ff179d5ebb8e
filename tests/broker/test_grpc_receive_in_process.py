"""The gRPC endpoint's ReceiveMessage on a master pops in-process (broker/pop/receive.py, the code
POP_MESSAGE's processor calls: no loopback connection to its own remoting port), long polling
included; on a slave it sends POP_MESSAGE to the master over the network (broker/grpc/consume.py).

Two brokers run in this event loop, each with a real gRPC port: ``a``, a lone master, and ``b``,
a lone broker told it is a slave of ``a`` (its role swapped as the controllers would).
"""

from __future__ import annotations

import asyncio

import grpc
from google.protobuf.duration_pb2 import Duration

from broker.broker import Broker
from broker.grpc.consume import ConsumeService
from protocol.rocketmq_v2 import definition_pb2 as pb
from protocol.rocketmq_v2 import service_pb2 as rpc
from protocol.rocketmq_v2.service_pb2_grpc import MessagingServiceStub
from tests.broker.support import grpc_master_and_slave
from tests.support.wait import wait_until_async

TOPIC = "ReceiveInProcess"
GROUP = "ReceiveInProcessGroup"
QUEUES = 2

a, b = grpc_master_and_slave(TOPIC, QUEUES)


def _consume(broker: Broker) -> ConsumeService:
    assert broker.grpc is not None
    return broker.grpc.service.consume


async def _send(broker: Broker, *bodies: bytes) -> None:
    messages = []
    for i, body in enumerate(bodies):
        m = pb.Message(topic=pb.Resource(name=TOPIC), body=body)
        m.system_properties.message_id = f"id-{body.decode()}-{i}"
        m.system_properties.tag = "TagA"
        messages.append(m)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{broker.grpc_port}") as channel:
        stub = MessagingServiceStub(channel)  # type: ignore[no-untyped-call]
        sent = await stub.SendMessage(rpc.SendMessageRequest(messages=messages), timeout=10)
        assert sent.status.code == pb.OK, sent


async def _receive(broker: Broker, poll_s: int) -> tuple[int, list[pb.Message]]:
    """One ReceiveMessage: its status code and the messages."""
    request = rpc.ReceiveMessageRequest(
        group=pb.Resource(name=GROUP),
        message_queue=pb.MessageQueue(topic=pb.Resource(name=TOPIC)),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="TagA"),
        batch_size=16,
        invisible_duration=Duration(seconds=30),
        long_polling_timeout=Duration(seconds=poll_s),
    )
    code = -1
    got: list[pb.Message] = []
    async with grpc.aio.insecure_channel(f"127.0.0.1:{broker.grpc_port}") as channel:
        stub = MessagingServiceStub(channel)  # type: ignore[no-untyped-call]
        async for answer in stub.ReceiveMessage(request, timeout=poll_s + 10):
            if answer.HasField("status"):
                code = answer.status.code
            elif answer.HasField("message"):
                got.append(answer.message)
    return code, got


async def test_a_master_receives_in_process_without_a_loopback_connection(a: Broker) -> None:
    await _send(a, b"m1", b"m2")
    code, got = await _receive(a, 1)
    assert code == pb.OK
    assert sorted(m.body for m in got) == [b"m1", b"m2"]
    assert all(m.system_properties.delivery_attempt == 1 for m in got)
    # Nothing more: MESSAGE_NOT_FOUND once the long poll ends.
    assert (await _receive(a, 1))[0] == pb.MESSAGE_NOT_FOUND
    # A long poll woken by a send.
    waiting = asyncio.ensure_future(_receive(a, 8))

    async def parked() -> bool:
        return a.ctx.waiters.waiting == 1

    await wait_until_async(parked, "the receive to long-poll", 5)
    await _send(a, b"m3")
    code, late = await waiting
    assert code == pb.OK and [m.body for m in late] == [b"m3"]
    # The loopback path connected to the broker's own remoting port for its POP_MESSAGE.
    assert a.ctx.open_connections == 0
    assert _consume(a).in_process == 3


async def test_a_slave_pops_at_its_master_over_the_network(a: Broker, b: Broker) -> None:
    await _send(a, b"s1")
    code, got = await _receive(b, 1)
    assert code == pb.OK and [m.body for m in got] == [b"s1"]
    assert _consume(b).in_process == 0
    assert a.ctx.open_connections == 1  # b's connection to its master
