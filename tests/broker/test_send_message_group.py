"""A message group (``__SHARDINGKEY``) the broker cannot accept is refused with MESSAGE_ILLEGAL
and nothing is stored (issue 12, bad input), alone or in a batch; a good one is stored as is."""

from __future__ import annotations

import msgpack
import pytest

from protocol.codes import RequestCode, ResponseCode
from protocol.fifo import PROP_MESSAGE_GROUP, group_queue_index
from protocol.message import encode_properties, iter_records
from remoting.client import RemotingClient
from tests.support.procs import BrokerProc

pytestmark = pytest.mark.multiprocess


async def test_bad_message_groups_are_refused_and_nothing_stored(broker: BrokerProc) -> None:
    conn = await RemotingClient.connect(broker.address)
    try:
        await conn.call(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "F", "queues": 1})

        def props(group: str) -> str:
            return encode_properties({PROP_MESSAGE_GROUP: group}).decode()

        for group in ("x" * 129, ""):
            resp = await conn.request(
                RequestCode.SEND_MESSAGE,
                {"topic": "F", "queueId": 0, "properties": props(group)},
                b"m",
            )
            assert resp.code == ResponseCode.MESSAGE_ILLEGAL, resp.header
            assert PROP_MESSAGE_GROUP in str(resp.header.get("remark")), resp.header
        batch = msgpack.packb(
            [
                {"body": b"ok", "properties": {PROP_MESSAGE_GROUP: "g1"}},
                {"body": b"bad", "properties": {PROP_MESSAGE_GROUP: "y" * 200}},
            ]
        )
        resp = await conn.request(
            RequestCode.SEND_BATCH_MESSAGE, {"topic": "F", "queueId": 0}, batch
        )
        assert resp.code == ResponseCode.MESSAGE_ILLEGAL, resp.header
        assert "exceeds the limit of 128 bytes" in str(resp.header.get("remark")), resp.header
        good = await conn.call(
            RequestCode.SEND_MESSAGE,
            {"topic": "F", "queueId": 0, "properties": props("g1")},
            b"good",
        )
        assert good.header["queueOffset"] == 0  # nothing was stored before it
        pulled = await conn.request(
            RequestCode.PULL_MESSAGE,
            {
                "consumerGroup": "c",
                "topic": "F",
                "queueId": 0,
                "queueOffset": 0,
                "maxMsgNums": 8,
                "suspendTimeoutMillis": 0,
            },
        )
        records = list(iter_records(pulled.body or b""))
        assert [(r.body, r.properties[PROP_MESSAGE_GROUP]) for r in records] == [(b"good", "g1")]
    finally:
        conn.close()
    assert broker.alive()


async def test_a_send_that_lets_the_broker_pick_goes_to_its_groups_queue(
    broker: BrokerProc,
) -> None:
    """queueId -1 (the gRPC endpoint's sends: its clients pick the broker group, not the
    queue): a message group's messages all go to the queue the group hashes to, the others
    round the queues."""
    conn = await RemotingClient.connect(broker.address)
    try:
        await conn.call(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "G", "queues": 4})
        for group in ("order-1", "order-2", "order-3"):
            props = encode_properties({PROP_MESSAGE_GROUP: group}).decode()
            queues = set()
            for _ in range(3):
                resp = await conn.call(
                    RequestCode.SEND_MESSAGE,
                    {"topic": "G", "queueId": -1, "properties": props},
                    b"m",
                )
                queues.add(resp.header["queueId"])
            assert queues == {group_queue_index(group, 4)}, group
        plain = set()
        for _ in range(8):
            resp = await conn.call(RequestCode.SEND_MESSAGE, {"topic": "G", "queueId": -1}, b"p")
            plain.add(resp.header["queueId"])
        assert plain == {0, 1, 2, 3}
    finally:
        conn.close()
