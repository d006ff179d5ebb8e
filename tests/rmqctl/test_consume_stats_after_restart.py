"""consumerProgress of every group right after a broker's clean restart, against a real lone
broker (docs/operations.md, "Consumer progress after a restart"). After a clean stop the
ConsumeQueues open when first read; GET_CONSUME_STATS of every group read them all in one
request, holding the broker's event loop for as long (with 2,000 queues, tens of seconds: the
slaves' HA connections timed out). A request now opens at most CONSUME_STATS_QUEUE_OPENS of
them and lists the topics it left out; the command says so (exit status 1) and the next run
opens the rest, every group's lag right."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from broker.consumer_stats import CONSUME_STATS_QUEUE_OPENS
from client.admin import Admin
from client.producer import Producer
from protocol.broker_requests.consumer_stats import ConsumeStatsQuery
from protocol.codes import ResponseCode
from protocol.consume_stats import ConsumeStats
from protocol.pull import ConsumerOffsetUpdate
from remoting.client import RemotingClient
from tests.support.cli import rmqctl_run
from tests.support.procs import BrokerProc, started

pytestmark = pytest.mark.multiprocess

#: one queue each: more queues than one request opens
TOPICS = [f"R{i:03d}" for i in range(CONSUME_STATS_QUEUE_OPENS + 40)]


async def populate(address: str) -> None:
    """Each topic one queue and two messages; group g-<topic> committed offset 1 (lag 1)."""
    async with Admin(address) as admin:
        for t in TOPICS:
            await admin.create_topic(t, 1)
    async with Producer(address) as producer:
        await asyncio.gather(*(producer.send(t, b"x") for t in TOPICS for _ in range(2)))
    conn = await RemotingClient.connect(address)
    try:
        for t in TOPICS:
            ask = ConsumerOffsetUpdate(group=f"g-{t}", topic=t, queue_id=0, offset=1)
            resp = await conn.request(ask.code, *ask.encode(), 30)
            assert resp.code == ResponseCode.SUCCESS, resp
    finally:
        conn.close()


async def every_group(address: str) -> ConsumeStats:
    conn = await RemotingClient.connect(address)
    try:
        query = ConsumeStatsQuery()
        resp = await conn.request(query.code, *query.encode(), 60)
        assert resp.code == ResponseCode.SUCCESS, resp
        return ConsumeStats.decode(resp.body)
    finally:
        conn.close()


def test_every_groups_progress_after_a_restart_opens_a_bounded_number_of_queues(
    tmp_path: Path,
) -> None:
    broker = BrokerProc(tmp_path, extra_toml="consumequeue_segment_entries = 4096\n")
    with started(broker):
        asyncio.run(populate(broker.address))
        before = asyncio.run(every_group(broker.address))
        assert {g: [q.lag for q in rows] for g, rows in before.groups.items()} == {
            f"g-{t}": [1] for t in TOPICS
        }
    assert "Traceback" not in broker.log()
    with started(broker):  # a clean stop before: its ConsumeQueues open when first read
        first = asyncio.run(every_group(broker.address))
        answered = {q.topic for rows in first.groups.values() for q in rows}
        # The old code opened all of them: every topic answered, none left out.
        assert len(answered) == CONSUME_STATS_QUEUE_OPENS, sorted(set(TOPICS) - answered)
        left = {t for topics in first.not_opened.values() for t in topics}
        assert answered | left == set(TOPICS) and not answered & left
        assert first.not_opened == {f"g-{t}": (t,) for t in sorted(left)}
        assert all([q.lag for q in rows] == [1] for rows in first.groups.values())
        # The command opens the rest: complete, each group's lag right.
        done = rmqctl_run("--json", "consumerProgress", "-a", broker.address)
        assert done.returncode == 0, done.stderr
        doc = json.loads(done.stdout)
        assert doc["notOpened"] == [] and doc["notes"] == []
        assert {g["group"]: g["totalLag"] for g in doc["groups"]} == {f"g-{t}": 1 for t in TOPICS}
    with started(broker):  # again, the command first: what it says of the topics left out
        partial = rmqctl_run("--json", "consumerProgress", "-a", broker.address)
        assert partial.returncode == 1, partial.stdout
        doc = json.loads(partial.stdout)
        assert len(doc["groups"]) == CONSUME_STATS_QUEUE_OPENS
        assert len(doc["notOpened"]) == len(TOPICS) - CONSUME_STATS_QUEUE_OPENS
        assert doc["notOpened"][0] == {
            "brokerName": "broker-a",
            "group": f"g-{doc['notOpened'][0]['topic']}",
            "topic": doc["notOpened"][0]["topic"],
        }
        assert "not opened yet since the broker's start" in doc["notes"][0]
        assert "run the command again" in partial.stderr
        human = rmqctl_run("consumerProgress", "-a", broker.address)
        assert human.returncode == 0, human.stderr
        assert "Note:" not in human.stdout and human.stdout.count("g-R") == len(TOPICS)
    assert "Traceback" not in broker.log()
