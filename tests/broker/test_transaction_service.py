"""The transaction service in process on a real lone broker and store: a commit whose visible
copy a crash cut off (the commit op is the log's last commit, the copy never written) gets its
copy when the next master builds the open set, exactly once, also after further rebuilds; a
restarted broker replays its open, resolved and checked transactions from the CommitLog; the
transaction metrics follow opens, resolutions, checks and discards."""

from __future__ import annotations

import time
from pathlib import Path

from broker.broker import Broker
from broker.config import BrokerConfig
from protocol.message import Message, iter_records
from protocol.transaction import (
    PROP_HALF_OFFSET,
    PROP_PRODUCER_GROUP,
    PROP_TRANSACTION_ID,
    Op,
    OpKind,
)
from storage.store import GetStatus
from tests.broker.support import figure


def _copies(broker: Broker, topic: str) -> list[str]:
    store = broker.ctx.store
    out: list[str] = []
    for queue_id in store.queue_ids(topic):
        res = store.get(topic, queue_id, 0, 100, 1 << 20)
        if res.status is GetStatus.FOUND:
            out += [r.properties.get(PROP_HALF_OFFSET, "") for r in iter_records(res.body)]
    return out


def _config(tmp_path: Path, check_max: int = 15) -> BrokerConfig:
    """A lone broker whose own check loop checks nothing (its first check is 10 minutes away)."""
    return BrokerConfig(
        listen="127.0.0.1:0",
        data_dir=tmp_path / "b",
        metrics_port=0,
        transaction_check_first_ms=600_000,
        transaction_check_interval_ms=1000,
        transaction_check_max=check_max,
    )


def _put_halves(broker: Broker, count: int) -> list[int]:
    """Topic T and ``count`` halves in it of producer group PG (tx0, tx1...): their offsets."""
    broker.ctx.create_topic("T", 1)
    service = broker.ctx.transactions
    offsets = []
    for i in range(count):
        props = {PROP_PRODUCER_GROUP: "PG", PROP_TRANSACTION_ID: f"tx{i}"}
        result = service.put_half("T", 0, Message(topic="T", body=b"b", properties=props))
        offsets.append(result.physical_offsets[0])
    return offsets


async def test_a_commit_cut_off_before_its_copy_is_completed_once(tmp_path: Path) -> None:
    cfg = BrokerConfig(listen="127.0.0.1:0", data_dir=tmp_path / "b", metrics_port=0)
    broker = Broker(cfg)
    await broker.start()
    try:
        ctx = broker.ctx
        ctx.create_topic("T", 1)
        service = ctx.transactions
        props = {PROP_PRODUCER_GROUP: "PG", PROP_TRANSACTION_ID: "tx1"}
        half = service.put_half("T", 0, Message(topic="T", body=b"b", properties=props))
        half_offset = half.physical_offsets[0]
        # The old master wrote the commit op and died before the copy; the log went on.
        service._append_op(Op(OpKind.COMMIT, half_offset, int(time.time() * 1000)))
        ctx.appender.put("Other", 0, [Message(topic="Other", body=b"later")], 5)
        assert _copies(broker, "T") == []

        service.state = None  # a new master epoch: the set is built from the log
        state = service.ready()
        assert state.resolution(half_offset) is OpKind.COMMIT
        assert _copies(broker, "T") == [str(half_offset)]

        for _ in range(2):  # later masters find the copy after the last commit op
            service.state = None
            service.ready()
        assert _copies(broker, "T") == [str(half_offset)]
        outcome = service.end("PG", "tx1", half_offset, OpKind.COMMIT)
        assert outcome.already and outcome.result is None
        assert _copies(broker, "T") == [str(half_offset)]
    finally:
        await broker.stop()


async def test_metrics_follow_opens_resolutions_checks_and_discards(tmp_path: Path) -> None:
    broker = Broker(_config(tmp_path, check_max=1))
    await broker.start()
    try:
        service = broker.ctx.transactions
        offsets = _put_halves(broker, 3)
        assert figure(broker, "rmq_broker_transactions_opened_total") == 3
        assert figure(broker, "rmq_broker_transactions_open") == 3
        service.end("PG", "tx0", offsets[0], OpKind.COMMIT)
        service.end("PG", "tx1", offsets[1], OpKind.ROLLBACK)
        service.end("PG", "tx1", offsets[1], OpKind.ROLLBACK)  # a repeat is not counted
        assert figure(broker, "rmq_broker_transactions_resolved_total", outcome="commit") == 1
        assert figure(broker, "rmq_broker_transactions_resolved_total", outcome="rollback") == 1
        assert figure(broker, "rmq_broker_transactions_open") == 1
        # No producer of PG is connected: the check is due, counted unsent; the next discards.
        state = service.ready()
        far = int(time.time() * 1000) + 700_000
        assert service.check_due(state, far) == 1
        assert figure(broker, "rmq_broker_transaction_checks_total", sent="false") == 1
        assert service.check_due(state, far + 1000) == 1
        assert figure(broker, "rmq_broker_transactions_resolved_total", outcome="discard") == 1
        assert figure(broker, "rmq_broker_transactions_open") == 0
        assert state.resolution(offsets[2]) is OpKind.DISCARD
    finally:
        await broker.stop()


async def test_a_restarted_broker_replays_its_transactions(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    broker = Broker(cfg)
    await broker.start()
    try:
        service = broker.ctx.transactions
        offsets = _put_halves(broker, 3)
        service.end("PG", "tx0", offsets[0], OpKind.COMMIT)
        service.end("PG", "tx1", offsets[1], OpKind.ROLLBACK)
        service.check_due(service.ready(), int(time.time() * 1000) + 700_000)
    finally:
        await broker.stop()

    broker = Broker(cfg)
    await broker.start()
    try:
        service = broker.ctx.transactions
        state = service.ready()
        assert state.open_offsets() == [offsets[2]]
        assert state.open_half(offsets[2]).checks == 1  # type: ignore[union-attr]
        assert state.resolution(offsets[0]) is OpKind.COMMIT
        assert state.resolution(offsets[1]) is OpKind.ROLLBACK
        assert service.end("PG", "tx0", offsets[0], OpKind.COMMIT).already
        service.end("PG", "tx2", offsets[2], OpKind.COMMIT)
        assert sorted(_copies(broker, "T")) == sorted([str(offsets[0]), str(offsets[2])])
    finally:
        await broker.stop()
