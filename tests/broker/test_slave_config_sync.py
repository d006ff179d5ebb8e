"""A slave's copy of its master's topics, offsets and subscription groups
(broker/replicas/config_sync.py) against a master that answers one of them malformed: the copy
takes nothing of that answer, logs it and keeps copying the rest, round after round."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from broker.replicas.config_sync import SlaveConfigSync
from broker.role import RoleState
from protocol.broker_requests.subscription_groups import SubscriptionGroupTable
from protocol.codes import RequestCode, ResponseCode
from protocol.pull import ConsumerOffsetTable
from protocol.remoting import Frame, response
from remoting.client import ConnectionPool
from remoting.server import Connection, RemotingServer
from tests.broker.support import config_sync_context
from tests.support.wait import wait_until_async


class Master:
    """A master's remoting port whose topic table is not msgpack."""

    def __init__(self) -> None:
        self.server = RemotingServer(name="master")
        self.asked: dict[int, int] = {}
        self.server.register(RequestCode.GET_ALL_TOPIC_CONFIG, self._topics)
        self.server.register(RequestCode.GET_ALL_CONSUMER_OFFSET, self._offsets)
        self.server.register(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, self._groups)

    def _count(self, req: Frame) -> None:
        self.asked[req.code] = self.asked.get(req.code, 0) + 1

    def _topics(self, conn: Connection, req: Frame) -> Frame:
        self._count(req)
        return response(req, ResponseCode.SUCCESS, None, b"\xc1")

    def _offsets(self, conn: Connection, req: Frame) -> Frame:
        self._count(req)
        table = ConsumerOffsetTable(offsets={"g": {"T": {0: 7}}}, last_consume_ms={})
        return response(req, ResponseCode.SUCCESS, *table.encode())

    def _groups(self, conn: Connection, req: Frame) -> Frame:
        self._count(req)
        table = SubscriptionGroupTable(
            groups={"g": {"groupName": "g", "retryMaxTimes": 3}}, dlq_resent={}
        )
        return response(req, ResponseCode.SUCCESS, *table.encode())


async def test_a_malformed_topic_table_is_skipped_and_the_copy_goes_on(tmp_path: Path) -> None:
    master = Master()
    port = await master.server.start("127.0.0.1", 0)
    pool = ConnectionPool(2.0)
    ctx = config_sync_context(
        tmp_path, role=RoleState(is_master=False, master_address=f"127.0.0.1:{port}")
    )
    cfg: Any = SimpleNamespace(slave_config_sync_interval_ms=20)
    changed: list[bool] = []
    sync = SlaveConfigSync(cfg, ctx, pool, lambda: changed.append(True))
    task = asyncio.create_task(sync.run())
    try:

        async def copied_three_rounds() -> bool:
            assert not task.done(), task.exception()  # the copy must not end
            return master.asked.get(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, 0) >= 3

        await wait_until_async(copied_three_rounds, "three rounds of the slave's copy", 10.0)
        assert ctx.offsets.query("g", "T", 0) == 7
        config = ctx.sub_groups.configured("g")
        assert config is not None and config.retry_max_times == 3
        assert ctx.topics.all() == {} and not changed
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        pool.close()
        await master.server.stop()
