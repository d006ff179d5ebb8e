"""Snapshots of the POP in-flight set, pure encode/decode (docs/pop.md, "Snapshots").

A master writes, from time to time, the whole in-flight set as it stands after the revive
log's record ``replay_from - 1`` (a revive-log queue offset), into queue 0 of the system topic
:data:`SNAPSHOT_TOPIC`; a new master takes the last complete snapshot and applies only the
revive-log records from ``replay_from`` on, instead of the whole log.

A snapshot is one msgpack document cut into parts of at most :data:`PART_BYTES`, each a record
of its own: ``>qHH`` (replay_from, part index, part count) then its slice of the document. The
document holds the handle key, the POP offsets per (group, topic, queue), every delivery in
flight (checkpoint id, queue offset, deadline, whether a FIFO group's) and, per queue of a FIFO
consumer group, its order state: the lowest unfinished offset, the offsets above it already
finished, and the latest delivery of each unfinished offset handed out (checkpoint id, deadline,
attempts); and the last acks the master remembers (so a repeated ack answers as done on the new
master too). Group and topic names are stored once, in a table the rest refers to by index.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Final

import msgpack

from protocol.pop import HANDLE_KEY_BYTES, ReviveRecordError

__all__ = [
    "PART_BYTES",
    "SNAPSHOT_TOPIC",
    "OrderlySnapshot",
    "PopSnapshot",
    "SnapshotPart",
    "decode_snapshot",
    "decode_snapshot_part",
    "encode_snapshot",
]

SNAPSHOT_TOPIC: Final = "rmq_sys_REVIVE_SNAPSHOT"
"""Snapshots of the in-flight set (queue 0): the last one is at the end of the queue, so a new
master finds it without reading the revive log."""
PART_BYTES: Final = 256 * 1024
_VERSION: Final = 1
_PART_HEAD: Final = struct.Struct(">qHH")

QueueKey = tuple[str, str, int]
"""(consumer group, topic, queue id)."""
SnapshotEntry = tuple[int, str, str, int, int, int, bool]
"""A delivery in flight: checkpoint id, group, topic, queue id, queue offset, deadline (ms),
whether it is a FIFO group's."""
SnapshotDelivery = tuple[int, int, int, int]
"""The latest delivery of an unfinished offset: queue offset, checkpoint id, deadline (ms),
attempts."""


@dataclass(frozen=True, slots=True)
class OrderlySnapshot:
    """One FIFO consumer group's order state on one queue."""

    queue: QueueKey
    low: int
    """Every offset below it is finished."""
    done: tuple[int, ...]
    """Offsets at or above ``low`` finished (acked, passed over, dead-lettered), ascending."""
    deliveries: tuple[SnapshotDelivery, ...]


@dataclass(frozen=True, slots=True)
class PopSnapshot:
    replay_from: int
    """The revive-log queue offset of the first record the snapshot does not hold."""
    key: bytes | None
    """The broker group's handle key (None: none written yet)."""
    pop_offsets: tuple[tuple[QueueKey, int], ...]
    entries: tuple[SnapshotEntry, ...]
    orderly: tuple[OrderlySnapshot, ...]
    recent_acks: tuple[tuple[int, int], ...] = ()
    """The last acks remembered (checkpoint id, queue offset), oldest first: a repeated ack
    answers as done on the new master too."""


@dataclass(frozen=True, slots=True)
class SnapshotPart:
    replay_from: int
    part: int
    parts: int
    data: bytes


def encode_snapshot(snap: PopSnapshot, part_bytes: int = PART_BYTES) -> list[bytes]:
    """The bodies of the snapshot's parts, in order."""
    names: dict[tuple[str, str], int] = {}

    def name(group: str, topic: str) -> int:
        return names.setdefault((group, topic), len(names))

    pops = [(name(g, t), q, offset) for (g, t, q), offset in snap.pop_offsets]
    entries = [
        (ck, name(g, t), q, offset, deadline, orderly)
        for ck, g, t, q, offset, deadline, orderly in snap.entries
    ]
    orderly = [
        (name(o.queue[0], o.queue[1]), o.queue[2], o.low, o.done, o.deliveries)
        for o in snap.orderly
    ]
    acks = [n for key in snap.recent_acks for n in key]
    doc = msgpack.packb(
        [_VERSION, snap.key, list(names), pops, entries, orderly, acks], use_bin_type=True
    )
    chunks = [doc[i : i + part_bytes] for i in range(0, len(doc), part_bytes)] or [b""]
    if len(chunks) > 0xFFFF:
        raise ValueError(f"a snapshot of {len(doc)} bytes needs more than 65,535 parts")
    return [
        _PART_HEAD.pack(snap.replay_from, i, len(chunks)) + chunk for i, chunk in enumerate(chunks)
    ]


def decode_snapshot_part(body: bytes) -> SnapshotPart:
    """Raises :class:`~protocol.pop.ReviveRecordError`."""
    if len(body) < _PART_HEAD.size:
        raise ReviveRecordError("snapshot part is truncated")
    replay_from, part, parts = _PART_HEAD.unpack_from(body)
    if replay_from < 0 or not 0 <= part < parts:
        raise ReviveRecordError(f"snapshot part {part} of {parts} from {replay_from}")
    return SnapshotPart(replay_from, part, parts, bytes(body[_PART_HEAD.size :]))


def decode_snapshot(parts: list[SnapshotPart]) -> PopSnapshot:
    """The snapshot of ``parts`` (all of them, in order); raises
    :class:`~protocol.pop.ReviveRecordError` when they do not make one whole snapshot."""
    if not parts or [p.part for p in parts] != list(range(parts[0].parts)):
        raise ReviveRecordError("snapshot parts are missing or out of order")
    replay_from = parts[0].replay_from
    if any(p.replay_from != replay_from or p.parts != len(parts) for p in parts):
        raise ReviveRecordError("snapshot parts belong to different snapshots")
    try:
        doc = msgpack.unpackb(b"".join(p.data for p in parts), raw=False, use_list=False)
        return _document(replay_from, doc)
    except ReviveRecordError:
        raise
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise ReviveRecordError(f"snapshot is malformed: {exc}") from None


def _int(value: Any) -> int:
    if type(value) is not int or value < 0:
        raise ReviveRecordError(f"snapshot holds {value!r} where a count or offset belongs")
    return value


def _document(replay_from: int, doc: Any) -> PopSnapshot:
    if not isinstance(doc, tuple) or len(doc) != 7 or doc[0] != _VERSION:
        raise ReviveRecordError("snapshot is not a version 1 snapshot")
    _, key, raw_names, pops, entries, orderly, acks = doc
    if len(acks) % 2:
        raise ReviveRecordError("snapshot holds half an ack")
    if key is not None and (not isinstance(key, bytes) or len(key) != HANDLE_KEY_BYTES):
        raise ReviveRecordError("snapshot holds a handle key of the wrong size")
    names: list[tuple[str, str]] = []
    for pair in raw_names:
        group, topic = pair
        if not isinstance(group, str) or not isinstance(topic, str):
            raise ReviveRecordError("snapshot holds a name that is not text")
        names.append((group, topic))
    try:
        out_pops = tuple(((*names[_int(n)], _int(q)), _int(offset)) for n, q, offset in pops)
        out_entries = tuple(
            (_int(ck), *names[_int(n)], _int(q), _int(offset), _int(deadline), bool(orderly_flag))
            for ck, n, q, offset, deadline, orderly_flag in entries
        )
        out_orderly = tuple(
            OrderlySnapshot(
                (*names[_int(n)], _int(q)),
                _int(low),
                tuple(_int(o) for o in done),
                tuple((_int(o), _int(ck), _int(dl), _int(at)) for o, ck, dl, at in deliveries),
            )
            for n, q, low, done, deliveries in orderly
        )
    except IndexError:
        raise ReviveRecordError("snapshot refers to a name it does not hold") from None
    it = iter(acks)
    out_acks = tuple((_int(ck), _int(offset)) for ck, offset in zip(it, it, strict=True))
    return PopSnapshot(replay_from, key, out_pops, out_entries, out_orderly, out_acks)
