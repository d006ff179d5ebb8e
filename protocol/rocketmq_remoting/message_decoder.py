"""RocketMQ's stored-message layout (a PULL answer's body) and the SEND_BATCH_MESSAGE body.

Stored message (``MessageDecoder.encode`` / ``decode``), every integer big-endian and signed;
a PULL_MESSAGE answer's body is such records back to back::

    0      4   totalSize                  int32, the whole record
    4      4   magicCode                  0xDAA320A7 (V1) or 0xDAA320AB (V2, see topic)
    8      4   bodyCRC                    int32, CRC-32 of the body & 0x7FFFFFFF
    12     4   queueId                    int32
    16     4   flag                       int32, the application's flag
    20     8   queueOffset                int64
    28     8   physicalOffset             int64, CommitLog offset of the record
    36     4   sysFlag                    int32, see SYSFLAG_*
    40     8   bornTimestamp              int64, ms
    48     8   bornHost                   IPv4 (4 bytes) + port (int32)
    56     8   storeTimestamp             int64, ms
    64     8   storeHost                  IPv4 (4 bytes) + port (int32)
    72     4   reconsumeTimes             int32
    76     8   preparedTransactionOffset  int64
    84     4   bodyLength                 int32
    88     b   body                       compressed when sysFlag has SYSFLAG_COMPRESSED
    ..     1|2 topicLength                V1: one byte; V2: int16
    ..     t   topic                      UTF-8
    ..     2   propertiesLength           int16
    ..     p   properties                 the properties string (protocol.rocketmq_remoting.properties)

A writer uses V1 for topics under 128 bytes and V2 from 128 on: RocketMQ reads V1's length as a
signed byte (the Node.js client ali-ons reads only V1). The hosts are 16-byte IPv6 addresses
when sysFlag bits 4 and 5 say so; we write and read IPv4 only and refuse those bits. The message
id is the hex (upper case) of storeHost's 8 bytes and physicalOffset's 8.

Batch body of SEND_BATCH_MESSAGE (``MessageDecoder.encodeMessage`` / ``decodeMessages``), one
entry per message, back to back::

    0      4   totalSize         int32, the whole entry: 20 + bodyLength + 2 + propertiesLength
    4      4   magicCode         0 (not read)
    8      4   bodyCRC           0 (not read)
    12     4   flag              int32
    16     4   bodyLength        int32
    20     b   body
    ..     2   propertiesLength  int16
    ..     p   properties

Bytes that do not follow these layouts raise :class:`MessageLayoutError` (a request's body: the
answer is an error code, the connection stays).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final

from protocol.message import make_msg_id, pack_host, unpack_host
from protocol.rocketmq_remoting.properties import decode_properties, encode_properties

__all__ = [
    "BATCH_HEAD_SIZE",
    "MAGIC_V1",
    "MAGIC_V2",
    "STORED_HEAD_SIZE",
    "SYSFLAG_BORNHOST_V6",
    "SYSFLAG_COMPRESSED",
    "SYSFLAG_STOREHOST_V6",
    "BatchMessage",
    "MessageLayoutError",
    "StoredMessage",
    "body_crc",
    "decode_batch",
    "decode_stored",
    "decode_stored_messages",
    "encode_batch",
    "encode_stored",
    "encode_stored_messages",
    "inflate_body",
]

MAGIC_V1: Final = 0xDAA320A7
MAGIC_V2: Final = 0xDAA320AB
V2_TOPIC_BYTES: Final = 128
"""Topics of this many UTF-8 bytes or more are written with MAGIC_V2."""

SYSFLAG_COMPRESSED: Final = 0x1
SYSFLAG_MULTI_TAGS: Final = 0x2
SYSFLAG_TRANSACTION_PREPARED: Final = 0x1 << 2
SYSFLAG_TRANSACTION_COMMIT: Final = 0x2 << 2
SYSFLAG_TRANSACTION_ROLLBACK: Final = 0x3 << 2
SYSFLAG_TRANSACTION_MASK: Final = 0x3 << 2
SYSFLAG_BORNHOST_V6: Final = 0x1 << 4
SYSFLAG_STOREHOST_V6: Final = 0x1 << 5
SYSFLAG_COMPRESSION_TYPE_MASK: Final = 0x7 << 8
"""Bits 8-10: 1 LZ4, 2 ZSTD, 3 ZLIB; 0 (older clients) is ZLIB too."""

MAX_PROPERTIES_BYTES: Final = 2**15 - 1

_STORED_HEAD = struct.Struct(">iIiiiqqiq8sq8siqi")
STORED_HEAD_SIZE: Final = _STORED_HEAD.size  # 88
_BATCH_HEAD = struct.Struct(">iiiii")
BATCH_HEAD_SIZE: Final = _BATCH_HEAD.size  # 20
_I16 = struct.Struct(">h")
_U8 = struct.Struct(">B")


class MessageLayoutError(ValueError):
    """Bytes that are not a stored message or a batch body; the message names the fault."""


@dataclass(slots=True, kw_only=True)
class StoredMessage:
    """One message as a pull answer carries it. ``body`` is as stored (compressed when
    ``sys_flag`` says so: :func:`inflate_body`); hosts are ``"a.b.c.d:port"``."""

    topic: str
    body: bytes
    queue_id: int
    queue_offset: int
    physical_offset: int
    properties: dict[str, str] = field(default_factory=dict)
    flag: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: str = "0.0.0.0:0"
    store_timestamp: int = 0
    store_host: str = "0.0.0.0:0"
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0

    @property
    def msg_id(self) -> str:
        """RocketMQ's offset message id: hex of store host, port and CommitLog offset."""
        return make_msg_id(self.store_host, self.physical_offset)


@dataclass(slots=True, kw_only=True)
class BatchMessage:
    """One message of a SEND_BATCH_MESSAGE body: the topic and queue are the request's."""

    body: bytes
    properties: dict[str, str] = field(default_factory=dict)
    flag: int = 0


def body_crc(body: bytes | memoryview) -> int:
    """The bodyCRC field: CRC-32 masked to 31 bits (RocketMQ's ``UtilAll.crc32``)."""
    return zlib.crc32(body) & 0x7FFFFFFF


def encode_stored(msg: StoredMessage) -> bytes:
    """One stored-message record; bodyCRC is computed from ``msg.body``."""
    if msg.sys_flag & (SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6):
        raise ValueError("IPv6 born or store hosts are not supported")
    topic_raw = msg.topic.encode("utf-8")
    if not topic_raw or len(topic_raw) > 2**15 - 1:
        raise ValueError(f"topic of {len(topic_raw)} bytes does not fit the layout")
    props_raw = encode_properties(msg.properties).encode("utf-8")
    if len(props_raw) > MAX_PROPERTIES_BYTES:
        raise ValueError(f"properties of {len(props_raw)} bytes exceed {MAX_PROPERTIES_BYTES}")
    v1 = len(topic_raw) < V2_TOPIC_BYTES
    body = msg.body
    size = STORED_HEAD_SIZE + len(body) + (1 if v1 else 2) + len(topic_raw) + 2 + len(props_raw)
    head = _STORED_HEAD.pack(
        size,
        MAGIC_V1 if v1 else MAGIC_V2,
        body_crc(body),
        msg.queue_id,
        msg.flag,
        msg.queue_offset,
        msg.physical_offset,
        msg.sys_flag,
        msg.born_timestamp,
        pack_host(msg.born_host),
        msg.store_timestamp,
        pack_host(msg.store_host),
        msg.reconsume_times,
        msg.prepared_transaction_offset,
        len(body),
    )
    topic_len = _U8.pack(len(topic_raw)) if v1 else _I16.pack(len(topic_raw))
    return b"".join((head, body, topic_len, topic_raw, _I16.pack(len(props_raw)), props_raw))


def decode_stored(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[StoredMessage, int]:
    """The stored message at ``buf[pos:]`` and the position after it."""
    end = len(buf)
    if end - pos < STORED_HEAD_SIZE:
        raise MessageLayoutError(f"truncated stored message at {pos}: {end - pos} bytes")
    (
        size,
        magic,
        _crc,
        queue_id,
        flag,
        queue_offset,
        physical_offset,
        sys_flag,
        born_ts,
        born_host,
        store_ts,
        store_host,
        reconsume_times,
        prepared_offset,
        body_len,
    ) = _STORED_HEAD.unpack_from(buf, pos)
    if magic not in (MAGIC_V1, MAGIC_V2):
        raise MessageLayoutError(f"bad magic code {magic:#x} at {pos}")
    if sys_flag & (SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6):
        raise MessageLayoutError(f"IPv6 hosts (sysFlag {sys_flag:#x}) at {pos} are not supported")
    if size < STORED_HEAD_SIZE or pos + size > end:
        raise MessageLayoutError(f"stored message at {pos} claims {size} bytes, {end - pos} left")
    limit = pos + size
    p = pos + STORED_HEAD_SIZE
    if body_len < 0 or p + body_len > limit:
        raise MessageLayoutError(f"body of {body_len} bytes runs past the message at {pos}")
    body = bytes(buf[p : p + body_len])
    p += body_len
    length_struct = _U8 if magic == MAGIC_V1 else _I16
    if p + length_struct.size > limit:
        raise MessageLayoutError(f"topic length cut off in the message at {pos}")
    (topic_len,) = length_struct.unpack_from(buf, p)
    p += length_struct.size
    if topic_len <= 0 or p + topic_len > limit:
        raise MessageLayoutError(f"topic of {topic_len} bytes does not fit the message at {pos}")
    topic = _utf8(buf[p : p + topic_len], "topic", pos)
    p += topic_len
    if p + 2 > limit:
        raise MessageLayoutError(f"properties length cut off in the message at {pos}")
    (props_len,) = _I16.unpack_from(buf, p)
    p += 2
    if props_len < 0 or p + props_len != limit:
        raise MessageLayoutError(
            f"properties of {props_len} bytes do not end the message at {pos} "
            f"({limit - p} bytes left)"
        )
    props = decode_properties(_utf8(buf[p:limit], "properties", pos)) if props_len else {}
    msg = StoredMessage(
        topic=topic,
        body=body,
        queue_id=queue_id,
        queue_offset=queue_offset,
        physical_offset=physical_offset,
        properties=props,
        flag=flag,
        sys_flag=sys_flag,
        born_timestamp=born_ts,
        born_host=unpack_host(born_host),
        store_timestamp=store_ts,
        store_host=unpack_host(store_host),
        reconsume_times=reconsume_times,
        prepared_transaction_offset=prepared_offset,
    )
    return msg, limit


def decode_stored_messages(buf: bytes | bytearray | memoryview) -> list[StoredMessage]:
    """Every stored message of a pull answer's body."""
    messages: list[StoredMessage] = []
    pos = 0
    while pos < len(buf):
        msg, pos = decode_stored(buf, pos)
        messages.append(msg)
    return messages


def inflate_body(msg: StoredMessage) -> bytes:
    """The body uncompressed: as is without SYSFLAG_COMPRESSED; zlib (type 0 or 3) inflated;
    LZ4 and ZSTD refused with :class:`MessageLayoutError` (not in the standard library)."""
    if not msg.sys_flag & SYSFLAG_COMPRESSED:
        return msg.body
    kind = (msg.sys_flag & SYSFLAG_COMPRESSION_TYPE_MASK) >> 8
    if kind not in (0, 3):
        raise MessageLayoutError(f"compression type {kind} (1 LZ4, 2 ZSTD) is not supported")
    try:
        return zlib.decompress(msg.body)
    except zlib.error as exc:
        raise MessageLayoutError(f"compressed body does not inflate: {exc}") from None


def encode_batch(messages: Iterable[BatchMessage]) -> bytes:
    """A SEND_BATCH_MESSAGE body."""
    parts: list[bytes] = []
    for msg in messages:
        props_raw = encode_properties(msg.properties).encode("utf-8")
        if len(props_raw) > MAX_PROPERTIES_BYTES:
            raise ValueError(f"properties of {len(props_raw)} bytes exceed {MAX_PROPERTIES_BYTES}")
        size = BATCH_HEAD_SIZE + len(msg.body) + 2 + len(props_raw)
        parts += (
            _BATCH_HEAD.pack(size, 0, 0, msg.flag, len(msg.body)),
            msg.body,
            _I16.pack(len(props_raw)),
            props_raw,
        )
    return b"".join(parts)


def decode_batch(buf: bytes | bytearray | memoryview) -> list[BatchMessage]:
    """The messages of a SEND_BATCH_MESSAGE body (magic code and bodyCRC are not read, as in
    RocketMQ; each entry's totalSize must agree with its lengths)."""
    messages: list[BatchMessage] = []
    pos = 0
    end = len(buf)
    while pos < end:
        if end - pos < BATCH_HEAD_SIZE + 2:
            raise MessageLayoutError(f"truncated batch entry at {pos}: {end - pos} bytes")
        size, _magic, _crc, flag, body_len = _BATCH_HEAD.unpack_from(buf, pos)
        p = pos + BATCH_HEAD_SIZE
        if body_len < 0 or p + body_len + 2 > end:
            raise MessageLayoutError(f"batch entry at {pos}: body of {body_len} bytes runs past")
        body = bytes(buf[p : p + body_len])
        p += body_len
        (props_len,) = _I16.unpack_from(buf, p)
        p += 2
        if props_len < 0 or p + props_len > end:
            raise MessageLayoutError(
                f"batch entry at {pos}: properties of {props_len} bytes run past"
            )
        if size != p + props_len - pos:
            raise MessageLayoutError(
                f"batch entry at {pos} claims {size} bytes but holds {p + props_len - pos}"
            )
        text = _utf8(buf[p : p + props_len], "properties", pos)
        messages.append(BatchMessage(body=body, properties=decode_properties(text), flag=flag))
        pos = p + props_len
    return messages


def _utf8(raw: bytes | bytearray | memoryview, what: str, pos: int) -> str:
    try:
        return bytes(raw).decode("utf-8")
    except UnicodeDecodeError:
        raise MessageLayoutError(f"{what} of the message at {pos} is not UTF-8") from None


def encode_stored_messages(messages: Sequence[StoredMessage]) -> bytes:
    """A pull answer's body."""
    return b"".join(encode_stored(m) for m in messages)
