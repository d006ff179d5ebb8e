"""A full disk surfaces at segment allocation: the write fails whole, reads go on, writes resume."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from storage.store import DiskFullError, MessageStore
from tests.storage.support import SEGMENT, TOPIC, commitlog_files, messages, open_store, read_queue

NOW = 1_700_000_000_000


def no_space(fd: int, offset: int, length: int) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def fill_first_segment(store: MessageStore) -> None:
    while store.max_offset + 6000 < SEGMENT:
        store.put(TOPIC, 0, messages(5, size=1000), NOW)


def test_commitlog_roll_on_a_full_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_store(tmp_path)
    fill_first_segment(store)
    end, queue_end = store.max_offset, store.queue_max_offset(TOPIC, 0)
    before = read_queue(store, TOPIC, 0)
    with monkeypatch.context() as m:
        m.setattr(os, "posix_fallocate", no_space)
        with pytest.raises(DiskFullError):
            store.put(TOPIC, 0, messages(8, size=1000), NOW)
        assert store.max_offset == end
        assert store.queue_max_offset(TOPIC, 0) == queue_end
        assert [p.name for p in commitlog_files(tmp_path)] == [f"{0:020d}"]  # no partial file
        assert not any(commitlog_files(tmp_path)[0].read_bytes()[end:])  # tail not blanked
        assert read_queue(store, TOPIC, 0) == before  # reads keep working
        store.flush()
    result = store.put(TOPIC, 0, messages(8, size=1000), NOW)
    assert result.physical_offsets[0] == SEGMENT
    assert result.first_queue_offset == queue_end
    assert len(read_queue(store, TOPIC, 0)) == queue_end + 8
    store.close()
    again = open_store(tmp_path)
    assert again.queue_max_offset(TOPIC, 0) == queue_end + 8
    again.close()


def test_consume_queue_segment_on_a_full_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(tmp_path, consumequeue_segment_entries=4)
    store.put(TOPIC, 0, messages(4), NOW)
    end = store.max_offset
    with monkeypatch.context() as m:
        m.setattr(os, "posix_fallocate", no_space)
        with pytest.raises(DiskFullError):
            store.put(TOPIC, 0, messages(2), NOW)
        with pytest.raises(DiskFullError):
            store.put("Fresh", 0, messages(1), NOW)
        assert store.topics() == [TOPIC]  # the queue that never got a segment is not listed
        assert store.max_offset == end
        assert store.queue_max_offset(TOPIC, 0) == 4
        assert not list((tmp_path / "consumequeue" / TOPIC / "0").glob("*.tmp"))
    store.put(TOPIC, 0, messages(2), NOW)
    assert [r.queue_offset for r in read_queue(store, TOPIC, 0)] == list(range(6))
    store.close()


def test_append_raw_on_a_full_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    master = open_store(tmp_path / "master")
    slave = open_store(tmp_path / "slave")
    while master.max_offset < SEGMENT + 100:
        master.put(TOPIC, 0, messages(5, size=1000), NOW)
    slave.append_raw(0, master.read_raw(0, SEGMENT))
    assert slave.max_offset == SEGMENT
    chunk = master.read_raw(SEGMENT, 1 << 20)
    with monkeypatch.context() as m:
        m.setattr(os, "posix_fallocate", no_space)
        with pytest.raises(DiskFullError):
            slave.append_raw(SEGMENT, chunk)
    assert slave.max_offset == SEGMENT
    slave.append_raw(SEGMENT, chunk)
    assert read_queue(slave, TOPIC, 0) == read_queue(master, TOPIC, 0)
    slave.close()
    master.close()
