"""The remoting frame codec: round trips, incremental feeding, and garbage that must raise
ProtocolError and nothing else."""

from __future__ import annotations

import re
import struct
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.codes import RequestCode, ResponseCode
from protocol.remoting import (
    Frame,
    FrameDecoder,
    ProtocolError,
    encode_frame,
    request,
    response,
)
from tests.hypothesis_profiles import examples

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.text(max_size=20),
    st.floats(allow_nan=False),
    st.binary(max_size=24),
)
headers = st.dictionaries(st.text(max_size=10), scalars, max_size=6)
frames = st.builds(
    lambda kind, code, opaque, flags, header, body: Frame(
        kind=kind, code=code, opaque=opaque, flags=flags, header=header, body=body
    ),
    st.sampled_from([0, 1]),
    st.integers(0, 2**31),
    st.integers(0, 2**62),
    st.integers(0, 3),
    headers,
    st.one_of(st.none(), st.binary(max_size=200)),
)


@given(st.lists(frames, min_size=1, max_size=5))
def test_frames_round_trip_through_encoder_and_decoder(fs: list[Frame]) -> None:
    data = b"".join(encode_frame(f) for f in fs)
    assert FrameDecoder().feed(data) == fs


@given(frames, st.integers(1, 7))
def test_decoder_reassembles_frames_split_anywhere(frame: Frame, step: int) -> None:
    data = encode_frame(frame) * 2
    dec = FrameDecoder()
    out: list[Frame] = []
    for i in range(0, len(data), step):
        out += dec.feed(data[i : i + step])
    assert out == [frame, frame]
    assert dec.buffered == 0


def test_response_carries_request_opaque() -> None:
    req = request(RequestCode.SEND_MESSAGE, 42, {"topic": "T"}, b"x")
    resp = response(req, ResponseCode.SUCCESS, {"queueOffset": 1})
    assert resp.opaque == 42 and not resp.is_request and req.is_request


def test_oneway_flag() -> None:
    assert request(1, 1, oneway=True).is_oneway
    assert not request(1, 1).is_oneway


def test_frame_claiming_4gib_is_refused_before_buffering() -> None:
    dec = FrameDecoder(max_frame_bytes=1024)
    with pytest.raises(ProtocolError, match="exceeds max_frame_bytes"):
        dec.feed(struct.pack(">I", 0xFFFFFFFF) + b"abc")


def test_truncated_frame_waits_for_more_bytes() -> None:
    data = encode_frame(request(10, 1, {"topic": "T"}, b"body"))
    dec = FrameDecoder()
    assert dec.feed(data[:-1]) == []
    assert dec.buffered == len(data) - 1
    assert len(dec.feed(data[-1:])) == 1


@pytest.mark.parametrize(
    "obj",
    [
        [0, 1, 2, 3, {}],  # five elements
        [2, 1, 1, 0, {}, None],  # bad kind
        [0, "x", 1, 0, {}, None],  # code not int
        [0, 1, 1, 0, [], None],  # header not a map
        [0, 1, 1, 0, {"a": [1]}, None],  # header value not scalar
        [0, 1, 1, 0, {}, "text"],  # body not bytes
        {"a": 1},
    ],
)
def test_well_formed_msgpack_of_the_wrong_shape_is_a_protocol_error(obj: object) -> None:
    payload = msgpack.packb(obj, use_bin_type=True)
    with pytest.raises(ProtocolError):
        FrameDecoder().feed(struct.pack(">I", len(payload)) + payload)


@pytest.mark.parametrize(
    ("header", "message"),
    [
        ({"a": 1, b"k": 2}, "frame header key is not a string"),
        ({"a": 1, "b": b"x", "c": [1]}, "frame header 'c' is not a scalar"),
        ({"a": {"b": 1}, "c": 2}, "frame header 'a' is not a scalar"),
    ],
)
def test_a_header_entry_of_the_wrong_type_is_named_wherever_it_is(
    header: dict[Any, Any], message: str
) -> None:
    # The decoder checks the entries in one pass and only then, for a bad one, which it is.
    payload = msgpack.packb([0, 1, 1, 0, header, None], use_bin_type=True)
    with pytest.raises(ProtocolError, match=re.escape(message)):
        FrameDecoder().feed(struct.pack(">I", len(payload)) + payload)


@settings(max_examples=examples(300))
@given(st.binary(max_size=300))
def test_garbage_raises_protocol_error_and_nothing_else(data: bytes) -> None:
    dec = FrameDecoder(max_frame_bytes=4096)
    try:
        dec.feed(data)
    except ProtocolError:
        pass
    assert dec.buffered <= 4096 + 4


@given(st.binary(min_size=1, max_size=200))
def test_garbage_payload_with_valid_length_prefix(payload: bytes) -> None:
    try:
        FrameDecoder().feed(struct.pack(">I", len(payload)) + payload)
    except ProtocolError:
        pass
