"""The official RocketMQ 5 Python client (rocketmq-python-client, from PyPI) consumes through a
broker's gRPC endpoint (docs/protocol.md, "POP consumption over gRPC"): its SimpleConsumer with
a tag filter reads what our SDK sent, field by field, acks, changes an invisible duration and
sees attempt 2; its PushConsumer consumes everything (a failed message comes back after the
group's retry delay) and acks it all; bad input is answered with a status and the broker keeps
serving; the endpoint renews a push consumer's deliveries while it holds them.

The official client runs in a process of its own with HOME in the test's temp dir (it writes
its logs there). One broker (standalone, gRPC on) serves the module; the cancelled receive's
test, which counts the broker's long polls, has one of its own."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from broker.grpc import consumers, delivery
from broker.grpc.consume import ConsumeService
from client.admin import Admin
from client.producer import Producer
from client.progress import Member, ProgressAdmin
from client.simple_consumer import SimpleConsumer
from protocol.broker_requests.clients import ConsumerList, ConsumerListQuery
from protocol.rocketmq_v2 import definition_pb2 as pb
from protocol.rocketmq_v2 import service_pb2 as rpc
from protocol.rocketmq_v2.service_pb2_grpc import MessagingServiceStub
from remoting.client import ConnectionPool
from tests.cluster.support import long_polling_receive, receive_some
from tests.support.official_client import pop_inflight, run_to_end
from tests.support.procs import BrokerProc, GrpcBrokerProc, module_broker, started
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.multiprocess

TOPIC = "GrpcConsume"

_SIMPLE = """
import json, sys, time
from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer

endpoint, topic, group, want = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
consumer = SimpleConsumer(
    ClientConfiguration(endpoint, Credentials(), request_timeout=10),
    group,
    {topic: FilterExpression("TagA || TagC")},
    await_duration=2,
)
consumer.startup()

def fields(m):
    return {
        "topic": m.topic, "body": m.body.decode(), "tag": m.tag, "keys": sorted(m.keys),
        "properties": dict(m.properties), "message_id": m.message_id,
        "message_group": m.message_group, "born_timestamp": m.born_timestamp,
        "born_host": m.born_host, "attempt": m.delivery_attempt, "type": m.message_type,
        "corrupted": m.corrupted, "transported": m.transport_delivery_timestamp is not None,
        "delivery_timestamp": m.delivery_timestamp,
    }

out = {}
try:
    got = {}
    deadline = time.time() + 60
    while len(got) < want and time.time() < deadline:
        for m in consumer.receive(16, 20):
            got[m.message_id] = m
    out["first"] = [fields(m) for m in got.values()]
    retry_id = sorted(got, key=lambda i: got[i].body)[0]
    for i, m in got.items():
        if i != retry_id:
            consumer.ack(m)
    consumer.change_invisible_duration(got[retry_id], 1)
    again, others = None, []
    while again is None and time.time() < deadline:
        for m in consumer.receive(16, 20):
            if m.message_id == retry_id:
                again = m
            else:
                others.append(fields(m))
    out["again"] = fields(again) if again else None
    out["others"] = others
    consumer.ack(again)
    try:
        consumer.ack(got[retry_id])  # the handle the change gave: no longer in flight
        out["stale_ack"] = "accepted"
    except Exception as e:
        out["stale_ack"] = f"{type(e).__name__}: {e}"
    out["left"] = [fields(m) for m in consumer.receive(16, 20)]
finally:
    consumer.shutdown()
print(json.dumps(out))
"""

_PUSH = """
import json, sys, threading, time
from rocketmq import (ClientConfiguration, ConsumeResult, Credentials, FilterExpression,
                      MessageListener, PushConsumer)

endpoint, topic, group, want, tag, fail = sys.argv[1:4] + [int(sys.argv[4])] + sys.argv[5:7]
lock = threading.Lock()
seen, done, failed = [], set(), set()

class Listener(MessageListener):
    def consume(self, m):
        body = m.body.decode()
        with lock:
            seen.append({"body": body, "attempt": m.delivery_attempt, "id": m.message_id,
                         "group": m.message_group})
            # fail: that body fails once; "!" + body: it fails every time
            if body == fail.lstrip("!") and (fail.startswith("!") or body not in failed):
                failed.add(body)
                return ConsumeResult.FAILURE
            done.add(body)
        return ConsumeResult.SUCCESS

consumer = PushConsumer(
    ClientConfiguration(endpoint, Credentials(), request_timeout=10),
    group,
    Listener(),
    {topic: FilterExpression(tag)},
)
consumer.startup()
try:
    deadline = time.time() + 60
    while time.time() < deadline:
        with lock:
            if len(done) >= want:
                break
        time.sleep(0.1)
    time.sleep(0.5)  # the last acks leave from the consumption threads
finally:
    consumer.shutdown()
print(json.dumps({"seen": seen, "done": sorted(done), "fifo": consumer.fifo}))
"""


broker = module_broker("grpc-consume", GrpcBrokerProc)


@pytest.fixture
async def endpoint(broker: GrpcBrokerProc) -> AsyncIterator[str]:
    async with Admin(broker.address) as admin:
        await admin.create_topic(TOPIC, 2)
    yield f"127.0.0.1:{broker.grpc_port}"


async def _official(script: str, tmp_path: Path, *args: str) -> dict[str, Any]:
    return await run_to_end([sys.executable, "-c", script, *args], tmp_path)


async def test_simple_consumer_reads_our_messages_with_a_tag_filter_acks_and_retries(
    broker: BrokerProc, endpoint: str, tmp_path: Path
) -> None:
    before = int(time.time() * 1000)
    sent = {}
    async with Producer(broker.address) as producer:
        for i, tag in enumerate(["TagA", "TagB", "TagC", "TagA"]):
            result = await producer.send(
                TOPIC,
                f"simple-{i}".encode(),
                keys=f"k{i} other{i}",
                tags=tag,
                properties={"color": f"c{i}", "size": "L"},
                message_group="order-7" if i == 3 else None,
            )
            sent[result.msg_id] = (i, tag, result)
    after = int(time.time() * 1000)

    out = await _official(_SIMPLE, tmp_path, endpoint, TOPIC, "grpc-simple", "3")

    first = {m["message_id"]: m for m in out["first"]}
    expected = {mid for mid, (_, tag, _) in sent.items() if tag != "TagB"}
    assert set(first) == expected, out  # TagB was filtered out
    for mid, m in first.items():
        i, tag, result = sent[mid]
        assert m["topic"] == TOPIC
        assert m["body"] == f"simple-{i}"
        assert m["tag"] == tag
        assert m["keys"] == sorted([f"k{i}", f"other{i}"])
        assert m["properties"] == {"color": f"c{i}", "size": "L"}  # none of the broker's own
        assert m["message_group"] == ("order-7" if i == 3 else None)
        assert m["type"] == (pb.FIFO if i == 3 else pb.NORMAL)
        assert before <= m["born_timestamp"] <= after
        assert m["born_host"]
        assert m["attempt"] == 1
        assert m["corrupted"] is False  # the CRC32 digest matched the body
        assert m["transported"] is True
    again = out["again"]
    assert again is not None, out
    assert again["body"] == "simple-0" and again["attempt"] == 2
    assert again["properties"] == {"color": "c0", "size": "L"}  # no retry bookkeeping shows
    assert again["topic"] == TOPIC
    assert out["others"] == [] and out["left"] == []
    assert "INVALID_RECEIPT_HANDLE" in out["stale_ack"] or "40013" in out["stale_ack"], out


async def test_push_consumer_consumes_everything_and_a_failure_comes_back(
    broker: BrokerProc, endpoint: str, tmp_path: Path
) -> None:
    group = "grpc-push"
    async with Admin(broker.address) as admin:
        await admin.update_sub_group({"groupName": group, "retryDelays": "1s", "retryMaxTimes": 3})
    async with Producer(broker.address) as producer:
        bodies = [f"push-{i}" for i in range(12)]
        for body in bodies:
            await producer.send(TOPIC, body.encode(), tags="TagP")

    out = await _official(_PUSH, tmp_path, endpoint, TOPIC, group, "12", "TagP", "push-3")

    assert out["done"] == sorted(bodies), out
    assert out["fifo"] is False
    attempts = [s["attempt"] for s in out["seen"] if s["body"] == "push-3"]
    assert attempts == [1, 2], out  # nacked once (hidden for the group's 1 s), then acked
    ids = {s["id"] for s in out["seen"] if s["body"] == "push-3"}
    assert len(ids) == 1  # the same message id on both attempts

    async def nothing_in_flight() -> bool:
        return await pop_inflight(broker.address, group) == 0

    await wait_until_async(nothing_in_flight, "every push delivery to be acked", 20)


async def test_a_push_consumer_is_a_pop_member_of_its_group(
    broker: BrokerProc, endpoint: str, tmp_path: Path
) -> None:
    """The official PushConsumer receives by POP: consumerConnection's answer says so (consume
    type pop, so rmqctl computes no queues for it), and the rebalancing members' list leaves
    it out."""
    group = "grpc-push-member"
    task = asyncio.create_task(
        _official(_PUSH, tmp_path, endpoint, TOPIC, group, "1", "TagM", "none")
    )
    try:
        async with ProgressAdmin(broker.address) as admin:

            async def listed() -> list[Member]:
                return (await admin.members(group))[0]

            (member,) = await wait_until_async(
                listed, "the push consumer a member of its group", 30, interval=0.2
            )
        assert (member.protocol, member.consume_type) == ("gRPC", "pop"), member
        pool = ConnectionPool()
        try:
            conn = await pool.get(broker.address)
            ask = ConsumerListQuery(group=group)
            answer = await conn.call(ask.code, ask.encode()[0], None, 5)
            assert ConsumerList.parse(answer.header, answer.body).client_ids == ()
        finally:
            pool.close()
        async with Producer(broker.address) as producer:
            await producer.send(TOPIC, b"member-1", tags="TagM")
        out = await task
        assert out["done"] == ["member-1"], out
    finally:
        task.cancel()  # the official client's process is killed by its PID if still running
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_fifo_push_consumer_takes_each_message_group_in_send_order(
    broker: BrokerProc, endpoint: str, tmp_path: Path
) -> None:
    """A group with consumeMessageOrderly is FIFO for the official client (Telemetry's flag) and
    the broker's orderly POP hands a message group's next message only after the ack. A message
    that keeps failing is retried in place by the client (the group's retryMaxTimes + 1
    attempts, its retry delay apart), then forwarded to the DLQ, and its group goes on."""
    group = "grpc-fifo"
    async with Admin(broker.address) as admin:
        await admin.update_sub_group(
            {
                "groupName": group,
                "consumeMessageOrderly": True,
                "retryMaxTimes": 1,
                "retryDelays": "1s",
            }
        )
    sent = {}
    async with Producer(broker.address) as producer:
        for i in range(5):
            for g in ("g1", "g2"):
                body = f"{g}-{i}"
                result = await producer.send(TOPIC, body.encode(), tags="TagF", message_group=g)
                sent[body] = result.msg_id

    out = await _official(_PUSH, tmp_path, endpoint, TOPIC, group, "9", "TagF", "!g1-2")

    assert out["fifo"] is True, out
    for g in ("g1", "g2"):
        bodies = [s["body"] for s in out["seen"] if s["group"] == g]
        expected = [f"{g}-{i}" for i in range(5)]
        if g == "g1":  # tried twice in place, then forwarded; g1-3 only after that
            expected = ["g1-0", "g1-1", "g1-2", "g1-2", "g1-3", "g1-4"]
        assert bodies == expected, out
    async with Admin(broker.address) as admin:
        dlq = (await admin.query_dlq(group))["broker-a"]
    assert [(m["originTopic"], m["originMsgId"]) for m in dlq] == [(TOPIC, sent["g1-2"])]

    async def nothing_in_flight() -> bool:
        return await pop_inflight(broker.address, group) == 0

    await wait_until_async(nothing_in_flight, "every FIFO delivery to be acked", 20)


async def _receive(
    stub: MessagingServiceStub, group: str, **fields: Any
) -> list[rpc.ReceiveMessageResponse]:
    request = rpc.ReceiveMessageRequest(
        group=pb.Resource(name=group),
        message_queue=pb.MessageQueue(topic=pb.Resource(name=fields.pop("topic", TOPIC))),
        batch_size=fields.pop("batch_size", 16),
        **fields,
    )
    return [r async for r in stub.ReceiveMessage(request, timeout=20)]


def _status_of(answers: list[rpc.ReceiveMessageResponse]) -> pb.Status:
    statuses = [a.status for a in answers if a.HasField("status")]
    assert len(statuses) == 1, answers
    return statuses[0]


async def test_bad_input_gets_a_status_and_forwarding_to_the_dlq(
    broker: BrokerProc, endpoint: str
) -> None:
    group = "grpc-raw"
    async with Producer(broker.address) as producer:
        sent = await producer.send(TOPIC, b"raw-1", tags="TagR")
    invisible = {"seconds": 30}
    tag = pb.FilterExpression(type=pb.TAG, expression="TagR")
    async with grpc.aio.insecure_channel(endpoint) as channel:
        stub = MessagingServiceStub(channel)
        answers = await _receive(
            stub, group, filter_expression=tag, invisible_duration=invisible,
            long_polling_timeout={"seconds": 5},
        )  # fmt: skip
        assert _status_of(answers).code == pb.OK, answers
        (message,) = [a.message for a in answers if a.HasField("message")]
        assert [a for a in answers if a.HasField("delivery_timestamp")], answers
        assert message.system_properties.message_id == sent.msg_id
        handle = message.system_properties.receipt_handle

        def ack(handle: str, group: str = group) -> rpc.AckMessageRequest:
            return rpc.AckMessageRequest(
                group=pb.Resource(name=group),
                topic=pb.Resource(name=TOPIC),
                entries=[rpc.AckMessageEntry(message_id=sent.msg_id, receipt_handle=handle)],
            )

        # A forged handle: one character changed.
        forged = handle[:-3] + ("A" if handle[-3] != "A" else "B") + handle[-2:]
        acked = await stub.AckMessage(ack(forged), timeout=10)
        assert acked.status.code == pb.INVALID_RECEIPT_HANDLE, acked
        assert acked.entries[0].status.code == pb.INVALID_RECEIPT_HANDLE
        assert "signature" in acked.entries[0].status.message
        changed = await stub.ChangeInvisibleDuration(
            rpc.ChangeInvisibleDurationRequest(
                group=pb.Resource(name=group),
                topic=pb.Resource(name=TOPIC),
                receipt_handle=forged,
                invisible_duration={"seconds": 5},
            ),
            timeout=10,
        )
        assert changed.status.code == pb.INVALID_RECEIPT_HANDLE, changed
        # A group the handle is not of, and a name that cannot be a group.
        acked = await stub.AckMessage(ack(handle, "grpc-unknown"), timeout=10)
        assert acked.entries[0].status.code == pb.INVALID_RECEIPT_HANDLE, acked
        assert f"belongs to consumer group {group}" in acked.entries[0].status.message
        acked = await stub.AckMessage(ack(handle, "no such group!"), timeout=10)
        assert acked.status.code == pb.ILLEGAL_CONSUMER_GROUP, acked
        # A topic in a namespace (none is served here), in the request or as the client's
        # configured namespace (its x-mq-namespace header): refused, the handle left alone.
        spaced = ack(handle)
        spaced.topic.resource_namespace = "prod"
        acked = await stub.AckMessage(spaced, timeout=10)
        assert acked.status.code == pb.UNSUPPORTED, acked
        assert "namespace 'prod'" in acked.status.message
        namespaced_client = (("x-mq-namespace", "prod"),)
        acked = await stub.AckMessage(ack(handle), metadata=namespaced_client, timeout=10)
        assert acked.status.code == pb.UNSUPPORTED, acked
        assert "configured with namespace 'prod'" in acked.status.message
        # Malformed receives.
        # SQL92 on this broker, whose enable_property_filter is off (docs/filters.md); and a
        # malformed SQL92 expression, refused before the broker is asked.
        sql = pb.FilterExpression(type=pb.SQL, expression="a > 1")
        status = _status_of(
            await _receive(stub, group, filter_expression=sql, invisible_duration=invisible)
        )
        assert status.code == pb.UNSUPPORTED and "enable_property_filter" in status.message
        bad_sql = pb.FilterExpression(type=pb.SQL, expression="a >")
        status = _status_of(
            await _receive(stub, group, filter_expression=bad_sql, invisible_duration=invisible)
        )
        assert status.code == pb.ILLEGAL_FILTER_EXPRESSION and "position 3" in status.message
        bad_tag = pb.FilterExpression(type=pb.TAG, expression="TagA ||")
        status = _status_of(
            await _receive(stub, group, filter_expression=bad_tag, invisible_duration=invisible)
        )
        assert status.code == pb.ILLEGAL_FILTER_EXPRESSION, status
        status = _status_of(await _receive(stub, group, batch_size=0, invisible_duration=invisible))
        assert status.code == pb.BAD_REQUEST and "batch_size" in status.message
        status = _status_of(await _receive(stub, group))
        assert status.code == pb.ILLEGAL_INVISIBLE_TIME, status
        status = _status_of(
            await _receive(stub, group, topic="NoSuchTopic", invisible_duration=invisible)
        )
        assert status.code == pb.TOPIC_NOT_FOUND, status
        garbage = channel.unary_stream("/apache.rocketmq.v2.MessagingService/ReceiveMessage")
        with pytest.raises(grpc.aio.AioRpcError):
            async for _ in garbage(b"\xff\xff\xff", timeout=10):
                pass

        # Still serving: the message goes to the group's DLQ and is not delivered again.
        forwarded = await stub.ForwardMessageToDeadLetterQueue(
            rpc.ForwardMessageToDeadLetterQueueRequest(
                group=pb.Resource(name=group),
                topic=pb.Resource(name=TOPIC),
                receipt_handle=handle,
                message_id=sent.msg_id,
                delivery_attempt=1,
                max_delivery_attempts=1,
            ),
            timeout=10,
        )
        assert forwarded.status.code == pb.OK, forwarded
        async with Admin(broker.address) as admin:
            dlq = (await admin.query_dlq(group))["broker-a"]
        assert [(m["originTopic"], m["originMsgId"]) for m in dlq] == [(TOPIC, sent.msg_id)]
        status = _status_of(
            await _receive(
                stub, group, filter_expression=tag, invisible_duration=invisible,
                long_polling_timeout={"seconds": 2},
            )
        )  # fmt: skip
        assert status.code == pb.MESSAGE_NOT_FOUND, status

        assigned = await stub.QueryAssignment(
            rpc.QueryAssignmentRequest(
                topic=pb.Resource(name=TOPIC), group=pb.Resource(name=group)
            ),
            timeout=10,
        )
        assert assigned.status.code == pb.OK, assigned
        assert [
            (a.message_queue.broker.name, a.message_queue.id) for a in assigned.assignments
        ] == [("broker-a", -1)]


class _Context:
    """What ConsumeService reads of a gRPC call: its metadata and deadline."""

    def __init__(self, client_id: str) -> None:
        self.client_id = client_id

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return (("x-mq-client-id", self.client_id),)

    @staticmethod
    def time_remaining() -> float:
        return 10.0

    def add_done_callback(self, callback: Callable[[Any], None]) -> None:
        """The call never ends here: the test drives the answer to its end itself."""


async def test_push_deliveries_are_renewed_while_held_and_handed_back_at_termination(
    broker: BrokerProc, endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The endpoint's renewal, driven in this process against the broker with short times: a
    delivery held for 2.5 times its invisible time is still acked with the client's handle; the
    deliveries of a client that terminates come back to the group at once."""
    monkeypatch.setattr(delivery, "AUTO_RENEW_INVISIBLE_MS", 2_000)
    monkeypatch.setattr(consumers, "RENEW_AHEAD_MS", 1_500)
    group = "grpc-renew"
    async with Producer(broker.address) as producer:
        await producer.send(TOPIC, b"renew-1", tags="TagN")
        await producer.send(TOPIC, b"renew-2", tags="TagN")
    pool = ConnectionPool()
    service = ConsumeService(pool, broker.address, lambda: broker.address, "broker-a")
    context = _Context("renew-client")
    request = rpc.ReceiveMessageRequest(
        group=pb.Resource(name=group),
        message_queue=pb.MessageQueue(topic=pb.Resource(name=TOPIC), id=-1),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="TagN"),
        batch_size=1,
        auto_renew=True,
        long_polling_timeout={"seconds": 5},
    )
    try:
        first = [r async for r in service.receive(request, context)]
        (message,) = [r.message for r in first if r.HasField("message")]
        handle = message.system_properties.receipt_handle
        assert service.held.get(handle) is not None
        await asyncio.sleep(5)  # 2.5 invisible times: renewed by the endpoint meanwhile
        assert service.held.current(handle) != handle
        acked = await service.ack(
            rpc.AckMessageRequest(
                group=pb.Resource(name=group),
                topic=pb.Resource(name=TOPIC),
                entries=[rpc.AckMessageEntry(receipt_handle=handle)],
            ),
            context,
        )
        assert acked.status.code == pb.OK, acked
        assert service.held.get(handle) is None

        second = [r async for r in service.receive(request, context)]
        (held,) = [r.message for r in second if r.HasField("message")]
        await service.terminated(
            rpc.NotifyClientTerminationRequest(group=pb.Resource(name=group)), context
        )
        assert len(service.held) == 0
    finally:
        service.close()
        pool.close()

    async with SimpleConsumer(broker.address, group, TOPIC, filter="TagN") as sdk:
        got = await receive_some(sdk, "the terminated client's message to come back")
        assert [(m.body, m.attempt) for m in got] == [(held.body, 2)]
        await sdk.ack(got[0])


@pytest.fixture
async def lone_endpoint(tmp_path: Path) -> AsyncIterator[tuple[BrokerProc, str]]:
    """A broker of its own (gRPC on), so that the long polls it counts are the test's alone."""
    with started(GrpcBrokerProc(tmp_path)) as proc:
        async with Admin(proc.address) as admin:
            await admin.create_topic(TOPIC, 2)
        yield proc, f"127.0.0.1:{proc.grpc_port}"


def _logged(proc: BrokerProc, event: str, group: str) -> list[dict[str, Any]]:
    """The broker's JSON log lines whose event starts with ``event`` and that name ``group``."""
    out = []
    for line in proc.log().splitlines():
        if event in line:
            doc = json.loads(line)
            if str(doc.get("event", "")).startswith(event) and doc.get("group") == group:
                out.append(doc)
    return out


async def test_a_message_popped_for_a_receive_the_client_cancelled_comes_back_at_once(
    lone_endpoint: tuple[BrokerProc, str],
) -> None:
    """A client that goes away during the long poll: the message the broker hands out after that
    is given back to the group (hidden 1 s), not hidden for the receive's 60 s. Each step waits
    on the broker: its POP long-polling for the receive, the endpoint seeing the cancel, and
    handing the message back (a cancel that reaches the endpoint only after the POP came back
    is tests/cluster/test_grpc_receive_cancel.py)."""
    broker, endpoint = lone_endpoint
    group = "grpc-cancel"
    tag = pb.FilterExpression(type=pb.TAG, expression="TagX")
    async with grpc.aio.insecure_channel(endpoint) as channel:
        stub = MessagingServiceStub(channel)
        call = await long_polling_receive(stub, broker.address, group, TOPIC, "TagX")
        call.cancel()
        await wait_until_async(
            lambda: _logged(broker, "grpc: receive cancelled during its long poll", group),
            "the endpoint to see the receive cancelled",
            10,
        )
        async with Producer(broker.address) as producer:
            sent = await producer.send(TOPIC, b"cancelled-1", tags="TagX")
        handed = await wait_until_async(
            lambda: _logged(broker, "grpc: a cancelled receive's messages handed back", group),
            "the endpoint to hand the popped message back",
            10,
        )
        assert [doc.get("count") for doc in handed] == [1], handed
        answers = await _receive(
            stub, group, filter_expression=tag, invisible_duration={"seconds": 30},
            long_polling_timeout={"seconds": 10},
        )  # fmt: skip
    assert _status_of(answers).code == pb.OK, answers
    (message,) = [a.message for a in answers if a.HasField("message")]
    assert message.system_properties.message_id == sent.msg_id
    assert message.system_properties.delivery_attempt == 2  # popped once for the cancelled call
