"""Recovery after an unclean stop reads what was written, not the whole pre-allocated segment.

With 1 GiB segments (the default) a slave that had written 344 KiB spent 4.6 s recovering after
kill -9: past the last record, recovery read the rest of the segment twice (looking for non-zero
bytes, then zeroing it), about 2 GiB through the mapping. Now only the ranges the file system
says may hold data are read (SEEK_DATA/SEEK_HOLE: a never-written, pre-allocated tail is a hole
and reads as zeros), and torn tails and garbage past zeros are still found, copied aside and cut.

The segments here are 1 GiB sparse files (their data written, the rest a hole): cheap on disk.
What recovery reads is measured, not timed: the bytes it read through the file (``rchar`` of
/proc/self/io) plus the pages of the segment it mapped in (``Rss`` in /proc/self/smaps).
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

import pytest
import structlog

from storage.store import MessageStore
from tests.storage.support import TOPIC, messages, open_store, read_queue

GIB = 1 << 30
WRITTEN_SEGMENT = 1 << 20
"""The segment the records are written in, grown to 1 GiB (a hole) before the unclean open."""
READ_BOUND = 16 << 20
"""What recovery may read here: a few MiB of data, nowhere near the segment's 1 GiB."""
NOW = 1_700_000_000_000


def crashed_store(data_dir: Path, *, segment: int = GIB) -> int:
    """A store as kill -9 leaves it: records in its first CommitLog segment (a ``segment``-byte
    file, sparse past the first MiB), the checkpoint at half of them, the abort marker present.
    Returns where the records end."""
    store = open_store(data_dir, commitlog_segment_bytes=WRITTEN_SEGMENT)
    for i in range(20):
        store.put(TOPIC, i % 2, messages(4, size=300, prefix=f"a{i}-"), NOW + i)
    store.flush()
    checkpoints = {p: p.read_bytes() for p in data_dir.iterdir() if p.name.startswith("checkpoint")}
    for i in range(20):
        store.put(TOPIC, i % 2, messages(4, size=300, prefix=f"b{i}-"), NOW + i)
    end = store.max_offset
    store.close()
    for path, data in checkpoints.items():
        path.write_bytes(data)
    (data_dir / "abort").touch()
    os.truncate(data_dir / "commitlog" / f"{0:020d}", segment)
    return end


def segment_path(data_dir: Path) -> Path:
    return data_dir / "commitlog" / f"{0:020d}"


def _rchar() -> int:
    text = Path("/proc/self/io").read_text()
    match = re.search(r"^rchar: (\d+)$", text, re.M)
    assert match is not None
    return int(match.group(1))


def _mapped(path: Path) -> int:
    """Bytes of ``path``'s mappings resident in this process."""
    total = 0
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
            inside = line.endswith(" " + str(path))
        elif inside and line.startswith("Rss:"):
            total += int(line.split()[1]) * 1024
    return total


def open_measured(
    data_dir: Path, segment: int = GIB
) -> tuple[MessageStore, int, list[MutableMapping[str, Any]]]:
    """Open the store (recovering it), what the recovery read of its CommitLog segment, and
    what it logged."""
    before = _rchar()
    with structlog.testing.capture_logs() as logs:
        store = open_store(data_dir, commitlog_segment_bytes=segment)
    read = _rchar() - before + _mapped(segment_path(data_dir))
    return store, read, logs


def truncations(logs: list[MutableMapping[str, Any]]) -> list[MutableMapping[str, Any]]:
    return [e for e in logs if "truncated at offset" in str(e["event"])]


def test_an_unclean_stop_reads_the_records_not_the_1_gib_segment(tmp_path: Path) -> None:
    end = crashed_store(tmp_path)
    store, read, logs = open_measured(tmp_path)
    try:
        assert read < READ_BOUND, f"recovery read {read} bytes of a {end}-byte CommitLog"
        assert store.max_offset == end
        assert not truncations(logs)
        for queue_id in (0, 1):
            assert len(read_queue(store, TOPIC, queue_id)) == 80
    finally:
        store.close()


def test_garbage_far_past_a_zero_gap_is_still_found_and_cut(tmp_path: Path) -> None:
    end = crashed_store(tmp_path)
    path = segment_path(tmp_path)
    near, far = end + 64 << 10, 700 << 20
    # A power loss wrote back pages out of order: bytes past a gap of zeros, one of them far
    # into the pre-allocated tail (a page written there is data, not a hole).
    # The far bytes end in a non-zero byte: the copy ends at the last non-zero byte, and
    # random bytes ending in 0 (1 run in 256: a CI run) made the expected length one too long.
    near_bytes, far_bytes = os.urandom(300), os.urandom(499) + b"\xff"
    with path.open("r+b") as f:
        f.seek(near)
        f.write(near_bytes)
        f.seek(far)
        f.write(far_bytes)
    store, read, logs = open_measured(tmp_path)
    try:
        assert read < READ_BOUND
        assert store.max_offset == end
        [warning] = truncations(logs)
        assert warning["offset"] == end
        # Everything from the cut to the last non-zero byte was copied aside, then zeroed.
        [copy] = (tmp_path / "quarantine").iterdir()
        assert copy.name == f"commitlog-{end:020d}-{far + len(far_bytes) - end}"
        kept = copy.read_bytes()
        assert kept[near - end : near - end + 300] == near_bytes
        assert kept.endswith(far_bytes)
        assert len(kept) == far + len(far_bytes) - end
    finally:
        store.close()
    with path.open("rb") as f:
        f.seek(end)
        assert f.read(1 << 20) == bytes(1 << 20)
        f.seek(far)
        assert f.read(4096) == bytes(4096)
    again, _, again_logs = open_measured(tmp_path)  # clean now: nothing more to cut
    try:
        assert not truncations(again_logs)
        assert again.max_offset == end
    finally:
        again.close()


def test_a_torn_last_record_is_cut_at_its_start(tmp_path: Path) -> None:
    store = open_store(tmp_path, commitlog_segment_bytes=WRITTEN_SEGMENT)
    store.put(TOPIC, 0, messages(10, size=300), NOW)
    last = store.put(TOPIC, 0, messages(1, size=3000), NOW)
    store.close()
    (tmp_path / "abort").touch()
    torn_at = last.physical_offsets[0]
    path = segment_path(tmp_path)
    os.truncate(path, GIB)
    with path.open("r+b") as f:  # its second half never reached the disk
        f.seek(torn_at + 1500)
        f.write(bytes(1500))
    store2, read, logs = open_measured(tmp_path)
    try:
        assert read < READ_BOUND
        assert store2.max_offset == torn_at
        [warning] = truncations(logs)
        assert warning["reason"] == "CRC mismatch"
    finally:
        store2.close()


def test_without_seek_data_the_whole_tail_is_read_and_garbage_still_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file system that cannot tell holes from data (lseek SEEK_DATA fails with EINVAL):
    recovery reads the whole tail, as it used to, and finds what lies there."""
    segment = 8 << 20
    end = crashed_store(tmp_path, segment=segment)
    far = segment - 4096
    with segment_path(tmp_path).open("r+b") as f:
        f.seek(far)
        f.write(b"\x01" * 10)
    real_lseek = os.lseek

    def lseek(fd: int, pos: int, how: int) -> int:
        if how in (os.SEEK_DATA, os.SEEK_HOLE):
            raise OSError(errno.EINVAL, "not supported")
        return real_lseek(fd, pos, how)

    monkeypatch.setattr(os, "lseek", lseek)
    store, _, _ = open_measured(tmp_path, segment)
    try:
        assert store.max_offset == end
        [copy] = (tmp_path / "quarantine").iterdir()
        assert copy.name == f"commitlog-{end:020d}-{far + 10 - end}"
    finally:
        store.close()
