"""The pure translation between the gRPC protocol and the broker's requests (broker/grpc)."""

from __future__ import annotations

import pytest

pytest.importorskip("google.protobuf")

from broker.grpc.translate import Refused, message_queues, send_request, status_code
from protocol.codes import ResponseCode
from protocol.message import decode_properties
from protocol.rocketmq_v2 import definition_pb2 as pb


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
        (lambda m: setattr(m.system_properties, "body_encoding", pb.GZIP), pb.NOT_IMPLEMENTED),
        (
            lambda m: setattr(m.system_properties, "message_type", pb.TRANSACTION),
            pb.NOT_IMPLEMENTED,
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


def test_route_lists_every_master_as_broker_id_0_at_its_grpc_endpoint() -> None:
    route = {
        "topic": "T",
        "brokers": [
            {"brokerName": "b", "masterAddress": "10.0.0.2:10921", "slaves": [], "queues": 1},
            {"brokerName": "a", "masterAddress": "10.0.0.1:10911", "slaves": [], "queues": 2},
            {"brokerName": "c", "masterAddress": None, "slaves": ["x:1"], "queues": 4},
        ],
    }
    own = {"10.0.0.1:10911": ("10.0.0.1", 7000)}
    queues = message_queues(pb.Resource(name="T"), route, own)
    seen = [
        (q.broker.name, q.id, q.broker.id, q.broker.endpoints.addresses[0].port) for q in queues
    ]
    # a: this broker's own endpoint; b: another master's default (remoting port + 2); c: no
    # master, not listed.
    assert seen == [("a", 0, 0, 7000), ("a", 1, 0, 7000), ("b", 0, 0, 10923)]
    assert all(q.permission == pb.READ_WRITE for q in queues)
    assert list(queues[0].accept_message_types) == [pb.NORMAL, pb.FIFO, pb.DELAY]
    assert queues[0].topic.name == "T"
