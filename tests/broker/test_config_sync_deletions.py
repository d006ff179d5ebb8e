"""A slave's copy of its master's tables (broker/replicas/config_sync.py) does not bring back a
topic or consumer group deleted on the slave while the master's answer was on its way (the
answer predates the master's own delete): deleteTopic and deleteSubGroup reach every replica,
and a failover must not revive what they removed."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from broker.deletions import Deletions
from broker.replicas.config_sync import SlaveConfigSync
from broker.role import RoleState
from protocol.broker_requests.admin import TopicTable
from protocol.broker_requests.subscription_groups import SubscriptionGroupTable
from protocol.codes import RequestCode, ResponseCode
from protocol.pull import ConsumerOffsetTable
from protocol.remoting import Frame, response
from remoting.client import ConnectionPool
from remoting.server import Connection, RemotingServer
from storage.config_files import (
    ConsumerOffsetStore,
    DlqResendLedger,
    SubscriptionGroupStore,
    TopicConfigStore,
)
from tests.support.wait import wait_until_async


class StaleMaster:
    """A master whose first answers still hold topic ``Gone`` and group ``gone``: while it
    answers the topic table, the slave deletes both (the delete pushed to it overtook the
    answer). Its later answers no longer hold them, as a master that deleted them."""

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx
        self.rounds = 0
        self.server = RemotingServer(name="master")
        self.server.register(RequestCode.GET_ALL_TOPIC_CONFIG, self._topics)
        self.server.register(RequestCode.GET_ALL_CONSUMER_OFFSET, self._offsets)
        self.server.register(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, self._groups)

    def _topics(self, conn: Connection, req: Frame) -> Frame:
        if self.rounds == 0:  # the delete reaches the slave now
            ctx = self.ctx
            ctx.deletions.topic_deleted("Gone")
            ctx.topics.delete("Gone")
            ctx.offsets.delete_topic("Gone")
            ctx.deletions.group_deleted("gone")
            ctx.sub_groups.delete("gone")
            ctx.offsets.delete_group("gone")
        queues = {"Gone": 2, "Kept": 1} if self.rounds == 0 else {"Kept": 1}
        table = TopicTable(queues=queues)
        return response(req, ResponseCode.SUCCESS, *table.encode())

    def _offsets(self, conn: Connection, req: Frame) -> Frame:
        offsets: dict[str, dict[str, dict[int, int]]] = {"g": {"Kept": {0: 4}}}
        if self.rounds == 0:
            offsets = {"gone": {"Kept": {0: 5}}, "g": {"Gone": {0: 3}, "Kept": {0: 4}}}
        table = ConsumerOffsetTable(offsets=offsets, last_consume_ms={})
        return response(req, ResponseCode.SUCCESS, *table.encode())

    def _groups(self, conn: Connection, req: Frame) -> Frame:
        names = ("gone", "g") if self.rounds == 0 else ("g",)
        self.rounds += 1
        groups = {n: {"groupName": n, "retryMaxTimes": 3} for n in names}
        resent = {"gone": (1,)} if "gone" in names else {}
        table = SubscriptionGroupTable(groups=groups, dlq_resent=resent)
        return response(req, ResponseCode.SUCCESS, *table.encode())


async def test_names_deleted_while_the_answer_was_on_its_way_are_not_copied(
    tmp_path: Path,
) -> None:
    ctx: Any = SimpleNamespace(
        topics=TopicConfigStore(tmp_path),
        offsets=ConsumerOffsetStore(tmp_path),
        sub_groups=SubscriptionGroupStore(tmp_path),
        dlq_resent=DlqResendLedger(tmp_path),
        deletions=Deletions(),
    )
    ctx.topics.update("Gone", 2)
    ctx.offsets.commit("gone", "Kept", 0, 5)
    ctx.sub_groups.update({"groupName": "gone", "retryMaxTimes": 3})
    master = StaleMaster(ctx)
    port = await master.server.start("127.0.0.1", 0)
    ctx.role = RoleState(is_master=False, master_address=f"127.0.0.1:{port}")
    pool = ConnectionPool(2.0)
    cfg: Any = SimpleNamespace(slave_config_sync_interval_ms=20)
    sync = SlaveConfigSync(cfg, ctx, pool, lambda: None)
    task = asyncio.create_task(sync.run())
    try:

        async def copied() -> bool:
            assert not task.done(), task.exception()
            return master.rounds >= 2 and ctx.sub_groups.configured("g") is not None

        await wait_until_async(copied, "two rounds of the slave's copy", 10.0)
        # The first round's answers predate the delete: nothing of Gone or gone is taken.
        assert set(ctx.topics.all()) == {"Kept"}
        assert "gone" not in ctx.offsets.groups()
        assert ctx.offsets.query("g", "Gone", 0) is None
        assert ctx.offsets.query("g", "Kept", 0) == 4
        assert ctx.sub_groups.configured("gone") is None
        assert ctx.sub_groups.configured("g") is not None
        assert ctx.dlq_resent.snapshot() == {}
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        pool.close()
        await master.server.stop()
