"""The schema of the ``rmq`` and ``rmqstore`` sources and decoded records as Arrow batches.

DESIGN.md section 9: topic, brokerName, queueId, queueOffset, msgId, keys, tags, body (binary),
properties (map), bornTimestamp, storeTimestamp. Keys and tags are null when the message has none;
``properties`` holds the application's properties (keys and tags have their own columns).
Timestamps are Spark timestamps (UTC) from the broker's milliseconds.

``rmqstore`` adds what an audit of a CommitLog needs: physicalOffset, size, bornHost, storeHost.
"""

from __future__ import annotations

import mmap
import struct
import zlib
from typing import TYPE_CHECKING, Final

from protocol.message import _HEAD as RECORD_HEAD  # the one definition of the record head
from protocol.message import (
    BLANK_MAGIC,
    HEAD_SIZE,
    MESSAGE_MAGIC,
    MIN_RECORD_SIZE,
    PROP_KEYS,
    PROP_TAGS,
    unpack_host,
)

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

#: columns of the ``rmq`` source, in order
COLUMNS = (
    "topic",
    "brokerName",
    "queueId",
    "queueOffset",
    "msgId",
    "keys",
    "tags",
    "body",
    "properties",
    "bornTimestamp",
    "storeTimestamp",
)
#: what ``rmqstore`` adds
STORE_COLUMNS = ("physicalOffset", "size", "bornHost", "storeHost")

_U16: Final = struct.Struct(">H")
_PREFIX: Final = struct.Struct(">II")
_NAME_SEP: Final = "\x01"
_PROP_SEP: Final = "\x02"


def message_schema(*, store: bool = False) -> StructType:
    """The Spark schema of ``rmq`` (``store``: of ``rmqstore``)."""
    from pyspark.sql.types import (
        BinaryType,
        IntegerType,
        LongType,
        MapType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    fields = [
        StructField("topic", StringType(), False),
        StructField("brokerName", StringType(), False),
        StructField("queueId", IntegerType(), False),
        StructField("queueOffset", LongType(), False),
        StructField("msgId", StringType(), False),
        StructField("keys", StringType(), True),
        StructField("tags", StringType(), True),
        StructField("body", BinaryType(), False),
        StructField("properties", MapType(StringType(), StringType(), True), False),
        StructField("bornTimestamp", TimestampType(), False),
        StructField("storeTimestamp", TimestampType(), False),
    ]
    if store:
        fields += [
            StructField("physicalOffset", LongType(), False),
            StructField("size", IntegerType(), False),
            StructField("bornHost", StringType(), False),
            StructField("storeHost", StringType(), False),
        ]
    return StructType(fields)


def arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema Spark expects for ``schema`` (batches must match it exactly)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")


def check_schema(schema: StructType, *, store: bool = False) -> None:
    """A user-given schema must be the source's own (the columns are fixed)."""
    from pipeline.errors import OptionError

    expected = message_schema(store=store)
    if schema != expected:
        raise OptionError(
            "this source has a fixed schema; do not pass one to .schema() "
            f"(expected {expected.simpleString()}, got {schema.simpleString()})"
        )


class RecordDecodeError(ValueError):
    """Bytes that are not a valid record where one was expected."""

    def __init__(self, pos: int, what: str) -> None:
        super().__init__(f"{what} at byte {pos}")
        self.pos = pos


class Columns:
    """Decoded records, column by column, ready to become one Arrow batch.

    Decoding straight into columns (instead of a record object each) roughly doubles the rate a
    read task turns pull bodies into rows; the record layout itself is protocol/message.py's.
    """

    __slots__ = (
        "bodies",
        "born",
        "born_hosts",
        "keys",
        "msg_ids",
        "physical",
        "prop_keys",
        "prop_offsets",
        "prop_values",
        "queue_ids",
        "queue_offsets",
        "sizes",
        "store",
        "store_hosts",
        "tags",
        "topics",
        "with_store",
    )

    def __init__(self, *, with_store: bool = False) -> None:
        self.with_store = with_store
        self.topics: list[str] = []
        self.queue_ids: list[int] = []
        self.queue_offsets: list[int] = []
        self.msg_ids: list[str] = []
        self.keys: list[str | None] = []
        self.tags: list[str | None] = []
        self.bodies: list[bytes] = []
        self.prop_offsets: list[int] = [0]
        self.prop_keys: list[str] = []
        self.prop_values: list[str] = []
        self.born: list[int] = []
        self.store: list[int] = []
        self.physical: list[int] = []
        self.sizes: list[int] = []
        self.born_hosts: list[str] = []
        self.store_hosts: list[str] = []

    def __len__(self) -> int:
        return len(self.queue_offsets)

    def to_batch(self, broker: str, schema: pa.Schema) -> pa.RecordBatch:
        """One Arrow record batch (every row of broker group ``broker``)."""
        import pyarrow as pa

        n = len(self)
        ts_type = schema.field("storeTimestamp").type
        columns: list[pa.Array] = [
            pa.array(self.topics, pa.string()),
            pa.array([broker] * n, pa.string()),
            pa.array(self.queue_ids, pa.int32()),
            pa.array(self.queue_offsets, pa.int64()),
            pa.array(self.msg_ids, pa.string()),
            pa.array(self.keys, pa.string()),
            pa.array(self.tags, pa.string()),
            pa.array(self.bodies, pa.binary()),
            pa.MapArray.from_arrays(
                pa.array(self.prop_offsets, pa.int32()),
                pa.array(self.prop_keys, pa.string()),
                pa.array(self.prop_values, pa.string()),
                type=schema.field("properties").type,
            ),
            _timestamps(self.born, ts_type),
            _timestamps(self.store, ts_type),
        ]
        if self.with_store:
            columns += [
                pa.array(self.physical, pa.int64()),
                pa.array(self.sizes, pa.int32()),
                pa.array(self.born_hosts, pa.string()),
                pa.array(self.store_hosts, pa.string()),
            ]
        return pa.RecordBatch.from_arrays(columns, schema=schema)


def decode_into(
    cols: Columns,
    buf: bytes | mmap.mmap,
    pos: int = 0,
    end: int | None = None,
    *,
    max_records: int | None = None,
    expect_offset: int | None = None,
    topic: str | None = None,
) -> tuple[int, bool]:
    """Decode the records of ``buf[pos:end]`` into ``cols`` (magic, size and CRC checked).

    Stops after ``max_records``, at a blank record (a segment's tail, which ends the data), or
    at a zero size (pre-allocated, never written). ``expect_offset``: the records must carry
    consecutive queue offsets from it. ``topic``: keep only that topic's records.
    Returns (position after the last record read, whether the data ended).
    Raises :class:`RecordDecodeError` naming the byte position of a bad record.
    """
    view = memoryview(buf)
    try:
        return _decode(
            cols,
            buf,
            view,
            pos,
            len(buf) if end is None else end,
            max_records,
            expect_offset,
            topic,
        )
    finally:
        view.release()  # an mmap cannot close while a view of it is alive (tracebacks hold one)


def _decode(
    cols: Columns,
    buf: bytes | mmap.mmap,
    view: memoryview,
    pos: int,
    end: int,
    max_records: int | None,
    expect_offset: int | None,
    topic: str | None,
) -> tuple[int, bool]:
    unpack = RECORD_HEAD.unpack_from
    u16 = _U16.unpack_from
    crc32 = zlib.crc32
    topic_names: dict[bytes, str] = {}
    hosts: dict[bytes, str] = {}
    with_store = cols.with_store
    taken = 0
    while pos < end and (max_records is None or taken < max_records):
        if end - pos < 8:
            if not any(buf[pos:end]):
                return pos, True
            raise RecordDecodeError(pos, f"{end - pos} trailing bytes")
        size, magic = _PREFIX.unpack_from(buf, pos)
        if magic != MESSAGE_MAGIC:
            if magic == BLANK_MAGIC or (size == 0 and magic == 0):
                return pos, True
            raise RecordDecodeError(pos, f"bad magic {magic:#x}")
        if size < MIN_RECORD_SIZE or pos + size > end:
            raise RecordDecodeError(pos, f"bad record size {size}")
        (_, _, crc, queue_id, _flag, queue_offset, physical, born, stored, bh, sh, blen) = unpack(
            buf, pos
        )
        rec_end = pos + size
        if crc32(view[pos + 12 : rec_end]) != crc:
            raise RecordDecodeError(pos, "CRC mismatch")
        body_end = pos + HEAD_SIZE + blen
        if body_end + 4 > rec_end:
            raise RecordDecodeError(pos, f"body length {blen} overruns the record")
        (tl,) = u16(buf, body_end)
        tp = body_end + 2 + tl
        if tp + 2 > rec_end:
            raise RecordDecodeError(pos, "topic length overruns the record")
        (pl,) = u16(buf, tp)
        if tp + 2 + pl != rec_end:
            raise RecordDecodeError(pos, "record layout does not match its size")
        raw_topic = buf[body_end + 2 : tp]
        name = topic_names.get(raw_topic)
        if name is None:
            try:
                name = topic_names[raw_topic] = raw_topic.decode()
            except UnicodeDecodeError:
                raise RecordDecodeError(pos, "topic is not UTF-8") from None
        if topic is not None and name != topic:
            pos = rec_end
            continue
        if expect_offset is not None and queue_offset != expect_offset + taken:
            raise RecordDecodeError(
                pos, f"queue offset {queue_offset} where {expect_offset + taken} was expected"
            )
        key = tag = None
        if pl:
            try:
                text = buf[tp + 2 : rec_end].decode()
            except UnicodeDecodeError:
                raise RecordDecodeError(pos, "properties are not UTF-8") from None
            for item in text.split(_PROP_SEP):
                if item:
                    k, _, v = item.partition(_NAME_SEP)
                    if k == PROP_KEYS:
                        key = v or None
                    elif k == PROP_TAGS:
                        tag = v or None
                    else:
                        cols.prop_keys.append(k)
                        cols.prop_values.append(v)
        cols.topics.append(name)
        cols.queue_ids.append(queue_id)
        cols.queue_offsets.append(queue_offset)
        cols.msg_ids.append((sh + physical.to_bytes(8, "big")).hex().upper())
        cols.keys.append(key)
        cols.tags.append(tag)
        cols.bodies.append(buf[pos + HEAD_SIZE : body_end])
        cols.prop_offsets.append(len(cols.prop_keys))
        cols.born.append(born)
        cols.store.append(stored)
        if with_store:
            cols.physical.append(physical)
            cols.sizes.append(size)
            cols.born_hosts.append(_host(hosts, bh))
            cols.store_hosts.append(_host(hosts, sh))
        taken += 1
        pos = rec_end
    return pos, pos >= end


def _host(cache: dict[bytes, str], raw: bytes) -> str:
    name = cache.get(raw)
    if name is None:
        name = cache[raw] = unpack_host(raw)
    return name


def _timestamps(millis: list[int], ts_type: pa.DataType) -> pa.Array:
    import pyarrow as pa
    import pyarrow.compute as pc

    return pc.multiply(pa.array(millis, pa.int64()), 1000).cast(ts_type)
