"""A send naming a topic that cannot exist is a bad request, not a broker failure (issue 9, 9)."""

from __future__ import annotations

import msgpack
import pytest

from protocol.codes import RequestCode, ResponseCode
from remoting.client import RemotingClient
from tests.support.procs import BrokerProc

pytestmark = pytest.mark.multiprocess


@pytest.mark.parametrize("topic", ["bad/topic", "..", "sp ace", "x" * 300])
async def test_send_with_an_invalid_topic_name_answers_bad_request(
    broker: BrokerProc, topic: str
) -> None:
    conn = await RemotingClient.connect(broker.address)
    try:
        one = await conn.request(RequestCode.SEND_MESSAGE, {"topic": topic, "queueId": 0}, b"m")
        assert one.code == ResponseCode.BAD_REQUEST, one.header
        assert "topic" in str(one.header["remark"])
        batch = await conn.request(
            RequestCode.SEND_BATCH_MESSAGE, {"topic": topic}, msgpack.packb([{"body": b"m"}])
        )
        assert batch.code == ResponseCode.BAD_REQUEST, batch.header
        # The connection and the broker keep serving; the log has no traceback.
        ok = await conn.request(RequestCode.SEND_MESSAGE, {"topic": "Good", "queueId": 0}, b"m")
        assert ok.code == ResponseCode.SUCCESS
        log = broker.log()
        assert "Traceback" not in log and "request failed" not in log, log[-3000:]
        queues = broker.data_dir / "consumequeue"
        assert sorted(p.name for p in queues.iterdir()) == ["Good"]
    finally:
        conn.close()
