"""Which CommitLog records matter to the timer, and what each one tells it (pure code).

Three kinds of record carry ``TIMER_OUT_MS``, and only they:

* a **scheduled** message: topic ``rmq_sys_wheel_timer``, its real topic and queue in
  ``REAL_TOPIC`` / ``REAL_QID``, its due time in ``TIMER_OUT_MS``;
* a **recall**: topic ``rmq_sys_wheel_timer`` with ``TIMER_DEL_UNIQKEY`` (the recalled
  message's id, so its CommitLog offset) and the recalled entry's ``TIMER_OUT_MS``;
* a **delivered** message: its real topic, ``TIMER_OUT_MS`` and ``TIMER_SOURCE_OFFSET`` (the
  wheel's key of the entry it delivers).

The send path refuses these properties from producers (:data:`RESERVED_PROPERTIES`), so a
record holding them was written by a broker's timer. :func:`timer_events` finds them in a run of
CommitLog bytes: one ``bytes.find`` for the property name skips every other record, so a replica
following a log of ordinary messages pays almost nothing.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

from protocol.message import (
    BLANK_MAGIC,
    HEAD_SIZE,
    MESSAGE_MAGIC,
    RecordError,
    decode_properties,
    parse_msg_id,
)
from protocol.timer import (
    PROP_REAL_QUEUE_ID,
    PROP_REAL_TOPIC,
    PROP_TIMER_DEL_UNIQKEY,
    PROP_TIMER_OUT_MS,
    PROP_TIMER_SOURCE_OFFSET,
    TIMER_TOPIC,
)

__all__ = [
    "RESERVED_PROPERTIES",
    "Delivered",
    "Recalled",
    "Scheduled",
    "TimerEvent",
    "classify",
    "timer_events",
]

RESERVED_PROPERTIES: Final = frozenset(
    {
        PROP_TIMER_OUT_MS,
        PROP_TIMER_SOURCE_OFFSET,
        PROP_TIMER_DEL_UNIQKEY,
        PROP_REAL_TOPIC,
        PROP_REAL_QUEUE_ID,
    }
)
"""Properties only the broker's timer writes; a send carrying one is refused."""

_NEEDLE: Final = PROP_TIMER_OUT_MS.encode() + b"\x01"
_PREFIX: Final = struct.Struct(">II")
_STORE_TS: Final = struct.Struct(">q")
_BODY_LEN: Final = struct.Struct(">I")
_U16: Final = struct.Struct(">H")
_TOPIC_RAW: Final = TIMER_TOPIC.encode()


@dataclass(frozen=True, slots=True)
class Scheduled:
    """A scheduled message stored at ``offset`` (``size`` bytes), due at ``due_ms``."""

    offset: int
    size: int
    due_ms: int
    store_ms: int


@dataclass(frozen=True, slots=True)
class Recalled:
    """A recall of the entry ``(due_ms, target)``; the recall record ends at ``end``."""

    target: int
    due_ms: int
    end: int
    store_ms: int


@dataclass(frozen=True, slots=True)
class Delivered:
    """The entry ``(due_ms, source_offset)`` was delivered."""

    due_ms: int
    source_offset: int


TimerEvent = Scheduled | Recalled | Delivered


def classify(buf: bytes, pos: int, size: int, base: int) -> TimerEvent | None:
    """What the valid message record at ``buf[pos:pos+size]`` (CommitLog ``base + pos``) tells
    the timer, None if nothing. Raises :class:`RecordError` for a timer record whose timer
    properties are malformed."""
    (blen,) = _BODY_LEN.unpack_from(buf, pos + HEAD_SIZE - 4)
    p = pos + HEAD_SIZE + blen
    (tl,) = _U16.unpack_from(buf, p)
    topic_raw = buf[p + 2 : p + 2 + tl]
    props_at = p + 2 + tl + 2
    props = decode_properties(buf[props_at : pos + size])
    due_text = props.get(PROP_TIMER_OUT_MS)
    if due_text is None:
        return None
    try:
        due_ms = int(due_text)
        if topic_raw == _TOPIC_RAW:
            (store_ms,) = _STORE_TS.unpack_from(buf, pos + 44)
            recalled = props.get(PROP_TIMER_DEL_UNIQKEY)
            if recalled is not None:
                target = parse_msg_id(recalled)[1]
                return Recalled(target, due_ms, base + pos + size, store_ms)
            return Scheduled(base + pos, size, due_ms, store_ms)
        source = props.get(PROP_TIMER_SOURCE_OFFSET)
        if source is None:
            return None
        return Delivered(due_ms, int(source))
    except ValueError as exc:
        raise RecordError(f"timer record at {base + pos}: {exc}") from None


def timer_events(buf: bytes, base: int) -> list[TimerEvent]:
    """The timer events of the whole records (and blank tails) in ``buf``, which starts at
    CommitLog offset ``base``, in log order. The caller passes records that passed their checks
    (a slave's appends are validated, a replay reads with ``MessageStore.read_checked``)."""
    found = buf.find(_NEEDLE)
    if found < 0:
        return []
    events: list[TimerEvent] = []
    end = len(buf)
    pos = 0
    unpack = _PREFIX.unpack_from
    while found >= 0 and pos + 8 <= end:
        size, magic = unpack(buf, pos)
        if size < 8:
            raise RecordError(f"record of {size} bytes at {base + pos}")
        nxt = pos + size
        if found < nxt:
            if magic == MESSAGE_MAGIC:
                event = classify(buf, pos, size, base)
                if event is not None:
                    events.append(event)
            elif magic != BLANK_MAGIC:
                raise RecordError(f"bad magic {magic:#x} at {base + pos}")
            found = buf.find(_NEEDLE, nxt)
        pos = nxt
    return events
