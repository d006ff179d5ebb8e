"""A synchronous cluster of RaftNodes joined by a perfect, controllable network.

For scenario tests (etcd raft's ``network`` helper): every Ready is persisted to the node's
MemoryStorage at once, messages are delivered in order unless a test blocks or filters them,
and ``stabilize()`` runs until no node has anything left to do.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from dataclasses import replace

import msgpack

from controller.raft import (
    AppendEntries,
    Entry,
    EntryType,
    HardState,
    Message,
    NodeId,
    RaftConfig,
    RaftNode,
    ReadState,
    Ready,
    Role,
    bootstrap,
)
from storage.raftlog import MemoryStorage


class StateMachine:
    """Applies NORMAL entries by appending their data; snapshots are msgpack of that list."""

    def __init__(self) -> None:
        self.data: list[bytes] = []
        self.applied = 0

    def apply(self, entry: Entry) -> None:
        assert entry.index == self.applied + 1, (entry.index, self.applied)
        self.applied = entry.index
        if entry.type is EntryType.NORMAL:
            self.data.append(entry.data)

    def snapshot(self) -> bytes:
        return msgpack.packb([self.applied, self.data])  # type: ignore[no-any-return]

    def restore(self, raw: bytes) -> None:
        applied, data = msgpack.unpackb(raw)
        self.applied = applied
        self.data = list(data)


class Cluster:
    def __init__(
        self,
        ids: Iterable[NodeId] = ("n1", "n2", "n3"),
        *,
        seed: int = 0,
        joining: Iterable[NodeId] = (),
        snapshot_every: int = 0,
        **config: object,
    ) -> None:
        self.seed = seed
        self.base_config = config
        self.snapshot_every = snapshot_every
        founders = list(ids)
        self.storages: dict[NodeId, MemoryStorage] = {}
        self.nodes: dict[NodeId, RaftNode] = {}
        self.machines: dict[NodeId, StateMachine] = {}
        self.reads: dict[NodeId, list[ReadState]] = {}
        self.down: set[NodeId] = set()
        self.blocked: set[tuple[NodeId, NodeId]] = set()
        self.drop: Callable[[Message], bool] | None = None
        self.log: list[Message] = []
        """Every message delivered (or dropped by a filter), in order."""
        for node_id in founders:
            storage = MemoryStorage()
            hs, entry = bootstrap(founders)
            storage.save(hard_state=hs, entries=[entry])
            self.storages[node_id] = storage
            self._start(node_id)
        for node_id in joining:
            self.storages[node_id] = MemoryStorage()
            self._start(node_id)

    def config(self, node_id: NodeId) -> RaftConfig:
        return RaftConfig(node_id=node_id, **self.base_config)  # type: ignore[arg-type]

    def _start(self, node_id: NodeId) -> None:
        storage = self.storages[node_id]
        rng = random.Random(f"{self.seed}-{node_id}-{len(self.log)}")
        self.nodes[node_id] = RaftNode(self.config(node_id), storage, rng)
        machine = StateMachine()
        if storage.snapshot().index:
            machine.restore(storage.snapshot().data)
        self.machines[node_id] = machine
        self.reads.setdefault(node_id, [])

    # --- faults --------------------------------------------------------------------------

    def isolate(self, node_id: NodeId) -> None:
        for other in self.nodes:
            if other != node_id:
                self.blocked.add((node_id, other))
                self.blocked.add((other, node_id))

    def partition(self, *groups: Iterable[NodeId]) -> None:
        sets = [set(g) for g in groups]
        for a in self.nodes:
            for b in self.nodes:
                if a != b and not any(a in s and b in s for s in sets):
                    self.blocked.add((a, b))

    def heal(self) -> None:
        self.blocked.clear()
        self.drop = None

    def crash(self, node_id: NodeId) -> None:
        self.down.add(node_id)

    def restart(self, node_id: NodeId) -> None:
        self.down.discard(node_id)
        self._start(node_id)

    def add_node(self, node_id: NodeId) -> None:
        self.storages[node_id] = MemoryStorage()
        self._start(node_id)

    # --- running -------------------------------------------------------------------------

    def process(self, node_id: NodeId) -> list[Message]:
        """Handle every Ready of one node (persist at once); return the messages it sent."""
        node = self.nodes[node_id]
        storage = self.storages[node_id]
        machine = self.machines[node_id]
        out: list[Message] = []
        while (rd := node.ready()) is not None:
            out.extend(persist(storage, rd))
            if rd.snapshot is not None:
                machine.restore(rd.snapshot.data)
            for entry in rd.committed_entries:
                machine.apply(entry)
            for rs in rd.read_states:
                assert machine.applied >= rs.index
                self.reads[node_id].append(rs)
            node.advance(rd)
            if self.snapshot_every and machine.applied - storage.snapshot().index >= (
                self.snapshot_every
            ):
                node.compact(machine.applied, machine.snapshot())
        return out

    def deliver(self, messages: Iterable[Message]) -> list[Message]:
        delivered = []
        for m in messages:
            if m.dst in self.down or m.src in self.down or m.dst not in self.nodes:
                continue
            if (m.src, m.dst) in self.blocked:
                continue
            self.log.append(m)
            if self.drop is not None and self.drop(m):
                continue
            self.nodes[m.dst].step(m)
            delivered.append(m)
        return delivered

    def stabilize(self, max_rounds: int = 10_000) -> None:
        for _ in range(max_rounds):
            pending: list[Message] = []
            for node_id in self.nodes:
                if node_id not in self.down:
                    pending.extend(self.process(node_id))
            if not pending:
                return
            self.deliver(pending)
        raise AssertionError("cluster did not stabilize")

    def tick(self, node_id: NodeId, n: int = 1) -> None:
        for _ in range(n):
            self.nodes[node_id].tick()
            self.stabilize()

    def tick_all(self, n: int = 1) -> None:
        for _ in range(n):
            for node_id, node in self.nodes.items():
                if node_id not in self.down:
                    node.tick()
            self.stabilize()

    def elect(self, node_id: NodeId) -> RaftNode:
        self.nodes[node_id].campaign()
        self.stabilize()
        node = self.nodes[node_id]
        assert node.role is Role.LEADER, f"{node_id} is {node.role}"
        return node

    def propose(self, node_id: NodeId, data: bytes) -> int:
        index = self.nodes[node_id].propose(data)
        self.stabilize()
        return index

    # --- inspection ----------------------------------------------------------------------

    def leader(self) -> NodeId | None:
        leaders = [i for i, n in self.nodes.items() if i not in self.down and n.role is Role.LEADER]
        if not leaders:
            return None
        return max(leaders, key=lambda i: self.nodes[i].term)

    def applied_data(self, node_id: NodeId) -> list[bytes]:
        return self.machines[node_id].data

    def sent(self, kind: type[Message] | tuple[type[Message], ...]) -> list[Message]:
        return [m for m in self.log if isinstance(m, kind)]

    def clear_log(self) -> None:
        self.log.clear()


def with_term(m: Message, term: int) -> Message:
    return replace(m, term=term)


def persist(storage: MemoryStorage, rd: Ready) -> list[Message]:
    """What a driver does first with a Ready: save its hard state, entries, snapshot and
    compaction at once; return its messages in send order (those that may leave before the
    save, then those that wait for it)."""
    storage.save(
        hard_state=rd.hard_state,
        entries=rd.entries,
        snapshot=rd.snapshot,
        compaction=rd.compaction,
    )
    return [*rd.messages, *rd.persisted_messages]


def drain(node: RaftNode) -> list[Message]:
    """Persist and advance every Ready of a lone node (its storage must be a MemoryStorage);
    return every message it would send, in order."""
    out: list[Message] = []
    storage = node.storage
    assert isinstance(storage, MemoryStorage)
    while (rd := node.ready()) is not None:
        out.extend(persist(storage, rd))
        node.advance(rd)
    return out


def append_to_n2(entry: Entry) -> AppendEntries:
    """n1, leader at term 2, appends ``entry`` (index 2) to n2 right after the committed
    bootstrap entry (index 1, term 1): what a :func:`make_node` follower at term 2 accepts."""
    return AppendEntries(
        src="n1",
        dst="n2",
        term=2,
        prev_log_index=1,
        prev_log_term=1,
        commit=1,
        entries=(entry,),
    )


def make_node(
    node_id: NodeId,
    voters: Iterable[NodeId] = ("n1", "n2", "n3"),
    *,
    terms: Iterable[int] = (),
    term: int | None = None,
    commit: int = 1,
    seed: int = 1,
    **config: object,
) -> RaftNode:
    """A node whose durable log is the bootstrap entry then one entry per term in ``terms``."""
    storage = MemoryStorage()
    _, entry = bootstrap(list(voters))
    log = [entry] + [Entry(term=t, index=i, data=b"e%d" % i) for i, t in enumerate(terms, start=2)]
    last_term = log[-1].term
    storage.save(
        hard_state=HardState(term=term if term is not None else last_term, commit=commit),
        entries=log,
    )
    cfg = RaftConfig(node_id=node_id, **config)  # type: ignore[arg-type]
    return RaftNode(cfg, storage, random.Random(seed))
