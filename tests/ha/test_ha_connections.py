"""The master and slave connection state machines, alone and joined by a fake link."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.ha.actions import (
    AppendBytes,
    AppendEpoch,
    CloseConnection,
    Reconnect,
    ReplicationRefused,
    SendBytes,
    SlaveAcked,
    SlaveRegistered,
    StartLogAt,
    StreamingStarted,
    TruncateLog,
    UpdateConfirmOffset,
)
from broker.ha.batch import epoch_at, record_aligned_length
from broker.ha.master_conn import TRANSITIONS as MASTER_TRANSITIONS
from broker.ha.master_conn import MasterConnection, MasterLogState
from broker.ha.slave_conn import TRANSITIONS as SLAVE_TRANSITIONS
from broker.ha.slave_conn import SlaveConnection
from broker.ha.truncation import ConsistentPoint, EmptyLog, NoCommonEntry
from protocol.ha import (
    EpochEntry,
    HAConnectionState,
    MasterHandshake,
    MasterTransfer,
    SlaveAck,
    SlaveHandshake,
    encode_master_handshake,
    encode_master_transfer,
    encode_slave_ack,
    encode_slave_handshake,
)
from protocol.message import Message, RecordEncoder, encode_blank
from tests.ha.ha_harness import H, Link, Node
from tests.hypothesis_profiles import examples

S = HAConnectionState


def log_state(
    entries: tuple[EpochEntry, ...] = H((1, 0), (2, 100)),
    max_offset: int = 300,
    confirm: int = 0,
    min_offset: int = 0,
    last_file_start: int = 256,
) -> MasterLogState:
    return MasterLogState(
        epoch_entries=entries,
        max_offset=max_offset,
        confirm_offset=confirm,
        min_offset=min_offset,
        last_file_start=last_file_start,
    )


def hs(broker_id: int = 2, *, sync_from_last_file: bool = False) -> bytes:
    return encode_slave_handshake(
        SlaveHandshake(
            broker_id=broker_id, address="10.0.0.2:10912", sync_from_last_file=sync_from_last_file
        )
    )


def ack(offset: int) -> bytes:
    return encode_slave_ack(SlaveAck(max_offset=offset))


def check_labels(node: Node) -> None:
    """In these tests a byte's value is the epoch that wrote it: the history must agree."""
    for i, b in enumerate(node.log):
        assert epoch_at(node.entries, node.base + i).epoch % 256 == b, node.base + i


# =========================================================================== master alone


def test_master_answers_the_handshake_with_its_history() -> None:
    m = MasterConnection()
    assert m.state is S.HANDSHAKE
    actions = m.receive_data(hs(), log_state())
    expected = encode_master_handshake(
        MasterHandshake(master_max_offset=300, master_epoch=2, epoch_entries=H((1, 0), (2, 100)))
    )
    assert actions == [
        SlaveRegistered(handshake=SlaveHandshake(broker_id=2, address="10.0.0.2:10912")),
        SendBytes(data=expected),
    ]
    assert m.state.name == "TRANSFER"  # (by name: mypy narrowed the property)
    assert m.broker_id == 2
    assert m.plan_transfer(log_state()) is None  # nothing until the slave acks
    assert m.heartbeat(log_state()) is None


def test_master_streams_from_the_first_ack() -> None:
    m = MasterConnection(max_batch_bytes=1000)
    m.receive_data(hs(), log_state())
    assert m.receive_data(ack(60), log_state()) == [
        StreamingStarted(broker_id=2, offset=60),
        SlaveAcked(broker_id=2, offset=60),
    ]
    b = m.plan_transfer(log_state(confirm=55))
    assert b is not None
    assert (b.offset, b.length, b.epoch, b.epoch_start_offset, b.confirm_offset) == (
        60,
        40,
        1,
        0,
        55,
    )
    header = m.commit_transfer(b, bytes(40))
    assert (
        header
        == encode_master_transfer(
            MasterTransfer(offset=60, epoch=1, epoch_start_offset=0, confirm_offset=55)
        )[:4]
        + (40).to_bytes(4, "big")
        + header[8:]
    )
    assert m.next_offset == 100
    b = m.plan_transfer(log_state())
    assert b is not None and (b.offset, b.length, b.epoch) == (100, 200, 2)


@pytest.mark.parametrize(
    ("sync_from_last_file", "entries", "start"),
    [
        (False, H((1, 0), (2, 100)), 16),  # min offset
        (True, H((1, 0), (2, 100)), 256),  # start of the last file
        (False, H((1, 40), (2, 100)), 40),  # bytes before the first epoch are not replicated
    ],
)
def test_an_empty_slave_starts_where_the_master_says(
    sync_from_last_file: bool, entries: tuple[EpochEntry, ...], start: int
) -> None:
    m = MasterConnection()
    state = log_state(entries=entries, min_offset=16)
    m.receive_data(hs(sync_from_last_file=sync_from_last_file), state)
    assert m.receive_data(ack(0), state)[0] == StreamingStarted(broker_id=2, offset=start)
    assert m.next_offset == start


@pytest.mark.parametrize(
    ("acks", "message", "refusal"),
    [
        ([10], "below the master's min offset 16", None),  # a lagging slave, not hostile
        ([301], "beyond the master's max offset 300", "ack_out_of_range"),
        ([100, 90], "goes back", "ack_out_of_range"),
        ([100, 101], "passes what was sent", "ack_out_of_range"),
    ],
)
def test_master_closes_on_bad_acks(acks: list[int], message: str, refusal: str | None) -> None:
    m = MasterConnection()
    state = log_state(min_offset=16)
    m.receive_data(hs(), state)
    actions = m.receive_data(b"".join(ack(a) for a in acks), state)
    assert isinstance(actions[-1], CloseConnection)
    assert actions[-1].refusal == refusal
    # The offending ack is never reported: only the valid ones before it.
    assert [a.offset for a in actions if isinstance(a, SlaveAcked)] == acks[:-1]
    assert message in actions[-1].reason
    assert "2@10.0.0.2:10912" in actions[-1].reason
    assert m.state is S.SHUTDOWN
    assert m.receive_data(ack(200), state) == []
    assert m.plan_transfer(state) is None


def test_master_closes_on_garbage_and_on_ack_before_handshake() -> None:
    m = MasterConnection()
    (close,) = m.receive_data(ack(5), log_state())
    assert isinstance(close, CloseConnection) and "unexpected state 2" in close.reason
    assert close.refusal == "no_handshake"
    m = MasterConnection()
    (close,) = m.receive_data(b"\x00\x00\x00\x09" + bytes(80), log_state())
    assert isinstance(close, CloseConnection) and "bad state 9" in close.reason
    assert close.refusal == "no_handshake"
    assert m.close_reason == close.reason


def test_a_master_without_epochs_cannot_serve() -> None:
    m = MasterConnection()
    actions = m.receive_data(hs(), log_state(entries=(), max_offset=0))
    assert isinstance(actions[-1], CloseConnection)
    assert "no epoch entry" in actions[-1].reason


def test_master_heartbeat_carries_the_epoch_at_the_next_offset() -> None:
    m = MasterConnection()
    state = log_state(confirm=77)
    m.receive_data(hs(), state)
    m.receive_data(ack(300), state)
    assert m.plan_transfer(state) is None
    assert m.heartbeat(state) == encode_master_transfer(
        MasterTransfer(offset=300, epoch=2, epoch_start_offset=100, confirm_offset=77)
    )


def test_commit_transfer_checks_its_batch() -> None:
    m = MasterConnection()
    state = log_state()
    m.receive_data(hs(), state)
    m.receive_data(ack(0), state)
    b = m.plan_transfer(state)
    assert b is not None
    with pytest.raises(ValueError, match="body of 0 bytes"):
        m.commit_transfer(b, b"")
    with pytest.raises(ValueError, match="body of"):
        m.commit_transfer(b, bytes(b.max_length + 1))
    m.commit_transfer(b, bytes(10))
    with pytest.raises(ValueError, match="not the next offset"):
        m.commit_transfer(b, bytes(10))


def test_next_transfer_is_shortened_by_the_store_and_by_records() -> None:
    enc = RecordEncoder("127.0.0.1:10911")
    log = bytearray()
    for i in range(6):
        log += enc.encode(
            Message(topic="t", body=bytes(30)),
            queue_id=0,
            queue_offset=i,
            physical_offset=len(log),
            store_timestamp=1,
        )
    rec = len(log) // 6
    state = log_state(entries=H((1, 0)), max_offset=len(log))
    m = MasterConnection(max_batch_bytes=int(rec * 2.5))
    m.receive_data(hs(), state)
    m.receive_data(ack(0), state)
    reads: list[tuple[int, int]] = []

    def read(offset: int, n: int) -> memoryview:
        reads.append((offset, n))
        return memoryview(bytes(log))[offset : offset + n]

    out = m.next_transfer(state, read)
    assert out is not None
    _header, body = out
    assert len(body) == 2 * rec and record_aligned_length(body) == len(body)
    # A record longer than a batch is sent whole.
    small = MasterConnection(max_batch_bytes=10)
    small.receive_data(hs(), state)
    small.receive_data(ack(0), state)
    out = small.next_transfer(state, read)
    assert out is not None and len(out[1]) == rec
    # Without alignment the planned length is read as is.
    raw = MasterConnection(max_batch_bytes=10)
    raw.receive_data(hs(), state)
    raw.receive_data(ack(0), state)
    out = raw.next_transfer(state, read, record_aligned=False)
    assert out is not None and len(out[1]) == 10
    assert raw.next_transfer(state, lambda o, n: memoryview(b"")) is None


def test_transition_tables_close_from_every_state() -> None:
    for table, states in (
        (MASTER_TRANSITIONS, [S.HANDSHAKE, S.TRANSFER, S.SHUTDOWN]),
        (SLAVE_TRANSITIONS, list(S)),
    ):
        for state in states:
            assert table[(state, "close")] is S.SHUTDOWN


# =========================================================================== slave alone


def started_slave(
    entries: tuple[EpochEntry, ...] = H((1, 0), (2, 100)), max_offset: int = 150
) -> SlaveConnection:
    s = SlaveConnection(broker_id=3, address="10.0.0.3:10912", async_learner=True)
    assert s.state is S.READY
    out = s.start(epoch_entries=entries, max_offset=max_offset)
    assert out == encode_slave_handshake(
        SlaveHandshake(broker_id=3, address="10.0.0.3:10912", async_learner=True)
    )
    assert s.state.name == "HANDSHAKE"
    return s


def reply(entries: tuple[EpochEntry, ...], max_offset: int) -> bytes:
    return encode_master_handshake(
        MasterHandshake(
            master_max_offset=max_offset,
            master_epoch=entries[-1].epoch if entries else 0,
            epoch_entries=entries,
        )
    )


def transfer(offset: int, epoch: int, start: int, body: bytes = b"", confirm: int = 0) -> bytes:
    return encode_master_transfer(
        MasterTransfer(
            offset=offset, epoch=epoch, epoch_start_offset=start, confirm_offset=confirm, body=body
        )
    )


def test_slave_start_rules() -> None:
    s = SlaveConnection(broker_id=3, address="a")
    with pytest.raises(RuntimeError, match="before start"):
        s.receive_data(b"")
    s.start(epoch_entries=(), max_offset=0)
    with pytest.raises(RuntimeError, match="start"):
        s.start(epoch_entries=(), max_offset=0)
    with pytest.raises(ValueError):
        SlaveConnection(broker_id=3, address="a").start(
            epoch_entries=H((2, 0), (1, 0)), max_offset=0
        )


def test_slave_truncates_then_acks_the_consistent_point() -> None:
    s = started_slave()
    actions = s.receive_data(reply(H((1, 0), (3, 120)), 400))
    assert actions == [TruncateLog(offset=100), SendBytes(data=ack(100))]
    assert s.decision == ConsistentPoint(offset=100, epoch=1)
    assert s.state is S.TRANSFER
    assert s.max_offset == 100
    assert s.epoch_entries == H((1, 0))
    assert s.master_handshake is not None and s.master_handshake.master_epoch == 3


def test_slave_records_a_new_epoch_before_its_bytes_and_acks_once_per_chunk() -> None:
    s = started_slave()
    s.receive_data(reply(H((1, 0), (2, 100), (4, 160)), 400))
    chunk = (
        transfer(150, 2, 100, bytes(10), confirm=120)
        + transfer(160, 4, 160, bytes(5), confirm=170)
        + transfer(165, 4, 160, confirm=900)  # heartbeat; confirm capped at the local max
    )
    actions = s.receive_data(chunk)
    assert [type(a) for a in actions] == [
        AppendBytes,
        UpdateConfirmOffset,
        AppendEpoch,
        AppendBytes,
        UpdateConfirmOffset,
        SendBytes,
    ]
    assert actions[2] == AppendEpoch(epoch=4, start_offset=160)
    assert actions[3] == AppendBytes(offset=160, data=bytes(5))
    assert actions[1] == UpdateConfirmOffset(offset=120)
    assert actions[4] == UpdateConfirmOffset(offset=165)
    assert actions[-1] == SendBytes(data=ack(165))
    assert s.confirm_offset == 165
    assert s.epoch_entries == H((1, 0), (2, 100), (4, 160))


def test_a_heartbeat_of_a_new_epoch_records_it_and_is_acked() -> None:
    s = started_slave()
    s.receive_data(reply(H((1, 0), (2, 100), (5, 150)), 150))
    assert s.receive_data(transfer(150, 5, 150, confirm=150)) == [
        AppendEpoch(epoch=5, start_offset=150),
        UpdateConfirmOffset(offset=150),
        SendBytes(data=ack(150)),
    ]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        pytest.param(transfer(151, 2, 100, b"x"), "local max offset is 152", id="behind"),
        pytest.param(transfer(153, 2, 100, b"x"), "local max offset is 152", id="gap"),
        pytest.param(transfer(152, 1, 0, b"x"), "older than local epoch 2", id="old-epoch"),
        pytest.param(
            transfer(152, 2, 90, b"x"), "starts at 90 on the master but at 100 here", id="moved"
        ),
        pytest.param(
            transfer(152, 3, 140, b"x"),
            "new epoch 3 starts at 140, not at the local max",
            id="new-epoch-inside-local-bytes",
        ),
        pytest.param(reply(H((1, 0)), 10), "unexpected state 1", id="second-handshake"),
        pytest.param(b"\xff" * 40, "bad state -1", id="garbage"),
    ],
)
def test_slave_reconnects_when_the_master_is_out_of_step(data: bytes, message: str) -> None:
    s = started_slave()
    s.receive_data(reply(H((1, 0), (2, 100)), 400))
    actions = s.receive_data(transfer(150, 2, 100, b"ok") + data)
    assert isinstance(actions[-1], Reconnect)
    assert message in actions[-1].reason
    assert AppendBytes(offset=150, data=b"ok") in actions  # what came before still counts
    assert s.state is S.SHUTDOWN
    assert s.receive_data(transfer(152, 2, 100, b"x")) == []
    assert s.max_offset == 152


def test_slave_refuses_without_a_common_epoch() -> None:
    s = started_slave(entries=H((1, 0)), max_offset=100)
    actions = s.receive_data(reply(H((2, 0)), 50) + transfer(0, 2, 0, b"x"))
    assert len(actions) == 1 and isinstance(actions[0], ReplicationRefused)
    assert "no epoch in common" in actions[0].reason
    assert isinstance(s.decision, NoCommonEntry)
    assert s.state is S.SUSPEND
    assert s.receive_data(transfer(0, 2, 0, b"x")) == []
    s.close()
    assert s.state.name == "SHUTDOWN"
    assert s.close_reason is not None and "no epoch in common" in s.close_reason


def test_an_empty_slave_accepts_the_masters_start_offset() -> None:
    s = started_slave(entries=H((1, 0)), max_offset=0)
    assert s.receive_data(reply(H((3, 0), (4, 500)), 4100)) == [
        TruncateLog(offset=0),
        SendBytes(data=ack(0)),
    ]
    assert s.decision == EmptyLog()
    assert s.epoch_entries == ()
    actions = s.receive_data(transfer(4096, 4, 500, b"abc", confirm=4000))
    assert actions == [
        StartLogAt(offset=4096),
        AppendEpoch(epoch=4, start_offset=500),
        AppendBytes(offset=4096, data=b"abc"),
        UpdateConfirmOffset(offset=4000),
        SendBytes(data=ack(4099)),
    ]
    # Only the first transfer may choose the start.
    assert isinstance(s.receive_data(transfer(5000, 4, 500, b"x"))[-1], Reconnect)


# =========================================================================== joined


def test_replication_across_epochs_with_a_divergent_old_master() -> None:
    a, b, c = Node(1), Node(2), Node(3)
    a.become_master(1)
    a.write(bytes([1]) * 1000)
    for slave in (b, c):
        Link(a, slave).run()
        assert slave.log == a.log
        assert slave.entries == [EpochEntry(epoch=1, start_offset=0)]
    a.write(bytes([1]) * 300)
    Link(a, b).run()  # c is partitioned away
    a.write(bytes([1]) * 200)  # replicated to nobody; then a dies
    assert (a.max_offset, b.max_offset, c.max_offset) == (1500, 1300, 1000)

    b.become_master(2)
    b.write(bytes([2]) * 500)
    link = Link(b, c, max_batch_bytes=128)
    link.run()
    assert c.log == b.log
    assert (
        c.entries
        == b.entries
        == [EpochEntry(epoch=1, start_offset=0), EpochEntry(epoch=2, start_offset=1300)]
    )
    # The epoch was recorded when c's log reached its start, before any of its bytes.
    assert c.appended_epochs == [(1, 0, 0), (2, 1300, 1300)]
    for t in link.transfers_sent():
        assert not t.offset < 1300 < t.end_offset
        assert t.epoch == (1 if t.offset < 1300 else 2)
        assert len(t.body) <= 128

    back = Link(b, a)  # the old master returns as a slave
    back.run()
    assert back.sconn.decision == ConsistentPoint(offset=1300, epoch=1)
    assert TruncateLog(offset=1300) in back.slave_actions
    assert a.log == b.log
    check_labels(a)
    assert a.confirm == b.confirm == b.max_offset


def test_replication_survives_any_chunking() -> None:
    rng = random.Random(5)
    for _ in range(20):
        m, s = Node(1), Node(2)
        m.become_master(1)
        m.write(bytes([1]) * rng.randint(0, 400))
        m.become_master(2)
        m.write(bytes([2]) * rng.randint(0, 400))
        Link(m, s, max_batch_bytes=rng.randint(1, 100), chunk_rng=rng).run()
        assert s.log == m.log
        check_labels(s)


def test_record_aligned_replication_over_segments() -> None:
    """Real records, 1000-byte segments with blank tails, an epoch change mid-segment: every
    batch is whole records, inside one segment and one epoch."""
    enc = RecordEncoder("127.0.0.1:10911")
    m, s = Node(1, segment_size=1000), Node(2)
    m.become_master(1)
    rng = random.Random(1)
    boundaries = {0}
    while m.max_offset < 5000:
        if m.entries[-1].epoch == 1 and m.max_offset > 2000:
            m.become_master(2)
        rec = enc.encode(
            Message(topic="t", body=bytes(rng.randint(0, 400))),
            queue_id=0,
            queue_offset=0,
            physical_offset=m.max_offset,
            store_timestamp=1,
        )
        seg_left = m.segment_size - m.max_offset % m.segment_size
        m.write(rec if len(rec) + 8 <= seg_left else encode_blank(seg_left))
        boundaries.add(m.max_offset)
    epoch2 = m.entries[-1].start_offset
    link = Link(m, s, max_batch_bytes=300, record_aligned=True)
    link.run()
    assert s.log == m.log
    assert s.entries == m.entries
    sent = [t for t in link.transfers_sent() if t.body]
    assert sum(len(t.body) for t in sent) == m.max_offset
    for t in sent:
        assert t.offset in boundaries and t.end_offset in boundaries
        assert t.offset // 1000 == (t.end_offset - 1) // 1000  # never crosses a segment
        assert not t.offset < epoch2 < t.end_offset


def test_an_empty_slave_syncs_from_the_masters_last_file() -> None:
    m, s = Node(1, segment_size=1024), Node(2)
    m.become_master(1)
    m.write(bytes([1]) * 3000)
    link = Link(m, s, sync_from_last_file=True)
    link.run()
    assert s.base == 2048
    assert s.log == m.log[2048:]
    assert StartLogAt(offset=2048) in link.slave_actions
    check_labels(s)


def test_a_slave_with_no_common_epoch_refuses_and_keeps_its_data() -> None:
    a, b = Node(1), Node(2)
    a.become_master(1)
    a.write(bytes([1]) * 100)
    b.become_master(2)  # unclean: b never heard of epoch 1
    b.write(bytes([2]) * 50)
    link = Link(b, a)
    link.run()
    assert link.outcome is not None and link.outcome.startswith("refused:")
    assert a.log == bytes([1]) * 100


# --------------------------------------------------------------------------- simulation

op = st.one_of(
    st.tuples(st.just("elect"), st.integers(0, 2)),
    st.tuples(st.just("write"), st.integers(1, 300)),
    st.tuples(st.just("sync"), st.integers(0, 2)),
)


@settings(max_examples=examples(120), deadline=None)
@given(ops=st.lists(op, max_size=25), seed=st.integers(0, 2**16))
def test_any_history_of_elections_writes_and_syncs_stays_consistent(
    ops: list[tuple[str, int]], seed: int
) -> None:
    """Whatever the order of failovers, a slave that syncs ends as a copy of its master, or
    refuses and keeps its data; every history describes its node's bytes."""
    rng = random.Random(seed)
    nodes = [Node(1), Node(2), Node(3)]
    master: Node | None = None
    epoch = 0
    for kind, arg in ops:
        if kind == "elect":
            epoch += 1
            master = nodes[arg]
            master.become_master(epoch)
        elif kind == "write" and master is not None and epoch < 256:
            master.write(bytes([epoch]) * arg)
        elif kind == "sync" and master is not None and nodes[arg] is not master:
            slave = nodes[arg]
            before = bytes(slave.log)
            link = Link(
                master,
                slave,
                max_batch_bytes=rng.randint(1, 200),
                chunk_rng=rng,
                ack_moves_confirm=False,
            )
            link.run()
            if link.outcome is None:
                assert slave.log == master.bytes_from(slave.base)
                assert slave.base == 0
            else:
                assert link.outcome.startswith("refused:"), link.outcome
                assert isinstance(link.sconn.decision, NoCommonEntry)
                assert bytes(slave.log) == before and before
        for n in nodes:
            check_labels(n)
