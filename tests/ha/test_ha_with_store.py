"""The HA state machines driven against the real MessageStore and EpochFile (no sockets).

A contract test: ``read_raw`` feeds the master, ``append_raw``/``truncate`` carry out the slave's
actions, and the result survives reopening the stores.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from broker.ha.actions import (
    AppendBytes,
    AppendEpoch,
    CloseConnection,
    Reconnect,
    ReplicationRefused,
    SendBytes,
    SlaveAcked,
    TruncateLog,
    UpdateConfirmOffset,
)
from broker.ha.master_conn import MasterConnection, MasterLogState
from broker.ha.slave_conn import SlaveConnection
from broker.ha.truncation import ConsistentPoint
from protocol.ha import EpochEntry
from protocol.message import Message
from storage.epoch_file import EpochFile
from storage.store import MessageStore, StoreConfig
from tests.storage.support import commitlog_bytes

SEGMENT = 4096


@dataclass
class Broker:
    path: Path
    store: MessageStore
    epochs: EpochFile

    @classmethod
    def open(cls, path: Path) -> Broker:
        store = MessageStore(StoreConfig(data_dir=path, commitlog_segment_bytes=SEGMENT))
        store.open()
        return cls(path, store, EpochFile(path))

    def reopen(self) -> Broker:
        self.store.close()
        return Broker.open(self.path)

    def become_master(self, epoch: int) -> None:
        self.epochs.truncate_from_epoch(epoch)
        self.epochs.append(epoch, self.store.max_offset)

    def put(self, count: int, tag: int) -> None:
        for i in range(count):
            body = bytes([tag]) * (90 + i % 40)
            self.store.put("t", i % 2, [Message(topic="t", body=body)], now_ms=1_000 + i)

    def log_state(self) -> MasterLogState:
        return MasterLogState(
            epoch_entries=self.epochs.entries(),
            max_offset=self.store.max_offset,
            confirm_offset=self.store.confirm_offset,
            min_offset=self.store.min_offset,
        )

    def commitlog(self) -> bytes:
        return commitlog_bytes(self.store)


def replicate(master: Broker, slave: Broker) -> tuple[str | None, SlaveConnection]:
    """Run one HA connection until it is quiet, then one heartbeat; returns (why it stopped
    early, the slave side)."""
    m = MasterConnection(max_batch_bytes=1000)
    s = SlaveConnection(broker_id=2, address="127.0.0.1:20912")
    to_master = [s.start(epoch_entries=slave.epochs.entries(), max_offset=slave.store.max_offset)]
    to_slave: list[bytes] = []
    heartbeat_sent = False
    for _ in range(10_000):
        moved = False
        while to_master:
            for a in m.receive_data(to_master.pop(0), master.log_state()):
                match a:
                    case SendBytes(data=d):
                        to_slave.append(d)
                    case SlaveAcked(offset=off):
                        master.store.confirm_offset = max(master.store.confirm_offset, off)
                    case CloseConnection(reason=r):
                        return r, s
            moved = True
        while out := m.next_transfer(
            master.log_state(), master.store.read_raw, record_aligned=False
        ):
            header, body = out
            to_slave.append(header + bytes(body))
        while to_slave:
            for sa in s.receive_data(to_slave.pop(0)):
                match sa:
                    case TruncateLog(offset=off):
                        slave.store.truncate(off)
                        slave.epochs.truncate_suffix_from_offset(off)
                    case AppendEpoch(epoch=e, start_offset=st):
                        slave.epochs.append(e, st)
                    case AppendBytes(offset=off, data=raw):
                        slave.store.append_raw(off, raw)
                    case UpdateConfirmOffset(offset=off):
                        slave.store.confirm_offset = off
                    case SendBytes(data=d):
                        to_master.append(d)
                    case ReplicationRefused(reason=r) | Reconnect(reason=r):
                        return r, s
                    case _:
                        raise AssertionError(f"unexpected {sa!r}")
            moved = True
        if not moved:
            hb = m.heartbeat(master.log_state())
            if heartbeat_sent or hb is None:
                return None, s
            to_slave.append(hb)  # carries the confirm offset the last acks moved
            heartbeat_sent = True
    raise AssertionError("did not settle")


def test_failover_with_a_divergent_old_master_on_real_stores(tmp_path: Path) -> None:
    a = Broker.open(tmp_path / "a")
    b = Broker.open(tmp_path / "b")
    try:
        a.become_master(1)
        a.put(40, 1)  # several 4 KiB segments
        assert replicate(a, b)[0] is None
        assert b.commitlog() == a.commitlog()
        a.put(10, 2)  # never replicated; then a dies
        common = b.store.max_offset
        assert a.store.max_offset > common

        b.become_master(2)
        b.put(25, 3)
        reason, conn = replicate(b, a)
        assert reason is None
        assert conn.decision == ConsistentPoint(offset=common, epoch=1)
        assert a.commitlog() == b.commitlog()
        assert a.epochs.entries() == b.epochs.entries()
        assert a.epochs.entries() == (
            EpochEntry(epoch=1, start_offset=0),
            EpochEntry(epoch=2, start_offset=common),
        )
        assert a.store.queue_max_offset("t", 0) == b.store.queue_max_offset("t", 0)
        assert a.store.confirm_offset == b.store.max_offset

        # The truncation and the new bytes survive a restart.
        a = a.reopen()
        assert a.commitlog() == b.commitlog()
        assert a.epochs.entries() == b.epochs.entries()
    finally:
        a.store.close()
        b.store.close()
