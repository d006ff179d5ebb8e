"""Deleting a topic's ConsumeQueues (deleteTopic): the files go, the CommitLog keeps the bytes, a
queue of the same name starts empty where the old one ended, on the master and on a replica,
and records of the old topic that a replica or recovery replays later stay out of the queue."""

from __future__ import annotations

import shutil
from pathlib import Path

from protocol.message import Message
from storage.store import GetStatus, MessageStore
from tests.storage.support import crash_copy, open_store, read_queue

NOW = 1_700_000_000_000
T = "Doomed"


def put(store: MessageStore, topic: str, count: int, prefix: str, queue_id: int = 0) -> None:
    batch = [Message(topic=topic, body=f"{prefix}{i}".encode()) for i in range(count)]
    store.put(topic, queue_id, batch, NOW)


def bodies(store: MessageStore, topic: str, queue_id: int = 0) -> list[bytes]:
    return [r.body for r in read_queue(store, topic, queue_id, store.queue_min_offset(topic, 0))]


def replicate(master: MessageStore, replica: MessageStore, upto: int | None = None) -> None:
    end = master.max_offset if upto is None else upto
    while replica.max_offset < end:
        offset = replica.max_offset
        raw = master.read_raw(offset, min(end - offset, 1 << 20))
        replica.append_raw(offset, raw)


def test_a_deleted_topic_loses_its_queues_and_starts_empty_where_it_ended(tmp_path: Path) -> None:
    store = open_store(tmp_path / "m")
    put(store, T, 5, "old", 0)
    put(store, T, 2, "old", 3)
    put(store, "Kept", 3, "kept")
    end = store.max_offset
    assert store.retire_topic(T) == {0: 5, 3: 2}
    assert T not in store.topics()
    assert not [p for p in (tmp_path / "m" / "consumequeue" / T).rglob("*") if p.is_file()]
    # No queue yet: its offsets read where the old one ended (a consumer starts there).
    assert (store.queue_min_offset(T, 0), store.queue_max_offset(T, 0)) == (5, 5)
    assert store.queue_ids(T) == []
    assert store.max_offset == end  # the CommitLog keeps the bytes
    assert bodies(store, "Kept") == [b"kept0", b"kept1", b"kept2"]
    assert store.was_retired(T) and not store.was_retired("Kept")
    put(store, T, 1, "new", 0)
    assert (store.queue_min_offset(T, 0), store.queue_max_offset(T, 0)) == (5, 6)
    assert bodies(store, T) == [b"new0"]
    assert store.get(T, 0, 0, 10, 1 << 20).status is GetStatus.OFFSET_TOO_SMALL
    store.close()
    again = open_store(tmp_path / "m")  # the marks are durable; empty directories go
    assert not (tmp_path / "m" / "consumequeue" / T / "3").exists()
    assert bodies(again, T) == [b"new0"] and again.was_retired(T)
    put(again, T, 1, "x", 3)
    assert again.queue_min_offset(T, 3) == 2
    again.close()


def test_recovery_replaying_the_old_records_keeps_them_out(tmp_path: Path) -> None:
    store = open_store(tmp_path / "m")
    put(store, T, 4, "old")
    store.retire_topic(T)
    put(store, T, 2, "new")
    copy = crash_copy(store, tmp_path / "crash")
    store.close()
    (copy / "checkpoint").unlink()  # no checkpoint and no queues: every record is replayed
    shutil.rmtree(copy / "consumequeue")
    recovered = open_store(copy)
    assert bodies(recovered, T) == [b"new0", b"new1"]
    assert recovered.queue_min_offset(T, 0) == 4
    recovered.close()


def test_a_replica_behind_the_master_keeps_the_old_records_out(tmp_path: Path) -> None:
    master = open_store(tmp_path / "m")
    replica = open_store(tmp_path / "r")
    put(master, T, 3, "a")
    half = master.max_offset
    put(master, T, 3, "b")
    replicate(master, replica, upto=half)
    marks = master.retire_topic(T)
    assert marks == {0: 6}
    # The replica deletes while behind, with the master's marks: what arrives later of the
    # old topic is not dispatched, and the re-created topic continues past it.
    assert replica.retire_topic(T, marks) == {0: 6}
    put(master, T, 2, "new")
    replicate(master, replica)
    assert bodies(replica, T) == [b"new0", b"new1"] == bodies(master, T)
    assert replica.queue_min_offset(T, 0) == master.queue_min_offset(T, 0) == 6
    master.close()
    replica.close()


def test_a_replica_that_missed_the_delete_still_follows_the_queue(tmp_path: Path) -> None:
    """Queue offsets never repeat: a replica that did not delete (it was down) keeps
    replicating the re-created topic without a queue offset conflict."""
    master = open_store(tmp_path / "m")
    replica = open_store(tmp_path / "r")
    put(master, T, 3, "a")
    replicate(master, replica)
    master.retire_topic(T)
    put(master, T, 1, "new")
    replicate(master, replica)
    assert replica.queue_max_offset(T, 0) == 4
    # Its delete, late, then takes the old entries away and keeps the new one's position.
    replica.retire_topic(T, {0: 3})
    assert replica.queue_ids(T) == [] and replica.queue_max_offset(T, 0) == 4
    master.close()
    replica.close()
