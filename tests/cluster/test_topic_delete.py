"""deleteTopic and deleteSubGroup against real processes (issue 28 item 2): a controller quorum
and one group of two brokers (master and slave), rmqctl as an operator runs it.

- A topic deleted while producers send to it and to another topic: nothing crashes, the other
  topic loses no acknowledged message, a send to the deleted one answers TOPIC_NOT_EXIST, the
  master's failover does not bring it back, and created again it starts empty.
- A consumer group deleted: its settings, its offsets on both brokers and its retry topic go,
  the slave's copy of the master's tables does not bring them back, the DLQ stays unless
  --remove-dlq.
- Refusals: a live producer without --force, system topics and groups, a group's own topics,
  unknown names (topicList -c of an unknown cluster too); each one line on stderr, exit 1,
  nothing changed.
- A live producer after a failover: the new master refuses as the old one did (the time of the
  last send is the newest record's store time, which it holds), until ``client_expiry_ms`` has
  passed since that send.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import msgpack
import pytest

from client import Consumer, Producer
from client.bootstrap import Bootstrap
from client.errors import ClientError
from protocol.broker_requests.send import SendRequest
from protocol.codes import RequestCode, ResponseCode
from remoting.client import RemotingClient
from tests.cluster.support import (
    Key,
    cluster_rmqctl,
    cluster_rmqctl_json,
    consume_all,
    create_topic,
    full_sync_state_set,
    new_master,
    synced_master,
    takes_writes,
)
from tests.support.cluster import Cluster
from tests.support.metrics import metrics_port, scrape
from tests.support.procs import free_port
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.multiprocess


@pytest.fixture(name="cluster")
def one_group(cluster: Cluster) -> Cluster:
    cluster.add_group(
        "broker-a", 2, per_broker=[["--metrics-port", str(free_port())] for _ in "ab"]
    )
    return cluster


rmqctl, rmqctl_json = cluster_rmqctl, cluster_rmqctl_json


def refused(cluster: Cluster, *args: str) -> str:
    """The one line rmqctl prints for a refusal (exit status 1, nothing on stdout)."""
    proc = rmqctl(cluster, "--json", *args)
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rmqctl: "), proc.stderr
    return lines[0]


async def call(address: str, code: int, header: Any, body: bytes | None = None) -> tuple[int, Any]:
    conn = await RemotingClient.connect(address, timeout=2.0)
    try:
        resp = await conn.request(code, header, body, 5.0)
    finally:
        conn.close()
    body = msgpack.unpackb(resp.body, strict_map_key=False) if resp.body else None
    return resp.code, body


async def topics_on(address: str) -> dict[str, Any]:
    code, body = await call(address, RequestCode.GET_ALL_TOPIC_CONFIG, {})
    assert code == ResponseCode.SUCCESS
    return dict(body or {})


async def offsets_on(address: str) -> dict[str, Any]:
    code, body = await call(address, RequestCode.GET_ALL_CONSUMER_OFFSET, {})
    assert code == ResponseCode.SUCCESS
    return dict(body or {})


async def keep_sending(
    producer: Producer, topic: str, acked: dict[Key, bytes], stop: asyncio.Event
) -> int:
    """Send to ``topic`` until ``stop``; every acknowledged send goes into ``acked``. Returns
    how many sends failed (a deleted topic's)."""
    failed = 0
    i = 0
    while not stop.is_set():
        body = f"{topic}-{i}".encode()
        i += 1
        try:
            r = await producer.send(topic, body)
        except ClientError:
            failed += 1
            await asyncio.sleep(0.02)  # a refused send: do not spin on the refusal
            continue
        acked[(r.broker_name, r.queue_id, r.queue_offset)] = body
    return failed


async def test_a_topic_deleted_under_load_is_gone_everywhere_and_starts_empty_again(
    cluster: Cluster, boot: Bootstrap
) -> None:
    master = await synced_master(boot, cluster, size=2)
    slave = next(b for b in cluster.brokers if b is not master)
    await create_topic(boot, master.address, "Doomed", 2)
    await create_topic(boot, master.address, "Kept", 2)
    kept: dict[Key, bytes] = {}
    doomed: dict[Key, bytes] = {}
    stop = asyncio.Event()
    async with Producer(cluster.controller_addresses, retries=2) as producer:
        senders = [
            asyncio.create_task(keep_sending(producer, "Kept", kept, stop)),
            asyncio.create_task(keep_sending(producer, "Doomed", doomed, stop)),
        ]
        try:
            await wait_until_async(
                lambda: _true(len(kept) >= 50 and len(doomed) >= 50),
                "sends to both topics",
                30,
                interval=0.05,
                on_timeout=cluster.logs,
            )
            # A live producer: refused without --force, nothing changed.
            line = await asyncio.to_thread(refused, cluster, "deleteTopic", "-t", "Doomed")
            assert "a producer is live" in line and "--force" in line, line
            assert "Doomed" in await topics_on(master.address)
            report = await asyncio.to_thread(
                rmqctl_json, cluster, "deleteTopic", "-t", "Doomed", "--force"
            )
            assert report["topic"] == "Doomed"
            by_address = {b["address"]: b for b in report["brokers"]}
            assert set(by_address) == {master.address, slave.address}
            assert all(b["deleted"] for b in report["brokers"]), report
            sent_before = len(kept)
            await wait_until_async(
                lambda: _true(len(kept) >= sent_before + 50),
                "sends to the other topic after the delete",
                30,
                interval=0.05,
                on_timeout=cluster.logs,
            )
        finally:
            stop.set()
            results = await asyncio.gather(*senders)
    assert results[1] > 0  # sends to the deleted topic were refused
    for b in cluster.brokers:
        assert b.alive(), f"{b.name} exited"
    # A send to the deleted topic answers TOPIC_NOT_EXIST (it is not created by a send).
    code, _ = await call(master.address, RequestCode.SEND_MESSAGE, *_send("Doomed"))
    assert code == ResponseCode.TOPIC_NOT_EXIST
    for node in (master, slave):
        assert "Doomed" not in await topics_on(node.address)
    code, _ = await call(
        cluster.controllers[0].address, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Doomed"}
    )
    assert code == ResponseCode.TOPIC_NOT_EXIST
    listed = await asyncio.to_thread(rmqctl_json, cluster, "topicList")
    assert "Doomed" not in {t["topic"] for t in listed["topics"]}
    assert "Kept" in {t["topic"] for t in listed["topics"]}

    # statsAll no longer lists it (it did: the master's counters since its start), and -t of
    # it is refused as for a topic that never existed.
    async def sampled() -> set[str] | None:
        stats = await asyncio.to_thread(rmqctl_json, cluster, "statsAll")
        topics = {t["topic"] for t in stats["topics"]}
        return topics if "Kept" in topics else None

    # The master samples its counters each second: once its sample has the sends to Kept, it
    # has those to Doomed (sent side by side).
    topics = await wait_until_async(sampled, "statsAll to list Kept", 20, interval=0.2)
    assert "Doomed" not in topics, topics
    line = await asyncio.to_thread(refused, cluster, "statsAll", "-t", "Doomed")
    assert line == "rmqctl: no broker group has topic 'Doomed'", line
    # Nor do the master's traffic series (they stayed until it restarted).
    text = await asyncio.to_thread(scrape, metrics_port(master))
    assert 'topic="Kept"' in text and 'topic="Doomed"' not in text
    # The other topic lost nothing that was acknowledged.
    received = await consume_all(cluster.controller_addresses, "Kept", set(kept), timeout=60)
    assert {k: received.get(k) for k in kept} == kept

    # The master dies: the new one does not serve the deleted topic again.
    master.kill9()
    after = await new_master(boot, cluster, master.address)
    assert after["masterAddress"] == slave.address
    await wait_until_async(
        lambda: takes_writes(slave.address), "the new master takes writes", 20, interval=0.1
    )
    assert "Doomed" not in await topics_on(slave.address)
    code, _ = await call(slave.address, RequestCode.GET_TOPIC_STATS_INFO, {"topic": "Doomed"})
    assert code == ResponseCode.TOPIC_NOT_EXIST
    code, _ = await call(slave.address, RequestCode.SEND_MESSAGE, *_send("Doomed"))
    assert code == ResponseCode.TOPIC_NOT_EXIST
    master.restart()

    # Created again, it starts empty: each queue's min offset is its max, and a new group
    # reads only what is sent from now on.
    proc = await asyncio.to_thread(rmqctl, cluster, "updateTopic", "-t", "Doomed", "-q", "2")
    assert proc.returncode == 0, proc.stderr
    status = await asyncio.to_thread(rmqctl_json, cluster, "topicStatus", "-t", "Doomed")
    assert {q["queueId"] for q in status["queues"]} == {0, 1}
    assert all(q["minOffset"] == q["maxOffset"] for q in status["queues"]), status
    assert sum(q["maxOffset"] for q in status["queues"]) > 0  # offsets continue, never repeat
    fresh: dict[Key, bytes] = {}
    async with Producer(cluster.controller_addresses, retries=4) as producer:
        for i in range(6):
            r = await producer.send("Doomed", f"new-{i}".encode())
            fresh[(r.broker_name, r.queue_id, r.queue_offset)] = f"new-{i}".encode()
    got = await consume_all(cluster.controller_addresses, "Doomed", set(fresh), timeout=60)
    assert got == fresh
    status = await asyncio.to_thread(rmqctl_json, cluster, "topicStatus", "-t", "Doomed")
    assert sum(q["maxOffset"] - q["minOffset"] for q in status["queues"]) == 6
    assert all(q["lastUpdateMs"] > 0 for q in status["queues"] if q["maxOffset"] > q["minOffset"])


async def test_a_deleted_group_loses_settings_offsets_and_retry_topic_on_every_broker(
    cluster: Cluster, boot: Bootstrap
) -> None:
    master = await synced_master(boot, cluster, size=2)
    slave = next(b for b in cluster.brokers if b is not master)
    await create_topic(boot, master.address, "Orders", 2)
    await create_topic(boot, master.address, "%DLQ%billing", 1)
    proc = await asyncio.to_thread(
        rmqctl, cluster, "updateSubGroup", "-g", "billing", "--retry-max-times", "3"
    )
    assert proc.returncode == 0, proc.stderr
    async with Producer(cluster.controller_addresses) as producer:
        for i in range(20):
            await producer.send("Orders", f"o-{i}".encode())
    async with Consumer(cluster.controller_addresses, "billing", "Orders") as consumer:
        seen = 0
        while seen < 20:
            seen += len(await consumer.receive(timeout=1.0))
    for node in (master, slave):  # the slave copied the offsets and the retry topic

        async def copied(address: str = node.address) -> bool:
            return "billing" in await offsets_on(address) and "%RETRY%billing" in (
                await topics_on(address)
            )

        await wait_until_async(copied, f"billing on {node.name}", 20, interval=0.1)

    report = await asyncio.to_thread(rmqctl_json, cluster, "deleteSubGroup", "-g", "billing")
    assert report["group"] == "billing" and all(b["deleted"] for b in report["brokers"]), report
    # A sync of the slave after the delete: another group's offset committed on the master
    # reaches it; billing's must not come back with it.
    async with Consumer(cluster.controller_addresses, "audit", "Orders") as consumer:
        seen = 0
        while seen < 20:
            seen += len(await consumer.receive(timeout=1.0))
    await wait_until_async(
        lambda: _has(offsets_on(slave.address), "audit"), "audit on the slave", 20, interval=0.1
    )
    for node in (master, slave):
        assert "billing" not in await offsets_on(node.address)
        topics = await topics_on(node.address)
        assert "%RETRY%billing" not in topics and "%DLQ%billing" in topics
        code, _ = await call(
            node.address, RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG, {"group": "billing"}
        )
        assert code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
    # --remove-dlq takes the dead-letter topic too.
    report = await asyncio.to_thread(
        rmqctl_json, cluster, "deleteSubGroup", "-g", "billing", "--remove-dlq"
    )
    for node in (master, slave):
        assert "%DLQ%billing" not in await topics_on(node.address)
    line = await asyncio.to_thread(refused, cluster, "deleteSubGroup", "-g", "billing")
    assert "does not exist" in line, line


async def test_a_message_scheduled_to_a_deleted_topic_is_dropped_and_the_timer_goes_on(
    cluster: Cluster, boot: Bootstrap
) -> None:
    master = await synced_master(boot, cluster, size=2)
    await create_topic(boot, master.address, "Later", 1)
    await create_topic(boot, master.address, "After", 1)
    async with Producer(cluster.controller_addresses) as producer:
        await producer.send("Later", b"due after the delete", delay=3.0)
        report = await asyncio.to_thread(
            rmqctl_json, cluster, "deleteTopic", "-t", "Later", "--force"
        )
        assert all(b["deleted"] for b in report["brokers"]), report
        await producer.send("After", b"due later", delay=4.0)
    # The later message of another topic is delivered: the one due first, to the deleted
    # topic, did not hold the timer back.
    bodies: list[bytes] = []
    async with Consumer(cluster.controller_addresses, "after-reader", "After") as consumer:

        async def delivered() -> bool:
            bodies.extend(m.body for m in await consumer.receive(timeout=1.0))
            return bool(bodies)

        await wait_until_async(delivered, "the later scheduled message", 60, interval=0.1)
    assert bodies == [b"due later"]
    for node in cluster.brokers:
        assert "Later" not in await topics_on(node.address)
        code, _ = await call(node.address, RequestCode.GET_TOPIC_STATS_INFO, {"topic": "Later"})
        assert code == ResponseCode.TOPIC_NOT_EXIST  # no queue was made for the dropped one


async def test_refusals_are_one_line_and_change_nothing(cluster: Cluster, boot: Bootstrap) -> None:
    master = await synced_master(boot, cluster, size=2)
    await create_topic(boot, master.address, "Stays", 1)
    before = await topics_on(master.address)
    cases = [
        (("deleteTopic", "-t", "NoSuchTopic"), "does not exist"),
        (("deleteTopic", "-t", "rmq_sys_wheel_timer"), "system topic"),
        (("deleteTopic", "-t", "RMQ_SYS_TRANS_HALF_TOPIC"), "system topic"),
        (("deleteTopic", "-t", "%RETRY%g1"), "deleteSubGroup"),
        (("deleteSubGroup", "-g", "NoSuchGroup"), "does not exist"),
        (("deleteSubGroup", "-g", "CID_RMQ_SYS_TRANS"), "system group"),
        (("topicStatus", "-t", "NoSuchTopic"), "NoSuchTopic"),
        (("topicList", "-c", "NoSuchCluster"), "cluster 'NoSuchCluster' not found"),
    ]
    for args, expected in cases:
        line = await asyncio.to_thread(refused, cluster, *args)
        assert expected in line, (args, line)
    assert await topics_on(master.address) == before
    listed = await asyncio.to_thread(rmqctl_json, cluster, "topicList", "-c", "DefaultCluster")
    assert "Stays" in {t["topic"] for t in listed["topics"]}


async def test_a_new_master_refuses_a_topic_sent_to_moments_ago(
    cluster: Cluster, boot: Bootstrap
) -> None:
    master = await synced_master(boot, cluster, size=2)
    slave = next(b for b in cluster.brokers if b is not master)
    await create_topic(boot, master.address, "Live", 2)
    async with Producer(cluster.controller_addresses, retries=2) as producer:
        for i in range(20):
            await producer.send("Live", f"m-{i}".encode())
    last_send = time.monotonic()
    line = await asyncio.to_thread(refused, cluster, "deleteTopic", "-t", "Live")
    assert "a producer is live" in line and master.address in line, line

    master.kill9()
    after = await new_master(boot, cluster, master.address)
    assert after["masterAddress"] == slave.address
    line = await asyncio.to_thread(refused, cluster, "deleteTopic", "-t", "Live")
    ago = time.monotonic() - last_send
    assert ago < 10, (
        f"the failover took {ago:.1f} s: past client_expiry_ms, the test proves nothing"
    )
    assert "a producer is live" in line and slave.address in line, line
    assert "Live" in await topics_on(slave.address)

    # Once client_expiry_ms (10 s) has passed since the last send, the delete goes through
    # without --force: the new master's sign of a live producer lapses as the old one's did.
    master.restart()
    await full_sync_state_set(boot, cluster, size=2)  # the old master is back, a slave

    async def deleted() -> bool:
        proc = await asyncio.to_thread(rmqctl, cluster, "deleteTopic", "-t", "Live")
        if proc.returncode == 1 and "a producer is live" in proc.stderr:
            return False
        assert proc.returncode == 0, (proc.stdout, proc.stderr)
        return True

    await wait_until_async(deleted, "deleteTopic without --force", 30, interval=0.5)
    for node in (master, slave):
        assert "Live" not in await topics_on(node.address)


async def _true(value: bool) -> bool:
    return value


async def _has(doc: Any, key: str) -> bool:
    return key in await doc


def _send(topic: str) -> tuple[Any, bytes | None]:
    return SendRequest(topic=topic, body=b"after the delete").encode()
