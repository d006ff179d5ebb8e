"""The idempotence core (protocol/idempotence.py): header fields, record values, the window
check, epochs, expiry, rebuild from records and snapshots; a model-based property test."""

from __future__ import annotations

from array import array
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.fields import FieldError
from protocol.idempotence import (
    MAX_EPOCH,
    MAX_PRODUCER_ID,
    MAX_SEQUENCE,
    PART_BYTES,
    PROP_PRODUCER_SEQ,
    SEQ_FIELD,
    SEQ_FIELD_BYTES,
    WINDOW,
    ProducerSeq,
    ProducerStates,
    QueueWindow,
    RecordSeq,
    StoredBatch,
    Verdict,
    decode_snapshot,
    decode_snapshot_part,
    encode_snapshot,
    pack_producer_seq,
    parse_record_seq,
    record_seq_value,
    sequenced_records,
)
from protocol.message import Message, RecordEncoder, RecordError, encode_blank
from tests.hypothesis_profiles import examples

T = "orders"


def states(**kw: int) -> ProducerStates:
    return ProducerStates(
        expiry_ms=kw.get("expiry_ms", 60_000), max_windows=kw.get("max_windows", 1000)
    )


def batch(seq: int, offset: int, n: int = 1, queue_id: int = 0, stored_at: int = 1) -> StoredBatch:
    return StoredBatch(seq, queue_id, seq, [offset + i for i in range(n)], offset + n, stored_at)


def fields(b: StoredBatch) -> tuple[int, int, int, list[int], int, int]:
    """What :meth:`ProducerStates.stored_next` takes of a stored request."""
    return (
        b.sequence,
        b.queue_id,
        b.first_queue_offset,
        b.physical_offsets,
        b.end_offset,
        b.store_timestamp,
    )


def store(s: ProducerStates, seq: ProducerSeq, offset: int, now: int = 0, q: int = 0) -> None:
    assert s.check(T, q, seq).verdict is Verdict.NEW
    s.stored(T, q, seq, batch(seq.sequence, offset, queue_id=q), now)


def assert_usual_windows(s: ProducerStates) -> None:
    """Every kept window gives the usual send's short way (:meth:`ProducerStates.next_window`)
    exactly the request right after its newest batch, whichever way the batches came (stored,
    the short way, replayed, a snapshot): :attr:`QueueWindow.next_sequence` moves with them."""
    for pid, epoch, _, windows in s.to_document():
        for topic, qid, _, batches in windows:
            top = max((b[0] for b in batches), default=-1)
            for n in range(max(0, top - 2), top + 3):
                found = s.next_window(topic, qid, ProducerSeq(pid, epoch, n))
                assert (found is not None) == (bool(batches) and n == top + 1), (qid, n, top)


# -- fields ------------------------------------------------------------------------------------


def test_header_fields_round_trip_and_absent() -> None:
    seq = ProducerSeq(7, 2, 41)
    header: dict[str, object] = {"topic": T}
    seq.add_to(header)
    assert header == {
        "topic": T,
        SEQ_FIELD: bytes.fromhex("0000000000000007000000020000000000000029"),
    }
    assert header[SEQ_FIELD] == pack_producer_seq(7, 2, 41)
    assert ProducerSeq.parse(header) == seq
    assert ProducerSeq.parse({"topic": T}) is None


def test_the_three_fields_of_earlier_sdks_are_read_too() -> None:
    header = {"topic": T, "producerId": 7, "producerEpoch": 2, "sequence": 41}
    assert ProducerSeq.parse(header) == ProducerSeq(7, 2, 41)


@settings(max_examples=examples(200))
@given(st.integers(0, MAX_PRODUCER_ID), st.integers(0, MAX_EPOCH), st.integers(0, MAX_SEQUENCE))
def test_the_packed_field_round_trips(pid: int, epoch: int, sequence: int) -> None:
    header: dict[str, object] = {}
    ProducerSeq(pid, epoch, sequence).add_to(header)
    assert len(header[SEQ_FIELD]) == SEQ_FIELD_BYTES  # type: ignore[arg-type]
    assert ProducerSeq.parse(header) == ProducerSeq(pid, epoch, sequence)


@pytest.mark.parametrize(
    "header",
    [
        {SEQ_FIELD: b"\x00" * 19},  # too short
        {SEQ_FIELD: b"\x00" * 21},
        {SEQ_FIELD: "0" * 20},  # not bytes
        {SEQ_FIELD: 7},
        {SEQ_FIELD: b"\x80" + b"\x00" * 19},  # producer id above 2**63 - 1
        {SEQ_FIELD: b"\x00" * 8 + b"\x80" + b"\x00" * 11},  # epoch above 2**31 - 1
        {SEQ_FIELD: b"\x00" * 12 + b"\x80" + b"\x00" * 7},  # sequence above 2**63 - 1
        {SEQ_FIELD: b"\x00" * 20, "producerId": 1, "producerEpoch": 0, "sequence": 0},  # both
        {SEQ_FIELD: b"\x00" * 20, "sequence": 0},
        {"producerId": 1, "producerEpoch": 0},  # sequence missing
        {"producerId": 1, "sequence": 0},
        {"producerId": -1, "producerEpoch": 0, "sequence": 0},
        {"producerId": 1, "producerEpoch": 2**31, "sequence": 0},
        {"producerId": 1, "producerEpoch": 0, "sequence": -5},
        {"producerId": "1", "producerEpoch": 0, "sequence": 0},
        {"producerId": 1, "producerEpoch": True, "sequence": 0},
    ],
)
def test_bad_header_fields_are_one_field_error(header: dict[str, object]) -> None:
    with pytest.raises(FieldError):
        ProducerSeq.parse(header)


def test_record_value_round_trip_and_bad_values() -> None:
    seq = ProducerSeq(9, 1, 100)
    assert parse_record_seq(record_seq_value(seq, 2, 3)) == RecordSeq(seq, 2, 3)
    for bad in (
        "",
        "1.2.3.4",
        "1.2.3.4.5.6",
        "1.2.3.3.3",
        "a.b.c.d.e",
        "1.-2.3.0.1",
        "\u0661.0.0.0.1",
    ):
        with pytest.raises(RecordError):
            parse_record_seq(bad)


# -- the check ---------------------------------------------------------------------------------


def test_retry_of_a_stored_request_is_a_duplicate_with_its_offsets() -> None:
    s = states()
    store(s, ProducerSeq(1, 0, 0), 100)
    store(s, ProducerSeq(1, 0, 1), 200)
    d = s.check(T, 0, ProducerSeq(1, 0, 0))
    assert d.verdict is Verdict.DUPLICATE
    assert d.batch is not None and d.batch.physical_offsets == [100]
    # another queue, another topic, another producer: separate sequences
    assert s.check(T, 1, ProducerSeq(1, 0, 0)).verdict is Verdict.NEW
    assert s.check("other", 0, ProducerSeq(1, 0, 0)).verdict is Verdict.NEW
    assert s.check(T, 0, ProducerSeq(2, 0, 0)).verdict is Verdict.NEW


def test_a_gap_is_stored_and_counted_and_the_missing_sequence_still_fits() -> None:
    s = states()
    store(s, ProducerSeq(1, 0, 0), 0)
    d = s.check(T, 0, ProducerSeq(1, 0, 3))
    assert d.verdict is Verdict.NEW and d.gap
    s.stored(T, 0, ProducerSeq(1, 0, 3), batch(3, 30), 0)
    # 1 and 2 were never stored: a late retry of them is new, once
    store(s, ProducerSeq(1, 0, 2), 40)
    assert s.check(T, 0, ProducerSeq(1, 0, 2)).verdict is Verdict.DUPLICATE
    assert s.check(T, 0, ProducerSeq(1, 0, 1)).verdict is Verdict.NEW
    assert not s.check(T, 0, ProducerSeq(1, 0, 4)).gap


def test_a_window_carried_past_a_change_of_the_state_is_not_updated() -> None:
    """The send path carries the window :meth:`ProducerStates.next_window` gave across the
    store to :meth:`~ProducerStates.stored_next`. When the state moved on in between (the
    producer expired or trimmed, a newer epoch of it, the same or a later sequence kept
    already), ``stored_next`` answers False and changes nothing: no window, floor, producer
    order or last use is touched, and the state's answers are those it gave before."""

    def carried(s: ProducerStates, n: int) -> QueueWindow:
        w = s.next_window(T, 0, ProducerSeq(1, 0, n))
        assert w is not None
        return w

    def answers(s: ProducerStates) -> list[Any]:
        return [
            s.check(T, 0, ProducerSeq(1, e, n)).verdict for e in (0, 1) for n in range(WINDOW + 4)
        ] + [s.windows, s.producers, s.epoch_of(1), s.to_document()]

    for change in ("expired", "trimmed", "newer epoch", "kept already", "later kept"):
        s = states(max_windows=2)
        for n in range(WINDOW + 1):  # a full window: the next batch would reuse the oldest
            store(s, ProducerSeq(1, 0, n), 10 * n, now=n)
        w = carried(s, WINDOW + 1)
        before = [b.sequence for b in w.batches], w.floor
        oldest = w.batches[0]
        if change == "expired":
            assert s.expire(WINDOW + 60_000) == 1
        elif change == "trimmed":
            store(s, ProducerSeq(2, 0, 0), 0, now=WINDOW, q=0)
            store(s, ProducerSeq(2, 0, 0), 0, now=WINDOW, q=1)
            assert s.epoch_of(1) is None
        elif change == "newer epoch":
            store(s, ProducerSeq(1, 1, 0), 0, now=WINDOW)
        elif change == "kept already":
            store(s, ProducerSeq(1, 0, WINDOW + 1), 10, now=WINDOW)
        else:
            store(s, ProducerSeq(1, 0, WINDOW + 2), 10, now=WINDOW)
        expected = answers(s)
        kept = None if w.owner is None else ([b.sequence for b in w.batches], w.floor)
        offsets = [99]
        assert not s.stored_next(w, 1, WINDOW + 1, 0, 99, offsets, 100, 10**9), change
        assert answers(s) == expected, change
        assert oldest.physical_offsets is not offsets, change  # not reused
        if kept is None:  # a window no producer keeps: as it was when carried
            assert ([b.sequence for b in w.batches], w.floor) == before, change
        else:
            assert ([b.sequence for b in w.batches], w.floor) == kept, change


def test_next_window_is_only_for_the_request_right_after_the_newest() -> None:
    """The send path's fast way (:meth:`ProducerStates.next_window` and
    :meth:`~ProducerStates.stored_next`) takes only what :meth:`~ProducerStates.check` would
    answer NEW without a gap, and leaves the state as :meth:`~ProducerStates.stored` does."""
    s = states()
    assert s.next_window(T, 0, ProducerSeq(1, 0, 0)) is None  # producer unknown
    store(s, ProducerSeq(1, 0, 0), 0)
    assert s.next_window(T, 1, ProducerSeq(1, 0, 1)) is None  # another queue: no window yet
    assert s.next_window(T, 0, ProducerSeq(1, 0, 0)) is None  # a retry
    assert s.next_window(T, 0, ProducerSeq(1, 0, 2)) is None  # a gap
    assert s.next_window(T, 0, ProducerSeq(1, 1, 1)) is None  # a newer epoch
    for n in range(1, WINDOW + 3):
        seq = ProducerSeq(1, 0, n)
        w = s.next_window(T, 0, seq)
        assert w is not None
        d = s.check(T, 0, seq)
        assert d.verdict is Verdict.NEW and not d.gap
        assert s.stored_next(w, 1, *fields(batch(n, 10 * n, stored_at=n)))
    kept = [s.check(T, 0, ProducerSeq(1, 0, n)) for n in range(WINDOW + 3)]
    assert [d.verdict for d in kept] == [Verdict.TOO_OLD] * 3 + [Verdict.DUPLICATE] * WINDOW
    assert [d.batch.physical_offsets for d in kept[3:] if d.batch] == [
        [10 * n] for n in range(3, WINDOW + 3)
    ]
    assert s.windows == 1 and s.producers == 1
    assert s.expire(WINDOW + 1 + 60_000) == 0  # last used at the newest stored_next
    assert s.expire(WINDOW + 2 + 60_000) == 1


def test_a_full_window_turns_as_a_ring_under_the_usual_sends() -> None:
    """A full window's usual update overwrites its oldest batch in place and moves its start
    on (no list shifted, no batch built): after any number of such updates in a row, with or
    without a read of the window between them (a retry's check turns it back to ascending
    order), it keeps the same WINDOW batch objects and reads as the whole check keeps it."""
    fast = states()
    whole = states()

    def usual(n: int) -> None:
        seq = ProducerSeq(1, 0, n)
        w = fast.next_window(T, 0, seq)
        assert w is not None, n
        assert fast.stored_next(w, 1, *fields(batch(n, 10 * n, stored_at=n)))
        assert whole.check(T, 0, seq).verdict is Verdict.NEW
        whole.stored(T, 0, seq, batch(n, 10 * n, stored_at=n), n)

    for s in (fast, whole):
        s.stored(T, 0, ProducerSeq(1, 0, 0), batch(0, 0, stored_at=0), 0)
    for n in range(1, WINDOW):  # full
        usual(n)
    w = fast.next_window(T, 0, ProducerSeq(1, 0, WINDOW))
    assert w is not None and w.start == 0
    objects = {id(b) for b in w.ring}
    n = WINDOW
    for run in (WINDOW // 2, 2 * WINDOW + 3, 1, WINDOW, 3):  # across the ring's end, twice
        for _ in range(run):
            usual(n)
            n += 1
        assert {id(b) for b in w.ring} == objects  # reused in place, none built
        assert w.start == run % WINDOW  # turned by the run: nothing read it in between
        retry = ProducerSeq(1, 0, n - 2)
        d = fast.check(T, 0, retry)  # reads it: turned back to ascending order
        assert d.verdict is Verdict.DUPLICATE and d.batch is not None
        assert d.batch.physical_offsets == [10 * (n - 2)]
        assert w.start == 0
        assert [b.sequence for b in w.batches] == list(range(n - WINDOW, n))
        assert w.floor == n - WINDOW - 1
        assert fast.check(T, 0, ProducerSeq(1, 0, n - WINDOW - 1)).verdict is Verdict.TOO_OLD
        assert fast.to_document() == whole.to_document()
    assert_usual_windows(fast)


def test_a_one_record_request_keeps_its_offset_and_no_list() -> None:
    """A single send's batch holds its record's offset, not the list of the store's answer
    (the window's usual update read it out), and reads as a list of one; a request of several
    keeps its offsets in an array. Offsets are set in place by index (a rebuilt batch, a
    partial repair)."""
    one = batch(5, 100)
    assert one.offsets is None and one.first_physical == 100
    assert one.physical_offsets == [100] and one.count == 1 and one.missing == []
    one.set_physical(0, -1)  # the log lacks it
    assert one.physical_offsets == [-1] and one.missing == [0]
    with pytest.raises(IndexError):
        one.set_physical(1, 7)
    several = batch(6, 200, n=3)
    assert isinstance(several.offsets, array)  # 8 bytes an offset, not a list of ints
    assert several.offsets.tolist() == [200, 201, 202] and several.count == 3
    several.set_physical(1, -1)
    assert several.physical_offsets == [200, -1, 202] and several.missing == [1]

    s = states()
    s.stored(T, 0, ProducerSeq(1, 0, 0), batch(0, 0), 0)
    for n in range(1, 3 * WINDOW):  # through a full window's ring, in place
        w = s.next_window(T, 0, ProducerSeq(1, 0, n))
        assert w is not None
        answer = [10 * n]
        assert s.stored_next(w, 1, n, 0, n, answer, 10 * n + 1, n)
        assert all(b.offsets is None for b in w.ring)  # the answer's list not kept
    # a batch of several records after single sends: its offsets kept, read as the check reads them
    w = s.next_window(T, 0, ProducerSeq(1, 0, 3 * WINDOW))
    assert w is not None
    assert s.stored_next(w, 1, 3 * WINDOW, 0, 999, [500, 501], 502, 99)
    d = s.check(T, 0, ProducerSeq(1, 0, 3 * WINDOW))
    assert d.verdict is Verdict.DUPLICATE and d.batch is not None
    assert d.batch.physical_offsets == [500, 501]
    d = s.check(T, 0, ProducerSeq(1, 0, 3 * WINDOW - 1))
    assert d.verdict is Verdict.DUPLICATE and d.batch is not None
    assert d.batch.physical_offsets == [10 * (3 * WINDOW - 1)]
    again = ProducerStates.from_document(s.to_document(), expiry_ms=60_000, max_windows=1000)
    assert again.to_document() == s.to_document()


def test_below_the_window_is_too_old() -> None:
    s = states()
    for i in range(WINDOW + 2):
        store(s, ProducerSeq(1, 0, i), i * 10)
    # 0 and 1 fell out: cannot tell
    d = s.check(T, 0, ProducerSeq(1, 0, 1))
    assert d.verdict is Verdict.TOO_OLD and "older than the last" in d.reason
    assert s.check(T, 0, ProducerSeq(1, 0, 2)).verdict is Verdict.DUPLICATE


def test_older_epoch_is_fenced_newer_epoch_starts_afresh() -> None:
    s = states()
    store(s, ProducerSeq(1, 3, 0), 0)
    store(s, ProducerSeq(1, 3, 1), 10)
    d = s.check(T, 0, ProducerSeq(1, 2, 5))
    assert d.verdict is Verdict.FENCED and "fenced" in d.reason
    # the restarted producer (epoch 4) starts at 0 again: new, not a duplicate
    assert s.check(T, 0, ProducerSeq(1, 4, 0)).verdict is Verdict.NEW
    store(s, ProducerSeq(1, 4, 0), 20)
    assert s.epoch_of(1) == 4
    assert s.check(T, 0, ProducerSeq(1, 3, 1)).verdict is Verdict.FENCED
    assert s.check(T, 0, ProducerSeq(1, 4, 0)).verdict is Verdict.DUPLICATE


def test_idle_producers_expire_and_windows_are_capped() -> None:
    s = states(expiry_ms=1000, max_windows=3)
    store(s, ProducerSeq(1, 0, 0), 0, now=0)
    store(s, ProducerSeq(2, 0, 0), 0, now=500)
    assert s.expire(1000) == 1  # producer 1 idle for 1000 ms
    assert s.producers == 1 and s.check(T, 0, ProducerSeq(1, 0, 0)).verdict is Verdict.NEW
    store(s, ProducerSeq(3, 0, 0), 0, now=600, q=0)
    store(s, ProducerSeq(3, 0, 0), 0, now=600, q=1)
    store(s, ProducerSeq(4, 0, 0), 0, now=700)  # 4 windows > 3: the least recently used goes
    assert s.windows == 3 and s.epoch_of(2) is None and s.expired == 2


def test_replayed_records_rebuild_the_window_partial_batches_included() -> None:
    s = states()
    seq = ProducerSeq(5, 1, 7)
    # a batch of three whose middle record the log does not hold (a failover cut it)
    for index, off, qoff in ((2, 300, 12), (0, 100, 10)):
        s.replayed(
            T,
            0,
            RecordSeq(seq, index, 3),
            physical_offset=off,
            size=50,
            queue_offset=qoff,
            store_timestamp=9,
        )
    d = s.check(T, 0, seq)
    assert d.verdict is Verdict.PARTIAL and d.batch is not None
    assert d.batch.missing == [1]
    assert d.batch.first_queue_offset == 10 and d.batch.end_offset == 350
    s.replayed(
        T, 0, RecordSeq(seq, 1, 3), physical_offset=200, size=50, queue_offset=11, store_timestamp=9
    )
    assert s.check(T, 0, seq).verdict is Verdict.DUPLICATE
    assert_usual_windows(s)
    # an older epoch's record read later is ignored
    s.replayed(
        T,
        0,
        RecordSeq(ProducerSeq(5, 0, 99), 0, 1),
        physical_offset=400,
        size=50,
        queue_offset=13,
        store_timestamp=9,
    )
    assert s.check(T, 0, ProducerSeq(5, 0, 99)).verdict is Verdict.FENCED


def test_snapshot_round_trip_and_parts() -> None:
    s = states()
    for pid in range(3):
        for i in range(WINDOW + 1):
            store(s, ProducerSeq(pid, 1, i), i, now=pid)
    bodies = encode_snapshot(4096, s.to_document())
    covered, doc = decode_snapshot([decode_snapshot_part(b) for b in bodies])
    assert covered == 4096
    t = ProducerStates.from_document(doc, expiry_ms=60_000, max_windows=1000)
    assert t.to_document() == s.to_document()
    assert_usual_windows(t)
    assert t.check(T, 0, ProducerSeq(1, 1, 0)).verdict is Verdict.TOO_OLD
    assert t.check(T, 0, ProducerSeq(1, 1, WINDOW)).verdict is Verdict.DUPLICATE
    # a large document spans parts; a missing part is refused
    big = [[1, 0, 0, [["x" * 1000, q, -1, []] for q in range(1500)]]]
    parts = [decode_snapshot_part(b) for b in encode_snapshot(1, big)]
    assert len(parts) == 2 and all(len(p.data) <= PART_BYTES for p in parts)
    with pytest.raises(RecordError):
        decode_snapshot(parts[:1])
    with pytest.raises(ValueError):
        ProducerStates.from_document([[1, 0]], expiry_ms=1, max_windows=1)


def test_sequenced_records_skips_records_without_the_property() -> None:
    enc = RecordEncoder("127.0.0.1:10911")
    plain = enc.encode(
        Message(topic=T, body=b"a"),
        queue_id=0,
        queue_offset=0,
        physical_offset=0,
        store_timestamp=1,
    )
    seqd = enc.encode(
        Message(topic=T, body=b"b", properties={PROP_PRODUCER_SEQ: "1.0.0.0.1"}),
        queue_id=0,
        queue_offset=1,
        physical_offset=len(plain),
        store_timestamp=1,
    )
    buf = plain + seqd + encode_blank(16)
    found = list(sequenced_records(buf))
    assert [r.body for r in found] == [b"b"]
    with pytest.raises(RecordError):
        list(sequenced_records(buf + b"\x00\x00"))


def test_a_full_window_of_lost_answers_is_answered_from_the_window() -> None:
    s = states()
    seqs = [ProducerSeq(1, 0, i) for i in range(WINDOW)]
    for i, seq in enumerate(seqs):
        store(s, seq, i * 10)
    assert [s.check(T, 0, seq).verdict for seq in seqs] == [Verdict.DUPLICATE] * WINDOW


# -- the property: a producer within the window never stores twice, never loses a send -------


@settings(max_examples=examples(600), deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from((0, 0, 0, 0, 2, 2, 2, 2, 1, 3)), st.integers(0, 20)),
        min_size=1,
        max_size=300,
    )
)
def test_model_every_request_is_stored_at_most_once(ops: list[tuple[int, int]]) -> None:
    """A producer whose requests in flight on one queue span at most WINDOW sequences (a new
    one waits while the oldest still pending is WINDOW behind: a count alone is not enough,
    as the requests answered after the oldest stay in the window); each step sends a new
    request, delivers an attempt of a pending one (stored, or a lost answer), or gives one up.
    The broker's answers match a model that remembers everything: a retry of a stored request
    is a duplicate, anything else is new, and nothing in flight is ever too old."""
    s = states()
    pending: list[int] = []
    stored: set[int] = set()
    next_seq = 0
    offset = 0
    for op, pick in ops:
        if op == 0 and (not pending or next_seq - min(pending) < WINDOW):
            pending.append(next_seq)
            next_seq += 1
            continue
        if not pending:
            continue
        seq_no = pending[pick % len(pending)]
        if op == 3:  # the producer gives up on it (its deadline passed)
            pending.remove(seq_no)
            continue
        seq = ProducerSeq(1, 0, seq_no)
        w = s.next_window(T, 0, seq)  # the send path's fast way first, as the broker asks
        if w is not None:
            assert seq_no not in stored, seq_no
            assert s.stored_next(w, 1, *fields(batch(seq_no, offset, stored_at=0)))
            stored.add(seq_no)
            offset += 1
            if op == 1:
                pending.remove(seq_no)
            continue
        d = s.check(T, 0, seq)
        if seq_no in stored:
            assert d.verdict is Verdict.DUPLICATE, (seq_no, d)
        else:
            assert d.verdict is Verdict.NEW, (seq_no, d)
            s.stored(T, 0, seq, batch(seq_no, offset), 0)
            stored.add(seq_no)
            offset += 1
        if op == 1:  # answered: done
            pending.remove(seq_no)
        # op 2: the answer was lost; it stays pending and is retried later
    assert_usual_windows(s)


def test_uniq_key_window_remembers_for_its_window_and_its_size() -> None:
    from protocol.idempotence import UniqKeyWindow

    w = UniqKeyWindow(window_ms=1000, max_entries=2)
    assert UniqKeyWindow.key_of(["a"]) == "a"
    assert UniqKeyWindow.key_of(["a", "b"]) == "a\x00b"
    assert UniqKeyWindow.key_of(["a", ""]) is None and UniqKeyWindow.key_of([]) is None
    w.put("t", "k1", batch(0, 10), 0)
    assert w.get("t", "k1", 999) is not None
    assert w.get("other", "k1", 999) is None
    assert w.get("t", "k1", 1000) is None  # the window passed
    w.put("t", "k1", batch(0, 10), 2000)
    w.put("t", "k2", batch(0, 20), 2001)
    w.put("t", "k3", batch(0, 30), 2002)  # over max_entries: the oldest goes
    assert w.get("t", "k1", 2003) is None and len(w) == 2


@settings(max_examples=examples(300), deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 4), st.integers(0, 2), st.integers(0, 700)),
        min_size=1,
        max_size=200,
    )
)
def test_the_usual_sends_short_way_keeps_what_the_whole_check_keeps(
    ops: list[tuple[int, int, int]],
) -> None:
    """Producers' next requests on a few queues, time passing, idle producers expired and the
    windows capped: the send path's short way (next_window, stored_next: the newest
    producer neither looked up nor moved again) leaves the state the whole check and stored
    leave, in the same order of last use, forgetting the same producers."""
    fast = states(expiry_ms=1000, max_windows=4)
    whole = states(expiry_ms=1000, max_windows=4)
    next_seq: dict[tuple[int, int], int] = {}
    now = 0
    for pid, queue, advance in ops:
        now += advance
        seq = ProducerSeq(pid, 0, next_seq.get((pid, queue), 0))
        next_seq[(pid, queue)] = seq.sequence + 1
        offset = len(next_seq) * 1000 + seq.sequence
        w = fast.next_window(T, queue, seq)
        if w is not None:
            assert fast.stored_next(w, pid, seq.sequence, queue, offset, [offset], offset + 1, now)
        else:
            assert fast.check(T, queue, seq).verdict is Verdict.NEW
            fast.stored(
                T,
                queue,
                seq,
                StoredBatch(seq.sequence, queue, offset, [offset], offset + 1, now),
                now,
            )
        assert whole.check(T, queue, seq).verdict is Verdict.NEW
        whole.stored(
            T, queue, seq, StoredBatch(seq.sequence, queue, offset, [offset], offset + 1, now), now
        )
        assert fast.expire(now) == whole.expire(now)
        assert fast.to_document() == whole.to_document()
        assert fast.expired == whole.expired
    assert_usual_windows(fast)
    assert_usual_windows(whole)
    assert_usual_windows(
        ProducerStates.from_document(fast.to_document(), expiry_ms=1000, max_windows=4)
    )
