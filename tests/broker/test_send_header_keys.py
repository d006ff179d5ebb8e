"""A send header of exactly topic and keys keeps its keys (issue 17, item 2).

The send path has a fast path for the common two-key header (topic and queueId). A header of
two other keys (topic and keys, with no queueId: the broker picks the queue) must not take it.
"""

from __future__ import annotations

import pytest

from protocol.codes import RequestCode, ResponseCode
from protocol.message import iter_records
from remoting.client import RemotingClient
from tests.support.procs import BrokerProc

pytestmark = pytest.mark.multiprocess


async def test_a_header_of_topic_and_keys_keeps_the_keys(broker: BrokerProc) -> None:
    conn = await RemotingClient.connect(broker.address)
    try:
        await conn.call(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "K", "queues": 1})
        sent = await conn.call(RequestCode.SEND_MESSAGE, {"topic": "K", "keys": "order-7"}, b"m")
        assert sent.header["queueId"] == 0 and sent.header["queueOffset"] == 0
        header = {
            "consumerGroup": "g",
            "topic": "K",
            "queueId": 0,
            "queueOffset": 0,
            "maxMsgNums": 8,
            "suspendTimeoutMillis": 0,
        }
        pulled = await conn.request(RequestCode.PULL_MESSAGE, header)
        assert pulled.code == ResponseCode.SUCCESS, pulled.header
        assert [(r.body, r.keys) for r in iter_records(pulled.body or b"")] == [(b"m", "order-7")]
    finally:
        conn.close()
