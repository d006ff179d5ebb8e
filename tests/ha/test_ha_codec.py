"""The HA wire codec: exact byte layouts, round trips, any split of the stream, bad input."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.ha import (
    DEFAULT_MAX_BODY_BYTES,
    SLAVE_ACK_SIZE,
    SLAVE_HANDSHAKE_SIZE,
    TRANSFER_HEADER_SIZE,
    EpochEntry,
    HAConnectionState,
    MasterHandshake,
    MasterMessage,
    MasterStreamDecoder,
    MasterTransfer,
    ProtocolError,
    SlaveAck,
    SlaveHandshake,
    SlaveMessage,
    SlaveStreamDecoder,
    encode_master_handshake,
    encode_master_transfer,
    encode_slave_ack,
    encode_slave_handshake,
    encode_transfer_header,
    with_end_offsets,
)
from tests.hypothesis_profiles import examples

HANDSHAKE = SlaveHandshake(
    broker_id=7, address="127.0.0.1:10912", sync_from_last_file=True, async_learner=False
)
REPLY = MasterHandshake(
    master_max_offset=500,
    master_epoch=3,
    epoch_entries=(EpochEntry(epoch=1, start_offset=0), EpochEntry(epoch=3, start_offset=100)),
)
TRANSFER = MasterTransfer(
    offset=100, epoch=3, epoch_start_offset=50, confirm_offset=90, body=b"hello"
)
HEARTBEAT = MasterTransfer(offset=105, epoch=3, epoch_start_offset=50, confirm_offset=105)


def master_stream() -> bytes:
    return (
        encode_master_handshake(REPLY)
        + encode_master_transfer(TRANSFER)
        + encode_master_transfer(HEARTBEAT)
        + encode_master_transfer(
            MasterTransfer(
                offset=105, epoch=4, epoch_start_offset=105, confirm_offset=100, body=bytes(300)
            )
        )
    )


def slave_stream() -> bytes:
    return (
        encode_slave_handshake(HANDSHAKE)
        + encode_slave_ack(SlaveAck(max_offset=0))
        + encode_slave_ack(SlaveAck(max_offset=2**40))
    )


def decode_master_whole(data: bytes) -> list[MasterMessage]:
    return MasterStreamDecoder().feed(data)


def decode_slave_whole(data: bytes) -> list[SlaveMessage]:
    return SlaveStreamDecoder().feed(data)


# --------------------------------------------------------------------------- exact layouts


def test_slave_handshake_layout_is_design_section_5() -> None:
    addr = b"127.0.0.1:10912"
    expected = struct.pack(">iiqi", 1, 0b01, 7, len(addr)) + addr + bytes(50 - len(addr))
    assert encode_slave_handshake(HANDSHAKE) == expected
    assert len(expected) == SLAVE_HANDSHAKE_SIZE == 70


def test_handshake_flags_bits() -> None:
    both = SlaveHandshake(broker_id=1, address="", sync_from_last_file=True, async_learner=True)
    learner = SlaveHandshake(broker_id=1, address="", async_learner=True)
    assert struct.unpack_from(">i", encode_slave_handshake(both), 4) == (3,)
    assert struct.unpack_from(">i", encode_slave_handshake(learner), 4) == (2,)


def test_slave_ack_layout() -> None:
    assert encode_slave_ack(SlaveAck(max_offset=12345)) == struct.pack(">iq", 2, 12345)
    assert SLAVE_ACK_SIZE == 12


def test_master_handshake_layout() -> None:
    expected = (
        struct.pack(">iiqi", 1, 24, 500, 3) + struct.pack(">iq", 1, 0) + struct.pack(">iq", 3, 100)
    )
    assert encode_master_handshake(REPLY) == expected


def test_master_transfer_layout() -> None:
    expected = struct.pack(">iiqiqq", 2, 5, 100, 3, 50, 90) + b"hello"
    assert encode_master_transfer(TRANSFER) == expected
    assert encode_transfer_header(TRANSFER) == expected[:TRANSFER_HEADER_SIZE]
    assert TRANSFER_HEADER_SIZE == 36


def test_heartbeat_is_a_transfer_with_body_size_zero() -> None:
    assert encode_master_transfer(HEARTBEAT) == struct.pack(">iiqiqq", 2, 0, 105, 3, 50, 105)
    assert HEARTBEAT.is_heartbeat
    assert not TRANSFER.is_heartbeat


def test_states_are_the_design_numbers() -> None:
    assert [s.value for s in HAConnectionState] == [0, 1, 2, 3, 4]
    assert [s.name for s in HAConnectionState] == [
        "READY",
        "HANDSHAKE",
        "TRANSFER",
        "SUSPEND",
        "SHUTDOWN",
    ]


# --------------------------------------------------------------------------- round trips


def test_master_stream_round_trip() -> None:
    msgs = decode_master_whole(master_stream())
    assert msgs[0] == REPLY
    assert msgs[1] == TRANSFER
    assert msgs[2] == HEARTBEAT
    assert isinstance(msgs[3], MasterTransfer)
    assert bytes(msgs[3].body) == bytes(300)
    assert len(msgs) == 4


def test_slave_stream_round_trip() -> None:
    assert decode_slave_whole(slave_stream()) == [
        HANDSHAKE,
        SlaveAck(max_offset=0),
        SlaveAck(max_offset=2**40),
    ]


@pytest.mark.parametrize(
    "hs",
    [
        SlaveHandshake(broker_id=0, address=""),
        SlaveHandshake(broker_id=2**63 - 1, address="x" * 50, async_learner=True),
        SlaveHandshake(broker_id=3, address="[::1]:10912", sync_from_last_file=True),
        SlaveHandshake(broker_id=4, address="héte:1"),
    ],
)
def test_slave_handshake_round_trips(hs: SlaveHandshake) -> None:
    assert decode_slave_whole(encode_slave_handshake(hs)) == [hs]


def test_master_handshake_with_no_entries_round_trips() -> None:
    reply = MasterHandshake(master_max_offset=0, master_epoch=0, epoch_entries=())
    assert decode_master_whole(encode_master_handshake(reply)) == [reply]


def test_every_split_of_the_master_stream_gives_the_same_messages() -> None:
    data = master_stream()
    whole = decode_master_whole(data)
    for cut in range(len(data) + 1):
        dec = MasterStreamDecoder()
        got = dec.feed(data[:cut]) + dec.feed(data[cut:])
        assert got == whole, cut
        assert dec.buffered == 0


def test_every_split_of_the_slave_stream_gives_the_same_messages() -> None:
    data = slave_stream()
    whole = decode_slave_whole(data)
    for cut in range(len(data) + 1):
        dec = SlaveStreamDecoder()
        assert dec.feed(data[:cut]) + dec.feed(data[cut:]) == whole, cut


def test_byte_at_a_time() -> None:
    data = master_stream()
    dec = MasterStreamDecoder()
    got: list[MasterMessage] = []
    for i in range(len(data)):
        got += dec.feed(data[i : i + 1])
        assert dec.buffered <= TRANSFER_HEADER_SIZE + 300
    assert got == decode_master_whole(data)
    sdata = slave_stream()
    sdec = SlaveStreamDecoder()
    sgot: list[SlaveMessage] = []
    for i in range(len(sdata)):
        sgot += sdec.feed(sdata[i : i + 1])
    assert sgot == decode_slave_whole(sdata)


@settings(max_examples=examples(150), deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=12))
def test_random_chunking_gives_the_same_messages(cuts: list[int]) -> None:
    data = master_stream()
    points = sorted({min(c, len(data)) for c in cuts})
    pieces = [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]
    dec = MasterStreamDecoder()
    got: list[MasterMessage] = []
    for p in pieces:
        got += dec.feed(p)
    assert got == decode_master_whole(data)


# --------------------------------------------------------------------------- zero copy


def test_whole_body_in_one_chunk_is_a_view_of_that_chunk() -> None:
    header = encode_master_handshake(REPLY)
    chunk = encode_master_transfer(TRANSFER)
    dec = MasterStreamDecoder()
    dec.feed(header)
    (t,) = dec.feed(chunk)
    assert isinstance(t, MasterTransfer)
    assert isinstance(t.body, memoryview)
    assert t.body.obj is chunk
    assert t.body.readonly


def test_mutable_input_is_not_aliased() -> None:
    buf = bytearray(encode_master_handshake(REPLY) + encode_master_transfer(TRANSFER))
    _reply, t = MasterStreamDecoder().feed(buf)
    buf[:] = bytes(len(buf))
    assert isinstance(t, MasterTransfer)
    assert bytes(t.body) == b"hello"


def test_memoryview_input() -> None:
    data = master_stream()
    assert MasterStreamDecoder().feed(memoryview(data)) == decode_master_whole(data)
    assert MasterStreamDecoder().feed(memoryview(bytearray(data))) == decode_master_whole(data)


def test_body_split_across_chunks_is_assembled_once() -> None:
    body = bytes(range(256)) * 40
    t = MasterTransfer(offset=0, epoch=1, epoch_start_offset=0, confirm_offset=0, body=body)
    data = encode_master_handshake(REPLY) + encode_master_transfer(t)
    dec = MasterStreamDecoder()
    got: list[MasterMessage] = []
    for i in range(0, len(data), 1000):
        got += dec.feed(data[i : i + 1000])
    assert isinstance(got[1], MasterTransfer)
    assert bytes(got[1].body) == body


# --------------------------------------------------------------------------- bad input


def feed_master(data: bytes, max_body: int = DEFAULT_MAX_BODY_BYTES) -> list[MasterMessage]:
    return MasterStreamDecoder(max_body).feed(data)


def transfer_raw(
    size: int, offset: int = 0, epoch: int = 1, start: int = 0, conf: int = 0
) -> bytes:
    return struct.pack(">iiqiqq", 2, size, offset, epoch, start, conf)


REPLY_RAW = encode_master_handshake(REPLY)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (struct.pack(">i", 0) + bytes(40), "bad state 0"),
        (struct.pack(">i", 3) + bytes(40), "bad state 3"),
        (struct.pack(">i", -1) + bytes(40), "bad state -1"),
        (transfer_raw(0), "unexpected state 2"),
        (REPLY_RAW + REPLY_RAW, "unexpected state 1"),
        (struct.pack(">iiqi", 1, -12, 0, 0), "negative body size"),
        (struct.pack(">iiqi", 1, 13, 0, 0), "not a multiple of 12"),
        (REPLY_RAW + transfer_raw(-1), "negative body size"),
        (REPLY_RAW + transfer_raw(2**31 - 1), "exceeds max_body_bytes"),
        (REPLY_RAW + transfer_raw(0, offset=-5, start=-5), "offset"),
        (REPLY_RAW + transfer_raw(0, offset=10, start=11), "epoch_start_offset"),
        (REPLY_RAW + transfer_raw(0, epoch=-1), "epoch"),
        (REPLY_RAW + transfer_raw(0, conf=-1), "confirm_offset"),
        (
            struct.pack(">iiqi", 1, 24, 500, 3)
            + struct.pack(">iq", 3, 0)
            + struct.pack(">iq", 1, 100),
            "does not follow",
        ),
        (
            struct.pack(">iiqi", 1, 24, 500, 3)
            + struct.pack(">iq", 1, 200)
            + struct.pack(">iq", 3, 100),
            "before epoch",
        ),
        (struct.pack(">iiqi", 1, 12, 500, 2) + struct.pack(">iq", 3, 0), "above master epoch"),
        (struct.pack(">iiqi", 1, 12, 50, 3) + struct.pack(">iq", 3, 100), "beyond master max"),
        (struct.pack(">iiqi", 1, 0, -1, 3), "master_max_offset"),
    ],
)
def test_bad_master_stream(data: bytes, message: str) -> None:
    with pytest.raises(ProtocolError, match=message):
        feed_master(data)


def test_max_body_is_configurable() -> None:
    empty_reply = struct.pack(">iiqi", 1, 0, 0, 0)
    assert len(feed_master(empty_reply + transfer_raw(10) + bytes(10), max_body=10)) == 2
    with pytest.raises(ProtocolError, match="exceeds max_body_bytes 9"):
        feed_master(empty_reply + transfer_raw(10), max_body=9)
    with pytest.raises(ProtocolError, match="exceeds max_body_bytes"):
        feed_master(struct.pack(">iiqi", 1, 24, 500, 3), max_body=12)


def handshake_raw(alen: int, addr: bytes = b"", flags: int = 0, broker_id: int = 1) -> bytes:
    return struct.pack(">iiqi50s", 1, flags, broker_id, alen, addr)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (handshake_raw(51), "address length 51"),
        (handshake_raw(-1), "address length -1"),
        (handshake_raw(2, b"ab\x00c"), "padding is not zero"),
        (handshake_raw(2, b"\xff\xfe"), "not UTF-8"),
        (handshake_raw(0, flags=4), "unknown handshake flags"),
        (handshake_raw(0, broker_id=-1), "broker_id"),
        (struct.pack(">iq", 2, 5), "unexpected state 2"),
        (handshake_raw(0) + handshake_raw(0), "unexpected state 1"),
        (handshake_raw(0) + struct.pack(">iq", 2, -1), "negative slave max offset"),
        (handshake_raw(0) + struct.pack(">iq", 7, 1), "bad state 7"),
    ],
)
def test_bad_slave_stream(data: bytes, message: str) -> None:
    with pytest.raises(ProtocolError, match=message):
        SlaveStreamDecoder().feed(data)


def test_a_failed_decoder_stays_failed() -> None:
    dec = MasterStreamDecoder()
    with pytest.raises(ProtocolError):
        dec.feed(struct.pack(">i", 9))
    with pytest.raises(ProtocolError, match="already failed"):
        dec.feed(REPLY_RAW)
    assert dec.buffered == 0


def test_local_construction_checks_fields() -> None:
    with pytest.raises(ValueError, match="exceeds 50 bytes"):
        SlaveHandshake(broker_id=1, address="x" * 51)
    with pytest.raises(ValueError, match="broker_id"):
        SlaveHandshake(broker_id=-1, address="")
    with pytest.raises(ValueError, match="must be an int"):
        SlaveAck(max_offset=True)
    with pytest.raises(ValueError, match="epoch_start_offset"):
        MasterTransfer(offset=5, epoch=1, epoch_start_offset=6, confirm_offset=0)
    with pytest.raises(ValueError, match="epoch"):
        EpochEntry(epoch=2**31, start_offset=0)
    with pytest.raises(ValueError, match="does not follow"):
        MasterHandshake(
            master_max_offset=0,
            master_epoch=2,
            epoch_entries=(
                EpochEntry(epoch=2, start_offset=0),
                EpochEntry(epoch=2, start_offset=0),
            ),
        )


# --------------------------------------------------------------------------- fuzz


def feed_garbage(
    dec: MasterStreamDecoder | SlaveStreamDecoder, data: bytes, chunk: int, bound: int
) -> None:
    """Feeds ``data`` to ``dec`` ``chunk`` bytes at a time: it never buffers more than ``bound``
    bytes, and the only error it may raise is ProtocolError (which ends the feeding)."""
    try:
        for i in range(0, len(data), chunk):
            dec.feed(data[i : i + chunk])
            assert dec.buffered <= bound
    except ProtocolError:
        pass


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    prefix=st.sampled_from([b"", REPLY_RAW, REPLY_RAW + encode_master_transfer(TRANSFER)]),
    garbage=st.binary(max_size=300),
    chunk=st.integers(min_value=1, max_value=64),
)
def test_garbage_to_the_slave_only_raises_protocol_error(
    prefix: bytes, garbage: bytes, chunk: int
) -> None:
    feed_garbage(
        MasterStreamDecoder(max_body_bytes=1024),
        prefix + garbage,
        chunk,
        TRANSFER_HEADER_SIZE + 1024,
    )


@settings(max_examples=examples(300), deadline=None)
@given(
    prefix=st.sampled_from([b"", encode_slave_handshake(HANDSHAKE)]),
    garbage=st.binary(max_size=300),
    chunk=st.integers(min_value=1, max_value=64),
)
def test_garbage_to_the_master_only_raises_protocol_error(
    prefix: bytes, garbage: bytes, chunk: int
) -> None:
    feed_garbage(SlaveStreamDecoder(), prefix + garbage, chunk, SLAVE_HANDSHAKE_SIZE)


@settings(max_examples=examples(200), deadline=None)
@given(data=st.data())
def test_truncated_valid_stream_buffers_and_never_errors(data: st.DataObject) -> None:
    stream = master_stream()
    cut = data.draw(st.integers(min_value=0, max_value=len(stream)))
    dec = MasterStreamDecoder()
    msgs = dec.feed(stream[:cut])
    assert msgs == decode_master_whole(stream)[: len(msgs)]


entries_strategy = st.lists(
    st.tuples(st.integers(min_value=1, max_value=5), st.integers(min_value=0, max_value=500)),
    max_size=8,
).map(
    lambda steps: tuple(
        EpochEntry(
            epoch=sum(s[0] for s in steps[: i + 1]), start_offset=sum(s[1] for s in steps[: i + 1])
        )
        for i in range(len(steps))
    )
)


@settings(max_examples=examples(150), deadline=None)
@given(entries=entries_strategy, extra=st.integers(min_value=0, max_value=1000))
def test_any_valid_handshake_reply_round_trips(entries: tuple[EpochEntry, ...], extra: int) -> None:
    max_offset = (entries[-1].start_offset if entries else 0) + extra
    reply = MasterHandshake(
        master_max_offset=max_offset,
        master_epoch=entries[-1].epoch if entries else 0,
        epoch_entries=entries,
    )
    assert decode_master_whole(encode_master_handshake(reply)) == [reply]


def test_with_end_offsets() -> None:
    entries = (
        EpochEntry(epoch=1, start_offset=0),
        EpochEntry(epoch=2, start_offset=100),
        EpochEntry(epoch=3, start_offset=100),
        EpochEntry(epoch=4, start_offset=300),
    )
    assert [(r.epoch, r.start_offset, r.end_offset) for r in with_end_offsets(entries, 450)] == [
        (1, 0, 100),
        (2, 100, 100),
        (3, 100, 300),
        (4, 300, 450),
    ]
    # A stale entry beyond the log's end gets an empty range; earlier ends are clamped.
    assert [(r.start_offset, r.end_offset) for r in with_end_offsets(entries, 250)] == [
        (0, 100),
        (100, 100),
        (100, 250),
        (300, 300),
    ]
    assert with_end_offsets((), 10) == ()
