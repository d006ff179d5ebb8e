"""Retention of old static topic items on the active controller (docs/static-topics.md,
"Retention of old items").

Every ``static_item_check_interval_ms`` the active controller takes each logical queue's oldest
item when it is not the newest (so it is sealed: its physical range is fixed), asks the master
of its group for the min offset of its physical queue (GET_MIN_OFFSET, signed as the cluster),
and once that reached the item's physical end (retention deleted every message of the item)
commits DropQueueItem: a compare-and-set on the item's generation, so a drop decided twice (two
controllers, two passes) applies once. One item per queue per pass; the next oldest is looked at
on the next pass. A group without a master, unreachable, or refusing is asked again next pass.
"""

from __future__ import annotations

import asyncio
import contextlib

import structlog

from controller.config import ControllerConfig
from controller.metadata import MappingItem, ReplicasInfoManager
from controller.raft_driver import RaftDriver
from controller.service.commit import DecisionCommitter
from protocol.codes import ResponseCode
from protocol.pull import AnswerError, MinOffsetQuery, decode_offset
from remoting.client import ConnectionPool
from remoting.errors import RemotingError

log = structlog.get_logger(__name__)


class StaticItemRetention:
    def __init__(
        self,
        cfg: ControllerConfig,
        driver: RaftDriver,
        manager: ReplicasInfoManager,
        committer: DecisionCommitter,
        pool: ConnectionPool,
        timeout: float,
    ) -> None:
        self.cfg = cfg
        self.driver = driver
        self.manager = manager
        self.committer = committer
        self.pool = pool
        self.timeout = timeout

    async def run(self) -> None:
        interval = self.cfg.static_item_check_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            if not self.driver.active:
                continue
            try:
                await self.check()
            except Exception:
                log.exception("static topic item retention check failed")

    async def check(self) -> int:
        """One pass: the number of items dropped."""
        candidates = self.manager.droppable_items()
        if not candidates:
            return 0
        mins = await asyncio.gather(
            *(self._min_offset(topic, item) for topic, _, item in candidates)
        )
        dropped = 0
        for (topic, queue_id, item), min_offset in zip(candidates, mins, strict=True):
            end = item.physical_end()
            if min_offset is None or end is None or min_offset < end:
                continue
            d = await self.committer.settle(
                self.manager.drop_queue_item(topic, queue_id, item.generation)
            )
            if d.ok:
                dropped += 1
                log.info(
                    "static topic item dropped",
                    topic=topic,
                    queue_id=queue_id,
                    broker_name=item.broker_name,
                    physical_queue=item.physical_queue,
                    generation=item.generation,
                    logical_end=item.logical_end,
                    min_offset=min_offset,
                )
            else:
                log.info("static topic item not dropped", topic=topic, remark=d.remark)
        return dropped

    async def _min_offset(self, topic: str, item: MappingItem) -> int | None:
        """The min offset of ``item``'s physical queue on its group's master (None: not now)."""
        info = self.manager.replica_info(item.broker_name)
        address = info.master_address if info is not None else None
        if not address:
            return None
        query = MinOffsetQuery(topic=topic, queue_id=item.physical_queue)
        try:
            conn = await self.pool.get(address)
            async with asyncio.timeout(self.timeout + 1):
                resp = await conn.request(query.code, query.header(), None, self.timeout)
        except (RemotingError, OSError, TimeoutError) as exc:
            log.debug("min offset not known", address=address, topic=topic, error=str(exc))
            self.pool.drop(address)
            return None
        if resp.code != ResponseCode.SUCCESS:
            return None
        with contextlib.suppress(AnswerError):
            return decode_offset(resp)
        return None
