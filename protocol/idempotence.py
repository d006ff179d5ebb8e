"""Idempotent producers: the fields a send carries, the broker's check, and its snapshots
(docs/idempotence.md). Pure: no clock (times are arguments), no sockets.

A producer with an id from the controllers (and an epoch that rises each time the same id is
taken up again) numbers its requests per (topic, queue): each SEND_MESSAGE or
SEND_BATCH_MESSAGE to a queue carries the next ``sequence`` of that queue, with the id and the
epoch, in one binary header field, ``producerSeq`` (:data:`SEQ_FIELD`: ``>QIQ``, 20 bytes:
id, epoch, sequence; :class:`ProducerSeq`); a retry of the request carries the same. The three
integer fields ``producerId``, ``producerEpoch`` and ``sequence`` that SDKs before it sent are
read too (:meth:`ProducerSeq.parse`). The broker stores them in every record of the request as
the property :data:`PROP_PRODUCER_SEQ`, ``"<id>.<epoch>.<sequence>.<index>.<count>"`` (the
record's place in its request and the request's size), so a slave holds them and a new master
rebuilds the state below from the records themselves.

The check (:class:`ProducerStates`), per (producer id, topic, queue): the last :data:`WINDOW`
requests stored, each with its sequence and where it went (:class:`StoredBatch`), and the
*floor*, the highest sequence that fell out of the window. A request whose sequence is in the
window is a retry of a stored one: answered with the stored offsets, nothing stored again. A
sequence above the floor that is not in the window was never stored (every stored one above the
floor is in the window): stored now, even past a gap (an earlier request still being retried,
or given up by its producer; counted). A sequence at or below the floor that is not in the
window cannot be told apart (:attr:`Verdict.TOO_OLD`, refused): a producer never sends one if
the requests it has in flight on a queue span at most :data:`WINDOW` sequences (a new request
waits while the oldest one still unanswered is :data:`WINDOW` behind it; a bound on their
count alone is not enough, since requests answered after the oldest stay in the window). An epoch below the producer's
highest is fenced (:attr:`Verdict.FENCED`): an older incarnation of a restarted producer. A
higher epoch starts the producer's windows afresh.

Memory is bounded: a producer idle for ``expiry_ms`` is forgotten (:meth:`ProducerStates.expire`),
and beyond ``max_windows`` (producer, queue) windows the least recently used producers are.
A forgotten producer's next request is stored as new.

Snapshots (:func:`encode_snapshot`): the whole state as it stands after CommitLog offset
``covered``, one msgpack document cut into parts of at most :data:`PART_BYTES`, each a record
of queue 0 of :data:`SNAPSHOT_TOPIC`: ``>qHH`` (covered, part index, part count) then its slice.
"""

from __future__ import annotations

import struct
from array import array
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, Final, final

import msgpack

from protocol.fields import FieldError
from protocol.message import (
    BLANK_MAGIC,
    MESSAGE_MAGIC,
    PROP_PRODUCER_SEQ,
    Message,
    MessageRecord,
    RecordError,
    decode_record,
)

__all__ = [
    "MAX_EPOCH",
    "MAX_PRODUCER_ID",
    "MAX_SEQUENCE",
    "PART_BYTES",
    "PROP_PRODUCER_SEQ",
    "SEQ_FIELD",
    "SEQ_FIELD_BYTES",
    "SEQ_FIELD_LAYOUT",
    "SEQ_PROPERTY_HEAD",
    "SNAPSHOT_TOPIC",
    "WINDOW",
    "Decision",
    "ProducerSeq",
    "ProducerStates",
    "QueueWindow",
    "RecordSeq",
    "SnapshotPart",
    "StoredBatch",
    "UniqKeyWindow",
    "Verdict",
    "decode_snapshot",
    "decode_snapshot_part",
    "encode_snapshot",
    "pack_producer_seq",
    "parse_record_seq",
    "record_seq_value",
    "seq_head",
    "seq_property",
    "sequenced_records",
    "stamp",
    "unpack_seq_field",
]

# PROP_PRODUCER_SEQ (``__PSEQ``, defined in protocol/message.py so record copies can drop it):
# written by the broker only; a send that carries it among its properties has it replaced (or
# removed, when the send has no fields).

WINDOW: Final = 8
"""Requests remembered per (producer, topic, queue); a producer's requests in flight on a queue
span at most this many sequences (Kafka keeps 5 batches; 8 lets 64 single sends be in flight
over 8 queues)."""

MAX_PRODUCER_ID: Final = 2**63 - 1
MAX_EPOCH: Final = 2**31 - 1
MAX_SEQUENCE: Final = 2**63 - 1

SNAPSHOT_TOPIC: Final = "rmq_sys_PRODUCER_SNAPSHOT"
PART_BYTES: Final = 1024 * 1024
_PART_HEAD: Final = struct.Struct(">qHH")
_SNAPSHOT_VERSION: Final = 1
_NEEDLE: Final = PROP_PRODUCER_SEQ.encode() + b"\x01"
_PREFIX: Final = struct.Struct(">II")

SEQ_FIELD: Final = "producerSeq"
"""The header field of an idempotent producer's request: its producer id, epoch and sequence
packed as :data:`SEQ_FIELD_LAYOUT`."""
SEQ_FIELD_LAYOUT: Final = struct.Struct(">QIQ")
SEQ_FIELD_BYTES: Final = SEQ_FIELD_LAYOUT.size


# -- what a send carries ------------------------------------------------------------------------


@final
@dataclass(frozen=True, slots=True)
class ProducerSeq:
    """A request's producer id, epoch and sequence (per topic and queue). Built from a peer's
    values with :meth:`checked` (or :meth:`parse`), which checks their ranges. Compiled, a
    native class (one is made per sequenced request: a tuple subclass's ``tuple.__new__`` cost
    about five times a native constructor, docs/idempotence.md); its ``__init__`` is written
    out for that (docs/compiled.md)."""

    producer_id: int
    epoch: int
    sequence: int

    def __init__(self, producer_id: int, epoch: int, sequence: int) -> None:
        # Frozen: object.__setattr__ passes the dataclass's refusal in pure Python, and mypyc
        # compiles it to a native store.
        object.__setattr__(self, "producer_id", producer_id)
        object.__setattr__(self, "epoch", epoch)
        object.__setattr__(self, "sequence", sequence)

    @classmethod
    def checked(cls, producer_id: object, epoch: object, sequence: object) -> ProducerSeq:
        """The three values, each an int in its range; a :class:`FieldError` otherwise."""
        if (
            type(producer_id) is not int
            or type(epoch) is not int
            or type(sequence) is not int
            or not 0 <= producer_id <= MAX_PRODUCER_ID
            or not 0 <= epoch <= MAX_EPOCH
            or not 0 <= sequence <= MAX_SEQUENCE
        ):
            for name, value, top in (
                ("producerId", producer_id, MAX_PRODUCER_ID),
                ("producerEpoch", epoch, MAX_EPOCH),
                ("sequence", sequence, MAX_SEQUENCE),
            ):
                if type(value) is not int or not 0 <= value <= top:
                    raise FieldError(f"header field {name!r} must be an integer in 0..{top}")
        return ProducerSeq(producer_id, epoch, sequence)  # type: ignore[arg-type]  # checked

    def add_to(self, header: dict[str, Any]) -> None:
        """Write the request's :data:`SEQ_FIELD` into ``header``."""
        header[SEQ_FIELD] = SEQ_FIELD_LAYOUT.pack(self.producer_id, self.epoch, self.sequence)

    @classmethod
    def unpack(cls, value: object) -> ProducerSeq:
        """The value of a :data:`SEQ_FIELD`; a :class:`FieldError` when it is not one."""
        if type(value) is not bytes or len(value) != SEQ_FIELD_BYTES:
            raise FieldError(
                f"header field {SEQ_FIELD!r} must be {SEQ_FIELD_BYTES} bytes: producer id, "
                "epoch, sequence (>QIQ)"
            )
        pid, epoch, seq = SEQ_FIELD_LAYOUT.unpack(value)
        return cls.checked(pid, epoch, seq)

    @classmethod
    def parse(cls, header: Mapping[str, object]) -> ProducerSeq | None:
        """The request's :data:`SEQ_FIELD`, or the three integer fields of SDKs before it:
        None when it has none of them; a :class:`FieldError` when it has some of the three but
        not all, both forms, or a bad value."""
        packed = header.get(SEQ_FIELD)
        pid = header.get("producerId")
        epoch = header.get("producerEpoch")
        seq = header.get("sequence")
        if pid is None and epoch is None and seq is None:
            return None if packed is None else cls.unpack(packed)
        if packed is not None:
            raise FieldError(
                f"an idempotent send carries {SEQ_FIELD} or producerId, producerEpoch and "
                "sequence, not both"
            )
        if pid is None or epoch is None or seq is None:
            raise FieldError(
                "an idempotent send carries all of producerId, producerEpoch and sequence"
            )
        return cls.checked(pid, epoch, seq)


def unpack_seq_field(packed: bytes) -> ProducerSeq | None:
    """The :class:`ProducerSeq` of a :data:`SEQ_FIELD` value of :data:`SEQ_FIELD_BYTES` bytes;
    None when a field's top bit is set (out of its range: :meth:`ProducerSeq.unpack` says
    which). The send request's fast parse: read byte by byte, which compiled makes no tuple and
    calls no ``Struct`` method (the decoding alone about 70 -> 20 ns,
    docs/idempotence-cost.md)."""
    p = packed
    if p[0] >= 0x80 or p[8] >= 0x80 or p[12] >= 0x80:
        return None
    return ProducerSeq(
        (p[0] << 56) | (p[1] << 48) | (p[2] << 40) | (p[3] << 32)
        | (p[4] << 24) | (p[5] << 16) | (p[6] << 8) | p[7],
        (p[8] << 24) | (p[9] << 16) | (p[10] << 8) | p[11],
        (p[12] << 56) | (p[13] << 48) | (p[14] << 40) | (p[15] << 32)
        | (p[16] << 24) | (p[17] << 16) | (p[18] << 8) | p[19],
    )  # fmt: skip


def pack_producer_seq(producer_id: int, epoch: int, sequence: int) -> bytes:
    """The :data:`SEQ_FIELD` value of a request (what :meth:`ProducerSeq.add_to` writes), for
    a sender that holds the three apart (the SDK's router)."""
    return SEQ_FIELD_LAYOUT.pack(producer_id, epoch, sequence)


def record_seq_value(seq: ProducerSeq, index: int, count: int) -> str:
    """The :data:`PROP_PRODUCER_SEQ` value of record ``index`` of a request of ``count``."""
    return f"{seq.producer_id}.{seq.epoch}.{seq.sequence}.{index}.{count}"


SEQ_PROPERTY_HEAD: Final = PROP_PRODUCER_SEQ + "\x01"
"""What an encoded :data:`PROP_PRODUCER_SEQ` property starts with (its value and ``\x02``
follow): :func:`seq_property`."""


def seq_property(value: str) -> bytes:
    """The :data:`PROP_PRODUCER_SEQ` property of ``value`` encoded as a record holds it (the
    bytes ``encode_properties({PROP_PRODUCER_SEQ: value})`` gives): what
    :attr:`protocol.message.Message.seq_property` carries."""
    return f"{SEQ_PROPERTY_HEAD}{value}\x02".encode()


def seq_head(producer_id: int, epoch: int) -> bytes:
    """What every encoded :data:`PROP_PRODUCER_SEQ` property of a producer incarnation starts
    with: the property's name and ``"<id>.<epoch>."`` (:func:`seq_property`'s bytes up to the
    sequence), formatted and encoded once per window (:attr:`QueueWindow.head`)."""
    return f"{SEQ_PROPERTY_HEAD}{producer_id}.{epoch}.".encode()


def stamp(messages: list[Message], seq: ProducerSeq, head: bytes = b"") -> None:
    """Write the request's :data:`PROP_PRODUCER_SEQ` into each of its messages (before storing
    them): a message without properties of its own gets it encoded
    (:attr:`Message.seq_property`, no dict), one with properties in its dict. ``head``: the
    property's :func:`seq_head`, when the caller has it."""
    n = len(messages)
    if n == 1:  # a single send: one format, no loop
        m = messages[0]
        if m.properties:
            m.properties[PROP_PRODUCER_SEQ] = record_seq_value(seq, 0, 1)
        else:
            # Compiled, a bytes format of bytes and an int is one bytes built from the parts
            # (the int's digits written as bytes): no str formatted and then encoded.
            m.seq_property = b"%b%d.0.1\x02" % (
                head or seq_head(seq.producer_id, seq.epoch),
                seq.sequence,
            )
        return
    prefix = ""
    suffix = f".{n}"
    tails: list[bytes] | None = None
    raw = b""
    for i, m in enumerate(messages):
        if m.properties:
            if not prefix:
                prefix = f"{seq.producer_id}.{seq.epoch}.{seq.sequence}."
            m.properties[PROP_PRODUCER_SEQ] = f"{prefix}{i}{suffix}"
        else:
            if tails is None:  # the request's own part once, each record's tail cached
                tails = _tails(n)
                raw = b"%b%d." % (head or seq_head(seq.producer_id, seq.epoch), seq.sequence)
            m.seq_property = raw + tails[i]


_TAILS_MAX_COUNT: Final = 1024
"""Requests of up to this many records have their records' tails cached (:func:`_tails`)."""
_TAILS_SIZES: Final = 8
"""Request sizes whose tails are kept at once (all dropped when a ninth comes): at most 8 lists
of up to 1,024 short bytes objects, about 400 KiB."""
_tails_of: dict[int, list[bytes]] = {}


def _tails(n: int) -> list[bytes]:
    """What each record ``i`` of a request of ``n`` ends its encoded :data:`PROP_PRODUCER_SEQ`
    property with, ``f"{i}.{n}\\x02"`` encoded: the same for every request of ``n`` records (a
    batch's records then take one concatenation each instead of a format and an encoding)."""
    tails = _tails_of.get(n)
    if tails is None:
        tails = [f"{i}.{n}\x02".encode() for i in range(n)]
        if n <= _TAILS_MAX_COUNT:
            if len(_tails_of) >= _TAILS_SIZES:
                _tails_of.clear()
            _tails_of[n] = tails
    return tails


@dataclass(frozen=True, slots=True)
class RecordSeq:
    """What a stored record's :data:`PROP_PRODUCER_SEQ` says."""

    seq: ProducerSeq
    index: int
    count: int


def parse_record_seq(value: str) -> RecordSeq:
    """Read a :data:`PROP_PRODUCER_SEQ` value; :class:`RecordError` when malformed."""
    parts = value.split(".")
    if len(parts) != 5 or not all(p.isdigit() and p.isascii() for p in parts):
        raise RecordError(f"malformed {PROP_PRODUCER_SEQ} {value[:64]!r}")
    pid, epoch, sequence, index, count = (int(p) for p in parts)
    try:
        seq = ProducerSeq.checked(pid, epoch, sequence)
    except FieldError as exc:
        raise RecordError(f"{PROP_PRODUCER_SEQ}: {exc}") from None
    if not 0 <= index < count:
        raise RecordError(f"{PROP_PRODUCER_SEQ}: index {index} not below count {count}")
    return RecordSeq(seq, index, count)


def sequenced_records(buf: bytes | memoryview) -> Iterator[MessageRecord]:
    """The records of a run of CommitLog bytes (whole records and blank tails) that carry
    :data:`PROP_PRODUCER_SEQ`: one ``find`` per record skips the others without decoding them.
    Raises :class:`RecordError` for bytes that are not records."""
    data = buf if isinstance(buf, bytes) else bytes(buf)
    pos = 0
    end = len(data)
    find = data.find
    while pos < end:
        if end - pos < 8:
            raise RecordError(f"trailing {end - pos} bytes at {pos}")
        size, magic = _PREFIX.unpack_from(data, pos)
        if magic != MESSAGE_MAGIC and magic != BLANK_MAGIC:
            raise RecordError(f"bad magic {magic:#x} at {pos}")
        if size < 8 or pos + size > end:
            raise RecordError(f"bad record size {size} at {pos}")
        if magic == MESSAGE_MAGIC and find(_NEEDLE, pos, pos + size) >= 0:
            yield decode_record(data, pos)
        pos += size


# -- the broker's check -------------------------------------------------------------------------


class StoredBatch:
    """A stored request: its sequence and where its records went, as its answer gives them.
    :attr:`physical_offsets` is in request order; -1 where a rebuilt batch lacks a record (the
    log holds a prefix of it: a failover cut it). A request of one record keeps its offset in
    :attr:`first_physical` and no list (:attr:`offsets` None), so the usual single send's window
    update keeps no list of the store's answer: releasing it when its batch was overwritten 64
    sends later (the list, its array and its int, out of the caches by then) was part of every
    update, and a window of single sends takes about 40% less memory. A request of several
    keeps its offsets in an array of 8-byte integers, not a list of ints (about 40 bytes an
    offset): a window of batches of 64 takes a quarter of the memory
    (docs/idempotence-cost.md). A window's oldest batch is reused for the next request once
    the window is full (:meth:`ProducerStates.stored_next`): copy what must outlive the call
    that gave it (:class:`Decision` answers are read at once). Compiled, a native class with
    a native constructor (docs/compiled.md)."""

    __slots__ = (
        "end_offset",
        "first_physical",
        "first_queue_offset",
        "offsets",
        "queue_id",
        "sequence",
        "store_timestamp",
    )

    sequence: int
    queue_id: int
    first_queue_offset: int
    first_physical: int
    """The record's CommitLog offset when the request had one record (-1: the log lacks it)."""
    offsets: array[int] | None
    """Each record's CommitLog offset when the request had several; None: one record."""
    end_offset: int
    store_timestamp: int

    def __init__(
        self,
        sequence: int,
        queue_id: int,
        first_queue_offset: int,
        physical_offsets: list[int],
        end_offset: int,
        store_timestamp: int,
    ) -> None:
        self.sequence = sequence
        self.queue_id = queue_id
        self.first_queue_offset = first_queue_offset
        self.first_physical = -1
        self.offsets = None
        self.take_offsets(physical_offsets)
        self.end_offset = end_offset
        self.store_timestamp = store_timestamp

    def take_offsets(self, physical_offsets: list[int]) -> None:
        """Keep ``physical_offsets`` (a store's answer's, not kept itself): one record's as
        :attr:`first_physical`, several in :attr:`offsets`."""
        if len(physical_offsets) == 1:  # the int read out: the answer's list not kept
            self.first_physical = physical_offsets[0]
            self.offsets = None
        else:
            self.offsets = array("q", physical_offsets)

    @property
    def physical_offsets(self) -> list[int]:
        """Each record's CommitLog offset, in request order, as a new list (change an offset
        with :meth:`set_physical`)."""
        offsets = self.offsets
        return [self.first_physical] if offsets is None else offsets.tolist()

    @property
    def count(self) -> int:
        """The request's records."""
        offsets = self.offsets
        return 1 if offsets is None else len(offsets)

    def set_physical(self, index: int, offset: int) -> None:
        """Record ``index`` is at CommitLog ``offset``."""
        offsets = self.offsets
        if offsets is None:
            if index != 0:
                raise IndexError(f"record {index} of a request of one")
            self.first_physical = offset
        else:
            offsets[index] = offset

    @property
    def missing(self) -> list[int]:
        """Indexes of the request's records the log does not hold."""
        return [i for i, off in enumerate(self.physical_offsets) if off < 0]


class Verdict(Enum):
    NEW = "new"
    """Never stored: store it."""
    DUPLICATE = "duplicate"
    """A retry of a stored request: answer its offsets, store nothing."""
    PARTIAL = "partial"
    """A retry of a request the log holds only part of: store the missing records."""
    FENCED = "fenced"
    """The producer's epoch is older than one already seen: refused for good."""
    TOO_OLD = "too_old"
    """Below the window: cannot tell whether it was stored; refused for good."""


@dataclass(frozen=True, slots=True)
class Decision:
    verdict: Verdict
    batch: StoredBatch | None = None
    """The stored request (DUPLICATE, PARTIAL)."""
    gap: bool = False
    """NEW past a gap: sequences between the highest stored and this one are not stored."""
    reason: str = ""


_NEW: Final = Decision(Verdict.NEW)
_NEW_GAP: Final = Decision(Verdict.NEW, gap=True)

QueueKey = tuple[str, int]


class QueueWindow:
    """The last requests stored for one (producer, topic, queue): :attr:`batches`, ascending
    by sequence. Once full, the usual send's update (:meth:`ProducerStates.stored_next`) turns
    it as a ring: the oldest batch is overwritten in place and :attr:`start` moves on, no list
    shifted; :attr:`batches` turns it back to ascending order when something else reads it."""

    __slots__ = ("floor", "head", "next_sequence", "owner", "ring", "start")

    def __init__(self, floor: int = -1, head: bytes = b"", owner: _Producer | None = None) -> None:
        self.ring: list[StoredBatch] = []
        """The batches kept, the oldest at :attr:`start` and the rest after it in ascending
        order, wrapping around; changed only by :meth:`insert`, :meth:`restored` and
        :meth:`ProducerStates.stored_next`, which keep :attr:`next_sequence` with it. Read it
        through :attr:`batches` (ascending order) unless on the usual send's way."""
        self.start = 0
        """Where in :attr:`ring` the oldest batch is: 0 unless the ring is full and
        :meth:`ProducerStates.stored_next` overwrote its oldest batches (then the list is
        turned back by :attr:`batches`)."""
        self.next_sequence = -1
        """The sequence right after the newest batch kept (-1: none kept): the usual send's.
        :meth:`ProducerStates.next_window` and :meth:`ProducerStates.stored_next` compare it
        without reading the list or its last batch (docs/idempotence-cost.md)."""
        self.floor = floor
        """The highest sequence that fell out of the window (-1: none)."""
        self.head = head
        """:func:`seq_head` of the window's producer and epoch (b"": not known)."""
        self.owner = owner
        """The producer that keeps the window; None once it does not (the producer forgotten,
        or a newer epoch of it started its windows afresh): :meth:`ProducerStates.stored_next`
        then changes nothing."""

    @property
    def batches(self) -> list[StoredBatch]:
        """The batches kept, ascending by sequence: :attr:`ring` itself, turned back first
        when the usual send's update left it turned (:attr:`start` then 0). Anything but that
        update reads and changes the window through this list."""
        start = self.start
        if start:
            ring = self.ring
            self.ring = ring = ring[start:] + ring[:start]
            self.start = 0
            return ring
        return self.ring

    def find(self, sequence: int) -> StoredBatch | None:
        for b in reversed(self.batches):  # a retry is usually of a recent one
            if b.sequence == sequence:
                return b
            if b.sequence < sequence:
                return None
        return None

    def insert(self, batch: StoredBatch, size: int) -> None:
        batches = self.batches
        if not batches or batches[-1].sequence < batch.sequence:  # the usual: the next one
            batches.append(batch)
            self.next_sequence = batch.sequence + 1
            if len(batches) > size:
                dropped = batches.pop(0).sequence
                if dropped > self.floor:
                    self.floor = dropped
            return
        i = len(batches)
        while i > 0 and batches[i - 1].sequence > batch.sequence:
            i -= 1
        batches.insert(i, batch)
        while len(batches) > size:
            self.floor = max(self.floor, batches.pop(0).sequence)
        self.next_sequence = batches[-1].sequence + 1

    def restored(self, batches: list[StoredBatch]) -> None:
        """Take ``batches`` (a snapshot's, in any order) as the window's."""
        batches.sort(key=lambda b: b.sequence)
        self.ring = batches
        self.start = 0
        self.next_sequence = batches[-1].sequence + 1 if batches else -1


class _Producer:
    __slots__ = ("epoch", "last_ms", "windows")

    def __init__(self, epoch: int, last_ms: int) -> None:
        self.epoch = epoch
        self.last_ms = last_ms
        self.windows: dict[str, dict[int, QueueWindow]] = {}
        """Per topic, per queue: the usual send's look-up builds and hashes no (topic, queue)
        tuple (docs/idempotence-cost.md)."""

    def window(self, topic: str, queue_id: int) -> QueueWindow | None:
        queues = self.windows.get(topic)
        return None if queues is None else queues.get(queue_id)

    def add_window(self, topic: str, queue_id: int, w: QueueWindow) -> None:
        queues = self.windows.get(topic)
        if queues is None:
            queues = self.windows[topic] = {}
        queues[queue_id] = w

    def drop_windows(self) -> int:
        """Disown the producer's windows (forgotten, or a newer epoch): how many there were."""
        n = 0
        for queues in self.windows.values():
            for w in queues.values():
                w.owner = None
            n += len(queues)
        self.windows = {}
        return n


class ProducerStates:
    """The broker's idempotence state: per producer its epoch and, per (topic, queue), its
    window. Not thread-safe; time comes in as arguments (ms)."""

    def __init__(self, *, expiry_ms: int, max_windows: int, window: int = WINDOW) -> None:
        if expiry_ms <= 0 or max_windows <= 0 or window <= 0:
            raise ValueError("expiry_ms, max_windows and window must be > 0")
        self.expiry_ms = expiry_ms
        self.max_windows = max_windows
        self.window = window
        self._producers: OrderedDict[int, _Producer] = OrderedDict()
        """By last use, least recent first."""
        self._windows = 0
        self.expired = 0
        """Producers forgotten so far (idle, or over ``max_windows``)."""
        self._checked: tuple[ProducerSeq, QueueKey, _Producer, QueueWindow] | None = None
        """The last :meth:`check`'s request, producer and window, when it found both: the
        :meth:`stored` that follows it (the same send) skips their look-up."""
        self._newest_id = -1
        self._newest: _Producer | None = None
        """The producer last in :attr:`_producers` (the most recently used) and its id, when
        known (-1: not known): :meth:`stored_next` of its next request neither looks it up nor
        moves it."""

    # -- reading -------------------------------------------------------------------------------
    @property
    def producers(self) -> int:
        return len(self._producers)

    @property
    def windows(self) -> int:
        return self._windows

    def epoch_of(self, producer_id: int) -> int | None:
        p = self._producers.get(producer_id)
        return None if p is None else p.epoch

    def check(self, topic: str, queue_id: int, seq: ProducerSeq) -> Decision:
        """What to do with a request of ``seq`` to ``topic``/``queue_id``. Changes nothing."""
        pid = seq.producer_id
        epoch = seq.epoch
        sequence = seq.sequence
        p = self._producers.get(pid)
        if p is None:
            return _NEW
        if epoch < p.epoch:
            return Decision(
                Verdict.FENCED,
                reason=(
                    f"producer {seq.producer_id} epoch {seq.epoch} is fenced: epoch {p.epoch} "
                    "of the same producer id sent since (a newer incarnation took it up)"
                ),
            )
        if epoch > p.epoch:
            return _NEW
        w = p.window(topic, queue_id)
        if w is None:
            return _NEW
        self._checked = (seq, (topic, queue_id), p, w)
        batches = w.batches
        if batches and batches[-1].sequence < sequence:  # the usual: the next request
            return _NEW_GAP if sequence > batches[-1].sequence + 1 else _NEW
        found = w.find(sequence)
        if found is not None:
            verdict = Verdict.PARTIAL if found.missing else Verdict.DUPLICATE
            return Decision(verdict, found)
        if sequence <= w.floor:
            return Decision(
                Verdict.TOO_OLD,
                reason=(
                    f"sequence {seq.sequence} of producer {seq.producer_id} on {topic}/{queue_id} "
                    f"is older than the last {self.window} requests this broker remembers: it "
                    "cannot tell whether it was stored"
                ),
            )
        top = batches[-1].sequence if batches else w.floor
        return _NEW_GAP if sequence > top + 1 else _NEW

    def next_window(self, topic: str, queue_id: int, seq: ProducerSeq) -> QueueWindow | None:
        """The window of ``seq``'s producer and ``topic``/``queue_id`` when ``seq`` is the
        request right after the newest one stored there at the producer's epoch (the usual
        send: :meth:`check` would answer NEW without a gap); then :meth:`stored_next` records
        it once stored. None: ask :meth:`check`. Changes nothing."""
        pid = seq.producer_id
        p = self._newest  # the usual send's producer is the one that sent last
        if pid != self._newest_id or p is None:
            p = self._producers.get(pid)
            if p is None:
                return None
        if p.epoch != seq.epoch:
            return None
        queues = p.windows.get(topic)
        if queues is None:
            return None
        w = queues.get(queue_id)
        if w is None or w.next_sequence != seq.sequence:
            return None
        return w

    # -- changing ------------------------------------------------------------------------------
    def stored_next(
        self,
        window: QueueWindow,
        producer_id: int,
        sequence: int,
        queue_id: int,
        first_queue_offset: int,
        physical_offsets: list[int],
        end_offset: int,
        store_timestamp: int,
    ) -> bool:
        """A request of ``sequence`` that :meth:`next_window` gave ``window`` for was stored
        where the arguments say (a :class:`StoredBatch`'s fields; its ``store_timestamp`` is
        the producer's last use, as a replayed record's is): kept in the window, whose
        oldest batch, when the window is full, is reused for it (no object built per send).
        False, changing nothing, when the state moved on since :meth:`next_window`: the
        producer forgotten, a newer epoch of it, or ``sequence`` (or a later one) in the
        window already."""
        p = window.owner
        if p is None or window.next_sequence > sequence:
            return False
        if p is not self._newest:
            producers = self._producers
            if producers.get(producer_id) is not p:
                return False  # (a window of another producer's)
            producers.move_to_end(producer_id)
            self._newest_id = producer_id
            self._newest = p
        if store_timestamp > p.last_ms:
            p.last_ms = store_timestamp
        ring = window.ring
        window.next_sequence = sequence + 1
        n = len(ring)
        if n >= self.window:  # full: its oldest batch, at start, becomes the newest
            i = window.start
            b = ring[i]
            i += 1
            window.start = i if i < n else 0
            if b.sequence > window.floor:
                window.floor = b.sequence
            b.sequence = sequence
            b.queue_id = queue_id
            b.first_queue_offset = first_queue_offset
            b.take_offsets(physical_offsets)
            b.end_offset = end_offset
            b.store_timestamp = store_timestamp
        else:
            b = StoredBatch(
                sequence,
                queue_id,
                first_queue_offset,
                physical_offsets,
                end_offset,
                store_timestamp,
            )
            ring.append(b)  # (not full: the ring is not turned, start is 0)
        return True

    def stored(
        self, topic: str, queue_id: int, seq: ProducerSeq, batch: StoredBatch, now_ms: int
    ) -> None:
        """A request checked NEW was stored as ``batch`` (PARTIAL: ``batch`` is the same
        object, completed by the caller: only the use is noted)."""
        checked = self._checked
        self._checked = None
        if (
            checked is not None
            and checked[0] is seq
            and checked[1] == (topic, queue_id)
            and self._producers.get(seq.producer_id) is checked[2]
        ):
            # the producer and window check() found for this request, still the ones kept
            p = checked[2]
            w = checked[3]
            if now_ms > p.last_ms:
                p.last_ms = now_ms
            self._producers.move_to_end(seq.producer_id)
            self._newest_id = seq.producer_id
            self._newest = p
        else:
            found = self._window(topic, queue_id, seq, now_ms)
            if found is None:
                return
            w = found
        batches = w.batches
        if (batches and batches[-1].sequence >= batch.sequence) and w.find(
            batch.sequence
        ) is not None:
            return  # a PARTIAL request's batch, in the window already
        w.insert(batch, self.window)
        if self._windows > self.max_windows:
            self._trim()

    def replayed(
        self,
        topic: str,
        queue_id: int,
        rseq: RecordSeq,
        *,
        physical_offset: int,
        size: int,
        queue_offset: int,
        store_timestamp: int,
    ) -> None:
        """A record of a stored request, read back from the log (``queue_offset`` -1: it
        has none in the request's queue, a scheduled message). Records of one request may come
        in any order; a record of an epoch older than its producer's is ignored."""
        seq = rseq.seq
        w = self._window(topic, queue_id, seq, store_timestamp)
        if w is None:
            return
        b = w.find(seq.sequence)
        if b is None:
            if seq.sequence <= w.floor:
                return  # fell out of the window already
            b = StoredBatch(seq.sequence, queue_id, -1, [-1] * rseq.count, 0, store_timestamp)
            w.insert(b, self.window)
            self._trim()
        if rseq.count != b.count:
            return  # a record that contradicts its request's others: keep the first word
        b.set_physical(rseq.index, physical_offset)
        b.end_offset = max(b.end_offset, physical_offset + size)
        if queue_offset >= 0 and (b.first_queue_offset < 0 or queue_offset < b.first_queue_offset):
            b.first_queue_offset = queue_offset

    def _window(
        self, topic: str, queue_id: int, seq: ProducerSeq, now_ms: int
    ) -> QueueWindow | None:
        producers = self._producers
        p = producers.get(seq.producer_id)
        if p is None:
            p = producers[seq.producer_id] = _Producer(seq.epoch, now_ms)
        elif seq.epoch < p.epoch:
            return None
        else:
            if seq.epoch > p.epoch:
                self._windows -= p.drop_windows()
                p.epoch = seq.epoch
            if now_ms > p.last_ms:
                p.last_ms = now_ms
            producers.move_to_end(seq.producer_id)
        self._newest_id = seq.producer_id
        self._newest = p
        w = p.window(topic, queue_id)
        if w is None:
            w = QueueWindow(-1, seq_head(seq.producer_id, p.epoch), p)
            p.add_window(topic, queue_id, w)
            self._windows += 1
        return w

    def _trim(self) -> None:
        producers = self._producers
        while self._windows > self.max_windows and len(producers) > 1:
            pid, p = producers.popitem(last=False)
            if pid == self._newest_id:
                self._newest_id = -1
                self._newest = None
            self._windows -= p.drop_windows()
            self.expired += 1

    def expire(self, now_ms: int) -> int:
        """Forget producers unused for ``expiry_ms`` by ``now_ms``; returns how many."""
        producers = self._producers
        limit = now_ms - self.expiry_ms
        n = 0
        while producers:
            pid, p = next(iter(producers.items()))
            if p.last_ms > limit:
                break
            del producers[pid]
            if pid == self._newest_id:
                self._newest_id = -1
                self._newest = None
            self._windows -= p.drop_windows()
            n += 1
        self.expired += n
        return n

    # -- snapshots -----------------------------------------------------------------------------
    def to_document(self) -> list[Any]:
        """The state as plain lists (for :func:`encode_snapshot`), least recently used first."""
        out: list[Any] = []
        for pid, p in self._producers.items():
            windows = [
                [
                    topic,
                    qid,
                    w.floor,
                    [
                        [
                            b.sequence,
                            b.queue_id,
                            b.first_queue_offset,
                            b.physical_offsets,
                            b.end_offset,
                            b.store_timestamp,
                        ]
                        for b in w.batches
                    ],
                ]
                for topic, queues in p.windows.items()
                for qid, w in queues.items()
            ]
            out.append([pid, p.epoch, p.last_ms, windows])
        return out

    @classmethod
    def from_document(
        cls, doc: object, *, expiry_ms: int, max_windows: int, window: int = WINDOW
    ) -> ProducerStates:
        """The state :meth:`to_document` wrote; :class:`ValueError` for anything else."""
        states = cls(expiry_ms=expiry_ms, max_windows=max_windows, window=window)
        if not isinstance(doc, list | tuple):
            raise ValueError("producer states: not a list")
        try:
            for producer in doc:
                pid, epoch, last_ms, windows = _entry(producer, 4, "producer")
                ProducerSeq.checked(pid, epoch, 0)
                _int(last_ms)
                p = _Producer(epoch, last_ms)
                for window_entry in _entry(windows, -1, "windows"):
                    topic, qid, floor, batches = _entry(window_entry, 4, "window")
                    if not isinstance(topic, str):
                        raise ValueError("topic is not a string")
                    w = QueueWindow(_int(floor), seq_head(pid, epoch), p)
                    kept: list[StoredBatch] = []
                    for batch_entry in _entry(batches, -1, "batches"):
                        seq, bqid, fqo, offs, end, ts = _entry(batch_entry, 6, "batch")
                        kept.append(
                            StoredBatch(
                                _int(seq),
                                _int(bqid),
                                _int(fqo),
                                [_int(o) for o in _entry(offs, -1, "offsets")],
                                _int(end),
                                _int(ts),
                            )
                        )
                    w.restored(kept)
                    p.add_window(topic, _int(qid), w)
                    states._windows += 1
                states._producers[pid] = p
        except (TypeError, FieldError) as exc:
            raise ValueError(f"producer states: {exc}") from None
        return states


def _entry(value: object, size: int, what: str) -> list[Any] | tuple[Any, ...]:
    """``value`` as the list a document holds (of ``size`` items; -1: any); a
    :class:`ValueError` naming ``what`` otherwise (checked here, not left to unpacking, whose
    messages the compiled build words otherwise)."""
    if not isinstance(value, list | tuple):
        raise ValueError(f"producer states: {what} is not a list")
    if size >= 0 and len(value) != size:
        raise ValueError(f"producer states: {what} has {len(value)} items, not {size}")
    return value


def _int(value: object) -> int:
    if type(value) is not int:
        raise ValueError(f"{value!r} is not an integer")
    return value


# -- snapshot records ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SnapshotPart:
    covered: int
    """The CommitLog offset the state stands after."""
    index: int
    count: int
    data: bytes


def encode_snapshot(covered: int, document: list[Any]) -> list[bytes]:
    """The record bodies of a snapshot of :meth:`ProducerStates.to_document`."""
    doc: bytes = msgpack.packb([_SNAPSHOT_VERSION, document], use_bin_type=True)
    chunks = [doc[i : i + PART_BYTES] for i in range(0, len(doc), PART_BYTES)] or [b""]
    if len(chunks) > 0xFFFF:
        raise ValueError("producer state snapshot too large")
    n = len(chunks)
    return [_PART_HEAD.pack(covered, i, n) + c for i, c in enumerate(chunks)]


def decode_snapshot_part(body: bytes) -> SnapshotPart:
    if len(body) < _PART_HEAD.size:
        raise RecordError("producer snapshot part too short")
    covered, index, count = _PART_HEAD.unpack_from(body)
    if covered < 0 or not 0 <= index < count:
        raise RecordError("producer snapshot part header out of range")
    return SnapshotPart(covered, index, count, body[_PART_HEAD.size :])


def decode_snapshot(parts: list[SnapshotPart]) -> tuple[int, object]:
    """(covered, document) of a snapshot's parts, in order; :class:`RecordError` when they are
    not one whole snapshot."""
    if not parts or len(parts) != parts[0].count:
        raise RecordError("producer snapshot incomplete")
    covered = parts[0].covered
    for i, part in enumerate(parts):
        if part.index != i or part.covered != covered or part.count != len(parts):
            raise RecordError("producer snapshot parts do not belong together")
    try:
        doc = msgpack.unpackb(b"".join(p.data for p in parts), raw=False)
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise RecordError(f"producer snapshot unreadable: {exc}") from None
    if not isinstance(doc, list) or len(doc) != 2 or doc[0] != _SNAPSHOT_VERSION:
        raise RecordError("producer snapshot of an unknown version")
    return covered, doc[1]


# -- the UNIQ_KEY duplicate window (clients that cannot send the fields) -----------------------


class UniqKeyWindow:
    """Per topic, the requests stored in the last ``window_ms`` by their messages' unique keys
    (``UNIQ_KEY``, which the official gRPC clients and the classic clients keep across their
    retries), as NATS JetStream's ``duplicate_window``: a request whose keys were stored within
    the window is answered with the stored offsets. At most ``max_entries`` (the oldest go
    first); an entry costs about 200 bytes plus its keys. Time comes in as arguments (ms)."""

    def __init__(self, *, window_ms: int, max_entries: int) -> None:
        if window_ms <= 0 or max_entries <= 0:
            raise ValueError("window_ms and max_entries must be > 0")
        self.window_ms = window_ms
        self.max_entries = max_entries
        self._entries: OrderedDict[tuple[str, str], tuple[int, StoredBatch]] = OrderedDict()
        """(topic, keys) -> (stored at, batch), oldest first."""

    def __len__(self) -> int:
        return len(self._entries)

    @staticmethod
    def key_of(uniq_keys: list[str]) -> str | None:
        """The window's key of a request's messages' unique keys; None when one has none."""
        if not uniq_keys or not all(uniq_keys):
            return None
        return uniq_keys[0] if len(uniq_keys) == 1 else "\x00".join(uniq_keys)

    def get(self, topic: str, key: str, now_ms: int) -> StoredBatch | None:
        self.expire(now_ms)
        found = self._entries.get((topic, key))
        return None if found is None else found[1]

    def put(self, topic: str, key: str, batch: StoredBatch, now_ms: int) -> None:
        entries = self._entries
        entries[(topic, key)] = (now_ms, batch)
        entries.move_to_end((topic, key))
        while len(entries) > self.max_entries:
            entries.popitem(last=False)
        self.expire(now_ms)

    def expire(self, now_ms: int) -> None:
        entries = self._entries
        limit = now_ms - self.window_ms
        while entries:
            stored_at = next(iter(entries.values()))[0]
            if stored_at > limit:
                break
            entries.popitem(last=False)
