"""POP consumption against a real lone broker: many consumers share two queues and every
message is acked exactly once; a message not acked comes back after its invisible time with
attempt 2 (through %RETRY%<group>); change of invisible time; bad receipt handles are refused
with a clear code and ack nothing; a tag filter hands out only the matching messages, to POP
and queue-bound consumers alike. The tests share one broker, each on a topic and consumer group
of its own (tests/broker/conftest.py)."""

from __future__ import annotations

import asyncio
import base64
import time
from collections import Counter

import pytest

from client.admin import Admin
from client.consumer import Consumer
from client.errors import BrokerError
from client.producer import Producer
from client.simple_consumer import PopMessage, SimpleConsumer, decode_pop_answer
from client.transaction import TransactionProducer, TransactionStatus
from protocol.codes import RequestCode, ResponseCode
from protocol.filter import FilterError
from protocol.pop import REVIVE_TOPIC, HandleKey, ReceiptHandle, encode_handle
from protocol.pull import PullRequest
from protocol.remoting import Scalar
from protocol.timer import TIMER_TOPIC
from protocol.transaction import HALF_TOPIC
from remoting.client import RemotingClient
from tests.support.messages import fill
from tests.support.procs import BrokerProc, module_broker

pytestmark = pytest.mark.multiprocess


broker = module_broker("pop-process")


async def _receive_until(
    consumer: SimpleConsumer, n: int, deadline_s: float, **kw: float
) -> list[PopMessage]:
    got: list[PopMessage] = []
    deadline = time.monotonic() + deadline_s
    while len(got) < n and time.monotonic() < deadline:
        got += await consumer.receive(n - len(got), wait=1.0, **kw)
    return got


async def test_ten_consumers_share_two_queues_and_ack_each_message_once(
    broker: BrokerProc, topic: str, group: str
) -> None:
    n = 300
    sent = set(await fill(broker.address, topic, n))
    acked: Counter[str] = Counter()
    received_by: Counter[int] = Counter()
    done = asyncio.Event()
    everyone = asyncio.Event()  # each member holds its first batch until all ten have one

    async def member(i: int) -> None:
        async with SimpleConsumer(broker.address, group, topic) as consumer:
            while not done.is_set():
                batch = await consumer.receive(8, invisible_duration=30, wait=0.5)
                if batch and not received_by[i]:
                    received_by[i] += len(batch)
                    if len(received_by) == 10:
                        everyone.set()
                    await asyncio.wait_for(everyone.wait(), 20)
                elif batch:
                    received_by[i] += len(batch)
                for msg in batch:
                    await consumer.ack(msg)
                    acked[msg.msg_id] += 1
                    assert msg.attempt == 1 and msg.topic == topic
                if len(acked) >= n:
                    done.set()
                await asyncio.sleep(0)

    await asyncio.wait_for(asyncio.gather(*(member(i) for i in range(10))), 60)
    assert set(acked) == sent
    assert set(acked.values()) == {1}
    assert sorted(received_by) == list(range(10))  # ten members on two queues, all served
    async with SimpleConsumer(broker.address, group, topic) as consumer:
        assert await consumer.receive(8, invisible_duration=2, wait=0.5) == []


async def test_unacked_messages_come_back_with_attempt_two(
    broker: BrokerProc, topic: str, group: str
) -> None:
    sent = set(await fill(broker.address, topic, 10))
    async with SimpleConsumer(broker.address, group, topic) as quitter:
        first = await _receive_until(quitter, 10, 20, invisible_duration=2)
        assert {m.msg_id for m in first} == sent and {m.attempt for m in first} == {1}
        # A batch ack with a forged handle acks the good ones and reports the bad one.
        forged = PopMessage(first[0].record, first[0].broker_name, first[0].receipt_handle[:-4], 1)
        results = await quitter.ack_many([*first[:4], forged])
        assert results[:4] == [None] * 4
        bad = results[4]
        assert bad is not None and bad.code == ResponseCode.RECEIPT_HANDLE_INVALID
        assert await quitter.ack_many(first[:4]) == [None] * 4  # repeated: still acked
        # The quitter stops acking; another member gets the rest again once 2 s passed.
    unacked = {m.msg_id for m in first[4:]}
    async with SimpleConsumer(broker.address, group, topic) as other:
        popped_at = time.monotonic()
        again = await _receive_until(other, 6, 30, invisible_duration=30)
        assert time.monotonic() - popped_at >= 1.0  # not before the invisible time
        assert {m.origin_msg_id for m in again} == unacked and len(again) == 6
        assert {m.attempt for m in again} == {2}
        assert {m.topic for m in again} == {topic}
        assert {m.stored_topic for m in again} == {f"%RETRY%{group}"}
        assert {m.body for m in again} == {m.body for m in first[4:]}
        # The first handles expired: acking them is refused and acks nothing.
        with pytest.raises(BrokerError) as exc:
            await other.ack(first[5])
        assert exc.value.code == ResponseCode.RECEIPT_HANDLE_EXPIRED
        assert await other.ack_many(again) == [None] * 6
        # The acked ones passed their deadline too and did not come back.
        assert await other.receive(10, invisible_duration=2, wait=1.0) == []


async def test_a_receive_of_no_messages_is_refused_and_hands_out_none(
    broker: BrokerProc, topic: str, group: str
) -> None:
    await fill(broker.address, topic, 2, queues=1)
    async with SimpleConsumer(broker.address, group, topic) as consumer:
        with pytest.raises(ValueError, match="max_messages must be at least 1, not 0"):
            await consumer.receive(0, invisible_duration=30, wait=0.5)
        conn = await RemotingClient.connect(broker.address, timeout=2.0)
        try:
            header: dict[str, Scalar] = {
                "consumerGroup": group,
                "topic": topic,
                "maxMsgNums": 0,
                "invisibleTime": 30000,
            }
            resp = await conn.request(RequestCode.POP_MESSAGE, header, None, 5.0)
        finally:
            conn.close()
        assert resp.code == ResponseCode.BAD_REQUEST
        assert "maxMsgNums must be at least 1, not 0" in str(resp.header["remark"])
        # Neither handed anything out: both messages are there for the next receive.
        got = await _receive_until(consumer, 2, 20, invisible_duration=30)
        assert sorted(m.body for m in got) == [b"m0", b"m1"]


async def test_change_invisible_duration_extends_and_replaces_the_handle(
    broker: BrokerProc, topic: str, group: str
) -> None:
    await fill(broker.address, topic, 1, queues=1)
    async with SimpleConsumer(broker.address, group, topic) as consumer:
        (msg,) = await _receive_until(consumer, 1, 20, invisible_duration=1)
        old = PopMessage(msg.record, msg.broker_name, msg.receipt_handle, msg.attempt)
        await consumer.change_invisible_duration(msg, 30)
        # Past the first deadline nothing comes back: the message is still hidden.
        assert await consumer.receive(1, invisible_duration=2, wait=1.5) == []
        with pytest.raises(BrokerError) as exc:
            await consumer.ack(old)
        assert exc.value.code == ResponseCode.RECEIPT_HANDLE_EXPIRED
        await consumer.ack(msg)
        await consumer.ack(msg)  # a repeated ack is answered SUCCESS


async def test_bad_receipt_handles_are_refused_and_ack_nothing(
    broker: BrokerProc, topic: str, group: str
) -> None:
    await fill(broker.address, topic, 1, queues=1)
    async with SimpleConsumer(broker.address, group, topic) as consumer:
        (msg,) = await _receive_until(consumer, 1, 20, invisible_duration=1)
        text = msg.receipt_handle
        raw = bytearray(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
        raw[10] ^= 1
        forged = base64.urlsafe_b64encode(bytes(raw)).decode().rstrip("=")
        foreign = encode_handle(
            ReceiptHandle("broker-x", group, topic, 0, 0, 0, 3000, 0), HandleKey(bytes(32))
        )
        stranger = encode_handle(
            ReceiptHandle(msg.broker_name, group, topic, 0, 0, 0, 3000, 0), HandleKey(bytes(32))
        )
        cases = {
            forged: "signature",
            text[: len(text) // 2]: "truncated",
            foreign: "issued by broker broker-x",
            stranger: "signature",
            "%%%": "base64",
        }
        for bad, why in cases.items():
            fake = PopMessage(msg.record, msg.broker_name, bad, 1)
            with pytest.raises(BrokerError) as exc:
                await consumer.ack(fake)
            assert exc.value.code == ResponseCode.RECEIPT_HANDLE_INVALID, bad
            assert why in str(exc.value), (why, str(exc.value))
    async with SimpleConsumer(broker.address, "OTHER", topic) as other:
        with pytest.raises(BrokerError) as exc:
            await other.ack(msg)
        assert exc.value.code == ResponseCode.RECEIPT_HANDLE_INVALID
        assert f"consumer group {group}, not OTHER" in str(exc.value)
    # Nothing was acked: the message comes back after its invisible time.
    async with SimpleConsumer(broker.address, group, topic) as consumer:
        (again,) = await _receive_until(consumer, 1, 30, invisible_duration=30)
        assert again.origin_msg_id == msg.msg_id and again.attempt == 2
        await consumer.ack(again)


async def test_tag_filter_hands_out_only_matching_messages(broker: BrokerProc, topic: str) -> None:
    async with Admin(broker.address) as admin:
        await admin.create_topic(topic, 2)
    tags = ["A", "B", "C", ""]
    async with Producer(broker.address) as producer:
        sent = [
            (await producer.send(topic, f"m{i}".encode(), tags=tags[i % 4])).msg_id
            for i in range(200)
        ]
    wanted = {mid for i, mid in enumerate(sent) if tags[i % 4] in ("A", "B")}
    async with SimpleConsumer(broker.address, "G1", topic, filter="A || B") as picky:
        got = await _receive_until(picky, len(wanted), 30, invisible_duration=30)
        assert {m.msg_id for m in got} == wanted and len(got) == len(wanted)
        assert {m.tags for m in got} == {"A", "B"}
        for msg in got:
            await picky.ack(msg)
        assert await picky.receive(10, invisible_duration=30, wait=1.0) == []
    async with SimpleConsumer(broker.address, "G2", topic, filter="*") as everything:
        got = await _receive_until(everything, 200, 30, invisible_duration=30)
        assert {m.msg_id for m in got} == set(sent)
    # A queue-bound consumer with the same expression gets the same messages.
    queue_bound: list[str] = []
    async with Consumer(broker.address, "G4", topic, filter="A || B", suspend_ms=500) as consumer:
        deadline = time.monotonic() + 30
        while len(queue_bound) < len(wanted) and time.monotonic() < deadline:
            queue_bound += [m.msg_id for m in await consumer.receive(1.0, max_messages=256)]
        queue_bound += [m.msg_id for m in await consumer.receive(1.0, max_messages=256)]
    assert sorted(queue_bound) == sorted(wanted)
    with pytest.raises(FilterError):
        SimpleConsumer(broker.address, "G3", topic, filter="A ||")
    with pytest.raises(FilterError):
        Consumer(broker.address, "G3", topic, filter="|| B")
    conn = await RemotingClient.connect(broker.address, timeout=2.0)
    try:
        header: dict[str, Scalar] = {
            "consumerGroup": "G3",
            "topic": topic,
            "maxMsgNums": 1,
            "invisibleTime": 5000,
            "exp": "A || ",
        }
        resp = await conn.request(RequestCode.POP_MESSAGE, header, None, 5.0)
        assert resp.code == ResponseCode.BAD_REQUEST and "empty tag" in str(resp.header["remark"])
        header["exp"], header["expressionType"] = "A", "SQL92"
        resp = await conn.request(RequestCode.POP_MESSAGE, header, None, 5.0)
        assert resp.code == ResponseCode.BAD_REQUEST and "SQL92" in str(resp.header["remark"])
        # One queue: only its messages; a queue the topic does not have is refused.
        one: dict[str, Scalar] = {
            "consumerGroup": "G5",
            "topic": topic,
            "queueId": 1,
            "maxMsgNums": 5,
            "invisibleTime": 5000,
        }
        resp = await conn.request(RequestCode.POP_MESSAGE, one, None, 5.0)
        assert resp.code == ResponseCode.SUCCESS
        assert {m.queue_id for m in decode_pop_answer(resp, "broker-a")} == {1}
        one["queueId"] = 7
        resp = await conn.request(RequestCode.POP_MESSAGE, one, None, 5.0)
        assert resp.code == ResponseCode.QUEUE_NOT_EXIST
        pull = PullRequest(group="G3", topic=topic, queue_id=0, offset=0, subscription="A||")
        resp = await conn.request(pull.code, pull.header(), None, 5.0)
        assert resp.code == ResponseCode.BAD_REQUEST and "subscription" in str(
            resp.header["remark"]
        )
    finally:
        conn.close()


async def test_system_topics_are_refused_whatever_their_case(broker: BrokerProc) -> None:
    # A transaction's half message (RMQ_SYS_TRANS_HALF_TOPIC) must stay invisible to POP.
    async with Admin(broker.address) as admin:
        await admin.create_topic("T", 1)
    async with TransactionProducer(
        broker.address, "PG", lambda msg: TransactionStatus.UNKNOWN
    ) as tp:
        await tp.send_transaction("T", b"half")
    conn = await RemotingClient.connect(broker.address, timeout=2.0)
    try:
        for topic in (HALF_TOPIC, TIMER_TOPIC, REVIVE_TOPIC, "%RETRY%G", "%DLQ%G"):
            header: dict[str, Scalar] = {
                "consumerGroup": "G",
                "topic": topic,
                "queueId": -1,
                "maxMsgNums": 8,
                "invisibleTime": 30_000,
                "pollTime": 0,
            }
            resp = await conn.request(RequestCode.POP_MESSAGE, header, None, 5)
            assert resp.code == ResponseCode.NO_PERMISSION, (topic, resp.code, resp.header)
    finally:
        conn.close()
