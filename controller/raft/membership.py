"""Membership: configuration-change entries and the configuration history of a log.

Changes are made one server at a time (Raft dissertation, section 4.1): add a node as a learner,
promote a learner to voter, remove a node. A node uses the latest configuration in its log,
committed or not, from the moment the entry is appended; a truncated entry reverts it. The leader
accepts a change only when the previous one is committed and it has committed an entry in its own
term (the fix for the single-server change bug Ongaro described in 2015), so at most one change is
ever uncommitted and any two quorums of consecutive configurations overlap.

The founding configuration is entry 1 of every log, a BOOTSTRAP change listing the voters; see
:func:`controller.raft.bootstrap`.

Byte layout of a ConfChange entry's data (big-endian)::

    type u8 | count u16 | count x (length u16, node id UTF-8) | context (the rest, opaque)

``context`` is for the driver (e.g. the new member's address); the core never reads it.
"""

from __future__ import annotations

import enum
import struct
from bisect import bisect_right
from dataclasses import dataclass

from protocol.raft_types import ConfState, NodeId

from .errors import ConfChangeRejected

_HEAD = struct.Struct(">BH")
_LEN = struct.Struct(">H")


class ConfChangeType(enum.IntEnum):
    BOOTSTRAP = 0
    ADD_LEARNER = 1
    PROMOTE = 2
    REMOVE = 3


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfChange:
    type: ConfChangeType
    node_ids: tuple[NodeId, ...]
    context: bytes = b""

    @property
    def node_id(self) -> NodeId:
        return self.node_ids[0]

    @classmethod
    def bootstrap(cls, voters: tuple[NodeId, ...] | list[NodeId]) -> ConfChange:
        return cls(type=ConfChangeType.BOOTSTRAP, node_ids=tuple(sorted(set(voters))))

    @classmethod
    def add_learner(cls, node_id: NodeId, context: bytes = b"") -> ConfChange:
        return cls(type=ConfChangeType.ADD_LEARNER, node_ids=(node_id,), context=context)

    @classmethod
    def promote(cls, node_id: NodeId) -> ConfChange:
        return cls(type=ConfChangeType.PROMOTE, node_ids=(node_id,))

    @classmethod
    def remove(cls, node_id: NodeId) -> ConfChange:
        return cls(type=ConfChangeType.REMOVE, node_ids=(node_id,))


def encode_conf_change(cc: ConfChange) -> bytes:
    parts = [_HEAD.pack(int(cc.type), len(cc.node_ids))]
    for node_id in cc.node_ids:
        raw = node_id.encode()
        parts.append(_LEN.pack(len(raw)))
        parts.append(raw)
    parts.append(cc.context)
    return b"".join(parts)


def decode_conf_change(data: bytes) -> ConfChange:
    """Raises ValueError on bytes that are not a ConfChange."""
    try:
        kind, count = _HEAD.unpack_from(data, 0)
        pos = _HEAD.size
        ids: list[NodeId] = []
        for _ in range(count):
            (length,) = _LEN.unpack_from(data, pos)
            pos += _LEN.size
            if pos + length > len(data):
                raise ValueError("node id runs past the end")
            ids.append(data[pos : pos + length].decode())
            pos += length
        return ConfChange(type=ConfChangeType(kind), node_ids=tuple(ids), context=data[pos:])
    except (struct.error, UnicodeDecodeError) as exc:
        raise ValueError(f"malformed conf change: {exc}") from None


def apply_conf_change(cs: ConfState, cc: ConfChange) -> ConfState:
    """The configuration after ``cc``. Raises ConfChangeRejected when ``cc`` does not apply."""
    if cc.type is ConfChangeType.BOOTSTRAP:
        if cs.voters or cs.learners:
            raise ConfChangeRejected("bootstrap on a non-empty configuration")
        if not cc.node_ids:
            raise ConfChangeRejected("bootstrap without voters")
        return ConfState(voters=cc.node_ids)
    if len(cc.node_ids) != 1 or not cc.node_ids[0]:
        raise ConfChangeRejected("a change names exactly one node")
    node = cc.node_ids[0]
    voters, learners = set(cs.voters), set(cs.learners)
    if cc.type is ConfChangeType.ADD_LEARNER:
        if node in voters or node in learners:
            raise ConfChangeRejected(f"{node} is already a member")
        learners.add(node)
    elif cc.type is ConfChangeType.PROMOTE:
        if node not in learners:
            raise ConfChangeRejected(f"{node} is not a learner")
        learners.discard(node)
        voters.add(node)
    elif cc.type is ConfChangeType.REMOVE:
        if node not in voters and node not in learners:
            raise ConfChangeRejected(f"{node} is not a member")
        voters.discard(node)
        learners.discard(node)
        if not voters:
            raise ConfChangeRejected("cannot remove the last voter")
    return ConfState(voters=tuple(voters), learners=tuple(learners))


class ConfigHistory:
    """The configuration at every index of the log: a base (from the snapshot) plus one step
    per configuration-change entry after it."""

    __slots__ = ("_confs", "_indexes")

    def __init__(self, base_index: int, base: ConfState) -> None:
        self._indexes: list[int] = [base_index]
        self._confs: list[ConfState] = [base]

    @property
    def current(self) -> ConfState:
        return self._confs[-1]

    @property
    def last_change_index(self) -> int:
        """Index of the entry that produced the current configuration (or the base index)."""
        return self._indexes[-1]

    def at(self, index: int) -> ConfState:
        pos = bisect_right(self._indexes, index) - 1
        return self._confs[max(pos, 0)]

    def append(self, index: int, cs: ConfState) -> None:
        if index <= self._indexes[-1]:
            raise AssertionError("configuration history must grow by index")
        self._indexes.append(index)
        self._confs.append(cs)

    def truncate_from(self, index: int) -> bool:
        """Forget changes at ``index`` or later (their entries were overwritten)."""
        changed = False
        while len(self._indexes) > 1 and self._indexes[-1] >= index:
            self._indexes.pop()
            self._confs.pop()
            changed = True
        return changed

    def compact_to(self, index: int) -> None:
        """Fold changes at or below ``index`` into the base."""
        pos = bisect_right(self._indexes, index) - 1
        if pos > 0:
            del self._indexes[:pos]
            del self._confs[:pos]

    def reset(self, index: int, cs: ConfState) -> None:
        self._indexes = [index]
        self._confs = [cs]


def majority(voters: int) -> int:
    return voters // 2 + 1


def quorum_index(values: list[int]) -> int:
    """The largest value that a majority of ``values`` reach (0 for no values)."""
    if not values:
        return 0
    ordered = sorted(values, reverse=True)
    return ordered[len(ordered) // 2]
