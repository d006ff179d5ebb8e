"""POP consumption: receipt handles and the revive log's records, pure encode/decode.

No clock, no I/O: times are epoch milliseconds passed in (docs/pop.md).

**Receipt handle.** Each popped message comes with one. It is opaque to clients (URL-safe
base64 text) and names the broker, group, topic, queue and queue offset of the message, its pop
time, its invisible time, and the checkpoint that holds it (the CommitLog offset of the
checkpoint record). A 16-byte keyed BLAKE2b MAC under the broker group's handle key closes it
(a MAC by construction, and about three times cheaper than HMAC-SHA256 here), so a
forged, altered or truncated handle fails :func:`decode_handle` with :class:`HandleError`
before the broker looks anything up.

**Revive log.** POP state lives in the CommitLog as messages of the system topic
:data:`REVIVE_TOPIC` (queue 0), so slaves hold it and a new master rebuilds it. Each body is one
record, a kind byte then big-endian fields:

* ``KEY``: the broker group's 32-byte handle key (written once, by the first master that pops).
* ``CHECKPOINT``: group, topic, queue, start offset, count, a bitmap of the offsets in
  ``[start, start + count)`` handed out, pop time and invisible time. Its id is the CommitLog
  offset of its record.
* ``ACK``: (checkpoint id, queue offset) pairs acked.
* ``CHANGE``: (checkpoint id, queue offset, new deadline) after a change of invisible time.
* ``REVIVED``: (checkpoint id, queue offset) pairs whose message was re-published to the
  group's retry topic or DLQ after its deadline (written after the copy).
* ``ORDERLY_CHECKPOINT``: a POP of a FIFO consumer group (docs/fifo.md): as a checkpoint, with
  a second bitmap of the offsets *passed* (filtered out or unreadable: done without a
  delivery); the offsets of the range in neither bitmap were left for later (their message
  group was blocked). Its start is the lowest offset of the queue the group had not finished.
* ``RESET``: group, topic, queue and offset: an operator moved the group's POP offset of the
  queue (rmqctl resetOffsetByTime, docs/operations.md); its next POP there reads from the
  offset, whatever the checkpoints before say. Deliveries in flight stay. (A broker that does
  not know the kind skips the record with an error logged.)
"""

from __future__ import annotations

import binascii
import functools
import hashlib
import hmac
import struct
from dataclasses import dataclass
from typing import Final, NamedTuple

__all__ = [
    "HANDLE_KEY_BYTES",
    "MAX_POP_BATCH",
    "REVIVE_TOPIC",
    "Ack",
    "Change",
    "Checkpoint",
    "HandleError",
    "HandleKey",
    "OrderlyCheckpoint",
    "ReceiptHandle",
    "Reset",
    "ReviveRecord",
    "ReviveRecordError",
    "Revived",
    "decode_handle",
    "decode_revive_record",
    "encode_handle",
    "encode_revive_record",
    "peek_handle",
]

REVIVE_TOPIC: Final = "rmq_sys_REVIVE_LOG"
"""The system topic of POP checkpoints, acks and revives (RocketMQ's name, without the
cluster suffix: one broker group's log)."""
HANDLE_KEY_BYTES: Final = 32
MAX_POP_BATCH: Final = 1024
"""Most offsets one checkpoint covers (and most messages one POP hands out)."""
MAX_NAME_BYTES: Final = 255

_HANDLE_VERSION: Final = 1
_MAC_BYTES: Final = 16
_HANDLE_FIXED: Final = struct.Struct(">BHqqIq")
"""Version, queue id, queue offset, pop ms, invisible ms, checkpoint id."""

KIND_KEY: Final = 1
KIND_CHECKPOINT: Final = 2
KIND_ACK: Final = 3
KIND_CHANGE: Final = 4
KIND_REVIVED: Final = 5
KIND_ORDERLY_CHECKPOINT: Final = 6
KIND_RESET: Final = 7

_CK_FIXED: Final = struct.Struct(">HqHqI")  # queue id, start, count, pop ms, invisible ms
_PAIR: Final = struct.Struct(">qq")
_CHANGE: Final = struct.Struct(">qqq")
_RESET: Final = struct.Struct(">Hq")  # queue id, offset
_COUNT: Final = struct.Struct(">I")


class HandleError(ValueError):
    """A receipt handle that is not one of this broker group's (forged, altered, truncated,
    another broker's): the message says which."""


class ReviveRecordError(ValueError):
    """A revive log body that does not decode."""


@dataclass(frozen=True, slots=True)
class HandleKey:
    """The key receipt handles are signed with; every replica of a broker group has it (it
    travels in the revive log)."""

    secret: bytes

    def mac(self, data: bytes) -> bytes:
        return hashlib.blake2b(data, key=self.secret, digest_size=_MAC_BYTES).digest()


class ReceiptHandle(NamedTuple):
    """What a receipt handle names (a tuple: one is built per message popped and acked)."""

    broker_name: str
    group: str
    topic: str
    queue_id: int
    queue_offset: int
    pop_ms: int
    invisible_ms: int
    checkpoint: int
    """The CommitLog offset of the checkpoint record that holds this delivery."""

    @property
    def deadline_ms(self) -> int:
        return self.pop_ms + self.invisible_ms

    @property
    def key(self) -> tuple[int, int]:
        """The in-flight entry it names: (checkpoint id, queue offset)."""
        return (self.checkpoint, self.queue_offset)


def _name(text: str, what: str) -> bytes:
    raw = text.encode()
    if not raw or len(raw) > MAX_NAME_BYTES:
        raise ValueError(f"{what} must be 1..{MAX_NAME_BYTES} bytes")
    return bytes([len(raw)]) + raw


@functools.lru_cache(maxsize=1024)
def _names(broker_name: str, group: str, topic: str) -> bytes:
    return _name(broker_name, "broker name") + _name(group, "group") + _name(topic, "topic")


_TO_URLSAFE: Final = bytes.maketrans(b"+/", b"-_")
_FROM_URLSAFE: Final = bytes.maketrans(b"-_", b"+/")


def encode_handle(handle: ReceiptHandle, key: HandleKey) -> str:
    body = _HANDLE_FIXED.pack(
        _HANDLE_VERSION,
        handle.queue_id,
        handle.queue_offset,
        handle.pop_ms,
        handle.invisible_ms,
        handle.checkpoint,
    ) + _names(handle.broker_name, handle.group, handle.topic)
    raw = binascii.b2a_base64(body + key.mac(body), newline=False)
    return raw.translate(_TO_URLSAFE).rstrip(b"=").decode()


@functools.lru_cache(maxsize=1024)
def _parse_names(raw: bytes) -> tuple[str, str, str]:
    """The broker, group and topic names closing a handle's body (they repeat from handle to
    handle). Raises :class:`HandleError`."""
    pos = 0
    names: list[str] = []
    for _ in range(3):
        if pos >= len(raw):
            raise HandleError("receipt handle is truncated")
        n = raw[pos]
        if pos + 1 + n > len(raw) or n == 0:
            raise HandleError("receipt handle is truncated")
        try:
            names.append(raw[pos + 1 : pos + 1 + n].decode())
        except UnicodeDecodeError:
            raise HandleError("receipt handle is corrupt") from None
        pos += 1 + n
    if pos != len(raw):
        raise HandleError("receipt handle has trailing bytes")
    return names[0], names[1], names[2]


def _parse_handle(text: str) -> tuple[bytes, bytes, ReceiptHandle]:
    """The signed bytes, the MAC and the fields of a receipt handle, unchecked."""
    if not text or len(text) > 2048:
        raise HandleError("receipt handle is empty or too long")
    try:
        padded = (text + "=" * (-len(text) % 4)).encode().translate(_FROM_URLSAFE)
        raw = binascii.a2b_base64(padded, strict_mode=True)
    except (binascii.Error, ValueError):  # UnicodeEncodeError is a ValueError
        raise HandleError("receipt handle is not base64url text") from None
    if len(raw) < _HANDLE_FIXED.size + 3 + _MAC_BYTES:
        raise HandleError("receipt handle is truncated")
    body, mac = raw[:-_MAC_BYTES], raw[-_MAC_BYTES:]
    version, queue_id, offset, pop_ms, invisible_ms, checkpoint = _HANDLE_FIXED.unpack_from(body)
    if version != _HANDLE_VERSION:
        raise HandleError(f"receipt handle version {version} is not known")
    name, group, topic = _parse_names(body[_HANDLE_FIXED.size :])
    handle = ReceiptHandle(name, group, topic, queue_id, offset, pop_ms, invisible_ms, checkpoint)
    return body, mac, handle


def _check_fields(handle: ReceiptHandle) -> ReceiptHandle:
    if handle.queue_offset < 0 or handle.pop_ms < 0 or handle.checkpoint < 0:
        raise HandleError("receipt handle is corrupt")
    return handle


def decode_handle(text: str, key: HandleKey | None, broker_name: str) -> ReceiptHandle:
    """Check and decode a receipt handle issued by ``broker_name`` under ``key`` (None: this
    broker never issued one). Raises :class:`HandleError` saying why it is refused."""
    body, mac, handle = _parse_handle(text)
    if handle.broker_name != broker_name:
        raise HandleError(
            f"receipt handle was issued by broker {handle.broker_name}, this is {broker_name}"
        )
    if key is None or not hmac.compare_digest(mac, key.mac(body)):
        raise HandleError("receipt handle fails its signature check (forged or corrupt)")
    return _check_fields(handle)


def peek_handle(text: str) -> ReceiptHandle:
    """The fields of a receipt handle WITHOUT checking its signature: only for a handle the
    broker has just accepted (the gRPC endpoint finds the message a handle names this way after
    a change of invisible time succeeded with it). Raises :class:`HandleError`."""
    return _check_fields(_parse_handle(text)[2])


# -- the revive log --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """Messages handed out by one POP from one queue."""

    group: str
    topic: str
    queue_id: int
    start: int
    count: int
    """The offsets ``[start, start + count)`` the POP read (some may be filtered out)."""
    popped: tuple[int, ...]
    """The queue offsets handed out, ascending, each within the range."""
    pop_ms: int
    invisible_ms: int

    @property
    def deadline_ms(self) -> int:
        return self.pop_ms + self.invisible_ms


@dataclass(frozen=True, slots=True)
class Ack:
    keys: tuple[tuple[int, int], ...]
    """(checkpoint id, queue offset) pairs."""


@dataclass(frozen=True, slots=True)
class Change:
    checkpoint: int
    queue_offset: int
    deadline_ms: int


@dataclass(frozen=True, slots=True)
class Revived:
    keys: tuple[tuple[int, int], ...]


@dataclass(frozen=True, slots=True)
class OrderlyCheckpoint:
    """Messages handed out by one POP of a FIFO consumer group from one queue."""

    group: str
    topic: str
    queue_id: int
    start: int
    """The lowest queue offset the group had not finished (every one below is acked, passed
    or dead-lettered)."""
    count: int
    """The range ``[start, start + count)`` the bitmaps cover."""
    popped: tuple[int, ...]
    """The queue offsets handed out, ascending (first deliveries and redeliveries alike)."""
    passed: tuple[int, ...]
    """The queue offsets passed over for good (filtered out, unreadable), ascending."""
    pop_ms: int
    invisible_ms: int

    @property
    def deadline_ms(self) -> int:
        return self.pop_ms + self.invisible_ms


@dataclass(frozen=True, slots=True)
class Reset:
    """An operator moved ``group``'s POP offset of a queue to ``offset``."""

    group: str
    topic: str
    queue_id: int
    offset: int


ReviveRecord = HandleKey | Checkpoint | OrderlyCheckpoint | Ack | Change | Revived | Reset


def _bitmap(start: int, count: int, offsets: tuple[int, ...]) -> bytearray:
    bitmap = bytearray((count + 7) // 8)
    for offset in offsets:
        i = offset - start
        if not 0 <= i < count:
            raise ValueError(f"offset {offset} is outside the checkpoint's range")
        bitmap[i // 8] |= 1 << (i % 8)
    return bitmap


def _pairs(kind: int, keys: tuple[tuple[int, int], ...]) -> bytes:
    return bytes([kind]) + _COUNT.pack(len(keys)) + b"".join(_PAIR.pack(c, o) for c, o in keys)


def encode_revive_record(record: ReviveRecord) -> bytes:
    if isinstance(record, HandleKey):
        if len(record.secret) != HANDLE_KEY_BYTES:
            raise ValueError(f"a handle key is {HANDLE_KEY_BYTES} bytes")
        return bytes([KIND_KEY]) + record.secret
    if isinstance(record, (Checkpoint, OrderlyCheckpoint)):
        if not 0 < record.count <= MAX_POP_BATCH:
            raise ValueError(f"a checkpoint covers 1..{MAX_POP_BATCH} offsets")
        kind, maps = KIND_CHECKPOINT, [record.popped]
        if isinstance(record, OrderlyCheckpoint):
            if set(record.popped) & set(record.passed):
                raise ValueError("an offset is both handed out and passed over")
            kind, maps = KIND_ORDERLY_CHECKPOINT, [record.popped, record.passed]
        return (
            bytes([kind])
            + _name(record.group, "group")
            + _name(record.topic, "topic")
            + _CK_FIXED.pack(
                record.queue_id, record.start, record.count, record.pop_ms, record.invisible_ms
            )
            + b"".join(bytes(_bitmap(record.start, record.count, m)) for m in maps)
        )
    if isinstance(record, Ack):
        return _pairs(KIND_ACK, record.keys)
    if isinstance(record, Change):
        return bytes([KIND_CHANGE]) + _CHANGE.pack(
            record.checkpoint, record.queue_offset, record.deadline_ms
        )
    if isinstance(record, Reset):
        if record.offset < 0:
            raise ValueError("a reset offset is >= 0")
        return (
            bytes([KIND_RESET])
            + _name(record.group, "group")
            + _name(record.topic, "topic")
            + _RESET.pack(record.queue_id, record.offset)
        )
    return _pairs(KIND_REVIVED, record.keys)


def _read_name(body: bytes, pos: int) -> tuple[str, int]:
    if pos >= len(body):
        raise ReviveRecordError("revive record is truncated")
    n = body[pos]
    if n == 0 or pos + 1 + n > len(body):
        raise ReviveRecordError("revive record is truncated")
    try:
        return body[pos + 1 : pos + 1 + n].decode(), pos + 1 + n
    except UnicodeDecodeError:
        raise ReviveRecordError("revive record holds a name that is not UTF-8") from None


def _read_pairs(body: bytes) -> tuple[tuple[int, int], ...]:
    if len(body) < 1 + _COUNT.size:
        raise ReviveRecordError("revive record is truncated")
    (n,) = _COUNT.unpack_from(body, 1)
    if len(body) != 1 + _COUNT.size + n * _PAIR.size:
        raise ReviveRecordError(f"revive record of {n} pairs has {len(body)} bytes")
    return tuple(_PAIR.unpack_from(body, 1 + _COUNT.size + i * _PAIR.size) for i in range(n))


def _offsets(bitmap: bytes, start: int, count: int) -> tuple[int, ...]:
    return tuple(start + i for i in range(count) if bitmap[i // 8] >> (i % 8) & 1)


def decode_revive_record(body: bytes) -> ReviveRecord:
    """Decode one revive log body; raises :class:`ReviveRecordError`."""
    if not body:
        raise ReviveRecordError("revive record is empty")
    kind = body[0]
    if kind == KIND_KEY:
        if len(body) != 1 + HANDLE_KEY_BYTES:
            raise ReviveRecordError("handle key record has the wrong size")
        return HandleKey(bytes(body[1:]))
    if kind in (KIND_CHECKPOINT, KIND_ORDERLY_CHECKPOINT):
        group, pos = _read_name(body, 1)
        topic, pos = _read_name(body, pos)
        if len(body) < pos + _CK_FIXED.size:
            raise ReviveRecordError("revive record is truncated")
        queue_id, start, count, pop_ms, invisible_ms = _CK_FIXED.unpack_from(body, pos)
        pos += _CK_FIXED.size
        if not 0 < count <= MAX_POP_BATCH or start < 0:
            raise ReviveRecordError(f"checkpoint covers {count} offsets from {start}")
        size = (count + 7) // 8
        maps = 1 if kind == KIND_CHECKPOINT else 2
        if len(body) - pos != size * maps:
            raise ReviveRecordError("checkpoint bitmap has the wrong size")
        popped = _offsets(body[pos : pos + size], start, count)
        if kind == KIND_CHECKPOINT:
            return Checkpoint(group, topic, queue_id, start, count, popped, pop_ms, invisible_ms)
        passed = _offsets(body[pos + size :], start, count)
        if set(popped) & set(passed):
            raise ReviveRecordError("orderly checkpoint hands out an offset it passes over")
        return OrderlyCheckpoint(
            group, topic, queue_id, start, count, popped, passed, pop_ms, invisible_ms
        )
    if kind == KIND_ACK:
        return Ack(_read_pairs(body))
    if kind == KIND_CHANGE:
        if len(body) != 1 + _CHANGE.size:
            raise ReviveRecordError("change record has the wrong size")
        checkpoint, offset, deadline = _CHANGE.unpack_from(body, 1)
        return Change(checkpoint, offset, deadline)
    if kind == KIND_REVIVED:
        return Revived(_read_pairs(body))
    if kind == KIND_RESET:
        group, pos = _read_name(body, 1)
        topic, pos = _read_name(body, pos)
        if len(body) - pos != _RESET.size:
            raise ReviveRecordError("reset record has the wrong size")
        queue_id, offset = _RESET.unpack_from(body, pos)
        if offset < 0:
            raise ReviveRecordError(f"reset to offset {offset}")
        return Reset(group, topic, queue_id, offset)
    raise ReviveRecordError(f"revive record kind {kind} is not known")
