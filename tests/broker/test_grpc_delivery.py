"""The pure part of POP consumption over gRPC: receive checks, stored records as the official
clients read them, per-entry answers, consumer settings, assignments, and the endpoint's table
of live consumers and renewed deliveries (broker/grpc/delivery.py, broker/grpc/consumers.py)."""

from __future__ import annotations

import hashlib

import pytest
from google.protobuf.duration_pb2 import Duration

from broker.grpc import consumers
from broker.grpc.consumers import Clients, RenewTable
from broker.grpc.delivery import (
    AUTO_RENEW_INVISIBLE_MS,
    DEFAULT_LONG_POLLING_MS,
    assignments,
    batch_remarks,
    check_handle,
    overall,
    receive_plan,
    received_message,
    subscription_settings,
)
from broker.grpc.translate import Refused
from protocol.retry import SubscriptionGroupConfig
from protocol.rocketmq_v2 import definition_pb2 as pb
from protocol.rocketmq_v2 import service_pb2 as rpc
from tests.broker.support import stored_record


def _request(**fields: object) -> rpc.ReceiveMessageRequest:
    base: dict[str, object] = {
        "group": pb.Resource(name="g"),
        "message_queue": pb.MessageQueue(topic=pb.Resource(name="T")),
        "batch_size": 8,
        "invisible_duration": Duration(seconds=30),
    }
    base.update(fields)
    return rpc.ReceiveMessageRequest(**base)  # type: ignore[arg-type]


def test_a_receive_polls_no_longer_than_its_deadline_allows() -> None:
    plan = receive_plan(_request(long_polling_timeout=Duration(seconds=20)), 23.0)
    assert (plan.group, plan.topic, plan.expression) == ("g", "T", "*")
    assert (plan.batch, plan.invisible_ms, plan.poll_ms) == (8, 30_000, 20_000)
    # A deadline shorter than the poll: the answer leaves with room to spare.
    assert receive_plan(_request(long_polling_timeout=Duration(seconds=20)), 5.0).poll_ms == 4000
    assert receive_plan(_request(), None).poll_ms == DEFAULT_LONG_POLLING_MS
    assert receive_plan(_request(), 0.0).poll_ms == 0


def test_a_sql_filter_is_planned_as_sql92() -> None:
    flt = pb.FilterExpression(type=pb.SQL, expression="region = 'eu' AND amount > 100")
    plan = receive_plan(_request(filter_expression=flt), 10.0)
    assert (plan.expression_type, plan.expression) == ("SQL92", flt.expression)
    plan = receive_plan(_request(filter_expression=pb.FilterExpression(expression=" A ")), 10.0)
    assert (plan.expression_type, plan.expression) == ("TAG", "A")


def test_push_receives_take_the_renewed_invisible_time() -> None:
    request = _request(auto_renew=True)
    request.ClearField("invisible_duration")
    plan = receive_plan(request, 30.0)
    assert plan.auto_renew and plan.invisible_ms == AUTO_RENEW_INVISIBLE_MS


@pytest.mark.parametrize(
    ("fields", "code", "words"),
    [
        ({"group": pb.Resource(name="a b")}, pb.ILLEGAL_CONSUMER_GROUP, "may hold only"),
        ({"message_queue": pb.MessageQueue()}, pb.ILLEGAL_TOPIC, "topic"),
        ({"batch_size": 0}, pb.BAD_REQUEST, "batch_size"),
        ({"batch_size": 5000}, pb.BAD_REQUEST, "batch_size"),
        ({"invisible_duration": Duration(nanos=5)}, pb.ILLEGAL_INVISIBLE_TIME, "1000"),
        (
            {"filter_expression": pb.FilterExpression(type=pb.SQL, expression="a >")},
            pb.ILLEGAL_FILTER_EXPRESSION,
            "'a >' at position 3: expected a property",
        ),
        (
            {"filter_expression": pb.FilterExpression(type=pb.TAG, expression="A || ")},
            pb.ILLEGAL_FILTER_EXPRESSION,
            "A ||",
        ),
        ({"long_polling_timeout": Duration(seconds=-1)}, pb.ILLEGAL_POLLING_TIME, "negative"),
        (
            {"group": pb.Resource(name="g", resource_namespace="prod")},
            pb.UNSUPPORTED,
            "namespace 'prod'",
        ),
        (
            {"message_queue": pb.MessageQueue(topic=pb.Resource(name="T", resource_namespace="x"))},
            pb.UNSUPPORTED,
            "no namespaces",
        ),
    ],
)
def test_bad_receives_are_refused_with_their_code(
    fields: dict[str, object], code: int, words: str
) -> None:
    with pytest.raises(Refused) as refused:
        receive_plan(_request(**fields), 10.0)
    assert refused.value.code == code
    assert words in refused.value.message


def test_a_receive_without_invisible_time_or_auto_renew_is_refused() -> None:
    request = _request()
    request.ClearField("invisible_duration")
    with pytest.raises(Refused) as refused:
        receive_plan(request, 10.0)
    assert refused.value.code == pb.ILLEGAL_INVISIBLE_TIME


def test_a_record_reads_as_the_clients_expect() -> None:
    props = {
        "TAGS": "TagA",
        "KEYS": "k1 k2",
        "UNIQ_KEY": "ID-1",
        "__SHARDINGKEY": "order-1",
        "color": "red",
    }
    msg = received_message(stored_record("T", props), "g", "HANDLE", 1, 30_000)
    sysp = msg.system_properties
    assert msg.topic.name == "T" and msg.body == b"hello"
    assert dict(msg.user_properties) == {"color": "red"}
    assert (sysp.tag, list(sysp.keys), sysp.message_id) == ("TagA", ["k1", "k2"], "ID-1")
    assert sysp.body_digest.type == pb.MD5
    assert sysp.body_digest.checksum == hashlib.md5(b"hello").hexdigest().upper()
    assert (sysp.message_type, sysp.message_group) == (pb.FIFO, "order-1")
    assert sysp.born_timestamp.ToMilliseconds() == 1_700_000_000_123
    assert sysp.store_timestamp.ToMilliseconds() == 1_700_000_000_456
    assert (sysp.born_host, sysp.store_host) == ("10.0.0.1:5000", "10.0.0.2:10911")
    assert (sysp.queue_id, sysp.queue_offset) == (1, 7)
    assert (sysp.receipt_handle, sysp.delivery_attempt) == ("HANDLE", 1)
    assert sysp.invisible_duration.ToMilliseconds() == 30_000
    assert not sysp.HasField("delivery_timestamp")


def test_a_retry_copy_shows_its_first_topic_and_id_and_a_delay_its_time() -> None:
    retry = {
        "RETRY_TOPIC": "T",
        "ORIGIN_MESSAGE_ID": "ID-1",
        "UNIQ_KEY": "ID-1",
        "RECONSUME_TIME": "1",
        "CONSUME_FAILURE_REASON": "invisible time passed",
        "size": "L",
    }
    msg = received_message(stored_record("%RETRY%g", retry), "g", "H", 2, 1000)
    assert msg.topic.name == "T" and msg.system_properties.message_id == "ID-1"
    assert dict(msg.user_properties) == {"size": "L"}
    assert msg.system_properties.delivery_attempt == 2
    # Another group's retry topic is not mapped (it is never popped for this group).
    assert (
        received_message(stored_record("%RETRY%h", retry), "g", "H", 1, 1000).topic.name
        == "%RETRY%h"
    )
    delayed = {"TIMER_OUT_MS": "1700000009000", "__STARTDELIVERTIME": "1700000009000"}
    msg = received_message(stored_record("T", delayed), "g", "H", 1, 1000)
    assert msg.system_properties.message_type == pb.DELAY
    assert msg.system_properties.delivery_timestamp.ToMilliseconds() == 1_700_000_009_000
    assert dict(msg.user_properties) == {}
    # Without UNIQ_KEY (sent by our SDK) the id is the stored one.
    plain = stored_record("T", {})
    assert received_message(plain, "g", "H", 1, 1000).system_properties.message_id == plain.msg_id


def test_batch_ack_remarks_land_on_their_entries() -> None:
    remark = "#1: receipt handle fails its signature check; #3: no longer in flight; x"
    assert batch_remarks(remark, 4) == [
        "",
        "receipt handle fails its signature check",
        "",
        "no longer in flight; x",
    ]
    assert batch_remarks("", 2) == ["", ""]


def test_handles_and_overall_status() -> None:
    assert check_handle("abc") is None
    assert check_handle("") and check_handle("a b") and check_handle("x" * 3000)
    ok = pb.Status(code=pb.OK, message="OK")
    bad = pb.Status(code=pb.INVALID_RECEIPT_HANDLE, message="m")
    assert overall([ok, ok]).code == pb.OK
    assert overall([bad, bad]).message == "m"
    assert overall([ok, bad]).code == pb.MULTIPLE_RESULTS


def test_consumer_settings_follow_the_group() -> None:
    out = pb.Settings()
    config = SubscriptionGroupConfig(
        "g", retry_max_times=3, retry_delays_ms=(500, 1000, 2500), consume_orderly=True
    )
    subscription_settings(out, config)
    assert out.subscription.fifo is True
    assert out.subscription.long_polling_timeout.seconds == 20
    assert out.backoff_policy.max_attempts == 4
    assert [d.seconds for d in out.backoff_policy.customized_backoff.next] == [1, 1, 3]


def test_the_nodejs_client_gets_an_exponential_backoff_it_reads() -> None:
    # rocketmq-client-nodejs ignores a customized backoff and then takes 1 attempt as its limit
    config = SubscriptionGroupConfig("g", retry_max_times=3, retry_delays_ms=(2000, 5000, 3000))
    out = pb.Settings()
    subscription_settings(out, config, pb.NODE_JS)
    policy = out.backoff_policy
    assert policy.max_attempts == 4 and policy.WhichOneof("strategy") == "exponential_backoff"
    exp = policy.exponential_backoff
    assert (exp.initial.seconds, exp.max.seconds, exp.multiplier) == (2, 5, 2.0)
    flat = pb.Settings()
    subscription_settings(flat, SubscriptionGroupConfig("g", retry_delays_ms=(1000,)), pb.NODE_JS)
    assert flat.backoff_policy.exponential_backoff.multiplier == 1.0
    java = pb.Settings()
    subscription_settings(java, config, pb.JAVA)
    assert java.backoff_policy.WhichOneof("strategy") == "customized_backoff"


def test_one_assignment_per_broker_group_for_any_queue() -> None:
    def queue(broker: str, qid: int) -> pb.MessageQueue:
        return pb.MessageQueue(
            topic=pb.Resource(name="T"), id=qid, broker=pb.Broker(name=broker, id=0)
        )

    out = assignments([queue("a", 0), queue("a", 1), queue("b", 0)])
    assert [(a.message_queue.broker.name, a.message_queue.id) for a in out] == [
        ("a", -1),
        ("b", -1),
    ]


def test_clients_go_silent_and_get_heartbeats_when_due() -> None:
    clients = Clients()
    t = 1_700_000_000_000
    clients.seen("c1", "g", t, ("T",))
    client = clients.seen("c1", "g", t + 1000)  # a heartbeat keeps its topics
    assert client.topic == "T" and clients.get("c1") is client
    assert clients.heartbeat_due(t + 1000) == [client]
    client.heartbeat_ms = t + 1000
    assert clients.heartbeat_due(t + 1000 + consumers.BROKER_HEARTBEAT_MS - 1) == []
    assert clients.expire(t + 1000 + consumers.CLIENT_SILENT_MS) == []
    assert clients.expire(t + 1001 + consumers.CLIENT_SILENT_MS) == [client]
    assert len(clients) == 0


def test_held_deliveries_are_renewed_ahead_of_their_deadline_and_released() -> None:
    table = RenewTable()
    table.hold("h1", "g", "T", "c1", deadline_ms=30_000, now_ms=0)
    table.hold("h2", "g", "T", "c2", deadline_ms=30_000, now_ms=0)
    assert table.due(30_000 - consumers.RENEW_AHEAD_MS - 1) == []
    assert [h.original for h in table.due(30_000 - consumers.RENEW_AHEAD_MS)] == ["h1", "h2"]
    table.renewed("h1", "h1b", 60_000)
    assert table.current("h1") == "h1b" and table.current("unknown") == "unknown"
    # h2 was not renewed in time: its deadline passed, it is let go (the message comes back).
    assert [h.original for h in table.due(30_000)] == []
    assert table.get("h2") is None and table.get("h1") is not None
    assert [h.original for h in table.release_client("c1")] == ["h1"]
    table.hold("h3", "g", "T", "c1", deadline_ms=10**12, now_ms=0)
    assert table.due(consumers.MAX_HOLD_MS) == [] and len(table) == 0  # held too long
