"""Topic config and consumer offsets: persisted atomically, reloaded exactly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from storage.config_files import ConsumerOffsetStore, TopicConfig, TopicConfigStore
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
