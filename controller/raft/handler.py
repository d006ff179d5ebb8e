"""Carrying out a :class:`Ready` in the order the core requires (see :mod:`.ready`).

The one implementation that the asyncio driver (:mod:`controller.raft_driver`) and the
deterministic simulation (``tests/raft/sim.py``) share, so that the simulation exercises the
driver's own handling. No asyncio, no clock, no sockets: the caller supplies the storage and the
callbacks, and decides when the write happens (the driver in a worker thread; the simulation a
few steps later, or never when it crashes the node in between). One Ready goes through:

1. :meth:`ReadyHandler.send`: the messages that may leave before the write;
2. :meth:`ReadyHandler.persist`: one write of snapshot, entries, hard state and compaction
   (fsynced when ``must_sync``; a commit-only hard state is recorded without one);
3. :meth:`ReadyHandler.finish`, once the write is durable: the messages that promise
   durability, then restore the snapshot, apply the committed entries in order, serve the read
   states, and ``advance``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from protocol.raft_types import Entry, HardState, Message, ReadState, Snapshot

from .core import RaftNode
from .ready import Ready


class DurableLog(Protocol):
    """The write half of a Raft storage (``storage.raftlog.MemoryStorage``, ``DiskStorage``)."""

    def save(
        self,
        *,
        hard_state: HardState | None = None,
        entries: Sequence[Entry] = (),
        snapshot: Snapshot | None = None,
        compaction: Snapshot | None = None,
        sync: bool = True,
    ) -> None: ...


class ReadyHandler:
    """Carries out each Ready of one node: ``send``, ``persist``, then ``finish``."""

    def __init__(
        self,
        node: RaftNode,
        storage: DurableLog,
        *,
        send: Callable[[tuple[Message, ...]], None],
        apply: Callable[[Entry], None],
        restore: Callable[[Snapshot], None],
        read: Callable[[ReadState], None],
    ) -> None:
        self.node = node
        self.storage = storage
        self._send = send
        self._apply = apply
        self._restore = restore
        self._read = read

    @staticmethod
    def writes(rd: Ready) -> bool:
        """Whether persisting ``rd`` writes the disk (entries, a snapshot, a compaction or an
        fsynced hard state); otherwise at most a commit-only hard state is recorded in memory,
        cheap enough for the caller's own thread."""
        return bool(
            rd.entries or rd.snapshot is not None or rd.compaction is not None or rd.must_sync
        )

    def send(self, rd: Ready) -> None:
        """Step 1: the messages that may go before (or while) the Ready is written."""
        if rd.messages:
            self._send(rd.messages)

    def persist(self, rd: Ready) -> None:
        """Step 2: make the Ready durable, in one write."""
        if self.writes(rd):
            self.storage.save(
                hard_state=rd.hard_state,
                entries=rd.entries,
                snapshot=rd.snapshot,
                compaction=rd.compaction,
                sync=rd.must_sync,
            )
        elif rd.hard_state is not None:
            self.storage.save(hard_state=rd.hard_state, sync=False)  # commit only

    def finish(self, rd: Ready) -> None:
        """Step 3, once ``persist`` is done: what may happen only after the write."""
        if rd.persisted_messages:
            self._send(rd.persisted_messages)
        if rd.snapshot is not None:
            self._restore(rd.snapshot)
        for entry in rd.committed_entries:
            self._apply(entry)
        for rs in rd.read_states:
            self._read(rs)
        self.node.advance(rd)
