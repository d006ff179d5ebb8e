"""A consumer group with a tag filter commits past the messages its filter passes over, against
real processes: three controllers and a broker group of two (issue 25, item 1).

One message in ten carries the tag the groups subscribe to. After the matching messages were
consumed, the group's lag is 0 in ``rmqctl consumerProgress --json`` and in the master's
``rmq_consumer_group_lag`` (docs/metrics.md), for:

- an SDK ``Consumer(..., filter=...)`` while it runs (the passed-over entries count as consumed
  once everything delivered before them was, and on a queue with nothing to deliver at once);
  a member of the same group started after it closed receives nothing for ``QUIET_S`` seconds,
  then exactly the one new matching message;
- ``rmqctl consumeMessage --filter`` (human ``consumerProgress``: ``Total lag: 0``);
- ``rmqctl consumeMessage --pop --filter`` (POP commits past the filtered entries too).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from client import Consumer, Producer
from client.bootstrap import Bootstrap
from client.message import ReceivedMessage
from tests.cluster.support import cluster_rmqctl, create_once_registered, sync_state
from tests.support.cluster import BrokerNode, Cluster
from tests.support.metrics import group_lag, metrics_port, scrape
from tests.support.procs import free_port
from tests.support.wait import stays_async, wait_until_async

pytestmark = pytest.mark.multiprocess

TOPIC = "FilteredTopic"
QUEUES = 2
SENT = 200
MATCH, OTHER = "Hit", "Miss"
MATCHING = SENT // 10
QUIET_S = 4.0
"""How long a restarted member must receive nothing."""


def tag_of(i: int) -> str:
    return MATCH if i % 10 == 3 else OTHER


@pytest.fixture
def cluster(cluster: Cluster) -> Cluster:
    ports = [["--metrics-port", str(free_port())] for _ in range(2)]
    cluster.add_group("broker-a", 2, per_broker=ports)
    return cluster


def progress(cluster: Cluster, group: str) -> dict[str, Any]:
    proc = cluster_rmqctl(cluster, "--json", "consumerProgress", "-g", group, "-t", TOPIC)
    assert proc.returncode == 0, proc.stderr
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc


def settled(cluster: Cluster, master: BrokerNode, group: str) -> bool:
    """The group's lag is 0 in rmqctl (every queue's committed offset at its end) and in the
    master's /metrics."""
    doc = progress(cluster, group)
    queues = doc["queues"]
    return (
        doc["totalLag"] == 0
        and len(queues) == QUEUES
        and all(q["consumerOffset"] == q["maxOffset"] for q in queues)
        and group_lag(scrape(metrics_port(master))).get((group, TOPIC)) == 0
    )


def lag_report(cluster: Cluster, master: BrokerNode, group: str) -> str:
    doc = progress(cluster, group)
    rows = [(q["queueId"], q["consumerOffset"], q["maxOffset"]) for q in doc["queues"]]
    metric = group_lag(scrape(metrics_port(master))).get((group, TOPIC))
    return f"totalLag {doc['totalLag']}, (queue, committed, max) {rows}, metric {metric}"


async def wait_settled(
    cluster: Cluster, master: BrokerNode, group: str, consumer: Consumer | None = None
) -> None:
    """Wait until :func:`settled`; a running ``consumer`` keeps asking for more meanwhile (what
    it was handed counts as consumed from then on) and must receive nothing."""

    async def check() -> bool:
        if consumer is not None:
            await _nothing(consumer)
        return settled(cluster, master, group)

    try:
        await wait_until_async(check, f"{group}'s lag to reach 0", 30, interval=0.3)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{lag_report(cluster, master, group)}") from None


async def test_a_filtered_group_commits_past_what_its_filter_passes_over(cluster: Cluster) -> None:
    boot = Bootstrap(cluster.controller_addresses, timeout=2.0)
    try:

        async def master_address() -> str | None:
            doc = await sync_state(boot, "broker-a")
            ok = doc and doc.get("masterAddress") and len(doc["syncStateSet"]) == 2
            return str(doc["masterAddress"]) if doc and ok else None

        address = await wait_until_async(
            master_address, "a master with 2 in sync", 60, on_timeout=cluster.logs
        )
        master = next(b for b in cluster.brokers if b.address == address)
    finally:
        boot.close()
    await create_once_registered(cluster, TOPIC, QUEUES, "the topic")
    async with Producer(cluster.controller_addresses, send_deadline=30.0) as producer:
        for i in range(SENT):
            await producer.send(TOPIC, f"m-{i}".encode(), tags=tag_of(i))

    # The SDK consumer: only the matching messages, then the lag falls to 0 while it runs.
    got: list[ReceivedMessage] = []
    async with Consumer(
        cluster.controller_addresses, "sdk", TOPIC, filter=MATCH, commit_interval=0.2
    ) as consumer:

        async def all_matching() -> bool:
            got.extend(await consumer.receive(timeout=0.5))
            return len(got) >= MATCHING

        await wait_until_async(all_matching, "the matching messages", 60, on_timeout=cluster.logs)
        assert sorted(m.body for m in got) == sorted(
            f"m-{i}".encode() for i in range(SENT) if tag_of(i) == MATCH
        )
        assert {m.tags for m in got} == {MATCH}
        await wait_settled(cluster, master, "sdk", consumer)

    # A member of the group started anew receives nothing of what was passed over ...
    async with Consumer(
        cluster.controller_addresses, "sdk", TOPIC, filter=MATCH, commit_interval=0.2
    ) as again:
        await wait_until_async(
            lambda: len(again.owned) == QUEUES, "the new member to own the queues", 30
        )
        await stays_async(
            lambda: _nothing(again), QUIET_S, "the restarted member receiving nothing"
        )
        # ... and does receive what matches next.
        async with Producer(cluster.controller_addresses, send_deadline=30.0) as producer:
            await producer.send(TOPIC, b"late-miss", tags=OTHER)
            await producer.send(TOPIC, b"late-hit", tags=MATCH)
            await producer.send(TOPIC, b"late-miss-2", tags=OTHER)
        late: list[ReceivedMessage] = []

        async def the_late_one() -> bool:
            late.extend(await again.receive(timeout=0.5))
            return bool(late)

        await wait_until_async(the_late_one, "the new matching message", 30)
        await stays_async(lambda: _nothing(again), 1.0, "nothing after the new message")
        assert [m.body for m in late] == [b"late-hit"]
        await wait_settled(cluster, master, "sdk", again)

    # rmqctl consumeMessage --filter (an SDK consumer for --timeout seconds).
    cli = cluster_rmqctl(
        cluster, "--json", "consumeMessage", "-t", TOPIC, "-g", "cli", "--filter", MATCH,
        "--timeout", "10",
    )  # fmt: skip
    assert cli.returncode == 0, cli.stderr
    lines = [json.loads(line) for line in cli.stdout.splitlines()]
    assert len(lines) == MATCHING + 1 and {d["tags"] for d in lines} == {MATCH}
    await wait_settled(cluster, master, "cli")
    table = cluster_rmqctl(cluster, "consumerProgress", "-g", "cli", "-t", TOPIC)
    assert table.returncode == 0 and f"Total lag: 0 ({QUEUES} queues)" in table.stdout, table

    # POP: the group's consume offset moves past the filtered entries too.
    pop = cluster_rmqctl(
        cluster, "--json", "consumeMessage", "-t", TOPIC, "-g", "popper", "--pop",
        "--filter", MATCH, "--timeout", "10",
    )  # fmt: skip
    assert pop.returncode == 0, pop.stderr
    lines = [json.loads(line) for line in pop.stdout.splitlines()]
    assert len(lines) == MATCHING + 1 and {d["tags"] for d in lines} == {MATCH}
    await wait_settled(cluster, master, "popper")


async def _nothing(consumer: Consumer) -> bool:
    msgs = await consumer.receive(timeout=0.2)
    assert msgs == [], [(m.queue_id, m.queue_offset, m.tags) for m in msgs]
    return True
