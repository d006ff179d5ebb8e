"""REPAIR_RECORD (issue 31): the request and its answer keep their wire bytes, round-trip through
a real frame, and the asker's check refuses what must not be written (another epoch, a range
beyond the replica's epoch, the wrong size, bytes failing their CRC or naming another offset)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.broker_requests.repair import (
    MAX_REPAIR_BYTES,
    RepairedRecord,
    RepairRecord,
    intact_records,
)
from protocol.codes import RequestCode
from protocol.fields import FieldError
from protocol.message import Message, RecordEncoder, encode_blank
from protocol.remoting import FrameDecoder, encode_frame, request

GOLDEN_REQUEST = "000000229600cd1446010083a66f6666736574cd7500a473697a65cd012ca565706f636802c0"
GOLDEN_ANSWER = (
    "0000002b960001010083a565706f636802aa65706f6368537461727400a865706f6368456e64ce00015f90c4020102"
)


def record(at: int, body: bytes = b"hello") -> bytes:
    return RecordEncoder("127.0.0.1:1").encode(
        Message(topic="Rot", body=body),
        queue_id=0,
        queue_offset=0,
        physical_offset=at,
        store_timestamp=1,
    )


def test_the_request_keeps_its_wire_bytes() -> None:
    typed = RepairRecord(offset=29952, size=300, epoch=2)
    header, body = typed.encode()
    assert encode_frame(request(RequestCode.REPAIR_RECORD, 1, header, body)).hex() == (
        GOLDEN_REQUEST
    )
    (frame,) = FrameDecoder().feed(bytes.fromhex(GOLDEN_REQUEST))
    assert frame.code == RequestCode.REPAIR_RECORD
    assert int(RequestCode.REPAIR_RECORD) == 5190
    assert RepairRecord.parse(frame.header, frame.body) == typed


def test_the_answer_keeps_its_wire_bytes() -> None:
    answer = RepairedRecord(epoch=2, epoch_start=0, epoch_end=90000, raw=b"\x01\x02")
    header, body = answer.encode()
    assert encode_frame(request(1, 1, header, body)).hex() == GOLDEN_ANSWER
    (frame,) = FrameDecoder().feed(bytes.fromhex(GOLDEN_ANSWER))
    assert RepairedRecord.parse(frame.header, frame.body) == answer


offsets = st.integers(0, (1 << 62))


@given(offsets, st.integers(1, MAX_REPAIR_BYTES), st.integers(0, 1 << 31))
def test_any_request_round_trips(offset: int, size: int, epoch: int) -> None:
    typed = RepairRecord(offset=offset, size=size, epoch=epoch)
    (frame,) = FrameDecoder().feed(encode_frame(request(typed.code, 7, *typed.encode())))
    assert RepairRecord.parse(frame.header, frame.body) == typed


@given(st.integers(0, 1 << 31), offsets, st.integers(0, 1 << 20), st.binary(max_size=64))
def test_any_answer_round_trips(epoch: int, start: int, length: int, raw: bytes) -> None:
    answer = RepairedRecord(epoch=epoch, epoch_start=start, epoch_end=start + length, raw=raw)
    (frame,) = FrameDecoder().feed(encode_frame(request(1, 7, *answer.encode())))
    assert RepairedRecord.parse(frame.header, frame.body) == answer


@pytest.mark.parametrize(
    ("header", "message"),
    [
        ({"size": 1, "epoch": 1}, "'offset'"),
        ({"offset": -1, "size": 1, "epoch": 1}, "offset must be >= 0"),
        ({"offset": 0, "size": 0, "epoch": 1}, "size must be 1.."),
        ({"offset": 0, "size": MAX_REPAIR_BYTES + 1, "epoch": 1}, "size must be 1.."),
        ({"offset": 0, "size": 1, "epoch": -2}, "epoch must be >= 0"),
    ],
)
def test_a_bad_request_is_one_field_error(header: dict[str, int], message: str) -> None:
    with pytest.raises(FieldError, match=re.escape(message)):
        RepairRecord.parse(header, None)


def test_an_answer_that_is_no_epoch_entry_is_one_field_error() -> None:
    with pytest.raises(FieldError, match="is not an epoch entry"):
        RepairedRecord.parse({"epoch": 1, "epochStart": 10, "epochEnd": 5}, b"")


def test_intact_bytes_of_the_same_epoch_may_be_written() -> None:
    first = record(1000)
    second = record(1000 + len(first), b"world")
    raw = first + second
    asked = RepairRecord(offset=1000, size=len(raw), epoch=3)
    assert intact_records(raw, 1000) is None
    assert RepairedRecord(epoch=3, epoch_start=0, epoch_end=5000, raw=raw).problem(asked) is None


def test_records_ending_in_a_segments_blank_tail_may_be_written() -> None:
    # A short segment file loses the end of a segment: the range to fetch holds records and
    # the segment's blank tail. Every replica refused it ("bad magic 0xcbd43194"), so a slave
    # whose file was cut kept hundreds of messages unreadable that its master held intact.
    first = record(1000)
    raw = first + encode_blank(300)
    asked = RepairRecord(offset=1000, size=len(raw), epoch=3)
    assert intact_records(raw, 1000) is None
    assert RepairedRecord(epoch=3, epoch_start=0, epoch_end=5000, raw=raw).problem(asked) is None
    assert intact_records(encode_blank(300), 1000) is None
    # A blank that does not end the range, or with bytes past its prefix, is not one.
    assert intact_records(encode_blank(300) + record(1300), 1000) is not None
    assert intact_records(first + encode_blank(300)[:-1] + b"x", 1000) is not None
    assert intact_records(first + encode_blank(300)[:-10], 1000) is not None


def test_what_the_asker_refuses() -> None:
    raw = record(1000)
    asked = RepairRecord(offset=1000, size=len(raw), epoch=3)

    def problem(epoch: int, start: int, end: int, data: bytes) -> str | None:
        return RepairedRecord(epoch=epoch, epoch_start=start, epoch_end=end, raw=data).problem(
            asked
        )

    assert problem(2, 0, 5000, raw) == "its epoch at offset 1000 is 2, not 3"
    beyond = problem(3, 0, 1010, raw)
    assert beyond is not None and "beyond its epoch 3 (0..1010)" in beyond
    after = problem(3, 1001, 5000, raw)
    assert after is not None and "beyond its epoch" in after
    assert problem(3, 0, 5000, raw[:-1]) == f"{len(raw) - 1} bytes answered for {len(raw)}"
    flipped = bytearray(raw)
    flipped[-10] ^= 0x01
    crc = problem(3, 0, 5000, bytes(flipped))
    assert crc is not None and "CRC mismatch" in crc
    elsewhere = record(2000)
    moved = problem(3, 0, 5000, elsewhere)
    assert moved == "the record at commitlog offset 1000 says it is at 2000"
    size_field = bytearray(raw)
    size_field[3] ^= 0x40
    assert problem(3, 0, 5000, bytes(size_field)) is not None
    assert intact_records(b"", 0) == "no bytes"
