"""The classic clients' request headers and JSON bodies: golden frames as ali-ons and the Java
client write them (written out by hand), read into typed headers, and the answers written back
in RocketMQ's field names."""

from __future__ import annotations

import json
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.rocketmq_remoting.bodies import (
    BodyError,
    ConsumerData,
    HeartbeatData,
    LockBatchRequest,
    MessageQueue,
    SubscriptionData,
    decode_heartbeat,
    decode_lock_batch,
    encode_consumer_list,
    encode_lock_batch_answer,
)
from protocol.rocketmq_remoting.codes import RequestCode, ResponseCode
from protocol.rocketmq_remoting.frame import (
    SerializeType,
    decode_frame,
    encode_command,
    make_response,
)
from protocol.rocketmq_remoting.headers import (
    SEND_V2_NAMES,
    TRANSACTION_COMMIT_TYPE,
    CheckTransactionStateHeader,
    ConsumerSendMsgBackHeader,
    EndTransactionHeader,
    GroupHeader,
    HeaderError,
    PullMessageHeader,
    PullMessageResponseHeader,
    PullSysFlag,
    QueryConsumerOffsetHeader,
    QueryMessageHeader,
    QueueHeader,
    SearchOffsetHeader,
    SendMessageHeader,
    SendMessageResponseHeader,
    UnregisterClientHeader,
    UpdateConsumerOffsetHeader,
    ViewMessageHeader,
    offset_answer,
)
from protocol.rocketmq_remoting.message_decoder import (
    StoredMessage,
    decode_stored_messages,
    encode_stored_messages,
)


def _json_frame(header: bytes, body: bytes = b"") -> bytes:
    return struct.pack(">iI", 4 + len(header) + len(body), len(header)) + header + body


# SEND_MESSAGE_V2 as ali-ons writes it: its header object copied into extFields as is (numbers
# and booleans), in its own order, properties with TAGS, KEYS and UNIQ_KEY.
ALI_ONS_SEND_V2 = _json_frame(
    b'{"code":310,"language":"JAVA","opaque":12,"flag":0,"version":121,"extFields":'
    b'{"a":"PG","b":"T","c":"TBW102","d":4,"e":1,"f":0,"g":1700000000000,"h":0,'
    b'"i":"TAGS\\u0001TagA\\u0002KEYS\\u0001k1\\u0002UNIQ_KEY\\u0001ID1\\u0002",'
    b'"j":0,"k":false,"l":16}}',
    b"hello",
)


def test_ali_ons_send_v2_golden() -> None:
    cmd = decode_frame(ALI_ONS_SEND_V2[4:])
    assert cmd.code == RequestCode.SEND_MESSAGE_V2 and cmd.body == b"hello"
    header = SendMessageHeader.parse(cmd.ext_fields, short_names=True)
    assert header == SendMessageHeader(
        producer_group="PG",
        topic="T",
        default_topic="TBW102",
        default_topic_queue_nums=4,
        queue_id=1,
        sys_flag=0,
        born_timestamp=1_700_000_000_000,
        flag=0,
        properties="TAGS\x01TagA\x02KEYS\x01k1\x02UNIQ_KEY\x01ID1\x02",
        reconsume_times=0,
        unit_mode=False,
        max_reconsume_times=16,
    )
    # Written back as Java writes it: every value a string.
    assert header.ext_fields(short_names=True) == {
        "a": "PG",
        "b": "T",
        "c": "TBW102",
        "d": "4",
        "e": "1",
        "f": "0",
        "g": "1700000000000",
        "h": "0",
        "i": "TAGS\x01TagA\x02KEYS\x01k1\x02UNIQ_KEY\x01ID1\x02",
        "j": "0",
        "k": "false",
        "l": "16",
        "m": "false",
    }


def test_send_v1_long_names_in_a_binary_frame() -> None:
    entries = b""
    for key, value in [
        (b"producerGroup", b"PG"),
        (b"topic", b"T"),
        (b"defaultTopic", b"TBW102"),
        (b"defaultTopicQueueNums", b"4"),
        (b"queueId", b"-1"),
        (b"sysFlag", b"0"),
        (b"bornTimestamp", b"5"),
        (b"flag", b"3"),
        (b"batch", b"TRUE"),
        (b"bname", b"broker-a"),
    ]:
        entries += struct.pack(">h", len(key)) + key + struct.pack(">i", len(value)) + value
    header = (
        struct.pack(">hBhii", 10, 0, 401, 1, 0)
        + struct.pack(">i", 0)
        + struct.pack(">i", len(entries))
        + entries
    )
    frame = struct.pack(">iI", 4 + len(header) + 1, 1 << 24 | len(header)) + header + b"x"
    cmd = decode_frame(frame[4:])
    assert cmd.serialize_type == SerializeType.ROCKETMQ
    parsed = SendMessageHeader.parse(cmd.ext_fields, short_names=False)
    assert (parsed.queue_id, parsed.flag, parsed.batch, parsed.broker_name) == (
        -1,
        3,
        True,
        "broker-a",
    )
    assert parsed.reconsume_times is None and parsed.properties == ""
    assert (
        SendMessageHeader.parse(parsed.ext_fields(short_names=False), short_names=False) == parsed
    )


def test_v2_names_are_rocketmqs() -> None:
    assert "".join(SEND_V2_NAMES) == "abcdefghijklmn"
    assert [SEND_V2_NAMES[k] for k in "abeil"] == [
        "producerGroup",
        "topic",
        "queueId",
        "properties",
        "maxReconsumeTimes",
    ]


def test_send_answer_golden() -> None:
    request = decode_frame(ALI_ONS_SEND_V2[4:])
    answer = make_response(
        request,
        ResponseCode.SUCCESS,
        ext_fields=SendMessageResponseHeader(
            msg_id="0A00000100002A9F0000000000001234", queue_id=1, queue_offset=7
        ).ext_fields(),
    )
    header = (
        b'{"code":0,"extFields":{"msgId":"0A00000100002A9F0000000000001234","queueId":"1",'
        b'"queueOffset":"7"},"flag":1,"language":"JAVA","opaque":12,'
        b'"serializeTypeCurrentRPC":"JSON","version":0}'
    )
    assert encode_command(answer) == _json_frame(header)
    assert SendMessageResponseHeader.parse(decode_frame(_json_frame(header)[4:]).ext_fields) == (
        SendMessageResponseHeader(
            msg_id="0A00000100002A9F0000000000001234", queue_id=1, queue_offset=7
        )
    )


ALI_ONS_PULL = _json_frame(
    b'{"code":11,"language":"JAVA","opaque":40,"flag":0,"version":121,"extFields":'
    b'{"consumerGroup":"CG","topic":"T","queueId":2,"queueOffset":5,"maxMsgNums":32,'
    b'"sysFlag":7,"commitOffset":4,"suspendTimeoutMillis":15000,"subscription":"TagA",'
    b'"subVersion":1700000000000}}'
)


def test_ali_ons_pull_golden_and_its_answer() -> None:
    cmd = decode_frame(ALI_ONS_PULL[4:])
    pull = PullMessageHeader.parse(cmd.ext_fields)
    assert pull == PullMessageHeader(
        consumer_group="CG",
        topic="T",
        queue_id=2,
        queue_offset=5,
        max_msg_nums=32,
        sys_flag=PullSysFlag.COMMIT_OFFSET | PullSysFlag.SUSPEND | PullSysFlag.SUBSCRIPTION,
        commit_offset=4,
        suspend_timeout_millis=15000,
        sub_version=1_700_000_000_000,
        subscription="TagA",
    )
    assert PullMessageHeader.parse(pull.ext_fields()) == pull
    msg = StoredMessage(
        topic="T",
        body=b"m",
        queue_id=2,
        queue_offset=5,
        physical_offset=100,
        properties={"TAGS": "TagA"},
        store_host="10.0.0.1:10911",
    )
    answer = make_response(
        cmd,
        ResponseCode.SUCCESS,
        ext_fields=PullMessageResponseHeader(
            suggest_which_broker_id=0, next_begin_offset=6, min_offset=0, max_offset=6
        ).ext_fields(),
        body=encode_stored_messages([msg]),
    )
    header = (
        b'{"code":0,"extFields":{"suggestWhichBrokerId":"0","nextBeginOffset":"6",'
        b'"minOffset":"0","maxOffset":"6"},"flag":1,"language":"JAVA","opaque":40,'
        b'"serializeTypeCurrentRPC":"JSON","version":0}'
    )
    raw = encode_command(answer)
    assert raw[: 8 + len(header)] == struct.pack(">iI", len(raw) - 4, len(header)) + header
    back = decode_frame(raw[4:])
    assert PullMessageResponseHeader.parse(back.ext_fields).next_begin_offset == 6
    assert decode_stored_messages(back.body) == [msg]


@pytest.mark.parametrize(
    ("fields", "what"),
    [
        ({"topic": "T"}, "header field consumerGroup is missing"),
        ({**{k: "1" for k in ("queueId", "queueOffset", "maxMsgNums", "sysFlag")}}, "missing"),
    ],
)
def test_pull_header_missing_fields(fields: dict[str, str], what: str) -> None:
    with pytest.raises(HeaderError, match=what):
        PullMessageHeader.parse(fields)


def _pull_fields(**changes: str) -> dict[str, str]:
    fields = decode_frame(ALI_ONS_PULL[4:]).ext_fields
    fields.update(changes)
    return fields


@pytest.mark.parametrize(
    ("changes", "what"),
    [
        ({"queueId": "x"}, "queueId is not an integer: 'x'"),
        ({"queueId": "2147483648"}, "queueId 2147483648 is out of range"),
        ({"queueOffset": "1.5"}, "queueOffset is not an integer"),
        ({"sysFlag": "-1"}, "sysFlag -1 is out of range"),
    ],
)
def test_pull_header_malformed_fields(changes: dict[str, str], what: str) -> None:
    with pytest.raises(HeaderError, match=what):
        PullMessageHeader.parse(_pull_fields(**changes))


def test_send_header_missing_fields_name_the_long_name() -> None:
    with pytest.raises(HeaderError, match="header field producerGroup is missing"):
        SendMessageHeader.parse({"b": "T"}, short_names=True)


@pytest.mark.parametrize(
    ("changes", "what"),
    [
        ({"e": "x"}, "queueId is not an integer: 'x'"),
        ({"g": str(2**63)}, f"bornTimestamp {2**63} is out of range"),
        ({"j": "2147483648"}, "reconsumeTimes 2147483648 is out of range"),
        ({"l": "many"}, "maxReconsumeTimes is not an integer"),
    ],
)
def test_send_header_malformed_fields_name_the_long_name(
    changes: dict[str, str], what: str
) -> None:
    fields = decode_frame(ALI_ONS_SEND_V2[4:]).ext_fields
    with pytest.raises(HeaderError, match=what):
        SendMessageHeader.parse({**fields, **changes}, short_names=True)


def test_offset_headers() -> None:
    assert QueueHeader.parse({"topic": "T", "queueId": "3"}) == QueueHeader("T", 3)
    assert QueryConsumerOffsetHeader.parse(
        {"consumerGroup": "CG", "topic": "T", "queueId": "0", "setZeroIfNotFound": "false"}
    ) == QueryConsumerOffsetHeader("CG", "T", 0, False)
    assert UpdateConsumerOffsetHeader.parse(
        {"consumerGroup": "CG", "topic": "T", "queueId": "0", "commitOffset": "9"}
    ) == UpdateConsumerOffsetHeader("CG", "T", 0, 9)
    assert SearchOffsetHeader.parse(
        {"topic": "T", "queueId": "1", "timestamp": "1700000000000"}
    ) == SearchOffsetHeader("T", 1, 1_700_000_000_000)
    assert offset_answer(42) == {"offset": "42"}


def test_client_retry_and_transaction_headers() -> None:
    assert UnregisterClientHeader.parse({"clientID": "c@1", "consumerGroup": "CG"}) == (
        UnregisterClientHeader("c@1", None, "CG")
    )
    # ali-ons: offset is the CommitLog offset, a number it copied in; unitMode it adds.
    back = ConsumerSendMsgBackHeader.parse(
        {
            "offset": "4096",
            "group": "CG",
            "delayLevel": "0",
            "originMsgId": "ID",
            "originTopic": "T",
            "unitMode": "false",
            "maxReconsumeTimes": "2",
        }
    )
    assert back == ConsumerSendMsgBackHeader(4096, "CG", 0, "ID", "T", 2)
    end = EndTransactionHeader.parse(
        {
            "producerGroup": "PG",
            "tranStateTableOffset": "3",
            "commitLogOffset": "4096",
            "commitOrRollback": str(TRANSACTION_COMMIT_TYPE),
            "msgId": "ID",
            "fromTransactionCheck": "true",
        }
    )
    assert (end.commit_or_rollback, end.from_transaction_check, end.topic) == (8, True, None)
    check = CheckTransactionStateHeader(
        tran_state_table_offset=3, commit_log_offset=4096, msg_id="ID", transaction_id="TX"
    )
    assert check.ext_fields() == {
        "tranStateTableOffset": "3",
        "commitLogOffset": "4096",
        "msgId": "ID",
        "transactionId": "TX",
    }
    assert CheckTransactionStateHeader.parse(check.ext_fields()) == check
    assert GroupHeader.parse({"consumerGroup": "CG"}).ext_fields() == {"consumerGroup": "CG"}
    assert QueryMessageHeader.parse(
        {"topic": "T", "key": "k", "maxNum": "32", "beginTimestamp": "0", "endTimestamp": "9"}
    ) == QueryMessageHeader("T", "k", 32, 0, 9)
    assert QueryMessageHeader.answer(5, 6) == {
        "indexLastUpdateTimestamp": "5",
        "indexLastUpdatePhyoffset": "6",
    }
    assert ViewMessageHeader.parse({"offset": "4096"}) == ViewMessageHeader(4096)


long_ints = st.integers(-(2**63), 2**63 - 1)
ints = st.integers(-(2**31), 2**31 - 1)
names = st.text(min_size=1, max_size=10)


@settings(deadline=None)
@given(
    st.builds(
        SendMessageHeader,
        producer_group=names,
        topic=names,
        default_topic=names,
        default_topic_queue_nums=ints,
        queue_id=ints,
        sys_flag=ints,
        born_timestamp=long_ints,
        flag=ints,
        properties=st.text(max_size=20),
        reconsume_times=st.none() | ints,
        unit_mode=st.booleans(),
        batch=st.booleans(),
        max_reconsume_times=st.none() | ints,
        broker_name=st.none() | names,
    ),
    st.booleans(),
)
def test_send_header_round_trip(header: SendMessageHeader, short: bool) -> None:
    assert (
        SendMessageHeader.parse(header.ext_fields(short_names=short), short_names=short) == header
    )


# -- bodies ----------------------------------------------------------------------------------

ALI_ONS_HEARTBEAT = (
    b'{"clientID":"10.0.0.9@4242","consumerDataSet":[{"groupName":"CG",'
    b'"consumeType":"CONSUME_PASSIVELY","messageModel":"CLUSTERING",'
    b'"consumeFromWhere":"CONSUME_FROM_LAST_OFFSET","subscriptionDataSet":[{"topic":"T",'
    b'"subString":"TagA || TagB","classFilterMode":false,"tagsSet":["TagA","TagB"],'
    b'"codeSet":[2598919,2598920],"subVersion":1700000000000}],"unitMode":false}],'
    b'"producerDataSet":[{"groupName":"PG"}]}'
)


def test_ali_ons_heartbeat_golden() -> None:
    assert decode_heartbeat(ALI_ONS_HEARTBEAT) == HeartbeatData(
        client_id="10.0.0.9@4242",
        producer_groups=("PG",),
        consumers=(
            ConsumerData(
                group_name="CG",
                consume_type="CONSUME_PASSIVELY",
                message_model="CLUSTERING",
                consume_from_where="CONSUME_FROM_LAST_OFFSET",
                subscriptions=(
                    SubscriptionData(
                        topic="T",
                        sub_string="TagA || TagB",
                        tags=("TagA", "TagB"),
                        expression_type="TAG",
                        sub_version=1_700_000_000_000,
                    ),
                ),
            ),
        ),
    )


def test_java_heartbeat_with_its_extra_fields() -> None:
    body = json.dumps(
        {
            "clientID": "c@1",
            "consumerDataSet": [],
            "heartbeatFingerprint": 0,
            "producerDataSet": [{"groupName": "PG"}, {"groupName": "CLIENT_INNER_PRODUCER"}],
            "withoutSub": False,
        }
    ).encode()
    assert decode_heartbeat(body).producer_groups == ("PG", "CLIENT_INNER_PRODUCER")


@pytest.mark.parametrize(
    ("body", "what"),
    [
        (b"[]", "not an object"),
        (b"{", "does not parse"),
        (b"{}", "heartbeat.clientID is missing"),
        (b'{"clientID":1}', "heartbeat.clientID is not str"),
        (b'{"clientID":"c","producerDataSet":[{"groupName":3}]}', "groupName is not str"),
        (
            b'{"clientID":"c","consumerDataSet":[{"groupName":"g","subscriptionDataSet":[{}]}]}',
            "subscriptionDataSet[].topic is missing",
        ),
        (
            b'{"clientID":"c","consumerDataSet":[{"groupName":"g","subscriptionDataSet":'
            b'[{"topic":"T","tagsSet":[1]}]}]}',
            "tagsSet is not a list of strings",
        ),
    ],
)
def test_bad_heartbeats(body: bytes, what: str) -> None:
    with pytest.raises(BodyError, match=what.replace("[", r"\[").replace("]", r"\]")):
        decode_heartbeat(body)


def test_consumer_list_and_lock_batch_bodies() -> None:
    assert encode_consumer_list(["a@1", "b@2"]) == b'{"consumerIdList":["a@1","b@2"]}'
    body = (
        b'{"consumerGroup":"CG","clientId":"a@1","onlyThisBroker":false,'
        b'"mqSet":[{"brokerName":"broker-a","queueId":1,"topic":"T"}]}'
    )
    request = decode_lock_batch(body)
    assert request == LockBatchRequest(
        consumer_group="CG", client_id="a@1", queues=(MessageQueue("T", "broker-a", 1),)
    )
    assert encode_lock_batch_answer(request.queues) == (
        b'{"lockOKMQSet":[{"brokerName":"broker-a","queueId":1,"topic":"T"}]}'
    )
    with pytest.raises(BodyError, match=r"mqSet\[\].queueId is not int"):
        decode_lock_batch(body.replace(b'"queueId":1', b'"queueId":"1"'))
