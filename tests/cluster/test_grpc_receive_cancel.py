"""A ReceiveMessage whose client cancels after the POP came back but before the answer was
written: the message goes back to the group at once (docs/protocol.md, "POP consumption over
gRPC"), as it does when the cancel comes during the long poll
(tests/cluster/test_grpc_official_consumer.py).

The interleaving is forced: the endpoint runs in this process (the real MessagingService on a
real grpcio server, its requests going to a broker process), and its ReceiveMessage answer is
held, once the service has its status, until the client's cancel reaches the call, as a write to
a client that cancelled meanwhile is. Before the fix the service's answer stayed suspended at a
yield for good, and the message stayed hidden for the receive's 60 s."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from broker.grpc.service import GrpcEndpoint, MessagingService
from client.admin import Admin
from client.producer import Producer
from client.simple_consumer import SimpleConsumer
from protocol.rocketmq_v2 import service_pb2 as rpc
from protocol.rocketmq_v2.service_pb2_grpc import MessagingServiceStub
from tests.cluster.support import long_polling_receive, receive_some
from tests.support.procs import BrokerProc, module_broker
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.multiprocess

TOPIC = "GrpcCancel"
GROUP = "grpc-cancel-late"


class _AnswerHeld(MessagingService):
    """The real service, but the first ReceiveMessage answer is held before its first write
    until the call is cancelled (grpc then cancels the call's task, as it does during a write
    to a client that has gone)."""

    def __init__(self, address: str) -> None:
        super().__init__(address, [address], 4 << 20, "broker-a")
        self.answering = asyncio.Event()

    async def ReceiveMessage(
        self, request: rpc.ReceiveMessageRequest, context: Any
    ) -> AsyncIterator[rpc.ReceiveMessageResponse]:
        async for response in super().ReceiveMessage(request, context):
            if not self.answering.is_set():
                self.answering.set()
                await asyncio.get_running_loop().create_future()  # until the call is cancelled
            yield response


broker = module_broker("grpc-cancel")


async def test_a_receive_cancelled_after_its_pop_came_back_hands_the_message_back(
    broker: BrokerProc,
) -> None:
    async with Admin(broker.address) as admin:
        await admin.create_topic(TOPIC, 2)
    service = _AnswerHeld(broker.address)
    endpoint = GrpcEndpoint(service)
    await endpoint.start(("127.0.0.1", 0))
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{endpoint.port}") as channel:
            stub = MessagingServiceStub(channel)
            call = await long_polling_receive(stub, broker.address, GROUP, TOPIC, "TagL")
            async with Producer(broker.address) as producer:
                sent = await producer.send(TOPIC, b"late-cancel-1", tags="TagL")
            await wait_until_async(
                service.answering.is_set, "the POP to come back with the message", 10
            )
            call.cancel()
            assert await call.code() == grpc.StatusCode.CANCELLED

        async with SimpleConsumer(broker.address, GROUP, TOPIC, filter="TagL") as sdk:
            # Hidden 1 s when handed back; for the receive's 60 s when not.
            got = await receive_some(sdk, "the message the cancelled receive popped")
            assert [(m.origin_msg_id, m.body, m.attempt) for m in got] == [
                (sent.msg_id, b"late-cancel-1", 2)
            ]
            await sdk.ack(got[0])
    finally:
        await endpoint.stop()
