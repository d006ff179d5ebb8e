"""The queue locks of classic orderly consumers (LOCK_BATCH_MQ / UNLOCK_BATCH_MQ): one holder
per group and queue, renewed by its holder, free to others past the TTL or once unlocked; and
the requests on a real broker's classic door."""

from __future__ import annotations

import json

import pytest

from broker.classic.queue_locks import QueueLocks
from protocol.rocketmq_remoting.codes import RequestCode, ResponseCode
from tests.support.classic import Raw
from tests.support.procs import BrokerProc


def test_a_queue_has_one_holder_until_it_unlocks_or_expires() -> None:
    locks = QueueLocks(ttl_ms=1000)
    assert locks.lock("G", "c1", [("T", 0), ("T", 1)], 0) == [("T", 0), ("T", 1)]
    assert locks.lock("G", "c2", [("T", 1), ("T", 2)], 10) == [("T", 2)]
    assert locks.lock("H", "c2", [("T", 1)], 10) == [("T", 1)]  # another group's own lock
    assert locks.lock("G", "c1", [("T", 0)], 900) == [("T", 0)]  # renewed by its holder
    # Past the TTL of c1's last lock of queue 1 (at 0), c2 takes it; queue 0 was renewed at 900.
    assert locks.lock("G", "c2", [("T", 0), ("T", 1)], 1500) == [("T", 1)]
    locks.unlock("G", "c2", [("T", 0)])  # not its lock: nothing changes
    assert locks.holder("G", ("T", 0), 1500) == "c1"
    locks.unlock("G", "c1", [("T", 0)])
    assert locks.holder("G", ("T", 0), 1500) is None
    assert locks.lock("G", "c2", [("T", 0)], 1600) == [("T", 0)]


@pytest.mark.multiprocess
async def test_lock_batch_on_the_classic_door(broker: BrokerProc) -> None:
    def body(client: str, queues: list[int]) -> bytes:
        mq = [{"topic": "T", "brokerName": "broker-a", "queueId": q} for q in queues]
        mq.append({"topic": "T", "brokerName": "another-group", "queueId": 9})
        return json.dumps({"consumerGroup": "G", "clientId": client, "mqSet": mq}).encode()

    raw = await Raw.open(broker.port)  # a broker of group broker-a
    try:
        first = await raw.call(RequestCode.LOCK_BATCH_MQ, {}, body("c1", [0, 1]))
        assert first.code == ResponseCode.SUCCESS
        assert sorted(q["queueId"] for q in json.loads(first.body)["lockOKMQSet"]) == [0, 1]
        second = await raw.call(RequestCode.LOCK_BATCH_MQ, {}, body("c2", [1, 2]))
        assert [q["queueId"] for q in json.loads(second.body)["lockOKMQSet"]] == [2]
        unlocked = await raw.call(RequestCode.UNLOCK_BATCH_MQ, {}, body("c1", [1]))
        assert unlocked.code == ResponseCode.SUCCESS
        again = await raw.call(RequestCode.LOCK_BATCH_MQ, {}, body("c2", [1]))
        assert [q["queueId"] for q in json.loads(again.body)["lockOKMQSet"]] == [1]
    finally:
        raw.close()
