"""The message record: how one message is laid out in the CommitLog and in pull bodies.

A record is self-describing, so a slave can rebuild its ConsumeQueues by replaying bytes and a
consumer can decode a pull body without any other metadata. All integers are big-endian::

    offset size  field
    0      4     totalSize        uint32, the whole record including this field
    4      4     magic            MESSAGE_MAGIC (or BLANK_MAGIC for a segment's blank tail)
    8      4     crc              CRC32 of bytes [12, totalSize)
    12     4     queueId          int32
    16     4     flag             int32 (application flag)
    20     8     queueOffset      int64, position in the ConsumeQueue
    28     8     physicalOffset   int64, position in the CommitLog
    36     8     bornTimestamp    int64, ms since the epoch, set by the producer
    44     8     storeTimestamp   int64, ms since the epoch, set by the broker
    52     8     bornHost         IPv4 (4 bytes) + port (uint32)
    60     8     storeHost        IPv4 (4 bytes) + port (uint32)
    68     4     bodyLength       uint32
    72     n     body
    ..     2     topicLength      uint16
    ..     t     topic            UTF-8
    ..     2     propertiesLength uint16
    ..     p     properties       UTF-8, "key\\x01value\\x02" repeated

A blank record (``BLANK_MAGIC``) fills the tail of a segment: its totalSize covers every remaining
byte of the segment and nothing else in it is meaningful. Keys and tags travel as the properties
``KEYS`` and ``TAGS``. The message id is the hex of storeHost (8 bytes) and physicalOffset.
"""

from __future__ import annotations

import socket
import struct
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

MESSAGE_MAGIC: Final = 0xDAA320A7
BLANK_MAGIC: Final = 0xCBD43194
HEAD_SIZE: Final = 72
MIN_RECORD_SIZE: Final = HEAD_SIZE + 4
MAX_PROPERTIES_BYTES: Final = 0xFFFF
MAX_TOPIC_BYTES: Final = 0xFFFF
PROP_KEYS: Final = "KEYS"
PROP_TAGS: Final = "TAGS"
PROP_PRODUCER_SEQ: Final = "__PSEQ"
"""An idempotent producer's request a record was stored by (protocol/idempotence.py)."""
_SEQ_NAME: Final = PROP_PRODUCER_SEQ.encode() + b"\x01"
_SEQ_NAME_LEN: Final = len(_SEQ_NAME)

_HEAD = struct.Struct(">IIIiiqqqq8s8sI")
DISPATCH_HEAD: Final = struct.Struct(">IIIi4xqq8xq16xI")
"""The head fields replay needs, the rest skipped: totalSize, magic, crc, queueId,
queueOffset, physicalOffset, storeTimestamp, bodyLength."""
_PREFIX = struct.Struct(">II")
_U16 = struct.Struct(">H")
_HOST = struct.Struct(">4sI")
_MSGID = struct.Struct(">8sq")
_NAME_SEP = "\x01"
_PROP_SEP = "\x02"


class RecordError(ValueError):
    """Bytes that are not a valid record (bad magic, size, CRC or layout)."""


@dataclass(slots=True, kw_only=True)
class Message:
    """A message as a producer gives it."""

    topic: str
    body: bytes
    keys: str = ""
    tags: str = ""
    properties: dict[str, str] = field(default_factory=dict)
    flag: int = 0
    born_timestamp: int = 0
    born_host: str = ""
    seq_property: bytes = b""
    """The broker's :data:`PROP_PRODUCER_SEQ` property, encoded (``__PSEQ\x01<value>\x02``):
    set by the send path on an idempotent producer's message that has no properties of its own
    (the others carry it in :attr:`properties`), written by ``MessageStore.put`` into the
    record's properties before KEYS and TAGS: the same bytes as the property in the dict gives,
    without the dict. Never sent on the wire."""

    def __init__(
        self,
        *,
        topic: str,
        body: bytes,
        keys: str = "",
        tags: str = "",
        properties: dict[str, str] | None = None,
        flag: int = 0,
        born_timestamp: int = 0,
        born_host: str = "",
        seq_property: bytes = b"",
    ) -> None:
        # Written out, as Frame's is (protocol/remoting.py): a native constructor compiled.
        # ``properties`` left out is a fresh dict, as the default_factory gave.
        self.topic = topic
        self.body = body
        self.keys = keys
        self.tags = tags
        self.properties = {} if properties is None else properties
        self.flag = flag
        self.born_timestamp = born_timestamp
        self.born_host = born_host
        self.seq_property = seq_property

    def all_properties(self) -> dict[str, str]:
        props = dict(self.properties)
        if self.keys:
            props[PROP_KEYS] = self.keys
        if self.tags:
            props[PROP_TAGS] = self.tags
        return props


class MessageRecord:
    """A message as stored: everything in the record, decoded.

    Hosts and properties are kept raw and decoded on first use: a consumer that reads only bodies
    and offsets never pays for them.
    """

    __slots__ = (
        "_born_host",
        "_props",
        "_props_raw",
        "_pseq",
        "_store_host",
        "body",
        "born_timestamp",
        "flag",
        "physical_offset",
        "queue_id",
        "queue_offset",
        "size",
        "store_timestamp",
        "topic",
    )

    def __init__(
        self,
        *,
        topic: str,
        queue_id: int,
        queue_offset: int,
        physical_offset: int,
        size: int,
        flag: int,
        born_timestamp: int,
        store_timestamp: int,
        born_host_raw: bytes,
        store_host_raw: bytes,
        body: bytes,
        properties_raw: bytes,
    ) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.queue_offset = queue_offset
        self.physical_offset = physical_offset
        self.size = size
        self.flag = flag
        self.born_timestamp = born_timestamp
        self.store_timestamp = store_timestamp
        self._born_host = born_host_raw
        self._store_host = store_host_raw
        self.body = body
        self._props_raw = properties_raw
        self._props: dict[str, str] | None = None
        self._pseq: str | None = None

    @property
    def properties(self) -> dict[str, str]:
        """The record's properties, but for :data:`PROP_PRODUCER_SEQ` (the broker's own, not
        the message's: :attr:`producer_seq`)."""
        props = self._props
        if props is None:
            try:
                props = decode_properties(self._props_raw)
            except UnicodeDecodeError:
                raise RecordError("record properties are not UTF-8") from None
            self._pseq = props.pop(PROP_PRODUCER_SEQ, None)
            self._props = props
        return props

    @property
    def producer_seq(self) -> str | None:
        """The :data:`PROP_PRODUCER_SEQ` value the record was stored with (an idempotent
        producer's request), None without."""
        if self._props is None:
            self.properties  # noqa: B018  # decodes them
        return self._pseq

    @property
    def born_host(self) -> str:
        return unpack_host(self._born_host)

    @property
    def store_host(self) -> str:
        return unpack_host(self._store_host)

    @property
    def keys(self) -> str:
        return self.properties.get(PROP_KEYS, "")

    @property
    def tags(self) -> str:
        return self.properties.get(PROP_TAGS, "")

    @property
    def msg_id(self) -> str:
        return _MSGID.pack(self._store_host, self.physical_offset).hex().upper()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MessageRecord):
            return NotImplemented
        return all(getattr(self, a) == getattr(other, a) for a in _COMPARED)

    def __repr__(self) -> str:
        return (
            f"MessageRecord(topic={self.topic!r}, queue_id={self.queue_id}, "
            f"queue_offset={self.queue_offset}, physical_offset={self.physical_offset}, "
            f"size={self.size}, body={self.body[:32]!r})"
        )


# What two records are equal by: every slot but the decoded-on-demand properties. Spelled out:
# a compiled (mypyc) class has no ``__slots__`` to read at run time.
_COMPARED: Final = (
    "_born_host",
    "_props_raw",
    "_store_host",
    "body",
    "born_timestamp",
    "flag",
    "physical_offset",
    "queue_id",
    "queue_offset",
    "size",
    "store_timestamp",
    "topic",
)


def encode_properties(props: Mapping[str, str]) -> bytes:
    if not props:
        return b""
    text = "".join(f"{k}{_NAME_SEP}{v}{_PROP_SEP}" for k, v in props.items())
    return text.encode()


def decode_properties(raw: bytes) -> dict[str, str]:
    return _split_properties(raw.decode()) if raw else {}


def _split_properties(text: str) -> dict[str, str]:
    props: dict[str, str] = {}
    for item in text.split(_PROP_SEP):
        if item:
            key, _, value = item.partition(_NAME_SEP)
            props[key] = value
    return props


def pack_host(host: str) -> bytes:
    """Pack "a.b.c.d:port" into 8 bytes; anything that is not IPv4 packs as zeros."""
    addr, _, port = host.rpartition(":")
    try:
        return _HOST.pack(socket.inet_aton(addr), int(port))
    except (OSError, ValueError, struct.error):
        return bytes(8)


def unpack_host(raw: bytes) -> str:
    ip, port = _HOST.unpack(raw)
    return f"{socket.inet_ntoa(ip)}:{port}"


def make_msg_id(store_host: str, physical_offset: int) -> str:
    return _MSGID.pack(pack_host(store_host), physical_offset).hex().upper()


class MsgIdMaker:
    """Message ids for one store host, with the host packed once (the send path's version)."""

    __slots__ = ("_host", "_prefix")

    def __init__(self, store_host: str) -> None:
        self._host = pack_host(store_host)
        self._prefix = self._host.hex().upper()

    def __call__(self, physical_offset: int) -> str:
        return _MSGID.pack(self._host, physical_offset).hex().upper()

    def many(self, physical_offsets: Sequence[int]) -> tuple[str, ...]:
        """The ids of a batch's records, in order: the offsets packed and made hex at once,
        each id the host's hex and its offset's 16 digits."""
        n = len(physical_offsets)
        digits = struct.pack(f">{n}q", *physical_offsets).hex().upper()
        prefix = self._prefix
        return tuple([prefix + digits[i : i + 16] for i in range(0, 16 * n, 16)])


def parse_msg_id(msg_id: str) -> tuple[str, int]:
    """Inverse of :func:`make_msg_id`: (store host, physical offset)."""
    try:
        raw = bytes.fromhex(msg_id)
        host, offset = _MSGID.unpack(raw)
    except (ValueError, struct.error):
        raise RecordError(f"not a message id: {msg_id!r}") from None
    return unpack_host(host), int(offset)


def tag_hash(tags: str) -> int:
    """The ConsumeQueue's tag hash: stable across processes and versions."""
    return zlib.crc32(tags.encode()) if tags else 0


class RecordEncoder:
    """Encodes messages into records for a given store host.

    Encoding is split so the store can assign offsets while appending: :meth:`encode` takes the
    offsets, so one call writes final bytes with a final CRC.
    """

    __slots__ = ("_store_host",)

    def __init__(self, store_host: str) -> None:
        self._store_host = pack_host(store_host)

    def encoded_size(self, topic_raw: bytes, body: bytes, props_raw: bytes) -> int:
        return HEAD_SIZE + len(body) + 2 + len(topic_raw) + 2 + len(props_raw)

    def encode_into(
        self,
        buf: bytearray | memoryview,
        pos: int,
        *,
        topic_raw: bytes,
        props_raw: bytes,
        body: bytes,
        queue_id: int,
        queue_offset: int,
        physical_offset: int,
        flag: int,
        born_timestamp: int,
        store_timestamp: int,
        born_host_raw: bytes,
    ) -> int:
        """Write one record at ``buf[pos:]``; return its size."""
        blen = len(body)
        size = HEAD_SIZE + blen + 4 + len(topic_raw) + len(props_raw)
        end_head = pos + HEAD_SIZE
        _HEAD.pack_into(
            buf,
            pos,
            size,
            MESSAGE_MAGIC,
            0,
            queue_id,
            flag,
            queue_offset,
            physical_offset,
            born_timestamp,
            store_timestamp,
            born_host_raw,
            self._store_host,
            blen,
        )
        buf[end_head : end_head + blen] = body
        p = end_head + blen
        tl = len(topic_raw)
        _U16.pack_into(buf, p, tl)
        buf[p + 2 : p + 2 + tl] = topic_raw
        p += 2 + tl
        pl = len(props_raw)
        _U16.pack_into(buf, p, pl)
        buf[p + 2 : p + 2 + pl] = props_raw
        crc = zlib.crc32(memoryview(buf)[pos + 12 : pos + size])
        struct.pack_into(">I", buf, pos + 8, crc)
        return size

    def encode(
        self,
        msg: Message,
        *,
        queue_id: int,
        queue_offset: int,
        physical_offset: int,
        store_timestamp: int,
    ) -> bytes:
        """Encode one message into a fresh bytes object (convenient, not the hot path)."""
        topic_raw = msg.topic.encode()
        props_raw = encode_properties(msg.all_properties())
        check_sizes(topic_raw, props_raw)
        buf = bytearray(self.encoded_size(topic_raw, msg.body, props_raw))
        self.encode_into(
            buf,
            0,
            topic_raw=topic_raw,
            props_raw=props_raw,
            body=msg.body,
            queue_id=queue_id,
            queue_offset=queue_offset,
            physical_offset=physical_offset,
            flag=msg.flag,
            born_timestamp=msg.born_timestamp,
            store_timestamp=store_timestamp,
            born_host_raw=pack_host(msg.born_host),
        )
        return bytes(buf)


def message_copy(src: Message | MessageRecord, topic: str, properties: dict[str, str]) -> Message:
    """A new message for ``topic`` with ``properties`` and ``src``'s body, keys, tags, flag and
    birth (timestamp and host): what the broker stores when it re-publishes a message under
    another topic (retry, dead letter, scheduled, transaction half and commit, DLQ re-send).

    A copy of a stored record drops :data:`PROP_PRODUCER_SEQ`: it is no send of the producer's
    (a message with a delivery time or a half is copied from the send itself, and keeps it)."""
    if PROP_PRODUCER_SEQ in properties and isinstance(src, MessageRecord):
        properties = {k: v for k, v in properties.items() if k != PROP_PRODUCER_SEQ}
    return Message(
        topic=topic,
        body=src.body,
        keys=src.keys,
        tags=src.tags,
        properties=properties,
        flag=src.flag,
        born_timestamp=src.born_timestamp,
        born_host=src.born_host,
    )


def check_sizes(topic_raw: bytes, props_raw: bytes) -> None:
    if not topic_raw or len(topic_raw) > MAX_TOPIC_BYTES:
        raise RecordError("topic must be 1..65535 bytes")
    if len(props_raw) > MAX_PROPERTIES_BYTES:
        raise RecordError("properties exceed 65535 bytes")


def encode_blank(size: int) -> bytes:
    """A blank record covering ``size`` bytes (at least 8) at a segment's tail."""
    if size < 8:
        raise RecordError("a blank record needs at least 8 bytes")
    return _PREFIX.pack(size, BLANK_MAGIC) + bytes(size - 8)


@dataclass(slots=True, frozen=True)
class RecordInfo:
    """What the ConsumeQueue dispatcher needs of a record, read without copying the body."""

    size: int
    topic: str
    queue_id: int
    queue_offset: int
    physical_offset: int
    store_timestamp: int
    tags_hash: int

    def __init__(
        self,
        size: int,
        topic: str,
        queue_id: int,
        queue_offset: int,
        physical_offset: int,
        store_timestamp: int,
        tags_hash: int,
    ) -> None:
        # Written out, as Frame's is (protocol/remoting.py): one is made per record dispatched.
        # Frozen: object.__setattr__ passes the dataclass's refusal in pure Python, and mypyc
        # compiles it to a native store.
        object.__setattr__(self, "size", size)
        object.__setattr__(self, "topic", topic)
        object.__setattr__(self, "queue_id", queue_id)
        object.__setattr__(self, "queue_offset", queue_offset)
        object.__setattr__(self, "physical_offset", physical_offset)
        object.__setattr__(self, "store_timestamp", store_timestamp)
        object.__setattr__(self, "tags_hash", tags_hash)


def peek_prefix(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """(totalSize, magic) of the record at ``pos``."""
    size, magic = _PREFIX.unpack_from(buf, pos)
    return int(size), int(magic)


def check_record(buf: bytes | bytearray | memoryview, pos: int, limit: int) -> int:
    """Validate the message record at ``buf[pos:limit]`` (magic, size, CRC); return its size.

    Raises :class:`RecordError` naming what is wrong. Blank records are not accepted here.
    """
    if limit - pos < MIN_RECORD_SIZE:
        raise RecordError(f"truncated record at {pos}")
    size, magic = _PREFIX.unpack_from(buf, pos)
    if magic != MESSAGE_MAGIC:
        raise RecordError(f"bad magic {magic:#x} at {pos}")
    if size < MIN_RECORD_SIZE or pos + size > limit:
        raise RecordError(f"bad record size {size} at {pos}")
    (crc,) = struct.unpack_from(">I", buf, pos + 8)
    if zlib.crc32(memoryview(buf)[pos + 12 : pos + size]) != crc:
        raise RecordError(f"CRC mismatch at {pos}")
    return int(size)


def read_info(buf: bytes | bytearray | memoryview, pos: int, size: int) -> RecordInfo:
    """Dispatch info of a record already validated by :func:`check_record`."""
    try:
        _size, _magic, _crc, queue_id, queue_offset, physical_offset, store_ts, blen = (
            DISPATCH_HEAD.unpack_from(buf, pos)
        )
    except struct.error:
        raise RecordError(f"malformed record layout at {pos}") from None
    tail = pos + HEAD_SIZE + blen
    try:
        topic, tags_hash = read_tail(bytes(buf[tail : pos + size]))
    except RecordError as exc:
        raise RecordError(f"{exc} at {pos}") from None
    return RecordInfo(
        size=size,
        topic=topic,
        queue_id=queue_id,
        queue_offset=queue_offset,
        physical_offset=physical_offset,
        store_timestamp=store_ts,
        tags_hash=tags_hash,
    )


def read_tail(tail: bytes) -> tuple[str, int]:
    """(topic, tag hash) of a record from its tail: the bytes from topicLength to its end.

    Raises :class:`RecordError` when the lengths do not add up to the tail or the topic or
    properties are not UTF-8.
    """
    topic, tags = read_tail_tags(tail)
    return topic, tag_hash(tags)


def record_tags(buf: bytes | bytearray | memoryview, pos: int = 0) -> str:
    """The ``TAGS`` of the (checked) record at ``pos``, read from its tail without decoding
    the rest. Raises :class:`RecordError` as :func:`read_tail`."""
    size, _m, _c, _q, _o, _p, _t, blen = DISPATCH_HEAD.unpack_from(buf, pos)
    return read_tail_tags(bytes(buf[pos + HEAD_SIZE + blen : pos + size]))[1]


def read_tail_tags(tail: bytes) -> tuple[str, str]:
    """(topic, tags) of a record from its tail (see :func:`read_tail`)."""
    topic, text = _tail_texts(tail)
    # Only a text holding "TAGS" can have the key: skip splitting the rest.
    return topic, _split_properties(text).get(PROP_TAGS, "") if PROP_TAGS in text else ""


def read_tail_properties(tail: bytes) -> tuple[str, dict[str, str]]:
    """(topic, properties) of a record from its tail (see :func:`read_tail`), the properties
    decoded once for a caller that needs more of them than the tags."""
    topic, text = _tail_texts(tail)
    return topic, _split_properties(text) if text else {}


def _tail_texts(tail: bytes) -> tuple[str, str]:
    """(topic, properties text) of a record tail, its lengths checked."""
    end = len(tail)
    if end < 4:
        raise RecordError("record layout does not match its size")
    (tl,) = _U16.unpack_from(tail, 0)
    props_at = 2 + tl + 2
    if props_at > end or _U16.unpack_from(tail, props_at - 2)[0] != end - props_at:
        raise RecordError("record layout does not match its size")
    try:
        topic = tail[2 : 2 + tl].decode()
    except UnicodeDecodeError:
        raise RecordError("record topic is not UTF-8") from None
    if props_at == end:
        return topic, ""
    try:
        text = tail[props_at:].decode()
    except UnicodeDecodeError:
        raise RecordError("record properties are not UTF-8") from None
    return topic, text


def seq_blind(tail: bytes) -> bytes | None:
    """A record tail (topic and properties, as :func:`read_tail`) without the value of its
    :data:`PROP_PRODUCER_SEQ` property (:func:`seq_value_span`); None when
    :func:`seq_value_span` finds none. Two tails with the same result differ in that value
    alone: the slave's replay (``storage.dispatch.Replayer``) describes an idempotent
    producer's records on one topic once by it."""
    span = seq_value_span(tail)
    if span is None:
        return None
    start, stop = span
    return tail[:start] + tail[stop:]


def seq_value_span(tail: bytes) -> tuple[int, int] | None:
    """Where the value of a record tail's :data:`PROP_PRODUCER_SEQ` property is, ``(start,
    stop)``: the first such property at a property's start. None when it has none, when the
    value is not what a broker writes (digits and dots) or when the properties' length is not
    the tail's rest (the lengths :func:`_tail_texts` checks), so that a tail that would not
    decode is described on its own and refused as before. Read byte by byte (compiled: native
    reads, no method called) where a broker puts the property for a message without
    properties of its own, first; looked for elsewhere only when it is not there."""
    end = len(tail)
    if end < 4:
        return None
    props_at = ((tail[0] << 8) | tail[1]) + 4
    if props_at > end or ((tail[props_at - 2] << 8) | tail[props_at - 1]) != end - props_at:
        return None
    at = props_at
    if not _seq_name_at(tail, at):
        at = tail.find(_SEQ_NAME, props_at)
        while at > props_at and tail[at - 1] != 2:  # inside another property: look further
            at = tail.find(_SEQ_NAME, at + 1)
        if at < 0:
            return None
    start = at + _SEQ_NAME_LEN
    stop = _value_end(tail, start, end)
    return None if stop < 0 else (start, stop)


def seq_value_at(tail: bytes, start: int, stop: int) -> bool:
    """Is ``tail[start:stop]`` all digits and dots, as a :data:`PROP_PRODUCER_SEQ` value a
    broker writes? With ``tail`` as long as one whose value :func:`seq_value_span` found at
    ``(start, stop)``, the same bytes before ``start`` and from ``stop`` on, the two tails
    differ in that value alone, and have the same :func:`seq_blind` form: the replay's
    shortcut for an idempotent producer's records (``storage.dispatch.Replayer``), no blind
    copy built."""
    return _value_end(tail, start, stop) == stop


def _value_end(tail: bytes, start: int, end: int) -> int:
    """Where the run of digits and dots (a :data:`PROP_PRODUCER_SEQ` value as a broker writes
    it) from ``start`` ends: at the first ``\x02`` (the property's end) or at ``end``; -1 at
    any other byte before them. Read byte by byte (compiled: native reads, no method called)."""
    i = start
    while i < end:
        b = tail[i]
        if b == 2:
            return i
        if b != 46 and not 48 <= b <= 57:  # a dot or a digit
            return -1
        i += 1
    return end


def _seq_name_at(tail: bytes, at: int) -> bool:
    """Does ``tail`` hold the property's name and separator (:data:`_SEQ_NAME`) at ``at``?"""
    if at + _SEQ_NAME_LEN > len(tail):
        return False
    return all(tail[at + i] == _SEQ_NAME[i] for i in range(_SEQ_NAME_LEN))


def decode_record(buf: bytes | bytearray | memoryview, pos: int = 0) -> MessageRecord:
    """Decode the full record at ``pos`` (magic, size and CRC checked)."""
    limit = len(buf)
    if limit - pos < MIN_RECORD_SIZE:
        raise RecordError(f"truncated record at {pos}")
    (
        size,
        magic,
        crc,
        queue_id,
        flag,
        queue_offset,
        physical_offset,
        born_ts,
        store_ts,
        born_host,
        store_host,
        blen,
    ) = _HEAD.unpack_from(buf, pos)
    if magic != MESSAGE_MAGIC:
        raise RecordError(f"bad magic {magic:#x} at {pos}")
    end = pos + size
    if size < MIN_RECORD_SIZE or end > limit:
        raise RecordError(f"bad record size {size} at {pos}")
    view = memoryview(buf)
    if zlib.crc32(view[pos + 12 : end]) != crc:
        raise RecordError(f"CRC mismatch at {pos}")
    p = pos + HEAD_SIZE + blen
    if p + 4 > end:
        raise RecordError(f"body length {blen} overruns record at {pos}")
    (tl,) = _U16.unpack_from(buf, p)
    tp = p + 2 + tl
    if tp + 2 > end:
        raise RecordError(f"topic length overruns record at {pos}")
    (pl,) = _U16.unpack_from(buf, tp)
    if tp + 2 + pl != end:
        raise RecordError(f"record layout does not match its size at {pos}")
    try:
        topic = bytes(view[p + 2 : tp]).decode()
    except UnicodeDecodeError:
        raise RecordError(f"record topic is not UTF-8 at {pos}") from None
    return MessageRecord(
        topic=topic,
        queue_id=queue_id,
        queue_offset=queue_offset,
        physical_offset=physical_offset,
        size=size,
        flag=flag,
        born_timestamp=born_ts,
        store_timestamp=store_ts,
        born_host_raw=born_host,
        store_host_raw=store_host,
        body=bytes(view[pos + HEAD_SIZE : p]),
        properties_raw=bytes(view[tp + 2 : end]),
    )


def iter_records(buf: bytes | bytearray | memoryview) -> Iterator[MessageRecord]:
    """Decode a pull body: message records back to back (blank records are skipped)."""
    pos = 0
    end = len(buf)
    while pos < end:
        if end - pos < 8:
            raise RecordError(f"trailing {end - pos} bytes at {pos}")
        size, magic = _PREFIX.unpack_from(buf, pos)
        if magic == BLANK_MAGIC:
            if size < 8:
                raise RecordError(f"bad blank size {size} at {pos}")
            pos += size
            continue
        rec = decode_record(buf, pos)
        yield rec
        pos += rec.size
