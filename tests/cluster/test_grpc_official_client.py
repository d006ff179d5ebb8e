"""The official RocketMQ 5 Python client (rocketmq-python-client, from PyPI) publishes through a
broker's gRPC endpoint; our SDK consumer reads what it sent, field by field.

The official client runs in a process of its own: it registers the apache.rocketmq.v2 messages
in protobuf's default pool, as protocol/rocketmq_v2 does in this one. It writes its logs under
HOME, which points at the test's temp dir."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from client.consumer import Consumer
from tests.cluster.support import add_grpc_group, create_once_registered
from tests.support.cluster import Cluster
from tests.support.official_client import run_script
from tests.support.wait import wait_until_async

# rocketmq-python-client is a dev dependency (pyproject): make test installs it, so this runs.
pytestmark = pytest.mark.multiprocess

TOPIC = "GrpcTopic"

_PRODUCE = """
import json, sys
from rocketmq import ClientConfiguration, Credentials, Message, Producer

endpoint, topic = sys.argv[1], sys.argv[2]
producer = Producer(ClientConfiguration(endpoint, Credentials(), request_timeout=10), (topic,))
producer.startup()
sent = []
try:
    for i in range(3):
        m = Message()
        m.topic = topic
        m.body = f"official-{i}".encode()
        m.tag = f"Tag{i % 2}"
        m.keys = f"key-{i}"  # the setter adds one key to the message's set
        m.keys = f"other-{i}"
        m.add_property("color", f"c{i}")
        receipt = producer.send(m)
        sent.append({"id": receipt.message_id, "offset": receipt.offset})
finally:
    producer.shutdown()
print(json.dumps(sent))
"""


async def test_official_producer_sends_and_our_consumer_reads_every_field(
    cluster: Cluster, tmp_path: Path
) -> None:
    (grpc_port,) = add_grpc_group(cluster, 1)
    await create_once_registered(cluster, TOPIC, 2, "the topic to be created on a master")

    last = run_script(_PRODUCE, tmp_path, f"127.0.0.1:{grpc_port}", TOPIC, logs=cluster.logs)
    sent = json.loads(last)
    assert len(sent) == 3 and len({s["id"] for s in sent}) == 3

    got = []
    async with Consumer(cluster.controller_addresses, "grpc-readers", TOPIC) as consumer:

        async def all_read() -> bool:
            got.extend(await consumer.receive(timeout=0.5))
            return len(got) >= 3

        await wait_until_async(all_read, "our consumer to read the 3 messages", 30)
    by_id = {m.properties["UNIQ_KEY"]: m for m in got}
    assert sorted(by_id) == sorted(s["id"] for s in sent)
    for s in sent:
        m = by_id[s["id"]]
        i = int(m.body.decode().rsplit("-", 1)[1])
        assert m.body == f"official-{i}".encode()
        assert m.tags == f"Tag{i % 2}"
        assert sorted(m.keys.split()) == [f"key-{i}", f"other-{i}"]
        assert m.properties["color"] == f"c{i}"
        assert m.queue_offset == s["offset"]

    # Bad input gets a status with a clear message, and the endpoint keeps serving.
    await _bad_input_is_answered(f"127.0.0.1:{grpc_port}")


async def _bad_input_is_answered(endpoint: str) -> None:
    import grpc

    from protocol.rocketmq_v2 import definition_pb2 as pb
    from protocol.rocketmq_v2 import service_pb2 as rpc
    from protocol.rocketmq_v2.service_pb2_grpc import MessagingServiceStub

    async with grpc.aio.insecure_channel(endpoint) as channel:
        stub = MessagingServiceStub(channel)
        route = await stub.QueryRoute(
            rpc.QueryRouteRequest(topic=pb.Resource(name="NoSuchTopic")), timeout=10
        )
        assert route.status.code == pb.TOPIC_NOT_FOUND, route
        forged = pb.Message(topic=pb.Resource(name=TOPIC), body=b"x")
        forged.system_properties.message_id = "forged-1"
        forged.user_properties["UNIQ_KEY"] = "other"
        sent = await stub.SendMessage(rpc.SendMessageRequest(messages=[forged]), timeout=10)
        assert sent.status.code == pb.ILLEGAL_MESSAGE_PROPERTY_KEY, sent
        assert "UNIQ_KEY" in sent.entries[0].status.message
        # A method of the published .proto the broker does not serve (GetOffset is served
        # since issue 28; test_grpc_permissions asserts this one has no rule).
        with pytest.raises(grpc.aio.AioRpcError) as unserved:
            await stub.SyncLiteSubscription(rpc.SyncLiteSubscriptionRequest(), timeout=10)
        assert unserved.value.code() == grpc.StatusCode.UNIMPLEMENTED
        # Bytes that are not a protobuf message: INTERNAL from grpcio, the broker stays up.
        garbage = channel.unary_unary("/apache.rocketmq.v2.MessagingService/SendMessage")
        with pytest.raises(grpc.aio.AioRpcError):
            await garbage(b"\xff\xff\xff", timeout=10)
        route = await stub.QueryRoute(
            rpc.QueryRouteRequest(topic=pb.Resource(name=TOPIC)), timeout=10
        )
        assert route.status.code == pb.OK
        assert {
            (q.broker.id, q.broker.endpoints.addresses[0].port) for q in route.message_queues
        } == {(0, int(endpoint.rpartition(":")[2]))}
