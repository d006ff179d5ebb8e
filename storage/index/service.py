"""The key index of one store: its files under ``<data_dir>/index/``, written as CommitLog
records are dispatched, recovered on open, cut with the log and deleted with retention.

Invariants (what :meth:`KeyIndex.open` restores and every other method keeps):

- the files cover the CommitLog contiguously from at or below its min offset to
  :attr:`KeyIndex.indexed_through`; every file but the last is sealed, the last is written to;
- :meth:`KeyIndex.catch_up` indexes every record from ``indexed_through`` to the write position,
  so after a put, a replicated append or recovery the index is complete; except while a sealed
  file found damaged is being rebuilt in slices (:attr:`KeyIndex.behind`): puts and appends
  leave their records to the slices, which read up to the write position, and a lookup catches
  up whole first.

Recovery trusts the longest prefix of files that verify (header CRC, FLAG_CLEAN, body CRC) and
are contiguous from the log's start; the first file that does not (torn by a crash, corrupt,
deleted, or covering bytes the log no longer has) and every file after it are deleted and the
CommitLog from there is indexed again: the index is never patched, only rebuilt. After a clean
stop nothing is re-read; after a crash, the records of the last (unsealed) file are.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import structlog

from protocol.message import (
    BLANK_MAGIC,
    DISPATCH_HEAD,
    HEAD_SIZE,
    MESSAGE_MAGIC,
    MIN_RECORD_SIZE,
    Message,
)
from storage.commitlog import CommitLog
from storage.dispatch import next_record
from storage.errors import StoreError
from storage.index import format as fmt
from storage.index.file import IndexFile
from storage.segment import list_segment_files
from storage.small_file import fsync_dir

_PREFIX: Final = struct.Struct(">II")
_U16: Final = struct.Struct(">H")

log = structlog.get_logger(__name__)


@dataclass(kw_only=True)
class IndexConfig:
    directory: Path
    slot_count: int = 250_000
    """Hash slots per file (4 bytes each)."""
    max_entries: int = 1_000_000
    """Entries per file (20 bytes each); a full file is sealed and a new one begun."""
    file_span_ms: int = 3_600_000
    """A file whose entries span more store time than this is sealed (time segmentation)."""

    def validate(self) -> None:
        if self.slot_count < 1 or self.max_entries < 1:
            raise StoreError("index slots and entries per file must be at least 1")
        if self.file_span_ms < 1:
            raise StoreError("index file span must be positive")


@dataclass(frozen=True, slots=True)
class IndexStats:
    files: int
    entries: int
    indexed_through: int
    rebuilt_files: int
    """Files found torn, corrupt or missing on open, whose range was indexed again."""


class KeyIndex:
    """Loop thread only (like puts); nothing here runs on the flush thread."""

    def __init__(self, config: IndexConfig) -> None:
        config.validate()
        self.config = config
        self._dir = config.directory
        self._files: list[IndexFile] = []
        self.rebuilt_files = 0
        self._seeds: dict[bytes, int] = {}
        self.lagging: str | None = None
        """Why the last :meth:`catch_up` stopped short (e.g. a full disk); None when current."""
        self.behind = False
        """A rebuild :meth:`check_sealed` began is under way, in slices (:meth:`catch_up` with
        ``max_bytes``, off the hot path): puts and appends do not index meanwhile."""
        self._check_at = 0

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def indexed_through(self) -> int:
        return self._files[-1].end_offset if self._files else 0

    def stats(self) -> IndexStats:
        return IndexStats(
            len(self._files),
            sum(f.header.entry_count for f in self._files),
            self.indexed_through,
            self.rebuilt_files,
        )

    def open(self, commitlog: CommitLog) -> int:
        """Load the files, keep the trusted prefix, index the rest of the log; returns how many
        CommitLog bytes were indexed (again)."""
        self._dir.mkdir(parents=True, exist_ok=True)
        low, high = commitlog.min_offset, commitlog.write_pos
        trusted: list[IndexFile] = []
        dropped = 0
        for begin, path in list_segment_files(self._dir):
            expected = trusted[-1].end_offset if trusted else None
            why = ""
            if expected is None and begin > low:
                why = f"it begins at {begin}, after the commitlog's start {low}"
            elif expected is not None and begin != expected:
                why = f"it begins at {begin}, not where the file before ends ({expected})"
            elif trusted and not trusted[-1].header.sealed:
                why = "the file before it is not sealed"
            loaded: IndexFile | None = None
            if not why:
                try:
                    loaded = IndexFile.load(path, begin)
                except (fmt.IndexFormatError, StoreError, OSError, ValueError) as exc:
                    why = str(exc)
            if loaded is not None and loaded.end_offset > high:
                why = f"it covers up to {loaded.end_offset}, past the commitlog's end {high}"
                loaded.close()
                loaded = None
            if loaded is None:
                dropped += 1
                log.warning(f"index file {path.name} not trusted ({why}): rebuilding it")
                path.unlink(missing_ok=True)
                continue
            if loaded.header.sealed and loaded.end_offset <= low:
                loaded.delete()  # wholly below the log's start (retention ran without us)
                continue
            trusted.append(loaded)
        if dropped:
            fsync_dir(self._dir)
        self.rebuilt_files += dropped
        self._files = trusted
        if trusted and not trusted[-1].header.sealed:
            trusted[-1].open_for_writing()
        start = self.indexed_through if trusted else low
        self.catch_up(commitlog)
        return self.indexed_through - start

    def check_sealed(self, commitlog: CommitLog) -> str | None:
        """Check the next sealed file (one a call, in turn) as a start does: its header and its
        body CRC. One that fails is dropped with every file after it, to be indexed again from
        the CommitLog (``index file N not trusted (why): rebuilding it``, as at a start) in
        slices: :attr:`behind` until :meth:`catch_up` has read to the write position. Returns
        why, None when the file held. The broker's scrub calls it once a pass."""
        sealed = [f for f in self._files if f.header.sealed]
        if not sealed:
            return None
        self._check_at %= len(sealed)
        f = sealed[self._check_at]
        self._check_at += 1
        view, size = f.segment.view, f.segment.size
        why = ""
        try:
            header = fmt.decode_header(view, size)
            if (header.begin_offset, header.end_offset) != (
                f.header.begin_offset,
                f.header.end_offset,
            ):
                why = "its header no longer says the range it covers"
            elif fmt.body_crc(view, header.slot_count, header.entry_count) != header.body_crc:
                why = "body CRC mismatch"
        except fmt.IndexFormatError as exc:
            why = str(exc)
        if not why:
            return None
        keep = self._files.index(f)
        log.warning(f"index file {f.segment.path.name} not trusted ({why}): rebuilding it")
        for dropped in self._files[keep:]:
            dropped.delete()
        fsync_dir(self._dir)
        self._files = self._files[:keep]
        self.rebuilt_files += 1
        self.behind = True
        return why

    def close(self) -> None:
        """Seal nothing, but leave every file clean (header current, CRC, fsync)."""
        for f in self._files:
            if not f.header.clean:
                f.finish(seal=f.header.sealed)
            f.close()
        self._files = []

    def _create(self, begin: int) -> IndexFile:
        cfg = self.config
        f = IndexFile.create(self._dir, begin, cfg.slot_count, cfg.max_entries)
        f.open_for_writing()
        fsync_dir(self._dir)
        return f

    # -- writing -----------------------------------------------------------------------------

    def catch_up(self, commitlog: CommitLog, max_bytes: int | None = None) -> bool:
        """Index every record from :attr:`indexed_through` to the CommitLog's write position
        (with ``max_bytes``, the records of about that many bytes: a slice of a rebuild);
        returns whether the index reached the write position. Never raises for a write problem
        (the record is stored; the index lags and says why in :attr:`lagging`, and the next
        call tries again)."""
        try:
            current = self._catch_up(commitlog, max_bytes)
        except (StoreError, OSError) as exc:
            if self.lagging is None:
                log.error(f"key index lags at {self.indexed_through}: {exc}")
            self.lagging = str(exc)
            return False
        if self.lagging is not None:
            log.info(f"key index caught up to {self.indexed_through}")
        self.lagging = None
        if current and self.behind:
            self.behind = False
            log.info(f"key index rebuilt up to {self.indexed_through}")
        return current

    def after_append(self, commitlog: CommitLog) -> None:
        """Index what a replicated append wrote, unless a rebuild in slices will (:attr:`behind`)."""
        if not self.behind:
            self.catch_up(commitlog)

    def add_replayed(
        self,
        commitlog: CommitLog,
        offset: int,
        hashes: Sequence[Sequence[int]],
        physicals: Sequence[int],
        stored: Sequence[int],
    ) -> None:
        """Index what a replicated append wrote at ``offset`` from the key hashes its scan
        gathered (``storage.dispatch.Scan.key_hashes``, with each record's CommitLog offset and
        store timestamp), without reading the records again: the same entries and files as
        :meth:`catch_up` writes, records of one store timestamp (a master's put) in one
        :meth:`IndexFile.add`. Anything out of the ordinary (the index lags or is behind, does
        not end at ``offset``, or its last file is sealed) takes :meth:`after_append`."""
        files = self._files
        if (
            self.behind
            or self.lagging is not None
            or not files
            or files[-1].header.sealed
            or files[-1].end_offset != offset
        ):
            self.after_append(commitlog)
            return
        try:
            self._add_replayed(hashes, physicals, stored)
        except (StoreError, OSError) as exc:
            log.error(f"key index lags at {self.indexed_through}: {exc}")
            self.lagging = str(exc)
            return
        self._files[-1].header.end_offset = commitlog.write_pos

    def _add_replayed(
        self, hashes: Sequence[Sequence[int]], physicals: Sequence[int], stored: Sequence[int]
    ) -> None:
        active = self._files[-1]
        span = self.config.file_span_ms
        group: list[int] = []  # hashes of records stored at ``group_at``, not yet added
        group_offsets: list[int] = []
        group_at = -1
        for record_hashes, physical, at in zip(hashes, physicals, stored, strict=True):
            if at != group_at and group:
                active.add(group, group_offsets, group_at)
                group, group_offsets = [], []
            group_at = at
            h = active.header
            count = h.entry_count + len(group)
            begin = h.begin_timestamp if h.entry_count else at
            if count and (h.max_entries - count < len(record_hashes) or at - begin > span):
                if group:
                    active.add(group, group_offsets, group_at)
                    group, group_offsets = [], []
                active = self._roll(physical)
                count = 0
            take = record_hashes[: active.header.max_entries - count]
            group.extend(take)
            group_offsets.extend([physical] * len(take))
        if group:
            active.add(group, group_offsets, group_at)

    def _ensure_active(self, commitlog: CommitLog) -> None:
        """A file to write to: the last one unless it is sealed (or there is none)."""
        if not self._files:
            self._files = [self._create(commitlog.min_offset)]
        elif self._files[-1].header.sealed:
            self._files.append(self._create(self._files[-1].end_offset))

    def _catch_up(self, commitlog: CommitLog, max_bytes: int | None) -> bool:
        self._ensure_active(commitlog)
        end = commitlog.write_pos
        pos = self.indexed_through
        if pos < commitlog.min_offset:
            pos = commitlog.min_offset
        stop = end if max_bytes is None else min(end, pos + max_bytes)
        while pos < stop:
            seg = commitlog.segment_at(pos)
            if seg is None:
                return True
            limit = min(end, seg.end) - seg.start
            rel = self._index_segment(
                seg.view, seg.start, pos - seg.start, limit, seg.size, stop - seg.start
            )
            pos = seg.start + rel
            self._files[-1].header.end_offset = pos
        return pos >= end

    def _index_segment(
        self, view: memoryview, base: int, pos: int, limit: int, seg_size: int, stop: int
    ) -> int:
        """Index the records of one segment in ``[pos, limit)`` (relative), ending at the first
        record boundary at or past ``stop``; returns where it stopped (that boundary,
        ``limit``, or the segment's end after its blank tail)."""
        prefix = _PREFIX.unpack_from
        head = DISPATCH_HEAD.unpack_from
        u16 = _U16.unpack_from
        record_keys = fmt.record_keys
        key_hash = fmt.key_hash
        files = self._files
        span = self.config.file_span_ms
        while pos < limit and pos < stop:
            if limit - pos < MIN_RECORD_SIZE:
                size, magic = prefix(view, pos) if limit - pos >= 8 else (0, 0)
                if magic == BLANK_MAGIC:
                    return seg_size
                return limit  # nothing readable before the end of written data
            size, magic, _crc, _qid, _qoff, physical, stored, blen = head(view, pos)
            if magic == BLANK_MAGIC:
                return seg_size
            end = pos + size
            tail = pos + HEAD_SIZE + blen
            if magic != MESSAGE_MAGIC or size < MIN_RECORD_SIZE or end > limit or tail + 4 > end:
                pos = self._skip_damage(view, base, pos, seg_size, limit)
                continue
            if physical != base + pos:
                pos = self._skip_damage(view, base, pos, seg_size, limit)
                continue
            (tl,) = u16(view, tail)
            props_at = tail + 4 + tl
            if props_at <= end:
                keys = record_keys(bytes(view[props_at:end]))
                if keys:
                    active = files[-1]
                    h = active.header
                    if h.entry_count and (
                        active.room() < len(keys) or stored - h.begin_timestamp > span
                    ):
                        active = self._roll(base + pos)
                    topic_raw = bytes(view[tail + 2 : tail + 2 + tl])
                    keys = keys[: active.room()]
                    active.add(
                        [key_hash(topic_raw, k) for k in keys], [physical] * len(keys), stored
                    )
            pos = end
        return pos

    def add_put(
        self,
        commitlog: CommitLog,
        topic_raw: bytes,
        messages: Sequence[Message],
        offsets: Sequence[int],
        store_timestamp: int,
    ) -> None:
        """Index the records one put just wrote (``offsets`` of ``messages``) from the messages
        themselves, without reading the records back: the send path. Anything out of the
        ordinary (the index lags, the put began a new segment, a file would fill or span too
        long) takes :meth:`catch_up`, which reads the CommitLog."""
        files = self._files
        if self.behind:
            return  # the rebuild's slices read these records
        if self.lagging is not None or not files:
            self.catch_up(commitlog)
            return
        active = files[-1]
        h = active.header
        if h.flags & fmt.FLAG_SEALED or h.end_offset != offsets[0]:
            self.catch_up(commitlog)
            return
        seed = self._seeds.get(topic_raw)
        if seed is None:
            if len(self._seeds) >= 4096:
                self._seeds.clear()
            seed = self._seeds[topic_raw] = fmt.topic_seed(topic_raw)
        crc32 = zlib.crc32
        count = h.entry_count
        fits = not count or store_timestamp - h.begin_timestamp <= self.config.file_span_ms
        if len(messages) == 1:
            # A single send with one plain key: the commonest put, kept short.
            msg = messages[0]
            keys = msg.keys
            if keys and not msg.properties and " " not in keys:
                if not fits or count >= h.max_entries:
                    self.catch_up(commitlog)
                    return
                active.add_one(crc32(keys.encode(), seed), offsets[0], store_timestamp)
                h.end_offset = commitlog.write_pos
                return
        keys_of = fmt.message_keys
        hashes: list[int] = []
        physicals: list[int] = []
        for msg, physical in zip(messages, offsets, strict=True):
            keys = msg.keys
            if keys and not msg.properties and " " not in keys:
                hashes.append(crc32(keys.encode(), seed))
                physicals.append(physical)
            elif keys or msg.properties:
                for key in keys_of(keys, msg.properties):
                    hashes.append(crc32(key, seed))
                    physicals.append(physical)
        if hashes:
            if not fits or count + len(hashes) > h.max_entries:
                self.catch_up(commitlog)
                return
            active.add(hashes, physicals, store_timestamp)
        h.end_offset = commitlog.write_pos

    @staticmethod
    def _skip_damage(view: memoryview, base: int, pos: int, seg_size: int, limit: int) -> int:
        """Past an unreadable record (recovery kept the damage in place): the next valid one."""
        resume = next_record(view, base, pos, seg_size)
        return limit if resume is None or resume > limit else resume

    def _roll(self, at: int) -> IndexFile:
        """Seal the file being written (it ends at ``at``) and begin the next one there."""
        current = self._files[-1]
        current.header.end_offset = at
        current.finish(seal=True)
        new = self._create(at)
        self._files.append(new)
        return new

    def truncate(self, offset: int, commitlog: CommitLog) -> None:
        """The CommitLog was cut back to ``offset``: drop every file covering anything at or
        past it and index again from the end of the last file kept."""
        keep = len(self._files)
        while keep and self._files[keep - 1].end_offset > offset:
            keep -= 1
        for f in self._files[keep:]:
            f.delete()
        if keep < len(self._files):
            fsync_dir(self._dir)
        self._files = self._files[:keep]
        self.catch_up(commitlog)

    def delete_below(self, min_offset: int) -> int:
        """Delete the sealed files whose whole range lies below ``min_offset`` (the CommitLog's
        new start after retention); returns how many."""
        count = 0
        while len(self._files) > 1 and self._files[0].end_offset <= min_offset:
            self._files.pop(0).delete()
            count += 1
        if count:
            fsync_dir(self._dir)
        return count

    # -- reading -----------------------------------------------------------------------------

    def candidates(self, topic: str, key: str, begin_ms: int, end_ms: int) -> Iterator[int]:
        """CommitLog offsets whose entries match ``(topic, key)`` within ``[begin_ms, end_ms]``,
        newest first, each once (the caller confirms each against its record)."""
        hash_ = fmt.key_hash(topic.encode(), key.encode())
        seen: set[int] = set()
        for f in reversed(self._files):
            if not f.overlaps(begin_ms, end_ms):
                continue
            for physical, _stored in f.lookup(hash_, begin_ms, end_ms):
                if physical not in seen:
                    seen.add(physical)
                    yield physical

    def files(self) -> list[tuple[int, int, int, int, int]]:
        """(begin offset, end offset, begin time, end time, entries) of every file."""
        return [
            (
                f.begin_offset,
                f.end_offset,
                f.header.begin_timestamp,
                f.header.end_timestamp,
                f.header.entry_count,
            )
            for f in self._files
        ]
