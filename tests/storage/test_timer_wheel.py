"""The timing wheel as pure code: time is an argument, the 'CommitLog' is a list of offsets."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage.segment import list_segment_files
from storage.timer.log import RECORD_SIZE
from storage.timer.wheel import (
    DAY_MS,
    InvalidDeliveryTimeError,
    TimerEntry,
    TimingWheel,
    WheelConfig,
    deliver_at_from_delay,
)
from tests.hypothesis_profiles import examples

T0 = 1_700_000_000_000
SIZE = 100
SMALL = WheelConfig(
    slot_ms=10, slots_per_bucket=5, max_delay_ms=100_000, segment_records=64, roll_segments=2
)
"""50 ms buckets: most entries of a test start out in far buckets, on disk; 64-record
segments, rolled once the log holds more than 2."""


@dataclass
class CommitLog:
    """Stands for the broker's CommitLog: the scheduled messages it holds, by offset."""

    records: list[tuple[int, int]] = field(default_factory=list)  # (offset, deliver_at_ms)

    def add(self, deliver_at_ms: int) -> int:
        offset = len(self.records) * SIZE
        self.records.append((offset, deliver_at_ms))
        return offset

    def replay(self, wheel: TimingWheel, now_ms: int) -> int:
        """What the broker does after opening the wheel: re-dispatch from indexed_through."""
        count = 0
        for offset, deliver_at in self.records:
            if offset >= wheel.indexed_through:
                assert wheel.schedule(deliver_at, offset, SIZE, now_ms) is not None
                count += 1
        return count


def drain(wheel: TimingWheel, now_ms: int) -> list[TimerEntry]:
    out = wheel.due(now_ms)
    for e in out:
        assert e.due_ms <= now_ms
        wheel.commit(e)
    return out


def scheduled_at_random(tmp_path: Path, seed: int, count: int) -> tuple[CommitLog, TimingWheel]:
    """A new wheel holding ``count`` entries due at random times in T0's next 10 s, and the
    CommitLog that holds their messages."""
    rng = random.Random(seed)
    log = CommitLog()
    wheel = TimingWheel(tmp_path, T0, SMALL)
    for _ in range(count):
        at = T0 + rng.randrange(0, 10_000)
        wheel.schedule(at, log.add(at), SIZE, T0)
    return log, wheel


def test_not_before_its_time_then_exactly_at_it(tmp_path: Path) -> None:
    wheel = TimingWheel(tmp_path, T0, SMALL)
    entry = wheel.schedule(T0 + 1234, 0, SIZE, T0)
    assert entry == TimerEntry(T0 + 1234, 0, SIZE)
    for now in (T0, T0 + 1000, T0 + 1230, T0 + 1233):
        assert wheel.due(now) == []
    assert wheel.due(T0 + 1234) == [entry]
    assert wheel.due(T0 + 99_999) == []
    wheel.close()


def test_next_due_ms_says_when_to_look_again(tmp_path: Path) -> None:
    wheel = TimingWheel(tmp_path, T0, SMALL)
    assert wheel.next_due_ms() is None
    far = wheel.schedule(T0 + 5_000, 0, SIZE, T0)
    assert far is not None
    wake = wheel.next_due_ms()
    assert wake is not None and T0 < wake <= far.due_ms
    assert wheel.due(wake) == []  # the far bucket loads now
    assert wheel.next_due_ms() == far.due_ms
    near = wheel.schedule(wake + 3, 100, SIZE, wake)
    assert near is not None and wheel.next_due_ms() == near.due_ms
    assert wheel.due(near.due_ms) == [near]
    assert wheel.due(far.due_ms) == [far]
    assert wheel.next_due_ms() is None
    wheel.close()


def test_past_and_present_times_are_due_at_once(tmp_path: Path) -> None:
    wheel = TimingWheel(tmp_path, T0, SMALL)
    a = wheel.schedule(T0 - 5000, 0, SIZE, T0)
    b = wheel.schedule(0, 100, SIZE, T0)
    c = wheel.schedule(T0, 200, SIZE, T0)
    assert a is not None and b is not None and c is not None
    assert a.due_ms == b.due_ms == c.due_ms == T0
    assert wheel.due(T0) == [a, b, c]
    wheel.close()


def test_bad_times_are_refused_and_nothing_is_written(tmp_path: Path) -> None:
    wheel = TimingWheel(tmp_path, T0)
    with pytest.raises(InvalidDeliveryTimeError, match="negative"):
        deliver_at_from_delay(-1, T0)
    with pytest.raises(InvalidDeliveryTimeError, match="negative"):
        wheel.schedule(-1, 0, SIZE, T0)
    with pytest.raises(InvalidDeliveryTimeError, match="more than"):
        wheel.schedule(T0 + 40 * DAY_MS + 1, 0, SIZE, T0)
    assert wheel.log.end == 0
    assert wheel.indexed_through == 0
    wheel.close()


def test_forty_days_ahead(tmp_path: Path) -> None:
    wheel = TimingWheel(tmp_path, T0)
    at = deliver_at_from_delay(40 * DAY_MS, T0)
    far = wheel.schedule(at, 0, SIZE, T0)
    near = wheel.schedule(T0 + 500, 100, SIZE, T0)
    assert far is not None and near is not None
    assert wheel.near_count == 1 and wheel.far_buckets == 1
    assert wheel.due(T0 + 1000) == [near]
    for now in (T0 + DAY_MS, T0 + 39 * DAY_MS, at - 60_001, at - 1):
        assert wheel.due(now) == []
    assert wheel.due(at) == [far]
    wheel.close()


def test_many_messages_in_one_slot_come_out_in_offset_order(tmp_path: Path) -> None:
    wheel = TimingWheel(tmp_path, T0, SMALL)
    log = CommitLog()
    at = T0 + 777
    offsets = [log.add(at) for _ in range(10_000)]
    for off in offsets:
        wheel.schedule(at, off, SIZE, T0)
    assert wheel.due(at - 1) == []
    first = wheel.due(at, limit=4_000)
    rest = wheel.due(at)
    assert [e.commitlog_offset for e in first + rest] == offsets
    wheel.close()


def test_delivery_order_is_by_time_whatever_the_order_of_scheduling(tmp_path: Path) -> None:
    wheel = TimingWheel(tmp_path, T0, SMALL)
    rng = random.Random(7)
    log = CommitLog()
    for _ in range(3_000):
        at = T0 + rng.randrange(0, 20_000)
        wheel.schedule(at, log.add(at), SIZE, T0)
    got: list[TimerEntry] = []
    now = T0
    while now < T0 + 21_000:
        now += rng.randrange(1, 400)
        batch = drain(wheel, now)
        assert all(e.due_ms <= now for e in batch)
        got.extend(batch)
    assert got == sorted(got)
    assert sorted(e.commitlog_offset for e in got) == [o for o, _ in log.records]
    wheel.close()


def test_cancel_near_far_and_too_late(tmp_path: Path) -> None:
    wheel = TimingWheel(tmp_path, T0, SMALL)
    log = CommitLog()
    near = log.add(T0 + 20)
    far = log.add(T0 + 5_000)
    keep = log.add(T0 + 5_000)
    done = log.add(T0 + 1)
    for off, at in log.records:
        wheel.schedule(at, off, SIZE, T0)
    recall = len(log.records) * SIZE  # the recall messages' own CommitLog records
    assert [e.commitlog_offset for e in drain(wheel, T0 + 1)] == [done]
    assert wheel.cancel(T0 + 20, near, T0 + 2, source_end=recall + 10)
    assert wheel.cancel(T0 + 5_000, far, T0 + 3, source_end=recall + 20)
    assert not wheel.cancel(T0 + 1, done, T0 + 4, source_end=recall + 30)  # delivered
    assert not wheel.cancel(T0 + 9_000, 12_345, T0 + 5, source_end=recall + 40)  # unknown
    assert not wheel.cancel(T0 + 5_000, far, T0 + 6, source_end=recall + 20)  # a replay
    assert [e.commitlog_offset for e in drain(wheel, T0 + 10_000)] == [keep]
    wheel.close()


def test_cancel_survives_a_restart(tmp_path: Path) -> None:
    wheel = TimingWheel(tmp_path, T0, SMALL)
    wheel.schedule(T0 + 30, 0, SIZE, T0)  # near
    wheel.schedule(T0 + 8_000, 100, SIZE, T0)  # far
    wheel.schedule(T0 + 8_000, 200, SIZE, T0)
    assert wheel.cancel(T0 + 30, 0, T0, source_end=1_000)
    assert wheel.cancel(T0 + 8_000, 100, T0, source_end=1_100)
    wheel.close()
    wheel = TimingWheel(tmp_path, T0 + 1, SMALL)
    assert [e.commitlog_offset for e in drain(wheel, T0 + 9_000)] == [200]
    wheel.close()


def test_clean_restart_delivers_every_pending_entry_exactly_once(tmp_path: Path) -> None:
    log, wheel = scheduled_at_random(tmp_path, seed=11, count=2_000)
    delivered = drain(wheel, T0 + 4_000)
    wheel.close()
    wheel = TimingWheel(tmp_path, T0 + 4_000, SMALL)
    assert wheel.recovery.truncated_bytes == 0
    assert log.replay(wheel, T0 + 4_000) == 0
    delivered += drain(wheel, T0 + 10_000)
    wheel.close()
    assert sorted(e.commitlog_offset for e in delivered) == [o for o, _ in log.records]
    assert delivered == sorted(delivered)


def test_crash_redelivers_only_after_the_saved_mark(tmp_path: Path) -> None:
    log, wheel = scheduled_at_random(tmp_path, seed=12, count=2_000)
    before = drain(wheel, T0 + 3_000)
    wheel.save_progress()
    after = drain(wheel, T0 + 6_000)  # delivered, but the mark was not saved
    assert before and after
    wheel.log.close()  # kill -9: the page cache keeps the log, no progress saved
    wheel = TimingWheel(tmp_path, T0 + 6_000, SMALL)
    log.replay(wheel, T0 + 6_000)
    again = drain(wheel, T0 + 10_000)
    wheel.close()
    assert set(again) >= set(after)  # at least once
    assert not set(again) & set(before)  # nothing at or below the saved mark
    everything = before + again
    assert sorted(e.commitlog_offset for e in everything) == [o for o, _ in log.records]


def test_torn_timer_log_is_rebuilt_by_replaying_the_commitlog(tmp_path: Path) -> None:
    log, wheel = scheduled_at_random(tmp_path, seed=13, count=500)
    first = drain(wheel, T0 + 2_000)
    wheel.close()
    # Flip one byte in the middle of the log.
    segments = list_segment_files(tmp_path / "log")
    start, path = segments[len(segments) // 2]
    with path.open("r+b") as f:
        f.seek(5 * RECORD_SIZE + 17)
        b = f.read(1)
        f.seek(5 * RECORD_SIZE + 17)
        f.write(bytes([b[0] ^ 0xFF]))
    wheel = TimingWheel(tmp_path, T0 + 2_000, SMALL)
    cut_at = start + 5 * RECORD_SIZE
    assert wheel.recovery.end == cut_at
    assert wheel.recovery.truncated_bytes == 500 * RECORD_SIZE - cut_at
    assert wheel.indexed_through == (cut_at // RECORD_SIZE) * SIZE
    assert log.replay(wheel, T0 + 2_000) == 500 - cut_at // RECORD_SIZE
    rest = drain(wheel, T0 + 10_000)
    wheel.close()
    # Nothing lost. Entries whose timer records were cut lost their 'delivered' status with
    # them: replayed from the CommitLog they may come again (at least once), the others not.
    offsets = [e.commitlog_offset for e in first + rest]
    assert set(offsets) == {o for o, _ in log.records}
    again = {o for o in offsets if offsets.count(o) > 1}
    assert all(o >= (cut_at // RECORD_SIZE) * SIZE for o in again)


def test_delivered_segments_are_deleted(tmp_path: Path) -> None:
    wheel = TimingWheel(tmp_path, T0, SMALL)
    log = CommitLog()
    for i in range(640):  # 10 segments of 64 records
        at = T0 + 10 * i
        wheel.schedule(at, log.add(at), SIZE, T0)
    wheel.schedule(T0 + 90_000, log.add(T0 + 90_000), SIZE, T0)  # pins the last segment
    drain(wheel, T0 + 6_400)
    wheel.save_progress()
    assert len(wheel.log.segments) == 1
    wheel.close()
    wheel = TimingWheel(tmp_path, T0 + 6_400, SMALL)
    assert [e.commitlog_offset for e in drain(wheel, T0 + 90_000)] == [640 * SIZE]
    wheel.close()


def test_long_waiting_entries_are_rolled_so_old_segments_go(tmp_path: Path) -> None:
    wheel = TimingWheel(tmp_path, T0, SMALL)
    log = CommitLog()
    late = log.add(T0 + 90_000)
    recalled = log.add(T0 + 90_000)
    wheel.schedule(T0 + 90_000, late, SIZE, T0)
    wheel.schedule(T0 + 90_000, recalled, SIZE, T0)
    assert wheel.cancel(T0 + 90_000, recalled, T0, source_end=2 * SIZE + 1)
    log.add(-1)  # the recall's own record
    got: list[int] = []
    most = 0
    for i in range(2_000):  # 31 segments' worth of short delays, delivered as they come
        now = T0 + 10 * i
        wheel.schedule(now + 5, log.add(now + 5), SIZE, now)
        got += [e.commitlog_offset for e in drain(wheel, now)]
        wheel.save_progress()
        most = max(most, len(wheel.log.segments))
        if i == 1_000:  # a crash and a restart in the middle change nothing
            wheel.log.close()
            wheel = TimingWheel(tmp_path, now, SMALL)
    assert most <= 4  # roll_segments (2), the one being rolled, the one being written
    got += [e.commitlog_offset for e in drain(wheel, T0 + 90_000)]
    wheel.close()
    assert sorted(got) == sorted(o for o, at in log.records if at >= 0 and o != recalled)
    assert got.count(late) == 1


# -- the property test: the wheel against a model --------------------------------------------

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("schedule"), st.integers(-2_000, 20_000)),
        st.tuples(st.just("cancel"), st.integers(0, 400)),
        st.tuples(st.just("tick"), st.integers(0, 3_000)),
        st.tuples(st.just("restart"), st.booleans()),
    ),
    max_size=200,
)


@settings(
    max_examples=examples(60),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(ops=OPS)
def test_wheel_matches_a_model(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, int]]
) -> None:
    directory = tmp_path_factory.mktemp("wheel")
    now = T0
    wheel = TimingWheel(directory, now, SMALL)
    log = CommitLog()
    requested: dict[int, int] = {}  # offset -> requested time
    cancelled: set[int] = set()
    recalled_late: set[int] = set()
    delivered: dict[int, int] = {}  # offset -> times delivered
    saved_delivered: set[int] = set()
    crashed = False
    for op, arg in ops:
        if op == "schedule":
            at = now + arg
            off = log.add(at)
            wheel.schedule(at, off, SIZE, now)
            requested[off] = at
        elif op == "cancel" and requested:
            targets = sorted(requested)
            off = targets[arg % len(targets)]
            at = requested[off]
            source_end = (len(log.records) + 1) * SIZE
            log.add(-1)  # the recall occupies a CommitLog record of its own
            if wheel.cancel(at, off, now, source_end=source_end):
                if off in delivered:
                    # Delivered, but a crash lost the mark: pending again, and now recalled.
                    assert crashed
                    recalled_late.add(off)
                else:
                    cancelled.add(off)
            else:
                assert off in delivered or off in cancelled
        elif op == "tick":
            now += arg
            for e in drain(wheel, now):
                assert e.commitlog_offset not in cancelled | recalled_late
                assert requested[e.commitlog_offset] <= now
                delivered[e.commitlog_offset] = delivered.get(e.commitlog_offset, 0) + 1
        elif op == "restart":
            if arg:
                wheel.close()
            else:
                if len(delivered) % 2:  # sometimes the mark was saved before the crash
                    wheel.save_progress()
                wheel.log.close()
                crashed = True
            saved_delivered = set(delivered) if arg else saved_delivered
            wheel = TimingWheel(directory, now, SMALL)
            for off, at in log.records:
                if off >= wheel.indexed_through and at >= 0:
                    wheel.schedule(at, off, SIZE, now)
    now += 30_000
    for e in drain(wheel, now):
        assert e.commitlog_offset not in cancelled | recalled_late
        delivered[e.commitlog_offset] = delivered.get(e.commitlog_offset, 0) + 1
    wheel.close()
    assert set(delivered) == set(requested) - cancelled
    if not crashed:
        assert all(n == 1 for n in delivered.values()), delivered
    assert saved_delivered <= set(delivered)


# -- a replica rebuilt from the CommitLog equals the master up to any cut ----------------------

Event = tuple[str, int, int, int]
"""("schedule", offset, stamped due, store time) or ("delivered", due, source offset, 0)."""


def apply(replica: TimingWheel, event: Event) -> None:
    kind, a, b, c = event
    if kind == "schedule":
        replica.schedule(b, a, SIZE, c)
    else:
        replica.commit_key(a, b)


REPLICA_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("schedule"), st.integers(-3_000, 15_000), st.integers(0, 300)),
        st.tuples(st.just("tick"), st.integers(0, 2_000), st.just(0)),
        st.tuples(st.just("sync"), st.integers(0, 50), st.just(0)),
    ),
    max_size=150,
)


@settings(
    max_examples=examples(60),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(ops=REPLICA_OPS, cut_at=st.floats(0, 1))
def test_a_promoted_replica_delivers_exactly_what_the_master_had_not(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, int, int]], cut_at: float
) -> None:
    now = T0
    master = TimingWheel(tmp_path_factory.mktemp("master"), now, SMALL)
    replica = TimingWheel(tmp_path_factory.mktemp("replica"), now, SMALL)
    commitlog: list[Event] = []
    applied = 0
    offset = 0
    for op, arg, lag in ops:
        if op == "schedule":
            # The master stamps the due time into the record it appends, then indexes it. The
            # record's store time may be behind the last due() call (``lag``): stored, then
            # dispatched to the wheel after a delivery round.
            stored = now - lag
            due = master.due_time(now + arg, stored)
            commitlog.append(("schedule", offset, due, stored))
            master.schedule(due, offset, SIZE, stored)
            offset += SIZE
        elif op == "tick":
            now += arg
            for e in master.due(now):
                commitlog.append(("delivered", e.due_ms, e.commitlog_offset, 0))
                offset += SIZE
                master.commit(e)
        else:  # the replica catches up on some of the CommitLog (it lags arbitrarily)
            for event in commitlog[applied : applied + arg]:
                apply(replica, event)
            applied = min(len(commitlog), applied + arg)
    # Failover: the replica has everything up to the confirm offset, a prefix of the log.
    cut = max(applied, int(len(commitlog) * cut_at))
    for event in commitlog[applied:cut]:
        apply(replica, event)
    scheduled = {e[1]: e[2] for e in commitlog[:cut] if e[0] == "schedule"}
    delivered = {e[2] for e in commitlog[:cut] if e[0] == "delivered"}
    promoted = replica.due(now + 30_000)
    assert {e.commitlog_offset for e in promoted} == set(scheduled) - delivered
    assert all(e.due_ms == scheduled[e.commitlog_offset] for e in promoted)
    assert promoted == sorted(promoted)
    master.close()
    replica.close()


def test_a_far_entry_is_cancelled_once_and_then_no_longer_pending(tmp_path: Path) -> None:
    now = 1_000_000_000
    wheel = TimingWheel(tmp_path / "w", now)
    due = now + 3_600_000
    entry = wheel.schedule(due, 100, 50, now)
    assert entry is not None and wheel.pending(due, 100) and wheel.pending_count == 1
    assert wheel.cancel(due, 100, now, source_end=200)
    assert not wheel.pending(due, 100) and wheel.pending_count == 0
    assert not wheel.cancel(due, 100, now, source_end=300)  # a second recall finds nothing
    wheel.close()
    reopened = TimingWheel(tmp_path / "w", now)
    assert not reopened.pending(due, 100) and reopened.pending_count == 0
    assert reopened.due(due + 1) == []
    reopened.close()


def test_oldest_offset_bounds_the_pending_entries_and_clears_once_delivered(
    tmp_path: Path,
) -> None:
    now = 1_000_000_000
    wheel = TimingWheel(tmp_path / "w", now)
    assert wheel.oldest_offset() is None
    wheel.schedule(now + 500, 1000, 50, now)
    wheel.schedule(now + 7_200_000, 2000, 50, now)  # far: two hours
    wheel.schedule(now + 900, 3000, 50, now)
    assert wheel.oldest_offset() == 1000
    delivered = wheel.due(now + 1000)
    assert [e.commitlog_offset for e in delivered] == [1000, 3000]
    wheel.commit(delivered[-1])
    wheel.save_progress()
    # The far entry at 2000 is pending: the CommitLog from there on must stay (the bound may
    # be lower, never higher).
    floor = wheel.oldest_offset()
    assert floor is not None and floor <= 2000
    wheel.close()
    reopened = TimingWheel(tmp_path / "w", now + 1000)
    floor = reopened.oldest_offset()
    assert floor is not None and floor <= 2000
    (entry,) = reopened.due(now + 7_200_001)
    reopened.commit(entry)
    reopened.save_progress()
    assert reopened.oldest_offset() is None
    reopened.close()


def test_an_entry_scheduled_late_is_handed_out_once_and_survives_a_restart(tmp_path: Path) -> None:
    # A replay passed over offset 100's record (damaged) and went on: 0 and 200 were indexed and
    # 0 delivered. Once 100 is repaired the broker schedules it late, after every entry handed out
    # (the mark is past its own due time), and a late recall of 200 cancels it.
    wheel = TimingWheel(tmp_path, T0, SMALL)
    wheel.schedule(T0 + 10, 0, SIZE, T0)
    wheel.schedule(T0 + 5_000, 200, SIZE, T0)
    assert [e.commitlog_offset for e in drain(wheel, T0 + 100)] == [0]
    assert wheel.schedule(T0 + 5, 100, SIZE, T0) is None  # below indexed_through: a replay's
    assert wheel.schedule_late(T0 + 5, 100, SIZE) is None  # at or below the mark: delivered
    late = wheel.schedule_late(wheel.now + 1, 100, SIZE)
    assert late == TimerEntry(T0 + 101, 100, SIZE)
    assert wheel.schedule_late(wheel.now + 1, 100, SIZE) is None  # pending already
    assert wheel.cancel(T0 + 5_000, 200, T0, source_end=150) is False  # a replayed recall
    assert wheel.cancel(T0 + 5_000, 200, T0, source_end=150, late=True) is True
    assert wheel.pending_count == 1
    wheel.close()

    again = TimingWheel(tmp_path, T0 + 200, SMALL)  # the late record is in the timer log
    assert [e.commitlog_offset for e in drain(again, T0 + 10_000)] == [100]
    again.close()
