"""SQL92 property filters in a cluster (issue 32 item 1): three controllers and a broker group of
two with enable_property_filter on, 10,000 messages carrying random properties (seeded), and 5
consumer groups with different expressions, each receiving exactly the set a plain-Python
evaluator picks: two through the SDK's pull consumer, two through the SDK's POP consumer, one
through the official RocketMQ 5 Python client (gRPC, SimpleConsumer with a SQL filter). A slave
serving reads filters the same way: a SQL92 pull of the slave's queue returns exactly the records
of that queue whose properties match."""

from __future__ import annotations

import asyncio
import random
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from client import Consumer, Filter, Producer, SimpleConsumer
from client.bootstrap import Bootstrap
from client.message import ReceivedMessage
from protocol.message import iter_records
from protocol.pull import PullFound, PullRequest, decode_pull_answer
from remoting.client import RemotingClient
from tests.cluster.support import create_once_registered, sync_state
from tests.support.cluster import Cluster
from tests.support.official_client import SQL92_CONSUMER, run_to_end
from tests.support.procs import free_port
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.multiprocess

TOPIC = "SqlGroups"
QUEUES = 4
SENT = 10_000

Props = dict[str, str]


def props_of(i: int) -> Props:
    rnd = random.Random(i * 7919)
    p = {"region": rnd.choice(["eu", "us", "ap"]), "amount": str(rnd.randint(0, 200))}
    if rnd.random() < 0.2:
        del p["amount"]
    if rnd.random() < 0.6:
        p["vip"] = rnd.choice(["true", "false"])
    if rnd.random() < 0.3:
        p["tier"] = rnd.choice(["gold", "silver"])
    return p


def amount(p: Props) -> int | None:
    return int(p["amount"]) if "amount" in p else None


GROUPS: dict[str, tuple[str, Callable[[Props], bool]]] = {
    "pull-1": (
        "region = 'eu' AND amount > 100",
        lambda p: p["region"] == "eu" and (amount(p) or 0) > 100,
    ),
    "pull-2": (
        "amount NOT BETWEEN 20 AND 180 OR vip IS TRUE",
        lambda p: p.get("vip") == "true" or (amount(p) is not None and not 20 <= amount(p) <= 180),  # type: ignore[operator]
    ),
    "pop-1": (
        "region IN ('us', 'ap') AND amount <= 10",
        lambda p: p["region"] in ("us", "ap") and amount(p) is not None and amount(p) <= 10,  # type: ignore[operator]
    ),
    "pop-2": (
        "NOT (region = 'eu') AND vip IS FALSE AND tier IS NOT NULL",
        lambda p: p["region"] != "eu" and p.get("vip") == "false" and "tier" in p,
    ),
    "grpc": (
        "tier = 'gold' AND (amount BETWEEN 50 AND 80 OR amount IS NULL)",
        lambda p: p.get("tier") == "gold" and (amount(p) is None or 50 <= amount(p) <= 80),  # type: ignore[operator]
    ),
}


def expected(group: str) -> list[str]:
    cond = GROUPS[group][1]
    return sorted(f"m-{i}" for i in range(SENT) if cond(props_of(i)))


@pytest.fixture
def ports(cluster: Cluster) -> list[int]:
    grpc = [free_port() for _ in range(2)]
    cluster.add_group(
        "broker-a",
        2,
        config="enable_property_filter = true\n",
        per_broker=[["--grpc-listen", f"127.0.0.1:{p}"] for p in grpc],
    )
    return grpc


async def test_five_groups_each_receive_exactly_their_matching_set(
    cluster: Cluster, ports: list[int], tmp_path: Path
) -> None:
    boot = Bootstrap(cluster.controller_addresses, timeout=2.0)
    try:

        async def in_sync() -> dict[str, object] | None:
            doc = await sync_state(boot, "broker-a")
            ok = doc and doc.get("masterAddress") and len(doc["syncStateSet"]) == 2
            return doc if ok else None

        doc = await wait_until_async(
            in_sync, "a master with 2 in sync", 60, on_timeout=cluster.logs
        )
    finally:
        boot.close()
    assert isinstance(doc, dict)
    master = str(doc["masterAddress"])
    index = next(i for i, b in enumerate(cluster.brokers) if b.address == master)
    slave = cluster.brokers[1 - index]
    await create_once_registered(cluster, TOPIC, QUEUES, "the topic")
    async with Producer(cluster.controller_addresses, send_deadline=30.0) as producer:
        for start in range(0, SENT, 500):
            await asyncio.gather(
                *(
                    producer.send(TOPIC, f"m-{i}".encode(), properties=props_of(i))
                    for i in range(start, min(SENT, start + 500))
                )
            )

    addresses = cluster.controller_addresses

    async def pull_group(group: str) -> list[str]:
        got: list[ReceivedMessage] = []
        want = len(expected(group))
        sql = Filter.sql(GROUPS[group][0])
        async with Consumer(addresses, group, TOPIC, filter=sql, commit_interval=0.2) as c:

            async def all_of_them() -> bool:
                got.extend(await c.receive(timeout=0.5))
                return len(got) >= want

            await wait_until_async(all_of_them, f"{group}'s messages", 150)
            got.extend(await c.receive(timeout=1.0))
        return sorted(m.body.decode() for m in got)

    async def pop_group(group: str) -> list[str]:
        got: list[str] = []
        want = len(expected(group))
        sql = Filter.sql(GROUPS[group][0])
        async with SimpleConsumer(addresses, group, TOPIC, filter=sql) as sc:

            async def all_of_them() -> bool:
                msgs = await sc.receive(32, invisible_duration=60, wait=0.5)
                await asyncio.gather(*(sc.ack(m) for m in msgs))
                got.extend(m.body.decode() for m in msgs)
                return len(got) >= want

            await wait_until_async(all_of_them, f"{group}'s messages", 150)
            got.extend(
                m.body.decode() for m in await sc.receive(32, invisible_duration=60, wait=1.0)
            )
        return sorted(got)

    home = tmp_path / "official"
    home.mkdir()
    official = run_to_end(
        [
            sys.executable, "-c", SQL92_CONSUMER, f"127.0.0.1:{ports[index]}", TOPIC, "grpc",
            str(len(expected("grpc"))), GROUPS["grpc"][0], "150", "30",
        ],
        home,
        timeout=200,
    )  # fmt: skip
    results = await asyncio.gather(
        pull_group("pull-1"), pull_group("pull-2"), pop_group("pop-1"), pop_group("pop-2"), official
    )
    for group, got in zip(["pull-1", "pull-2", "pop-1", "pop-2"], results[:4], strict=True):
        assert got == expected(group), group
    out = results[4]
    assert out["error"] is None, out
    assert sorted(out["bodies"]) == expected("grpc")
    assert out["left"] == []

    # The slave filters its reads the same way.
    expr, cond = GROUPS["pull-2"]
    conn = await RemotingClient.connect(slave.address, timeout=2.0)
    try:

        async def read_all(kind: str, subscription: str) -> list[tuple[str, Props]]:
            out: list[tuple[str, Props]] = []
            offset = 0
            while True:
                req = PullRequest(
                    group="slave-reader", topic=TOPIC, queue_id=0, offset=offset, max_count=256,
                    subscription=subscription, filter_type=kind,
                )  # fmt: skip
                answer = decode_pull_answer(await conn.request(req.code, req.header(), None, 10))
                if not isinstance(answer, PullFound) or answer.next_offset == offset:
                    return out
                out += [(r.body.decode(), r.properties) for r in iter_records(answer.body)]
                offset = answer.next_offset

        everything = await read_all("TAG", "*")
        assert len(everything) > SENT // QUEUES // 2
        filtered = await read_all("SQL92", expr)
        assert [b for b, _ in filtered] == [b for b, p in everything if cond(p)]
    finally:
        conn.close()
