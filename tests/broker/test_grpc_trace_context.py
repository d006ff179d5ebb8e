"""The official clients' W3C trace context (SystemProperties.trace_context) is carried through:
stored as RocketMQ's TRACE_CONTEXT property of the message, handed back in the system
properties of a delivery (never as a user property), and put into the broker's trace records
(docs/traces.md)."""

from __future__ import annotations

import pytest

pytest.importorskip("google.protobuf")

from broker.grpc.delivery import received_message
from broker.grpc.translate import send_request
from protocol.message import decode_properties
from protocol.rocketmq_v2 import definition_pb2 as pb
from protocol.trace import PROP_TRACE_CONTEXT
from tests.broker.support import stored_record

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def test_a_sends_trace_context_is_stored_and_delivered_back_as_a_system_property() -> None:
    m = pb.Message(topic=pb.Resource(name="T"), body=b"x")
    m.system_properties.message_id = "01ABC"
    m.system_properties.trace_context = TRACEPARENT
    m.user_properties["color"] = "red"
    props = decode_properties(str(send_request(m, "", 1024).header["properties"]).encode())
    assert props[PROP_TRACE_CONTEXT] == TRACEPARENT

    out = received_message(stored_record("T", props, b"x"), "g", "H", 1, 30_000)
    assert out.system_properties.trace_context == TRACEPARENT
    assert dict(out.user_properties) == {"color": "red"}


def test_a_send_without_trace_context_stores_none() -> None:
    m = pb.Message(topic=pb.Resource(name="T"), body=b"x")
    m.system_properties.message_id = "01ABC"
    props = decode_properties(str(send_request(m, "", 1024).header["properties"]).encode())
    assert PROP_TRACE_CONTEXT not in props


def test_the_brokers_send_record_carries_the_trace_context() -> None:
    from broker.trace.observer import BrokerTracer
    from broker.trace.writer import TraceWriter
    from protocol.message import Message
    from protocol.trace import PubRecord, decode_records
    from storage.store import PutResult

    written: list[Message] = []
    writer = TraceWriter("RMQ_SYS_TRACE_TOPIC", 10, lambda ms, _n: written.extend(ms))
    tracer = BrokerTracer(writer, "127.0.0.2:10911", lambda: 5, lambda _t, _q, _o: None)
    sent = Message(
        topic="T", body=b"x", properties={"UNIQ_KEY": "01ABC", PROP_TRACE_CONTEXT: TRACEPARENT}
    )
    tracer.on_put("T", 0, [sent], PutResult(0, 7, 1, [4096], 4200, 1_700_000_000_000))
    writer.flush()
    [pub] = decode_records(written[0].body)
    assert isinstance(pub, PubRecord)
    assert (pub.msg_id, pub.traceparent, pub.queue_offset) == ("01ABC", TRACEPARENT, 7)
    assert written[0].keys == "01ABC"
