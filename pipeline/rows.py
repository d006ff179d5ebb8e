"""The schema of the ``rmq`` and ``rmqstore`` sources, and records decoded into Arrow batches.

docs/pipeline.md: topic, brokerName, queueId, queueOffset, msgId, keys, tags, body (binary),
properties (map), bornTimestamp, storeTimestamp, and the Kafka source's timestamp and
timestampType (0: ``timestamp`` is the born time, Kafka's CreateTime; 1: the store time,
LogAppendTime; the read option ``timestampType`` picks). Keys and tags are null when the message
has none; ``properties`` holds the application's properties (keys and tags have their own
columns).
Timestamps are Spark timestamps (UTC) from the broker's milliseconds.

``rmqstore`` adds what an audit of a CommitLog needs: physicalOffset, size, bornHost, storeHost.

Decoding is in two steps, so a Spark task does little per-message Python work: :func:`scan` walks
the records (the size field chains them) checking magic, size and CRC; :func:`to_batch` then
takes every fixed field of all records at once with numpy (the record layout is
protocol/message.py's), joins the bodies into one buffer and builds the Arrow columns from
buffers. Only properties (keys, tags, the application's) are parsed per message, and only for
messages that have any.
"""

from __future__ import annotations

import mmap
import struct
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from protocol.message import (
    BLANK_MAGIC,
    HEAD_SIZE,
    MESSAGE_MAGIC,
    MIN_RECORD_SIZE,
    PROP_KEYS,
    PROP_PRODUCER_SEQ,
    PROP_TAGS,
    unpack_host,
)

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

_PREFIX: Final = struct.Struct(">III")  # totalSize, magic, crc
# Field offsets in a record (protocol/message.py's layout).
_QUEUE_ID: Final = 12
_QUEUE_OFFSET: Final = 20
_PHYSICAL: Final = 28
_BORN_TS: Final = 36
_STORE_TS: Final = 44
_BORN_HOST: Final = 52
_STORE_HOST: Final = 60
_BODY_LEN: Final = 68
_NAME_SEP: Final = "\x01"
_PROP_SEP: Final = "\x02"


def message_schema(*, store: bool = False, properties: bool = True) -> StructType:
    """The Spark schema of ``rmq`` (``store``: of ``rmqstore``; ``properties`` false: without
    the properties column, option includeProperties)."""
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
        StructField("timestamp", TimestampType(), False),
        StructField("timestampType", IntegerType(), False),
    ]
    if not properties:
        fields = [f for f in fields if f.name != "properties"]
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


def check_schema(schema: StructType, *, store: bool = False, properties: bool = True) -> None:
    """A user-given schema must be the source's own (the columns are fixed)."""
    from pipeline.errors import OptionError

    expected = message_schema(store=store, properties=properties)
    if schema != expected:
        raise OptionError(
            "this source has a fixed schema; do not pass one to .schema() "
            f"(expected {expected.simpleString()}, got {schema.simpleString()})"
        )


class RecordDecodeError(ValueError):
    """Bytes that are not a valid record where one was expected."""

    def __init__(self, pos: int, what: str, index: int = 0) -> None:
        super().__init__(f"{what} at byte {pos}")
        self.pos = pos
        self.what = what
        #: how many records before this one are good
        self.index = index


@dataclass(slots=True)
class Scan:
    """Where the records of a buffer start, as far as they are valid."""

    positions: list[int]
    #: the position after the last record scanned
    pos: int
    #: the data ended (end of the buffer, a blank tail, or never-written zeros)
    ended: bool
    #: the first bad record, if scanning stopped at one
    error: RecordDecodeError | None = None


def scan(
    buf: bytes | mmap.mmap, pos: int = 0, end: int | None = None, max_records: int | None = None
) -> Scan:
    """Walk the records of ``buf[pos:end]`` checking magic, size and CRC, up to ``max_records``.

    A blank record (a segment's tail) or a zero size (pre-allocated, never written) ends the
    data. A bad record stops the scan with ``error`` set; the records before it are good.
    """
    end = len(buf) if end is None else end
    limit = end if max_records is None else max_records
    positions: list[int] = []
    prefix = _PREFIX.unpack_from
    crc32 = zlib.crc32
    with memoryview(buf) as view:  # released on return, so an mmap can close
        while pos < end and len(positions) < limit:
            if end - pos < 12:
                if not any(buf[pos:end]):
                    return Scan(positions, pos, True)
                return Scan(positions, pos, False, _bad(pos, "truncated record", positions))
            size, magic, crc = prefix(buf, pos)
            if magic != MESSAGE_MAGIC:
                if magic == BLANK_MAGIC or (size == 0 and magic == 0):
                    return Scan(positions, pos, True)
                return Scan(positions, pos, False, _bad(pos, f"bad magic {magic:#x}", positions))
            if size < MIN_RECORD_SIZE or pos + size > end:
                return Scan(positions, pos, False, _bad(pos, f"bad record size {size}", positions))
            if crc32(view[pos + 12 : pos + size]) != crc:
                return Scan(positions, pos, False, _bad(pos, "CRC mismatch", positions))
            positions.append(pos)
            pos += size
    return Scan(positions, pos, pos >= end)


def _bad(pos: int, what: str, positions: list[int]) -> RecordDecodeError:
    return RecordDecodeError(pos, what, len(positions))


def to_batch(
    buf: bytes,
    positions: list[int],
    schema: pa.Schema,
    broker: str,
    *,
    topic: str | None = None,
    only_topic: str | None = None,
    expect_offset: int | None = None,
    timestamp_type: int = 0,
) -> pa.RecordBatch:
    """One Arrow batch of the (scanned) records at ``positions`` of ``buf``.

    ``topic``: every record must be of this topic (a queue's records); ``only_topic``: keep only
    that topic's records (a CommitLog's); ``expect_offset``: the records must carry consecutive
    queue offsets from it; ``timestamp_type``: what the ``timestamp`` column holds (0 the born
    time, 1 the store time). The ``rmqstore`` columns are added when ``schema`` has them.
    Raises :class:`RecordDecodeError` for a record whose layout does not hold together.
    ``buf`` is bytes, not an mmap: numpy's view of it would keep an mmap from closing.
    """
    import numpy as np
    import pyarrow as pa

    n = len(positions)
    arr = np.frombuffer(buf, dtype=np.uint8)
    p = np.fromiter(positions, dtype=np.int64, count=n)

    def at(starts: Any, width: int, dtype: str) -> Any:
        """The big-endian integers of ``width`` bytes at absolute positions ``starts``."""
        idx = starts[:, None] + np.arange(width, dtype=np.int64)
        return arr[idx].view(dtype).reshape(n).astype(np.int64)

    def field(offset: int, width: int, dtype: str) -> Any:
        return at(p + offset, width, dtype)

    sizes = field(0, 4, ">u4")
    body_len = field(_BODY_LEN, 4, ">u4")
    topic_at = p + HEAD_SIZE + body_len
    ends = p + sizes
    _check(topic_at + 4 <= ends, p, "body length overruns the record")
    topic_len = at(topic_at, 2, ">u2")
    props_at = topic_at + 2 + topic_len
    _check(props_at + 2 <= ends, p, "topic length overruns the record")
    props_len = at(props_at, 2, ">u2")
    _check(props_at + 2 + props_len == ends, p, "record layout does not match its size")
    queue_offsets = field(_QUEUE_OFFSET, 8, ">i8")
    if expect_offset is not None:
        wrong = queue_offsets != expect_offset + np.arange(n, dtype=np.int64)
        if wrong.any():
            i = int(np.argmax(wrong))
            raise RecordDecodeError(
                int(p[i]),
                f"queue offset {int(queue_offsets[i])} where {expect_offset + i} was expected",
                i,
            )
    keep: Any = None
    if topic is not None:
        raw = topic.encode()
        same = topic_len == len(raw)
        if same.all() and n:
            idx = (topic_at + 2)[:, None] + np.arange(len(raw), dtype=np.int64)
            same = (arr[idx] == np.frombuffer(raw, dtype=np.uint8)).all(axis=1)
        _check(same, p, f"record of another topic than {topic!r}")
        topics = pa.array([topic] * n, pa.string())
    else:
        names = _topic_names(buf, topic_at.tolist(), topic_len.tolist(), p)
        if only_topic is not None:
            keep = pa.array([name == only_topic for name in names], pa.bool_())
        topics = pa.array(names, pa.string())
    body_start = p + HEAD_SIZE
    body = _binary(buf, body_start.tolist(), body_len.tolist(), body_len)
    ids = np.concatenate(
        [
            arr[(p + _STORE_HOST)[:, None] + np.arange(8, dtype=np.int64)],
            arr[(p + _PHYSICAL)[:, None] + np.arange(8, dtype=np.int64)],
        ],
        axis=1,
    )
    msg_ids = pa.Array.from_buffers(
        pa.string(),
        n,
        [
            None,
            pa.py_buffer(np.arange(0, 32 * (n + 1), 32, dtype=np.int32)),
            pa.py_buffer(ids.tobytes().hex().upper().encode()),
        ],
    )
    keys, tags, props = _properties(buf, props_at + 2, props_len, schema, p)
    ts_type = schema.field("storeTimestamp").type
    columns: list[pa.Array] = [
        topics,
        pa.array([broker] * n, pa.string()),
        pa.array(field(_QUEUE_ID, 4, ">i4").astype(np.int32), pa.int32()),
        pa.array(queue_offsets, pa.int64()),
        msg_ids,
        keys,
        tags,
        body,
        *([] if props is None else [props]),
        born_ts := pa.array(field(_BORN_TS, 8, ">i8") * 1000, pa.int64()).cast(ts_type),
        store_ts := pa.array(field(_STORE_TS, 8, ">i8") * 1000, pa.int64()).cast(ts_type),
        store_ts if timestamp_type else born_ts,
        pa.array(np.full(n, timestamp_type, dtype=np.int32), pa.int32()),
    ]
    if "physicalOffset" in schema.names:  # rmqstore
        columns += [
            pa.array(field(_PHYSICAL, 8, ">i8"), pa.int64()),
            pa.array(sizes.astype(np.int32), pa.int32()),
            pa.array(_hosts(arr, p + _BORN_HOST), pa.string()),
            pa.array(_hosts(arr, p + _STORE_HOST), pa.string()),
        ]
    batch = pa.RecordBatch.from_arrays(columns, schema=schema)
    return batch if keep is None else batch.filter(keep)


def _check(ok: Any, p: Any, what: str) -> None:
    import numpy as np

    if not ok.all():
        i = int(np.argmin(ok))
        raise RecordDecodeError(int(p[i]), what, i)


def _topic_names(buf: bytes, starts: list[int], lengths: list[int], p: Any) -> list[str]:
    names: dict[bytes, str] = {}
    out: list[str] = []
    for i, (start, length) in enumerate(zip(starts, lengths, strict=True)):
        raw = buf[start + 2 : start + 2 + length]
        name = names.get(raw)
        if name is None:
            try:
                name = names[raw] = raw.decode()
            except UnicodeDecodeError:
                raise RecordDecodeError(int(p[i]), "topic is not UTF-8", i) from None
        out.append(name)
    return out


def _binary(buf: bytes, starts: list[int], lengths: list[int], lens: Any) -> pa.Array:
    """A binary column of ``buf[start:start+length]`` slices: one joined data buffer."""
    import numpy as np
    import pyarrow as pa

    offsets = np.zeros(len(starts) + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    data = b"".join([buf[s : s + n] for s, n in zip(starts, lengths, strict=True)])
    if offsets[-1] < 2**31:
        return pa.Array.from_buffers(
            pa.binary(),
            len(starts),
            [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)],
        )
    large = pa.Array.from_buffers(  # pragma: no cover - over 2 GiB in one batch
        pa.large_binary(), len(starts), [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    )
    return large.cast(pa.binary())


def _properties(
    buf: bytes, starts: Any, lengths: Any, schema: pa.Schema, p: Any
) -> tuple[pa.Array, pa.Array, pa.Array | None]:
    """keys, tags and the properties map (None when ``schema`` has no properties column),
    parsed only for the records that have properties."""
    import numpy as np
    import pyarrow as pa

    n = len(starts)
    keys: list[str | None] = [None] * n
    tags: list[str | None] = [None] * n
    counts = [0] * (n + 1)
    names: list[str] = []
    values: list[str] = []
    start_list = starts.tolist()
    length_list = lengths.tolist()
    for i in np.flatnonzero(lengths).tolist():
        start = start_list[i]
        try:
            text = buf[start : start + length_list[i]].decode()
        except UnicodeDecodeError:
            raise RecordDecodeError(int(p[i]), "properties are not UTF-8", i) from None
        before = len(names)
        for item in text.split(_PROP_SEP):
            if item:
                k, _, v = item.partition(_NAME_SEP)
                if k == PROP_KEYS:
                    keys[i] = v or None
                elif k == PROP_TAGS:
                    tags[i] = v or None
                elif k != PROP_PRODUCER_SEQ:  # the broker's (docs/idempotence.md)
                    names.append(k)
                    values.append(v)
        counts[i + 1] = len(names) - before
    if "properties" not in schema.names:
        return pa.array(keys, pa.string()), pa.array(tags, pa.string()), None
    props = pa.MapArray.from_arrays(
        pa.array(np.cumsum(np.array(counts, dtype=np.int32)), pa.int32()),
        pa.array(names, pa.string()),
        pa.array(values, pa.string()),
        type=schema.field("properties").type,
    )
    return pa.array(keys, pa.string()), pa.array(tags, pa.string()), props


def _hosts(arr: Any, starts: Any) -> list[str]:
    """The "ip:port" of the 8-byte host fields at ``starts`` (few distinct values: cached)."""
    import numpy as np

    raw = arr[starts[:, None] + np.arange(8, dtype=np.int64)].tobytes()
    cache: dict[bytes, str] = {}
    out: list[str] = []
    for i in range(0, len(raw), 8):
        key = raw[i : i + 8]
        name = cache.get(key)
        if name is None:
            name = cache[key] = unpack_host(key)
        out.append(name)
    return out
