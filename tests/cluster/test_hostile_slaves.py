"""Hostile and unlucky peers of a master's SyncStateSet (issue 9 items 3, 4 and 11), against
real processes: three controllers and one group of two brokers with all-ack sends.

- A fake slave that takes the id of a stalled slave must not get a single send acknowledged.
- A fake slave with an unregistered id must not freeze the group's writes when the real slave
  dies.
- An expansion of the SyncStateSet whose answer is lost (the controller committed it and died
  before answering) must not let the master acknowledge what only it has.
- Peers breaking the HA rules (issue 14 item 6: an ack before any handshake, a handshake from an
  id the controllers do not list, an ack beyond the master's max offset) are refused, closed,
  counted in ``rmq_broker_ha_refused_total`` and logged once, and move nothing.

Every process is ended by its PID when the test ends, also when it fails (SIGCONT first for
frozen ones); the fake slave and the proxies run in the test's event loop.
"""

from __future__ import annotations

import asyncio
import re
import signal
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from client.bootstrap import Bootstrap
from protocol.codes import ResponseCode
from protocol.ha import (
    MasterHandshake,
    SlaveAck,
    SlaveHandshake,
    encode_slave_ack,
    encode_slave_handshake,
)
from remoting.client import RemotingClient
from tests.cluster import netns
from tests.cluster.hostile import ControllerProxies, FakeSlave, probe_ha_port
from tests.cluster.support import (
    Key,
    consume_all,
    create_topic,
    full_sync_state_set,
    new_master,
    node_at,
    raw_send,
    sync_state,
    takes_writes,
)
from tests.support.cluster import BrokerNode, Cluster
from tests.support.procs import free_port, port_open
from tests.support.wait import wait_until, wait_until_async

pytestmark = pytest.mark.multiprocess

TOPIC = "HostileTopic"
ACK_TIMEOUT = "slave_ack_timeout_ms = 1500\n"


def replica_id(doc: dict[str, Any], node: BrokerNode) -> int:
    return int(next(r["brokerId"] for r in doc["replicas"] if r["address"] == node.address))


async def start_pair(
    cluster: Cluster, boot: Bootstrap, per_broker: list[list[str]] | None = None
) -> tuple[dict[str, Any], BrokerNode, BrokerNode]:
    """broker-a of two (:data:`ACK_TIMEOUT`), both in the SyncStateSet: its document, the master
    and the slave."""
    cluster.add_group("broker-a", 2, config=ACK_TIMEOUT, per_broker=per_broker)
    doc = await full_sync_state_set(boot, cluster, size=2)
    master = node_at(cluster, doc["masterAddress"])
    slave = next(b for b in cluster.brokers if b is not master)
    return doc, master, slave


async def send_batch(conn: RemotingClient, prefix: str, n: int) -> dict[Key, bytes]:
    """``n`` concurrent all-ack sends; what was acknowledged."""
    bodies = [f"{prefix}-{i}".encode() for i in range(n)]
    results = await asyncio.gather(*(raw_send(conn, TOPIC, b) for b in bodies))
    return {
        key: body
        for (code, key), body in zip(results, bodies, strict=True)
        if code == ResponseCode.SUCCESS and key is not None
    }


async def first_acked_after(conn: RemotingClient, cluster: Cluster) -> Key:
    """Send b"after" until a send is acknowledged (a dead slave is out of the SyncStateSet): its
    key. 60 s only bound a hang (a dead slave leaves the set once the controllers judge it dead,
    a 1 s heartbeat timeout, and each send meanwhile waits ACK_TIMEOUT at most); the time it took
    is printed."""
    start = time.monotonic()
    while time.monotonic() - start < 60:
        code, key = await raw_send(conn, TOPIC, b"after")
        if code == ResponseCode.SUCCESS and key is not None:
            print(f"writes resumed {time.monotonic() - start:.1f} s after the slave died")
            return key
    raise AssertionError(f"writes still fail 60 s after the slave died\n{cluster.logs()}")


async def assert_all_acknowledged_survive(cluster: Cluster, acked: dict[Key, bytes]) -> None:
    received = await consume_all(cluster.controller_addresses, TOPIC, set(acked))
    lost = sorted(k for k, body in acked.items() if received.get(k) != body)
    assert not lost, (
        f"{len(lost)} of {len(acked)} acknowledged messages lost or overwritten: {lost[:5]}\n"
        f"{cluster.logs()}"
    )


async def test_a_fake_slave_with_a_stalled_slaves_id_gets_nothing_acknowledged(
    cluster: Cluster, boot: Bootstrap
) -> None:
    doc, master, slave = await start_pair(cluster, boot)
    await create_topic(boot, master.address, TOPIC)
    conn = await RemotingClient.connect(master.address)
    fake = None
    try:
        acked = await send_batch(conn, "before", 10)
        assert len(acked) == 10

        slave.signal(signal.SIGSTOP)  # its HA connection stays open, silent
        fake = FakeSlave("127.0.0.1", master.ha_port, replica_id(doc, slave), slave.address)
        fake.start()
        await wait_until_async(
            lambda: fake.closed.is_set() or fake.acks >= 2,
            "the fake slave refused or acking",
            10,
            interval=0.02,
        )
        during = await send_batch(conn, "during", 20)
        acked |= during
    finally:
        conn.close()
        if fake is not None:
            await fake.stop()
    master.kill9()
    slave.signal(signal.SIGCONT)
    await new_master(boot, cluster, master.address)
    await assert_all_acknowledged_survive(cluster, acked)
    assert not during, f"{len(during)} sends acknowledged on a fake slave's acks"


async def test_a_fake_slave_with_an_unregistered_id_does_not_freeze_writes(
    cluster: Cluster, boot: Bootstrap
) -> None:
    _, master, slave = await start_pair(cluster, boot)
    await create_topic(boot, master.address, TOPIC)
    fake = FakeSlave("127.0.0.1", master.ha_port, 999, "127.0.0.1:1").start()
    conn = await RemotingClient.connect(master.address)
    try:
        acked = await send_batch(conn, "before", 5)
        assert len(acked) == 5
        # Refused at once, or (without the fix) served long enough to be proposed and rejected.
        await wait_until_async(
            lambda: fake.closed.is_set() or "CONTROLLER_INVALID_REPLICAS" in master.log(),
            "the fake slave to be refused or proposed",
            5,
            interval=0.05,
        )

        slave.kill9()  # the real slave dies: the set must shrink to the master alone
        acked[await first_acked_after(conn, cluster)] = b"after"
        state = await sync_state(boot)
        assert state is not None and 999 not in state["syncStateSet"]
    finally:
        conn.close()
        await fake.stop()


async def test_a_refused_expansion_never_blocks_the_shrink_writes_need(
    cluster: Cluster, boot: Bootstrap
) -> None:
    """A fake takes the id of a registered replica that is down (C): the master proposes it and
    the controllers refuse (C is not alive). When the real slave B dies, the shrink to the
    master alone must go through on its own, not bundled with that expansion forever."""
    cluster.add_group("broker-a", 3, config=ACK_TIMEOUT)
    doc = await full_sync_state_set(boot, cluster, size=3)
    master = node_at(cluster, doc["masterAddress"])
    b, c = [n for n in cluster.brokers if n is not master]
    await create_topic(boot, master.address, TOPIC)
    c.kill9()

    async def c_out_and_dead() -> bool:
        state = await sync_state(boot)
        if state is None or replica_id(state, c) in state["syncStateSet"]:
            return False
        return not next(r["alive"] for r in state["replicas"] if r["address"] == c.address)

    await wait_until_async(
        c_out_and_dead, "C shrunk out and judged dead", 20, interval=0.1, on_timeout=cluster.logs
    )
    fake = FakeSlave("127.0.0.1", master.ha_port, replica_id(doc, c), c.address).start()
    conn = await RemotingClient.connect(master.address)
    try:
        acked = await send_batch(conn, "before", 5)
        assert len(acked) == 5

        async def refused() -> bool:
            if "CONTROLLER_BROKER_NOT_ALIVE" in master.log():
                return True
            await send_batch(conn, "more", 1)
            return False

        await wait_until_async(
            refused, "the expansion to the fake to be refused", 10, interval=0.05
        )

        b.kill9()
        await first_acked_after(conn, cluster)
    finally:
        conn.close()
        await fake.stop()


async def lose_an_expansion_answer(
    cluster: Cluster,
    boot: Bootstrap,
    proxies: ControllerProxies,
    broker: Callable[[int], BrokerNode],
    cut: Callable[[BrokerNode, BrokerNode], None],
    heal: Callable[[BrokerNode, BrokerNode], None],
) -> None:
    """Master A alone; B starts and A proposes {A, B}; the controller commits it and dies before
    answering, and at that moment ``cut(slave, master)`` cuts B off from A. A must acknowledge
    nothing B lacks: after A dies (and ``heal``), B is elected (it is in the committed set) and
    must hold every message A acknowledged."""
    conn: RemotingClient | None = None
    try:
        master = broker(0)
        await full_sync_state_set(boot, cluster, size=1)
        await create_topic(boot, master.address, TOPIC)
        # The controllers' answer can come before the broker's own poll tells it it is master.
        await wait_until_async(
            lambda: takes_writes(master.address),
            "the master to take writes",
            10,
            interval=0.05,
            on_timeout=lambda: f"proxied connections ended: {proxies.ended}\n{cluster.logs()}",
        )
        conn = await RemotingClient.connect(master.address)
        acked = await send_batch(conn, "before", 10)
        assert len(acked) == 10, f"proxied connections ended: {proxies.ended}\n{cluster.logs()}"

        holder: list[BrokerNode] = []

        def lose(controller_address: str) -> None:
            for c in cluster.controllers:
                if c.address == controller_address:
                    c.kill9()
            cut(holder[0], master)

        proxies.lose_next_expansion_answer(lose)
        holder.append(broker(1))
        slave = holder[0]
        await asyncio.wait_for(proxies.lost.wait(), 40)
        answer = proxies.lost_answer
        assert answer is not None and answer.code == ResponseCode.SUCCESS

        # While the slave is cut off, the master must not acknowledge anything: whether the
        # set is {A} or {A, B} it cannot know until a controller answers. 10 sends every 200 ms
        # for 4 s (each waits at most slave_ack_timeout_ms), well before a shrink is due.
        batches = []
        for n in range(20):
            batches.append(asyncio.ensure_future(send_batch(conn, f"during-{n}", 10)))
            await asyncio.sleep(0.2)
        during: dict[Key, bytes] = {}
        for batch in await asyncio.gather(*batches):
            during |= batch
        acked |= during

        async def committed() -> bool:
            doc = await sync_state(boot)
            return doc is not None and len(doc["syncStateSet"]) == 2

        await wait_until_async(
            committed,
            "the controllers to show the committed {A, B}",
            10,
            interval=0.1,
            on_timeout=cluster.logs,
        )
        conn.close()
        conn = None
        master.kill9()
        proxies.drop_polls = False
        heal(slave, master)
        doc = await new_master(boot, cluster, master.address)
        assert doc["masterAddress"] == slave.address
        await assert_all_acknowledged_survive(cluster, acked)
        assert not during, f"{len(during)} sends acknowledged while the outcome was unknown"
    finally:
        if conn is not None:
            conn.close()
        await proxies.close()


async def test_an_expansion_whose_answer_is_lost_acknowledges_nothing_only_the_master_has(
    cluster: Cluster, boot: Bootstrap, tmp_path: Path
) -> None:
    """The cut is a stall here (SIGSTOP): the slave still receives into its socket buffer, so
    this variant shows the acknowledgements; the one in network namespaces shows the loss."""
    proxies = await ControllerProxies([c.address for c in cluster.controllers]).start()
    through_proxies = ";".join(proxies.addresses)

    def broker(index: int) -> BrokerNode:
        node = BrokerNode(tmp_path, "broker-a", index, through_proxies, [], ACK_TIMEOUT)
        node.start()
        cluster.brokers.append(node)
        wait_until(lambda: port_open(node.port), f"{node.name} to listen", 30)
        return node

    await lose_an_expansion_answer(
        cluster,
        boot,
        proxies,
        broker,
        lambda slave, _master: slave.signal(signal.SIGSTOP),
        lambda slave, _master: slave.signal(signal.SIGCONT),
    )


async def test_an_expansion_whose_answer_is_lost_loses_nothing_across_a_network_cut(
    tmp_path: Path, net: netns.HostNet
) -> None:
    """The issue's reproduction: each process on a host of its own (network namespaces), the
    cut a pair of blackhole routes between the master and the new member."""
    ctl = net.add_host("c")
    cluster = Cluster(tmp_path, ctl, net.exec_prefix(net.netns_of(ctl)))
    boot: Bootstrap | None = None
    try:
        cluster.start_controllers()
        boot = Bootstrap(cluster.controller_addresses, timeout=2.0)
        bridge = ctl.rsplit(".", 1)[0] + ".1"  # the root namespace, where the proxies run
        proxies = await ControllerProxies(
            [c.address for c in cluster.controllers], host=bridge
        ).start()
        through_proxies = ";".join(proxies.addresses)
        hosts = [net.add_host(f"b{i}") for i in range(2)]

        def broker(index: int) -> BrokerNode:
            host = hosts[index]
            node = BrokerNode(
                tmp_path,
                "broker-a",
                index,
                through_proxies,
                [],
                ACK_TIMEOUT,
                host=host,
                prefix=net.exec_prefix(net.netns_of(host)),
            )
            node.start()
            cluster.brokers.append(node)
            wait_until(lambda: port_open(node.port, host), f"{node.name} to listen", 30)
            return node

        def cut(slave: BrokerNode, master: BrokerNode) -> None:
            net.partition(slave.host, [master.host])
            net.partition(master.host, [slave.host])

        def heal(slave: BrokerNode, master: BrokerNode) -> None:
            net.heal(slave.host, [master.host])
            net.heal(master.host, [slave.host])

        await lose_an_expansion_answer(cluster, boot, proxies, broker, cut, heal)
    finally:
        if boot is not None:
            boot.close()
        cluster.stop()


def scrape(node: BrokerNode) -> dict[str, float]:
    """``name{labels}`` -> value of the node's rmq_broker_* series (labels but ``reason``
    dropped), from /metrics on the port the test gave it."""
    port = node.argv[len(node.argv) - node.argv[::-1].index("--metrics-port")]
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out = {}
    for line in text.splitlines():
        m = re.match(r"(rmq_broker_[a-z_]+)(\{.*\})? (\S+)$", line)
        if m:
            reason = re.search(r'reason="[a-z_]+"', m.group(2) or "")
            out[m.group(1) + (f"{{{reason.group(0)}}}" if reason else "")] = float(m.group(3))
    return out


async def test_hostile_ha_peers_are_refused_closed_counted_and_logged_once(
    cluster: Cluster, boot: Bootstrap
) -> None:
    """Issue 14 item 6 against a real master: 20 acks before any handshake, 20 handshakes from
    an id the controllers do not list, one with the live slave's id; then (the real slave dead,
    its id free) one with its id at another address, and one with its id and address followed
    by an ack beyond the master's max offset. Every one is closed, without a byte of the log for the first two
    kinds; nothing moves the confirm offset or the SyncStateSet; each kind is counted and
    logged once; the group keeps taking writes."""
    ports = [["--metrics-port", str(free_port())] for _ in range(2)]
    doc, master, slave = await start_pair(cluster, boot, per_broker=ports)
    master_id, slave_id = replica_id(doc, master), replica_id(doc, slave)
    await create_topic(boot, master.address, TOPIC)
    conn = await RemotingClient.connect(master.address)
    try:
        assert len(await send_batch(conn, "before", 5)) == 5
        ha = ("127.0.0.1", master.ha_port)

        def hello(broker_id: int, address: str) -> bytes:
            return encode_slave_handshake(SlaveHandshake(broker_id=broker_id, address=address))

        for _ in range(20):
            got, closed = await probe_ha_port(*ha, encode_slave_ack(SlaveAck(max_offset=1 << 40)))
            assert closed and not got, "an ack before any handshake was not refused"
        for broker_id, address in [(999, "127.0.0.1:1")] * 20 + [(slave_id, slave.address)]:
            got, closed = await probe_ha_port(*ha, hello(broker_id, address))
            assert closed and not got, f"handshake as {broker_id}@{address} was not refused"

        slave.kill9()  # its id is free now: the set shrinks to the master alone

        async def shrunk() -> bool:
            state = await sync_state(boot)
            return state is not None and state["syncStateSet"] == [master_id]

        await wait_until_async(shrunk, "the set to shrink to the master", 20, interval=0.1)
        await wait_until_async(
            lambda: scrape(master)["rmq_broker_ha_sync_state_set_size"] == 1,
            "the master to learn the shrink",
            10,
            interval=0.1,
        )
        figures = scrape(master)
        end = figures["rmq_broker_commitlog_max_offset_bytes"]
        assert figures["rmq_broker_ha_confirm_offset_bytes"] == end

        got, closed = await probe_ha_port(*ha, hello(slave_id, "127.0.0.1:1"))
        assert closed and not got, "a registered id at another address was not refused"

        def beyond(reply: MasterHandshake) -> bytes:
            return encode_slave_ack(SlaveAck(max_offset=reply.master_max_offset + (1 << 20)))

        got, closed = await probe_ha_port(*ha, hello(slave_id, slave.address), beyond)
        assert closed, "an ack beyond the master's max offset did not close the connection"
        assert [type(m) for m in got] == [MasterHandshake], got  # registered: it was answered

        figures = scrape(master)
        assert figures["rmq_broker_ha_confirm_offset_bytes"] == end
        assert figures["rmq_broker_ha_sync_state_set_size"] == 1
        state = await sync_state(boot)
        assert state is not None and state["syncStateSet"] == [master_id]
        assert {
            reason: figures.get(f'rmq_broker_ha_refused_total{{reason="{reason}"}}')
            for reason in ("no_handshake", "not_a_replica", "ack_out_of_range", "duplicate_id")
        } == {"no_handshake": 20, "not_a_replica": 21, "ack_out_of_range": 1, "duplicate_id": 1}

        def refused_and_closing() -> tuple[list[str], list[str]]:
            lines = [line for line in master.log().splitlines() if "HA" in line]
            refused = [line for line in lines if "refused an HA peer" in line]
            return refused, [line for line in lines if "closing HA connection" in line]

        # The counters move at once; the log lines follow from the daemon's writer thread.
        await wait_until_async(
            lambda: len(refused_and_closing()[0]) >= 4, "the refusals in the master's log", 10
        )
        refused, closing = refused_and_closing()
        assert len(refused) == 4 and not closing, "\n".join(refused + closing)

        # The real path is untouched: the master alone acknowledges and confirms new writes.
        assert len(await send_batch(conn, "after", 5)) == 5
        await wait_until_async(
            lambda: scrape(master)["rmq_broker_ha_confirm_offset_bytes"] > end,
            "the confirm offset to follow new writes",
            10,
            interval=0.1,
        )
    finally:
        conn.close()
