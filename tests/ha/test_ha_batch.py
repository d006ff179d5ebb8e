"""The batch planner: batches never cross an epoch boundary and are labelled with their epoch."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.ha.batch import Batch, epoch_at, next_batch, record_aligned_length
from protocol.ha import EpochEntry
from protocol.message import Message, RecordEncoder, encode_blank
from tests.ha.ha_harness import H
from tests.hypothesis_profiles import examples

ENTRIES = H((1, 0), (2, 100), (3, 100), (4, 250))


def test_a_batch_stops_at_the_epoch_end() -> None:
    b = next_batch(40, 400, ENTRIES, 1000, 30)
    assert b == Batch(
        offset=40, epoch=1, epoch_start_offset=0, length=60, confirm_offset=30, max_length=60
    )
    assert b.end_offset == 100


def test_an_empty_epoch_is_skipped_and_the_label_is_the_epoch_of_the_bytes() -> None:
    b = next_batch(100, 400, ENTRIES, 1000, 0)
    assert b is not None
    assert (b.epoch, b.epoch_start_offset, b.length) == (3, 100, 150)


def test_the_last_epoch_ends_at_max_offset_and_max_batch_bytes_cuts() -> None:
    b = next_batch(250, 400, ENTRIES, 64, 0)
    assert b is not None
    assert (b.epoch, b.offset, b.length, b.max_length) == (4, 250, 64, 150)
    b = next_batch(390, 400, ENTRIES, 64, 0)
    assert b is not None and b.length == 10


def test_nothing_to_send() -> None:
    assert next_batch(400, 400, ENTRIES, 64, 0) is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((401, 400, ENTRIES, 64, 0), "beyond max offset"),
        ((5, 400, H((1, 10)), 64, 0), "precedes every epoch"),
        ((5, 400, (), 64, 0), "precedes every epoch"),
        ((0, 400, ENTRIES, 0, 0), "max_batch_bytes"),
    ],
)
def test_bad_inputs(args: tuple[int, int, tuple[EpochEntry, ...], int, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        next_batch(*args)


def test_epoch_at() -> None:
    assert epoch_at(ENTRIES, 0).epoch == 1
    assert epoch_at(ENTRIES, 99).epoch == 1
    assert epoch_at(ENTRIES, 100).epoch == 3
    assert epoch_at(ENTRIES, 10**9).epoch == 4
    with pytest.raises(ValueError):
        epoch_at(H((1, 10)), 9)


def test_align_callback_cuts_at_a_record_boundary() -> None:
    boundaries = [0, 30, 70, 100, 180, 250, 400]

    def align(start: int, limit: int) -> int:
        inside = [b for b in boundaries if start < b <= limit]
        return inside[-1] if inside else min(b for b in boundaries if b > start)

    b = next_batch(0, 400, ENTRIES, 80, 0, align=align)
    assert b is not None and b.length == 70
    b = next_batch(100, 400, ENTRIES, 50, 0, align=align)  # the record 100..180 is longer
    assert b is not None and b.length == 80
    with pytest.raises(ValueError, match="outside"):
        next_batch(100, 400, ENTRIES, 50, 0, align=lambda s, lim: 260)
    with pytest.raises(ValueError, match="outside"):
        next_batch(100, 400, ENTRIES, 50, 0, align=lambda s, lim: s)


@st.composite
def histories(draw: st.DrawFn) -> tuple[tuple[EpochEntry, ...], int]:
    steps = draw(
        st.lists(
            st.tuples(st.integers(1, 3), st.integers(0, 300)),
            min_size=1,
            max_size=8,
        )
    )
    first = draw(st.integers(0, 100))
    entries = []
    epoch, start = 0, first
    for i, (de, ds) in enumerate(steps):
        epoch += de
        start += 0 if i == 0 else ds
        entries.append(EpochEntry(epoch=epoch, start_offset=start))
    max_offset = start + draw(st.integers(0, 300))
    return tuple(entries), max_offset


@settings(max_examples=examples(400), deadline=None)
@given(history=histories(), max_batch=st.integers(1, 400), data=st.data())
def test_batches_cover_the_log_and_never_cross_an_epoch(
    history: tuple[tuple[EpochEntry, ...], int], max_batch: int, data: st.DataObject
) -> None:
    entries, max_offset = history
    offset = data.draw(st.integers(entries[0].start_offset, max_offset))
    starts = [e.start_offset for e in entries]
    while (b := next_batch(offset, max_offset, entries, max_batch, 7)) is not None:
        assert b.offset == offset
        assert 0 < b.length <= max_batch
        assert b.length <= b.max_length
        # No epoch begins strictly inside the batch.
        assert not any(b.offset < s < b.end_offset for s in starts)
        # The label is the epoch of the bytes.
        assert epoch_at(entries, b.offset) == EpochEntry(
            epoch=b.epoch, start_offset=b.epoch_start_offset
        )
        assert epoch_at(entries, b.end_offset - 1).epoch == b.epoch
        assert b.confirm_offset == 7
        offset = b.end_offset
    assert offset == max_offset


def records(sizes: list[int]) -> bytes:
    enc = RecordEncoder("127.0.0.1:10911")
    out = bytearray()
    for i, n in enumerate(sizes):
        out += enc.encode(
            Message(topic="t", body=bytes(n)),
            queue_id=0,
            queue_offset=i,
            physical_offset=len(out),
            store_timestamp=1,
        )
    return bytes(out)


def test_record_aligned_length_is_the_last_whole_record() -> None:
    sizes = [len(records([n])) for n in (10, 200, 5)] + [64]
    log = records([10, 200, 5]) + encode_blank(64)
    boundaries = [0]
    for n in sizes:
        boundaries.append(boundaries[-1] + n)
    for cut in range(len(log) + 1):
        expected = max(b for b in boundaries if b <= cut)
        assert record_aligned_length(log[:cut]) == expected, cut
        assert record_aligned_length(memoryview(log)[:cut]) == expected
    with pytest.raises(ValueError, match="no record"):
        record_aligned_length(bytes(16))
