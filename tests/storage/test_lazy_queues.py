"""After a clean stop the store's open only lists the ConsumeQueues; each is loaded when first
used (issue 34: a broker with 50,000 queues took 61 s to start after a clean stop, loading and
checking every queue at the open). After an unclean stop every queue is loaded and checked at the
open, as before. A pending queue must serve, take writes and be cut, retained and recovered as a
loaded one is."""

from __future__ import annotations

from pathlib import Path

from storage.store import MessageStore
from tests.storage.support import crash_copy, messages, open_store, read_queue

TOPICS = 20
QUEUES = 4
NOW = 1_700_000_000_000


def fill(store: MessageStore, rounds: int = 1, prefix: str = "a") -> None:
    for r in range(rounds):
        for t in range(TOPICS):
            for q in range(QUEUES):
                store.put(f"T{t:02d}", q, messages(1, prefix=f"{prefix}{r}-{t}-{q}-"), NOW)


def bodies(store: MessageStore, topic: str, queue_id: int) -> list[bytes]:
    return [r.body.split(b":")[0] for r in read_queue(store, topic, queue_id)]


def test_a_clean_open_loads_no_queue_and_each_loads_when_first_used(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    fill(store, 2)
    store.close()
    again = open_store(tmp_path)
    queues = again._queues
    assert (len(queues), queues.loaded) == (TOPICS * QUEUES, 0)
    assert again.topics() == [f"T{t:02d}" for t in range(TOPICS)]
    assert again.queue_max_offset("T03", 1) == 2  # loads that one queue
    assert queues.loaded == 1
    assert again.queue_ids("T05") == list(range(QUEUES))  # loads the topic's queues
    assert queues.loaded == 1 + QUEUES
    assert bodies(again, "T07", 2) == [b"a0-7-2-0", b"a1-7-2-0"]
    assert again.put("T08", 3, messages(1, prefix="b-"), NOW).first_queue_offset == 2
    assert queues.loaded == 3 + QUEUES
    assert len(queues) == TOPICS * QUEUES
    again.close()

    live = open_store(tmp_path)
    crashed = open_store(crash_copy(live, tmp_path / "crashed"))
    live.close()
    assert crashed._queues.loaded == TOPICS * QUEUES  # after kill -9: all loaded and checked
    assert bodies(crashed, "T08", 3) == [b"a0-8-3-0", b"a1-8-3-0", b"b-0"]
    crashed.close()


def test_a_cut_reaches_the_queues_not_loaded_yet_also_after_a_crash(tmp_path: Path) -> None:
    """A slave's truncation to its master's log after a clean start: the entries of the cut
    records in queues never used since must go too, durably. Had they stayed on disk, new
    records past the cut would make them look valid, and the next open would trust them."""
    store = open_store(tmp_path)
    fill(store, 1, "a")
    cut = store.max_offset
    fill(store, 1, "b")  # every queue gets an entry past the cut
    store.close()
    again = open_store(tmp_path)
    again.truncate(cut)
    again.put("T00", 0, messages(200, prefix="c-"), NOW)  # the log grows past the old end
    assert again.max_offset > cut + (again.max_offset - cut) // 2
    again.flush()
    crashed = open_store(crash_copy(again, tmp_path / "crashed"))
    again.close()
    for store_ in (crashed, open_store(tmp_path)):
        for t in range(1, TOPICS):
            for q in range(QUEUES):
                assert store_.queue_max_offset(f"T{t:02d}", q) == 1, (t, q)
                assert bodies(store_, f"T{t:02d}", q) == [f"a0-{t}-{q}-0".encode()], (t, q)
        assert store_.corruption["consumequeue_rebuilt"] == 0  # no entry pointed elsewhere
        assert store_.put("T19", 3, messages(1, prefix="d-"), NOW).first_queue_offset == 1
        store_.close()


def test_retention_reaches_the_queues_not_loaded_yet(tmp_path: Path) -> None:
    store = open_store(tmp_path, retention_hours=1, consumequeue_segment_entries=4)
    store.put("Old", 1, messages(1, prefix="one-"), NOW)  # one segment: not loaded by retention
    for i in range(120):  # 120 segments of 4 entries, most wholly below the log's new start
        store.put("Old", 0, messages(4, size=1000, prefix=f"o{i}-"), NOW)
    store.put("Young", 0, messages(4, size=1000), NOW + 7_200_000)
    store.close()
    again = open_store(tmp_path, retention_hours=1, consumequeue_segment_entries=4)
    assert again._queues.loaded == 0
    assert again.delete_expired(NOW + 3_600_001, disk_used_ratio=0.1) > 0
    # Every record of Old was in the deleted segments: its queues' files go but the last one,
    # and they start past their entries.
    old_files = [p.name for p in sorted((tmp_path / "consumequeue" / "Old" / "0").iterdir())]
    assert old_files == [f"{476 * 20:020d}"]
    assert again.queue_min_offset("Old", 0) == again.queue_max_offset("Old", 0) == 480
    assert again.queue_min_offset("Old", 1) == again.queue_max_offset("Old", 1) == 1
    assert read_queue(again, "Young", 0)[0].physical_offset >= again.min_offset
    again.close()
