"""A broker that builds its POP in-flight set from a snapshot (docs/pop.md, Snapshots), in
process over a real socket: after a restart over the same data directory it starts from the
last snapshot and the revive records after it: handles issued before stay valid (the handle
key comes with the snapshot), an ack repeated from before the snapshot is done, and exactly the
unacked are in flight. A snapshot that is not whole is passed over for the whole log."""

from __future__ import annotations

from pathlib import Path

from broker.broker import Broker
from broker.config import BrokerConfig
from client.simple_consumer import PopMessage, SimpleConsumer
from protocol.message import Message
from protocol.pop import REVIVE_TOPIC
from protocol.pop_snapshot import SNAPSHOT_TOPIC, PopSnapshot, encode_snapshot
from tests.support.procs import free_port


def config(tmp_path: Path, port: int) -> BrokerConfig:
    return BrokerConfig(
        listen=f"127.0.0.1:{port}",
        data_dir=tmp_path / "broker-a",
        metrics_port=0,
        commitlog_segment_bytes=1 << 20,
        pop_snapshot_records=0,  # the test writes the snapshot when it wants one
    )


async def _restarted(
    cfg: BrokerConfig, popped: list[PopMessage], snapshot: int | None, unacked: int
) -> None:
    """Restart; check the set was built from ``snapshot`` (None: the whole log) and holds
    the last ``unacked`` popped; ack the first of them."""
    b = Broker(cfg)
    await b.start()
    try:
        async with SimpleConsumer(f"127.0.0.1:{b.port}", "G", "T") as consumer:
            await consumer.ack(popped[0])  # acked before the snapshot: done, not refused
            await consumer.ack(popped[5])  # acked after it
            state = b.ctx.pop.state
            assert state is not None and b.ctx.pop.built_from == snapshot
            assert state.inflight("G") == unacked
            still = popped[len(popped) - unacked :]
            assert {k[1] for k in state.inflight_keys()} == {m.queue_offset for m in still}
            assert await consumer.receive(10, invisible_duration=1, wait=0.2) == []
            await consumer.ack(still[0])  # a handle of before the restart: still valid
            assert state.inflight("G") == unacked - 1
    finally:
        await b.stop()


async def test_a_restarted_broker_builds_its_set_from_the_last_snapshot(tmp_path: Path) -> None:
    cfg = config(tmp_path, free_port())
    b = Broker(cfg)
    await b.start()
    try:
        b.ctx.create_topic("T", 1)
        b.ctx.appender.put("T", 0, [Message(topic="T", body=b"m%d" % i) for i in range(10)], 20)
        async with SimpleConsumer(f"127.0.0.1:{b.port}", "G", "T") as consumer:
            popped: list[PopMessage] = []
            while len(popped) < 10:
                popped += await consumer.receive(10, invisible_duration=3600, wait=2)
            assert await consumer.ack_many(popped[:5]) == [None] * 5
            state = b.ctx.pop.state
            assert state is not None
            b.ctx.pop.write_snapshot(state)
            snapshot = b.ctx.store.queue_max_offset(REVIVE_TOPIC, 0)
            await consumer.ack(popped[5])  # after the snapshot
    finally:
        await b.stop()

    await _restarted(cfg, popped, snapshot, 4)

    # A snapshot whose last part is missing (its master died while writing it): the whole
    # revive log is read instead, with the same outcome.
    b = Broker(cfg)
    await b.start()
    try:
        parts = encode_snapshot(PopSnapshot(0, None, (), (), ()), 2)
        assert len(parts) > 1
        first = parts[0]
        b.ctx.ensure_system_topic(SNAPSHOT_TOPIC)
        b.ctx.appender.put(SNAPSHOT_TOPIC, 0, [Message(topic=SNAPSHOT_TOPIC, body=first)], 1)
    finally:
        await b.stop()
    await _restarted(cfg, popped, None, 3)
