"""The POP in-flight set (broker.pop.inflight): deterministic cases and a property test that a
replica applying the same records holds the same set, and that every message handed out ends
acked, revived or still in flight, never two of them."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.pop.inflight import COMPACT_MIN, PopRefused, PopState, Refusal
from protocol.pop import Ack, Change, Checkpoint, Revived, ReviveRecord, ReviveRecordError
from protocol.pop_snapshot import (
    PopSnapshot,
    SnapshotPart,
    decode_snapshot,
    decode_snapshot_part,
    encode_snapshot,
)
from tests.hypothesis_profiles import examples


def ck(start: int, count: int, pop_ms: int = 1000, inv: int = 500, group: str = "g") -> Checkpoint:
    return Checkpoint(group, "T", 0, start, count, tuple(range(start, start + count)), pop_ms, inv)


def test_pop_ack_expire_change() -> None:
    s = PopState()
    added = s.checkpoint(100, ck(0, 3))
    assert [e.queue_offset for e in added] == [0, 1, 2]
    assert s.inflight("g") == 3 and s.pop_offset("g", "T", 0) == 3
    # An ack by the handle's deadline removes the entry; a repeat is a no-op, not an error.
    assert s.check((100, 0), "g", 1500, 1200) is not None
    assert s.ack((100, 0))
    assert s.check((100, 0), "g", 1500, 1200) is None
    # Another group's ack, a stale handle, an expired one: refused, nothing removed.
    with pytest.raises(PopRefused) as exc:
        s.check((100, 1), "other", 1500, 1200)
    assert exc.value.reason is Refusal.OTHER_GROUP
    assert s.change((100, 1), 4000)
    with pytest.raises(PopRefused) as exc:
        s.check((100, 1), "g", 1500, 1200)
    assert exc.value.reason is Refusal.SUPERSEDED
    with pytest.raises(PopRefused) as exc:
        s.check((100, 2), "g", 1500, 1500)
    assert exc.value.reason is Refusal.EXPIRED
    assert s.inflight("g") == 2
    # Expiry hands out each due entry once, earliest first; the moved one later.
    assert [e.queue_offset for e in s.due(1499)] == []
    assert [e.queue_offset for e in s.due(1500)] == [2]
    assert s.due(1600) == []
    assert s.next_deadline() == 4000
    assert [e.queue_offset for e in s.due(4000)] == [1]
    assert s.revived((100, 1)) and s.revived((100, 2))
    assert s.inflight() == 0
    with pytest.raises(PopRefused) as exc:
        s.check((100, 1), "g", 4000, 3000)
    assert exc.value.reason is Refusal.NOT_IN_FLIGHT
    with pytest.raises(PopRefused):  # a checkpoint never written
        s.check((7, 0), "g", 1500, 1000)


def test_filtered_offsets_are_not_in_flight() -> None:
    s = PopState()
    s.checkpoint(5, Checkpoint("g", "T", 1, 10, 4, (10, 13), 0, 100))
    assert s.inflight_keys() == {(5, 10), (5, 13)}
    assert s.pop_offset("g", "T", 1) == 14


def test_acked_entries_leave_the_deadline_heap_long_before_their_deadline() -> None:
    # 100,000 messages popped with a 1 h invisible time and acked at once (32 a checkpoint):
    # the heap holds what is in flight plus at most COMPACT_MIN stale items, not every
    # delivery of the hour.
    s = PopState()
    hour = 3_600_000
    peak = 0
    for n in range(3125):
        now = 1_000 + n
        s.checkpoint(n, ck(n * 32, 32, pop_ms=now, inv=hour))
        if n >= 4:  # four checkpoints stay in flight, the older ones are acked
            for offset in range((n - 4) * 32, (n - 3) * 32):
                assert s.check((n - 4, offset), "g", now - 4 + hour, now) is not None
                assert s.ack((n - 4, offset))
        peak = max(peak, s.deadline_items())
        assert s.inflight() <= 5 * 32
    assert s.inflight() == 4 * 32
    assert peak <= 5 * 32 + COMPACT_MIN + 1
    # Moving deadlines leaves stale items too: bounded the same way.
    for _ in range(50):
        for key in s.inflight_keys():
            assert s.change(key, 10 * hour + len(key))
    assert s.deadline_items() <= 4 * 32 + COMPACT_MIN + 1
    # And the set still redelivers exactly what is in flight, once each, earliest first.
    assert s.next_deadline() == 10 * hour + 2
    due = s.due(20 * hour)
    assert {e.key for e in due} == s.inflight_keys() and len(due) == 4 * 32
    assert s.due(20 * hour) == [] and s.next_deadline() is None


def apply(state: PopState, log: list[tuple[int, ReviveRecord]]) -> PopState:
    """A replica's replay of revive-log records."""
    for ck_id, record in log:
        state.apply(ck_id, record)
    return state


# -- property: a log of records, applied on a master with checks and on a replica blindly --
ops = st.lists(
    st.one_of(
        st.tuples(st.just("pop"), st.integers(1, 5), st.integers(0, 3_000), st.sampled_from("gh")),
        st.tuples(st.just("ack"), st.integers(0, 60), st.integers(0, 0), st.sampled_from("gh")),
        st.tuples(st.just("change"), st.integers(0, 60), st.integers(0, 3_000), st.just("g")),
        st.tuples(st.just("tick"), st.integers(0, 1_000), st.integers(0, 0), st.just("g")),
        st.tuples(st.just("snap"), st.integers(0, 0), st.integers(0, 0), st.just("g")),
    ),
    max_size=80,
)


@settings(max_examples=examples(150), deadline=None)
@given(ops)
def test_replica_rebuilds_the_masters_set(script: list[tuple[str, int, int, str]]) -> None:
    master = PopState(compact_min=0)  # compacts whenever stale items are half the heap
    log: list[tuple[int, ReviveRecord]] = []
    now = 0
    next_offset = {"g": 0, "h": 0}
    handed: list[tuple[int, int, str]] = []  # (ck, offset, group) in pop order
    acked: set[tuple[int, int]] = set()
    revived: set[tuple[int, int]] = set()
    snap: PopSnapshot | None = None  # the master's last snapshot, through its codec
    for op, a, b, group in script:
        if op == "pop":
            start = next_offset[group]
            next_offset[group] += a
            record = Checkpoint(group, "T", 0, start, a, tuple(range(start, start + a)), now, b)
            ck_id = len(log)
            log.append((ck_id, record))
            master.checkpoint(ck_id, record)
            handed += [(ck_id, o, group) for o in record.popped]
        elif op == "ack" and handed:
            ck_id, offset, owner = handed[a % len(handed)]
            entry = master.get((ck_id, offset))
            deadline = entry.deadline_ms if entry is not None else 0
            try:
                if master.check((ck_id, offset), group, deadline, now) is None:
                    continue
            except PopRefused:
                assert group != owner or entry is None or now >= deadline or entry.handed_out
                continue
            assert group == owner and (ck_id, offset) not in revived
            master.ack((ck_id, offset))
            acked.add((ck_id, offset))
            log.append((len(log), Ack(((ck_id, offset),))))
        elif op == "change" and handed:
            ck_id, offset, _ = handed[a % len(handed)]
            if master.get((ck_id, offset)) is not None:
                master.change((ck_id, offset), now + b)
                log.append((len(log), Change(ck_id, offset, now + b)))
        elif op == "tick":
            now += a
            for entry in master.due(now):
                assert entry.deadline_ms <= now
                master.revived(entry.key)
                revived.add(entry.key)
                log.append((len(log), Revived((entry.key,))))
        elif op == "snap":
            taken = master.snapshot(len(log), None)
            snap = decode_snapshot([decode_snapshot_part(b) for b in encode_snapshot(taken, 50)])
        assert master.deadline_items() <= 2 * master.inflight()
    replica = apply(PopState(), log)
    # A new master that starts from the last snapshot holds the same set as a whole replay.
    if snap is not None:
        resumed = apply(PopState.restore(snap), log[snap.replay_from :])
        assert resumed.inflight_keys() == replica.inflight_keys()
        for key in replica.inflight_keys():
            r, s = replica.get(key), resumed.get(key)
            assert (
                r is not None
                and s is not None
                and (r.deadline_ms, r.group)
                == (
                    s.deadline_ms,
                    s.group,
                )
            )
        for g in "gh":
            assert resumed.pop_offset(g, "T", 0) == replica.pop_offset(g, "T", 0)
            assert resumed.inflight(g) == replica.inflight(g)
        assert {e.key for e in resumed.due(now + 10_000)} == replica.inflight_keys()
    assert replica.inflight_keys() == master.inflight_keys()
    for key in master.inflight_keys():
        m, r = master.get(key), replica.get(key)
        assert m is not None and r is not None and m.deadline_ms == r.deadline_ms
    # Every message handed out is in exactly one of: acked, revived, in flight.
    inflight = master.inflight_keys()
    assert not acked & revived and not acked & inflight and not revived & inflight
    assert acked | revived | inflight == {(c, o) for c, o, _ in handed}
    # A new master (the replica) redelivers exactly the in-flight ones once they are due.
    far = now + 10_000
    assert {e.key for e in replica.due(far)} == inflight
    assert replica.inflight("g") + replica.inflight("h") == len(inflight)
    assert replica.inflight_on("g", "T", 0) + replica.inflight_on("h", "T", 0) == len(inflight)


def test_snapshot_codec_refuses_what_is_not_one_whole_snapshot() -> None:
    s = PopState()
    s.checkpoint(100, ck(0, 3))
    s.checkpoint(200, ck(3, 2, group="h"))
    assert s.ack((100, 1))
    bodies = encode_snapshot(s.snapshot(7, b"k" * 32), 16)
    parts = [decode_snapshot_part(b) for b in bodies]
    assert len(parts) > 2 and {p.replay_from for p in parts} == {7}
    snap = decode_snapshot(parts)
    restored = PopState.restore(snap)
    assert restored.inflight_keys() == {(100, 0), (100, 2), (200, 3), (200, 4)}
    assert (restored.inflight("g"), restored.inflight("h")) == (2, 2)
    assert restored.pop_offset("g", "T", 0) == 3 and restored.pop_offset("h", "T", 0) == 5
    assert snap.key == b"k" * 32
    # The acks remembered come along: a repeated ack is done, not refused.
    assert restored.check((100, 1), "g", 1500, 1200) is None
    other = decode_snapshot_part(encode_snapshot(s.snapshot(8, None), 16)[1])
    bad: list[list[SnapshotPart]] = [
        [],
        parts[:-1],  # a part missing
        parts[1:],
        [parts[1], parts[0], *parts[2:]],  # out of order
        [parts[0], other, *parts[2:]],  # another snapshot's part
        [SnapshotPart(7, 0, 1, b"\xc1")],  # not msgpack
        [SnapshotPart(7, 0, 1, b"\x93\x01\x02\x03")],  # not a snapshot document
    ]
    for case in bad:
        with pytest.raises(ReviveRecordError):
            decode_snapshot(case)
    for body in (b"", b"\x00" * 11, b"\x00" * 8 + b"\x00\x02\x00\x01"):
        with pytest.raises(ReviveRecordError):
            decode_snapshot_part(body)
    # A document whose entries refer to a name it does not hold, or hold negative offsets.
    for doc in (
        [1, None, [], [], [[100, 5, 0, 1, 1500, False]], [], []],
        [1, None, [["g", "T"]], [], [[100, 0, 0, -1, 1500, False]], [], []],
        [1, b"short", [], [], [], [], []],
        [1, None, [], [], [], [], [100]],
    ):
        with pytest.raises(ReviveRecordError):
            decode_snapshot([SnapshotPart(0, 0, 1, msgpack.packb(doc))])
