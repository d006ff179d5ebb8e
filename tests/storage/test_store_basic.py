"""Put and get on one store: offsets, statuses, limits, coalescing, visibility."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from protocol.message import HEAD_SIZE, Message, iter_records, make_msg_id
from storage.store import (
    GetStatus,
    MessageStore,
    MessageTooLargeError,
    StoreConfig,
    StoreError,
)
from tests.storage.support import TOPIC, messages, open_store, read_queue

NOW = 1_700_000_100_000


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MessageStore]:
    s = open_store(tmp_path / "data", store_host="192.168.1.9:10911")
    yield s
    s.close()


def test_put_assigns_consecutive_queue_offsets_and_records_decode(store: MessageStore) -> None:
    first = store.put(TOPIC, 0, messages(3, tag="TagA"), NOW)
    second = store.put(TOPIC, 0, messages(2, prefix="n"), NOW + 1)
    assert (first.queue_id, first.first_queue_offset, first.count) == (0, 0, 3)
    assert (second.first_queue_offset, second.count) == (3, 2)
    assert first.physical_offsets[0] == 0
    assert second.physical_offsets[0] == first.end_offset
    assert second.end_offset == store.max_offset
    assert first.store_timestamp == NOW

    records = read_queue(store, TOPIC, 0)
    assert [r.queue_offset for r in records] == [0, 1, 2, 3, 4]
    assert [r.physical_offset for r in records] == first.physical_offsets + second.physical_offsets
    assert records[0].body.startswith(b"m0:") and records[3].body.startswith(b"n0:")
    assert records[0].tags == "TagA" and records[0].keys == "k0"
    assert records[0].topic == TOPIC and records[0].queue_id == 0
    assert records[0].store_host == "192.168.1.9:10911"
    assert records[0].born_host == "10.0.0.7:4242"
    assert records[4].store_timestamp == NOW + 1
    assert records[0].msg_id == make_msg_id("192.168.1.9:10911", 0)


def test_queues_are_independent(store: MessageStore) -> None:
    store.put(TOPIC, 0, messages(2), NOW)
    store.put(TOPIC, 3, messages(4), NOW)
    store.put("Other", 1, [Message(topic="Other", body=b"o")], NOW)
    assert store.queue_max_offset(TOPIC, 0) == 2
    assert store.queue_max_offset(TOPIC, 3) == 4
    assert store.queue_max_offset(TOPIC, 1) == 0
    assert store.queue_ids(TOPIC) == [0, 3]
    assert store.topics() == ["Other", TOPIC]
    assert [r.queue_offset for r in read_queue(store, TOPIC, 3)] == [0, 1, 2, 3]


def test_get_statuses(store: MessageStore) -> None:
    empty = store.get(TOPIC, 0, 0, 32, 1 << 20)
    assert (empty.status, empty.next_offset, empty.count, empty.body) == (
        GetStatus.NO_MESSAGE_IN_QUEUE,
        0,
        0,
        b"",
    )
    store.put(TOPIC, 0, messages(5), NOW)
    at_max = store.get(TOPIC, 0, 5, 32, 1 << 20)
    assert (at_max.status, at_max.next_offset, at_max.max_offset) == (
        GetStatus.NO_MATCHED_MESSAGE,
        5,
        5,
    )
    past = store.get(TOPIC, 0, 9, 32, 1 << 20)
    assert (past.status, past.next_offset) == (GetStatus.OFFSET_OVERFLOW, 5)
    below = store.get(TOPIC, 0, -1, 32, 1 << 20)
    assert (below.status, below.next_offset) == (GetStatus.OFFSET_TOO_SMALL, 0)
    found = store.get(TOPIC, 0, 2, 32, 1 << 20)
    assert (found.status, found.count, found.next_offset, found.min_offset, found.max_offset) == (
        GetStatus.FOUND,
        3,
        5,
        0,
        5,
    )


def test_get_honours_max_count_and_max_bytes(store: MessageStore) -> None:
    result = store.put(TOPIC, 0, messages(10, size=200), NOW)
    record_size = result.physical_offsets[1] - result.physical_offsets[0]
    assert store.get(TOPIC, 0, 0, 4, 1 << 20).count == 4
    assert store.get(TOPIC, 0, 0, 32, record_size * 3).count == 3
    assert store.get(TOPIC, 0, 0, 32, record_size * 3 + record_size // 2).count == 3
    # At least one message, even when it alone exceeds max_bytes.
    one = store.get(TOPIC, 0, 7, 32, 10)
    assert (one.status, one.count, one.next_offset) == (GetStatus.FOUND, 1, 8)
    assert len(one.body) == record_size


def test_get_body_is_the_stored_bytes_coalesced(store: MessageStore) -> None:
    batch = store.put(TOPIC, 0, messages(5), NOW)
    store.put(TOPIC, 1, messages(1), NOW)  # interleaves with queue 0
    later = store.put(TOPIC, 0, messages(3, prefix="z"), NOW)
    result = store.get(TOPIC, 0, 0, 32, 1 << 20)
    assert result.count == 8
    expected = (
        store.read_raw(0, batch.end_offset - 0).tobytes()
        + store.read_raw(
            later.physical_offsets[0], later.end_offset - later.physical_offsets[0]
        ).tobytes()
    )
    assert result.body == expected
    assert [r.queue_offset for r in iter_records(result.body)] == list(range(8))


def test_max_physical_offset_limits_what_is_visible(store: MessageStore) -> None:
    a = store.put(TOPIC, 0, messages(3), NOW)
    store.put(TOPIC, 0, messages(3, prefix="b"), NOW)
    visible = store.get(TOPIC, 0, 0, 32, 1 << 20, max_physical_offset=a.end_offset)
    assert (visible.status, visible.count, visible.next_offset) == (GetStatus.FOUND, 3, 3)
    # A record that ends past the limit is not served, even partly.
    partial = store.get(TOPIC, 0, 0, 32, 1 << 20, max_physical_offset=a.physical_offsets[2] + 1)
    assert partial.count == 2
    nothing = store.get(TOPIC, 0, 3, 32, 1 << 20, max_physical_offset=a.end_offset)
    assert (nothing.status, nothing.next_offset, nothing.count) == (
        GetStatus.NO_MATCHED_MESSAGE,
        3,
        0,
    )
    assert store.get(TOPIC, 0, 3, 32, 1 << 20).count == 3


def test_empty_put_changes_nothing(store: MessageStore) -> None:
    result = store.put(TOPIC, 0, [], NOW)
    assert (result.count, result.physical_offsets, result.end_offset) == (0, [], 0)
    assert store.max_offset == 0


def test_oversized_message_and_batch_are_refused_without_writing(tmp_path: Path) -> None:
    store = open_store(tmp_path, max_message_bytes=1000)
    with pytest.raises(MessageTooLargeError):
        store.put(TOPIC, 0, [Message(topic=TOPIC, body=b"x" * 1000)], NOW)
    with pytest.raises(MessageTooLargeError):
        store.put(TOPIC, 0, messages(100, size=900), NOW)  # ~100 KB > one 64 KiB segment
    with pytest.raises(MessageTooLargeError):
        store.put(TOPIC, 0, [Message(topic=TOPIC, body=b"", properties={"p": "v" * 70000})], NOW)
    assert store.max_offset == 0
    assert store.queue_max_offset(TOPIC, 0) == 0
    ok = store.put(
        TOPIC, 0, [Message(topic=TOPIC, body=b"x" * (1000 - HEAD_SIZE - 4 - len(TOPIC)))], NOW
    )
    assert ok.count == 1
    store.close()


@pytest.mark.parametrize("topic", ["", "a/b", "..", "white space", "t" * 256])
def test_bad_topic_names_are_refused(store: MessageStore, topic: str) -> None:
    with pytest.raises(StoreError):
        store.put(topic, 0, [Message(topic=topic or "x", body=b"x")], NOW)
    assert store.max_offset == 0


def test_bad_queue_id_is_refused(store: MessageStore) -> None:
    with pytest.raises(StoreError):
        store.put(TOPIC, -1, messages(1), NOW)


def test_unencodable_field_leaves_nothing_behind(store: MessageStore) -> None:
    store.put(TOPIC, 0, messages(1), NOW)
    end = store.max_offset
    bad = messages(3)
    bad[1].flag = 1 << 40
    with pytest.raises(StoreError):
        store.put(TOPIC, 0, bad, NOW)
    assert store.max_offset == end
    assert store.queue_max_offset(TOPIC, 0) == 1
    segment = store.config.data_dir / "commitlog" / f"{0:020d}"
    assert not any(segment.read_bytes()[end : end + 4096])
    assert store.put(TOPIC, 0, messages(1), NOW).physical_offsets == [end]


def test_offset_by_timestamp(store: MessageStore) -> None:
    for i in range(10):
        store.put(TOPIC, 0, messages(2), NOW + i * 1000)
    assert store.offset_by_timestamp(TOPIC, 0, 0) == 0
    assert store.offset_by_timestamp(TOPIC, 0, NOW) == 0
    assert store.offset_by_timestamp(TOPIC, 0, NOW + 1) == 2
    assert store.offset_by_timestamp(TOPIC, 0, NOW + 4000) == 8
    assert store.offset_by_timestamp(TOPIC, 0, NOW + 99_000) == 20
    assert store.offset_by_timestamp(TOPIC, 7, NOW) == 0


def test_flush_returns_the_write_position(store: MessageStore) -> None:
    store.put(TOPIC, 0, messages(3), NOW)
    assert store.flushed_offset == 0
    assert store.flush() == store.max_offset == store.flushed_offset


def test_store_must_be_open(tmp_path: Path) -> None:
    store = MessageStore(StoreConfig(data_dir=tmp_path))
    with pytest.raises(StoreError, match="not open"):
        store.put(TOPIC, 0, messages(1), NOW)
    store.close()  # closing a store never opened is harmless


def test_a_data_dir_is_owned_by_one_store(tmp_path: Path) -> None:
    first = open_store(tmp_path)
    with pytest.raises(StoreError, match="in use"):
        open_store(tmp_path)
    first.close()
    open_store(tmp_path).close()


def test_config_is_validated(tmp_path: Path) -> None:
    with pytest.raises(StoreError):
        MessageStore(StoreConfig(data_dir=tmp_path, commitlog_segment_bytes=100))
    with pytest.raises(StoreError):
        MessageStore(StoreConfig(data_dir=tmp_path, disk_max_used_ratio=0))


def test_a_store_object_can_be_closed_and_opened_again(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.put(TOPIC, 0, messages(3), NOW)
    store.close()
    store.open()
    assert store.queue_max_offset(TOPIC, 0) == 3
    assert store.put(TOPIC, 0, messages(1), NOW).first_queue_offset == 3
    store.close()
    store.close()  # a second close is harmless


def test_refused_puts_leave_no_queue_behind(store: MessageStore) -> None:
    with pytest.raises(MessageTooLargeError):
        store.put("Big", 0, [Message(topic="Big", body=bytes(5 * 1024 * 1024))], NOW)
    assert store.put("Empty", 0, [], NOW).first_queue_offset == 0
    assert store.topics() == []


def entry_1_rebuilt(store: MessageStore, cq: Path, good: bytes, wrong: bytes) -> None:
    """Write ``wrong`` over queue entry 1 of TOPIC's queue 0 (of three messages): entry 0 reads
    as before, and once entry 1 is reached the queue is rebuilt from the CommitLog, nothing
    skipped, the file as ``good`` again."""
    with cq.open("r+b") as f:  # the mapping shares the page cache: the store sees this
        f.seek(20)
        f.write(wrong)
    store._rebuilt.clear()
    found = store.get(TOPIC, 0, 0, 32, 1 << 20)
    assert (found.status, found.count, found.next_offset) == (GetStatus.FOUND, 1, 1)
    rest = store.get(TOPIC, 0, 1, 32, 1 << 20)
    assert (rest.status, rest.count, rest.next_offset) == (GetStatus.FOUND, 2, 3)
    assert [r.queue_offset for r in iter_records(rest.body)] == [1, 2]
    assert cq.read_bytes()[:60] == good


def test_an_entry_pointing_at_no_record_has_its_queue_rebuilt(store: MessageStore) -> None:
    store.put(TOPIC, 0, messages(3), NOW)
    store.put("Other", 0, messages(2), NOW)
    cq = store.config.data_dir / "consumequeue" / TOPIC / "0" / f"{0:020d}"
    good = cq.read_bytes()[:60]
    for wrong in (
        (store.max_offset + 100).to_bytes(8, "big") + (50).to_bytes(4, "big"),  # past the log
        good[:8] + good[28:32],  # entry 0's record with entry 1's size
        good[40:60],  # entry 2's record
    ):
        entry_1_rebuilt(store, cq, good, wrong)
    assert store.corruption["consumequeue_rebuilt"] == 3


def test_a_wrong_entry_is_rebuilt_not_blamed_on_the_commitlog_when_replicas_can_repair(
    store: MessageStore,
) -> None:
    # In controller mode (a replica to repair from) an entry zeroed inside its queue, or naming
    # its record with a size too small, was answered MESSAGE_CORRUPT as "commitlog record at
    # offset 0 unreadable (record header damaged (truncated record))": the CommitLog was intact,
    # no repair could be made, and the queue stayed blocked there until a restart.
    store._corruption.repairable = True
    store.put(TOPIC, 0, messages(3), NOW)
    cq = store.config.data_dir / "consumequeue" / TOPIC / "0" / f"{0:020d}"
    good = cq.read_bytes()[:60]
    for wrong in (
        bytes(20),  # zeroed
        good[20:28] + (int.from_bytes(good[28:32], "big") - 8).to_bytes(4, "big"),  # too small
    ):
        entry_1_rebuilt(store, cq, good, wrong)
    assert store.corruption["consumequeue_rebuilt"] == 2
    assert store.corruption["read"] == 0


def test_an_entry_naming_an_offset_inside_a_record_is_not_taken_for_commitlog_damage(
    store: MessageStore,
) -> None:
    # In controller mode an entry whose CommitLog offset pointed inside a record was answered
    # CORRUPT ("commitlog record at offset O unreadable (record header damaged (bad magic))"),
    # the replicas were asked for bytes that are no record, and every refusal counted as
    # unrepairable damage, retried every 10 s and reported to the elections after the queue was
    # rebuilt: RmqUnrepairableDamage with an intact CommitLog on every replica.
    store._corruption.repairable = True
    store.put(TOPIC, 0, messages(3), NOW)
    cq = store.config.data_dir / "consumequeue" / TOPIC / "0" / f"{0:020d}"
    good = cq.read_bytes()[:60]

    def point(index: int, delta: int) -> None:
        entry = good[index * 20 : index * 20 + 20]
        inside = (int.from_bytes(entry[:8], "big") + delta).to_bytes(8, "big")
        with cq.open("r+b") as f:  # the mapping shares the page cache: the store sees this
            f.seek(index * 20)
            f.write(inside + entry[8:])

    # Entry 1 inside its own record: a walk from the record entry 0 names steps over it.
    point(1, 12)
    found = store.get(TOPIC, 0, 1, 32, 1 << 20)
    assert (found.status, found.count, found.next_offset) == (GetStatus.FOUND, 2, 3)
    assert store.corruption["read"] == 0
    assert cq.read_bytes()[:60] == good

    # Entry 0 (nothing before it to walk from): taken for damage until no replica could
    # repair it; then the queue is rebuilt and the offset is no damage any more.
    point(0, 12)
    store._rebuilt.clear()
    inside = int.from_bytes(good[:8], "big") + 12
    first = store.get(TOPIC, 0, 0, 32, 1 << 20)
    assert first.status is GetStatus.CORRUPT
    assert [at for at, _ in store.repairs.unrepaired()] == [inside]
    store.repairs.repair_refused(inside)
    again = store.get(TOPIC, 0, 0, 32, 1 << 20)
    assert (again.status, again.count, again.next_offset) == (GetStatus.FOUND, 3, 3)
    assert store.repairs.unrepaired() == []
    assert store.repairs.unrepairable() == []


def test_read_raw_outside_the_log_is_refused(store: MessageStore) -> None:
    store.put(TOPIC, 0, messages(2), NOW)
    with pytest.raises(StoreError):
        store.read_raw(store.max_offset + 1, 100)
    with pytest.raises(StoreError):
        store.read_raw(-1, 100)
