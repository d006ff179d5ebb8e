"""Consumer retry, dead-letter queues and group settings against a real lone broker: a handler
that always fails sees its message retried on the group's back-off schedule, then parked in
%DLQ%<group> with its properties; resendDLQ brings it back once; bad requests (settings, nacks,
resends) store nothing and keep the broker serving."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import msgpack
import pytest

from client.admin import Admin
from client.consumer import Consumer
from client.errors import ClientError
from client.message import ReceivedMessage
from client.producer import Producer
from protocol.codes import RequestCode, ResponseCode
from protocol.message import parse_msg_id
from protocol.retry import PROP_DLQ_RESENT_FROM, PROP_ORIGIN_MESSAGE_ID
from remoting.client import RemotingClient
from tests.client import receiving
from tests.support.messages import FAST_CONSUMER
from tests.support.procs import BrokerProc
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.multiprocess


async def dlq(admin: Admin, group: str) -> list[dict[str, Any]]:
    return (await admin.query_dlq(group)).get("broker-a", [])


async def test_a_failing_message_is_retried_on_the_back_off_schedule_then_dead_lettered(
    broker: BrokerProc,
) -> None:
    delays = [1.0, 1.0, 2.0]
    async with Admin(broker.address) as admin:
        await admin.create_topic("T", 2)
        await admin.update_sub_group(
            {"groupName": "G", "retryMaxTimes": 3, "retryDelays": "1s 1s 2s"}
        )
        async with Producer(broker.address) as producer:
            sent = await producer.send("T", b"poison", keys="k1", properties={"app": "x"})
        attempts: list[tuple[float, ReceivedMessage]] = []
        working = False

        def handle(msg: ReceivedMessage) -> None:
            attempts.append((time.time(), msg))
            if not working:
                raise ValueError(f"attempt {len(attempts)}")

        async with Consumer(broker.address, "G", "T", **FAST_CONSUMER) as consumer:
            task = asyncio.ensure_future(consumer.process(handle))
            try:
                (parked,) = await wait_until_async(
                    lambda: dlq(admin, "G"), "the message in the DLQ", 30, interval=0.2
                )
                assert [m.reconsume_times for _, m in attempts] == [0, 1, 2, 3]
                assert {m.topic for _, m in attempts} == {"T"}
                assert [m.stored_topic for _, m in attempts] == ["T", *["%RETRY%G"] * 3]
                assert {m.origin_msg_id for _, m in attempts} == {sent.msg_id}
                assert {m.body for _, m in attempts} == {b"poison"}
                assert {(m.keys, m.properties["app"]) for _, m in attempts} == {("k1", "x")}
                retried = attempts[1][1]
                assert retried.properties["CONSUME_FAILURE_REASON"] == "ValueError: attempt 1"
                # Never before its back-off: each attempt comes at least its level after the
                # failure before it (the nack reaches the broker after the failure).
                for (failed_at, _), (next_at, _), delay in zip(
                    attempts[:-1], attempts[1:], delays, strict=True
                ):
                    assert next_at - failed_at >= delay - 0.01, (next_at - failed_at, delay)
                assert parked["originTopic"] == "T" and parked["originMsgId"] == sent.msg_id
                assert parked["reconsumeTimes"] == 3
                assert parked["reason"] == "ValueError: attempt 4"

                # resendDLQ brings it back to T, where a working handler consumes it.
                working = True
                resent = await admin.resend_dlq("G")
                assert [r["topic"] for r in resent["broker-a"]["resent"]] == ["T"]
                await wait_until_async(
                    lambda: len(attempts) == 5, "the re-sent message", 20, interval=0.05
                )
            finally:
                task.cancel()
        again = attempts[4][1]
        assert again.stored_topic == "T" and again.reconsume_times == 0
        assert again.body == b"poison" and again.origin_msg_id == sent.msg_id
        assert again.properties[PROP_DLQ_RESENT_FROM] == parked["msgId"]
        assert (await dlq(admin, "G"))[0]["resent"] is True


async def test_a_nack_past_the_retries_parks_the_message_and_resend_brings_it_back_once(
    broker: BrokerProc,
) -> None:
    async with Admin(broker.address) as admin:
        await admin.create_topic("T", 2)
        stored = await admin.update_sub_group({"groupName": "G", "retryMaxTimes": 0})
        assert stored["broker-a"]["retryMaxTimes"] == 0
        async with Producer(broker.address) as producer:
            sent = await producer.send("T", b"poison", keys="k1", properties={"app": "x"})
        failures: list[ReceivedMessage] = []

        def fail(msg: ReceivedMessage) -> None:
            failures.append(msg)
            raise ValueError("cannot parse order")

        async with Consumer(broker.address, "G", "T", **FAST_CONSUMER) as consumer:
            task = asyncio.ensure_future(consumer.process(fail))
            try:
                await wait_until_async(
                    lambda: _has_one(admin), "the message in the DLQ", 20, interval=0.2
                )
            finally:
                task.cancel()
        (parked,) = await dlq(admin, "G")
        assert parked["originTopic"] == "T"
        assert parked["originMsgId"] == sent.msg_id
        assert parked["reconsumeTimes"] == 0
        assert parked["reason"] == "ValueError: cannot parse order"
        assert parked["resent"] is False
        assert [m.msg_id for m in failures] == [sent.msg_id]

        # The DLQ is a topic like any other.
        async with Consumer(broker.address, "reader", "%DLQ%G", **FAST_CONSUMER) as reader:
            (copy,) = await receiving.receive_until(reader, lambda got: len(got) >= 1, 20)
        assert copy.body == b"poison" and copy.keys == "k1"
        assert copy.properties["app"] == "x"
        assert copy.properties["DLQ_ORIGIN_TOPIC"] == "T"
        assert copy.properties["DLQ_ORIGIN_MESSAGE_ID"] == sent.msg_id
        assert copy.properties["CONSUME_FAILURE_REASON"] == "ValueError: cannot parse order"

        first = await admin.resend_dlq("G")
        assert [r["dlqMsgId"] for r in first["broker-a"]["resent"]] == [parked["msgId"]]
        second = await admin.resend_dlq("G")
        assert second["broker-a"]["resent"] == []
        assert second["broker-a"]["skipped"] == [
            {"dlqMsgId": parked["msgId"], "why": "re-sent before"}
        ]
        by_id = await admin.resend_dlq("G", parked["msgId"])
        assert by_id["broker-a"]["resent"] == []
        (after,) = await dlq(admin, "G")
        assert after["resent"] is True

        # A working handler of the same group consumes the re-sent copy from T.
        async with Consumer(broker.address, "G", "T", **FAST_CONSUMER) as consumer:
            got = await receiving.receive_until(
                consumer, lambda got: any(m.body == b"poison" for m in got), 20
            )
        (again,) = [m for m in got if m.body == b"poison"]
        assert again.topic == "T" and again.reconsume_times == 0
        assert again.properties[PROP_DLQ_RESENT_FROM] == parked["msgId"]
        assert again.properties[PROP_ORIGIN_MESSAGE_ID] == sent.msg_id
        assert again.properties["app"] == "x" and again.keys == "k1"


async def _has_one(admin: Admin) -> bool:
    return len(await dlq(admin, "G")) == 1


async def call(conn: RemotingClient, code: int, header: dict[str, Any], body: Any = None) -> Any:
    raw = msgpack.packb(body) if body is not None and not isinstance(body, bytes) else body
    return await conn.request(code, header, raw, 5.0)


async def test_bad_settings_store_nothing(broker: BrokerProc) -> None:
    async with Admin(broker.address) as admin:
        await admin.update_sub_group({"groupName": "G", "retryMaxTimes": 2})
        before = await admin.get_sub_group("G")
        conn = await RemotingClient.connect(broker.address, 5.0)
        try:
            update = RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP
            for body, says in (
                ({"groupName": "G", "retryTimes": 3}, "unknown subscription group setting"),
                ({"groupName": "G", "retryMaxTimes": -1}, "retryMaxTimes must be"),
                ({"groupName": "G", "retryDelays": "1s x"}, "'x' is not a delay"),
                ({"groupName": "a b"}, "may hold only"),
                ([1, 2], "msgpack map"),
                (b"\xc1", "not msgpack"),
            ):
                resp = await call(conn, update, {}, body)
                assert resp.code == ResponseCode.BAD_REQUEST, body
                assert says in str(resp.header.get("remark")), resp.header
            with pytest.raises(ClientError, match="retryMaxTimes must be"):
                await admin.update_sub_group({"groupName": "G", "retryMaxTimes": -3})
            assert await admin.get_sub_group("G") == before
            assert before["broker-a"] == {
                "groupName": "G",
                "retryMaxTimes": 2,
                "retryDelays": "10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h",
                "consumeRetryEnable": True,
                "consumeMessageOrderly": False,
            }
            assert await admin.get_sub_group("never-set") == {"broker-a": None}
        finally:
            conn.close()
        assert broker.alive()


async def test_bad_nacks_and_resends_store_nothing(broker: BrokerProc) -> None:
    async with Admin(broker.address) as admin, Producer(broker.address) as producer:
        await admin.create_topic("T", 1)
        await admin.update_sub_group({"groupName": "G", "retryMaxTimes": 2})
        sent = await producer.send("T", b"m")
        conn = await RemotingClient.connect(broker.address, 5.0)
        try:
            info = await call(conn, RequestCode.GET_BROKER_RUNTIME_INFO, {})
            max_before = msgpack.unpackb(info.body)["maxOffset"]
            _, offset = parse_msg_id(sent.msg_id)
            back = RequestCode.CONSUMER_SEND_MSG_BACK
            nack = {"group": "G", "offset": offset, "originTopic": "T", "reason": "r"}
            # Not a member of the group on this connection.
            resp = await call(conn, back, nack)
            assert resp.code == ResponseCode.NOT_GROUP_MEMBER, resp.header
            beat = {"clientId": "c1", "consumerGroup": "G", "topic": "T"}
            assert (await call(conn, RequestCode.HEART_BEAT, beat)).code == ResponseCode.SUCCESS
            for header, code in (
                ({**nack, "offset": offset + 1}, ResponseCode.MESSAGE_NOT_FOUND),
                ({**nack, "offset": 10**9}, ResponseCode.MESSAGE_NOT_FOUND),
                ({**nack, "offset": -5}, ResponseCode.MESSAGE_NOT_FOUND),
                ({**nack, "originTopic": "Other"}, ResponseCode.MESSAGE_NOT_FOUND),
                ({**nack, "offset": "x"}, ResponseCode.BAD_REQUEST),
                ({**nack, "group": "a b"}, ResponseCode.BAD_REQUEST),
            ):
                resp = await call(conn, back, header)
                assert resp.code == code, (header, resp.header)
                assert resp.header.get("remark"), resp.header
            # Another group's member may not nack for G.
            other = {"clientId": "c2", "consumerGroup": "H", "topic": "T"}
            conn2 = await RemotingClient.connect(broker.address, 5.0)
            try:
                await call(conn2, RequestCode.HEART_BEAT, other)
                resp = await call(conn2, back, nack)
                assert resp.code == ResponseCode.NOT_GROUP_MEMBER
            finally:
                conn2.close()

            resend = RequestCode.RESEND_DLQ_MESSAGES
            for header, code in (
                ({"consumerGroup": "G"}, ResponseCode.BAD_REQUEST),
                ({"consumerGroup": "G", "all": True, "msgId": "00"}, ResponseCode.BAD_REQUEST),
                ({"consumerGroup": "G", "msgId": "zz"}, ResponseCode.BAD_REQUEST),
                ({"consumerGroup": "G", "msgId": sent.msg_id}, ResponseCode.MESSAGE_NOT_FOUND),
            ):
                resp = await call(conn, resend, header)
                assert resp.code == code, (header, resp.header)
            info = await call(conn, RequestCode.GET_BROKER_RUNTIME_INFO, {})
            assert msgpack.unpackb(info.body)["maxOffset"] == max_before
            assert await dlq(admin, "G") == []
            topics = await call(conn, RequestCode.GET_ALL_TOPIC_CONFIG, {})
            assert "%DLQ%G" not in msgpack.unpackb(topics.body)
        finally:
            conn.close()
        assert broker.alive()


async def test_a_group_that_stops_consuming_retries_parks_nacks_at_once(
    broker: BrokerProc,
) -> None:
    async with Admin(broker.address) as admin, Producer(broker.address) as producer:
        await admin.create_topic("T", 1)
        async with Consumer(broker.address, "H", "T", **FAST_CONSUMER) as consumer:
            # By default the group reads its retry topic (created at its first heartbeat).
            await wait_until_async(lambda: consumer.retry_owned, "H to read %RETRY%H", 20)
            await admin.update_sub_group({"groupName": "H", "consumeRetryEnable": False})
            await wait_until_async(
                lambda: not consumer.retry_owned, "H to stop reading %RETRY%H", 20
            )
            sent = await producer.send("T", b"x")
            (msg,) = await receiving.receive_until(consumer, lambda got: len(got) >= 1, 20)
            await consumer.nack(msg, "no retries here")
        (parked,) = await dlq(admin, "H")
        # retry_max_times is still the default (16): the nack went to the DLQ all the same.
        assert parked["originMsgId"] == sent.msg_id and parked["reconsumeTimes"] == 0
