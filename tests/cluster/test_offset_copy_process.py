"""A slave's copy of its master's consumer offsets, between real processes (issue 34): the
master answers a copy asked from its last counter with only what changed (none of the 300
groups once nothing did; before: the whole table, every second), and the slave still ends with
every committed offset, a reset (an offset moved back) and a deleted group gone, also on the
new master after a kill -9 of the old one. The group is deleted on the master only, so only the
copy can carry it (a whole copy merged into the slave never removed it)."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest

from broker.processors.admin import OFFSET_COPY_PAGE
from client.bootstrap import Bootstrap
from protocol.codes import ResponseCode
from protocol.pull import AllConsumerOffsetsQuery, ConsumerOffsetTable, ConsumerOffsetUpdate
from protocol.topic_admin import DeleteGroupInBroker
from remoting.client import RemotingClient
from tests.cluster.support import full_sync_state_set, new_master, node_at
from tests.support.cluster import Cluster
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.multiprocess

TOPIC = "OffsetCopyTopic"
GROUPS = 300
"""More than a page of the master's answer (broker/processors/admin.py OFFSET_COPY_PAGE)."""


async def call(address: str, typed: Any) -> Any:
    conn = await RemotingClient.connect(address, timeout=5.0)
    try:
        header, body = typed.encode()
        return await conn.call(typed.code, header, body, timeout=5.0)
    finally:
        conn.close()


async def answer(address: str, query: AllConsumerOffsetsQuery) -> ConsumerOffsetTable:
    resp = await call(address, query)
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    return ConsumerOffsetTable.parse(resp.header, resp.body)


async def offsets_of(address: str) -> dict[str, Any]:
    resp = await call(address, AllConsumerOffsetsQuery())
    return dict(msgpack.unpackb(resp.body or b"\x80", strict_map_key=False) or {})


async def commit(address: str, group: str, queue_id: int, offset: int) -> None:
    update = ConsumerOffsetUpdate(group=group, topic=TOPIC, queue_id=queue_id, offset=offset)
    assert (await call(address, update)).code == ResponseCode.SUCCESS


async def commit_every_group(address: str, base: int) -> None:
    conn = await RemotingClient.connect(address, timeout=5.0)
    try:
        for i in range(GROUPS):
            update = ConsumerOffsetUpdate(
                group=f"group-{i}", topic=TOPIC, queue_id=i % 4, offset=base + i
            )
            await conn.call(update.code, *update.encode(), timeout=5.0)
    finally:
        conn.close()


async def test_the_slave_copies_only_changes_and_keeps_resets_and_deletes_over_a_failover(
    cluster: Cluster, boot: Bootstrap
) -> None:
    cluster.add_group("broker-a", 2, config="slave_config_sync_interval_ms = 300\n")
    doc = await full_sync_state_set(boot, cluster, size=2)
    master = node_at(cluster, doc["masterAddress"])
    slave = next(b for b in cluster.brokers if b.address != master.address)
    await commit_every_group(master.address, 100)

    async def slave_equals_master() -> bool:
        return await offsets_of(slave.address) == await offsets_of(master.address)

    await wait_until_async(
        slave_equals_master, "the slave's copy of the offsets", 30, on_timeout=cluster.logs
    )

    # Asked as the slave asks: whole once, then from the answer's counter.
    whole = await answer(master.address, AllConsumerOffsetsQuery(with_times=True))
    assert whole.incarnation is not None and whole.counter is not None, "no change counter"
    assert not whole.delta and len(whole.offsets) == GROUPS
    since = AllConsumerOffsetsQuery(
        with_times=True, since_incarnation=whole.incarnation, since_counter=whole.counter
    )
    idle = await answer(master.address, since)
    assert idle.delta and dict(idle.offsets) == {} and idle.counter == whole.counter

    # Every group moved: the changes come a page at a time, the slave takes them all.
    await commit_every_group(master.address, 1_000)
    page = await answer(master.address, since)
    assert page.delta and page.more and len(page.offsets) == OFFSET_COPY_PAGE
    await wait_until_async(
        slave_equals_master, "every group's move on the slave", 30, on_timeout=cluster.logs
    )
    since = AllConsumerOffsetsQuery(
        with_times=True,
        since_incarnation=whole.incarnation,
        since_counter=(await answer(master.address, AllConsumerOffsetsQuery())).counter,
    )

    # A reset (offset moved back), a deletion on the master only, a new commit.
    await commit(master.address, "group-3", 3, 1)
    deleted = await call(master.address, DeleteGroupInBroker(group="group-5"))
    assert deleted.code == ResponseCode.SUCCESS, deleted.remark
    await commit(master.address, "group-new", 0, 7)
    changed = await answer(master.address, since)
    assert changed.delta and set(changed.offsets) == {"group-3", "group-new"}
    assert changed.deleted_groups == ("group-5",)

    expected = await offsets_of(master.address)
    assert "group-5" not in expected and expected["group-3"][TOPIC][3] == 1
    await wait_until_async(
        slave_equals_master, "the reset and the deletion on the slave", 30, on_timeout=cluster.logs
    )

    master.kill9()
    doc = await new_master(boot, cluster, master.address)
    assert doc["masterAddress"] == slave.address
    assert await offsets_of(slave.address) == expected
