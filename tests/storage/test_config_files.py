"""Topic config and consumer offsets: persisted atomically, reloaded exactly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from storage.config_files import (
    JOURNAL_FROM,
    ConsumerOffsetStore,
    TopicConfig,
    TopicConfigStore,
)
from storage.errors import StoreError
from storage.small_file import decode, write_atomic


def test_topic_config_persists_every_change(tmp_path: Path) -> None:
    topics = TopicConfigStore(tmp_path)
    topics.load()
    assert topics.all() == {}
    assert topics.update("TopicA", 8) == TopicConfig("TopicA", 8)
    topics.update("TopicB", 4)
    topics.update("TopicA", 16)
    topics.delete("TopicB")
    topics.delete("never-existed")
    assert (tmp_path / "config" / "topics.json").exists()

    again = TopicConfigStore(tmp_path)
    again.load()
    assert again.all() == {"TopicA": TopicConfig("TopicA", 16)}
    assert again.get("TopicA") == TopicConfig("TopicA", 16)
    assert again.get("TopicB") is None
    doc = json.loads(decode((tmp_path / "config" / "topics.json").read_bytes()) or b"")
    assert doc == {"version": 1, "topics": {"TopicA": {"queues": 16}}}


@pytest.mark.parametrize("topic", ["", "a/b", "..", "with space", "x" * 300])
def test_topic_config_rejects_bad_names(tmp_path: Path, topic: str) -> None:
    topics = TopicConfigStore(tmp_path)
    with pytest.raises(StoreError):
        topics.update(topic, 4)


def test_topic_config_rejects_bad_queue_counts(tmp_path: Path) -> None:
    topics = TopicConfigStore(tmp_path)
    with pytest.raises(StoreError):
        topics.update("T", 0)


def test_topic_config_with_a_bad_document_is_an_error(tmp_path: Path) -> None:
    write_atomic(tmp_path / "config" / "topics.json", b'{"topics": {"T": {"queues": "many"}}}')
    with pytest.raises(StoreError, match="bad entry"):
        TopicConfigStore(tmp_path).load()
    write_atomic(tmp_path / "config" / "topics.json", b"[1, 2]")
    with pytest.raises(StoreError, match="not valid"):
        TopicConfigStore(tmp_path).load()


def test_consumer_offsets_commit_in_memory_and_persist_atomically(tmp_path: Path) -> None:
    offsets = ConsumerOffsetStore(tmp_path)
    offsets.load()
    assert offsets.query("g1", "T", 0) is None
    offsets.commit("g1", "T", 0, 10)
    offsets.commit("g1", "T", 1, 20)
    offsets.commit("g2", "U", 3, 7)
    offsets.commit("g1", "T", 0, 12)
    assert offsets.query("g1", "T", 0) == 12
    assert not (tmp_path / "config" / "consumerOffset.json").exists()
    assert offsets.groups() == ["g1", "g2"]
    assert offsets.snapshot() == {"g1": {"T": {0: 12, 1: 20}}, "g2": {"U": {3: 7}}}
    offsets.persist()

    again = ConsumerOffsetStore(tmp_path)
    again.load()
    assert again.snapshot() == offsets.snapshot()
    assert again.query("g2", "U", 3) == 7


def test_consumer_offsets_persist_skips_an_unchanged_table(tmp_path: Path) -> None:
    offsets = ConsumerOffsetStore(tmp_path)
    offsets.commit("g", "T", 0, 1)
    offsets.persist()
    path = tmp_path / "config" / "consumerOffset.json"
    before = path.stat().st_mtime_ns
    offsets.persist()
    assert path.stat().st_mtime_ns == before
    offsets.commit("g", "T", 0, 2)
    offsets.persist()
    again = ConsumerOffsetStore(tmp_path)
    again.load()
    assert again.query("g", "T", 0) == 2


def test_consumer_offsets_snapshot_is_a_copy(tmp_path: Path) -> None:
    offsets = ConsumerOffsetStore(tmp_path)
    offsets.commit("g", "T", 0, 1)
    snap = offsets.snapshot()
    snap["g"]["T"][0] = 99
    assert offsets.query("g", "T", 0) == 1


def test_consumer_offsets_fall_back_to_bak_when_primary_is_torn(tmp_path: Path) -> None:
    offsets = ConsumerOffsetStore(tmp_path)
    offsets.commit("g", "T", 0, 1)
    offsets.persist()
    offsets.commit("g", "T", 0, 2)
    offsets.persist()
    path = tmp_path / "config" / "consumerOffset.json"
    path.write_bytes(path.read_bytes()[:10])
    again = ConsumerOffsetStore(tmp_path)
    again.load()
    assert again.query("g", "T", 0) == 1


def written_bytes() -> int:
    """Bytes this process has passed to write() so far (/proc/self/io wchar)."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("wchar:"):
            return int(line.split()[1])
    raise AssertionError("no wchar in /proc/self/io")


def test_a_topic_change_among_thousands_does_not_rewrite_the_table(tmp_path: Path) -> None:
    """Issue 34: the table was rewritten whole for every change, O(topics) a topic created (47 ms
    at 6,250 topics on the broker's loop). Past JOURNAL_FROM topics a change is a journal line,
    the table rewritten once the journal holds as many lines as it has topics."""
    topics = TopicConfigStore(tmp_path)
    topics.load()
    for i in range(2000):
        topics.update(f"Topic{i:05d}", 8)
    before = written_bytes()
    for i in range(2000, 2200):
        topics.update(f"Topic{i:05d}", 8)
    topics.update("Topic00007", 16)
    topics.delete("Topic00008")
    written = written_bytes() - before
    table = (tmp_path / "config" / "topics.json").stat().st_size
    assert written < 4 * table  # a rewrite of the table at most (202 of them before)
    again = TopicConfigStore(tmp_path)
    again.load()
    assert again.all() == topics.all()
    assert again.get("Topic00007") == TopicConfig("Topic00007", 16)
    assert again.get("Topic00008") is None
    assert len(again.all()) == 2199


def test_the_journal_folds_into_the_table_and_a_torn_last_line_is_left_out(
    tmp_path: Path,
) -> None:
    topics = TopicConfigStore(tmp_path)
    topics.load()
    for i in range(JOURNAL_FROM + 10):
        topics.update(f"T{i:05d}", 4)
    journal = tmp_path / "config" / "topics.journal"
    assert len(journal.read_bytes().splitlines()) == 10 + 1  # from the 256th topic on
    for i in range(JOURNAL_FROM + 10, 2 * JOURNAL_FROM + 20):
        topics.update(f"T{i:05d}", 4)
    assert len(journal.read_bytes().splitlines()) < JOURNAL_FROM  # folded into the table once
    with journal.open("ab") as f:
        f.write(b'{"queues": 4, "topic": "Torn')  # an append a crash cut short
    again = TopicConfigStore(tmp_path)
    again.load()
    assert again.all() == topics.all()
    again.update("After", 2)  # starts a line of its own
    third = TopicConfigStore(tmp_path)
    third.load()
    assert third.get("After") == TopicConfig("After", 2)
    assert len(third.all()) == 2 * JOURNAL_FROM + 21
    for i in range(2 * JOURNAL_FROM + 21 - JOURNAL_FROM + 1):  # below JOURNAL_FROM again
        name = "After" if i == 0 else f"T{i - 1:05d}"
        third.delete(name)
    assert not journal.read_bytes()  # the table holds it all once small
