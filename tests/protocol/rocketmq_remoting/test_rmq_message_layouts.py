"""RocketMQ's message layouts: the properties string, the stored message a pull answer carries
and the SEND_BATCH_MESSAGE body. Golden bytes are written out by hand from the layouts."""

from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.rocketmq_remoting.message_decoder import (
    MAGIC_V2,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_COMPRESSED,
    BatchMessage,
    MessageLayoutError,
    StoredMessage,
    decode_batch,
    decode_stored,
    decode_stored_messages,
    encode_batch,
    encode_stored,
    encode_stored_messages,
    inflate_body,
)
from protocol.rocketmq_remoting.properties import (
    PROP_DELAY_TIME_LEVEL,
    PROP_KEYS,
    PROP_MESSAGE_GROUP,
    PROP_START_DELIVER_TIME,
    PROP_TAGS,
    PROP_UNIQ_KEY,
    decode_properties,
    encode_properties,
)
from tests.hypothesis_profiles import examples

# -- properties ------------------------------------------------------------------------------


def test_properties_golden() -> None:
    props = {PROP_TAGS: "TagA", PROP_KEYS: "k1 k2", PROP_UNIQ_KEY: "ID1"}
    text = "TAGS\x01TagA\x02KEYS\x01k1 k2\x02UNIQ_KEY\x01ID1\x02"
    assert encode_properties(props) == text
    assert decode_properties(text) == props


def test_property_names_are_rocketmqs() -> None:
    assert (PROP_DELAY_TIME_LEVEL, PROP_START_DELIVER_TIME, PROP_MESSAGE_GROUP) == (
        "DELAY",
        "__STARTDELIVERTIME",
        "__SHARDINGKEY",
    )


@pytest.mark.parametrize(
    ("text", "props"),
    [
        ("", {}),
        ("A\x01\x02B\x01b\x02", {"B": "b"}),  # an empty value is dropped
        ("\x01a\x02B\x01b\x02", {"B": "b"}),  # an empty name is dropped
        ("A\x02B\x01b", {"B": "b"}),  # no separator: dropped; the last piece needs no \x02
        ("A\x01a\x01b\x02", {"A": "a\x01b"}),  # the first \x01 splits
        ("\x02\x02A\x01a\x02\x02", {"A": "a"}),
        ("A\x01x\x02A\x01y\x02", {"A": "y"}),  # the last one wins
    ],
)
def test_properties_are_read_as_rocketmq_reads_them(text: str, props: dict[str, str]) -> None:
    assert decode_properties(text) == props


plain = st.text(
    alphabet=st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
    min_size=1,
    max_size=20,
)


@settings(deadline=None)
@given(st.dictionaries(plain, plain, max_size=8))
def test_properties_round_trip(props: dict[str, str]) -> None:
    assert decode_properties(encode_properties(props)) == props


# -- stored message --------------------------------------------------------------------------

STORED_V1 = bytes.fromhex(
    "00000068"  # totalSize 104
    "daa320a7"  # magic V1
    "3610a686"  # bodyCRC of "hello"
    "00000002"  # queueId 2
    "00000000"  # flag 0
    "0000000000000005"  # queueOffset 5
    "0000000000001234"  # physicalOffset 0x1234
    "00000000"  # sysFlag 0
    "0000018bcfe56800"  # bornTimestamp 1700000000000
    "7f000001"
    "0000d431"  # bornHost 127.0.0.1:54321
    "0000018bcfe5687b"  # storeTimestamp 1700000000123
    "0a000001"
    "00002a9f"  # storeHost 10.0.0.1:10911
    "00000001"  # reconsumeTimes 1
    "0000000000000000"  # preparedTransactionOffset 0
    "00000005" + b"hello".hex() + "01" + b"T".hex() + "0007" + b"TAGS\x01a\x02".hex()
)
STORED_V1_MESSAGE = StoredMessage(
    topic="T",
    body=b"hello",
    queue_id=2,
    queue_offset=5,
    physical_offset=0x1234,
    properties={"TAGS": "a"},
    born_timestamp=1_700_000_000_000,
    born_host="127.0.0.1:54321",
    store_timestamp=1_700_000_000_123,
    store_host="10.0.0.1:10911",
    reconsume_times=1,
)


def test_stored_golden_decodes_and_reencodes() -> None:
    assert zlib.crc32(b"hello") & 0x7FFFFFFF == 0x3610A686
    msg, end = decode_stored(STORED_V1)
    assert end == len(STORED_V1) == 104
    assert msg == STORED_V1_MESSAGE
    assert msg.msg_id == "0A00000100002A9F0000000000001234"
    assert encode_stored(msg) == STORED_V1


def test_a_pull_body_of_several_records() -> None:
    second = StoredMessage(
        topic="T", body=b"", queue_id=2, queue_offset=6, physical_offset=0x1234 + 104
    )
    body = STORED_V1 + encode_stored(second)
    assert decode_stored_messages(body) == [STORED_V1_MESSAGE, second]
    assert encode_stored_messages([STORED_V1_MESSAGE, second]) == body


def test_topics_from_128_bytes_use_magic_v2() -> None:
    topic = "t" * 128
    raw = encode_stored(
        StoredMessage(topic=topic, body=b"x", queue_id=0, queue_offset=0, physical_offset=0)
    )
    (magic,) = struct.unpack_from(">I", raw, 4)
    assert magic == MAGIC_V2
    assert raw[89:91] == b"\x00\x80" and raw[91:219] == topic.encode()
    assert decode_stored(raw)[0].topic == topic
    short = encode_stored(
        StoredMessage(topic="t" * 127, body=b"", queue_id=0, queue_offset=0, physical_offset=0)
    )
    assert short[4:8] == bytes.fromhex("daa320a7") and short[88] == 127


def test_compressed_body_is_inflated_on_request() -> None:
    body = b"payload " * 100
    msg = StoredMessage(
        topic="T",
        body=zlib.compress(body),
        queue_id=0,
        queue_offset=0,
        physical_offset=0,
        sys_flag=SYSFLAG_COMPRESSED | (3 << 8),
    )
    decoded, _ = decode_stored(encode_stored(msg))
    assert decoded.body == msg.body
    assert inflate_body(decoded) == body
    assert inflate_body(STORED_V1_MESSAGE) == b"hello"
    lz4 = StoredMessage(
        topic="T", body=b"?", queue_id=0, queue_offset=0, physical_offset=0, sys_flag=1 | 1 << 8
    )
    with pytest.raises(MessageLayoutError, match="compression type 1"):
        inflate_body(lz4)


hosts = st.builds(
    lambda a, b, c, d, port: f"{a}.{b}.{c}.{d}:{port}",
    *[st.integers(0, 255)] * 4,
    st.integers(0, 65535),
)
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)


@settings(max_examples=examples(150), deadline=None)
@given(
    st.builds(
        StoredMessage,
        topic=st.text(min_size=1, max_size=150).filter(lambda t: len(t.encode()) < 2**15),
        body=st.binary(max_size=200),
        queue_id=int32,
        queue_offset=int64,
        physical_offset=int64,
        properties=st.dictionaries(plain, plain, max_size=5),
        flag=int32,
        sys_flag=int32.map(lambda f: f & ~0x30),
        born_timestamp=int64,
        born_host=hosts,
        store_timestamp=int64,
        store_host=hosts,
        reconsume_times=int32,
        prepared_transaction_offset=int64,
    )
)
def test_stored_round_trip(msg: StoredMessage) -> None:
    raw = encode_stored(msg)
    assert decode_stored(raw) == (msg, len(raw))


def _layout_error(raw: bytes) -> str:
    with pytest.raises(MessageLayoutError) as info:
        decode_stored_messages(raw)
    return str(info.value)


def test_bad_stored_messages() -> None:
    assert "truncated" in _layout_error(STORED_V1[:50])
    assert "claims 104 bytes" in _layout_error(STORED_V1[:-1])
    assert "bad magic" in _layout_error(STORED_V1[:4] + b"\x00" * 4 + STORED_V1[8:])
    v6 = bytearray(STORED_V1)
    struct.pack_into(">i", v6, 36, SYSFLAG_BORNHOST_V6)
    assert "IPv6" in _layout_error(bytes(v6))
    long_body = bytearray(STORED_V1)
    struct.pack_into(">i", long_body, 84, 1000)
    assert "body of 1000 bytes" in _layout_error(bytes(long_body))
    long_props = bytearray(STORED_V1)
    struct.pack_into(">h", long_props, 95, 8)
    assert "properties of 8 bytes" in _layout_error(bytes(long_props))
    bad_topic = bytearray(STORED_V1)
    bad_topic[94] = 0xFF
    assert "topic of the message at 0 is not UTF-8" in _layout_error(bytes(bad_topic))


@settings(max_examples=examples(200), deadline=None)
@given(st.binary(max_size=300))
def test_stored_garbage_raises_only_layout_errors(raw: bytes) -> None:
    try:
        decode_stored_messages(raw)
    except MessageLayoutError:
        pass


# -- batch body ------------------------------------------------------------------------------

BATCH = bytes.fromhex(
    "0000001e"  # totalSize 30
    "00000000"  # magic code 0
    "00000000"  # bodyCRC 0
    "00000004"  # flag 4
    "00000001" + b"a".hex() + "0007" + b"TAGS\x01t\x02".hex()
) + bytes.fromhex("0000001700000000000000000000000000000001620000")


def test_batch_golden_decodes_and_reencodes() -> None:
    messages = decode_batch(BATCH)
    assert messages == [
        BatchMessage(body=b"a", properties={"TAGS": "t"}, flag=4),
        BatchMessage(body=b"b"),
    ]
    assert encode_batch(messages) == BATCH


@settings(deadline=None)
@given(
    st.lists(
        st.builds(
            BatchMessage,
            body=st.binary(max_size=100),
            properties=st.dictionaries(plain, plain, max_size=4),
            flag=int32,
        ),
        max_size=6,
    )
)
def test_batch_round_trip(messages: list[BatchMessage]) -> None:
    assert decode_batch(encode_batch(messages)) == messages


def test_bad_batches() -> None:
    with pytest.raises(MessageLayoutError, match="truncated batch entry at 30"):
        decode_batch(BATCH[:40])
    with pytest.raises(MessageLayoutError, match="claims 31 bytes but holds 30"):
        decode_batch(b"\x00\x00\x00\x1f" + BATCH[4:])
    with pytest.raises(MessageLayoutError, match="body of 255 bytes"):
        decode_batch(BATCH[:16] + b"\x00\x00\x00\xff" + BATCH[20:])
    with pytest.raises(MessageLayoutError, match="properties of 9 bytes"):
        decode_batch(BATCH[:21] + b"\x00\x09" + BATCH[23:30])


@settings(max_examples=examples(200), deadline=None)
@given(st.binary(max_size=200))
def test_batch_garbage_raises_only_layout_errors(raw: bytes) -> None:
    try:
        decode_batch(raw)
    except MessageLayoutError:
        pass
