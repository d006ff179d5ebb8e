"""The transaction state (pure) and the op record codecs: replicas that apply the same records
hold the same open set; commit resolves once; check-backs follow the records' times; bad
records and END values are refused."""

from __future__ import annotations

import random

import pytest

from broker.transaction.state import Half, TransactionState
from protocol.transaction import (
    COMMIT_TYPE,
    NOT_TYPE,
    PROP_HALF_OFFSET,
    PROP_PRODUCER_GROUP,
    PROP_TRANSACTION_ID,
    PROP_TRANSACTION_PREPARED,
    ROLLBACK_TYPE,
    Op,
    OpKind,
    OpRecordError,
    decode_op,
    encode_op,
    half_properties,
    real_properties,
    resolution_of,
)

Record = tuple[int, Half | Op]


def _apply(state: TransactionState, records: list[Record]) -> None:
    for offset, rec in records:
        if isinstance(rec, Half):
            state.half(Half(rec.offset, rec.transaction_id, rec.group, rec.store_ms))
        else:
            state.op(offset, rec)


def _random_log(rng: random.Random, n: int) -> list[Record]:
    """A CommitLog-ordered mix of halves and the ops a master would write for them."""
    log: list[Record] = []
    offset = 0
    open_: list[int] = []
    for _ in range(n):
        offset += rng.randint(50, 200)
        if not open_ or rng.random() < 0.4:
            log.append((offset, Half(offset, f"t{offset}", rng.choice("AB"), offset)))
            open_.append(offset)
            continue
        half = rng.choice(open_)
        kind = rng.choice(list(OpKind))
        log.append((offset, Op(kind, half, offset)))
        if kind is not OpKind.CHECK:
            open_.remove(half)
    return log


def test_replicas_applying_the_same_records_hold_the_same_state() -> None:
    rng = random.Random(7)
    for _ in range(50):
        log = _random_log(rng, 200)
        master, replica = TransactionState(), TransactionState()
        _apply(master, log)
        _apply(replica, log)
        assert master.snapshot() == replica.snapshot()
        assert master.last_commit == replica.last_commit
        # Replaying the log again (a restart that reads it twice) changes nothing.
        _apply(replica, log)
        assert master.snapshot() == replica.snapshot()
        assert master.due(10**9) == replica.due(10**9)


def test_commit_resolves_once_and_a_second_commit_changes_nothing() -> None:
    state = TransactionState()
    state.half(Half(100, "tx", "G", 1000))
    assert state.find(100, "tx") == 100
    assert state.op(500, Op(OpKind.COMMIT, 100, 2000))
    assert state.resolution(100) is OpKind.COMMIT and state.open_count() == 0
    assert state.last_commit == (500, 100)
    assert not state.op(600, Op(OpKind.ROLLBACK, 100, 2001))
    assert state.resolution(100) is OpKind.COMMIT
    # A repair's second commit op moves the "last commit" the next master verifies.
    assert not state.op(700, Op(OpKind.COMMIT, 100, 2002))
    assert state.last_commit == (700, 100)
    # Found by id and by offset; a wrong id or an unknown offset is no transaction.
    assert state.find(None, "tx") == 100
    assert state.find(100, "other") is None
    assert state.find(999, "tx") is None
    assert state.find(None, "nope") is None


def test_check_backs_follow_the_records_times() -> None:
    state = TransactionState(first_check_ms=5_000, interval_ms=60_000)
    state.half(Half(10, "a", "G", 1_000))
    state.half(Half(20, "b", "G", 2_000))
    assert state.due(5_999) == []
    assert [h.offset for h in state.due(6_000)] == [10]
    assert state.due(6_000) == []  # handed out once
    state.op(30, Op(OpKind.CHECK, 10, 6_000))
    assert [h.offset for h in state.due(7_000)] == [20]
    state.later(state.open_half(20), 8_000)  # type: ignore[arg-type]  # its op failed
    assert [h.offset for h in state.due(66_000)] == [20, 10]
    assert state.open_half(10) is not None and state.open_half(10).checks == 1  # type: ignore[union-attr]
    state.op(40, Op(OpKind.DISCARD, 10, 70_000))
    assert state.resolution(10) is OpKind.DISCARD
    assert state.open_offsets() == [20]


def test_resolved_transactions_are_remembered_up_to_a_bound() -> None:
    state = TransactionState(remember=2)
    for off in (1, 2, 3):
        state.half(Half(off, f"t{off}", "G", 0))
        state.op(100 + off, Op(OpKind.ROLLBACK, off, 0))
    assert state.resolution(1) is None and state.find(1, "t1") is None  # forgotten
    assert state.resolution(3) is OpKind.ROLLBACK and state.find(None, "t3") == 3
    assert state.group_of(2) == "G"
    # A forgotten half is not open: an op for it changes nothing.
    assert not state.op(200, Op(OpKind.COMMIT, 1, 0))


def test_op_records_round_trip_and_bad_ones_are_refused() -> None:
    for kind in OpKind:
        op = Op(kind, 12345, 999)
        assert decode_op(encode_op(op)) == op
    for bad in (b"", b"\xc1", b"\x93\xa1X\x01\x02", b"\x92\xa1C\x01", b"\x93\xa1C\xff\x01"):
        with pytest.raises(OpRecordError):
            decode_op(bad)


def test_half_and_real_properties() -> None:
    props = {PROP_PRODUCER_GROUP: "G", PROP_TRANSACTION_ID: "tx", "a": "b"}
    half = half_properties({**props, PROP_TRANSACTION_PREPARED: "true"}, "T", 3)
    topic, queue_id, real = real_properties(half, 777)
    assert (topic, queue_id) == ("T", 3)
    assert real == {**props, PROP_HALF_OFFSET: "777"}  # no longer a half
    with pytest.raises(ValueError):
        half_properties({PROP_TRANSACTION_ID: "tx"}, "T", 0)
    with pytest.raises(ValueError):
        half_properties({PROP_PRODUCER_GROUP: "G", PROP_TRANSACTION_ID: "x" * 129}, "T", 0)
    with pytest.raises(ValueError):
        real_properties({}, 1)
    assert resolution_of(COMMIT_TYPE) is OpKind.COMMIT
    assert resolution_of(ROLLBACK_TYPE) is OpKind.ROLLBACK
    assert resolution_of(NOT_TYPE) is None
    with pytest.raises(ValueError):
        resolution_of(5)
