"""FIFO message groups under POP, the pure order state (broker.pop.orderly, through PopState):
a message group has one message out at a time, an unacked one comes back in place with attempt
+ 1, other groups flow past it, filtered and unreadable ones are passed over, and a replica that
replays the revive log's records holds the same state (a property test)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.pop.inflight import PopState
from broker.pop.orderly import WINDOW, OrderlyQueue
from protocol.pop import (
    Ack,
    Change,
    OrderlyCheckpoint,
    Revived,
    ReviveRecord,
    ReviveRecordError,
    decode_revive_record,
    encode_revive_record,
)
from protocol.pop_snapshot import (
    PopSnapshot,
    decode_snapshot,
    decode_snapshot_part,
    encode_snapshot,
)
from tests.hypothesis_profiles import examples

Q = ("G", "T", 0)
INV = 1000


class Master:
    """A master's view: the queue's messages, the in-flight set, and the records it wrote."""

    def __init__(self, messages: list[tuple[str | None, str]], max_attempts: int = 3) -> None:
        self.messages = messages
        self.state = PopState()
        self.records: list[tuple[int, ReviveRecord]] = []
        self.max_attempts = max_attempts
        self._next_id = 1000

    def write(self, record: ReviveRecord) -> int:
        ck_id = self._next_id
        self._next_id += 100
        self.records.append((ck_id, decode_revive_record(encode_revive_record(record))))
        return ck_id

    def queue(self) -> OrderlyQueue:
        return self.state.order.open_queue(Q, 0)

    def pop(self, now: int, want: int = 16, accept: str | None = None) -> list[tuple[int, int]]:
        oq = self.queue()
        learn(oq, self.messages)
        sel = oq.select(now, want, self.max_attempts, None if accept is None else accept.__eq__)
        ck = sel.checkpoint(Q, oq.low, now, INV)
        if ck is None:
            return []
        self.state.checkpoint(self.write(ck), ck)
        return sel.handed

    def key(self, offset: int) -> tuple[int, int]:
        return self.queue().deliveries[offset].key

    def ack(self, offset: int, now: int) -> None:
        key = self.key(offset)
        entry = self.state.check(key, "G", self.queue().deliveries[offset].deadline_ms, now)
        assert entry is not None and entry.orderly
        self.write(Ack((key,)))
        self.state.ack(key)

    def change(self, offset: int, deadline: int) -> None:
        key = self.key(offset)
        self.write(Change(key[0], key[1], deadline))
        self.state.change(key, deadline)

    def revive(self, now: int) -> list[int]:
        """The revive loop: expired deliveries expire in memory; past their attempts, to the
        DLQ (a revived record). Returns the dead-lettered offsets."""
        dead = []
        for entry in self.state.due(now):
            assert entry.orderly
            attempts = self.state.order.attempts(entry.key)
            assert attempts is not None
            if attempts >= self.max_attempts:
                dead.append(entry.key)
            else:
                self.state.expire(entry.key)
        if dead:
            self.write(Revived(tuple(dead)))
            for key in dead:
                self.state.revived(key)
        return [k[1] for k in dead]


def learn(oq: OrderlyQueue, messages: list[tuple[str | None, str]]) -> None:
    while oq.room() and oq.frontier < len(messages):
        group, tags = messages[oq.frontier]
        oq.learn(oq.frontier, group, None if tags == "CORRUPT" else tags)


def unexpired(state: PopState, now: int) -> dict[tuple[int, int], int]:
    """The deliveries in flight whose deadline has not passed at ``now``, with it."""
    entries = [state.get(key) for key in state.inflight_keys()]
    return {e.key: e.deadline_ms for e in entries if e is not None and e.deadline_ms > now}


def replay(records: list[tuple[int, ReviveRecord]], state: PopState | None = None) -> PopState:
    state = PopState() if state is None else state
    for ck_id, record in records:
        state.apply(ck_id, record)
    return state


def test_a_group_has_one_message_out_and_other_groups_flow_past_it() -> None:
    m = Master([("a", ""), ("b", ""), ("a", ""), ("b", ""), (None, ""), ("c", "")])
    assert m.pop(0) == [(0, 1), (1, 1), (4, 1), (5, 1)]
    assert m.pop(0) == []  # a and b are out
    assert m.state.order.blocked_groups() == {"G": 3}  # a, b, c (the ungrouped one blocks none)
    m.ack(1, 10)
    assert m.pop(10) == [(3, 1)]  # b's next; a still waits
    m.ack(0, 20)
    assert m.pop(20) == [(2, 1)]
    for offset in (2, 3, 4, 5):
        m.ack(offset, 30)
    assert m.queue().low == 6 and m.state.order.blocked_groups() == {}
    assert m.state.inflight() == 0


def test_an_unacked_message_comes_back_in_place_then_goes_to_the_dlq() -> None:
    m = Master([("a", ""), ("a", ""), ("b", "")], max_attempts=3)
    assert m.pop(0) == [(0, 1), (2, 1)]
    m.ack(2, 10)
    assert m.pop(500) == []  # still in flight
    assert m.revive(INV) == []
    assert m.pop(INV) == [(0, 2)]  # same offset, attempt 2; a's next one still waits
    # A nack: a change of invisible time to a short deadline brings it back sooner.
    m.change(0, INV + 100)
    assert m.pop(INV + 50) == []
    m.revive(INV + 100)
    assert m.pop(INV + 100) == [(0, 3)]
    # The last attempt passes unacked: not handed out again, waits for the DLQ step.
    assert m.pop(3 * INV) == []
    assert m.revive(3 * INV) == [0]
    assert m.pop(3 * INV) == [(1, 1)]  # the group goes on
    assert m.queue().low == 1


def test_an_ack_after_expiry_is_refused_and_redelivery_replaces_the_entry() -> None:
    m = Master([("a", "")])
    m.pop(0)
    old = m.key(0)
    m.revive(INV)
    assert m.state.get(old) is None  # expired: an ack now says "not in flight"
    assert m.pop(INV) == [(0, 2)]
    assert m.state.inflight() == 1 and m.key(0) != old


def test_filtered_and_unreadable_messages_are_passed_over_for_good() -> None:
    m = Master([("a", "x"), ("a", "y"), ("b", "CORRUPT"), ("b", "x")])
    assert m.pop(0, accept="x") == [(0, 1), (3, 1)]
    ck = m.records[-1][1]
    assert isinstance(ck, OrderlyCheckpoint) and ck.passed == (1, 2)
    m.ack(0, 1)
    m.ack(3, 1)
    assert m.queue().low == 4 and m.pop(2, accept="x") == []


def test_the_read_ahead_window_bounds_what_a_blocked_group_holds_back() -> None:
    messages: list[tuple[str | None, str]] = [("a", "")] * (WINDOW + 10)
    m = Master(messages)
    assert m.pop(0) == [(0, 1)]
    assert m.queue().frontier == WINDOW and m.queue().room() == 0
    m.ack(0, 1)
    assert m.queue().room() == 1


def test_retention_skips_the_queue_ahead() -> None:
    oq = OrderlyQueue(Q, 0)
    oq.learn(0, "a", "")
    oq.learn(5, "b", "")  # 0..4 were deleted (retention deletes from the front)
    assert oq.low == 5 and oq.frontier == 6
    assert [o for o, _ in oq.select(0, 10, 3).handed] == [5]


def test_orderly_checkpoint_round_trip_and_bad_bodies() -> None:
    ck = OrderlyCheckpoint("G", "T", 3, 10, 9, (10, 18), (12,), 5, 1000)
    body = encode_revive_record(ck)
    assert decode_revive_record(body) == ck
    with pytest.raises(ReviveRecordError):
        decode_revive_record(body[:-1])
    both = bytearray(body)
    both[-1] |= 1  # offset 18 is then passed too
    with pytest.raises(ReviveRecordError):
        decode_revive_record(bytes(both))
    with pytest.raises(ValueError):
        encode_revive_record(OrderlyCheckpoint("G", "T", 3, 10, 2, (10,), (10,), 5, 1000))


ops = st.lists(
    st.tuples(
        st.sampled_from(["pop", "ack", "nack", "tick", "replay", "snap"]), st.integers(0, 30)
    ),
    max_size=60,
)


@settings(max_examples=examples(150), deadline=None)
@given(st.lists(st.sampled_from(["a", "b", "c", None]), min_size=1, max_size=30), ops)
def test_a_replica_replaying_the_records_holds_the_same_order_state(
    groups: list[str | None], steps: list[tuple[str, int]]
) -> None:
    m = Master([(g, "") for g in groups], max_attempts=2)
    now = 0
    firsts: dict[str, list[int]] = {}
    acked: set[int] = set()  # acked or dead-lettered
    snap: PopSnapshot | None = None  # the master's last snapshot, through its codec
    for op, arg in steps:
        if op == "pop":
            for offset, attempt in m.pop(now, want=1 + arg % 4):
                group = groups[offset]
                out = [o for o, d in m.queue().deliveries.items() if groups[o] == group]
                assert group is None or out == [offset], "one message of a group out at a time"
                if attempt == 1 and group is not None:
                    firsts.setdefault(group, []).append(offset)
        elif op in ("ack", "nack"):
            live = [o for o, d in m.queue().deliveries.items() if now < d.deadline_ms]
            if live:
                offset = live[arg % len(live)]
                if op == "ack":
                    m.ack(offset, now)
                    acked.add(offset)
                else:
                    m.change(offset, now + 1 + arg)
        elif op == "tick":
            now += arg * 100
            acked.update(m.revive(now))  # dead-lettered: done too
        elif op == "snap":
            taken = m.state.snapshot(len(m.records), b"k" * 32)
            snap = decode_snapshot([decode_snapshot_part(b) for b in encode_snapshot(taken, 64)])
        else:  # a failover: the new master replays the log and reads the queue again
            # (from its last snapshot, or whole)
            rebuilt = [replay(m.records)]
            if snap is not None:
                rebuilt.append(replay(m.records[snap.replay_from :], PopState.restore(snap)))
            mine = m.queue()
            learn(mine, m.messages)
            for again in rebuilt:
                oq = again.order.open_queue(Q, 0)
                learn(oq, m.messages)
                assert oq.low == mine.low
                assert oq.deliveries == mine.deliveries
                # The same deliveries in flight, with their deadlines (a replay also holds the
                # expired ones the master dropped in memory, until its revive task drops them
                # too; the order state hands them out again either way).
                assert unexpired(again, now) == unexpired(m.state, now)
                assert again.order.blocked_groups() == m.state.order.blocked_groups()
                for t in (now, now + 10_000):
                    assert oq.select(t, 8, 2).handed == mine.select(t, 8, 2).handed
                # Every delivery in flight comes due on the rebuilt set, once.
                assert {e.key for e in again.due(now + 10_000)} == again.inflight_keys()
    for group, offsets in firsts.items():  # first deliveries in queue order per group
        assert offsets == sorted(offsets) == [o for o in offsets if groups[o] == group]
        assert all(o in acked or o in m.queue().deliveries or o < m.queue().low for o in offsets)
