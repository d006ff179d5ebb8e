"""docs/operations.md, "Upgrades, one node at a time", followed step by step against real
processes, under load: the example layout's shape (three "hosts", each a controller and one
replica of broker-a and of broker-b, here on 127.0.0.1), an idempotent SDK producer sending and
an SDK consumer reading throughout. Each host in turn: health checked with rmqctl (step 1), the
controllers' leadership moved off it (2), its masters moved with electMaster and the group
waited for until every replica is InSync again (3), its daemons restarted as `systemctl
restart rmq.target` does, brokers stopped first (5), then waited for with rmqctl (6); at the
end the masters go back (7). Every acknowledged send must be consumed, and none stored twice.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from client.consumer import Consumer
from client.errors import ClientError
from client.producer import Producer
from tests.cluster.support import create_routed
from tests.support.cluster import BrokerNode, Cluster, ControllerNode, controllers_started
from tests.support.procs import port_open, rmqctl_async
from tests.support.wait import wait_until, wait_until_async

# Minutes of real processes (63 to 121 s alone, over 300 s beside the rest of the suite on 2
# cores): with the soaks (`make soak`), not `make test`.
pytestmark = [pytest.mark.multiprocess, pytest.mark.soak]

ROOT = Path(__file__).resolve().parents[2]
GROUPS = ("broker-a", "broker-b")
TOPIC = "orders"


def runbook() -> str:
    text = (ROOT / "docs" / "operations.md").read_text()
    start = text.index("\n## Upgrades, one node at a time\n")
    return text[start : text.index("\n## ", start + 1)]


async def ctl(cluster: Cluster, *args: str) -> dict[str, Any] | None:
    """``rmqctl --json ARGS`` against the controllers; None when it exits non-zero (a
    controller or a group in transition)."""
    code, out, _err = await rmqctl_async("-a", cluster.controller_addresses, "--json", *args)
    return json.loads(out) if code == 0 else None


async def groups_in_sync(cluster: Cluster, groups: tuple[str, ...] = GROUPS) -> bool:
    """Every replica of each group ``Alive yes`` and ``InSync yes`` (steps 1, 3 and 6)."""
    for group in groups:
        doc = await ctl(cluster, "getSyncStateSet", "-b", group)
        if doc is None or not doc.get("masterAddress") or len(doc["replicas"]) != 3:
            return False
        if not all(r["alive"] and r["inSync"] for r in doc["replicas"]):
            return False
    return True


async def healthy(cluster: Cluster) -> bool:
    """Step 1 and 6: a leader and two followers, none unreachable; every group in sync."""
    meta = await ctl(cluster, "getControllerMetaData")
    if meta is None or meta["unreachable"]:
        return False
    if sorted(meta["roles"].values()) != ["follower", "follower", "leader"]:
        return False
    return await groups_in_sync(cluster)


def host(cluster: Cluster, i: int) -> tuple[ControllerNode, list[BrokerNode]]:
    return cluster.controllers[i], [b for b in cluster.brokers if b.index == i]


async def restart_host(controller: ControllerNode, brokers: list[BrokerNode]) -> None:
    """Step 5, `systemctl restart rmq.target`: the brokers stop, then the controller; the
    controller starts and serves, then the brokers."""

    def restart() -> None:
        for b in brokers:
            b.terminate()
        for b in brokers:
            b.wait_stopped(60)
        controller.stop(30)
        controller.start()
        wait_until(lambda: port_open(controller.port), f"{controller.name} to serve", 60)
        for b in brokers:
            b.restart()

    await asyncio.to_thread(restart)


async def test_the_upgrade_runbook_under_load(tmp_path: Path) -> None:
    text = runbook()
    for line in (
        "rmqctl transferControllerLeader --id n1",
        "rmqctl electMaster -b GROUP",
        "systemctl restart rmq.target",
        "electMaster -b GROUP -i ID",
    ):
        assert line in text, f"the runbook no longer says {line!r}: update this test"
    with controllers_started(tmp_path) as cluster:
        for group in GROUPS:
            cluster.add_group(group, 3)
        await wait_until_async(lambda: groups_in_sync(cluster), "both groups in sync", 120)
        await create_routed(cluster.controller_addresses, TOPIC, 4)
        acked: dict[bytes, tuple[str, int, int]] = {}
        failed: list[str] = []
        consumed: dict[bytes, set[tuple[str, int, int]]] = {}
        stop = asyncio.Event()

        async def produce(producer: Producer, worker: int) -> None:
            n = 0
            while not stop.is_set():
                body = f"w{worker}-{n}".encode()
                n += 1
                try:
                    r = await producer.send(TOPIC, body)
                except ClientError as exc:  # a send may fail; only acknowledged ones count
                    failed.append(str(exc))
                    continue
                acked[body] = (r.broker_name, r.queue_id, r.queue_offset)
                await asyncio.sleep(0.02)

        async def consume(consumer: Consumer) -> None:
            async for msg in consumer:
                key = (msg.broker_name, msg.queue_id, msg.queue_offset)
                consumed.setdefault(msg.body, set()).add(key)

        async with (
            Producer(cluster.controller_addresses) as producer,
            Consumer(cluster.controller_addresses, "runbook", TOPIC) as consumer,
        ):
            reader = asyncio.create_task(consume(consumer))
            writers = [asyncio.create_task(produce(producer, w)) for w in range(4)]
            try:
                for i in range(3):
                    controller, brokers = host(cluster, i)
                    addresses = {b.address for b in brokers}
                    # 1. health
                    await wait_until_async(lambda: healthy(cluster), "a healthy cluster", 120)
                    # 2. the leader off this host
                    meta = await ctl(cluster, "getControllerMetaData")
                    assert meta is not None
                    if meta["leaderId"] == controller.node_id:
                        other = cluster.controllers[(i + 1) % 3].node_id
                        assert await ctl(cluster, "transferControllerLeader", "--id", other)

                        async def moved(me: str = controller.node_id) -> bool:
                            doc = await ctl(cluster, "getControllerMetaData")
                            return doc is not None and doc["leaderId"] not in (None, me)

                        await wait_until_async(moved, "the leadership to move", 60)
                    # 3. the masters off this host, each group in sync again
                    for group in GROUPS:

                        async def master_off(g: str = group, here: set[str] = addresses) -> bool:
                            doc = await ctl(cluster, "getSyncStateSet", "-b", g)
                            if doc is None:
                                return False
                            if doc["masterAddress"] not in here:
                                return True
                            await ctl(cluster, "electMaster", "-b", g)
                            return False

                        await wait_until_async(
                            master_off, f"{group}'s master moved", 60, interval=1
                        )
                        await wait_until_async(
                            lambda g=group: groups_in_sync(cluster, (g,)),
                            f"{group} in sync after electMaster",
                            120,
                        )
                    # 5. restart the host's daemons; 6. wait for them
                    await restart_host(controller, brokers)
                    await wait_until_async(
                        lambda: healthy(cluster),
                        f"host {i} back: its controller a member, every group in sync",
                        180,
                        on_timeout=cluster.logs,
                    )
                # 7. the masters back to their preferred hosts (broker-a host 0, broker-b 1)
                for group, preferred in zip(GROUPS, (0, 1), strict=True):
                    doc = await ctl(cluster, "getSyncStateSet", "-b", group)
                    assert doc is not None
                    address = next(b.address for b in host(cluster, preferred)[1]
                                   if b.broker_name == group)  # fmt: skip
                    target = next(r for r in doc["replicas"] if r["address"] == address)
                    if target["brokerId"] == doc["masterBrokerId"]:
                        continue  # there already (electMaster: "... is already the master")
                    await wait_until_async(
                        lambda g=group, t=target: ctl(
                            cluster, "electMaster", "-b", g, "-i", str(t["brokerId"])
                        ),
                        f"electMaster -b {group} -i {target['brokerId']}",
                        60,
                        interval=1,
                    )
            finally:
                stop.set()
                await asyncio.gather(*writers)
            await wait_until_async(
                lambda: all(body in consumed for body in acked),
                "every acknowledged send consumed",
                120,
                interval=0.5,
                on_timeout=lambda: str([b for b in acked if b not in consumed][:20]),
            )
            reader.cancel()
        assert len(acked) > 100, (len(acked), failed[:5])
        copies = {body: keys for body, keys in consumed.items() if len(keys) > 1}
        assert copies == {}, copies  # the idempotent producer stored each send once
        elsewhere = [b for b, k in acked.items() if k not in consumed[b]]
        assert elsewhere == [], elsewhere[:10]
