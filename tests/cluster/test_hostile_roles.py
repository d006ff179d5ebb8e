"""Hostile role changes against real processes (issue 9, item 1; the broker part of item 5).

- Forged NOTIFY_BROKER_ROLE_CHANGED (1008) frames, sent from a plain client connection to every
  broker, naming hand-written fake masters (one answering the HA handshake with an empty log,
  one with a huge epoch) or a real slave with a huge epoch: no replica changes role, nobody
  connects to the fakes, writes keep flowing, and every acknowledged message is still there
  after a restart.
- An impostor on the dead master's HA port (the controllers frozen, so nobody else acts first)
  answering with a history that would cut the slave below its confirm offset, or at an epoch
  the controllers never named: the slave cuts nothing, and once the controllers elect it every
  acknowledged message is consumable.
- A broker whose metadata an operator cleaned while it was down comes back under a new id and
  joins the group again instead of looping on 2010.
"""

from __future__ import annotations

import signal
from typing import Any

import msgpack
import pytest

from client import Producer
from client.bootstrap import Bootstrap
from protocol.codes import RequestCode, ResponseCode
from protocol.ha import EpochEntry
from remoting.client import RemotingClient
from storage.checkpoint import load_checkpoint
from tests.cluster.fake_master import INT32_MAX, FakeMaster, FakeReply
from tests.cluster.support import (
    Key,
    consume_all,
    create_topic,
    epoch_cache,
    full_sync_state_set,
    new_master,
    node_at,
    sync_state,
)
from tests.support.cluster import BrokerNode, Cluster
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.multiprocess

TOPIC = "HostileTopic"
GROUP = "broker-a"


async def start_group(
    cluster: Cluster, boot: Bootstrap, replicas: int = 2
) -> tuple[dict[str, Any], BrokerNode]:
    cluster.add_group(GROUP, replicas)
    doc = await full_sync_state_set(boot, cluster, size=replicas)
    master = node_at(cluster, doc["masterAddress"])
    await create_topic(boot, master.address, TOPIC)
    await routed_everywhere(cluster)
    return doc, master


async def routed_everywhere(cluster: Cluster) -> None:
    """Wait until every controller routes the topic to a master (the producer takes a
    TOPIC_NOT_EXIST from any of them as final)."""

    async def routed() -> bool:
        for c in cluster.controllers:
            conn = await RemotingClient.connect(c.address, timeout=2.0)
            try:
                resp = await conn.request(
                    RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC}, None, 2.0
                )
            finally:
                conn.close()
            if resp.code != ResponseCode.SUCCESS:
                return False
        return True

    await wait_until_async(
        routed, "every controller to route the topic", 30, interval=0.1, on_timeout=cluster.logs
    )


def producer_for(cluster: Cluster) -> Producer:
    return Producer(cluster.controller_addresses, retries=8, send_timeout=5.0)


async def send_all(
    producer: Producer, prefix: str, count: int, acked: dict[Key, bytes]
) -> dict[Key, bytes]:
    for i in range(count):
        body = f"{prefix}-{i}".encode()
        r = await producer.send(TOPIC, body)
        acked[(r.broker_name, r.queue_id, r.queue_offset)] = body
    return acked


async def forge_role_change(
    broker: BrokerNode, master_id: int, master_address: str, epoch: int, members: list[int]
) -> None:
    """NOTIFY_BROKER_ROLE_CHANGED from a plain client connection (no controller involved)."""
    conn = await RemotingClient.connect(broker.address, timeout=2.0)
    try:
        header = {
            "brokerName": GROUP,
            "masterBrokerId": master_id,
            "masterAddress": master_address,
            "masterEpoch": epoch,
            "syncStateSetEpoch": epoch,
        }
        body = msgpack.packb({"syncStateSet": members, "replicas": []})
        resp = await conn.request(RequestCode.NOTIFY_BROKER_ROLE_CHANGED, header, body, 5.0)
        assert resp.code == ResponseCode.SUCCESS
    finally:
        conn.close()


async def assert_acked_read(cluster: Cluster, acked: dict[Key, bytes]) -> None:
    """Every acknowledged message is read back, with its body."""
    received = await consume_all(cluster.controller_addresses, TOPIC, set(acked))
    assert {k: received.get(k) for k in acked} == acked


async def restart_all_and_read(cluster: Cluster, boot: Bootstrap, acked: dict[Key, bytes]) -> None:
    """Stop every broker cleanly and start them again: the group comes back in step and every
    acknowledged message is read back."""
    for b in cluster.brokers:
        b.stop()
    for b in cluster.brokers:
        b.restart()
    await full_sync_state_set(boot, cluster, size=2)
    await assert_acked_read(cluster, acked)


IGNORED = "ignored a role change the controllers do not confirm"


async def assert_roles_unchanged(
    cluster: Cluster, boot: Bootstrap, doc: dict[str, Any], fakes: list[FakeMaster]
) -> None:
    now = await sync_state(boot)
    assert now is not None
    assert (now["masterAddress"], now["masterEpoch"]) == (doc["masterAddress"], doc["masterEpoch"])
    for fake in fakes:
        assert fake.handshakes == 0, f"a broker replicated from the fake master {fake.address}"
    for b in cluster.brokers:
        cache = await epoch_cache(b.address)
        role = "MASTER" if b.address == doc["masterAddress"] else "SLAVE"
        assert cache["role"] == role, f"{b.name} is {cache['role']} now"
        assert max(e["epoch"] for e in cache["epochs"]) <= doc["masterEpoch"], cache["epochs"]


async def test_forged_role_changes_are_only_a_hint_to_ask_the_controllers(
    cluster: Cluster, boot: Bootstrap
) -> None:
    doc, master = await start_group(cluster, boot)
    epoch = doc["masterEpoch"]
    slave = next(b for b in cluster.brokers if b is not master)
    slave_id = next(r["brokerId"] for r in doc["replicas"] if r["address"] == slave.address)
    # An empty log at the next epoch: following it would cut every replica to offset 0.
    empty = await FakeMaster(
        FakeReply(
            master_epoch=epoch + 1, entries=(EpochEntry(epoch=1, start_offset=0),), max_offset=0
        )
    ).start()
    # A huge epoch: followed, it would outrank every epoch the controllers will ever name.
    huge = await FakeMaster(
        FakeReply(
            master_epoch=INT32_MAX,
            entries=(
                EpochEntry(epoch=1, start_offset=0),
                EpochEntry(epoch=INT32_MAX, start_offset=0),
            ),
            max_offset=0,
        )
    ).start()
    fakes = [empty, huge]
    try:
        async with producer_for(cluster) as producer:
            acked = await send_all(producer, "before", 30, {})
            forged = [
                (99, empty.address, epoch + 1, [99]),
                (98, huge.address, INT32_MAX, [98]),
                (slave_id, slave.address, INT32_MAX, [slave_id]),  # a real slave, huge epoch
                (-1, "", epoch + 1, []),  # "no master": the real master would step down
            ]
            for claim in forged:
                for b in cluster.brokers:
                    await forge_role_change(b, *claim)

                async def handled(claim: tuple[Any, ...] = claim) -> bool:
                    # Each broker logged that it ignored this claim (or followed a fake).
                    followed = any(f.handshakes for f in fakes)
                    return followed or all(
                        b.log().count(IGNORED) >= forged.index(claim) + 1 for b in cluster.brokers
                    )

                await wait_until_async(
                    handled,
                    f"the brokers to handle {claim}",
                    20,
                    interval=0.1,
                    on_timeout=cluster.logs,
                )
                await assert_roles_unchanged(cluster, boot, doc, fakes)
                await send_all(producer, f"after-{claim[0]}", 10, acked)
    finally:
        for fake in fakes:
            await fake.close()
    await restart_all_and_read(cluster, boot, acked)


IMPOSTORS = {
    # The named epoch, but a log that ends at 0: the consistent point is 0.
    "empty-log": lambda epoch, entries, max_offset: FakeReply(
        master_epoch=epoch, entries=entries[:1], max_offset=0
    ),
    # An epoch the controllers never named, whose history also ends at 0.
    "huge-epoch": lambda epoch, entries, max_offset: FakeReply(
        master_epoch=INT32_MAX,
        entries=(*entries[:1], EpochEntry(epoch=INT32_MAX, start_offset=0)),
        max_offset=0,
    ),
    # The slave's own history, then a stream of an epoch the controllers never named.
    "huge-epoch-transfer": lambda epoch, entries, max_offset: FakeReply(
        master_epoch=epoch, entries=entries, max_offset=max_offset, transfer_epoch=INT32_MAX
    ),
}


@pytest.mark.parametrize(
    ("impostor", "slave_restarts"),
    [(name, False) for name in sorted(IMPOSTORS)] + [("empty-log", True)],
)
async def test_an_impostor_on_the_masters_ha_port_truncates_nothing(
    cluster: Cluster, boot: Bootstrap, impostor: str, slave_restarts: bool
) -> None:
    doc, master = await start_group(cluster, boot)
    slave = next(b for b in cluster.brokers if b is not master)
    async with producer_for(cluster) as producer:
        acked = await send_all(producer, "acked", 40, {})

    async def confirmed() -> dict[str, Any] | None:
        cache = await epoch_cache(slave.address)
        mine = await epoch_cache(master.address)
        ok = cache["confirmOffset"] == cache["maxOffset"] == mine["maxOffset"]
        return cache if ok else None

    cache = await wait_until_async(
        confirmed, "the slave to confirm everything", 20, interval=0.1, on_timeout=cluster.logs
    )
    if slave_restarts:
        # The floor must survive a crash: once the checkpoint holds it, kill -9 and restart.
        async def checkpointed() -> bool:
            cp = load_checkpoint(slave.data_dir / "checkpoint")
            return cp is not None and cp.confirm_offset == cache["maxOffset"]

        await wait_until_async(
            checkpointed,
            "the slave's checkpoint to hold the confirm offset",
            20,
            interval=0.1,
            on_timeout=cluster.logs,
        )
        slave.kill9()
        slave.restart()
        await full_sync_state_set(boot, cluster, size=2)
        cache = await wait_until_async(
            confirmed,
            "the restarted slave to be in step",
            20,
            interval=0.1,
            on_timeout=cluster.logs,
        )
    entries = tuple(
        EpochEntry(epoch=e["epoch"], start_offset=e["startOffset"]) for e in cache["epochs"]
    )
    reply = IMPOSTORS[impostor](doc["masterEpoch"], entries, cache["maxOffset"])
    # Freeze the control plane: nobody elects or pushes while the impostor answers.
    for c in cluster.controllers:
        c.signal(signal.SIGSTOP)
    master.kill9()
    fake = await FakeMaster(reply).start(ha_port=master.ha_port, with_remoting=False)
    try:

        async def acted() -> bool:
            return fake.acted()

        await wait_until_async(
            acted, "the slave to answer the impostor", 20, interval=0.1, on_timeout=cluster.logs
        )
        after = await epoch_cache(slave.address)
        assert after["maxOffset"] == cache["maxOffset"], "the slave truncated for the impostor"
        assert [e["epoch"] for e in after["epochs"]] == [e.epoch for e in entries]
    finally:
        await fake.close()
        for c in cluster.controllers:
            c.signal(signal.SIGCONT)
    doc = await new_master(boot, cluster, master.address)
    assert doc["masterAddress"] == slave.address
    await routed_everywhere(cluster)
    async with producer_for(cluster) as producer:
        await send_all(producer, "later", 10, acked)
    master.restart()
    await full_sync_state_set(boot, cluster, size=2)
    await restart_all_and_read(cluster, boot, acked)


async def test_a_broker_whose_metadata_was_cleaned_registers_again(
    cluster: Cluster, boot: Bootstrap
) -> None:
    doc, master = await start_group(cluster, boot)
    slave = next(b for b in cluster.brokers if b is not master)
    old_id = next(r["brokerId"] for r in doc["replicas"] if r["address"] == slave.address)
    async with producer_for(cluster) as producer:
        acked = await send_all(producer, "before", 20, {})
        slave.kill9()

        async def dead() -> bool:
            d = await sync_state(boot)
            return bool(
                d
                and old_id not in d["syncStateSet"]
                and not any(r["alive"] for r in d["replicas"] if r["brokerId"] == old_id)
            )

        await wait_until_async(
            dead, "the controllers to see the slave dead", 30, interval=0.1, on_timeout=cluster.logs
        )
        resp = await boot.call(
            RequestCode.CLEAN_BROKER_DATA, {"brokerName": GROUP, "brokerIds": str(old_id)}
        )
        assert resp.code == ResponseCode.SUCCESS
        await send_all(producer, "alone", 10, acked)
        slave.restart()
        doc = await full_sync_state_set(boot, cluster, size=2, timeout=30)
        new_id = next(r["brokerId"] for r in doc["replicas"] if r["address"] == slave.address)
        assert new_id != old_id
        await send_all(producer, "after", 10, acked)
    master.kill9()
    doc = await new_master(boot, cluster, master.address)
    assert doc["masterAddress"] == slave.address
    await assert_acked_read(cluster, acked)


@pytest.mark.parametrize("failover_first", [False, True], ids=["epoch-1", "after-a-failover"])
async def test_a_cleaned_group_comes_back_with_its_brokers_taking_ids_again(
    cluster: Cluster, boot: Bootstrap, failover_first: bool
) -> None:
    """The whole group dead and cleaned; the broker that had id 2 comes back first and takes id
    1 (the first id of a new group), so the other one's registration with id 1 answers 2014: it
    takes a new id instead of looping. After a failover the brokers hold master epoch 2 while
    the cleaned group starts again at 0: the new group's first election must still name an
    epoch above the one its master holds, or it can never become master."""
    doc, _ = await start_group(cluster, boot)
    old_ids = {r["address"]: r["brokerId"] for r in doc["replicas"]}
    first = next(b for b in cluster.brokers if old_ids[b.address] == 2)
    second = next(b for b in cluster.brokers if old_ids[b.address] == 1)
    async with producer_for(cluster) as producer:
        acked = await send_all(producer, "before", 20, {})
    if failover_first:
        resp = await boot.call(
            RequestCode.CONTROLLER_ELECT_MASTER,
            {"brokerName": GROUP, "brokerId": 2, "designateElect": True},
        )
        assert resp.code == ResponseCode.SUCCESS, resp.header
        doc = await full_sync_state_set(boot, cluster, size=2, timeout=30)
        assert doc["masterAddress"] == first.address and doc["masterEpoch"] >= 2
        async with producer_for(cluster) as producer:
            acked = await send_all(producer, "epoch-2", 10, acked)
    for b in cluster.brokers:
        b.kill9()

    async def dead() -> bool:
        d = await sync_state(boot)
        return bool(
            d and d["masterBrokerId"] in (None, -1) and not any(r["alive"] for r in d["replicas"])
        )

    await wait_until_async(
        dead, "the controllers to see the group dead", 30, interval=0.1, on_timeout=cluster.logs
    )
    resp = await boot.call(RequestCode.CLEAN_BROKER_DATA, {"brokerName": GROUP})
    assert resp.code == ResponseCode.SUCCESS
    first.restart()

    async def first_is_master() -> bool:
        d = await sync_state(boot)
        return bool(d and d["masterAddress"] == first.address)

    await wait_until_async(
        first_is_master,
        "the broker that had id 2 to lead the new group",
        30,
        interval=0.1,
        on_timeout=cluster.logs,
    )
    second.restart()
    doc = await full_sync_state_set(boot, cluster, size=2, timeout=30)
    ids = {r["address"]: r["brokerId"] for r in doc["replicas"]}
    assert (ids[first.address], ids[second.address]) == (1, 2)
    await routed_everywhere(cluster)
    async with producer_for(cluster) as producer:
        await send_all(producer, "after", 10, acked)
    await assert_acked_read(cluster, acked)
