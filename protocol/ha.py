"""The AutoSwitchHAService wire format (docs/protocol.md, "HA protocol"): pure codecs, no sockets.

A slave connects to the master's HA port. Each direction is one stream of messages; every
integer is big-endian and signed (Java's int32/int64). The first four bytes of every message are
its ``state``: 1 (HANDSHAKE) for the opening message of each direction, 2 (TRANSFER) for
everything after it.

Slave to master, first the handshake (70 bytes)::

    0      4   state               int32 = 1
    4      4   flags               int32: bit 0 isSyncFromLastFile, bit 1 isAsyncLearner
    8      8   slaveBrokerId       int64
    16     4   slaveAddressLength  int32, 0..50
    20     50  slaveAddress        UTF-8, zero padded to 50 bytes

then acks (12 bytes each)::

    0      4   state               int32 = 2
    4      8   maxOffset           int64, the slave's CommitLog max offset

Master to slave, first the handshake reply (20 bytes + bodySize)::

    0      4   state               int32 = 1
    4      4   bodySize            int32, 12 x the number of epoch entries
    8      8   masterMaxOffset     int64
    16     4   masterEpoch         int32
    20     ..  body                epoch entries, ascending:
                                       0  4  epoch        int32
                                       4  8  startOffset  int64

then transfers (36 bytes + bodySize)::

    0      4   state               int32 = 2
    4      4   bodySize            int32; 0 = heartbeat
    8      8   offset              int64, CommitLog offset of the first body byte
    16     4   epoch               int32, the epoch every body byte belongs to
    20     8   epochStartOffset    int64, where that epoch starts
    28     8   confirmOffset       int64, the master's confirm offset
    36     ..  body                raw CommitLog bytes

The message classes are frozen, slotted, keyword-only dataclasses that check their own fields
(a bad field raises :class:`ValueError` when built locally). :class:`SlaveStreamDecoder` (what the
master reads) and :class:`MasterStreamDecoder` (what the slave reads) are incremental: feed them
any split of the stream, they return whole messages. Each holds at most one message: a header of
at most 70 bytes plus one body of at most ``max_body_bytes``. Anything that is not a valid stream
raises :class:`~protocol.remoting.ProtocolError`, after which the connection must be closed (the
decoder stays failed).

Transfer bodies are handed out without copying where the stream allows: a body that arrives whole
inside one ``bytes`` chunk is returned as a read-only ``memoryview`` of that chunk; a body split
over chunks is assembled once into a buffer of its exact size. For sending,
:func:`encode_transfer_header` gives the 36 header bytes alone, so a driver can write them followed
by a ``memoryview`` of the memory-mapped CommitLog.

Epoch entries (:class:`EpochEntry`) and their ranges (:class:`EpochRange`,
:func:`with_end_offsets`) live here because they are the handshake's payload; the epoch file and
the truncation algorithm share them.
"""

from __future__ import annotations

import bisect
import itertools
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Final, Generic, TypeVar

from mypy_extensions import mypyc_attr

from protocol.remoting import ProtocolError

__all__ = [
    "ADDRESS_BYTES",
    "DEFAULT_MAX_BODY_BYTES",
    "ENTRY_SIZE",
    "FLAG_ASYNC_LEARNER",
    "FLAG_SYNC_FROM_LAST_FILE",
    "MASTER_HANDSHAKE_HEADER_SIZE",
    "SLAVE_ACK_SIZE",
    "SLAVE_HANDSHAKE_SIZE",
    "TRANSFER_HEADER_SIZE",
    "Buffer",
    "EpochEntry",
    "EpochRange",
    "HAConnectionState",
    "MasterHandshake",
    "MasterMessage",
    "MasterStreamDecoder",
    "MasterTransfer",
    "ProtocolError",
    "SlaveAck",
    "SlaveHandshake",
    "SlaveMessage",
    "SlaveStreamDecoder",
    "check_epoch_entries",
    "encode_master_handshake",
    "encode_master_transfer",
    "encode_slave_ack",
    "encode_slave_handshake",
    "encode_transfer_header",
    "epoch_index_at",
    "with_end_offsets",
]

Buffer = bytes | bytearray | memoryview


class HAConnectionState(IntEnum):
    """The state of one HA connection; HANDSHAKE and TRANSFER double as the wire ``state``."""

    READY = 0
    HANDSHAKE = 1
    TRANSFER = 2
    SUSPEND = 3
    SHUTDOWN = 4


FLAG_SYNC_FROM_LAST_FILE: Final = 1
FLAG_ASYNC_LEARNER: Final = 2
_KNOWN_FLAGS: Final = FLAG_SYNC_FROM_LAST_FILE | FLAG_ASYNC_LEARNER
ADDRESS_BYTES: Final = 50
DEFAULT_MAX_BODY_BYTES: Final = 32 * 1024 * 1024

INT32_MAX: Final = 2**31 - 1
INT64_MAX: Final = 2**63 - 1

_STATE = struct.Struct(">i")
_SLAVE_HANDSHAKE = struct.Struct(">iiqi50s")
_SLAVE_ACK = struct.Struct(">iq")
_MASTER_HANDSHAKE = struct.Struct(">iiqi")
_ENTRY = struct.Struct(">iq")
_TRANSFER = struct.Struct(">iiqiqq")

SLAVE_HANDSHAKE_SIZE: Final = _SLAVE_HANDSHAKE.size  # 70
SLAVE_ACK_SIZE: Final = _SLAVE_ACK.size  # 12
MASTER_HANDSHAKE_HEADER_SIZE: Final = _MASTER_HANDSHAKE.size  # 20
ENTRY_SIZE: Final = _ENTRY.size  # 12
TRANSFER_HEADER_SIZE: Final = _TRANSFER.size  # 36

_HANDSHAKE: Final = int(HAConnectionState.HANDSHAKE)
_TRANSFER_STATE: Final = int(HAConnectionState.TRANSFER)


def _check_field(obj: object, name: str, low: int, high: int) -> None:
    """:func:`_check_range` of ``obj``'s field ``name``, read as the object it is (compiled code
    reading a field typed ``int`` would turn a bool into an int first)."""
    _check_range(name, getattr(obj, name), low, high)


def _check_range(name: str, value: object, low: int, high: int) -> None:
    # ``value`` is an object and the classes that call this stay Python classes when compiled
    # (mypyc_attr): compiled code converts a bool given for an int to a plain int (True to 1)
    # at a native attribute or an int parameter, and True would pass.
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{name} must be an int, not {type(value).__name__}")
    if not low <= value <= high:
        raise ValueError(f"{name} {value} is outside [{low}, {high}]")


# --------------------------------------------------------------------------- epoch entries


@mypyc_attr(native_class=False)  # see _check_range
@dataclass(frozen=True, slots=True, kw_only=True)
class EpochEntry:
    """Epoch ``epoch`` began at CommitLog offset ``start_offset``."""

    epoch: int
    start_offset: int

    def __post_init__(self) -> None:
        _check_field(self, "epoch", 0, INT32_MAX)
        _check_field(self, "start_offset", 0, INT64_MAX)


@dataclass(frozen=True, slots=True, kw_only=True)
class EpochRange:
    """An epoch entry with its derived end: bytes ``[start_offset, end_offset)`` belong to it."""

    epoch: int
    start_offset: int
    end_offset: int


def check_epoch_entries(entries: Sequence[EpochEntry]) -> None:
    """Raise ValueError unless epochs strictly increase and start offsets never decrease."""
    for prev, cur in itertools.pairwise(entries):
        if cur.epoch <= prev.epoch:
            raise ValueError(f"epoch {cur.epoch} does not follow epoch {prev.epoch}")
        if cur.start_offset < prev.start_offset:
            raise ValueError(
                f"epoch {cur.epoch} starts at {cur.start_offset}, before epoch {prev.epoch} "
                f"at {prev.start_offset}"
            )


def with_end_offsets(entries: Sequence[EpochEntry], max_offset: int) -> tuple[EpochRange, ...]:
    """Each entry with its end: the next entry's start, the last one's is ``max_offset``.

    Ends are clamped to ``max_offset`` and never fall below their start, so an entry that starts
    beyond the log's end (a stale entry after a torn tail) gets an empty range.
    """
    out: list[EpochRange] = []
    last = len(entries) - 1
    for i, e in enumerate(entries):
        end = max_offset if i == last else min(entries[i + 1].start_offset, max_offset)
        out.append(
            EpochRange(
                epoch=e.epoch, start_offset=e.start_offset, end_offset=max(end, e.start_offset)
            )
        )
    return tuple(out)


def epoch_index_at(entries: Sequence[EpochEntry], offset: int) -> int:
    """Index of the entry the byte at ``offset`` belongs to: the last one starting at or before it.

    Returns -1 when ``offset`` precedes every entry. Entries must be ascending.
    """
    return bisect.bisect_right(entries, offset, key=lambda e: e.start_offset) - 1


# --------------------------------------------------------------------------- messages


@mypyc_attr(native_class=False)  # see _check_range
@dataclass(frozen=True, slots=True, kw_only=True)
class SlaveHandshake:
    """The slave's opening message: who it is and how it wants to be fed."""

    broker_id: int
    address: str
    sync_from_last_file: bool = False
    async_learner: bool = False

    def __post_init__(self) -> None:
        _check_field(self, "broker_id", 0, INT64_MAX)
        if len(self.address.encode()) > ADDRESS_BYTES:
            raise ValueError(f"slave address {self.address!r} exceeds {ADDRESS_BYTES} bytes")

    @property
    def flags(self) -> int:
        return (FLAG_SYNC_FROM_LAST_FILE if self.sync_from_last_file else 0) | (
            FLAG_ASYNC_LEARNER if self.async_learner else 0
        )


@mypyc_attr(native_class=False)  # see _check_range
@dataclass(frozen=True, slots=True, kw_only=True)
class SlaveAck:
    """The slave has every CommitLog byte below ``max_offset``."""

    max_offset: int

    def __post_init__(self) -> None:
        _check_field(self, "max_offset", 0, INT64_MAX)


@mypyc_attr(native_class=False)  # see _check_range
@dataclass(frozen=True, slots=True, kw_only=True)
class MasterHandshake:
    """The master's reply to a handshake: its log end, its epoch and its whole epoch history."""

    master_max_offset: int
    master_epoch: int
    epoch_entries: tuple[EpochEntry, ...]

    def __post_init__(self) -> None:
        _check_field(self, "master_max_offset", 0, INT64_MAX)
        _check_field(self, "master_epoch", 0, INT32_MAX)
        entries = self.epoch_entries
        if len(entries) * ENTRY_SIZE > INT32_MAX:
            raise ValueError("too many epoch entries")
        check_epoch_entries(entries)
        if entries:
            if entries[-1].epoch > self.master_epoch:
                raise ValueError(
                    f"epoch entry {entries[-1].epoch} is above master epoch {self.master_epoch}"
                )
            if entries[-1].start_offset > self.master_max_offset:
                raise ValueError(
                    f"epoch {entries[-1].epoch} starts at {entries[-1].start_offset}, beyond "
                    f"master max offset {self.master_max_offset}"
                )


@mypyc_attr(native_class=False)  # see _check_range
@dataclass(frozen=True, slots=True, kw_only=True)
class MasterTransfer:
    """A batch of CommitLog bytes ``[offset, offset + len(body))`` of epoch ``epoch``.

    An empty body is a heartbeat. ``body`` may be a memoryview (of a received chunk, or of the
    master's mapped CommitLog); it is excluded from ``repr``.
    """

    offset: int
    epoch: int
    epoch_start_offset: int
    confirm_offset: int
    body: Buffer = field(default=b"", repr=False)

    def __post_init__(self) -> None:
        _check_field(self, "offset", 0, INT64_MAX)
        _check_field(self, "epoch", 0, INT32_MAX)
        _check_field(self, "epoch_start_offset", 0, self.offset)
        _check_field(self, "confirm_offset", 0, INT64_MAX)
        if len(self.body) > INT32_MAX:
            raise ValueError("transfer body exceeds int32")
        if self.offset + len(self.body) > INT64_MAX:
            raise ValueError("transfer ends beyond int64")

    @property
    def is_heartbeat(self) -> bool:
        return len(self.body) == 0

    @property
    def end_offset(self) -> int:
        return self.offset + len(self.body)


SlaveMessage = SlaveHandshake | SlaveAck
MasterMessage = MasterHandshake | MasterTransfer


# --------------------------------------------------------------------------- encoders


def encode_slave_handshake(msg: SlaveHandshake) -> bytes:
    raw = msg.address.encode()
    return _SLAVE_HANDSHAKE.pack(_HANDSHAKE, msg.flags, msg.broker_id, len(raw), raw)


def encode_slave_ack(msg: SlaveAck) -> bytes:
    return _SLAVE_ACK.pack(_TRANSFER_STATE, msg.max_offset)


def encode_master_handshake(msg: MasterHandshake) -> bytes:
    entries = msg.epoch_entries
    out = bytearray(MASTER_HANDSHAKE_HEADER_SIZE + ENTRY_SIZE * len(entries))
    _MASTER_HANDSHAKE.pack_into(
        out, 0, _HANDSHAKE, ENTRY_SIZE * len(entries), msg.master_max_offset, msg.master_epoch
    )
    pos = MASTER_HANDSHAKE_HEADER_SIZE
    for e in entries:
        _ENTRY.pack_into(out, pos, e.epoch, e.start_offset)
        pos += ENTRY_SIZE
    return bytes(out)


def encode_transfer_header(msg: MasterTransfer) -> bytes:
    """The 36 header bytes of a transfer; the caller writes ``msg.body`` right after them."""
    return _TRANSFER.pack(
        _TRANSFER_STATE,
        len(msg.body),
        msg.offset,
        msg.epoch,
        msg.epoch_start_offset,
        msg.confirm_offset,
    )


def encode_master_transfer(msg: MasterTransfer) -> bytes:
    """Header and body in one ``bytes`` (copies the body; drivers prefer the header alone)."""
    return encode_transfer_header(msg) + bytes(msg.body)


# --------------------------------------------------------------------------- decoders

_EMPTY: Final = memoryview(b"")


_M = TypeVar("_M", "MasterMessage", "SlaveMessage")


class _StreamDecoder(Generic[_M]):
    """Splits a stream into messages: a fixed header chosen by the leading state, then a body.

    Subclasses say which header a state takes (:meth:`_header_size`), how long the body is
    (:meth:`_body_size`) and how to build the message (:meth:`_build`).
    """

    __slots__ = ("_body", "_failed", "_filled", "_handshaken", "_hbuf", "_header", "_max_body")

    def __init__(self, max_body_bytes: int) -> None:
        if max_body_bytes < 0:
            raise ValueError("max_body_bytes must be >= 0")
        self._max_body = max_body_bytes
        self._hbuf = bytearray()  # a partial header, at most one header long
        self._header: bytes | None = None  # the header whose body is being assembled
        self._body = bytearray()
        self._filled = 0
        self._handshaken = False
        self._failed = False

    @property
    def buffered(self) -> int:
        """Bytes held for an incomplete message (bounded by the header plus ``max_body_bytes``)."""
        return len(self._hbuf) + self._filled

    def _header_size(self, state: int) -> int:
        raise NotImplementedError

    def _body_size(self, header: Buffer) -> int:
        raise NotImplementedError

    def _build(self, header: Buffer, body: memoryview) -> _M:
        raise NotImplementedError

    def _expected_state(self) -> int:
        return _TRANSFER_STATE if self._handshaken else _HANDSHAKE

    def _check_state(self, state: int) -> int:
        expected = self._expected_state()
        if state != expected:
            if state in (_HANDSHAKE, _TRANSFER_STATE):
                raise ProtocolError(f"unexpected state {state} (expected {expected})")
            raise ProtocolError(f"bad state {state}")
        return self._header_size(state)

    def _checked_body_size(self, header: Buffer) -> int:
        size = self._body_size(header)
        if size < 0:
            raise ProtocolError(f"negative body size {size}")
        if size > self._max_body:
            raise ProtocolError(f"body of {size} bytes exceeds max_body_bytes {self._max_body}")
        return size

    def _emit(self, header: Buffer, body: memoryview) -> _M:
        try:
            msg = self._build(header, body)
        except ValueError as exc:
            raise ProtocolError(str(exc)) from None
        self._handshaken = True
        return msg

    def feed(self, data: Buffer) -> list[_M]:
        """Every message completed by ``data``; raises ProtocolError on an invalid stream."""
        out, error = self.feed_until_error(data)
        if error is not None:
            raise error
        return out

    def feed_until_error(self, data: Buffer) -> tuple[list[_M], ProtocolError | None]:
        """Like :meth:`feed`, but returns the messages that preceded an error with the error.

        State machines use it so that valid messages before garbage are still acted on.
        """
        if self._failed:
            return [], ProtocolError("stream already failed")
        out: list[_M] = []
        try:
            self._feed_into(data, out)
        except ProtocolError as exc:
            self._failed = True
            self._hbuf.clear()
            self._header = None
            self._body = bytearray()
            self._filled = 0
            return out, exc
        return out, None

    def _feed_into(self, data: Buffer, out: list[_M]) -> None:
        # Body slices must outlive the caller's buffer, so only immutable bytes are sliced.
        if isinstance(data, bytes):
            view = memoryview(data)
        elif isinstance(data, memoryview) and data.readonly:
            view = data.cast("B") if data.format != "B" or data.ndim != 1 else data
        else:
            view = memoryview(bytes(data))
        pos = 0
        end = len(view)
        while True:
            if self._header is not None:  # filling a body that started in an earlier chunk
                body = self._body
                take = min(len(body) - self._filled, end - pos)
                body[self._filled : self._filled + take] = view[pos : pos + take]
                self._filled += take
                pos += take
                if self._filled < len(body):
                    break
                header = self._header
                self._header = None
                self._body = bytearray()
                self._filled = 0
                out.append(self._emit(header, memoryview(body)))
                continue
            hbuf = self._hbuf
            if not hbuf and end - pos >= 4:
                # Fast path: the header is whole in this chunk.
                (state,) = _STATE.unpack_from(view, pos)
                hsize = self._check_state(state)
                if end - pos >= hsize:
                    header_view = view[pos : pos + hsize]
                    size = self._checked_body_size(header_view)
                    pos += hsize
                    if end - pos >= size:
                        body_view = view[pos : pos + size] if size else _EMPTY
                        pos += size
                        out.append(self._emit(header_view, body_view))
                        continue
                    self._start_body(bytes(header_view), size)
                    continue
            if pos >= end:
                break
            # Slow path: gather the header byte by byte range into hbuf (bounded by its size).
            if len(hbuf) < 4:
                take = min(4 - len(hbuf), end - pos)
                hbuf += view[pos : pos + take]
                pos += take
                if len(hbuf) < 4:
                    break
            (state,) = _STATE.unpack_from(hbuf, 0)
            hsize = self._check_state(state)
            take = min(hsize - len(hbuf), end - pos)
            hbuf += view[pos : pos + take]
            pos += take
            if len(hbuf) < hsize:
                break
            header = bytes(hbuf)
            hbuf.clear()
            size = self._checked_body_size(header)
            if size == 0:
                out.append(self._emit(header, _EMPTY))
            elif end - pos >= size:
                out.append(self._emit(header, view[pos : pos + size]))
                pos += size
            else:
                self._start_body(header, size)

    def _start_body(self, header: bytes, size: int) -> None:
        self._header = header
        self._body = bytearray(size)
        self._filled = 0


class SlaveStreamDecoder(_StreamDecoder[SlaveMessage]):
    """What the master reads: one :class:`SlaveHandshake`, then :class:`SlaveAck` messages."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__(0)

    def _header_size(self, state: int) -> int:
        return SLAVE_HANDSHAKE_SIZE if state == _HANDSHAKE else SLAVE_ACK_SIZE

    def _body_size(self, header: Buffer) -> int:
        return 0

    def _build(self, header: Buffer, body: memoryview) -> SlaveMessage:
        if len(header) == SLAVE_ACK_SIZE:
            _state, max_offset = _SLAVE_ACK.unpack_from(header)
            if max_offset < 0:
                raise ProtocolError(f"negative slave max offset {max_offset}")
            return SlaveAck(max_offset=max_offset)
        _state, flags, broker_id, alen, raw = _SLAVE_HANDSHAKE.unpack_from(header)
        if flags & ~_KNOWN_FLAGS:
            raise ProtocolError(f"unknown handshake flags {flags:#x}")
        if not 0 <= alen <= ADDRESS_BYTES:
            raise ProtocolError(f"slave address length {alen} outside [0, {ADDRESS_BYTES}]")
        if any(raw[alen:]):
            raise ProtocolError("slave address padding is not zero")
        try:
            address = raw[:alen].decode()
        except UnicodeDecodeError:
            raise ProtocolError("slave address is not UTF-8") from None
        return SlaveHandshake(
            broker_id=broker_id,
            address=address,
            sync_from_last_file=bool(flags & FLAG_SYNC_FROM_LAST_FILE),
            async_learner=bool(flags & FLAG_ASYNC_LEARNER),
        )


class MasterStreamDecoder(_StreamDecoder[MasterMessage]):
    """What the slave reads: one :class:`MasterHandshake`, then :class:`MasterTransfer` messages.

    ``max_body_bytes`` bounds both a transfer body and the handshake's epoch entries.
    """

    __slots__ = ()

    def __init__(self, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> None:
        super().__init__(max_body_bytes)

    def _header_size(self, state: int) -> int:
        return MASTER_HANDSHAKE_HEADER_SIZE if state == _HANDSHAKE else TRANSFER_HEADER_SIZE

    def _body_size(self, header: Buffer) -> int:
        (_state, size) = struct.unpack_from(">ii", header)
        if len(header) == MASTER_HANDSHAKE_HEADER_SIZE and size % ENTRY_SIZE:
            raise ProtocolError(f"handshake body size {size} is not a multiple of {ENTRY_SIZE}")
        return int(size)

    def _build(self, header: Buffer, body: memoryview) -> MasterMessage:
        if len(header) == MASTER_HANDSHAKE_HEADER_SIZE:
            _state, _size, max_offset, epoch = _MASTER_HANDSHAKE.unpack_from(header)
            entries = tuple(
                EpochEntry(epoch=e, start_offset=s) for e, s in _ENTRY.iter_unpack(body)
            )
            return MasterHandshake(
                master_max_offset=max_offset, master_epoch=epoch, epoch_entries=entries
            )
        _state, _size, offset, epoch, epoch_start, confirm = _TRANSFER.unpack_from(header)
        return MasterTransfer(
            offset=offset,
            epoch=epoch,
            epoch_start_offset=epoch_start,
            confirm_offset=confirm,
            body=body,
        )
