"""protocol.remoting.encode_frame_parts: the head and the body of a frame, which the server
queues apart so a large body is copied once; joined, they are exactly encode_frame's bytes, for
bodies at every msgpack bin length boundary and any header."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.remoting import (
    KIND_REQUEST,
    KIND_RESPONSE,
    Frame,
    FrameDecoder,
    Scalar,
    encode_frame,
    encode_frame_parts,
)
from tests.hypothesis_profiles import examples

SIZES = (0, 1, 255, 256, 4095, 4096, 65535, 65536, 70_000)
scalars = st.one_of(st.integers(-(2**63), 2**63 - 1), st.text(max_size=20), st.booleans())


@settings(max_examples=examples(200), deadline=None)
@given(
    st.sampled_from((KIND_REQUEST, KIND_RESPONSE)),
    st.integers(0, 2**31),
    st.integers(0, 2**31),
    st.integers(0, 3),
    st.dictionaries(st.text(max_size=10), scalars, max_size=5),
    st.one_of(st.none(), st.sampled_from(SIZES), st.integers(0, 3000)),
)
def test_the_parts_joined_are_the_frame(
    kind: int, code: int, opaque: int, flags: int, header: dict[str, Scalar], size: int | None
) -> None:
    body = None if size is None else bytes(range(256)) * (size // 256) + bytes(size % 256)
    frame = Frame(kind=kind, code=code, opaque=opaque, flags=flags, header=header, body=body)
    head, rest = encode_frame_parts(frame)
    assert head + rest == encode_frame(frame)
    if body:
        assert rest is body  # not copied
    assert list(FrameDecoder().feed(head + rest)) == [frame]
