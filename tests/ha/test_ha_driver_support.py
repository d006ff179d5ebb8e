"""Helpers for the HA driver tests (no tests here): brokers made of a real MessageStore, an
EpochFile and an HAService on 127.0.0.1 port 0, a controllable AlterSyncStateSet proposer, and
waiting on conditions with a deadline."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path

from broker.ha.config import HAConfig
from broker.ha.service import HAService
from protocol.message import Message
from storage.epoch_file import EpochFile
from storage.store import MessageStore, PutResult, StoreConfig
from tests.support.wait import wait_until_async

SEGMENT = 256 * 1024
TOPICS = ("t", "orders")

FAST = HAConfig(
    heartbeat_interval_ms=50,
    tick_interval_ms=20,
    reconnect_min_ms=20,
    reconnect_max_ms=200,
    connect_timeout_ms=1_000,
    max_time_slave_not_catchup_ms=5_000,
    propose_retry_ms=50,
    max_batch_bytes=64 * 1024,
    write_buffer_high_bytes=512 * 1024,
    write_buffer_low_bytes=128 * 1024,
    pump_budget_bytes=1 << 20,
)


class Proposer:
    """A fake controller for AlterSyncStateSet: records proposals; accepts them (new epoch =
    last + 1) unless ``reject`` is set; while ``gate`` is clear, answers wait."""

    def __init__(self, epoch: int = 1) -> None:
        self.epoch = epoch
        self.proposals: list[frozenset[int]] = []
        self.accepted: list[frozenset[int]] = []
        self.reject = False
        self.gate = asyncio.Event()
        self.gate.set()

    async def __call__(self, members: frozenset[int]) -> int:
        self.proposals.append(members)
        await self.gate.wait()
        if self.reject:
            raise RuntimeError("fenced: not the master of the current epoch")
        self.epoch += 1
        self.accepted.append(members)
        return self.epoch


@dataclass
class Node:
    broker_id: int
    path: Path
    store: MessageStore
    epochs: EpochFile
    ha: HAService
    proposer: Proposer = field(default_factory=Proposer)

    @classmethod
    async def start(
        cls, path: Path, broker_id: int, config: HAConfig = FAST, segment: int = SEGMENT
    ) -> Node:
        store = MessageStore(
            StoreConfig(
                data_dir=path,
                commitlog_segment_bytes=segment,
                store_host=f"127.0.0.1:{10_900 + broker_id}",
            )
        )
        store.open()
        epochs = EpochFile(path)
        proposer = Proposer()
        ha = HAService(store, epochs, config, propose_sync_state_set=proposer)
        await ha.start()
        return cls(broker_id, path, store, epochs, ha, proposer)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{10_900 + self.broker_id}"

    async def master(self, epoch: int, members: set[int] | None = None) -> None:
        ssset = members if members is not None else {self.broker_id}
        self.proposer.epoch = 1
        await self.ha.become_master(epoch, ssset, 1, self.broker_id)

    async def slave_of(self, master: Node, epoch: int) -> None:
        await self.ha.become_slave(master.ha.address, epoch, self.broker_id, self.address)

    def put(self, count: int, tag: int = 0, size: int = 200) -> PutResult:
        """``count`` single-message puts over two topics and three queues; returns the last."""
        result: PutResult | None = None
        for i in range(count):
            topic = TOPICS[i % 2]
            body = bytes([(tag + i) % 256]) * (size + i % 37)
            result = self.store.put(
                topic, i % 3, [Message(topic=topic, body=body, keys=f"k{tag}-{i}")], 1_000 + i
            )
            self.ha.notify_appended()
        assert result is not None
        return result

    def put_batch(self, count: int, size: int = 1024) -> PutResult:
        body = b"x" * size
        result = self.store.put("t", 0, [Message(topic="t", body=body)] * count, 1_000)
        self.ha.notify_appended()
        return result

    async def close(self) -> None:
        await self.ha.stop()
        self.store.close()


async def in_sync_group(master: Node, *slaves: Node, what: str = "full set") -> None:
    """``master`` made master at epoch 1 and ``slaves`` its slaves, once all of them are in its
    SyncStateSet (``what``: the wait's name)."""
    await master.master(1)
    for slave in slaves:
        await slave.slave_of(master, 1)
    members = {master.broker_id, *(slave.broker_id for slave in slaves)}
    await wait_until_async(lambda: master.ha.in_sync_members() == members, what)


async def replicated(master: Node, slave: Node, count: int) -> None:
    """``master`` made master at epoch 1, ``slave`` its slave, ``count`` messages put on the
    master; returns once the slave holds them."""
    await master.master(1)
    await slave.slave_of(master, 1)
    master.put(count)
    await wait_until_async(lambda: in_step(master, slave), "replicated")


def all_gets(store: MessageStore) -> list[tuple[object, ...]]:
    """Every queue read back through store.get, as comparable tuples."""
    out: list[tuple[object, ...]] = []
    for topic in sorted(store.topics()):
        for qid in sorted(store.queue_ids(topic)):
            for offset in range(store.queue_max_offset(topic, qid) + 1):
                r = store.get(topic, qid, offset, 4, 1 << 20)
                out.append((topic, qid, offset, r.status, r.next_offset, r.max_offset, r.body))
    return out


def in_step(*nodes: Node) -> bool:
    """Every node holds the first node's max offset."""
    return all(n.store.max_offset == nodes[0].store.max_offset for n in nodes)
