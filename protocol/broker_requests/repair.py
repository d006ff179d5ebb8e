"""REPAIR_RECORD (5190): a broker whose copy of a CommitLog range fails its checks fetches that
range from another replica of its group; SKIP_CORRUPT_MESSAGE (5191): an operator gives up a
message no replica holds intact (issue 31, docs/protocol.md "Repairing a record"). Pure: no
sockets, no clock.

Request (header fields)::

    REPAIR_RECORD 5190    offset (>= 0), size (1..MAX_REPAIR_BYTES), epoch (>= 0: the asker's
                          epoch at ``offset``, from its epoch file)

Answers::

    SUCCESS              header epoch, epochStart, epochEnd (the answering replica's epoch
                         entry holding ``offset``, its end capped at its max offset); body the
                         ``size`` bytes at ``offset``: whole records, each passing its CRC
    RECORD_NOT_INTACT    (5080) the replica's own copy is not whole intact records there
    EPOCH_NOT_COVERING   (5081) the replica's epoch at ``offset`` is another, or ends first

SKIP_CORRUPT_MESSAGE (header topic, queueId, queueOffset; rmqctl skipCorruptMessage) to each
replica of the group: SUCCESS (header ``physicalOffset``) once reads of that queue pass over the
message (kept over restarts); RECORD_READABLE (5082) when this replica reads it intact (nothing
skipped: it serves it); QUEUE_NOT_EXIST when the queue has no message at that offset.

The replica answers only with what passes :func:`intact_records` on its own copy and when its
epoch entry at ``offset`` is the asker's and covers the whole range (the same epoch wrote the
same bytes on every replica). The asker trusts nothing of that: :meth:`RepairedRecord.problem`
checks the answer again (epoch, range, size, every record's CRC and offset) before a byte of it
is written, and asks the next replica when it fails.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, Final

from protocol.codes import RequestCode
from protocol.fields import FieldError, req_int, req_str
from protocol.message import BLANK_MAGIC, DISPATCH_HEAD, RecordError, check_record, peek_prefix
from protocol.remoting import Header, Scalar

__all__ = [
    "MAX_REPAIR_BYTES",
    "RepairRecord",
    "RepairedRecord",
    "SkipCorruptMessage",
    "intact_records",
]

MAX_REPAIR_BYTES: Final = 64 << 20
"""The most bytes one request may ask for (a damaged range is fetched record by record when
larger)."""


def intact_records(raw: bytes | bytearray | memoryview, offset: int) -> str | None:
    """Why ``raw`` is not whole message records that passed their CRC and each name its own
    CommitLog offset (``offset`` plus its position in ``raw``); None when it is. The last may
    be a segment's blank tail (BLANK_MAGIC, its size reaching the end of ``raw`` exactly, zeros
    past its prefix): a range lost at the end of a segment (a short segment file) holds it."""
    pos, end = 0, len(raw)
    if end == 0:
        return "no bytes"
    while pos < end:
        if _blank_tail(raw, pos, end):
            return None
        try:
            size = check_record(raw, pos, end)
        except RecordError as exc:
            return f"{exc} (commitlog offset {offset + pos})"
        except struct.error:
            return f"truncated record at commitlog offset {offset + pos}"
        physical = DISPATCH_HEAD.unpack_from(raw, pos)[5]
        if physical != offset + pos:
            return f"the record at commitlog offset {offset + pos} says it is at {physical}"
        pos += size
    return None


def _blank_tail(raw: bytes | bytearray | memoryview, pos: int, end: int) -> bool:
    if end - pos < 8:
        return False
    size, magic = peek_prefix(raw, pos)
    return magic == BLANK_MAGIC and pos + size == end and not bytes(raw[pos + 8 : end]).strip(b"\0")


@dataclass(frozen=True, slots=True, kw_only=True)
class RepairRecord:
    """REPAIR_RECORD: the ``size`` bytes at CommitLog ``offset``, written in ``epoch``."""

    code: ClassVar[RequestCode] = RequestCode.REPAIR_RECORD

    offset: int
    size: int
    epoch: int

    def encode(self) -> tuple[Header, bytes | None]:
        return {"offset": self.offset, "size": self.size, "epoch": self.epoch}, None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> RepairRecord:
        offset = req_int(header, "offset")
        size = req_int(header, "size")
        epoch = req_int(header, "epoch")
        if offset < 0:
            raise FieldError("offset must be >= 0")
        if not 1 <= size <= MAX_REPAIR_BYTES:
            raise FieldError(f"size must be 1..{MAX_REPAIR_BYTES}")
        if epoch < 0:
            raise FieldError("epoch must be >= 0")
        return cls(offset=offset, size=size, epoch=epoch)


@dataclass(frozen=True, slots=True, kw_only=True)
class RepairedRecord:
    """REPAIR_RECORD's SUCCESS: the replica's epoch entry at the offset and the bytes."""

    epoch: int
    epoch_start: int
    epoch_end: int
    raw: bytes

    def encode(self) -> tuple[Header, bytes]:
        header: Header = {
            "epoch": self.epoch,
            "epochStart": self.epoch_start,
            "epochEnd": self.epoch_end,
        }
        return header, self.raw

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> RepairedRecord:
        epoch = req_int(header, "epoch")
        start = req_int(header, "epochStart")
        end = req_int(header, "epochEnd")
        if epoch < 0 or start < 0 or end < start:
            raise FieldError(f"epoch {epoch} over offsets {start}..{end} is not an epoch entry")
        return cls(epoch=epoch, epoch_start=start, epoch_end=end, raw=body or b"")

    def problem(self, asked: RepairRecord) -> str | None:
        """Why these bytes must not be written over ``asked``'s range; None when they may."""
        offset, size = asked.offset, asked.size
        if self.epoch != asked.epoch:
            return f"its epoch at offset {offset} is {self.epoch}, not {asked.epoch}"
        if not self.epoch_start <= offset or offset + size > self.epoch_end:
            return (
                f"offsets {offset}..{offset + size} are beyond its epoch {self.epoch} "
                f"({self.epoch_start}..{self.epoch_end})"
            )
        if len(self.raw) != size:
            return f"{len(self.raw)} bytes answered for {size}"
        return intact_records(self.raw, offset)


@dataclass(frozen=True, slots=True, kw_only=True)
class SkipCorruptMessage:
    """SKIP_CORRUPT_MESSAGE: reads of ``topic``:``queue_id`` pass over the message at
    ``queue_offset``, which no replica can read."""

    code: ClassVar[RequestCode] = RequestCode.SKIP_CORRUPT_MESSAGE

    topic: str
    queue_id: int
    queue_offset: int

    def encode(self) -> tuple[Header, bytes | None]:
        header: Header = {
            "topic": self.topic,
            "queueId": self.queue_id,
            "queueOffset": self.queue_offset,
        }
        return header, None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> SkipCorruptMessage:
        topic = req_str(header, "topic")
        queue_id = req_int(header, "queueId")
        queue_offset = req_int(header, "queueOffset")
        if queue_id < 0 or queue_offset < 0:
            raise FieldError("queueId and queueOffset must be >= 0")
        return cls(topic=topic, queue_id=queue_id, queue_offset=queue_offset)
