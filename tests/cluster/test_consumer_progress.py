"""consumerProgress, consumerConnection and rmq_consumer_group_lag against real processes: three
controllers, two broker groups of two, two consumer groups that consumed different amounts.

- The lag of each group equals sent minus consumed, per broker group and in total, in rmqctl's
  table, its --json and the masters' metric alike.
- consumerConnection lists the live members and the queues each really holds.
- After kill -9 of broker-a's master, the new master reports the same committed offsets and
  last consume times: a slave copies them every ``slave_config_sync_interval_ms`` (1 s), so the
  test waits until the slave has the master's figures (that bound) before the kill.
- An unknown group: one line on stderr, exit status 1.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import pytest

from client import Consumer, Producer
from client.bootstrap import Bootstrap
from client.progress import ProgressAdmin
from protocol.codes import RequestCode
from protocol.consume_stats import ConsumeStats
from protocol.pull import ConsumerOffsetUpdate
from remoting.client import RemotingClient
from tests.cluster.support import (
    cluster_rmqctl,
    cluster_rmqctl_json,
    create_once_registered,
    sync_state,
)
from tests.support.cluster import BrokerNode, Cluster
from tests.support.metrics import group_lag, metrics_port, scrape
from tests.support.procs import free_port
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.multiprocess

TOPIC = "ProgressTopic"
SENT = 120
CONSUMED_BY_SLOW = 50


@pytest.fixture
def cluster(cluster: Cluster) -> Cluster:
    for name in ("broker-a", "broker-b"):
        ports = [["--metrics-port", str(free_port())] for _ in range(2)]
        cluster.add_group(name, 2, per_broker=ports)
    return cluster


def scrape_lag(node: BrokerNode) -> dict[tuple[str, str], float]:
    """(group, topic) -> rmq_consumer_group_lag as node's /metrics serves it."""
    return group_lag(scrape(metrics_port(node)))


def calls_itself_master(node: BrokerNode) -> bool:
    """Whether node's /metrics says its role is master (rmq_broker_role)."""
    return (
        re.search(r'^rmq_broker_role\{[^}]*role="master"\} 1\.0$', scrape(metrics_port(node)), re.M)
        is not None
    )


async def stats_at(address: str, group: str) -> ConsumeStats:
    conn = await RemotingClient.connect(address, timeout=2.0)
    try:
        frame = await conn.call(RequestCode.GET_CONSUME_STATS, {"consumerGroup": group}, None, 5)
        return ConsumeStats.decode(frame.body)
    finally:
        conn.close()


async def consume(cluster: Cluster, group: str, count: int) -> int:
    """Hand exactly ``count`` messages to the application, then close (committing them)."""
    got = 0
    async with Consumer(cluster.controller_addresses, group, TOPIC, commit_interval=0.2) as c:

        async def enough() -> bool:
            nonlocal got
            got += len(await c.receive(timeout=0.5, max_messages=count - got))
            return got >= count

        await wait_until_async(enough, f"{group} to receive {count}", 60, on_timeout=cluster.logs)
    return got


def by_broker(queues: list[dict[str, Any]], group: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for q in queues:
        if q["group"] == group:
            out[q["brokerName"]] = out.get(q["brokerName"], 0) + q["lag"]
    return out


async def test_lag_is_sent_minus_consumed_before_and_after_a_failover(cluster: Cluster) -> None:
    boot = Bootstrap(cluster.controller_addresses, timeout=2.0)
    try:

        async def groups_ready() -> bool:
            for name in ("broker-a", "broker-b"):
                doc = await sync_state(boot, name)
                if not (doc and doc.get("masterAddress") and len(doc["syncStateSet"]) == 2):
                    return False
            return True

        await wait_until_async(groups_ready, "two groups of 2 in sync", 60, on_timeout=cluster.logs)
        created = await create_once_registered(cluster, TOPIC, 4, "the topic on both masters")
        assert created == ["broker-a", "broker-b"]
        sent: dict[str, int] = {"broker-a": 0, "broker-b": 0}
        async with Producer(cluster.controller_addresses, send_deadline=30.0) as producer:
            for i in range(SENT):
                result = await producer.send(TOPIC, f"m-{i}".encode())
                sent[result.broker_name] += 1
        assert all(sent.values()), sent

        assert await consume(cluster, "fast", SENT) == SENT
        assert await consume(cluster, "slow", CONSUMED_BY_SLOW) == CONSUMED_BY_SLOW

        # consumerConnection: two live members of "idle" and the queues each holds.
        idle = [
            Consumer(cluster.controller_addresses, "idle", TOPIC, client_id=f"idle-{i}")
            for i in range(2)
        ]
        try:
            for c in idle:
                await c.start()

            def owned() -> dict[str, list[dict[str, Any]]]:
                return {
                    c.client_id: [
                        {"brokerName": q.broker_name, "queueId": q.queue_id}
                        for q in sorted(c.owned)
                    ]
                    for c in idle
                }

            await wait_until_async(
                lambda: sum(len(c.owned) for c in idle) == 8 and all(c.owned for c in idle),
                "the idle members to share the 8 queues",
                30,
                on_timeout=cluster.logs,
            )
            doc = cluster_rmqctl_json(cluster, "consumerConnection", "-g", "idle")
            members = {m["clientId"]: m for m in doc["members"]}
            assert sorted(members) == ["idle-0", "idle-1"]
            assert {cid: m["queues"] for cid, m in members.items()} == owned()
            assert all(m["topic"] == TOPIC and m["address"] for m in members.values())
            assert all(m["brokers"] == ["broker-a", "broker-b"] for m in members.values())
            human = cluster_rmqctl(cluster, "consumerConnection", "-g", "idle")
            assert human.returncode == 0 and "idle-0" in human.stdout, human.stderr
        finally:
            for c in idle:
                await c.close()

        # consumerProgress: lag = sent - consumed, per broker group and in total.
        async with ProgressAdmin(cluster.controller_addresses) as progress:

            async def lag_of(group: str) -> int:
                answers = await progress.consume_stats(group)
                return sum(q.lag for a in answers if a.stats for q in a.stats.groups[group])

            await wait_until_async(
                lambda: _is(lag_of("slow"), SENT - CONSUMED_BY_SLOW),
                "slow's lag to settle",
                30,
                on_timeout=cluster.logs,
            )
        fast = cluster_rmqctl_json(cluster, "consumerProgress", "-g", "fast")
        assert fast["totalLag"] == 0 and len(fast["queues"]) == 8
        assert all(q["maxOffset"] == q["consumerOffset"] for q in fast["queues"])
        assert sum(q["maxOffset"] for q in fast["queues"]) == SENT
        slow = cluster_rmqctl_json(cluster, "consumerProgress", "-g", "slow")
        assert slow["totalLag"] == SENT - CONSUMED_BY_SLOW
        assert slow["notes"] == []
        consumed = {
            b: sum(q["consumerOffset"] for q in slow["queues"] if q["brokerName"] == b)
            for b in sent
        }
        assert by_broker(slow["queues"], "slow") == {b: sent[b] - consumed[b] for b in sent}
        assert all(q["lastConsumeMs"] for q in slow["queues"] if q["consumerOffset"])
        overview = cluster_rmqctl_json(cluster, "consumerProgress")
        assert {g["group"]: g["totalLag"] for g in overview["groups"]} == {
            "fast": 0,
            "slow": SENT - CONSUMED_BY_SLOW,
            "idle": SENT,
        }
        table = cluster_rmqctl(cluster, "consumerProgress", "-g", "slow", "-t", TOPIC)
        assert table.returncode == 0, table.stderr
        assert f"Total lag: {SENT - CONSUMED_BY_SLOW} (8 queues)" in table.stdout

        # The masters' metric says the same, per broker group.
        masters = {}
        for name in sent:
            doc = await sync_state(boot, name)
            assert doc
            masters[name] = next(b for b in cluster.brokers if b.address == doc["masterAddress"])
        for name, node in masters.items():
            lags = scrape_lag(node)
            assert lags[("slow", TOPIC)] == by_broker(slow["queues"], "slow")[name]
            assert lags[("fast", TOPIC)] == 0
            # served without prometheus_client's per-series <name>_created gauges
            assert [ln for ln in scrape(metrics_port(node)).splitlines() if "_created" in ln] == []
        slave_a = next(
            b
            for b in cluster.brokers
            if b.broker_name == "broker-a" and b is not masters["broker-a"]
        )
        assert scrape_lag(slave_a) == {}  # a slave exports no lag (its offsets are a copy)

        # A group with a position on broker-a only (its consumers never reached broker-b, or
        # were stopped before they committed there): broker-b's messages are still its lag.
        conn = await RemotingClient.connect(masters["broker-a"].address, timeout=2.0)
        try:
            update = ConsumerOffsetUpdate(group="partial", topic=TOPIC, queue_id=0, offset=1)
            await conn.call(update.code, update.header(), None, 5)
        finally:
            conn.close()
        partial = cluster_rmqctl_json(cluster, "consumerProgress", "-g", "partial")
        assert partial["totalLag"] == SENT - 1
        assert by_broker(partial["queues"], "partial") == {
            "broker-a": sent["broker-a"] - 1,
            "broker-b": sent["broker-b"],
        }
        overview = cluster_rmqctl_json(cluster, "consumerProgress")
        assert {g["group"]: g["totalLag"] for g in overview["groups"]}["partial"] == SENT - 1

        unknown = cluster_rmqctl(cluster, "consumerProgress", "-g", "nobody")
        assert unknown.returncode == 1 and unknown.stdout == ""
        assert unknown.stderr == (
            "rmqctl: consumer group 'nobody' has no offsets or members on any broker group (a "
            "group made with updateSubGroup shows here once it commits an offset; getSubGroup "
            "shows its settings)\n"
        )
        other = cluster_rmqctl(cluster, "consumerProgress", "-g", "slow", "-t", "Other")
        assert other.returncode == 1 and other.stderr.count("\n") == 1, other.stderr

        # Failover: the slave copies offsets and times within its sync interval; wait for it,
        # kill -9 the master, and the new master reports the same figures.
        def rows(stats: ConsumeStats) -> list[tuple[str, int, int | None, int | None]]:
            return [
                (q.topic, q.queue_id, q.consumer_offset, q.last_consume_ms)
                for q in stats.groups.get("slow", ())
            ]

        before = rows(await stats_at(masters["broker-a"].address, "slow"))
        assert len(before) == 4

        async def slave_synced() -> bool:
            return rows(await stats_at(slave_a.address, "slow")) == before

        await wait_until_async(slave_synced, "the slave's copy of the offsets", 20)
        masters["broker-a"].kill9()

        async def promoted() -> bool:
            doc = await sync_state(boot, "broker-a")
            return bool(doc and doc.get("masterAddress") == slave_a.address)

        await wait_until_async(promoted, "the slave to become master", 60, on_timeout=cluster.logs)
        # The controllers name the new master before the broker has taken the role itself; a
        # slave answers consumer stats too (from its copy) but exports no lag until it is master.
        await wait_until_async(
            lambda: asyncio.to_thread(calls_itself_master, slave_a),
            "the promoted broker to take the master role",
            30,
            interval=0.2,
            on_timeout=cluster.logs,
        )
        await wait_until_async(
            lambda: _rmqctl_lag(cluster, "slow", SENT - CONSUMED_BY_SLOW),
            "the same lag from the new master",
            30,
            interval=0.5,
            on_timeout=cluster.logs,
        )
        after = cluster_rmqctl_json(cluster, "consumerProgress", "-g", "slow")
        rows_a = [
            (q["topic"], q["queueId"], q["consumerOffset"], q["lastConsumeMs"])
            for q in after["queues"]
            if q["brokerName"] == "broker-a"
        ]
        assert rows_a == before
        assert scrape_lag(slave_a)[("slow", TOPIC)] == by_broker(slow["queues"], "slow")["broker-a"]
    finally:
        boot.close()


async def _is(value: Any, expected: int) -> bool:
    return bool(await value == expected)


async def _rmqctl_lag(cluster: Cluster, group: str, expected: int) -> bool:
    proc = await asyncio.to_thread(
        cluster_rmqctl, cluster, "--json", "consumerProgress", "-g", group
    )
    if proc.returncode != 0:
        return False
    doc = json.loads(proc.stdout)
    return bool(doc["totalLag"] == expected and not doc["notes"])
