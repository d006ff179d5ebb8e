"""The gRPC endpoint's ReceiveMessage on a master pops in-process (broker/pop/receive.py, the code
POP_MESSAGE's processor calls: no loopback connection to its own remoting port), long polling
included; on a slave it sends POP_MESSAGE to the master over the network (broker/grpc/consume.py).

Two brokers run in this event loop, each with a real gRPC port: ``a``, a lone master, and ``b``,
a lone broker told it is a slave of ``a`` (its role swapped as the controllers would).
"""

from __future__ import annotations

import asyncio

from broker.broker import Broker
from broker.grpc.consume import ConsumeService
from protocol.rocketmq_v2 import definition_pb2 as pb
from tests.broker.support import grpc_master_and_slave, grpc_receive, grpc_send
from tests.support.wait import wait_until_async

TOPIC = "ReceiveInProcess"
GROUP = "ReceiveInProcessGroup"
QUEUES = 2

a, b = grpc_master_and_slave(TOPIC, QUEUES)


def _consume(broker: Broker) -> ConsumeService:
    assert broker.grpc is not None
    return broker.grpc.service.consume


async def _receive(broker: Broker, poll_s: int) -> tuple[int, list[pb.Message]]:
    return await grpc_receive(broker, GROUP, TOPIC, "TagA", poll_s)


async def test_a_master_receives_in_process_without_a_loopback_connection(a: Broker) -> None:
    await grpc_send(a, TOPIC, b"m1", b"m2", tag="TagA")
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
    await grpc_send(a, TOPIC, b"m3", tag="TagA")
    code, late = await waiting
    assert code == pb.OK and [m.body for m in late] == [b"m3"]
    # The loopback path connected to the broker's own remoting port for its POP_MESSAGE.
    assert a.ctx.open_connections == 0
    assert _consume(a).in_process == 3


async def test_a_slave_pops_at_its_master_over_the_network(a: Broker, b: Broker) -> None:
    await grpc_send(a, TOPIC, b"s1", tag="TagA")
    code, got = await _receive(b, 1)
    assert code == pb.OK and [m.body for m in got] == [b"s1"]
    assert _consume(b).in_process == 0
    assert a.ctx.open_connections == 1  # b's connection to its master
