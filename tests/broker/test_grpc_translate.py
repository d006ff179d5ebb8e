"""The pure translation between the gRPC protocol and the broker's requests (broker/grpc)."""

from __future__ import annotations

import gzip
import hashlib

import pytest

pytest.importorskip("google.protobuf")

from broker.grpc.telemetry import half_message
from broker.grpc.translate import (
    Refused,
    group_members,
    grpc_endpoints,
    half_offset_of,
    message_queues,
    parse_recall_handle,
    recall_handle,
    send_request,
    status_code,
    transaction_group,
)
from protocol.codes import ResponseCode
from protocol.message import (
    Message,
    RecordEncoder,
    decode_properties,
    decode_record,
    make_msg_id,
)
from protocol.rocketmq_v2 import definition_pb2 as pb

CONFLICT = pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE


def _message(**sysp: object) -> pb.Message:
    m = pb.Message(topic=pb.Resource(name="T"), body=b"x")
    m.system_properties.message_id = "01ABC"
    for name, value in sysp.items():
        setattr(m.system_properties, name, value)
    return m


def test_a_message_becomes_send_message_with_its_id_tags_keys_and_properties() -> None:
    m = _message(tag="TagA", message_group="g1")
    m.system_properties.keys.extend(["k1", "k2"])
    m.system_properties.born_timestamp.seconds = 1700000000
    m.user_properties["color"] = "red"
    req = send_request(m, "10.0.0.1:5000", 1024)
    assert req.message_id == "01ABC"
    assert req.body == b"x"
    h = req.header
    assert (h["topic"], h["queueId"], h["tags"], h["keys"]) == ("T", -1, "TagA", "k1 k2")
    assert h["bornTimestamp"] == 1700000000000 and h["bornHost"] == "10.0.0.1:5000"
    props = decode_properties(str(h["properties"]).encode())
    assert props == {"color": "red", "UNIQ_KEY": "01ABC", "__SHARDINGKEY": "g1"}


def test_a_delivery_timestamp_asks_for_scheduled_delivery_in_ms() -> None:
    m = _message()
    m.system_properties.delivery_timestamp.seconds = 1800000000
    m.system_properties.delivery_timestamp.nanos = 250_000_000
    props = decode_properties(str(send_request(m, "", 1024).header["properties"]).encode())
    assert props["__STARTDELIVERTIME"] == "1800000000250"


@pytest.mark.parametrize(
    ("change", "code"),
    [
        (lambda m: m.system_properties.ClearField("message_id"), pb.ILLEGAL_MESSAGE_ID),
        (lambda m: m.topic.ClearField("name"), pb.ILLEGAL_TOPIC),
        (lambda m: m.ClearField("body"), pb.MESSAGE_BODY_EMPTY),
        (lambda m: setattr(m, "body", b"y" * 1025), pb.MESSAGE_BODY_TOO_LARGE),
        (
            lambda m: m.user_properties.__setitem__("UNIQ_KEY", "forged"),
            pb.ILLEGAL_MESSAGE_PROPERTY_KEY,
        ),
        (
            lambda m: m.user_properties.__setitem__("TRAN_MSG", "true"),
            pb.ILLEGAL_MESSAGE_PROPERTY_KEY,
        ),
        (lambda m: setattr(m.system_properties, "body_encoding", pb.GZIP), pb.MESSAGE_CORRUPTED),
        (lambda m: setattr(m.system_properties, "message_type", pb.LITE), pb.UNSUPPORTED),
        (lambda m: setattr(m.topic, "resource_namespace", "prod"), pb.UNSUPPORTED),
        (lambda m: setattr(m.system_properties, "message_type", pb.FIFO), CONFLICT),
        (lambda m: setattr(m.system_properties, "message_type", pb.DELAY), CONFLICT),
        (
            lambda m: (
                setattr(m.system_properties, "message_type", pb.TRANSACTION),
                setattr(m.system_properties, "message_group", "g"),
            ),
            CONFLICT,
        ),
        (
            lambda m: (
                setattr(m.system_properties, "message_type", pb.FIFO),
                setattr(m.system_properties, "message_group", "a\x00b"),
            ),
            pb.ILLEGAL_MESSAGE_GROUP,
        ),
    ],
)
def test_bad_messages_are_refused_with_their_code(change: object, code: int) -> None:
    m = _message()
    change(m)  # type: ignore[operator]
    with pytest.raises(Refused) as refused:
        send_request(m, "", 1024)
    assert refused.value.code == code


def test_remoting_answers_map_to_status_codes() -> None:
    assert status_code(ResponseCode.SUCCESS) == pb.OK
    assert status_code(ResponseCode.TOPIC_NOT_EXIST) == pb.TOPIC_NOT_FOUND
    assert status_code(ResponseCode.SYSTEM_BUSY) == pb.TOO_MANY_REQUESTS
    assert status_code(ResponseCode.NOT_MASTER) == pb.INTERNAL_ERROR


def test_route_lists_every_group_with_a_master_as_broker_id_0_at_its_brokers_endpoints() -> None:
    route = {
        "topic": "T",
        "brokers": [
            {"brokerName": "b", "masterAddress": "10.0.0.2:10921", "slaves": [], "queues": 1},
            {
                "brokerName": "a",
                "masterAddress": "10.0.0.1:10911",
                "slaves": ["10.0.0.3:10911"],
                "queues": 2,
            },
            {"brokerName": "c", "masterAddress": None, "slaves": ["x:1"], "queues": 4},
        ],
    }
    members = group_members(route)
    assert members == {"a": ["10.0.0.1:10911", "10.0.0.3:10911"], "b": ["10.0.0.2:10921"]}
    endpoints = {"a": [("10.0.0.1", 7000), ("10.0.0.3", 7001)], "b": [("10.0.0.2", 7002)]}
    queues = message_queues(pb.Resource(name="T"), route, endpoints)
    seen = [
        (
            q.broker.name,
            q.id,
            q.broker.id,
            [(a.host, a.port) for a in q.broker.endpoints.addresses],
        )
        for q in queues
    ]
    # c: no master, not listed.
    assert seen == [
        ("a", 0, 0, endpoints["a"]),
        ("a", 1, 0, endpoints["a"]),
        ("b", 0, 0, endpoints["b"]),
    ]
    assert all(q.permission == pb.READ_WRITE for q in queues)
    assert all(q.broker.endpoints.scheme == pb.IPv4 for q in queues)
    assert list(queues[0].accept_message_types) == [pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION]
    assert queues[0].topic.name == "T"
    # A group whose brokers have no gRPC endpoint is not listed either.
    assert message_queues(pb.Resource(name="T"), route, {"a": []}) == []


def test_a_routes_queues_carry_the_topics_permission_and_type() -> None:
    """The route's perm (PermName bits) as MessageQueue.permission; the topic's message.type as
    the only accepted type when the broker checks types, else every type (MIXED: every)."""
    route = {
        "brokers": [
            {"brokerName": "a", "masterAddress": "m:1", "queues": 1, "perm": 4},
            {"brokerName": "b", "masterAddress": "m:2", "queues": 1, "messageType": "FIFO"},
            {"brokerName": "c", "masterAddress": "m:3", "queues": 1, "perm": 2},
            {"brokerName": "d", "masterAddress": "m:4", "queues": 1, "messageType": "MIXED"},
        ]
    }
    endpoints = {name: [("10.0.0.1", 7000)] for name in "abcd"}
    every = [pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION]
    checked = message_queues(pb.Resource(name="T"), route, endpoints, check_types=True)
    assert [q.permission for q in checked] == [pb.READ, pb.READ_WRITE, pb.WRITE, pb.READ_WRITE]
    assert [list(q.accept_message_types) for q in checked] == [
        [pb.NORMAL],
        [pb.FIFO],
        [pb.NORMAL],
        every,
    ]
    unchecked = message_queues(pb.Resource(name="T"), route, endpoints)
    assert all(list(q.accept_message_types) == every for q in unchecked)


def test_a_host_name_endpoint_is_one_domain_name_address() -> None:
    e = grpc_endpoints([("broker-a.example", 7000), ("10.0.0.3", 7001)])
    assert e.scheme == pb.DOMAIN_NAME
    assert [(a.host, a.port) for a in e.addresses] == [("broker-a.example", 7000)]
    assert grpc_endpoints([("::1", 7000)]).scheme == pb.IPv6


def test_a_transactional_message_is_a_half_of_its_topics_grpc_producer_group() -> None:
    m = _message(message_type=pb.TRANSACTION)
    req = send_request(m, "", 1024)
    props = decode_properties(str(req.header["properties"]).encode())
    assert req.kind == pb.TRANSACTION
    assert props["TRAN_MSG"] == "true"
    assert props["PGROUP"] == "GRPC_TX_T" == transaction_group("T")
    assert props["__transactionId__"] == "01ABC"


def test_a_gzip_body_is_stored_inflated_and_checked_against_the_limit() -> None:
    m = _message(body_encoding=pb.GZIP)
    m.body = gzip.compress(b"z" * 1000)
    assert send_request(m, "", 1024).body == b"z" * 1000
    m.body = gzip.compress(b"z" * 5000)  # small on the wire, over the limit inflated
    with pytest.raises(Refused) as refused:
        send_request(m, "", 1024)
    assert refused.value.code == pb.MESSAGE_BODY_TOO_LARGE


def test_recall_handles_and_transaction_ids_round_trip_and_refuse_garbage() -> None:
    msg_id = make_msg_id("10.0.0.1:10911", 4096)
    assert parse_recall_handle(recall_handle("broker-a", msg_id)) == ("broker-a", msg_id)
    assert half_offset_of(msg_id) == 4096
    for bad in ("", "not base64!", recall_handle("a", "nothex")):
        with pytest.raises(Refused) as refused:
            parse_recall_handle(bad)
        assert refused.value.code == pb.BAD_REQUEST
    with pytest.raises(Refused) as refused:
        half_offset_of("xyz")
    assert refused.value.code == pb.INVALID_TRANSACTION_ID


def test_a_stored_half_reads_back_as_the_message_the_client_sent() -> None:
    props = {
        "UNIQ_KEY": "01ABC",
        "color": "red",
        "TRAN_MSG": "true",
        "PGROUP": "GRPC_TX_T",
        "__transactionId__": "01ABC",
        "REAL_TOPIC": "T",
        "REAL_QID": "1",
    }
    half = Message(
        topic="RMQ_SYS_TRANS_HALF_TOPIC",
        body=b"body",
        keys="k1 k2",
        tags="TagA",
        properties=props,
        born_timestamp=1234,
        born_host="1.2.3.4:5",
    )
    raw = RecordEncoder("10.0.0.1:10911").encode(
        half, queue_id=0, queue_offset=0, physical_offset=4096, store_timestamp=5678
    )
    m = half_message(decode_record(raw))
    sysp = m.system_properties
    assert (m.topic.name, m.body, sysp.message_id, sysp.tag) == ("T", b"body", "01ABC", "TagA")
    assert list(sysp.keys) == ["k1", "k2"] and sysp.message_type == pb.TRANSACTION
    assert dict(m.user_properties) == {"color": "red"}
    assert sysp.body_digest.type == pb.MD5
    assert sysp.body_digest.checksum == hashlib.md5(b"body").hexdigest().upper()
    assert sysp.born_timestamp.seconds == 1 and sysp.born_timestamp.nanos == 234_000_000
