"""Golden answer frames, one row per served code (and the refusals every code may get), in both
serialize types: each built by the helpers the handlers answer with (broker/classic,
controller/nameserver.py), compared with the bytes written out by hand from RocketMQ's
published layouts, then decoded and re-encoded, and read back into the typed value where one
exists.

The JSON header is fastjson's RemotingCommand: names in order, null fields left out, so
``{"code":C,"extFields":{..},"flag":1,"language":"JAVA","opaque":O,"remark":"..",
"serializeTypeCurrentRPC":"JSON","version":0}`` with extFields and remark only when set (each
row spells its extFields and remark). The binary header: code int16, language byte, version
int16, opaque int32, flag int32, remark int32 length and bytes, extFields int32 length and its
entries (key int16 length and bytes, value int32 length and bytes), written here with struct
and checked against test_rmq_frame's hex golden. Bodies are the same bytes in either type:
the stored-message record (test_rmq_message_layouts' STORED_V1), the route JSON with the
integer-key quirk (test_rmq_route_json's QUIRK), and JSON written out below."""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import NamedTuple

import pytest

from protocol.rocketmq_remoting.admin_bodies import (
    ConnectionRow,
    ConsumeRow,
    QueueOffsets,
    decode_mq_table,
    encode_consume_stats,
    encode_consumer_connection,
    encode_kv_table,
    encode_subscription_groups,
    encode_topic_configs,
    encode_topic_stats,
)
from protocol.rocketmq_remoting.bodies import (
    MessageQueue,
    encode_consumer_list,
    encode_lock_batch_answer,
)
from protocol.rocketmq_remoting.codes import RequestCode, ResponseCode
from protocol.rocketmq_remoting.frame import (
    RemotingCommand,
    SerializeType,
    decode_frame,
    encode_command,
    make_response,
)
from protocol.rocketmq_remoting.headers import (
    PullMessageResponseHeader,
    QueryMessageHeader,
    SendMessageResponseHeader,
    offset_answer,
)
from protocol.rocketmq_remoting.message_decoder import (
    decode_stored_messages,
    encode_stored_messages,
)
from protocol.rocketmq_remoting.route import (
    BrokerData,
    decode_route,
    encode_cluster_info,
    encode_route,
    encode_topic_list,
)
from tests.protocol.rocketmq_remoting.test_rmq_frame import BINARY_RESPONSE
from tests.protocol.rocketmq_remoting.test_rmq_message_layouts import (
    STORED_V1,
    STORED_V1_MESSAGE,
)
from tests.protocol.rocketmq_remoting.test_rmq_route_json import QUIRK, ROUTE

OPAQUE = 77


class Answer(NamedTuple):
    """One golden answer: what the handler builds, and its hand-written bytes."""

    request: RequestCode
    code: int
    ext_fields: dict[str, str]
    """What the handler's helper wrote into extFields."""
    ext_json: bytes
    """The same, as the JSON header spells it (b"" for none)."""
    body: bytes
    """What the handler's helper wrote as the body."""
    golden_body: bytes
    remark: str | None = None
    read: Callable[[RemotingCommand], object] | None = None
    """Reads the decoded answer back into a typed value ..."""
    expect: object = None
    """... which must equal this."""


ADDRS = {0: "10.0.0.1:10911", 1: "10.0.0.2:10911"}
BROKER = BrokerData(cluster="DefaultCluster", broker_name="broker-a", broker_addrs=ADDRS)
PULL_FOUND = PullMessageResponseHeader(
    suggest_which_broker_id=0, next_begin_offset=6, min_offset=0, max_offset=6
)
PULL_EMPTY = PullMessageResponseHeader(
    suggest_which_broker_id=1, next_begin_offset=6, min_offset=0, max_offset=6
)
PULL_JSON = b'{"suggestWhichBrokerId":"%d","nextBeginOffset":"6","minOffset":"0","maxOffset":"6"}'
SENT = SendMessageResponseHeader(
    msg_id="0A00000100002A9F0000000000001234,0A00000100002A9F0000000000001296",
    queue_id=1,
    queue_offset=7,
)


def _offset(cmd: RemotingCommand) -> int:
    return int(cmd.ext_fields["offset"])


def _empty(request: RequestCode) -> Answer:
    """A SUCCESS with no header fields and no body."""
    return Answer(request, ResponseCode.SUCCESS, {}, b"", b"", b"")


def _offset_row(request: RequestCode, offset: int) -> Answer:
    return Answer(
        request,
        ResponseCode.SUCCESS,
        offset_answer(offset),
        b'{"offset":"%d"}' % offset,
        b"",
        b"",
        read=_offset,
        expect=offset,
    )


def _one_stored_v1(request: RequestCode, ext_fields: dict[str, str], ext_json: bytes) -> Answer:
    """A SUCCESS whose body is the one stored message STORED_V1."""
    return Answer(
        request,
        ResponseCode.SUCCESS,
        ext_fields,
        ext_json,
        encode_stored_messages([STORED_V1_MESSAGE]),
        STORED_V1,
        read=lambda c: decode_stored_messages(c.body),
        expect=[STORED_V1_MESSAGE],
    )


ANSWERS: dict[str, Answer] = {
    "SEND_BATCH_MESSAGE": Answer(
        RequestCode.SEND_BATCH_MESSAGE,
        ResponseCode.SUCCESS,
        SENT.ext_fields(),
        b'{"msgId":"0A00000100002A9F0000000000001234,0A00000100002A9F0000000000001296",'
        b'"queueId":"1","queueOffset":"7"}',
        b"",
        b"",
        read=lambda c: SendMessageResponseHeader.parse(c.ext_fields),
        expect=SENT,
    ),
    "PULL_MESSAGE found": Answer(
        RequestCode.PULL_MESSAGE,
        ResponseCode.SUCCESS,
        PULL_FOUND.ext_fields(),
        PULL_JSON % 0,
        # Two records: the body is the records one after another.
        encode_stored_messages([STORED_V1_MESSAGE, STORED_V1_MESSAGE]),
        STORED_V1 + STORED_V1,
        read=lambda c: (
            PullMessageResponseHeader.parse(c.ext_fields),
            decode_stored_messages(c.body),
        ),
        expect=(PULL_FOUND, [STORED_V1_MESSAGE, STORED_V1_MESSAGE]),
    ),
    "PULL_MESSAGE not found, read from the slave": Answer(
        RequestCode.PULL_MESSAGE,
        ResponseCode.PULL_NOT_FOUND,
        PULL_EMPTY.ext_fields(),
        PULL_JSON % 1,
        b"",
        b"",
        read=lambda c: PullMessageResponseHeader.parse(c.ext_fields),
        expect=PULL_EMPTY,
    ),
    "PULL_MESSAGE offset moved": Answer(
        RequestCode.PULL_MESSAGE,
        ResponseCode.PULL_OFFSET_MOVED,
        PULL_FOUND.ext_fields(),
        PULL_JSON % 0,
        b"",
        b"",
        remark="offset 9 is past the queue's end 6",
    ),
    "QUERY_CONSUMER_OFFSET": _offset_row(RequestCode.QUERY_CONSUMER_OFFSET, 42),
    "QUERY_CONSUMER_OFFSET none": Answer(
        RequestCode.QUERY_CONSUMER_OFFSET,
        ResponseCode.QUERY_NOT_FOUND,
        {},
        b"",
        b"",
        b"",
        remark="group CG has no offset on T:0",
    ),
    "UPDATE_CONSUMER_OFFSET": _empty(RequestCode.UPDATE_CONSUMER_OFFSET),
    "SEARCH_OFFSET_BY_TIMESTAMP": _offset_row(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, 3),
    "GET_MAX_OFFSET": _offset_row(RequestCode.GET_MAX_OFFSET, 1_234_567_890_123),
    "GET_MIN_OFFSET": _offset_row(RequestCode.GET_MIN_OFFSET, 0),
    "HEART_BEAT": _empty(RequestCode.HEART_BEAT),
    "UNREGISTER_CLIENT": _empty(RequestCode.UNREGISTER_CLIENT),
    "CONSUMER_SEND_MSG_BACK": _empty(RequestCode.CONSUMER_SEND_MSG_BACK),
    "END_TRANSACTION": _empty(RequestCode.END_TRANSACTION),
    "GET_CONSUMER_LIST_BY_GROUP": Answer(
        RequestCode.GET_CONSUMER_LIST_BY_GROUP,
        ResponseCode.SUCCESS,
        {},
        b"",
        encode_consumer_list(["10.0.0.5@a", "10.0.0.6@b"]),
        b'{"consumerIdList":["10.0.0.5@a","10.0.0.6@b"]}',
    ),
    "LOCK_BATCH_MQ": Answer(
        RequestCode.LOCK_BATCH_MQ,
        ResponseCode.SUCCESS,
        {},
        b"",
        encode_lock_batch_answer([MessageQueue("T", "broker-a", 3)]),
        b'{"lockOKMQSet":[{"brokerName":"broker-a","queueId":3,"topic":"T"}]}',
    ),
    "UNLOCK_BATCH_MQ": _empty(RequestCode.UNLOCK_BATCH_MQ),
    "QUERY_MESSAGE": _one_stored_v1(
        RequestCode.QUERY_MESSAGE,
        QueryMessageHeader.answer(1_700_000_000_123, 0x1234),
        b'{"indexLastUpdateTimestamp":"1700000000123","indexLastUpdatePhyoffset":"4660"}',
    ),
    "VIEW_MESSAGE_BY_ID": _one_stored_v1(RequestCode.VIEW_MESSAGE_BY_ID, {}, b""),
    "GET_ROUTEINFO_BY_TOPIC": Answer(
        RequestCode.GET_ROUTEINFO_BY_TOPIC,
        ResponseCode.SUCCESS,
        {},
        b"",
        encode_route(ROUTE, standard_json=False),
        QUIRK,
        read=lambda c: decode_route(c.body),
        expect=ROUTE,
    ),
    "GET_ROUTEINFO_BY_TOPIC unknown": Answer(
        RequestCode.GET_ROUTEINFO_BY_TOPIC,
        ResponseCode.TOPIC_NOT_EXIST,
        {},
        b"",
        b"",
        b"",
        remark="No topic route info in name server for the topic: Nope",
    ),
    "GET_BROKER_CLUSTER_INFO": Answer(
        RequestCode.GET_BROKER_CLUSTER_INFO,
        ResponseCode.SUCCESS,
        {},
        b"",
        encode_cluster_info([BROKER], {"DefaultCluster": ["broker-a"]}, standard_json=False),
        b'{"brokerAddrTable":{"broker-a":{"brokerAddrs":{0:"10.0.0.1:10911",'
        b'1:"10.0.0.2:10911"},"brokerName":"broker-a","cluster":"DefaultCluster",'
        b'"enableActingMaster":false}},"clusterAddrTable":{"DefaultCluster":["broker-a"]}}',
    ),
    "GET_ALL_TOPIC_LIST_FROM_NAMESERVER": Answer(
        RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER,
        ResponseCode.SUCCESS,
        {},
        b"",
        encode_topic_list(["B", "A"]),
        b'{"topicList":["A","B"]}',
    ),
    "UPDATE_AND_CREATE_TOPIC": _empty(RequestCode.UPDATE_AND_CREATE_TOPIC),
    "GET_ALL_TOPIC_CONFIG": Answer(
        RequestCode.GET_ALL_TOPIC_CONFIG,
        ResponseCode.SUCCESS,
        {},
        b"",
        encode_topic_configs({"T": 2}, timestamp_ms=9),
        b'{"topicConfigTable":{"T":{"topicName":"T","readQueueNums":2,"writeQueueNums":2,'
        b'"perm":6,"topicFilterType":"SINGLE_TAG","topicSysFlag":0,"order":false,'
        b'"attributes":{}}},"dataVersion":{"stateVersion":0,"timestamp":9,"counter":0}}',
    ),
    "GET_BROKER_RUNTIME_INFO": Answer(
        RequestCode.GET_BROKER_RUNTIME_INFO,
        ResponseCode.SUCCESS,
        {},
        b"",
        encode_kv_table({"brokerVersionDesc": "V5_1_0", "commitLogMaxOffset": "4660"}),
        b'{"table":{"brokerVersionDesc":"V5_1_0","commitLogMaxOffset":"4660"}}',
    ),
    "UPDATE_AND_CREATE_SUBSCRIPTIONGROUP": _empty(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP),
    "GET_ALL_SUBSCRIPTIONGROUP_CONFIG": Answer(
        RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG,
        ResponseCode.SUCCESS,
        {},
        b"",
        encode_subscription_groups({"CG": {"retryMaxTimes": 16}}, timestamp_ms=9, counter=2),
        b'{"subscriptionGroupTable":{"CG":{"retryMaxTimes":16,"groupName":"CG",'
        b'"consumeEnable":true}},"dataVersion":{"stateVersion":0,"timestamp":9,"counter":2}}',
    ),
    "GET_TOPIC_STATS_INFO": Answer(
        RequestCode.GET_TOPIC_STATS_INFO,
        ResponseCode.SUCCESS,
        {},
        b"",
        encode_topic_stats([QueueOffsets("T", "broker-a", 0, 2, 6)]),
        b'{"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"T"}:'
        b'{"minOffset":2,"maxOffset":6,"lastUpdateTimestamp":0}}}',
        read=lambda c: decode_mq_table(c.body.decode()[len('{"offsetTable":') : -1]),
        expect={("T", "broker-a", 0): {"minOffset": 2, "maxOffset": 6, "lastUpdateTimestamp": 0}},
    ),
    "GET_CONSUMER_CONNECTION_LIST": Answer(
        RequestCode.GET_CONSUMER_CONNECTION_LIST,
        ResponseCode.SUCCESS,
        {},
        b"",
        encode_consumer_connection([ConnectionRow("10.0.0.5@a", "10.0.0.5:40000", "T")]),
        b'{"connectionSet":[{"clientId":"10.0.0.5@a","clientAddr":"10.0.0.5:40000",'
        b'"language":"OTHER","version":0}],"subscriptionTable":{"T":{"topic":"T"}}}',
    ),
    "GET_CONSUME_STATS": Answer(
        RequestCode.GET_CONSUME_STATS,
        ResponseCode.SUCCESS,
        {},
        b"",
        encode_consume_stats([ConsumeRow("T", "broker-a", 1, 6, 4, 1_700_000_000_000)]),
        b'{"offsetTable":{{"brokerName":"broker-a","queueId":1,"topic":"T"}:'
        b'{"brokerOffset":6,"consumerOffset":4,"pullOffset":4,"lastTimestamp":1700000000000}},'
        b'"consumeTps":0.0}',
    ),
    # Every code may get these from the door itself.
    "a code not served": Answer(
        RequestCode.GET_ROUTEINFO_BY_TOPIC,  # the request's code does not show in the answer
        ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
        {},
        b"",
        b"",
        b"",
        remark="request code 9999 is not supported by this broker's RocketMQ remoting door",
    ),
    "a bad signature": Answer(
        RequestCode.SEND_MESSAGE_V2,
        ResponseCode.NO_PERMISSION,
        {},
        b"",
        b"",
        b"",
        remark="signature mismatch for access key \u00e9t\u00e9",  # UTF-8 in both types
    ),
}


def _request(code: int, serialize_type: SerializeType) -> RemotingCommand:
    return RemotingCommand(code=code, opaque=OPAQUE, version=121, serialize_type=serialize_type)


def _json_golden(a: Answer) -> bytes:
    ext = b'"extFields":%s,' % a.ext_json if a.ext_json else b""
    remark = b'"remark":"%s",' % a.remark.encode() if a.remark is not None else b""
    header = (
        b'{"code":%d,%s"flag":1,"language":"JAVA","opaque":%d,%s'
        b'"serializeTypeCurrentRPC":"JSON","version":0}' % (a.code, ext, OPAQUE, remark)
    )
    return struct.pack(">ii", 4 + len(header) + len(a.golden_body), len(header)) + header


def _binary_header(code: int, opaque: int, remark: str | None, ext: dict[str, str]) -> bytes:
    """RocketMQ's binary header, field by field (language JAVA, version 0, flag response)."""
    raw_remark = (remark or "").encode()
    entries = b"".join(
        struct.pack(">h", len(k.encode())) + k.encode() + struct.pack(">i", len(v.encode()))
        + v.encode()
        for k, v in ext.items()
    )  # fmt: skip
    return (
        struct.pack(">hbhii", code, 0, 0, opaque, 1)
        + struct.pack(">i", len(raw_remark))
        + raw_remark
        + struct.pack(">i", len(entries))
        + entries
    )


def _binary_golden(a: Answer) -> bytes:
    header = _binary_header(a.code, OPAQUE, a.remark, a.ext_fields)
    prefix = struct.pack(">iI", 4 + len(header) + len(a.golden_body), (1 << 24) | len(header))
    return prefix + header


def test_the_binary_writer_here_matches_the_hex_golden() -> None:
    header = _binary_header(ResponseCode.SUCCESS, 7, "ok", {})
    assert struct.pack(">iI", 4 + len(header), (1 << 24) | len(header)) + header == BINARY_RESPONSE


@pytest.mark.parametrize(
    "serialize_type", [SerializeType.JSON, SerializeType.ROCKETMQ], ids=["JSON", "ROCKETMQ"]
)
@pytest.mark.parametrize("name", list(ANSWERS))
def test_answer_golden(name: str, serialize_type: SerializeType) -> None:
    a = ANSWERS[name]
    golden = (
        _json_golden(a) if serialize_type == SerializeType.JSON else _binary_golden(a)
    ) + a.golden_body
    built = make_response(
        _request(a.request, serialize_type),
        a.code,
        remark=a.remark,
        ext_fields=a.ext_fields,
        body=a.body,
    )
    assert encode_command(built) == golden
    back = decode_frame(golden[4:])
    assert (back.code, back.opaque, back.flag, back.remark, back.serialize_type) == (
        a.code,
        OPAQUE,
        1,
        a.remark,
        serialize_type,
    )
    assert back.ext_fields == a.ext_fields and back.body == a.golden_body
    assert encode_command(back) == golden
    if a.read is not None:
        assert a.read(back) == a.expect
