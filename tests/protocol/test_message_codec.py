"""The message record codec: exact layout, round trips, CRC, and garbage."""

from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.message import (
    BLANK_MAGIC,
    HEAD_SIZE,
    MESSAGE_MAGIC,
    Message,
    RecordEncoder,
    RecordError,
    check_record,
    decode_properties,
    decode_record,
    encode_blank,
    encode_properties,
    iter_records,
    make_msg_id,
    parse_msg_id,
    read_info,
    tag_hash,
)

ENC = RecordEncoder("10.0.0.7:10911")
text = st.text(
    alphabet=st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
    max_size=20,
)


def encode(msg: Message, qo: int = 3, po: int = 1000) -> bytes:
    return ENC.encode(
        msg, queue_id=2, queue_offset=qo, physical_offset=po, store_timestamp=1700000000000
    )


def test_layout_matches_the_documented_offsets() -> None:
    raw = encode(Message(topic="T", body=b"abc", tags="x", born_host="1.2.3.4:5", born_timestamp=7))
    size, magic, crc, queue_id, flag, qo, po, born, stored = struct.unpack_from(">IIIiiqqqq", raw)
    assert size == len(raw) and magic == MESSAGE_MAGIC and crc == zlib.crc32(raw[12:])
    assert (queue_id, flag, qo, po, born, stored) == (2, 0, 3, 1000, 7, 1700000000000)
    assert raw[52:60] == bytes([1, 2, 3, 4]) + struct.pack(">I", 5)
    assert struct.unpack_from(">I", raw, 68)[0] == 3 and raw[HEAD_SIZE : HEAD_SIZE + 3] == b"abc"


@given(
    st.text(min_size=1, max_size=30).filter(lambda t: "\x00" not in t),
    st.binary(max_size=500),
    text,
    text,
    st.dictionaries(text.filter(bool), text, max_size=4),
)
def test_records_round_trip(
    topic: str, body: bytes, keys: str, tags: str, props: dict[str, str]
) -> None:
    msg = Message(topic=topic, body=body, keys=keys, tags=tags, properties=props)
    raw = encode(msg)
    rec = decode_record(raw)
    assert (rec.topic, rec.body, rec.keys, rec.tags) == (topic, body, keys, tags)
    assert rec.store_host == "10.0.0.7:10911" and rec.physical_offset == 1000
    info = read_info(raw, 0, check_record(raw, 0, len(raw)))
    assert (info.topic, info.queue_id, info.queue_offset, info.tags_hash) == (
        topic,
        2,
        3,
        tag_hash(tags),
    )


def test_flipped_byte_fails_crc() -> None:
    raw = bytearray(encode(Message(topic="T", body=b"payload")))
    raw[HEAD_SIZE + 2] ^= 0xFF
    with pytest.raises(RecordError, match="CRC"):
        check_record(raw, 0, len(raw))


def test_iter_records_skips_blank_tail() -> None:
    a = encode(Message(topic="T", body=b"1"), qo=0, po=0)
    b = encode(Message(topic="T", body=b"2"), qo=1, po=len(a))
    recs = list(iter_records(a + b + encode_blank(16)))
    assert [r.body for r in recs] == [b"1", b"2"]
    assert struct.unpack_from(">II", encode_blank(16)) == (16, BLANK_MAGIC)


def test_msg_id_round_trip() -> None:
    mid = make_msg_id("127.0.0.1:10911", 123456)
    assert len(mid) == 32 and parse_msg_id(mid) == ("127.0.0.1:10911", 123456)
    with pytest.raises(RecordError):
        parse_msg_id("zz")


def test_properties_round_trip() -> None:
    props = {"KEYS": "a b", "TAGS": "t", "x": ""}
    assert decode_properties(encode_properties(props)) == props


@given(st.binary(max_size=300))
def test_garbage_records_raise_record_error_only(data: bytes) -> None:
    try:
        list(iter_records(data))
    except RecordError:
        pass


def test_valid_crc_with_inconsistent_lengths_is_a_record_error() -> None:
    raw = bytearray(encode(Message(topic="T", body=b"abc")))
    struct.pack_into(">H", raw, HEAD_SIZE + 3, 60000)  # topic length overruns the record
    struct.pack_into(">I", raw, 8, zlib.crc32(raw[12:]))
    with pytest.raises(RecordError):
        decode_record(raw)
    with pytest.raises(RecordError):
        read_info(raw, 0, len(raw))
