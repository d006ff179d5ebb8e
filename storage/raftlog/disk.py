"""DiskStorage: the Raft log, hard state and snapshots on disk.

Directory layout::

    DIR/hardstate                         term, vote, commit (two slots in turn, see files.py)
    DIR/commit                            the latest commit index (rewritten in place, no fsync)
    DIR/snap/<index>-<term>.snap          the latest snapshot (older ones are deleted)
    DIR/log/<first index>.log             log segments (see framing.py)

Reads never touch the disk after :meth:`DiskStorage.open`: the entries after the snapshot are
mirrored in memory (a :class:`MemoryStorage`), which the snapshot interval keeps small. Writes
go to the files first, then to the mirror. Everything here is synchronous; the driver calls
:meth:`save` from a worker thread, one Ready at a time, and a lock keeps the core's concurrent
reads consistent.

Durability order inside :meth:`save`: a received snapshot (file durable before the log it
replaces is deleted), then entries (one fsync of the segment files for the whole Ready: group
commit), then the hard state when term or vote changed (written in place into the older of
its file's two slots and ``fdatasync``ed: one flush, no new file, no rename and no directory
fsync, which an election step on a shared disk paid twice), then a local compaction (snapshot
file durable before the prefix is deleted). A commit-only hard state change is kept
in memory and written with the next term/vote change or at :meth:`close`: Raft does not need a
durable commit index, and skipping it saves two fsyncs per Ready. It is also written, without
an fsync, to the small ``commit`` file: after a crash of the process (kill -9) that file still
tells recovery how far the log was committed (after a power loss it may be older, or missing:
it is only ever a floor, never trusted beyond its CRC).

Recovery (:meth:`open`): the newest snapshot that passes its CRC wins; segments are scanned in
order and the log is truncated at the first torn, corrupt or out-of-sequence entry (every later
segment is deleted); entries covered by the snapshot are dropped, and a log that does not
continue the snapshot (a gap, or a different term at the snapshot index) is discarded. Such a
repair only ever drops entries past the commit index the hard state records (a torn write
after a crash): when it would drop a committed entry, :class:`CorruptStorage` names the file
and the offset of the damage and nothing on disk is changed (every check runs before any
repair), so the controller refuses to start instead of forgetting what a quorum acknowledged.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from protocol.raft_types import MAX_COUNTER, Entry, HardState, Snapshot, SnapshotMeta

from .files import (
    HARD_STATE_SLOT,
    CorruptFile,
    atomic_write,
    decode_commit,
    decode_hard_state_file,
    decode_snapshot,
    encode_commit,
    encode_hard_state_slot,
    encode_snapshot,
    fsync_dir,
    parse_snapshot_name,
    snapshot_name,
)
from .framing import SEGMENT_MAGIC, encode_entry, parse_segment_name, scan_segment, segment_name
from .memory import MemoryStorage

DEFAULT_SEGMENT_BYTES = 64 << 20


def _fdatasync(fd: int) -> None:
    """Data only where the platform has it: a file written in place keeps its size."""
    if hasattr(os, "fdatasync"):
        os.fdatasync(fd)
    else:
        os.fsync(fd)


class CorruptStorage(Exception):
    """The storage cannot be trusted (e.g. the hard state file fails its CRC): an operator must
    decide; starting anyway could break Raft's promises (a vote given twice)."""


@dataclass(slots=True)
class RecoveryReport:
    """What :meth:`DiskStorage.open` found and repaired, for the driver's start-up log."""

    entries: int = 0
    first_index: int = 1
    last_index: int = 0
    snapshot_index: int = 0
    truncated: list[str] = field(default_factory=list)
    """One line per repair (torn tail cut, corrupt entry cut, segment or snapshot removed)."""


def _damage(path: Path, error: str) -> str:
    """``FILE: what is wrong at offset N`` (scan errors name their offset; a bad header is
    at 0)."""
    return f"{path}: {error}" if "offset" in error else f"{path}: {error} at offset 0"


@dataclass(slots=True)
class _SegmentScan:
    """What recovery found in the segments, and the repair it would make."""

    entries: list[Entry] = field(default_factory=list)
    """The valid log: every entry up to the first damage."""
    segments: list[_Segment] = field(default_factory=list)
    remove: list[Path] = field(default_factory=list)
    truncate: list[tuple[Path, int]] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    damage: str | None = None
    """``FILE: what is wrong at offset N`` for the first damage, if any."""


@dataclass(slots=True)
class _Segment:
    first_index: int
    path: Path
    offsets: list[int]
    """File offset of each entry's frame; entry ``first_index + i`` starts at ``offsets[i]``."""
    size: int

    @property
    def last_index(self) -> int:
        return self.first_index + len(self.offsets) - 1


class DiskStorage:
    def __init__(self, directory: Path, *, segment_bytes: int, fsync: bool) -> None:
        """Use :meth:`open`."""
        self.directory = directory
        self._log_dir = directory / "log"
        self._snap_dir = directory / "snap"
        self._segment_bytes = segment_bytes
        self._fsync = fsync
        self._lock = threading.RLock()
        self._mem = MemoryStorage()
        self._segments: list[_Segment] = []
        self._tail: BinaryIO | None = None
        self._dirty_files: set[Path] = set()
        self._dir_dirty = False
        self._written_hs = HardState()
        self._commit_fd: int | None = None
        self._hs_fd: int | None = None
        """The ``hardstate`` file, open for writes in place once it has its two slots."""
        self._hs_seq = 0
        """The ``seq`` of the newest hard state slot (0: none yet, or the first version's
        single record, which the next write replaces with slots)."""
        self._hinted_commit = 0
        self.report = RecoveryReport()

    # --- opening and recovery ------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        directory: str | os.PathLike[str],
        *,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        fsync: bool = True,
        accept_loss: bool = False,
    ) -> DiskStorage:
        """Open (creating if needed) and recover the storage in ``directory``.

        ``accept_loss`` is an operator's explicit decision (``python -m storage.raftlog.repair``):
        repair even when committed entries are lost, and lower the hard state's commit index to
        the end of what is left. Never from a daemon."""
        if segment_bytes < 64:
            raise ValueError("segment_bytes must be at least 64")
        store = cls(Path(directory), segment_bytes=segment_bytes, fsync=fsync)
        store._recover(accept_loss=accept_loss)
        return store

    def _recover(self, *, accept_loss: bool = False) -> None:
        """Decide first, then repair: every check that can refuse runs before any file is
        changed, so a refusal leaves the directory exactly as it was found."""
        self.directory.mkdir(parents=True, exist_ok=True)
        self._log_dir.mkdir(exist_ok=True)
        self._snap_dir.mkdir(exist_ok=True)
        report = self.report
        hs_path = self.directory / "hardstate"
        repairs: list[Callable[[], object]] = []
        tmp = hs_path.with_name("hardstate.tmp")
        if tmp.exists():
            repairs.append(tmp.unlink)  # a write that never completed: the old file holds
        hs = HardState()
        if hs_path.exists():
            try:
                self._hs_seq, hs = decode_hard_state_file(hs_path.read_bytes())
            except CorruptFile as exc:
                raise CorruptStorage(f"{hs_path}: {exc}") from None
            if hs.term >= MAX_COUNTER:
                raise CorruptStorage(
                    f"{hs_path}: term {hs.term} cannot be incremented (the largest is 2^63-1)"
                )

        written_hs = hs
        hint = self._read_commit_hint()
        if hint > hs.commit:
            hs = HardState(term=hs.term, vote=hs.vote, commit=hint)
        snapshot = self._recover_snapshot(repairs)
        base = snapshot.meta if snapshot is not None else SnapshotMeta()
        scan = self._scan_segments()
        entries = scan.entries
        if entries and not base.index and entries[0].index != 1:
            raise CorruptStorage(
                f"the log starts at {entries[0].index} but no snapshot covers what precedes it"
            )
        discard_from: int | None = None
        if entries and base.index:
            covered = entries[: max(0, base.index - entries[0].index + 1)]
            rest = entries[len(covered) :]
            continues = bool(rest) and rest[0].index == base.index + 1
            if covered and covered[-1].index == base.index and covered[-1].term != base.term:
                continues = False
            if rest and not continues:
                scan.lines.append(
                    f"log after the snapshot at {base.index} does not continue it; discarded"
                )
                discard_from = entries[0].index
                rest = []
            entries = rest
        last = entries[-1].index if entries else base.index
        if hs.commit > last and accept_loss:
            scan.lines.append(
                f"entries {last + 1} to {hs.commit} were committed and are lost (accepted)"
            )
            hs = HardState(term=hs.term, vote=hs.vote, commit=last)
            hint = 0
            repairs.append(functools.partial(self._write_hard_state, hs))
            repairs.append(functools.partial(self._write_commit_hint, last))
        elif hs.commit > last:
            # Committed entries would be lost: only an operator may decide that (restore this
            # controller's log from a healthy peer, or accept the loss explicitly).
            if scan.damage is not None:
                raise CorruptStorage(
                    f"{scan.damage}: the log would end at entry {last} but entries up to "
                    f"{hs.commit} are committed; nothing was changed"
                )
            raise CorruptStorage(
                f"{self._log_dir}: the log ends at entry {last} but entries up to {hs.commit} "
                "are committed; nothing was changed"
            )

        for repair in repairs:
            repair()
        for path in scan.remove:
            path.unlink()
        for path, size in scan.truncate:
            os.truncate(path, size)
            self._dirty_files.add(path)
        self._segments = scan.segments
        report.truncated.extend(scan.lines)
        self._mem.set_hard_state(hs)
        if not accept_loss:
            self._written_hs = written_hs
        self._hinted_commit = max(self._hinted_commit, hint)
        if snapshot is not None:
            self._mem.apply_snapshot(snapshot)
            report.snapshot_index = snapshot.index
        if discard_from is not None:
            self._truncate_suffix(discard_from)
        if base.index:
            self._drop_covered(base.index)
        self._mem.append(entries)
        self._dir_dirty = True
        self._sync()
        report.entries = len(entries)
        report.first_index = self._mem.first_index()
        report.last_index = self._mem.last_index()

    def _recover_snapshot(self, repairs: list[Callable[[], object]]) -> Snapshot | None:
        """The newest snapshot that passes its checks; setting aside or removing the others is
        appended to ``repairs`` (carried out once recovery decided to go on)."""
        found: list[tuple[int, int, Path]] = []
        for path in self._snap_dir.iterdir():
            parsed = parse_snapshot_name(path.name)
            if parsed is None:
                if path.name.endswith(".tmp"):
                    repairs.append(path.unlink)
                continue
            found.append((parsed[0], parsed[1], path))
        found.sort(reverse=True)
        chosen: Snapshot | None = None
        for index, term, path in found:
            if chosen is None:
                try:
                    snapshot = decode_snapshot(path.read_bytes())
                except CorruptFile as exc:
                    # Kept aside, not deleted: an operator may want to look at it.
                    self.report.truncated.append(f"snapshot {path.name}: {exc}; set aside")
                    aside = path.with_name(path.name + ".corrupt")
                    repairs.append(functools.partial(path.rename, aside))
                    continue
                if (snapshot.index, snapshot.term) == (index, term):
                    chosen = snapshot
                    continue
                self.report.truncated.append(f"snapshot {path.name}: name mismatch; removed")
            repairs.append(path.unlink)
        return chosen

    def _scan_segments(self) -> _SegmentScan:
        """Read every segment and plan the repair (nothing is changed here): the log is valid
        up to the first torn, corrupt or missing entry; the rest is to be cut."""
        named: list[tuple[int, Path]] = []
        for path in self._log_dir.iterdir():
            first = parse_segment_name(path.name)
            if first is not None:
                named.append((first, path))
        named.sort()
        plan = _SegmentScan()
        entries = plan.entries
        broken = False
        for first, path in named:
            if broken or (entries and first != entries[-1].index + 1):
                if not broken:
                    plan.lines.append(f"segment {path.name}: gap in the log; removed")
                    plan.damage = f"{path}: gap in the log before entry {first} at offset 0"
                else:
                    plan.lines.append(f"segment {path.name}: after a bad entry; removed")
                broken = True
                plan.remove.append(path)
                continue
            scan = scan_segment(path.read_bytes(), first)
            if not scan.entries:
                if scan.error is not None or path.stat().st_size > len(SEGMENT_MAGIC):
                    plan.lines.append(f"segment {path.name}: {scan.error or 'no entries'}; removed")
                if scan.error is not None:
                    plan.damage = _damage(path, scan.error)
                plan.remove.append(path)
                broken = scan.error is not None
                continue
            if scan.error is not None:
                plan.lines.append(f"segment {path.name}: {scan.error}; truncated")
                plan.damage = _damage(path, scan.error)
                plan.truncate.append((path, scan.valid_bytes))
                broken = True
            plan.segments.append(
                _Segment(first_index=first, path=path, offsets=scan.offsets, size=scan.valid_bytes)
            )
            entries.extend(scan.entries)
        return plan

    # --- StorageView (served from the in-memory mirror) -----------------------------------------

    def hard_state(self) -> HardState:
        return self._mem.hard_state()

    def snapshot(self) -> Snapshot:
        return self._mem.snapshot()

    def snapshot_meta(self) -> SnapshotMeta:
        return self._mem.snapshot_meta()

    def first_index(self) -> int:
        return self._mem.first_index()

    def last_index(self) -> int:
        return self._mem.last_index()

    def term(self, index: int) -> int:
        return self._mem.term(index)

    def entries(self, lo: int, hi: int, max_bytes: int | None = None) -> list[Entry]:
        return self._mem.entries(lo, hi, max_bytes)

    # --- writes --------------------------------------------------------------------------------

    def save(
        self,
        *,
        hard_state: HardState | None = None,
        entries: Sequence[Entry] = (),
        snapshot: Snapshot | None = None,
        compaction: Snapshot | None = None,
        sync: bool = True,
    ) -> None:
        """Persist one Ready's worth (see the module docstring for the order)."""
        with self._lock:
            if snapshot is not None:
                self.apply_snapshot(snapshot)
            if entries:
                self.append(entries)
            if sync:
                self._sync()
            if hard_state is not None:
                self.set_hard_state(hard_state)
            if compaction is not None:
                self.compact(compaction)

    def append(self, entries: Sequence[Entry]) -> None:
        """Write ``entries`` (buffered until :meth:`sync`), first truncating any stored suffix
        from ``entries[0].index``."""
        if not entries:
            return
        with self._lock:
            base = self._mem.snapshot_meta().index
            entries = [e for e in entries if e.index > base]
            if not entries:
                return
            first = entries[0].index
            last = self._mem.last_index()
            if first > last + 1:
                raise ValueError(f"gap: appending {first} after last index {last}")
            if first <= last:
                self._truncate_suffix(first)
            for entry in entries:
                frame = encode_entry(entry)
                tail = self._tail_for(entry.index)
                segment = self._segments[-1]
                tail.write(frame)
                self._dirty_files.add(segment.path)
                segment.offsets.append(segment.size)
                segment.size += len(frame)
            self._mem.append(entries)

    def set_hard_state(self, hs: HardState) -> None:
        with self._lock:
            self._mem.set_hard_state(hs)
            if (hs.term, hs.vote) != (self._written_hs.term, self._written_hs.vote):
                self._write_hard_state(hs)
            elif hs.commit > max(self._hinted_commit, self._written_hs.commit):
                self._write_commit_hint(hs.commit)

    def apply_snapshot(self, snapshot: Snapshot) -> None:
        """Install a snapshot received from the leader: it replaces the whole log."""
        with self._lock:
            if snapshot.index <= self._mem.snapshot_meta().index:
                raise ValueError(
                    f"snapshot {snapshot.index} is not newer than {self._mem.snapshot_meta().index}"
                )
            self._write_snapshot(snapshot)
            self._truncate_suffix(self._segments[0].first_index if self._segments else 1)
            self._mem.apply_snapshot(snapshot)
            self._remove_old_snapshots(snapshot)

    def compact(self, snapshot: Snapshot) -> None:
        """Record a local snapshot and drop the log prefix it covers (older ones are ignored)."""
        with self._lock:
            if snapshot.index <= self._mem.snapshot_meta().index:
                return
            if snapshot.index > self._mem.last_index():
                raise ValueError(f"compaction at {snapshot.index} is past the last index")
            self._write_snapshot(snapshot)
            self._mem.compact(snapshot)
            self._drop_covered(snapshot.index)
            self._remove_old_snapshots(snapshot)

    def sync(self) -> None:
        """Make every buffered write durable (one fsync per dirty segment, plus the directory)."""
        with self._lock:
            self._sync()

    def close(self) -> None:
        """Flush, write a pending commit-only hard state change, and close the files."""
        with self._lock:
            self._sync()
            hs = self._mem.hard_state()
            if hs != self._written_hs:
                self._write_hard_state(hs)
            if self._tail is not None:
                self._tail.close()
                self._tail = None
            if self._commit_fd is not None:
                os.close(self._commit_fd)
                self._commit_fd = None
            if self._hs_fd is not None:
                os.close(self._hs_fd)
                self._hs_fd = None

    # --- internals -----------------------------------------------------------------------------

    def _tail_for(self, index: int) -> BinaryIO:
        """The open tail segment to write entry ``index`` to, rolling to a new one when full."""
        if self._segments and self._segments[-1].size < self._segment_bytes and self._tail:
            return self._tail
        if self._tail is not None:
            self._tail.flush()
            self._tail.close()
            self._tail = None
        if not self._segments or self._segments[-1].size >= self._segment_bytes:
            path = self._log_dir / segment_name(index)
            with open(path, "wb") as f:
                f.write(SEGMENT_MAGIC)
            self._segments.append(
                _Segment(first_index=index, path=path, offsets=[], size=len(SEGMENT_MAGIC))
            )
            self._dir_dirty = True
        segment = self._segments[-1]
        self._tail = open(segment.path, "ab")  # noqa: SIM115 - kept open across calls
        self._dirty_files.add(segment.path)
        return self._tail

    def _truncate_suffix(self, index: int) -> None:
        """Delete stored entries at ``index`` and after (files only; the mirror follows)."""
        if self._tail is not None:
            self._tail.flush()
            self._tail.close()
            self._tail = None
        while self._segments and self._segments[-1].first_index >= index:
            segment = self._segments.pop()
            segment.path.unlink(missing_ok=True)
            self._dirty_files.discard(segment.path)
            self._dir_dirty = True
        if self._segments and self._segments[-1].last_index >= index:
            segment = self._segments[-1]
            keep = index - segment.first_index
            segment.size = segment.offsets[keep]
            del segment.offsets[keep:]
            os.truncate(segment.path, segment.size)
            self._dirty_files.add(segment.path)

    def _drop_covered(self, index: int) -> None:
        """Delete the segments whose every entry is at or below ``index``."""
        while len(self._segments) > 1 and self._segments[1].first_index <= index + 1:
            segment = self._segments.pop(0)
            segment.path.unlink(missing_ok=True)
            self._dirty_files.discard(segment.path)
            self._dir_dirty = True
        if self._segments and self._segments[0].last_index <= index:
            if self._tail is not None:
                self._tail.close()
                self._tail = None
            segment = self._segments.pop(0)
            segment.path.unlink(missing_ok=True)
            self._dirty_files.discard(segment.path)
            self._dir_dirty = True

    def _write_hard_state(self, hs: HardState) -> None:
        """Into the slot after the newest, in place, then one ``fdatasync`` (the file's size
        never changes). A file without slots yet (new, or of the first version) is made once,
        atomically, with the state in its first slot."""
        seq = self._hs_seq + 1
        record = encode_hard_state_slot(hs, seq)
        if self._hs_fd is None and self._hs_seq > 0:
            self._hs_fd = os.open(self.directory / "hardstate", os.O_RDWR)
        if self._hs_fd is None:
            atomic_write(
                self.directory / "hardstate",
                record + bytes(HARD_STATE_SLOT) if seq % 2 else bytes(HARD_STATE_SLOT) + record,
                fsync=self._fsync,
            )
        else:
            os.pwrite(self._hs_fd, record, (seq % 2 == 0) * HARD_STATE_SLOT)
            if self._fsync:
                _fdatasync(self._hs_fd)
        self._hs_seq = seq
        self._written_hs = hs

    def _write_commit_hint(self, commit: int) -> None:
        """The commit index, in place and without an fsync: a floor for recovery that survives
        a crash of the process (the bytes are in the page cache), cheap enough for every Ready."""
        if self._commit_fd is None:
            self._commit_fd = os.open(self.directory / "commit", os.O_RDWR | os.O_CREAT, 0o644)
        os.pwrite(self._commit_fd, encode_commit(commit), 0)
        self._hinted_commit = commit

    def _read_commit_hint(self) -> int:
        path = self.directory / "commit"
        try:
            return decode_commit(path.read_bytes())
        except FileNotFoundError:
            return 0
        except CorruptFile as exc:  # advisory: a torn or stale hint is no reason to refuse
            self.report.truncated.append(f"commit hint {path.name}: {exc}; ignored")
            return 0

    def _write_snapshot(self, snapshot: Snapshot) -> None:
        path = self._snap_dir / snapshot_name(snapshot.index, snapshot.term)
        atomic_write(path, encode_snapshot(snapshot), fsync=self._fsync)

    def _remove_old_snapshots(self, keep: Snapshot) -> None:
        keep_name = snapshot_name(keep.index, keep.term)
        for path in self._snap_dir.iterdir():
            if path.name != keep_name and parse_snapshot_name(path.name) is not None:
                path.unlink()
                self._dir_dirty = True

    def _sync(self) -> None:
        if self._tail is not None:
            self._tail.flush()
        if self._fsync:
            for path in sorted(self._dirty_files):
                if self._tail is not None and path == self._segments[-1].path:
                    os.fsync(self._tail.fileno())
                    continue
                fd = os.open(path, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            if self._dir_dirty:
                fsync_dir(self._log_dir)
                fsync_dir(self._snap_dir)
        self._dirty_files.clear()
        self._dir_dirty = False
