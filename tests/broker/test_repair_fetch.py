"""The asking side of a repair against replicas that lie (issue 31): real stores, real sockets,
real REPAIR_RECORD frames. A replica answering with bytes that fail the CRC, or for an offset
beyond its epoch, is refused and the next one asked; nothing wrong is ever written.

The liars are remoting servers that answer REPAIR_RECORD as a broker never would (a real
broker's processor checks its own copy first: RepairProcessor, the honest replica here)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from broker.repair import fetch
from broker.repair.answer import RepairProcessor
from broker.repair.fetch import RecordRepair
from broker.repair.scrub import Scrubber
from broker.role import RoleState
from protocol.broker_requests.repair import RepairedRecord, RepairRecord
from protocol.codes import RequestCode, ResponseCode
from protocol.ha import EpochRange
from protocol.message import HEAD_SIZE
from protocol.remoting import Frame, response
from remoting.client import ConnectionPool
from remoting.server import Connection, RemotingServer
from storage.store import GetStatus, MessageStore
from tests.storage.support import TOPIC, messages, open_store

EPOCH = 3


@dataclass
class StubHA:
    """What RecordRepair and RepairProcessor read of an HAService: the replicas the controllers
    list, the in-sync ones, and the epoch entry at an offset (one epoch over the whole log)."""

    store: MessageStore
    registered_replicas: Mapping[int, str]

    def in_sync_members(self) -> frozenset[int]:
        return frozenset(self.registered_replicas) | {1}

    def epoch_at(self, offset: int) -> EpochRange | None:
        end = self.store.max_offset
        if not 0 <= offset < end:
            return None
        return EpochRange(epoch=EPOCH, start_offset=0, end_offset=end)


def flip(store: MessageStore, offset: int) -> None:
    seg = sorted((store.config.data_dir / "commitlog").iterdir())[0]
    with seg.open("r+b") as f:
        f.seek(offset)
        byte = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([byte ^ 0x01]))


async def serve(handler: Callable[[Connection, Frame], Frame]) -> tuple[RemotingServer, str]:
    server = RemotingServer(name="replica")
    server.register(RequestCode.REPAIR_RECORD, handler)
    port = await server.start("127.0.0.1", 0)
    return server, f"127.0.0.1:{port}"


@pytest.fixture
async def stores(tmp_path: Path) -> AsyncIterator[tuple[MessageStore, MessageStore, list[int]]]:
    """The damaged copy and an intact one of the same 20 records (written alike)."""
    copies = []
    for name in ("damaged", "intact"):
        store = open_store(tmp_path / name)
        put = store.put(TOPIC, 0, messages(20, 300), 1_700_000_000_000)
        store.flush()
        copies.append((store, put.physical_offsets))
    (damaged, offsets), (intact, _) = copies
    yield damaged, intact, offsets
    damaged.close()
    intact.close()


def liar(corrupt: bool, epoch_end: int | None = None) -> Callable[[Connection, Frame], Frame]:
    """A replica that answers every REPAIR_RECORD with what it should not: the intact bytes
    with a bit flipped (``corrupt``), or an epoch entry ending at ``epoch_end``."""
    store_ref: dict[str, Any] = {}

    def handler(conn: Connection, req: Frame) -> Frame:
        ask = RepairRecord.parse(req.header, req.body)
        raw = bytearray(store_ref["store"].repairs.record_bytes(ask.offset, ask.size))
        if corrupt:
            raw[HEAD_SIZE + 2] ^= 0x01
        end = epoch_end if epoch_end is not None else ask.offset + ask.size
        answer = RepairedRecord(epoch=EPOCH, epoch_start=0, epoch_end=end, raw=bytes(raw))
        return response(req, ResponseCode.SUCCESS, *answer.encode())

    handler.store_ref = store_ref  # type: ignore[attr-defined]
    return handler


async def asker(
    damaged: MessageStore, replicas: dict[int, str]
) -> tuple[RecordRepair, ConnectionPool]:
    pool = ConnectionPool(2.0)
    ha = StubHA(damaged, replicas)
    repair = RecordRepair(
        damaged.repairs,
        lambda: ha,  # type: ignore[arg-type,return-value]
        lambda: RoleState(broker_id=1, is_master=True),
        lambda: pool,
    )
    damaged.repairs.repairer = repair
    return repair, pool


@pytest.mark.parametrize("lie", ["bytes failing the CRC", "an offset beyond its epoch"])
async def test_a_lying_replica_is_refused_and_the_next_one_repairs(
    stores: tuple[MessageStore, MessageStore, list[int]], lie: str
) -> None:
    damaged, intact, offsets = stores
    at, size = offsets[7], offsets[8] - offsets[7]
    flip(damaged, at + HEAD_SIZE + 9)
    assert damaged.get(TOPIC, 0, 7, 1, 1 << 20).status is GetStatus.CORRUPT
    bad = liar(corrupt=lie.startswith("bytes"), epoch_end=at + size - 1 if "epoch" in lie else None)
    bad.store_ref["store"] = intact  # type: ignore[attr-defined]
    honest_ha = StubHA(intact, {})
    honest = RepairProcessor(intact.repairs, lambda: honest_ha)  # type: ignore[arg-type,return-value]
    liar_server, liar_at = await serve(bad)
    honest_server, honest_at = await serve(honest.answer)
    repair, pool = await asker(damaged, {2: liar_at, 3: honest_at})  # 2 is asked first
    try:
        started = repair.start(at)
        assert started is not None
        outcome = await started
    finally:
        pool.close()
        await liar_server.stop()
        await honest_server.stop()
    assert outcome.ok and outcome.source == f"broker 3 at {honest_at}"
    assert f"broker 2 at {liar_at}: answer refused" in outcome.tried
    assert repair.counts == {"repaired": 1, "unrepairable": 0, "answers_refused": 1}
    assert damaged.repairs.record_bytes(at, size) == intact.repairs.record_bytes(at, size)
    res = damaged.get(TOPIC, 0, 7, 1, 1 << 20)
    assert res.status is GetStatus.FOUND and res.count == 1


async def test_when_every_replica_lies_nothing_is_written(
    stores: tuple[MessageStore, MessageStore, list[int]],
) -> None:
    damaged, intact, offsets = stores
    at, size = offsets[3], offsets[4] - offsets[3]
    flip(damaged, at + HEAD_SIZE + 9)
    before = damaged.repairs.record_bytes(at, size)
    assert damaged.get(TOPIC, 0, 3, 1, 1 << 20).status is GetStatus.CORRUPT
    servers = []
    replicas = {}
    for broker_id, handler in ((2, liar(corrupt=True)), (3, liar(False, epoch_end=at))):
        handler.store_ref["store"] = intact  # type: ignore[attr-defined]
        server, address = await serve(handler)
        servers.append(server)
        replicas[broker_id] = address
    repair, pool = await asker(damaged, replicas)
    try:
        started = repair.start(at)
        assert started is not None
        outcome = await started
        assert repair.start(at) is None  # not asked again at once
    finally:
        pool.close()
        for server in servers:
            await server.stop()
    assert not outcome.ok
    assert "CRC mismatch" in outcome.tried and "beyond its epoch" in outcome.tried
    assert repair.counts == {"repaired": 0, "unrepairable": 1, "answers_refused": 2}
    assert damaged.repairs.record_bytes(at, size) == before
    corrupt = damaged.get(TOPIC, 0, 3, 1, 1 << 20)
    assert corrupt.status is GetStatus.CORRUPT
    assert "no intact copy on another replica" in repair.explain(at)


async def test_damage_recovery_found_is_repaired_from_the_first_replica_that_can(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A record damaged while the broker was stopped: its recovery finds it (the last segment's
    # records are checked). The scrub's loop has it repaired with no read or scrub meeting it,
    # as soon as a replica is there to ask; the count the heartbeats send the controllers'
    # elections ("records no replica could repair") holds only a repair tried and failed.
    (damaged, offsets), (intact, _) = [
        (store, store.put(TOPIC, 0, messages(20, 300), 1_700_000_000_000).physical_offsets)
        for store in (open_store(tmp_path / "damaged"), open_store(tmp_path / "intact"))
    ]
    at, size = offsets[5], offsets[6] - offsets[5]
    damaged.close()
    flip(damaged, at + HEAD_SIZE + 9)
    damaged = open_store(tmp_path / "damaged")
    assert damaged.repairs.unrepaired() == [(at, size)]  # recovery found it
    liar_handler = liar(corrupt=True)
    liar_handler.store_ref["store"] = intact  # type: ignore[attr-defined]
    honest_ha = StubHA(intact, {})
    honest = RepairProcessor(intact.repairs, lambda: honest_ha)  # type: ignore[arg-type,return-value]
    liar_server, liar_at = await serve(liar_handler)
    honest_server, honest_at = await serve(honest.answer)
    replicas: dict[int, str] = {}
    repair, pool = await asker(damaged, replicas)
    scrubber = Scrubber(damaged.repairs, repair, lambda: 0, lambda: 0.0)
    try:
        scrubber._heal()  # no replica known: nothing tried, nothing reported
        assert scrubber.damaged_records == 0 and damaged.repairs.unrepairable() == []

        replicas[2] = liar_at  # the only replica lies: tried, failed, reported
        scrubber._heal()
        running = repair.start(at)
        assert running is not None and not (await running).ok
        scrubber._heal()
        assert scrubber.damaged_records == 1 and damaged.repairs.unrepairable() == [(at, size)]

        replicas[3] = honest_at  # retried (at once here) and repaired from the honest one
        monkeypatch.setattr(fetch, "RETRY_AFTER_S", 0.0)
        scrubber._heal()
        running = repair.start(at)
        assert running is not None and (await running).ok
        scrubber._heal()
    finally:
        pool.close()
        await liar_server.stop()
        await honest_server.stop()
    assert scrubber.damaged_records == 0 and damaged.repairs.unrepaired() == []
    assert damaged.repairs.record_bytes(at, size) == intact.repairs.record_bytes(at, size)
    # The liar (asked first) refused twice.
    assert repair.counts == {"repaired": 1, "unrepairable": 1, "answers_refused": 2}
    damaged.close()
    intact.close()
