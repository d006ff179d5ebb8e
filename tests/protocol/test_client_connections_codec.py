"""Who a client is, on the wire (issue 28 item 3): HEART_BEAT's optional language, version,
protocol and clientAddress; GET_PRODUCER_CONNECTION_LIST (204); GET_CONSUMER_CONNECTION_LIST's
new fields. Golden bytes, round trips, an earlier peer's frames read with the defaults."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.broker_requests.clients import Heartbeat, consume_type
from protocol.broker_requests.producers import (
    ProducerConnection,
    ProducerConnections,
    ProducerConnectionsQuery,
)
from protocol.codes import RequestCode
from protocol.consume_stats import ConsumerConnection, decode_connections, encode_connections
from protocol.fields import FieldError
from protocol.remoting import FrameDecoder, encode_frame, request

GOLDEN: list[tuple[Any, str]] = [
    (
        Heartbeat(group="G", client_id="c1", topic="T", language="PYTHON", version="0.1.0"),
        "00000049960022010085a8636c69656e744964a26331ad636f6e73756d657247726f7570a147a5746f7069"
        "63a154a86c616e6775616765a6505954484f4ea776657273696f6ea5302e312e30c0",
    ),
    (
        Heartbeat(
            group="PG",
            client_id="p1",
            producer=True,
            protocol="gRPC",
            client_address="10.0.0.1:5000",
        ),
        "0000004e960022010084a8636c69656e744964a27031ad70726f647563657247726f7570a25047a870726f"
        "746f636f6ca467525043ad636c69656e7441646472657373ad31302e302e302e313a35303030c0",
    ),
    (
        ProducerConnectionsQuery(group="PG"),
        "000000199600cccc010081ad70726f647563657247726f7570a25047c0",
    ),
]
PRODUCERS = ProducerConnections(
    (ProducerConnection("p1", "10.0.0.1:5000", "JAVA", "401", "classic", 1_700_000_000_000),)
)
PRODUCERS_GOLDEN = (
    "00000070960001010080c4689186a8636c69656e744964a27031a761646472657373ad31302e302e302e313a3530"
    "3030a86c616e6775616765a44a415641a776657273696f6ea3343031a870726f746f636f6ca7636c6173736963af"
    "6c6173744865617274626561744d73cf0000018bcfe56800"
)


@pytest.mark.parametrize(("typed", "golden"), GOLDEN)
def test_the_request_bytes_stay_put(typed: Any, golden: str) -> None:
    header, body = typed.encode()
    assert encode_frame(request(typed.code, 1, header, body)).hex() == golden
    (frame,) = FrameDecoder().feed(bytes.fromhex(golden))
    assert type(typed).parse(frame.header, frame.body) == typed


def test_an_earlier_heartbeat_reads_with_nothing_said() -> None:
    beat = Heartbeat.parse({"clientId": "c1", "consumerGroup": "G", "topic": "T"})
    assert (beat.language, beat.version, beat.protocol, beat.client_address) == ("", "", "", "")
    assert Heartbeat(group="G", client_id="c1", topic="T").encode()[0] == {
        "clientId": "c1",
        "consumerGroup": "G",
        "topic": "T",
    }  # nothing added when nothing is said: the frame of before


def test_a_consumer_heartbeat_says_how_it_consumes() -> None:
    beat = Heartbeat(group="G", client_id="c1", topic="T", consume_type="pop")
    header, _ = beat.encode()
    assert header["consumeType"] == "pop"
    assert Heartbeat.parse(header) == beat
    producer = Heartbeat(group="PG", client_id="p1", producer=True, consume_type="pop")
    assert "consumeType" not in producer.encode()[0]  # a producer does not consume
    assert [consume_type(v) for v in ("pop", "push", "pull", "", "POP", "lite")] == [
        "pop", "push", "pull", "", "", ""
    ]  # fmt: skip


def test_the_producer_list_bytes_stay_put() -> None:
    assert RequestCode.GET_PRODUCER_CONNECTION_LIST == 204
    header, body = PRODUCERS.encode()
    assert encode_frame(request(1, 1, header, body)).hex() == PRODUCERS_GOLDEN
    (frame,) = FrameDecoder().feed(bytes.fromhex(PRODUCERS_GOLDEN))
    assert ProducerConnections.parse(frame.header, frame.body) == PRODUCERS


def test_consumer_connections_carry_who_and_an_earlier_list_reads_as_unknown() -> None:
    member = ConsumerConnection("c1", "h:1", "T", 5, "PYTHON", "0.1.0", "remoting")
    assert encode_connections([member]).hex() == (
        "9187a8636c69656e744964a26331a761646472657373a3683a31a5746f706963a154af6c61737448656172"
        "74626561744d7305a86c616e6775616765a6505954484f4ea776657273696f6ea5302e312e30a870726f74"
        "6f636f6ca872656d6f74696e67"
    )
    assert decode_connections(encode_connections([member])) == [member]
    earlier = msgpack.packb(
        [{"clientId": "c1", "address": "h:1", "topic": "T", "lastHeartbeatMs": 5}]
    )
    assert decode_connections(earlier) == [ConsumerConnection("c1", "h:1", "T", 5)]
    popper = dataclasses.replace(member, consume_type="pop")
    assert decode_connections(encode_connections([popper])) == [popper]
    assert earlier != encode_connections([popper])
    assert decode_connections(earlier)[0].consume_type == ""  # not said: an earlier broker


text = st.text(max_size=12)


@given(st.builds(Heartbeat, group=text.filter(bool), client_id=text.filter(bool), topic=text,
                 producer=st.booleans(), language=text, version=text, protocol=text,
                 client_address=text, consume_type=text))  # fmt: skip
def test_any_heartbeat_round_trips(beat: Heartbeat) -> None:
    if beat.producer:  # a producer's heartbeat names no topic
        beat = dataclasses.replace(beat, topic="", consume_type="")
    header, body = beat.encode()
    (frame,) = FrameDecoder().feed(encode_frame(request(beat.code, 1, header, body)))
    assert Heartbeat.parse(frame.header, frame.body) == beat


@given(st.lists(st.builds(ProducerConnection, text, text, text, text, text,
                          st.integers(min_value=0, max_value=2**63 - 1)), max_size=5))  # fmt: skip
def test_any_producer_list_round_trips(producers: list[ProducerConnection]) -> None:
    answer = ProducerConnections(tuple(producers))
    header, body = answer.encode()
    assert ProducerConnections.parse(header, body) == answer


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"\xc1", "malformed producer list"),
        (msgpack.packb({"clientId": "p"}), "not a list of maps"),
        (msgpack.packb([{"clientId": 1}]), "'clientId' must be text"),
        (
            msgpack.packb(
                [{"clientId": "p", "address": "", "language": "", "version": "", "protocol": ""}]
            ),
            "'lastHeartbeatMs' must be an integer",
        ),
    ],
)
def test_a_bad_producer_list_raises_one_field_error(body: bytes, message: str) -> None:
    with pytest.raises(FieldError, match=re.escape(message)):
        ProducerConnections.parse({}, body)
