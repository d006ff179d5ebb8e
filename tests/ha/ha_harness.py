"""A master and a slave state machine joined by an in-memory link (like h11's ConnectionPair).

:class:`Node` is an in-memory broker: a byte log that may start at a non-zero offset, an epoch
history and a confirm offset. :class:`Link` runs one HA connection between two nodes, carrying
out every action the way the asyncio drivers will, and records what crossed the wire.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from broker.ha.actions import (
    AppendBytes,
    AppendEpoch,
    CloseConnection,
    Reconnect,
    ReplicationRefused,
    SendBytes,
    SlaveAcked,
    SlaveRegistered,
    StartLogAt,
    StreamingStarted,
    TruncateLog,
    UpdateConfirmOffset,
)
from broker.ha.master_conn import MasterConnection, MasterLogState
from broker.ha.slave_conn import SlaveConnection
from protocol.ha import EpochEntry, MasterStreamDecoder, MasterTransfer


def H(*pairs: tuple[int, int]) -> tuple[EpochEntry, ...]:
    """An epoch history from (epoch, start offset) pairs."""
    return tuple(EpochEntry(epoch=e, start_offset=s) for e, s in pairs)


@dataclass
class Node:
    broker_id: int
    base: int = 0  # offset of log[0]
    log: bytearray = field(default_factory=bytearray)
    entries: list[EpochEntry] = field(default_factory=list)
    confirm: int = 0
    segment_size: int = 1 << 30
    appended_epochs: list[tuple[int, int, int]] = field(default_factory=list)  # (epoch, start, at)

    @property
    def max_offset(self) -> int:
        return self.base + len(self.log)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{10900 + self.broker_id}"

    def become_master(self, epoch: int) -> None:
        """DESIGN.md 5: drop entries at or above the epoch, append (epoch, maxOffset)."""
        self.entries = [e for e in self.entries if e.epoch < epoch]
        self.entries.append(EpochEntry(epoch=epoch, start_offset=self.max_offset))

    def write(self, data: bytes) -> None:
        self.log += data

    def read_raw(self, offset: int, max_bytes: int) -> memoryview:
        """Like the store's: never crosses a segment end."""
        seg_end = (offset // self.segment_size + 1) * self.segment_size
        end = min(offset + max_bytes, self.max_offset, seg_end)
        return memoryview(bytes(self.log[offset - self.base : end - self.base]))

    def master_state(self) -> MasterLogState:
        return MasterLogState(
            epoch_entries=tuple(self.entries),
            max_offset=self.max_offset,
            confirm_offset=self.confirm,
            min_offset=self.base,
            last_file_start=max(self.base, self.max_offset - self.max_offset % self.segment_size),
        )

    def bytes_from(self, offset: int) -> bytes:
        return bytes(self.log[offset - self.base :])


@dataclass
class Link:
    """One HA connection from ``slave`` to ``master``; :meth:`run` pumps it until quiet."""

    master: Node
    slave: Node
    max_batch_bytes: int = 64
    record_aligned: bool = False
    sync_from_last_file: bool = False
    chunk_rng: random.Random | None = None  # split every write into random chunks
    ack_moves_confirm: bool = True
    mconn: MasterConnection = field(init=False)
    sconn: SlaveConnection = field(init=False)
    to_master: list[bytes] = field(default_factory=list)
    to_slave: list[bytes] = field(default_factory=list)
    master_wire: bytearray = field(default_factory=bytearray)
    acks: list[int] = field(default_factory=list)
    outcome: str | None = None  # "refused: ...", "reconnect: ...", "closed: ..."
    slave_actions: list[object] = field(default_factory=list)
    master_actions: list[object] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.mconn = MasterConnection(max_batch_bytes=self.max_batch_bytes)
        self.sconn = SlaveConnection(
            broker_id=self.slave.broker_id,
            address=self.slave.address,
            sync_from_last_file=self.sync_from_last_file,
        )
        self.to_master.append(
            self.sconn.start(epoch_entries=self.slave.entries, max_offset=self.slave.max_offset)
        )

    def _chunks(self, data: bytes) -> list[bytes]:
        if self.chunk_rng is None or len(data) < 2:
            return [data]
        cuts = sorted(self.chunk_rng.sample(range(1, len(data)), min(3, len(data) - 1)))
        return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]

    def _to_slave(self, data: bytes) -> None:
        self.master_wire += data
        self.to_slave.extend(self._chunks(data))

    def _deliver_to_master(self) -> bool:
        moved = False
        while self.to_master and self.outcome is None:
            data = self.to_master.pop(0)
            for chunk in self._chunks(data):
                for a in self.mconn.receive_data(chunk, self.master.master_state()):
                    moved = True
                    self.master_actions.append(a)
                    match a:
                        case SendBytes(data=out):
                            self._to_slave(out)
                        case SlaveAcked(offset=off):
                            self.acks.append(off)
                            if self.ack_moves_confirm:
                                # SyncStateSet {master, this slave}: confirm = the slave's ack.
                                self.master.confirm = max(self.master.confirm, off)
                        case CloseConnection(reason=r):
                            self.outcome = f"closed: {r}"
                        case SlaveRegistered() | StreamingStarted():
                            pass
        return moved

    def _deliver_to_slave(self) -> bool:
        moved = False
        while self.to_slave and self.outcome is None:
            data = self.to_slave.pop(0)
            for a in self.sconn.receive_data(data):
                moved = True
                self.slave_actions.append(a)
                self._apply(a)
        return moved

    def _apply(self, a: object) -> None:
        s = self.slave
        match a:
            case TruncateLog(offset=off):
                if off <= s.base:
                    s.log.clear()
                    s.base = off
                else:
                    del s.log[off - s.base :]
                s.entries = [e for e in s.entries if e.start_offset < off]
            case StartLogAt(offset=off):
                assert not s.log
                s.base = off
            case AppendEpoch(epoch=e, start_offset=st):
                s.entries.append(EpochEntry(epoch=e, start_offset=st))
                s.appended_epochs.append((e, st, s.max_offset))
            case AppendBytes(offset=off, data=data):
                assert off == s.max_offset
                s.log += data
            case UpdateConfirmOffset(offset=off):
                s.confirm = off
            case SendBytes(data=out):
                self.to_master.append(out)
            case ReplicationRefused(reason=r):
                self.outcome = f"refused: {r}"
            case Reconnect(reason=r):
                self.outcome = f"reconnect: {r}"
            case _:
                raise AssertionError(f"unexpected action {a!r}")

    def _send_transfers(self) -> bool:
        moved = False
        while (
            out := self.mconn.next_transfer(
                self.master.master_state(), self.master.read_raw, record_aligned=self.record_aligned
            )
        ) is not None:
            header, body = out
            self._to_slave(header + bytes(body))
            moved = True
        return moved

    def _pump(self, max_rounds: int) -> None:
        for _ in range(max_rounds):
            if self.outcome is not None:
                return
            moved = self._deliver_to_master()
            moved |= self._send_transfers()
            moved |= self._deliver_to_slave()
            if not moved:
                return
        raise AssertionError("link did not settle")

    def run(self, max_rounds: int = 10_000) -> None:
        """Pump until nothing moves, then one heartbeat (so the slave hears the current epoch)
        and pump again."""
        self._pump(max_rounds)
        if self.outcome is None and (hb := self.mconn.heartbeat(self.master.master_state())):
            self._to_slave(hb)
            self._pump(max_rounds)

    def transfers_sent(self) -> list[MasterTransfer]:
        msgs = MasterStreamDecoder().feed(bytes(self.master_wire))
        return [m for m in msgs if isinstance(m, MasterTransfer)]
