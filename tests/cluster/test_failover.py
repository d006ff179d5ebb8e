"""Controller mode end to end, with real processes: three controllers, one broker group of three.

Kill -9 the master while producers send with all-ack; the controllers elect a new master, the
producer carries on, the old master comes back as a slave (truncated to the consistent point),
and then: every acknowledged message is consumable, in order per queue, and the replicas'
CommitLogs are byte-identical up to the confirm offset.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest

from client import Consumer, Producer
from client.bootstrap import Bootstrap
from client.errors import ClientError
from protocol.codes import RequestCode
from remoting.client import RemotingClient
from remoting.errors import RemotingError
from tests.support.cluster import BrokerNode, Cluster

pytestmark = pytest.mark.multiprocess

TOPIC = "FailoverTopic"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path)
    try:
        c.start_controllers()
        c.add_group("broker-a", 3)
        yield c
    finally:
        c.stop()


async def sync_state(boot: Bootstrap) -> dict[str, Any] | None:
    try:
        resp = await boot.call(
            RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, {"brokerName": "broker-a"}, timeout=2.0
        )
    except (ClientError, RemotingError):
        return None
    return msgpack.unpackb(resp.body) if resp.body else None


async def wait_for(cond: Any, timeout: float, what: str, cluster: Cluster) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = await cond()
        if value:
            return value
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{cluster.logs()}")


async def epoch_cache(address: str) -> dict[str, Any]:
    conn = await RemotingClient.connect(address, timeout=2.0)
    try:
        resp = await conn.call(RequestCode.GET_BROKER_EPOCH_CACHE, timeout=2.0)
        return dict(msgpack.unpackb(resp.body))
    finally:
        conn.close()


def commitlog_bytes(node: BrokerNode, upto: int) -> bytes:
    out = bytearray()
    for seg in sorted((node.data_dir / "commitlog").iterdir()):
        if seg.name.isdigit():
            out += seg.read_bytes()
    return bytes(out[:upto])


async def test_master_killed_under_load_loses_no_acknowledged_message(cluster: Cluster) -> None:
    boot = Bootstrap(cluster.controller_addresses, timeout=2.0)
    try:

        async def full_set() -> dict[str, Any] | None:
            doc = await sync_state(boot)
            return (
                doc if doc and doc.get("masterAddress") and len(doc["syncStateSet"]) == 3 else None
            )

        doc = await wait_for(full_set, 60, "a master with all three replicas in sync", cluster)
        first_master, first_epoch = doc["masterAddress"], doc["masterEpoch"]
        await wait_for(
            lambda: _route_has_master(boot), 30, "brokers registered for routes", cluster
        )

        acked: dict[tuple[str, int, int], bytes] = {}
        async with Producer(cluster.controller_addresses, retries=6, send_timeout=5.0) as producer:
            await _create_topic(boot, first_master)

            async def send_range(lo: int, hi: int) -> None:
                for i in range(lo, hi):
                    body = f"m-{i}".encode()
                    try:
                        r = await producer.send(TOPIC, body)
                    except ClientError:
                        continue  # not acknowledged: may or may not survive, not checked
                    acked[(r.broker_name, r.queue_id, r.queue_offset)] = body

            await asyncio.gather(*(send_range(w * 100, w * 100 + 100) for w in range(4)))
            master = next(b for b in cluster.brokers if b.address == first_master)
            master.kill9()

            async def new_master() -> dict[str, Any] | None:
                doc = await sync_state(boot)
                ok = doc and doc.get("masterAddress") not in (None, "", first_master)
                return doc if ok else None

            doc = await wait_for(new_master, 30, "a new master", cluster)
            assert doc["masterEpoch"] > first_epoch
            await asyncio.gather(
                *(send_range(1000 + w * 100, 1000 + w * 100 + 100) for w in range(4))
            )

        master.restart()
        doc = await wait_for(full_set, 60, "the old master back in sync as a slave", cluster)
        assert doc["masterAddress"] != first_master

        received: dict[tuple[str, int, int], bytes] = {}
        async with Consumer(cluster.controller_addresses, "checker", TOPIC) as consumer:
            deadline = time.monotonic() + 60
            while not set(acked) <= set(received) and time.monotonic() < deadline:
                for m in await consumer.receive(timeout=1.0):
                    received[(m.broker_name, m.queue_id, m.queue_offset)] = m.body
        missing = [k for k in acked if received.get(k) != acked[k]]
        assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {missing[:5]}"
        assert len(acked) > 600

        caches = [await epoch_cache(b.address) for b in cluster.brokers]
        confirm = min(c["confirmOffset"] for c in caches)
        assert confirm > 0
        logs = [commitlog_bytes(b, confirm) for b in cluster.brokers]
        assert logs[0] == logs[1] == logs[2], "replicas differ below the confirm offset"
    finally:
        boot.close()


async def _route_has_master(boot: Bootstrap) -> bool:
    try:
        resp = await boot.call(RequestCode.GET_BROKER_CLUSTER_INFO, timeout=2.0)
    except (ClientError, RemotingError):
        return False
    doc = msgpack.unpackb(resp.body)
    return any(
        b.get("role") == "MASTER" for group in doc.get("clusters", {}).values() for b in group
    )


async def _create_topic(boot: Bootstrap, master: str) -> None:
    conn = await RemotingClient.connect(master)
    try:
        await conn.call(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": TOPIC, "queues": 4})
    finally:
        conn.close()

    async def routed() -> bool:
        try:
            await boot.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC}, timeout=2.0)
            return True
        except (ClientError, RemotingError):
            return False

    deadline = time.monotonic() + 20
    while not await routed():
        assert time.monotonic() < deadline, "topic never appeared in the controllers' routes"
        await asyncio.sleep(0.1)
