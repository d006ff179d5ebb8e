"""RocketMQ's remoting frame (RemotingCommand): pure encode/decode, no sockets.

A frame on the wire, every integer big-endian and signed (Java's)::

    0      4   length         int32, bytes after this field: 4 + headerLength + bodyLength
    4      1   serializeType  0 JSON, 1 ROCKETMQ (binary)
    5      3   headerLength   24 bits
    8      h   header         in the serialize type above
    8+h    ..  body           the rest of the frame (no body when empty)

A frame is at most 16 MiB, length field included (Netty's ``frameMaxLength``, 16777216).

The header carries ``code``, ``language``, ``version``, ``opaque``, ``flag``, ``remark`` and
``extFields`` (a map of strings). ``flag`` bit 0 marks a response, bit 1 a oneway request. A
response carries its request's ``opaque``.

JSON header (serialize type 0): one UTF-8 JSON object. RocketMQ (fastjson) writes its fields in
name order and the language as its name, ``"language":"JAVA"``; a field that is null is left
out::

    {"code":10,"extFields":{"topic":"T"},"flag":0,"language":"JAVA","opaque":7,
     "remark":"..","serializeTypeCurrentRPC":"JSON","version":401}

Readers take the fields in any order and ignore unknown ones. The Node.js client ``ali-ons``
writes ``extFields`` values as JSON numbers and booleans where its header fields are (``"queueId":
0``); they are read as the strings Java would make of them (``"0"``, ``"true"``), and a null
value is dropped. ``language`` may be a name or its number; an unknown name reads as OTHER. ali-ons
reads only JSON answers, so an answer goes out in the serialize type of its request.

Binary header (serialize type 1, ``RocketMQSerializable``)::

    0      2   code           int16
    2      1   language       LanguageCode byte
    3      2   version        int16
    5      4   opaque         int32
    9      4   flag           int32
    13     4   remarkLength   int32, 0 for no remark
    17     r   remark         UTF-8
    ..     4   extLength      int32, bytes of the entries that follow
    ..     ..  entries        repeated: keyLength int16, key UTF-8, valueLength int32, value UTF-8

Decoding checks everything a malformed or hostile frame could get wrong (truncation, lengths
past their bounds, unknown serialize types, JSON of the wrong shape, wrong field types, oversize
frames) and raises :class:`RemotingFrameError`, one exception type with a message naming the
fault; the connection must then be closed. :class:`FrameSplitter` cuts a byte stream into frames
with a bounded buffer; :class:`CommandDecoder` also decodes them.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, Final, NoReturn

from protocol.remoting import ProtocolError
from protocol.rocketmq_remoting.codes import LanguageCode

__all__ = [
    "FLAG_ONEWAY",
    "FLAG_RESPONSE",
    "MAX_FRAME_BYTES",
    "CommandDecoder",
    "FrameSplitter",
    "RemotingCommand",
    "RemotingFrameError",
    "SerializeType",
    "decode_frame",
    "encode_command",
    "make_response",
    "sniff",
]

FLAG_RESPONSE: Final = 0x1
FLAG_ONEWAY: Final = 0x2
MAX_FRAME_BYTES: Final = 16 * 1024 * 1024
"""The largest frame, its 4-byte length field included."""
MAX_HEADER_BYTES: Final = 0xFFFFFF

_INT32_MIN: Final = -(2**31)
_INT32_MAX: Final = 2**31 - 1
_INT16_MIN: Final = -(2**15)
_INT16_MAX: Final = 2**15 - 1

_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")
_PREFIX = struct.Struct(">iI")
_BIN_FIXED = struct.Struct(">hBhii")  # code, language, version, opaque, flag: 13 bytes


class SerializeType(IntEnum):
    JSON = 0
    ROCKETMQ = 1


class RemotingFrameError(ProtocolError):
    """Bytes that are not a RocketMQ remoting frame; the message names what is wrong.

    A :class:`~protocol.remoting.ProtocolError`, so a server closes the connection on it the
    way it does for our own protocol.
    """


@dataclass(slots=True, kw_only=True)
class RemotingCommand:
    """One request or response. ``body`` is ``b""`` when the frame has none."""

    code: int
    language: int = LanguageCode.JAVA
    version: int = 0
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    ext_fields: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    serialize_type: SerializeType = SerializeType.JSON

    @property
    def is_response(self) -> bool:
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & FLAG_ONEWAY)


def make_response(
    request: RemotingCommand,
    code: int,
    *,
    remark: str | None = None,
    ext_fields: Mapping[str, str] | None = None,
    body: bytes = b"",
    version: int = 0,
) -> RemotingCommand:
    """The answer to ``request``: its opaque, the response flag, and its serialize type."""
    return RemotingCommand(
        code=int(code),
        version=version,
        opaque=request.opaque,
        flag=FLAG_RESPONSE,
        remark=remark,
        ext_fields=dict(ext_fields) if ext_fields else {},
        body=body,
        serialize_type=request.serialize_type,
    )


def sniff(prefix: bytes | bytearray | memoryview) -> bool | None:
    """Whether a connection whose first bytes are ``prefix`` speaks this protocol.

    After the 4-byte length, a RocketMQ frame has its serialize type, 0 or 1; our own frames
    have a msgpack array header there (0x96). None while fewer than 5 bytes are known.
    """
    if len(prefix) < 5:
        return None
    return prefix[4] in (SerializeType.JSON, SerializeType.ROCKETMQ)


# -- decoding ------------------------------------------------------------------------------


def decode_frame(frame: bytes | bytearray | memoryview) -> RemotingCommand:
    """Decode one frame given without its 4-byte length field (what :class:`FrameSplitter`
    returns)."""
    size = len(frame)
    if size < 4:
        raise RemotingFrameError(
            f"frame of {size} bytes is shorter than its 4-byte serialize type and header length"
        )
    (word,) = _U32.unpack_from(frame, 0)
    kind = word >> 24
    header_length = word & 0xFFFFFF
    if kind not in (SerializeType.JSON, SerializeType.ROCKETMQ):
        raise RemotingFrameError(f"unknown serialize type {kind} (0 JSON and 1 ROCKETMQ are known)")
    if header_length > size - 4:
        raise RemotingFrameError(
            f"header length {header_length} runs past the frame ({size - 4} bytes follow it)"
        )
    header = memoryview(frame)[4 : 4 + header_length]
    if kind == SerializeType.JSON:
        cmd = _decode_json_header(header)
    else:
        cmd = _decode_binary_header(header)
    cmd.body = bytes(frame[4 + header_length :])
    return cmd


def _decode_json_header(raw: memoryview) -> RemotingCommand:
    try:
        text = str(raw, "utf-8")
    except UnicodeDecodeError:
        raise RemotingFrameError("JSON header is not UTF-8") from None
    try:
        obj = _JSON_DECODER.decode(text)
    except (ValueError, RecursionError) as exc:
        raise RemotingFrameError(f"JSON header does not parse: {exc}") from None
    if type(obj) is not dict:
        raise RemotingFrameError(f"JSON header is not an object but {_json_kind(obj)}")
    if "code" not in obj:
        raise RemotingFrameError("JSON header has no code")
    return RemotingCommand(
        code=_json_int32(obj, "code"),
        language=_json_language(obj.get("language")),
        version=_json_int32(obj, "version"),
        opaque=_json_int32(obj, "opaque"),
        flag=_json_int32(obj, "flag"),
        remark=_json_remark(obj.get("remark")),
        ext_fields=_json_ext_fields(obj.get("extFields")),
        serialize_type=SerializeType.JSON,
    )


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# One decoder and one encoder for every frame: json.loads and json.dumps with an argument
# build a new one per call.
_JSON_DECODER: Final = json.JSONDecoder(parse_constant=_reject_constant)
_JSON_ENCODER: Final = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def _json_kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _json_int32(obj: dict[str, Any], name: str) -> int:
    value = obj.get(name, 0)
    if value is None:
        return 0
    if type(value) is not int:
        raise RemotingFrameError(f"JSON header field {name} is {_json_kind(value)}, not an integer")
    if not _INT32_MIN <= value <= _INT32_MAX:
        raise RemotingFrameError(f"JSON header field {name} {value} is outside int32")
    return value


_LANGUAGE_BY_NAME: Final = {member.name: int(member) for member in LanguageCode}
_LANGUAGE_NAME: Final = {int(member): member.name for member in LanguageCode}


def _json_language(value: object) -> int:
    if value is None:
        return LanguageCode.JAVA
    if type(value) is str:
        return _LANGUAGE_BY_NAME.get(value, LanguageCode.OTHER)
    if type(value) is int and 0 <= value <= 0xFF:
        return value
    raise RemotingFrameError(
        f"JSON header field language is {_json_kind(value)}, not a language name or byte"
    )


def _json_remark(value: object) -> str | None:
    if value is None or type(value) is str:
        return value
    raise RemotingFrameError(f"JSON header field remark is {_json_kind(value)}, not a string")


def _json_ext_fields(value: object) -> dict[str, str]:
    if value is None:
        return {}
    if type(value) is not dict:
        raise RemotingFrameError(
            f"JSON header field extFields is {_json_kind(value)}, not an object"
        )
    if set(map(type, value.values())) <= {str}:
        return value  # what Java writes: strings only
    fields: dict[str, str] = {}
    for key, item in value.items():
        kind = type(item)
        if kind is str:
            fields[key] = item
        elif kind is int:
            fields[key] = str(item)
        elif kind is bool:
            fields[key] = "true" if item else "false"
        elif kind is float:
            fields[key] = repr(item)
        elif item is not None:
            raise RemotingFrameError(
                f"JSON header extFields {key!r} is {_json_kind(item)}, not a string or scalar"
            )
    return fields


def _decode_binary_header(raw: memoryview) -> RemotingCommand:
    size = len(raw)
    if size < _BIN_FIXED.size + 8:
        raise RemotingFrameError(
            f"truncated binary header: {size} bytes, at least {_BIN_FIXED.size + 8} needed"
        )
    code, language, version, opaque, flag = _BIN_FIXED.unpack_from(raw, 0)
    pos = _BIN_FIXED.size
    remark_raw, pos = _read_blob(raw, pos, _I32, "remark")
    remark = _utf8(remark_raw, "remark") if remark_raw else None
    if pos + 4 > size:
        raise RemotingFrameError("truncated binary header: extFields length cut off")
    (ext_length,) = _I32.unpack_from(raw, pos)
    pos += 4
    if ext_length < 0 or pos + ext_length > size:
        raise RemotingFrameError(
            f"binary header extFields length {ext_length} runs past the header "
            f"({size - pos} bytes left)"
        )
    end = pos + ext_length
    if end != size:
        raise RemotingFrameError(
            f"binary header has {size - end} bytes after its extFields (header length {size})"
        )
    fields = _binary_ext_fields(bytes(raw[pos:end]))
    return RemotingCommand(
        code=code,
        language=language,
        version=version,
        opaque=opaque,
        flag=flag,
        remark=remark,
        ext_fields=fields,
        serialize_type=SerializeType.ROCKETMQ,
    )


def _binary_ext_fields(entries: bytes) -> dict[str, str]:
    """The binary header's extFields entries (the per-frame loop, kept tight)."""
    fields: dict[str, str] = {}
    unpack_key_len = _I16.unpack_from
    unpack_value_len = _I32.unpack_from
    end = len(entries)
    i = 0
    while i < end:
        if i + 2 > end:
            raise RemotingFrameError(
                f"truncated binary header: extFields key length cut off at {i}"
            )
        (n,) = unpack_key_len(entries, i)
        i += 2
        if n < 0 or i + n + 4 > end:
            raise RemotingFrameError(
                f"truncated binary header: extFields key of {n} bytes and its value length "
                f"at {i}, {end - i} bytes left"
            )
        key = entries[i : i + n]
        i += n
        (n,) = unpack_value_len(entries, i)
        i += 4
        if n < 0 or i + n > end:
            raise RemotingFrameError(
                f"truncated binary header: extFields value of {n} bytes at {i}, {end - i} left"
            )
        try:
            fields[key.decode()] = entries[i : i + n].decode()
        except UnicodeDecodeError:
            raise RemotingFrameError("binary header extFields entry is not UTF-8") from None
        i += n
    return fields


def _read_blob(raw: memoryview, pos: int, length: struct.Struct, what: str) -> tuple[bytes, int]:
    """A length-prefixed byte string at ``pos``; the position after it."""
    if pos + length.size > len(raw):
        raise RemotingFrameError(f"truncated binary header: {what} length cut off at {pos}")
    (n,) = length.unpack_from(raw, pos)
    pos += length.size
    if n < 0 or pos + n > len(raw):
        raise RemotingFrameError(
            f"truncated binary header: {what} of {n} bytes at {pos}, {len(raw) - pos} left"
        )
    return bytes(raw[pos : pos + n]), pos + n


def _utf8(raw: bytes, what: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise RemotingFrameError(f"binary header {what} is not UTF-8") from None


# -- encoding ------------------------------------------------------------------------------


def encode_command(cmd: RemotingCommand) -> bytes:
    """The whole frame, length field included, with the header in ``cmd.serialize_type``.

    Raises :class:`ValueError` for a command that cannot be written (a number outside its
    field, a binary header code or version outside int16, a frame over 16 MiB): a local
    mistake, not the peer's.
    """
    lo, hi = _INT32_MIN, _INT32_MAX
    if not (lo <= cmd.code <= hi and lo <= cmd.version <= hi and lo <= cmd.opaque <= hi) or not (
        lo <= cmd.flag <= hi
    ):
        for name in ("code", "version", "opaque", "flag"):
            value = getattr(cmd, name)
            if not lo <= value <= hi:
                raise ValueError(f"{name} {value} is outside int32")
    if not 0 <= cmd.language <= 0xFF:
        raise ValueError(f"language {cmd.language} is not a byte")
    if cmd.serialize_type == SerializeType.ROCKETMQ:
        header = _encode_binary_header(cmd)
    else:
        header = _encode_json_header(cmd)
    if len(header) > MAX_HEADER_BYTES:
        raise ValueError(f"header of {len(header)} bytes does not fit 24 bits")
    length = 4 + len(header) + len(cmd.body)
    if length + 4 > MAX_FRAME_BYTES:
        raise ValueError(f"frame of {length + 4} bytes exceeds {MAX_FRAME_BYTES}")
    return b"".join(
        (_PREFIX.pack(length, (int(cmd.serialize_type) << 24) | len(header)), header, cmd.body)
    )


def _encode_json_header(cmd: RemotingCommand) -> bytes:
    # fastjson's order (names sorted) and its omission of null fields.
    obj: dict[str, object] = {"code": cmd.code}
    if cmd.ext_fields:
        obj["extFields"] = cmd.ext_fields
    obj["flag"] = cmd.flag
    obj["language"] = _LANGUAGE_NAME.get(cmd.language, cmd.language)
    obj["opaque"] = cmd.opaque
    if cmd.remark is not None:
        obj["remark"] = cmd.remark
    obj["serializeTypeCurrentRPC"] = "JSON"
    obj["version"] = cmd.version
    return _JSON_ENCODER.encode(obj).encode("utf-8")


def _encode_binary_header(cmd: RemotingCommand) -> bytes:
    for name in ("code", "version"):
        value = getattr(cmd, name)
        if not _INT16_MIN <= value <= _INT16_MAX:
            raise ValueError(f"{name} {value} does not fit the binary header's int16")
    remark = cmd.remark.encode("utf-8") if cmd.remark else b""
    parts = [
        _BIN_FIXED.pack(cmd.code, cmd.language, cmd.version, cmd.opaque, cmd.flag),
        _I32.pack(len(remark)),
        remark,
    ]
    entries: list[bytes] = []
    for key, value in cmd.ext_fields.items():
        key_raw = key.encode("utf-8")
        if len(key_raw) > _INT16_MAX:
            raise ValueError(f"extFields key of {len(key_raw)} bytes does not fit int16")
        value_raw = value.encode("utf-8")
        entries += (_I16.pack(len(key_raw)), key_raw, _I32.pack(len(value_raw)), value_raw)
    ext = b"".join(entries)
    parts += (_I32.pack(len(ext)), ext)
    return b"".join(parts)


# -- streams -------------------------------------------------------------------------------


class FrameSplitter:
    """Cuts a byte stream into frames: ``feed(data)`` returns each complete frame without its
    length field, and keeps the incomplete rest.

    The buffer holds at most one frame of at most ``max_frame_bytes`` (length field included);
    a length claiming more, or less than the 4 bytes every frame has, raises
    :class:`RemotingFrameError`. After an error the splitter stays failed.
    """

    __slots__ = ("_buf", "_failed", "_max")

    def __init__(self, max_frame_bytes: int = MAX_FRAME_BYTES) -> None:
        self._buf = bytearray()
        self._max = max_frame_bytes
        self._failed: str | None = None

    @property
    def buffered(self) -> int:
        """Bytes held of the incomplete frame (0 between frames)."""
        return len(self._buf)

    @property
    def declared(self) -> int | None:
        """The size the incomplete frame claims (length field included), once it is known."""
        if len(self._buf) < 4:
            return None
        return int(_I32.unpack_from(self._buf)[0]) + 4

    def clear(self) -> None:
        """Drop the incomplete frame and its memory (the connection is being closed)."""
        self._buf = bytearray()

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        if self._failed is not None:
            raise RemotingFrameError(f"stream already failed: {self._failed}")
        buf = self._buf
        buf += data
        frames: list[bytes] = []
        pos = 0
        end = len(buf)
        error = None
        with memoryview(buf) as view:  # one copy per frame, out of the buffer
            while end - pos >= 4:
                (length,) = _I32.unpack_from(buf, pos)
                if length + 4 > self._max:
                    error = f"frame of {length + 4} bytes exceeds the limit of {self._max}"
                elif length < 4:
                    error = f"frame length {length} leaves no room for the header length"
                if error is not None or end - pos - 4 < length:
                    break
                frames.append(bytes(view[pos + 4 : pos + 4 + length]))
                pos += 4 + length
        if error is not None:
            self._fail(error)
        if pos == end:
            self._buf = bytearray()  # do not keep a large frame's capacity
        elif pos:
            del buf[:pos]
        return frames

    def _fail(self, reason: str) -> NoReturn:
        self._failed = reason
        self._buf = bytearray()
        raise RemotingFrameError(reason)


class CommandDecoder:
    """A :class:`FrameSplitter` whose frames come out decoded. A frame that does not decode
    raises :class:`RemotingFrameError` after the frames before it were returned by earlier
    calls; the frames after it in the same ``feed`` are not decoded (the connection closes)."""

    __slots__ = ("_splitter",)

    def __init__(self, max_frame_bytes: int = MAX_FRAME_BYTES) -> None:
        self._splitter = FrameSplitter(max_frame_bytes)

    @property
    def buffered(self) -> int:
        return self._splitter.buffered

    @property
    def declared(self) -> int | None:
        return self._splitter.declared

    def clear(self) -> None:
        self._splitter.clear()

    def feed(self, data: bytes | bytearray | memoryview) -> list[RemotingCommand]:
        return [decode_frame(frame) for frame in self._splitter.feed(data)]
