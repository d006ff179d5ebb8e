"""Controller-mode scenarios with real processes (docs/architecture.md): a divergent tail
truncated away, a frozen slave shrunk out of the SyncStateSet and expanded back, a frozen master
that fences itself, operator elections, and a master cut off from the controllers.

Each test starts three controllers and one group of three brokers on loopback; every process is
ended by its PID when the test ends, also when it fails (SIGCONT first for frozen ones).
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgpack
import pytest

from client import Consumer, Producer
from client.bootstrap import Bootstrap
from protocol.codes import RequestCode, ResponseCode
from remoting.client import RemotingClient
from tests.cluster.support import (
    Key,
    assert_replicas_identical,
    consume_all,
    create_topic,
    epoch_cache,
    full_sync_state_set,
    new_master,
    node_at,
    raw_send,
    sync_state,
    takes_writes,
)
from tests.support.cluster import BrokerNode, Cluster
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.multiprocess

TOPIC = "ScenarioTopic"
RMQCTL = str(Path(sys.executable).parent / "rmqctl")


def slaves_of(cluster: Cluster, doc: dict[str, Any]) -> list[BrokerNode]:
    return [b for b in cluster.brokers if b.address != doc["masterAddress"]]


async def start_group(
    cluster: Cluster, boot: Bootstrap, config: str = ""
) -> tuple[dict[str, Any], BrokerNode]:
    """Group broker-a of three with ``config``, all in sync, and the topic created on the
    master; returns the controllers' group document and the master."""
    cluster.add_group("broker-a", 3, config=config)
    doc = await full_sync_state_set(boot, cluster)
    master = node_at(cluster, doc["masterAddress"])
    await create_topic(boot, master.address, TOPIC)
    return doc, master


def producer_for(cluster: Cluster) -> Producer:
    return Producer(cluster.controller_addresses, retries=8, send_timeout=5.0, send_deadline=30.0)


async def send_all(
    producer: Producer, bodies: list[bytes], acked: dict[Key, bytes] | None = None
) -> dict[Key, bytes]:
    acked = {} if acked is None else acked
    for body in bodies:
        r = await producer.send(TOPIC, body)
        acked[(r.broker_name, r.queue_id, r.queue_offset)] = body
    return acked


async def test_a_divergent_tail_is_truncated_away_and_never_served(
    cluster: Cluster, boot: Bootstrap
) -> None:
    # all-ack off: the master acknowledges what no slave has yet.
    doc, old = await start_group(cluster, boot, "all_ack_in_sync_state_set = false\n")
    async with producer_for(cluster) as producer:
        acked = await send_all(producer, [f"before-{i}".encode() for i in range(20)])

        async def caught_up() -> bool:
            caches = [await epoch_cache(b.address) for b in cluster.brokers]
            return len({c["maxOffset"] for c in caches}) == 1

        await wait_until_async(
            caught_up, "the slaves to catch up", 20, interval=0.1, on_timeout=cluster.logs
        )
        slaves = slaves_of(cluster, doc)
        for s in slaves:
            s.signal(signal.SIGSTOP)
        conn = await RemotingClient.connect(old.address)
        divergent = []
        for i in range(20):
            code, key = await raw_send(conn, TOPIC, f"divergent-{i}".encode())
            assert code == ResponseCode.SUCCESS and key is not None
            divergent.append(key)
        conn.close()
        old.kill9()
        # The frozen slaves' sockets may hold the divergent bytes unread; dying drops them, as a
        # partition would have. Their logs (page cache) end where the master's tail diverges.
        for s in slaves:
            s.kill9()
            s.restart()
        doc = await new_master(boot, cluster, old.address)
        await send_all(producer, [f"after-{i}".encode() for i in range(20)], acked)

    old.restart()
    await full_sync_state_set(boot, cluster)
    received = await consume_all(cluster.controller_addresses, TOPIC, set(acked))
    assert {k: received.get(k) for k in acked} == acked
    served = set(received.values())
    assert not any(b.startswith(b"divergent-") for b in served), "a truncated message was served"
    assert "truncat" in old.log()
    confirm = await assert_replicas_identical(cluster)
    caches = [await epoch_cache(b.address) for b in cluster.brokers]
    assert all(c["maxOffset"] == confirm for c in caches)
    assert len({json.dumps(c["epochs"]) for c in caches}) == 1


async def test_a_frozen_slave_is_shrunk_out_and_expanded_back(
    cluster: Cluster, boot: Bootstrap
) -> None:
    doc, _ = await start_group(cluster, boot, "ha_max_time_slave_not_catchup_ms = 1500\n")
    frozen = slaves_of(cluster, doc)[0]
    frozen_id = next(r["brokerId"] for r in doc["replicas"] if r["address"] == frozen.address)
    async with producer_for(cluster) as producer:
        acked = await send_all(producer, [f"a-{i}".encode() for i in range(10)])
        frozen.signal(signal.SIGSTOP)
        # With all-ack, writes stall until the master drops the frozen slave from the set.
        await send_all(producer, [f"b-{i}".encode() for i in range(10)], acked)

        async def shrunk() -> dict[str, Any] | None:
            d = await sync_state(boot)
            return d if d and frozen_id not in d["syncStateSet"] else None

        await wait_until_async(
            shrunk, "the frozen slave shrunk out", 20, interval=0.1, on_timeout=cluster.logs
        )
        await send_all(producer, [f"c-{i}".encode() for i in range(50)], acked)
        frozen.signal(signal.SIGCONT)
        await full_sync_state_set(boot, cluster, timeout=30)
        await send_all(producer, [f"d-{i}".encode() for i in range(10)], acked)
    received = await consume_all(cluster.controller_addresses, TOPIC, set(acked))
    assert {k: received.get(k) for k in acked} == acked
    await assert_replicas_identical(cluster)


@pytest.mark.parametrize(
    "timeout_config",
    ["", "broker_heartbeat_timeout_ms = 20000\n"],
    ids=["default-timeout", "a-timeout-above-the-controllers-bound"],
)
async def test_a_frozen_master_fences_itself_and_acknowledges_nothing(
    cluster: Cluster, boot: Bootstrap, timeout_config: str
) -> None:
    """A master frozen (SIGSTOP) until the controllers elected another answers every write
    queued meanwhile with MASTER_FENCED or NOT_MASTER once thawed. Also when the broker asks for
    a heartbeat timeout above the controllers' bound (broker_heartbeat_timeout_max_ms, 10 s):
    its lease follows the timeout the controllers hold it to, not the one it asked for."""
    # all-ack off, so nothing but the fence stops the old master acknowledging alone.
    doc, old = await start_group(
        cluster, boot, "all_ack_in_sync_state_set = false\n" + timeout_config
    )
    conn = await RemotingClient.connect(old.address)
    code, _ = await raw_send(conn, TOPIC, b"warm-up")
    assert code == ResponseCode.SUCCESS
    old.signal(signal.SIGSTOP)
    # Queued in the frozen master's socket; it reads them only after SIGCONT.
    pending = [
        asyncio.ensure_future(raw_send(conn, TOPIC, f"stale-{i}".encode(), timeout=60))
        for i in range(20)
    ]
    await new_master(boot, cluster, old.address)
    async with producer_for(cluster) as producer:
        acked = await send_all(producer, [f"new-{i}".encode() for i in range(20)])
    old.signal(signal.SIGCONT)
    results = await asyncio.gather(*pending)
    conn.close()
    codes = {code for code, _ in results}
    assert ResponseCode.SUCCESS not in codes, f"the fenced master acknowledged writes: {results}"
    assert codes <= {ResponseCode.MASTER_FENCED, ResponseCode.NOT_MASTER}, codes
    doc = await full_sync_state_set(boot, cluster, timeout=30)
    assert doc["masterAddress"] != old.address
    received = await consume_all(cluster.controller_addresses, TOPIC, set(acked))
    assert {k: received.get(k) for k in acked} == acked
    assert not any(b.startswith(b"stale-") for b in received.values())


def rmqctl(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [RMQCTL, "--json", "-a", cluster.controller_addresses, *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


async def test_operator_elect_master_moves_mastership_only_to_an_in_sync_broker(
    cluster: Cluster, boot: Bootstrap
) -> None:
    doc, _ = await start_group(cluster, boot, "ha_max_time_slave_not_catchup_ms = 1500\n")
    ids = {r["address"]: r["brokerId"] for r in doc["replicas"]}
    target, other = slaves_of(cluster, doc)
    done = await asyncio.to_thread(
        rmqctl, cluster, "electMaster", "-b", "broker-a", "-i", str(ids[target.address])
    )
    assert done.returncode == 0, done.stderr
    elected = json.loads(done.stdout)
    assert elected["masterBrokerId"] == ids[target.address]
    assert elected["masterEpoch"] == doc["masterEpoch"] + 1
    async with producer_for(cluster) as producer:
        acked = await send_all(producer, [f"m-{i}".encode() for i in range(10)])
        assert {k[0] for k in acked} == {"broker-a"}

        # Freeze the other slave until it is out of the set: naming it is refused.
        other.signal(signal.SIGSTOP)
        await send_all(producer, [f"n-{i}".encode() for i in range(5)], acked)

        async def shrunk() -> bool:
            d = await sync_state(boot)
            return bool(d and ids[other.address] not in d["syncStateSet"])

        await wait_until_async(
            shrunk, "the frozen slave shrunk out", 20, interval=0.1, on_timeout=cluster.logs
        )
        other.signal(signal.SIGCONT)
        refused = await asyncio.to_thread(
            rmqctl, cluster, "electMaster", "-b", "broker-a", "-i", str(ids[other.address])
        )
    if refused.returncode == 0:
        # It may have caught up and been expanded back already: then the election is legal.
        assert ids[other.address] in (await sync_state(boot) or {}).get("syncStateSet", [])
    else:
        assert refused.returncode == 1 and refused.stderr.count("\n") == 1, refused.stderr
        assert "Traceback" not in refused.stderr
        d = await sync_state(boot)
        assert d is not None and d["masterBrokerId"] == ids[target.address]
    received = await consume_all(cluster.controller_addresses, TOPIC, set(acked))
    assert {k: received.get(k) for k in acked} == acked


async def test_operator_elect_master_without_an_id_switches_to_the_best_other_in_sync_broker(
    cluster: Cluster, boot: Bootstrap
) -> None:
    """``rmqctl electMaster -b G`` (no -i) is a planned switch: the controllers move an alive
    master's role to the best other SyncStateSet member. Before, it answered
    CONTROLLER_MASTER_STILL_EXIST (2011) and nothing moved. With the master alone in sync it
    fails naming why and the master stays."""
    doc, old = await start_group(cluster, boot, "ha_max_time_slave_not_catchup_ms = 1500\n")
    async with producer_for(cluster) as producer:
        acked = await send_all(producer, [f"m-{i}".encode() for i in range(10)])
    done = await asyncio.to_thread(rmqctl, cluster, "electMaster", "-b", "broker-a")
    assert done.returncode == 0, done.stderr
    elected = json.loads(done.stdout)
    assert elected["masterBrokerId"] != doc["masterBrokerId"]
    assert elected["masterBrokerId"] in doc["syncStateSet"]
    assert elected["masterAddress"] != old.address
    assert elected["masterEpoch"] == doc["masterEpoch"] + 1
    new = node_at(cluster, elected["masterAddress"])
    await wait_until_async(
        lambda: takes_writes(new.address), "the new master to take writes", 30, interval=0.1
    )

    # Back in sync under the new master; then both slaves frozen until they are shrunk out.
    doc = await full_sync_state_set(boot, cluster)
    assert doc["masterBrokerId"] == elected["masterBrokerId"]
    async with producer_for(cluster) as producer:
        await send_all(producer, [f"n-{i}".encode() for i in range(10)], acked)
        for slave in slaves_of(cluster, doc):
            slave.signal(signal.SIGSTOP)
        await send_all(producer, [f"o-{i}".encode() for i in range(3)], acked)

        async def master_alone() -> bool:
            d = await sync_state(boot)
            return bool(d and d["syncStateSet"] == [elected["masterBrokerId"]])

        await wait_until_async(
            master_alone, "the frozen slaves shrunk out", 20, interval=0.1, on_timeout=cluster.logs
        )
    refused = await asyncio.to_thread(rmqctl, cluster, "electMaster", "-b", "broker-a")
    master_id = elected["masterBrokerId"]
    assert (refused.returncode, refused.stdout) == (1, ""), refused.stderr
    assert refused.stderr.count("\n") == 1, refused.stderr
    assert (
        f"no in-sync replica to switch master {master_id} to: the SyncStateSet is "
        f"[{master_id}]: the master alone; the master stays"
    ) in refused.stderr
    after = await sync_state(boot)
    assert after is not None
    assert (after["masterBrokerId"], after["masterEpoch"]) == (master_id, elected["masterEpoch"])
    for slave in slaves_of(cluster, doc):
        slave.signal(signal.SIGCONT)
    received = await consume_all(cluster.controller_addresses, TOPIC, set(acked))
    assert {k: received.get(k) for k in acked} == acked


async def test_an_all_ack_send_waits_for_every_sync_state_set_member(
    cluster: Cluster, boot: Bootstrap
) -> None:
    # A frozen slave stays in the set for a minute: a send cannot be acknowledged until then.
    doc, master = await start_group(
        cluster, boot, "ha_max_time_slave_not_catchup_ms = 60000\nslave_ack_timeout_ms = 500\n"
    )
    conn = await RemotingClient.connect(master.address)
    try:
        code, key = await raw_send(conn, TOPIC, b"all-in-sync")
        assert code == ResponseCode.SUCCESS and key is not None
        frozen = slaves_of(cluster, doc)[0]
        frozen.signal(signal.SIGSTOP)
        code, _ = await raw_send(conn, TOPIC, b"one-member-frozen")
        assert code == ResponseCode.FLUSH_SLAVE_TIMEOUT
        frozen.signal(signal.SIGCONT)

        async def acknowledged() -> bool:
            code, _ = await raw_send(conn, TOPIC, b"thawed")
            return code == ResponseCode.SUCCESS

        await wait_until_async(
            acknowledged,
            "an acknowledged send after SIGCONT",
            20,
            interval=0.1,
            on_timeout=cluster.logs,
        )
    finally:
        conn.close()


async def test_min_in_sync_replicas_refuses_writes_on_a_small_set(
    cluster: Cluster, boot: Bootstrap
) -> None:
    doc, master = await start_group(cluster, boot, "min_in_sync_replicas = 3\n")
    conn = await RemotingClient.connect(master.address)
    try:
        assert (await raw_send(conn, TOPIC, b"three-in-sync"))[0] == ResponseCode.SUCCESS
        lost = slaves_of(cluster, doc)[0]
        lost.kill9()  # its connection closes: the master shrinks the set to two

        async def refused() -> bool:
            # min_in_sync_replicas is checked when a write arrives: one taken while the set
            # was three may still be acknowledged by the set it shrinks to while it waits
            # (docs/architecture.md). Once the shrink is committed (the master proposed it,
            # so it knows), every later write must be refused.
            shrunk = len((await sync_state(boot) or doc)["syncStateSet"]) < 3
            code, _ = await raw_send(conn, TOPIC, b"two-in-sync")
            assert not (shrunk and code == ResponseCode.SUCCESS), "stored with two in sync"
            return code == ResponseCode.IN_SYNC_REPLICAS_NOT_ENOUGH

        await wait_until_async(
            refused, "IN_SYNC_REPLICAS_NOT_ENOUGH", 20, interval=0.1, on_timeout=cluster.logs
        )
        lost.restart()
        await full_sync_state_set(boot, cluster)

        async def accepted() -> bool:
            return (await raw_send(conn, TOPIC, b"three-again"))[0] == ResponseCode.SUCCESS

        await wait_until_async(
            accepted,
            "writes accepted with three in sync again",
            20,
            interval=0.1,
            on_timeout=cluster.logs,
        )
    finally:
        conn.close()


async def all_consumer_offsets(address: str) -> dict[str, Any]:
    conn = await RemotingClient.connect(address)
    try:
        resp = await conn.call(RequestCode.GET_ALL_CONSUMER_OFFSET, timeout=2.0)
        return dict(msgpack.unpackb(resp.body or b"\x80", strict_map_key=False) or {})
    finally:
        conn.close()


async def test_consumer_offsets_follow_to_the_new_master(cluster: Cluster, boot: Bootstrap) -> None:
    doc, old = await start_group(cluster, boot)
    async with producer_for(cluster) as producer:
        first = await send_all(producer, [f"first-{i}".encode() for i in range(30)])
    async with Consumer(cluster.controller_addresses, "resuming", TOPIC) as consumer:
        got: set[bytes] = set()
        while len(got) < 30:
            got |= {m.body for m in await consumer.receive(timeout=1.0)}
    assert got == set(first.values())

    async def slaves_have_offsets() -> bool:
        tables = [await all_consumer_offsets(s.address) for s in slaves_of(cluster, doc)]
        return all(sum(t.get("resuming", {}).get(TOPIC, {}).values()) == 30 for t in tables)

    await wait_until_async(
        slaves_have_offsets,
        "the group's offsets on both slaves",
        20,
        interval=0.1,
        on_timeout=cluster.logs,
    )
    old.kill9()
    await new_master(boot, cluster, old.address)
    async with producer_for(cluster) as producer:
        later = await send_all(producer, [f"later-{i}".encode() for i in range(10)])
    async with Consumer(cluster.controller_addresses, "resuming", TOPIC) as consumer:
        again: list[bytes] = []
        deadline = asyncio.get_running_loop().time() + 30
        while len(again) < 10 and asyncio.get_running_loop().time() < deadline:
            again += [m.body for m in await consumer.receive(timeout=1.0)]
    # The group resumes where it committed: nothing of the first 30 comes back.
    assert sorted(again) == sorted(later.values())


async def test_consumers_read_from_a_slave_while_the_group_has_no_master(
    cluster: Cluster, boot: Bootstrap
) -> None:
    doc, master = await start_group(cluster, boot, "ha_max_time_slave_not_catchup_ms = 1500\n")
    async with producer_for(cluster) as producer:
        acked = await send_all(producer, [f"committed-{i}".encode() for i in range(30)])

    async def confirmed_everywhere() -> bool:
        caches = [await epoch_cache(b.address) for b in cluster.brokers]
        return len({c["confirmOffset"] for c in caches}) == 1 and caches[0]["confirmOffset"] > 0

    await wait_until_async(
        confirmed_everywhere,
        "the confirm offset on every replica",
        20,
        interval=0.1,
        on_timeout=cluster.logs,
    )
    # Freeze both slaves until the master is alone in the set, then lose the master: with
    # unclean elections off no slave may take over, so the group has no master.
    slaves = slaves_of(cluster, doc)
    for s in slaves:
        s.signal(signal.SIGSTOP)
    # A write the frozen slaves cannot acknowledge: they fall behind and are shrunk out.
    conn = await RemotingClient.connect(master.address)
    pending = asyncio.ensure_future(raw_send(conn, TOPIC, b"behind"))

    async def alone() -> bool:
        d = await sync_state(boot)
        return bool(d and d["syncStateSet"] == [doc["masterBrokerId"]])

    await wait_until_async(
        alone, "the master alone in the SyncStateSet", 20, interval=0.1, on_timeout=cluster.logs
    )
    await pending
    conn.close()
    master.kill9()
    for s in slaves:
        s.signal(signal.SIGCONT)

    async def no_master() -> bool:
        d = await sync_state(boot)
        return bool(d and d["masterBrokerId"] in (-1, None) and not d["masterAddress"])

    await wait_until_async(
        no_master, "the group without a master", 20, interval=0.1, on_timeout=cluster.logs
    )
    received = await consume_all(cluster.controller_addresses, TOPIC, set(acked))
    assert {k: received.get(k) for k in acked} == acked
