"""The gRPC endpoint's SendMessage on a master calls the send service in-process (no loopback
connection to its own remoting port); on a slave it forwards to the master over the network; and
the messages of one SendMessage are stored as one batch, all or nothing (broker/grpc/produce.py,
broker/grpc/here.py).

Two brokers run in this event loop, each with a real gRPC port: ``a``, a lone master, and ``b``,
a lone broker told it is a slave of ``a`` (its role swapped as the controllers would), so its
endpoint must forward what it is sent to ``a``'s remoting port.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable

import grpc
from google.protobuf.duration_pb2 import Duration

from broker.broker import Broker
from broker.grpc.produce import Publisher
from protocol.rocketmq_v2 import definition_pb2 as pb
from protocol.rocketmq_v2 import service_pb2 as rpc
from protocol.rocketmq_v2.service_pb2_grpc import MessagingServiceStub
from protocol.topic_attrs import TopicAttrs
from tests.broker.support import grpc_master_and_slave

TOPIC = "InProcess"
QUEUES = 4

a, b = grpc_master_and_slave(TOPIC, QUEUES)


def _message(i: int, topic: str = TOPIC, **user: str) -> pb.Message:
    m = pb.Message(topic=pb.Resource(name=topic), body=f"body-{i}".encode())
    m.system_properties.message_id = f"id-{i}"
    m.user_properties.update(user)
    return m


async def _send(broker: Broker, *messages: pb.Message) -> rpc.SendMessageResponse:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{broker.grpc_port}") as channel:
        stub = MessagingServiceStub(channel)  # type: ignore[no-untyped-call]
        answer: rpc.SendMessageResponse = await stub.SendMessage(
            rpc.SendMessageRequest(messages=list(messages)), timeout=10
        )
        return answer


def _publisher(broker: Broker) -> Publisher:
    assert broker.grpc is not None
    return broker.grpc.service.publisher


def _stored(broker: Broker) -> dict[int, int]:
    """Queue id -> how many messages of TOPIC it holds."""
    store = broker.ctx.store
    counts = {q: store.queue_max_offset(TOPIC, q) for q in range(QUEUES)}
    return {q: n for q, n in counts.items() if n}


async def test_a_master_sends_in_process_without_a_loopback_connection(a: Broker) -> None:
    answer = await _send(a, _message(1))
    assert answer.status.code == pb.OK, answer
    assert [e.message_id for e in answer.entries] == ["id-1"]
    assert sum(_stored(a).values()) == 1
    # The loopback path connected to the broker's own remoting port for its SEND_MESSAGE.
    assert a.ctx.open_connections == 0
    publisher = _publisher(a)
    assert (publisher.in_process, publisher.forwarded) == (1, 0)


async def test_a_slave_forwards_to_its_master_over_the_network(a: Broker, b: Broker) -> None:
    answer = await _send(b, _message(1))
    assert answer.status.code == pb.OK, answer
    batch = await _send(b, _message(2), _message(3))
    assert batch.status.code == pb.OK, batch
    assert _stored(b) == {}
    stored = _stored(a)
    assert sum(stored.values()) == 3
    # The two of one SendMessage went as one SEND_BATCH_MESSAGE: one queue, one after the other.
    assert [e.offset for e in batch.entries] == [
        batch.entries[0].offset,
        batch.entries[0].offset + 1,
    ]
    publisher = _publisher(b)
    assert (publisher.in_process, publisher.forwarded) == (0, 2)
    assert a.ctx.open_connections == 1  # b's connection to its master


async def test_the_messages_of_one_send_are_one_batch_in_one_queue(a: Broker) -> None:
    answer = await _send(a, *(_message(i) for i in range(3)))
    assert answer.status.code == pb.OK, answer
    assert [e.status.code for e in answer.entries] == [pb.OK] * 3
    assert [e.message_id for e in answer.entries] == ["id-0", "id-1", "id-2"]
    # One message at a time, the broker's pick would have spread them over three queues.
    assert [e.offset for e in answer.entries] == [0, 1, 2]
    assert list(_stored(a).values()) == [3]


async def test_one_bad_message_refuses_the_whole_send_and_stores_nothing(a: Broker) -> None:
    bad = _message(1, UNIQ_KEY="mine")  # a property the broker sets itself
    answer = await _send(a, _message(0), bad, _message(2))
    assert answer.status.code == pb.ILLEGAL_MESSAGE_PROPERTY_KEY, answer
    assert [e.status.code for e in answer.entries] == [pb.ILLEGAL_MESSAGE_PROPERTY_KEY] * 3
    assert [e.message_id for e in answer.entries] == ["id-0", "id-1", "id-2"]
    # Messages for two topics cannot be one batch either.
    mixed = await _send(a, _message(0), _message(1, topic="Elsewhere"))
    assert mixed.status.code == pb.BAD_REQUEST, mixed
    assert "one batch" in mixed.status.message
    # Nor can transactional messages (each is a half message of its own): the send service's
    # refusal, answered for every entry.
    tx = [_message(i) for i in range(2)]
    for m in tx:
        m.system_properties.message_type = pb.TRANSACTION
    refused = await _send(a, *tx)
    assert refused.status.code == pb.BAD_REQUEST, refused
    assert "sent alone" in refused.status.message
    assert _stored(a) == {}


async def test_a_read_only_topic_refuses_sends_in_process_and_forwarded(
    a: Broker, b: Broker
) -> None:
    """A topic without write permission (updateTopic -p 4): the send service's NO_PERMISSION is
    the official clients' FORBIDDEN, on the master and through a slave alike; nothing stored."""
    a.ctx.create_topic("ReadOnly", 1, TopicAttrs(4))
    for broker in (a, b):
        answer = await _send(broker, _message(1, topic="ReadOnly"))
        assert answer.status.code == pb.FORBIDDEN, answer
        assert "the topic[ReadOnly] sending message is forbidden" in answer.status.message
    assert a.ctx.store.queue_max_offset("ReadOnly", 0) == 0


async def test_a_master_ends_transactions_and_recalls_in_process(a: Broker) -> None:
    half = _message(1)
    half.system_properties.message_type = pb.TRANSACTION
    later = _message(2)
    later.system_properties.delivery_timestamp.seconds = int(time.time()) + 3600
    async with grpc.aio.insecure_channel(f"127.0.0.1:{a.grpc_port}") as channel:
        stub = MessagingServiceStub(channel)  # type: ignore[no-untyped-call]
        sent = await stub.SendMessage(rpc.SendMessageRequest(messages=[half]), timeout=10)
        assert sent.status.code == pb.OK, sent

        def end(resolution: pb.TransactionResolution) -> Awaitable[rpc.EndTransactionResponse]:
            request = rpc.EndTransactionRequest(
                topic=pb.Resource(name=TOPIC),
                message_id="id-1",
                transaction_id=sent.entries[0].transaction_id,
                resolution=resolution,
            )
            return stub.EndTransaction(request, timeout=10)  # type: ignore[no-any-return]

        ended = await end(pb.COMMIT)
        assert ended.status.code == pb.OK, ended
        # Again, the other way: the in-process path refuses as END_TRANSACTION does.
        again = await end(pb.ROLLBACK)
        assert again.status.code == pb.BAD_REQUEST, again
        assert "committed already" in again.status.message
        scheduled = await stub.SendMessage(rpc.SendMessageRequest(messages=[later]), timeout=10)
        assert scheduled.status.code == pb.OK, scheduled
        handle = scheduled.entries[0].recall_handle
        assert handle
        recall = rpc.RecallMessageRequest(topic=pb.Resource(name=TOPIC), recall_handle=handle)
        recalled = await stub.RecallMessage(recall, timeout=10)
        assert recalled.status.code == pb.OK, recalled
        twice = await stub.RecallMessage(recall, timeout=10)
        assert twice.status.code == pb.NOT_FOUND, twice
    assert sum(_stored(a).values()) == 1  # the committed message
    assert a.ctx.open_connections == 0


async def test_a_master_acks_and_changes_invisible_time_in_process(a: Broker) -> None:
    sent = await _send(a, _message(0), _message(1))
    assert sent.status.code == pb.OK, sent
    pop, group = a.ctx.pop, "InProcessGroup"
    candidates = pop.candidates(group, TOPIC, -1, QUEUES)
    got, _ = pop.pop(group, candidates, 2, 60_000, a.ctx.now_ms())
    assert len(got) == 2
    resource = pb.Resource(name=group)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{a.grpc_port}") as channel:
        stub = MessagingServiceStub(channel)  # type: ignore[no-untyped-call]
        changed = await stub.ChangeInvisibleDuration(
            rpc.ChangeInvisibleDurationRequest(
                group=resource,
                topic=pb.Resource(name=TOPIC),
                receipt_handle=got[1].handle,
                invisible_duration=Duration(seconds=30),
                message_id="id-1",
            ),
            timeout=10,
        )
        assert changed.status.code == pb.OK, changed
        acked = await stub.AckMessage(
            rpc.AckMessageRequest(
                group=resource,
                topic=pb.Resource(name=TOPIC),
                entries=[
                    rpc.AckMessageEntry(message_id="id-0", receipt_handle=got[0].handle),
                    # the old handle of the changed delivery: no longer in flight
                    rpc.AckMessageEntry(message_id="id-1", receipt_handle=got[1].handle),
                    rpc.AckMessageEntry(message_id="id-1", receipt_handle=changed.receipt_handle),
                ],
            ),
            timeout=10,
        )
        assert [e.status.code for e in acked.entries] == [
            pb.OK,
            pb.INVALID_RECEIPT_HANDLE,
            pb.OK,
        ], acked
    assert a.ctx.open_connections == 0
    assert a.grpc is not None and a.grpc.service.consume.in_process == 2
