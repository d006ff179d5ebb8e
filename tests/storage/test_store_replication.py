"""Replication hooks: read_raw / append_raw replay, truncate, confirm offset."""

from __future__ import annotations

from pathlib import Path

import pytest
import structlog

from protocol.message import Message
from storage.confirm_file import read_confirm_file
from storage.errors import CorruptRecordError
from storage.store import GetStatus, MessageStore, StoreError
from tests.storage.support import (
    SEGMENT,
    TOPIC,
    commitlog_bytes,
    commitlog_files,
    crash_copy,
    messages,
    open_store,
    read_queue,
)

NOW = 1_700_000_000_000


def fill_master(master: MessageStore, batches: int = 80) -> None:
    for i in range(batches):
        topic = TOPIC if i % 5 else "Orders"
        batch = [
            Message(topic=topic, body=f"{i}-{j}".encode() * 100, tags=f"t{j % 3}")
            for j in range(i % 7 + 1)
        ]
        master.put(topic, i % 3, batch, NOW + i)


def replicate(master: MessageStore, slave: MessageStore, chunk: int = 5000) -> None:
    while slave.max_offset < master.max_offset:
        offset = slave.max_offset
        assert slave.append_raw(offset, master.read_raw(offset, chunk)) == slave.max_offset


def all_gets(store: MessageStore) -> list[tuple[object, ...]]:
    out: list[tuple[object, ...]] = []
    for topic in store.topics():
        for qid in store.queue_ids(topic):
            for offset in range(store.queue_max_offset(topic, qid) + 2):
                r = store.get(topic, qid, offset, 3, 1 << 20)
                out.append(
                    (
                        topic,
                        qid,
                        offset,
                        r.status,
                        r.next_offset,
                        r.min_offset,
                        r.max_offset,
                        r.body,
                    )
                )
    return out


def test_append_raw_replay_gives_identical_bytes_and_reads(tmp_path: Path) -> None:
    master = open_store(tmp_path / "master", store_host="10.1.1.1:10911")
    slave = open_store(tmp_path / "slave", store_host="10.2.2.2:10911")
    fill_master(master)
    assert len(commitlog_files(tmp_path / "master")) >= 3
    replicate(master, slave)
    assert slave.max_offset == master.max_offset
    assert commitlog_bytes(slave) == commitlog_bytes(master)
    for a, b in zip(
        commitlog_files(tmp_path / "master"), commitlog_files(tmp_path / "slave"), strict=True
    ):
        assert a.name == b.name and a.read_bytes() == b.read_bytes()
    assert slave.topics() == master.topics()
    assert all_gets(slave) == all_gets(master)
    assert read_queue(slave, TOPIC, 1)[0].store_host == "10.1.1.1:10911"
    slave.close()
    master.close()


def test_replica_survives_reopen_and_crash(tmp_path: Path) -> None:
    master = open_store(tmp_path / "master")
    slave = open_store(tmp_path / "slave")
    fill_master(master, 50)
    replicate(master, slave, chunk=20_000)
    expected = all_gets(master)
    crashed = crash_copy(slave, tmp_path / "crashed")
    slave.close()
    reopened = open_store(tmp_path / "slave")
    assert all_gets(reopened) == expected
    reopened.close()
    recovered = open_store(crashed)
    assert all_gets(recovered) == expected
    recovered.close()
    master.close()


def test_append_raw_at_the_wrong_offset_is_refused(tmp_path: Path) -> None:
    master = open_store(tmp_path / "master")
    slave = open_store(tmp_path / "slave")
    master.put(TOPIC, 0, messages(3), NOW)
    chunk = master.read_raw(0, 1 << 20)
    with pytest.raises(StoreError, match="ends at 0"):
        slave.append_raw(100, chunk)
    slave.append_raw(0, chunk)
    with pytest.raises(StoreError):
        slave.append_raw(0, chunk)
    assert slave.queue_max_offset(TOPIC, 0) == 3
    slave.close()
    master.close()


def test_append_raw_refuses_a_corrupt_batch_and_writes_nothing(tmp_path: Path) -> None:
    master = open_store(tmp_path / "master")
    slave = open_store(tmp_path / "slave")
    results = [master.put(TOPIC, 0, messages(2), NOW) for _ in range(3)]
    chunk = bytearray(master.read_raw(0, 1 << 20))
    bad_at = results[2].physical_offsets[1]
    chunk[bad_at + 80] ^= 1
    with pytest.raises(CorruptRecordError) as info:
        slave.append_raw(0, bytes(chunk))
    assert info.value.offset == bad_at and info.value.reason == "CRC mismatch"
    assert slave.max_offset == 0
    assert slave.queue_max_offset(TOPIC, 0) == 0
    with pytest.raises(CorruptRecordError, match="record"):
        slave.append_raw(0, master.read_raw(0, 1 << 20)[:-10])  # a partial record
    slave.append_raw(0, master.read_raw(0, 1 << 20))
    assert [r.queue_offset for r in read_queue(slave, TOPIC, 0)] == list(range(6))
    slave.close()
    master.close()


def test_append_raw_refuses_data_crossing_a_segment_end(tmp_path: Path) -> None:
    master = open_store(tmp_path / "master")
    slave = open_store(tmp_path / "slave")
    while master.max_offset < SEGMENT + 2000:
        master.put(TOPIC, 0, messages(5, size=1000), NOW)
    first = master.read_raw(0, SEGMENT)
    second = master.read_raw(SEGMENT, 1000)
    with pytest.raises(StoreError, match="crosses the segment end"):
        slave.append_raw(0, first.tobytes() + second.tobytes())
    slave.append_raw(0, first)
    slave.append_raw(SEGMENT, second)
    assert slave.max_offset == SEGMENT + second.nbytes
    slave.close()
    master.close()


def test_append_raw_refuses_a_queue_gap(tmp_path: Path) -> None:
    master = open_store(tmp_path / "master")
    slave = open_store(tmp_path / "slave")
    first = master.put(TOPIC, 0, messages(1), NOW)
    master.put(TOPIC, 0, messages(1), NOW)
    slave.append_raw(0, master.read_raw(0, first.end_offset))
    # Replaying record 0 again at the next position: right CRC, wrong offsets.
    forged = bytearray(master.read_raw(0, first.end_offset))
    with pytest.raises(CorruptRecordError):
        slave.append_raw(first.end_offset, bytes(forged))
    slave.close()
    master.close()


def test_truncate_is_durable_and_cuts_queues(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    results = [store.put(TOPIC, i % 2, messages(6, size=900), NOW + i) for i in range(40)]
    assert len(commitlog_files(tmp_path)) >= 3
    cut = results[9].end_offset  # a record boundary in the first segment
    assert cut < SEGMENT
    with structlog.testing.capture_logs() as logs:
        store.truncate(cut)
    assert any("truncated from" in e["event"] for e in logs)
    assert store.max_offset == cut
    assert store.flushed_offset <= cut
    assert store.queue_max_offset(TOPIC, 0) == 30 and store.queue_max_offset(TOPIC, 1) == 30
    assert store.get(TOPIC, 0, 30, 10, 1 << 20).status is GetStatus.NO_MATCHED_MESSAGE
    assert len(commitlog_files(tmp_path)) == 1
    assert commitlog_files(tmp_path)[0].read_bytes()[cut:] == bytes(SEGMENT - cut)
    crashed = crash_copy(store, tmp_path.parent / (tmp_path.name + "-crashed"))
    expected = all_gets(store)
    store.close()
    for data_dir in (tmp_path, crashed):
        again = open_store(data_dir)
        assert again.max_offset == cut
        assert all_gets(again) == expected
        again.close()


def test_truncate_then_replay_matches_the_master(tmp_path: Path) -> None:
    master = open_store(tmp_path / "master")
    slave = open_store(tmp_path / "slave")
    fill_master(master, 40)
    replicate(master, slave)
    # The slave had diverged after some point; it cuts back and catches up again.
    cut = master.read_raw(0, SEGMENT // 2).nbytes  # whole records: a record boundary
    slave.truncate(cut)
    assert slave.max_offset == cut
    replicate(master, slave, chunk=3000)
    assert commitlog_bytes(slave) == commitlog_bytes(master)
    assert all_gets(slave) == all_gets(master)
    slave.close()
    master.close()


def test_truncate_checks_its_offset(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    result = store.put(TOPIC, 0, messages(3), NOW)
    with pytest.raises(StoreError, match="not a record boundary"):
        store.truncate(result.physical_offsets[1] + 3)
    with pytest.raises(StoreError):
        store.truncate(store.max_offset + 1)
    store.truncate(store.max_offset)  # a no-op
    store.truncate(0)
    assert store.max_offset == 0 and store.queue_max_offset(TOPIC, 0) == 0
    again = store.put(TOPIC, 0, messages(1), NOW)
    assert (again.first_queue_offset, again.physical_offsets) == (0, [0])
    store.close()


def test_confirm_offset_is_checkpointed_and_never_above_the_log(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    results = [store.put(TOPIC, 0, messages(2), NOW) for _ in range(5)]
    store.confirm_offset = results[3].end_offset
    store.flush()
    store.close()
    again = open_store(tmp_path)
    assert again.confirm_offset == results[3].end_offset
    again.truncate(results[1].end_offset)
    assert again.confirm_offset == results[1].end_offset
    again.close()
    third = open_store(tmp_path)
    assert third.confirm_offset == results[1].end_offset
    third.close()


def test_confirm_offset_is_clamped_at_the_log_and_lowered_only_by_truncation(
    tmp_path: Path,
) -> None:
    store = open_store(tmp_path)
    results = [store.put(TOPIC, 0, messages(2), NOW) for _ in range(3)]
    store.confirm_offset = store.max_offset + 1000
    assert store.confirm_offset == store.max_offset
    store.confirm_offset = results[0].end_offset  # a lower figure lowers nothing
    assert store.confirm_offset == store.max_offset
    store.truncate(results[1].end_offset)
    assert store.confirm_offset == results[1].end_offset
    store.close()


def test_the_store_lists_its_commitlog_segments_as_they_are_on_disk(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    assert store.commitlog_segments() == []
    ends = []
    while len(commitlog_files(tmp_path)) < 3:
        ends.append(store.put(TOPIC, 0, messages(8), NOW).end_offset)
    segments = store.commitlog_segments()
    files = commitlog_files(tmp_path)
    assert [start for start, _ in segments] == [int(f.name) for f in files]
    assert all(end - start == SEGMENT for start, end in segments)
    assert segments[-1][0] <= store.max_offset < segments[-1][1]
    store.truncate(min(e for e in ends if segments[1][0] < e < segments[1][1]))
    assert store.commitlog_segments() == segments[:2]
    store.truncate(segments[1][0])  # cut at a segment's start: that segment goes
    assert store.commitlog_segments() == segments[:1]
    assert len(commitlog_files(tmp_path)) == 1
    store.close()


def test_a_crash_keeps_the_confirm_offset_raised_since_the_last_flush(tmp_path: Path) -> None:
    """The confirm offset a returning replica checks before truncating (an unclean election)
    is the one it last had, not the one of its last flush: killed between two flushes, it
    used to come back with the checkpoint's, and cut what was acknowledged since."""
    store = open_store(tmp_path / "live")
    results = [store.put(TOPIC, 0, messages(2), NOW) for _ in range(5)]
    store.confirm_offset = results[1].end_offset
    store.flush()
    store.confirm_offset = results[3].end_offset  # acknowledged; no flush since
    crashed = crash_copy(store, tmp_path / "crashed")
    store.truncate(results[2].end_offset)  # lowered, as a permitted truncation does
    lowered = crash_copy(store, tmp_path / "lowered")
    store.close()
    for data_dir, confirm in (
        (crashed, results[3].end_offset),
        (lowered, results[2].end_offset),
    ):
        again = open_store(data_dir)
        try:
            assert again.confirm_offset == confirm
        finally:
            again.close()


def test_an_unreadable_confirm_file_falls_back_to_the_checkpoint(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    results = [store.put(TOPIC, 0, messages(2), NOW) for _ in range(3)]
    store.confirm_offset = results[1].end_offset
    store.close()  # checkpointed
    (tmp_path / "confirm").write_bytes(b"not a confirm file")
    with structlog.testing.capture_logs() as logs:
        again = open_store(tmp_path)
    try:
        assert again.confirm_offset == results[1].end_offset
        assert any("ignoring the confirm offset file" in e["event"] for e in logs)
        again.confirm_offset = results[2].end_offset  # the file works again
    finally:
        again.close()
    assert read_confirm_file(tmp_path / "confirm") == results[2].end_offset
