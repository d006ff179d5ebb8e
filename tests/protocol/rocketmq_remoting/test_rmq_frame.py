"""RocketMQ's remoting frame: golden frames written out by hand from the published layout (both
serialize types), round trips, the stream splitter, and every malformed frame raising
RemotingFrameError and nothing else."""

from __future__ import annotations

import json
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.remoting import ProtocolError, encode_frame, request
from protocol.rocketmq_remoting.codes import LanguageCode, RequestCode, ResponseCode
from protocol.rocketmq_remoting.frame import (
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    MAX_FRAME_BYTES,
    CommandDecoder,
    FrameSplitter,
    RemotingCommand,
    RemotingFrameError,
    SerializeType,
    decode_frame,
    encode_command,
    make_response,
    sniff,
)
from tests.hypothesis_profiles import examples

# -- golden frames ---------------------------------------------------------------------------

# SEND_MESSAGE (10) in the binary header: language JAVA, version 401, opaque 7, flag 0, no
# remark, extFields {"topic": "T"}, body "hi".
BINARY_REQUEST = bytes.fromhex(
    "00000027"  # length: 4 + 33 header + 2 body
    "01000021"  # serialize type 1 (ROCKETMQ), header length 33
    "000a"  # code 10
    "00"  # language 0 (JAVA)
    "0191"  # version 401
    "00000007"  # opaque 7
    "00000000"  # flag 0
    "00000000"  # remark length 0: no remark
    "0000000c"  # extFields length 12
    "0005" + b"topic".hex() + "00000001" + b"T".hex() + b"hi".hex()
)

# Its answer: SUCCESS, response flag, remark "ok", no extFields, no body.
BINARY_RESPONSE = bytes.fromhex(
    "0000001b"  # length: 4 + 23
    "01000017"  # ROCKETMQ, header length 23
    "0000"  # code 0
    "00"  # JAVA
    "0000"  # version 0
    "00000007"  # opaque 7
    "00000001"  # flag: response
    "00000002" + b"ok".hex() + "00000000"  # remark "ok"; extFields length 0
)

# GET_ROUTEINFO_BY_TOPIC (105) as fastjson writes a RemotingCommand: names in order, no remark.
JSON_HEADER = (
    b'{"code":105,"extFields":{"topic":"TopicTest"},"flag":0,"language":"JAVA",'
    b'"opaque":3,"serializeTypeCurrentRPC":"JSON","version":121}'
)
JSON_REQUEST = struct.pack(">iI", 4 + len(JSON_HEADER), len(JSON_HEADER)) + JSON_HEADER

# The same request as ali-ons writes it (its own field order; extFields values as it holds them).
ALI_ONS_HEADER = (
    b'{"code":105,"language":"JAVA","opaque":3,"flag":0,"version":121,'
    b'"extFields":{"topic":"TopicTest"}}'
)


def test_binary_request_golden_decodes_and_reencodes() -> None:
    (cmd,) = CommandDecoder().feed(BINARY_REQUEST)
    assert cmd == RemotingCommand(
        code=RequestCode.SEND_MESSAGE,
        language=LanguageCode.JAVA,
        version=401,
        opaque=7,
        flag=0,
        remark=None,
        ext_fields={"topic": "T"},
        body=b"hi",
        serialize_type=SerializeType.ROCKETMQ,
    )
    assert not cmd.is_response and not cmd.is_oneway
    assert encode_command(cmd) == BINARY_REQUEST


def test_binary_response_golden_decodes_and_reencodes() -> None:
    cmd = decode_frame(BINARY_RESPONSE[4:])
    assert cmd.is_response
    assert (cmd.code, cmd.opaque, cmd.remark, cmd.ext_fields, cmd.body) == (
        ResponseCode.SUCCESS,
        7,
        "ok",
        {},
        b"",
    )
    assert encode_command(cmd) == BINARY_RESPONSE


def test_an_answer_to_a_binary_request_is_binary() -> None:
    req = decode_frame(BINARY_REQUEST[4:])
    answer = make_response(req, ResponseCode.SUCCESS, remark="ok")
    assert encode_command(answer) == BINARY_RESPONSE


def test_json_request_golden_decodes_and_reencodes() -> None:
    cmd = decode_frame(JSON_REQUEST[4:])
    assert cmd == RemotingCommand(
        code=RequestCode.GET_ROUTEINFO_BY_TOPIC,
        version=121,
        opaque=3,
        ext_fields={"topic": "TopicTest"},
        serialize_type=SerializeType.JSON,
    )
    assert encode_command(cmd) == JSON_REQUEST


def test_ali_ons_field_order_reads_the_same() -> None:
    frame = struct.pack(">iI", 4 + len(ALI_ONS_HEADER), len(ALI_ONS_HEADER)) + ALI_ONS_HEADER
    assert decode_frame(frame[4:]) == decode_frame(JSON_REQUEST[4:])


def test_json_answer_golden() -> None:
    req = decode_frame(JSON_REQUEST[4:])
    answer = make_response(req, ResponseCode.TOPIC_NOT_EXIST, remark="no route", body=b"{}")
    header = (
        b'{"code":17,"flag":1,"language":"JAVA","opaque":3,"remark":"no route",'
        b'"serializeTypeCurrentRPC":"JSON","version":0}'
    )
    expected = struct.pack(">iI", 4 + len(header) + 2, len(header)) + header + b"{}"
    assert encode_command(answer) == expected
    assert decode_frame(expected[4:]).is_response


def test_json_ext_field_scalars_read_as_java_strings() -> None:
    # ali-ons copies its header objects into extFields without making strings of them.
    header = json.dumps(
        {
            "code": 10,
            "extFields": {
                "queueId": 0,
                "bornTimestamp": 1700000000000,
                "unitMode": False,
                "batch": True,
                "ratio": 0.5,
                "nothing": None,
                "topic": "T",
            },
        }
    ).encode()
    cmd = decode_frame(struct.pack(">I", len(header)) + header)
    assert cmd.ext_fields == {
        "queueId": "0",
        "bornTimestamp": "1700000000000",
        "unitMode": "false",
        "batch": "true",
        "ratio": "0.5",
        "topic": "T",
    }


def test_json_language_by_name_or_number() -> None:
    def language(value: object) -> int:
        header = json.dumps({"code": 1, "language": value}).encode()
        return decode_frame(struct.pack(">I", len(header)) + header).language

    assert language("NODE_JS") == LanguageCode.NODE_JS
    assert language("GO") == LanguageCode.GO
    assert language(9) == LanguageCode.GO
    assert language("COBOL") == LanguageCode.OTHER


def test_oneway_flag() -> None:
    cmd = RemotingCommand(code=RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, flag=FLAG_ONEWAY)
    assert decode_frame(encode_command(cmd)[4:]).is_oneway
    assert not make_response(cmd, 0).is_oneway
    assert make_response(cmd, 0).flag == FLAG_RESPONSE


def test_sniff_tells_the_two_protocols_apart() -> None:
    ours = encode_frame(request(10, 1, {"topic": "T"}))
    assert sniff(ours) is False
    assert sniff(BINARY_REQUEST) is True
    assert sniff(JSON_REQUEST) is True
    assert sniff(JSON_REQUEST[:4]) is None


# -- round trips -----------------------------------------------------------------------------

texts = st.text(max_size=30)
ext_fields = st.dictionaries(texts, texts, max_size=6)
remarks = st.one_of(st.none(), st.text(min_size=1, max_size=40))
bodies = st.binary(max_size=300)


@st.composite
def commands(draw: st.DrawFn) -> RemotingCommand:
    kind = draw(st.sampled_from(SerializeType))
    short = kind == SerializeType.ROCKETMQ
    lo, hi = (-(2**15), 2**15 - 1) if short else (-(2**31), 2**31 - 1)
    return RemotingCommand(
        code=draw(st.integers(lo, hi)),
        language=draw(st.integers(0, 255)),
        version=draw(st.integers(lo, hi)),
        opaque=draw(st.integers(-(2**31), 2**31 - 1)),
        flag=draw(st.integers(-(2**31), 2**31 - 1)),
        remark=draw(remarks),
        ext_fields=draw(ext_fields),
        body=draw(bodies),
        serialize_type=kind,
    )


@settings(max_examples=examples(150), deadline=None)
@given(commands())
def test_round_trip(cmd: RemotingCommand) -> None:
    frame = encode_command(cmd)
    (length,) = struct.unpack_from(">i", frame)
    assert length == len(frame) - 4
    assert frame[4] == cmd.serialize_type
    assert decode_frame(frame[4:]) == cmd


@settings(max_examples=examples(50), deadline=None)
@given(st.lists(commands(), min_size=1, max_size=5), st.data())
def test_splitter_returns_the_same_frames_for_any_split(
    cmds: list[RemotingCommand], data: st.DataObject
) -> None:
    stream = b"".join(encode_command(c) for c in cmds)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=8)))
    decoder = CommandDecoder()
    got: list[RemotingCommand] = []
    prev = 0
    for cut in [*cuts, len(stream)]:
        got += decoder.feed(stream[prev:cut])
        prev = cut
    assert got == cmds
    assert decoder.buffered == 0


@settings(max_examples=examples(200), deadline=None)
@given(st.binary(max_size=200))
def test_garbage_raises_only_remoting_frame_error(raw: bytes) -> None:
    try:
        decode_frame(raw)
    except RemotingFrameError:
        pass


@settings(max_examples=examples(200), deadline=None)
@given(st.integers(0, 1), st.binary(max_size=120))
def test_garbage_headers_raise_only_remoting_frame_error(kind: int, header: bytes) -> None:
    frame = struct.pack(">I", (kind << 24) | len(header)) + header
    try:
        decode_frame(frame)
    except RemotingFrameError:
        pass


# -- bad input -------------------------------------------------------------------------------


def _frame_error(raw: bytes) -> str:
    with pytest.raises(RemotingFrameError) as info:
        decode_frame(raw)
    return str(info.value)


def test_frame_error_is_a_protocol_error() -> None:
    assert issubclass(RemotingFrameError, ProtocolError)


def test_truncated_binary_header() -> None:
    header = BINARY_REQUEST[8:18]
    assert "truncated binary header" in _frame_error(struct.pack(">I", 1 << 24 | 10) + header)


def test_binary_remark_longer_than_its_header() -> None:
    header = bytes.fromhex("000a000000000000010000000000000064") + b"x" * 4
    message = _frame_error(struct.pack(">I", 1 << 24 | len(header)) + header + bytes(4))
    assert "remark of 100 bytes" in message


def test_binary_ext_fields_past_the_header() -> None:
    header = bytes.fromhex("000a000000000000010000000000000000000000ff")
    assert "extFields length 255" in _frame_error(struct.pack(">I", 1 << 24 | len(header)) + header)


def test_binary_entry_cut_inside_the_ext_fields() -> None:
    entries = bytes.fromhex("0005") + b"topic" + bytes.fromhex("00000009") + b"T"
    header = (
        bytes.fromhex("000a000000000000010000000000000000")
        + struct.pack(">i", len(entries))
        + entries
    )
    assert "extFields value of 9 bytes" in _frame_error(
        struct.pack(">I", 1 << 24 | len(header)) + header
    )


def test_binary_header_with_bytes_after_its_ext_fields() -> None:
    header = BINARY_REQUEST[8:-2] + b"zz"
    message = _frame_error(struct.pack(">I", 1 << 24 | len(header)) + header)
    assert "2 bytes after its extFields" in message


def test_truncated_json_header() -> None:
    header = JSON_HEADER[:20]
    assert "does not parse" in _frame_error(struct.pack(">I", len(header)) + header)


def test_header_length_past_the_frame() -> None:
    message = _frame_error(struct.pack(">I", 1 << 24 | 500) + b"x" * 20)
    assert "header length 500 runs past the frame (20 bytes follow it)" in message


def test_frame_shorter_than_the_header_length_field() -> None:
    assert "shorter than" in _frame_error(b"\x01\x00")


def test_serialize_type_7() -> None:
    message = _frame_error(struct.pack(">I", 7 << 24 | 2) + b"{}")
    assert "unknown serialize type 7" in message


@pytest.mark.parametrize(
    ("header", "what"),
    [
        (b"[1,2]", "not an object but an array"),
        (b'"code"', "not an object but a string"),
        (b"null", "not an object but null"),
        (b"12", "not an object but a number"),
        (b"{}", "has no code"),
        (b'{"code":"10"}', "code is a string, not an integer"),
        (b'{"code":10.0}', "code is a number, not an integer"),
        (b'{"code":true}', "code is a boolean, not an integer"),
        (b'{"code":10,"opaque":4294967296}', "opaque 4294967296 is outside int32"),
        (b'{"code":10,"flag":[1]}', "flag is an array, not an integer"),
        (b'{"code":10,"remark":3}', "remark is a number, not a string"),
        (b'{"code":10,"language":{}}', "language is an object"),
        (b'{"code":10,"language":300}', "language is a number"),
        (b'{"code":10,"extFields":[]}', "extFields is an array, not an object"),
        (b'{"code":10,"extFields":{"a":{"b":1}}}', "extFields 'a' is an object"),
        (b'{"code":NaN}', "does not parse"),
        (b'{"code":10', "does not parse"),
        (b"\xff\xfe{}", "not UTF-8"),
    ],
)
def test_bad_json_headers(header: bytes, what: str) -> None:
    assert what in _frame_error(struct.pack(">I", len(header)) + header)


def test_a_frame_over_16_mib_fails_on_its_length_alone() -> None:
    splitter = FrameSplitter()
    with pytest.raises(RemotingFrameError, match="frame of 20971524 bytes exceeds the limit"):
        splitter.feed(struct.pack(">i", 20 * 1024 * 1024) + b"\x00\x00")
    assert splitter.buffered == 0
    with pytest.raises(RemotingFrameError, match="already failed"):
        splitter.feed(BINARY_REQUEST)


def test_a_frame_of_exactly_16_mib_is_read() -> None:
    header = b'{"code":10}'
    body = bytes(MAX_FRAME_BYTES - 8 - len(header))
    frame = struct.pack(">iI", MAX_FRAME_BYTES - 4, len(header)) + header + body
    assert len(frame) == MAX_FRAME_BYTES
    decoder = CommandDecoder()
    assert decoder.feed(frame[:100]) == []
    assert decoder.declared == MAX_FRAME_BYTES
    (cmd,) = decoder.feed(frame[100:])
    assert cmd.code == 10 and len(cmd.body) == len(body)
    with pytest.raises(RemotingFrameError, match="exceeds"):
        FrameSplitter().feed(struct.pack(">i", MAX_FRAME_BYTES - 3))


def test_negative_and_tiny_lengths() -> None:
    with pytest.raises(RemotingFrameError, match="leaves no room"):
        FrameSplitter().feed(struct.pack(">i", -1))
    with pytest.raises(RemotingFrameError, match="leaves no room"):
        FrameSplitter().feed(struct.pack(">i", 3) + b"abc")


def test_decoder_raises_on_a_bad_frame_after_good_ones() -> None:
    decoder = CommandDecoder()
    assert len(decoder.feed(BINARY_REQUEST)) == 1
    bad = struct.pack(">iI", 6, 7 << 24 | 2) + b"{}"
    with pytest.raises(RemotingFrameError, match="serialize type 7"):
        decoder.feed(bad)


def test_encoder_refuses_what_the_layout_cannot_hold() -> None:
    with pytest.raises(ValueError, match="int16"):
        encode_command(
            RemotingCommand(code=RequestCode.POP_MESSAGE, serialize_type=SerializeType.ROCKETMQ)
        )
    with pytest.raises(ValueError, match="int32"):
        encode_command(RemotingCommand(code=1, opaque=2**31))
    with pytest.raises(ValueError, match="exceeds"):
        encode_command(RemotingCommand(code=1, body=bytes(MAX_FRAME_BYTES)))
