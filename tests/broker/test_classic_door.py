"""RocketMQ's remoting protocol on a real broker's client port (the classic door): frames
built from the published layouts, over a raw socket, beside our own protocol on the same port.

A send (binary and JSON headers) and a pull of it back in the stored-message layout; the offset
requests; and bad input: an unknown code answers REQUEST_CODE_NOT_SUPPORTED naming it and the
connection stays; a pull of a queue that does not exist answers a clear error; a serialize type
of 7, a JSON header that is not an object, a header length past its frame and a 20 MiB frame
close the connection with a logged reason, and the broker keeps serving both protocols."""

from __future__ import annotations

import json
import struct

import pytest

from protocol.codes import RequestCode as OurCode
from protocol.message import parse_msg_id
from protocol.rocketmq_remoting.codes import RequestCode, ResponseCode
from protocol.rocketmq_remoting.frame import (
    SerializeType,
)
from protocol.rocketmq_remoting.headers import SendMessageHeader
from protocol.rocketmq_remoting.message_decoder import (
    BatchMessage,
    decode_stored_messages,
    encode_batch,
)
from protocol.rocketmq_remoting.properties import encode_properties
from remoting.client import RemotingClient
from tests.support.classic import Raw, consumer_heartbeat, pull_header
from tests.support.procs import BrokerProc
from tests.support.wait import wait_until

pytestmark = pytest.mark.multiprocess

TOPIC = "ClassicT"


def _send_header(queue_id: int, props: dict[str, str]) -> SendMessageHeader:
    return SendMessageHeader(
        producer_group="PG", topic=TOPIC, default_topic="TBW102", default_topic_queue_nums=4,
        queue_id=queue_id, sys_flag=0, born_timestamp=1_700_000_000_000, flag=3,
        properties=encode_properties(props),
    )  # fmt: skip


async def _create_topic(broker: BrokerProc) -> None:
    conn = await RemotingClient.connect(broker.address)
    try:
        await conn.call(OurCode.UPDATE_AND_CREATE_TOPIC, {"topic": TOPIC, "queues": 2})
    finally:
        conn.close()


async def test_a_classic_send_is_pulled_back_in_the_stored_message_layout(
    broker: BrokerProc,
) -> None:
    await _create_topic(broker)
    raw = await Raw.open(broker.port)
    try:
        props = {"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "ID1", "color": "red"}
        binary = await raw.call(
            RequestCode.SEND_MESSAGE,
            _send_header(1, props).ext_fields(short_names=False),
            b"hello",
            SerializeType.ROCKETMQ,
        )
        assert binary.code == ResponseCode.SUCCESS, binary.remark
        assert (binary.ext_fields["queueId"], binary.ext_fields["queueOffset"]) == ("1", "0")
        v2 = await raw.call(
            RequestCode.SEND_MESSAGE_V2,
            _send_header(1, {"TAGS": "TagB"}).ext_fields(short_names=True),
            b"world",
        )
        assert v2.code == ResponseCode.SUCCESS and v2.ext_fields["queueOffset"] == "1", v2.remark

        batch = encode_batch(
            [
                BatchMessage(body=b"b0", properties={"TAGS": "TagC", "KEYS": "kb0"}),
                BatchMessage(body=b"b1", properties={"TAGS": "TagC", "KEYS": "kb1"}, flag=7),
            ]
        )
        batched = await raw.call(
            RequestCode.SEND_BATCH_MESSAGE,
            _send_header(0, {}).ext_fields(short_names=True),
            batch,
        )
        assert batched.code == ResponseCode.SUCCESS, batched.remark
        assert (batched.ext_fields["queueId"], batched.ext_fields["queueOffset"]) == ("0", "0")
        assert len(batched.ext_fields["msgId"].split(",")) == 2
        both = await raw.call(RequestCode.PULL_MESSAGE, pull_header(TOPIC, 0))
        assert [
            (m.body, m.properties["KEYS"], m.flag) for m in decode_stored_messages(both.body)
        ] == [
            (b"b0", "kb0", 0),
            (b"b1", "kb1", 7),
        ]

        pull_fields = pull_header(
            TOPIC, 1, sysFlag="2", suspendTimeoutMillis="1000", subscription="TagA"
        )
        pulled = await raw.call(RequestCode.PULL_MESSAGE, pull_fields)
        assert pulled.code == ResponseCode.SUCCESS, pulled.remark
        assert pulled.ext_fields["suggestWhichBrokerId"] == "0"
        assert pulled.ext_fields["maxOffset"] == "2"
        (msg,) = decode_stored_messages(pulled.body)  # the tag filter left TagB out
        assert (msg.topic, msg.body, msg.queue_id, msg.queue_offset, msg.flag) == (
            TOPIC, b"hello", 1, 0, 3,
        )  # fmt: skip
        assert msg.msg_id == binary.ext_fields["msgId"]
        assert msg.born_timestamp == 1_700_000_000_000
        assert {k: msg.properties[k] for k in props} == props

        # A long poll at the end of the queue waits, then answers PULL_NOT_FOUND.
        pull_fields.update(queueOffset="2", subscription="*")
        waited = await raw.call(RequestCode.PULL_MESSAGE, pull_fields)
        assert waited.code == ResponseCode.PULL_NOT_FOUND
        assert waited.ext_fields["nextBeginOffset"] == "2"

        offsets = {"consumerGroup": "CG", "topic": TOPIC, "queueId": "1"}
        none = await raw.call(RequestCode.QUERY_CONSUMER_OFFSET, offsets)
        assert (none.code, none.ext_fields["offset"]) == (ResponseCode.SUCCESS, "0")
        update = await raw.call(
            RequestCode.UPDATE_CONSUMER_OFFSET, {**offsets, "commitOffset": "2"}
        )
        assert update.code == ResponseCode.SUCCESS
        query = await raw.call(RequestCode.QUERY_CONSUMER_OFFSET, offsets)
        assert query.ext_fields["offset"] == "2"
        queue = {"topic": TOPIC, "queueId": "1"}
        high = await raw.call(RequestCode.GET_MAX_OFFSET, queue)
        low = await raw.call(RequestCode.GET_MIN_OFFSET, queue)
        assert (low.ext_fields["offset"], high.ext_fields["offset"]) == ("0", "2")
        by_key = {
            "topic": TOPIC, "key": "k2", "maxNum": "32", "beginTimestamp": "0",
            "endTimestamp": str(2**62),
        }  # fmt: skip
        keyed = await raw.call(RequestCode.QUERY_MESSAGE, by_key)
        assert keyed.code == ResponseCode.SUCCESS, keyed.remark
        assert [m.body for m in decode_stored_messages(keyed.body)] == [b"hello"]
        nobody = await raw.call(RequestCode.QUERY_MESSAGE, {**by_key, "key": "nobody"})
        assert nobody.code == ResponseCode.QUERY_NOT_FOUND
        viewed = await raw.call(
            RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(msg.physical_offset)}
        )
        assert decode_stored_messages(viewed.body) == [msg]
        inside = await raw.call(
            RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(msg.physical_offset + 1)}
        )
        assert inside.code == ResponseCode.SYSTEM_ERROR and inside.remark
        at = await raw.call(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, {**queue, "timestamp": "0"})
        assert (at.code, at.ext_fields["offset"]) == (ResponseCode.SUCCESS, "0")
    finally:
        raw.close()


async def test_bad_classic_input_gets_a_clear_answer_or_a_logged_close(broker: BrokerProc) -> None:
    await _create_topic(broker)
    raw = await Raw.open(broker.port)
    try:
        unknown = await raw.call(999, {})
        assert unknown.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        assert "999" in (unknown.remark or "")
        admin = await raw.call(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": TOPIC})
        assert admin.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED, admin.remark
        missing = await raw.call(RequestCode.SEND_MESSAGE_V2, {"b": TOPIC}, b"x")
        assert missing.code == ResponseCode.SYSTEM_ERROR and "producerGroup" in (
            missing.remark or ""
        )
        bad_queue = pull_header(TOPIC, 9, maxMsgNums="1")
        no_queue = await raw.call(RequestCode.PULL_MESSAGE, bad_queue)
        assert no_queue.code == ResponseCode.SYSTEM_ERROR
        assert "queueId 9 out of range" in (no_queue.remark or "")
        # The connection still serves after those.
        ok = await raw.call(RequestCode.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": "0"})
        assert ok.code == ResponseCode.SUCCESS
    finally:
        raw.close()

    bad_frames = {
        "serialize type 7": struct.pack(">iI", 8, (7 << 24) | 4) + b"{}  ",
        "a JSON header that is not an object": struct.pack(">iI", 7, 3) + b"[1]",
        "a header length past the frame": struct.pack(">iI", 8, 100) + b"{}  ",
        "a 20 MiB frame": struct.pack(">iI", 20 * 1024 * 1024, 2) + b"{}",
    }
    for what, frame in bad_frames.items():
        raw = await Raw.open(broker.port)
        try:
            assert await raw.closed_after(frame), what
        finally:
            raw.close()
    wait_until(
        lambda: broker.log().count("closing connection: bad frame") >= len(bad_frames),
        "the broker to log each bad frame",
        10,
    )
    # The broker keeps serving both doors.
    raw = await Raw.open(broker.port)
    try:
        ok = await raw.call(RequestCode.GET_MIN_OFFSET, {"topic": TOPIC, "queueId": "0"})
        assert ok.code == ResponseCode.SUCCESS
    finally:
        raw.close()
    ours = await RemotingClient.connect(broker.address)
    try:
        sent = await ours.call(OurCode.SEND_MESSAGE, {"topic": TOPIC, "queueId": 0}, b"ours")
        assert sent.header["queueOffset"] == 0
    finally:
        ours.close()


async def test_members_are_told_when_their_group_changes(broker: BrokerProc) -> None:
    await _create_topic(broker)
    first, second = await Raw.open(broker.port), await Raw.open(broker.port)
    try:
        joined = await first.call(RequestCode.HEART_BEAT, {}, consumer_heartbeat("c1", "G", TOPIC))
        assert joined.code == ResponseCode.SUCCESS
        own = await first.next_request()  # every member is told, the one that joined too
        assert own.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED
        await second.call(RequestCode.HEART_BEAT, {}, consumer_heartbeat("c2", "G", TOPIC))
        told = await first.next_request()
        assert (told.code, told.ext_fields, told.is_oneway) == (
            RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
            {"consumerGroup": "G"},
            True,
        )
        members = await first.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "G"})
        assert sorted(json.loads(members.body)["consumerIdList"]) == ["c1", "c2"]
        # Heartbeats of known members change nothing: no notification for them.
        await second.call(RequestCode.HEART_BEAT, {}, consumer_heartbeat("c2", "G", TOPIC))
        second.close()  # leaving by closing the connection
        told = await first.next_request()
        assert told.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED
        assert first.requests == []  # one for each join, one for the leave
        members = await first.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "G"})
        assert json.loads(members.body)["consumerIdList"] == ["c1"]
    finally:
        first.close()
        second.close()


async def test_a_classic_transaction_is_ended_by_its_uniq_key(broker: BrokerProc) -> None:
    await _create_topic(broker)
    raw = await Raw.open(broker.port)
    try:
        props = {"TRAN_MSG": "true", "PGROUP": "PG", "UNIQ_KEY": "TX1", "TAGS": "TagT"}
        half = await raw.call(
            RequestCode.SEND_MESSAGE_V2, _send_header(1, props).ext_fields(short_names=True), b"tx"
        )
        assert half.code == ResponseCode.SUCCESS, half.remark
        assert half.ext_fields["transactionId"] == "TX1"
        pull = pull_header(TOPIC, 1)
        hidden = await raw.call(RequestCode.PULL_MESSAGE, pull)
        assert hidden.code == ResponseCode.PULL_NOT_FOUND  # a half is not consumable
        _, offset = parse_msg_id(half.ext_fields["msgId"])
        end = {
            "producerGroup": "PG", "tranStateTableOffset": "0", "commitLogOffset": str(offset),
            "commitOrRollback": "8", "msgId": half.ext_fields["msgId"], "transactionId": "TX1",
        }  # fmt: skip
        committed = await raw.call(RequestCode.END_TRANSACTION, end)
        assert committed.code == ResponseCode.SUCCESS, committed.remark
        shown = await raw.call(RequestCode.PULL_MESSAGE, pull)
        assert [m.body for m in decode_stored_messages(shown.body)] == [b"tx"]
        rolled = await raw.call(RequestCode.END_TRANSACTION, {**end, "commitOrRollback": "12"})
        assert rolled.code == ResponseCode.SYSTEM_ERROR
        assert "committed already" in (rolled.remark or "")
        other = await raw.call(RequestCode.END_TRANSACTION, {**end, "transactionId": "TX9"})
        assert other.code == ResponseCode.SYSTEM_ERROR and "TX9" in (other.remark or "")
    finally:
        raw.close()
