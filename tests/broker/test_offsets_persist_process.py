"""A broker process's consumer offsets persist encodes the groups changed since the last persist,
not the whole table (issue 34: the offset commit p99). Counts, from the broker's own debug line
``consumer offsets persisted`` (``groups``: the table's, ``changed``: the groups encoded): 1,000
groups commit over the real protocol, then 10 of them again; the persist after those 10 encodes
10. Before, every persist encoded every group again (0.15 s at 10,000 groups, holding the GIL
from a worker thread, the broker's event loop waking every 6 ms instead of every 1 ms meanwhile);
that broker wrote no such line. Then kill -9 and a start: every committed offset persisted is
there. ``make soak`` runs it with 10,000 groups."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from protocol.codes import ResponseCode
from protocol.pull import ConsumerOffsetQuery, ConsumerOffsetUpdate
from remoting.client import RemotingClient
from tests.broker.test_queue_descriptors import each
from tests.support.procs import BrokerProc
from tests.support.wait import wait_until

pytestmark = pytest.mark.multiprocess

PERSIST_MS = 300
TOPIC = "OffsetsPersist"


def persisted(broker: BrokerProc) -> list[dict[str, int]]:
    """Every ``consumer offsets persisted`` line of the broker's log so far."""
    lines = []
    for line in broker.log().splitlines():
        if "consumer offsets persisted" in line:
            doc = json.loads(line)
            lines.append({"groups": int(doc["groups"]), "changed": int(doc["changed"])})
    return lines


async def commit(address: str, groups: range, offset: int) -> None:
    conn = await RemotingClient.connect(address)
    try:

        async def one(g: int) -> None:
            ask = ConsumerOffsetUpdate(
                group=f"persist-group-{g:05d}", topic=TOPIC, queue_id=g % 8, offset=offset
            )
            resp = await conn.request(ask.code, *ask.encode(), 60)
            assert resp.code == ResponseCode.SUCCESS, (g, resp.code, resp.header)

        await each(len(groups), lambda i: one(groups[i]), inflight=16)
    finally:
        conn.close()


async def committed(address: str, g: int) -> int:
    conn = await RemotingClient.connect(address)
    try:
        ask = ConsumerOffsetQuery(group=f"persist-group-{g:05d}", topic=TOPIC, queue_id=g % 8)
        resp = await conn.request(ask.code, *ask.encode(), 30)
        assert resp.code == ResponseCode.SUCCESS, (g, resp.code, resp.header)
        return int(str(resp.header["offset"]))
    finally:
        conn.close()


async def persists_only_what_moved(tmp_path: Path, groups: int) -> None:
    broker = BrokerProc(
        tmp_path,
        extra_toml=f'consumer_offset_persist_interval_ms = {PERSIST_MS}\nlog_level = "debug"\n',
    )
    try:
        broker.start_and_wait(60)
        await commit(broker.address, range(groups), 1)
        first = wait_until(
            lambda: [p for p in persisted(broker) if p["groups"] == groups],
            f"a persist of the {groups:,} groups",
            60,
            on_timeout=lambda: broker.log()[-2000:],
        )
        seen = len(persisted(broker))
        moved = range(0, groups, groups // 10)
        await commit(broker.address, moved, 2)

        # The 10 commits may straddle a persist: every persist after them, until all 10 are in.
        def moved_in() -> list[dict[str, int]]:
            since = persisted(broker)[seen:]
            return since if sum(x["changed"] for x in since) >= len(moved) else []

        after = wait_until(
            moved_in,
            "the persists after 10 groups moved",
            60,
            on_timeout=lambda: broker.log()[-2000:],
        )
        assert first[0]["changed"] <= groups, first
        # Before: every persist encoded the whole table again (and said nothing of it).
        assert [x["groups"] for x in after] == [groups] * len(after), after
        assert sum(x["changed"] for x in after) == len(moved), after
        broker.kill9()
        broker.start_and_wait(60)
        for g in (*moved, 1, groups - 1):
            want = 2 if g in moved else 1
            assert await committed(broker.address, g) == want, g
    finally:
        broker.stop()


async def test_a_persist_after_ten_of_a_thousand_groups_moved_encodes_ten(tmp_path: Path) -> None:
    await persists_only_what_moved(tmp_path, 1_000)


@pytest.mark.soak
async def test_a_persist_after_ten_of_ten_thousand_groups_moved_encodes_ten(
    tmp_path: Path,
) -> None:
    await persists_only_what_moved(tmp_path, 10_000)
