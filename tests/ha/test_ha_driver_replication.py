"""HAService over real sockets (127.0.0.1, port 0) and real MessageStores: replication,
catch-up, SyncStateSet upkeep, all-ack waits, failover with truncation, backpressure, bad peers.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import uvloop

from broker.ha.config import HAConfig
from broker.ha.service import HARole
from broker.ha.slave_client import SlaveState, split_address
from broker.ha.truncation import ConsistentPoint
from protocol.ha import (
    EpochEntry,
    MasterHandshake,
    MasterStreamDecoder,
    MasterTransfer,
    SlaveAck,
    SlaveHandshake,
    encode_slave_ack,
    encode_slave_handshake,
)
from tests.ha.test_ha_driver_support import (
    FAST,
    Node,
    all_gets,
    in_step,
    in_sync_group,
    replicated,
)
from tests.storage.support import commitlog_bytes
from tests.support.wait import stays_async, wait_until_async

Scenario = Callable[[list[Node]], Awaitable[None]]
SCENARIOS: list[tuple[Scenario, HAConfig]] = []


def scenario(config: HAConfig = FAST) -> Callable[[Scenario], Scenario]:
    """Register a scenario run by :func:`test_ha_driver` on brokers 1, 2, 3 with ``config``."""

    def register(fn: Scenario) -> Scenario:
        SCENARIOS.append((fn, config))
        return fn

    return register


async def run_scenario(fn: Scenario, config: HAConfig, tmp_path: Path) -> None:
    nodes = [await Node.start(tmp_path / f"b{i}", i, config) for i in (1, 2, 3)]
    try:
        await asyncio.wait_for(fn(nodes), 30.0)
    finally:
        for node in nodes:
            await node.close()


def assert_replicas_equal(*nodes: Node) -> None:
    first = nodes[0]
    for other in nodes[1:]:
        assert other.store.max_offset == first.store.max_offset
        assert commitlog_bytes(other.store) == commitlog_bytes(first.store)
        assert other.epochs.entries() == first.epochs.entries()
        assert all_gets(other.store) == all_gets(first.store)


@scenario()
async def master_replicates_to_two_slaves(nodes: list[Node]) -> None:
    a, b, c = nodes
    heard: dict[int, list[int]] = {1: [], 2: [], 3: []}
    for node in nodes:
        node.ha.add_confirm_listener(heard[node.broker_id].append)
    await a.master(1)
    await b.slave_of(a, 1)
    await c.slave_of(a, 1)
    a.put(400, tag=1, size=1000)  # several 256 KiB segments
    await wait_until_async(lambda: in_step(a, b, c), "slaves at the master's max offset")
    assert a.store.max_offset > 3 * 256 * 1024 // 2
    assert_replicas_equal(a, b, c)
    # Both slaves join the set; the confirm offset reaches the end and the slaves learn it.
    await wait_until_async(lambda: a.ha.in_sync_members() == {1, 2, 3}, "SyncStateSet {1, 2, 3}")
    end = a.store.max_offset
    await wait_until_async(lambda: a.ha.confirm_offset == end, "master confirm offset")
    await wait_until_async(
        lambda: b.ha.confirm_offset == end and c.ha.confirm_offset == end, "slave confirm offsets"
    )
    assert a.store.confirm_offset == end
    assert a.ha.slave_acks() == {2: end, 3: end}
    for offsets in heard.values():  # each broker heard the confirm offset advance, in order
        assert offsets and offsets[-1] == end and offsets == sorted(set(offsets))
    assert a.epochs.entries() == (EpochEntry(epoch=1, start_offset=0),)


@scenario()
async def a_slave_that_starts_late_catches_up_while_writes_go_on(nodes: list[Node]) -> None:
    a, b, _ = nodes
    await a.master(1)
    a.put(1500, tag=2)
    await b.slave_of(a, 1)
    for _ in range(10):  # writes keep coming during the catch-up
        a.put(20, tag=3)
        await asyncio.sleep(0)
    await wait_until_async(lambda: in_step(a, b), "late slave caught up")
    assert_replicas_equal(a, b)
    await wait_until_async(lambda: a.ha.in_sync_members() == {1, 2}, "late slave joins the set")


@scenario()
async def wait_for_replicas_resolves_on_acks_and_times_out(nodes: list[Node]) -> None:
    a, b, _ = nodes
    await a.master(1)
    # Alone in the set: a write is "all-acked" at once.
    r = a.put(1)
    assert await a.ha.wait_for_replicas(r.end_offset, 0.5)
    await b.slave_of(a, 1)
    await wait_until_async(lambda: a.ha.in_sync_members() == {1, 2}, "slave in the set")
    r = a.put(5)
    assert await a.ha.wait_for_replicas(r.end_offset, 5.0)
    assert b.store.max_offset >= r.end_offset
    # Past anything written: times out and answers False.
    assert not await a.ha.wait_for_replicas(a.store.max_offset + 1, 0.1)
    # A waiter still pending when the broker stops being master gets False.
    waiter = asyncio.ensure_future(a.ha.wait_for_replicas(a.store.max_offset + 10, 30.0))
    await asyncio.sleep(0)
    await a.ha.become_slave("127.0.0.1:1", 2, 1, a.address)
    assert await asyncio.wait_for(waiter, 1.0) is False
    assert not await a.ha.wait_for_replicas(0, 0.1)  # a slave never waits


@scenario()
async def min_in_sync_replicas(nodes: list[Node]) -> None:
    a, b, _ = nodes
    await a.master(1)
    assert a.ha.has_min_in_sync_replicas(1)
    assert not a.ha.has_min_in_sync_replicas(2)
    await b.slave_of(a, 1)
    await wait_until_async(lambda: a.ha.has_min_in_sync_replicas(2), "two in sync")
    assert not b.ha.has_min_in_sync_replicas(1)  # a slave takes no writes


@scenario()
async def a_lost_slave_is_shrunk_and_rejoins_when_caught_up(nodes: list[Node]) -> None:
    a, b, c = nodes
    await in_sync_group(a, b, c)
    a.put(50)
    await wait_until_async(lambda: in_step(a, b, c), "replicated")
    await c.close()  # its connection drops
    await wait_until_async(lambda: a.ha.in_sync_members() == {1, 2}, "3 shrunk")
    assert a.proposer.accepted[-1] == {1, 2}
    r = a.put(50)
    assert await a.ha.wait_for_replicas(r.end_offset, 5.0)  # {1, 2} only now
    c2 = await Node.start(c.path, 3)  # the same data directory, restarted
    nodes[2] = c2
    await c2.slave_of(a, 1)
    await wait_until_async(lambda: a.ha.in_sync_members() == {1, 2, 3}, "3 expanded back")
    assert_replicas_equal(a, b, c2)


@scenario(dataclasses.replace(FAST, max_time_slave_not_catchup_ms=300))
async def a_frozen_slave_is_shrunk_after_the_timeout_and_expanded_back(nodes: list[Node]) -> None:
    a, b, _ = nodes
    await in_sync_group(a, b, what="slave in the set")
    client = b.ha.slave_client
    assert client is not None and client._transport is not None
    client._transport.pause_reading()  # frozen: connected, but reads and acks nothing
    r = a.put(30)
    assert a.ha.confirm_offset < r.end_offset
    await wait_until_async(lambda: a.ha.in_sync_members() == {1}, "frozen slave shrunk", 5.0)
    # Once shrunk, the confirm offset is free to move and the write is all-acked.
    assert await a.ha.wait_for_replicas(r.end_offset, 2.0)
    client._transport.resume_reading()
    await wait_until_async(lambda: a.ha.in_sync_members() == {1, 2}, "slave expanded back")
    assert_replicas_equal(a, b)


@scenario()
async def confirm_offset_waits_while_a_member_is_disconnected(nodes: list[Node]) -> None:
    a, b, c = nodes
    await in_sync_group(a, b, c)
    a.put(10)
    await wait_until_async(lambda: a.ha.confirm_offset == a.store.max_offset, "confirmed")
    before = a.ha.confirm_offset
    a.proposer.gate.clear()  # the controller does not answer the shrink yet
    await c.ha.stop()  # 3 disconnects
    await wait_until_async(lambda: a.proposer.proposals[-1] == {1, 2}, "shrink proposed")
    r = a.put(10)
    await wait_until_async(lambda: b.store.max_offset == r.end_offset, "2 has the new bytes")

    # Acks and heartbeats (every 50 ms) go round; nothing may move, on the slave either (its
    # consumers see no more).
    def offsets() -> tuple[int, int, int]:
        return a.ha.confirm_offset, a.store.confirm_offset, b.ha.confirm_offset

    await stays_async(
        lambda: offsets() == (before, before, before),
        0.3,
        f"the confirm offsets (master's HA, master's store, slave's) at {before}",
        on_failure=lambda: f"now {offsets()}",
    )
    assert not await a.ha.wait_for_replicas(r.end_offset, 0.1)
    waiter = asyncio.ensure_future(a.ha.wait_for_replicas(r.end_offset, 5.0))
    a.proposer.gate.set()  # the shrink is accepted
    assert await waiter
    assert a.ha.in_sync_members() == {1, 2}
    assert a.ha.confirm_offset == r.end_offset


@scenario()
async def a_rejected_shrink_keeps_the_confirm_offset_and_is_retried(
    nodes: list[Node],
) -> None:
    a, b, _ = nodes
    await in_sync_group(a, b, what="in the set")
    a.proposer.reject = True
    await b.ha.stop()
    r = a.put(5)
    await wait_until_async(lambda: len(a.proposer.proposals) >= 3, "shrink retried")
    assert a.ha.in_sync_members() == {1, 2}
    assert a.ha.confirm_offset < r.end_offset
    a.proposer.reject = False
    assert await a.ha.wait_for_replicas(r.end_offset, 5.0)


@scenario()
async def failover_truncates_the_old_masters_unreplicated_tail(nodes: list[Node]) -> None:
    a, b, c = nodes
    await in_sync_group(a, b, c)
    r = a.put(120, tag=1)
    assert await a.ha.wait_for_replicas(r.end_offset, 5.0)
    common = r.end_offset

    # A is cut off: B is elected at epoch 2 and C follows it; A's controller fences it.
    a.proposer.reject = True
    await b.master(2, {2, 3})
    await c.slave_of(b, 2)
    tail = a.put(40, tag=9)  # A's unreplicated tail, never confirmed
    assert a.store.max_offset > common
    assert not await a.ha.wait_for_replicas(tail.end_offset, 0.2)
    assert a.ha.confirm_offset <= common

    r2 = b.put(60, tag=5)
    assert await b.ha.wait_for_replicas(r2.end_offset, 5.0)  # {2, 3}

    # A comes back as a slave of B: its tail goes, it catches up and rejoins.
    await a.slave_of(b, 2)
    await wait_until_async(lambda: in_step(b, a, c), "all three at B's max offset")
    client = a.ha.slave_client
    assert client is not None
    assert client.decision == ConsistentPoint(offset=common, epoch=1)
    assert_replicas_equal(b, a, c)
    assert b.epochs.entries() == (
        EpochEntry(epoch=1, start_offset=0),
        EpochEntry(epoch=2, start_offset=common),
    )
    await wait_until_async(lambda: b.ha.in_sync_members() == {1, 2, 3}, "A back in the set")
    # The truncation is durable: A reopened holds B's log exactly.
    await a.close()
    a2 = await Node.start(a.path, 1)
    nodes[0] = a2
    assert commitlog_bytes(a2.store) == commitlog_bytes(b.store)
    assert a2.epochs.entries() == b.epochs.entries()


@scenario()
async def becoming_master_again_of_the_same_epoch_changes_nothing(nodes: list[Node]) -> None:
    a, b, _ = nodes
    await replicated(a, b, 30)
    await a.ha.become_master(1, {1, 2}, 7, 1)  # a repeated notification with a newer set
    assert a.epochs.entries() == (EpochEntry(epoch=1, start_offset=0),)
    assert a.ha.role is HARole.MASTER
    assert a.ha.sync_state_set_epoch == 7
    assert a.ha.in_sync_members() == {1, 2}
    client = b.ha.slave_client
    assert client is not None and client.handshakes == 1  # the stream was not interrupted
    # A new epoch for the same master restarts the streams with the new history, once the
    # slave is told of that epoch too (the controllers' push; until then it does not follow).
    a.put(5)
    start = a.store.max_offset
    await a.ha.become_master(3, {1}, 1, 1)
    a.put(5)
    await b.slave_of(a, 3)
    await wait_until_async(lambda: in_step(a, b), "replicated in epoch 3")
    assert a.epochs.entries() == (
        EpochEntry(epoch=1, start_offset=0),
        EpochEntry(epoch=3, start_offset=start),
    )
    assert b.epochs.entries() == a.epochs.entries()
    assert client.handshakes == 2


@scenario()
async def a_slave_refuses_a_master_with_no_common_epoch_and_stays_suspended(
    nodes: list[Node],
) -> None:
    a, b, _ = nodes
    await b.master(5)
    b.put(10, tag=4)  # b's own history, unrelated to a's
    await a.master(1)
    a.put(10)
    await b.ha.become_slave(a.ha.address, 1, 2, b.address)
    await wait_until_async(lambda: b.ha.slave_state is SlaveState.SUSPENDED, "suspended")
    client = b.ha.slave_client
    assert client is not None and client.suspended_reason is not None
    assert "no epoch in common" in client.suspended_reason
    before = commitlog_bytes(b.store)
    await stays_async(
        lambda: commitlog_bytes(b.store) == before and client.handshakes == 1,
        0.3,
        "the suspended slave's CommitLog as it was and one handshake (no truncation, no retry)",
        on_failure=lambda: f"handshakes {client.handshakes}",
    )
    b.ha.retry_replication()
    await wait_until_async(lambda: client.handshakes == 2, "tried again")
    await wait_until_async(lambda: b.ha.slave_state is SlaveState.SUSPENDED, "refused again")
    assert commitlog_bytes(b.store) == before


@scenario()
async def a_slave_never_truncates_for_a_master_of_an_older_epoch(nodes: list[Node]) -> None:
    a, b, _ = nodes
    await a.master(1)
    a.put(10)
    await b.slave_of(a, 1)
    await wait_until_async(lambda: in_step(a, b), "replicated")
    await b.ha.become_master(2, {2}, 1, 2)
    b.put(10)
    # Told to follow A as master of epoch 3, while A still answers at epoch 1.
    await b.ha.become_slave(a.ha.address, 3, 2, b.address)
    client = b.ha.slave_client
    assert client is not None
    await wait_until_async(lambda: client.last_error is not None, "handshake rejected")
    assert "older than epoch 3" in (client.last_error or "")
    assert b.store.max_offset > a.store.max_offset  # its epoch-2 bytes are still there
    assert client.handshakes == 0


@scenario()
async def a_slow_slave_blocks_neither_writes_nor_other_slaves(nodes: list[Node]) -> None:
    a, b, _ = nodes
    await a.master(1)
    await b.slave_of(a, 1)
    host, port = split_address(a.ha.address)
    reader, writer = await asyncio.open_connection(host, port, limit=16 * 1024)
    # An async learner, so that only its stream is at stake, not the SyncStateSet.
    hello = SlaveHandshake(broker_id=9, address="127.0.0.1:1", async_learner=True)
    writer.write(encode_slave_handshake(hello))
    writer.write(encode_slave_ack(SlaveAck(max_offset=0)))
    await wait_until_async(lambda: a.ha._server.link_for(9) is not None, "slow slave registered")
    slow = a.ha._server.link_for(9)
    assert slow is not None
    # 8 MB while the slow slave reads nothing.
    for _ in range(40):
        a.put_batch(200, 1024)
        await asyncio.sleep(0)
    await wait_until_async(lambda: in_step(a, b), "the healthy slave keeps up")
    # It joins the SyncStateSet once its ack reaches the confirm offset (asynchronously).
    await wait_until_async(lambda: a.ha.in_sync_members() == {1, 2}, "the healthy slave in the set")
    r = a.put_batch(1)
    assert await a.ha.wait_for_replicas(r.end_offset, 5.0)  # acked by 2, not held by 9
    await wait_until_async(lambda: slow.paused, "the slow slave's stream is paused")
    assert slow.transport is not None
    buffered = slow.transport.get_write_buffer_size()
    assert buffered <= FAST.write_buffer_high_bytes + FAST.max_batch_bytes + 4096
    assert slow.bytes_sent < a.store.max_offset
    assert a.ha.in_sync_members() == {1, 2}
    # When it reads again it gets the very same bytes, in order.
    decoder = MasterStreamDecoder()
    got = bytearray()
    handshake: MasterHandshake | None = None
    while len(got) < a.store.max_offset:
        data = await asyncio.wait_for(reader.read(1 << 20), 5.0)
        assert data
        for msg in decoder.feed(data):
            if isinstance(msg, MasterHandshake):
                handshake = msg
            elif isinstance(msg, MasterTransfer) and len(msg.body):
                assert msg.offset == len(got)
                got += msg.body
                writer.write(encode_slave_ack(SlaveAck(max_offset=len(got))))
    assert handshake is not None
    assert bytes(got) == commitlog_bytes(a.store)
    writer.close()


async def sent_before_close(host: str, port: int, data: bytes) -> bytes:
    """Connect to an HA port and write ``data``: what came back before the peer closed the
    connection (nothing when it reset it); at most 2 s."""
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(data)
    try:
        return await asyncio.wait_for(reader.read(), 2.0)
    except ConnectionResetError:
        return b""
    finally:
        writer.close()


@scenario()
async def garbage_on_the_ha_port_closes_that_connection_only(nodes: list[Node]) -> None:
    a, b, _ = nodes
    await in_sync_group(a, b, what="slave in the set")
    host, port = split_address(a.ha.address)
    for junk in (b"GET / HTTP/1.1\r\n\r\n", b"\x00\x00\x00\x01" + b"\xff" * 66, b"\x00" * 4):
        leftover = await sent_before_close(host, port, junk)
        assert leftover == b""  # closed by the master, nothing sent
    # A slave claiming the master's own broker id is refused too.
    own_id = encode_slave_handshake(SlaveHandshake(broker_id=1, address="x"))
    assert await sent_before_close(host, port, own_id) == b""
    r = a.put(20)
    assert await a.ha.wait_for_replicas(r.end_offset, 5.0)
    client = b.ha.slave_client
    assert client is not None and client.handshakes == 1
    assert_replicas_equal(a, b)


@scenario()
async def a_slave_broker_refuses_ha_connections(nodes: list[Node]) -> None:
    a, b, _ = nodes
    await a.master(1)
    await b.slave_of(a, 1)
    host, port = split_address(b.ha.address)
    handshake = encode_slave_handshake(SlaveHandshake(broker_id=3, address="x"))
    assert await sent_before_close(host, port, handshake) == b""


@scenario()
async def a_slave_reconnects_after_the_master_restarts(nodes: list[Node]) -> None:
    a, b, _ = nodes
    await replicated(a, b, 20)
    _, port = split_address(a.ha.address)
    await a.close()
    a2 = await Node.start(a.path, 1, dataclasses.replace(FAST, listen_port=port))
    nodes[0] = a2
    await a2.master(1)
    a2.put(20)
    await wait_until_async(lambda: in_step(a2, b), "replicated after the restart")
    assert_replicas_equal(a2, b)
    client = b.ha.slave_client
    assert client is not None and client.handshakes == 2


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
@pytest.mark.parametrize(("fn", "config"), SCENARIOS, ids=[fn.__name__ for fn, _ in SCENARIOS])
def test_ha_driver(fn: Scenario, config: HAConfig, loop: str, tmp_path: Path) -> None:
    """Each scenario on the standard loop and on uvloop (the broker's; its transports hold
    written memoryviews instead of copying them)."""
    factory = uvloop.new_event_loop if loop == "uvloop" else asyncio.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(run_scenario(fn, config, tmp_path))
