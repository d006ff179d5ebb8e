"""In controller mode a topic is created only once the controllers committed it (issue 9 item
12): with the controllers unreachable, updateTopic answers SERVICE_NOT_AVAILABLE (retriable)
and creates nothing, even on a master."""

from __future__ import annotations

from pathlib import Path

import msgpack

from protocol.codes import RequestCode, ResponseCode
from remoting.client import RemotingClient
from tests.broker.test_send_waits import start_master


async def test_update_topic_without_the_controllers_creates_nothing(tmp_path: Path) -> None:
    master = await start_master(tmp_path)  # controllers = 127.0.0.1:1: nobody listens there
    client = await RemotingClient.connect(master.address)
    try:
        resp = await client.request(
            RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "Orders", "queues": 4}, None, 30
        )
        assert resp.code == ResponseCode.SERVICE_NOT_AVAILABLE, resp.header
        assert "not created" in str(resp.header.get("remark"))
        topics = await client.call(RequestCode.GET_ALL_TOPIC_CONFIG)
        assert "Orders" not in msgpack.unpackb(topics.body or b"\x80")
        assert master.broker.ctx.topics.get("Orders") is None
    finally:
        client.close()
        await master.broker.stop()
