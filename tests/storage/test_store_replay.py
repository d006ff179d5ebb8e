"""The fused replay scan (storage.dispatch.Replayer): what it accepts and rejects, and the entries
it gathers, against a plain per-record reference built on the full record decoder; append_raw
rejecting a corrupt record anywhere in a batch with nothing written."""

from __future__ import annotations

import errno
import os
import struct
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.message import (
    BLANK_MAGIC,
    HEAD_SIZE,
    Message,
    RecordEncoder,
    RecordError,
    decode_record,
    encode_blank,
    read_tail,
    tag_hash,
)
from storage.dispatch import BLANK_MIN, Replayer, Scan
from storage.errors import CorruptRecordError, DiskFullError, StoreError
from storage.queues import ConsumeQueues, queue_id_error, topic_error
from storage.store import MessageStore
from storage.tracker import FileTracker
from tests.hypothesis_profiles import examples
from tests.storage.support import SEGMENT, TOPIC, commitlog_bytes, open_store

NOW = 1_700_000_000_000
ENCODER = RecordEncoder("10.0.0.9:10911")

Entries = dict[tuple[str, int], list[tuple[int, int, int]]]


# --------------------------------------------------------------------------- building records


@dataclass
class Spec:
    topic: str
    queue_id: int
    body: bytes
    tags: str = ""
    keys: str = ""
    props: dict[str, str] | None = None


def encode_batch(
    specs: list[Spec], *, base: int = 0, next_offsets: dict[tuple[str, int], int] | None = None
) -> bytes:
    """Records back to back from CommitLog ``base``, each continuing its queue."""
    nexts = {} if next_offsets is None else next_offsets
    out = bytearray()
    for i, spec in enumerate(specs):
        key = (spec.topic, spec.queue_id)
        msg = Message(
            topic=spec.topic,
            body=spec.body,
            tags=spec.tags,
            keys=spec.keys,
            properties=dict(spec.props or {}),
        )
        out += ENCODER.encode(
            msg,
            queue_id=spec.queue_id,
            queue_offset=nexts.get(key, 0),
            physical_offset=base + len(out),
            store_timestamp=NOW + (i * 7919) % 1000,
        )
        nexts[key] = nexts.get(key, 0) + 1
    return bytes(out)


def recrc(buf: bytearray, pos: int) -> None:
    """Give the record at ``pos`` a valid CRC again after it was patched."""
    (size,) = struct.unpack_from(">I", buf, pos)
    struct.pack_into(">I", buf, pos + 8, zlib.crc32(buf[pos + 12 : pos + size]))


def topic_at(buf: bytes | bytearray, pos: int) -> int:
    """Where the topic of the record at ``pos`` starts."""
    return pos + HEAD_SIZE + struct.unpack_from(">I", buf, pos + 68)[0] + 2


def record_starts(buf: bytes) -> list[int]:
    starts, pos = [], 0
    while pos + 8 <= len(buf):
        size, magic = struct.unpack_from(">II", buf, pos)
        if magic == BLANK_MAGIC or size < 8:
            break
        starts.append(pos)
        pos += size
    return starts


# --------------------------------------------------------------------------- the reference


def reference(
    buf: bytes, *, base: int, segment_end: int, queues: ConsumeQueues
) -> tuple[Entries, int | None]:
    """The entries of ``buf`` (as ``append_raw`` sees it) and the CommitLog offset of its first
    invalid record (None: all valid), one record at a time with the full decoder."""
    entries: Entries = {}
    nexts: dict[tuple[str, int], tuple[int, bool]] = {}
    pos, limit = 0, len(buf)
    while pos < limit:
        if segment_end - pos < BLANK_MIN:
            return entries, (base + pos if any(buf[pos:segment_end]) else None)
        if limit - pos < BLANK_MIN:
            return entries, base + pos
        size, magic = struct.unpack_from(">II", buf, pos)
        if magic == BLANK_MAGIC:
            return entries, (None if pos + size == segment_end <= limit else base + pos)
        try:
            rec = decode_record(buf, pos)
            tags = rec.tags  # properties are decoded (and checked) on first use
        except RecordError:
            return entries, base + pos
        if rec.physical_offset != base + pos:
            return entries, base + pos
        key = (rec.topic, rec.queue_id)
        if key not in nexts:
            queue = queues.get(*key)
            if queue is None:
                if topic_error(rec.topic) or queue_id_error(rec.queue_id):
                    return entries, base + pos
                nexts[key] = (0, False)
            else:
                nexts[key] = (queue.max_offset, not queue.is_empty)
        expected, exact = nexts[key]
        if rec.queue_offset != expected and (exact or rec.queue_offset < expected):
            return entries, base + pos
        nexts[key] = (rec.queue_offset + 1, True)
        entries.setdefault(key, []).append((rec.physical_offset, rec.size, tag_hash(tags)))
        pos += rec.size
    return entries, None


def entries_of(scan: Scan) -> Entries:
    out: Entries = {}
    for key, run in scan.queues.items():
        out[key] = list(zip(run.physical_offsets, run.sizes, run.tag_hashes, strict=True))
    return out


def queue_firsts(buf: bytes, base: int, entries: Entries) -> dict[tuple[str, int], int]:
    """The queue offset of each queue's first record."""
    return {k: decode_record(buf, rows[0][0] - base).queue_offset for k, rows in entries.items()}


def new_queues(root: Path) -> ConsumeQueues:
    return ConsumeQueues(root, 16, FileTracker())


# --------------------------------------------------------------------------- random batches

specs = st.builds(
    Spec,
    # Mostly valid; an invalid topic or queue id now and then.
    topic=st.sampled_from([TOPIC, TOPIC, "Orders", "a.b-c", TOPIC, "Orders", "bad/topic", "é"]),
    queue_id=st.sampled_from([0, 1, 2, 0, 1, 0, 1, 2, -1]),
    body=st.binary(max_size=300),
    tags=st.sampled_from(["", "TagA", "TagB", "TAGS"]),
    keys=st.sampled_from(["", "k1", "TAGS\x01x"]),
    props=st.one_of(st.none(), st.just({"TAGS": "inner", "x": "y"}), st.just({"a": "TAGS"})),
)

# A mutation: (kind, where as a fraction of the batch, a value).
mutations = st.one_of(
    st.none(),
    st.tuples(
        st.sampled_from(
            [
                "flip",
                "truncate",
                "garbage",
                "queue_offset",
                "physical",
                "topic_length",
                "props_utf8",
                "topic_utf8",
                "blank",
                "zeros",
            ]
        ),
        st.floats(min_value=0, max_value=0.999),
        st.integers(min_value=0, max_value=255),
    ),
)


def mutate(buf: bytes, mutation: tuple[str, float, int] | None, segment_end: int) -> bytes:
    if mutation is None or not buf:
        return buf
    kind, where, value = mutation
    out = bytearray(buf)
    starts = record_starts(buf)
    at = starts[int(where * len(starts))] if starts else 0
    if kind == "flip":
        out[int(where * len(out))] ^= value | 1
    elif kind == "truncate":
        del out[int(where * len(out)) :]
    elif kind == "garbage":
        i = int(where * len(out))
        out[i : i + 16] = bytes((value + j) % 256 for j in range(16))
    elif kind == "queue_offset":
        struct.pack_into(">q", out, at + 20, struct.unpack_from(">q", out, at + 20)[0] + value - 3)
        recrc(out, at)
    elif kind == "physical":
        struct.pack_into(">q", out, at + 28, struct.unpack_from(">q", out, at + 28)[0] + value + 1)
        recrc(out, at)
    elif kind == "topic_length":
        struct.pack_into(">H", out, topic_at(out, at) - 2, value)
        recrc(out, at)
    elif kind == "topic_utf8":
        out[topic_at(out, at)] = 0xFF
        recrc(out, at)
    elif kind == "props_utf8":
        size = struct.unpack_from(">I", out, at)[0]
        props_at = topic_at(out, at) + struct.unpack_from(">H", out, topic_at(out, at) - 2)[0] + 2
        if props_at < at + size:  # the record has properties
            out[at + size - 1] = 0xFF
            recrc(out, at)
    elif kind == "blank":
        # A blank tail, of the right size (the segment ends right after the data) or not.
        out += encode_blank(max(BLANK_MIN, segment_end - len(out) - value % 2))
    elif kind == "zeros":
        out += bytes(8 + value)
    return bytes(out)


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    history=st.lists(specs, max_size=6),
    batch=st.lists(specs, max_size=25),
    mutation=mutations,
    base_pad=st.integers(min_value=0, max_value=3),
)
def test_scan_agrees_with_the_reference_on_random_batches(
    history: list[Spec],
    batch: list[Spec],
    mutation: tuple[str, float, int] | None,
    base_pad: int,
) -> None:
    valid = [s for s in history if not topic_error(s.topic) and s.queue_id >= 0]
    nexts: dict[tuple[str, int], int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        queues = new_queues(Path(tmp))
        # Queues that already hold entries: the batch must continue them exactly.
        past = encode_batch(valid, next_offsets=nexts)
        first = Replayer(queues).scan(
            past, base=0, start=0, limit=len(past), segment_end=1 << 20, zeros_end_data=False
        )
        assert first.error is None and first.dispatched == len(valid)
        Replayer(queues).apply(first)

        base = len(past) + base_pad * 1000
        raw = encode_batch(batch, base=base, next_offsets=nexts)
        segment_end = len(raw) + 64
        raw = mutate(raw, mutation, segment_end)
        segment_end = max(segment_end, len(raw))
        want, bad_at = reference(raw, base=base, segment_end=segment_end, queues=queues)
        scan = Replayer(queues).scan(
            raw, base=base, start=0, limit=len(raw), segment_end=segment_end, zeros_end_data=False
        )
        if bad_at is None:
            assert scan.error is None
            assert scan.end == len(raw)
        else:
            assert isinstance(scan.error, CorruptRecordError)
            assert scan.error.offset == bad_at
            assert scan.end == bad_at - base
            assert f"corrupt record at offset {bad_at}: " in str(scan.error)
        assert entries_of(scan) == want
        assert {k: r.first for k, r in scan.queues.items()} == queue_firsts(raw, base, want)
        # The same bytes as a read-only or writable view (recovery scans mapped segments).
        for buf in (memoryview(raw), bytearray(raw)):
            again = Replayer(queues).scan(
                buf,
                base=base,
                start=0,
                limit=len(raw),
                segment_end=segment_end,
                zeros_end_data=False,
            )
            assert entries_of(again) == want
            assert (again.error and again.error.offset) == (scan.error and scan.error.offset)


@settings(max_examples=examples(100), deadline=None)
@given(
    batch=st.lists(
        specs.filter(lambda s: not topic_error(s.topic) and s.queue_id >= 0), max_size=30
    ),
    chunk=st.integers(min_value=1, max_value=3000),
    dispatch_from=st.integers(min_value=0, max_value=6000),
)
def test_scanning_in_chunks_gathers_the_same_entries(
    batch: list[Spec], chunk: int, dispatch_from: int
) -> None:
    """Recovery's way: a mapped segment (zeros after the data), ``max_bytes`` at a time, records
    before ``dispatch_from`` only validated."""
    raw = encode_batch(batch)
    segment = bytearray(len(raw) + 200)
    segment[: len(raw)] = raw
    queues = new_queues(Path("/nonexistent"))  # scans only look queues up
    whole = Replayer(queues).scan(
        segment, base=0, start=0, limit=len(segment), segment_end=len(segment), zeros_end_data=True
    )
    assert whole.error is None and not whole.complete and not whole.more
    assert whole.end == len(raw)
    replayer = Replayer(queues)
    got: Entries = {}
    pos = 0
    while True:
        part = replayer.scan(
            memoryview(segment),
            base=0,
            start=pos,
            limit=len(segment),
            segment_end=len(segment),
            zeros_end_data=True,
            dispatch_from=dispatch_from,
            max_bytes=chunk,
        )
        assert part.error is None
        for key, rows in entries_of(part).items():
            got.setdefault(key, []).extend(rows)
        if not part.more:
            break
        assert part.end > pos
        pos = part.end
    assert part.end == len(raw)
    want = {
        key: [row for row in rows if row[0] >= dispatch_from]
        for key, rows in entries_of(whole).items()
    }
    assert got == {key: rows for key, rows in want.items() if rows}


def test_a_full_segment_is_complete() -> None:
    raw = encode_batch([Spec(TOPIC, 0, b"x" * 100)] * 3)
    queues = new_queues(Path("/nonexistent"))
    for tail in (encode_blank(40), bytes(BLANK_MIN - 1)):
        segment = raw + tail
        scan = Replayer(queues).scan(
            segment,
            base=0,
            start=0,
            limit=len(segment),
            segment_end=len(segment),
            zeros_end_data=True,
        )
        assert scan.complete and scan.error is None and scan.end == len(segment)
        assert scan.dispatched == 3
        assert scan.newest == max(NOW + i * 7919 % 1000 for i in range(3))


# --------------------------------------------------------------------------- each check, named


def corrupt(kind: str, raw: bytes, at: int) -> bytes:
    out = bytearray(raw)
    size = struct.unpack_from(">I", out, at)[0]
    if kind == "magic":
        out[at + 4] ^= 0x10
    elif kind == "size":
        struct.pack_into(">I", out, at, 12)
    elif kind == "crc":
        out[at + 100] ^= 1
    elif kind == "physical":
        struct.pack_into(">q", out, at + 28, 5)
        recrc(out, at)
    elif kind == "queue_offset":
        struct.pack_into(">q", out, at + 20, 99)
        recrc(out, at)
    elif kind == "queue_id":
        struct.pack_into(">i", out, at + 12, -4)
        recrc(out, at)
    elif kind == "layout":
        struct.pack_into(">H", out, topic_at(out, at) - 2, 200)
        recrc(out, at)
    elif kind == "topic":
        out[topic_at(out, at)] = ord("/")
        recrc(out, at)
    elif kind == "properties":
        out[at + size - 2] = 0xFF
        recrc(out, at)
    elif kind == "blank":
        out[at:] = encode_blank(len(out) - at - 8) + bytes(8)
    return bytes(out)


def nothing_written_then_replayed(
    master: MessageStore, slave: MessageStore, before: int, raw: bytes, *, queued: int
) -> None:
    """After ``append_raw(before, ...)`` failed: nothing past ``before`` in the slave's first
    segment; the master's bytes then replay into an identical copy with ``queued`` entries in
    queue 0. Closes both stores."""
    assert slave.max_offset == before
    commitlog = (slave.config.data_dir / "commitlog" / f"{0:020d}").read_bytes()
    assert commitlog[before:] == bytes(SEGMENT - before)
    slave.append_raw(before, raw)
    assert commitlog_bytes(slave) == commitlog_bytes(master)
    assert slave.queue_max_offset(TOPIC, 0) == queued
    slave.close()
    master.close()


@pytest.mark.parametrize(
    ("kind", "reason"),
    [
        ("magic", "bad magic"),
        ("size", "bad record size 12"),
        ("crc", "CRC mismatch"),
        ("physical", "record says it is at offset 5"),
        ("queue_offset", f"queue offset 99 of {TOPIC}:0 does not follow 3"),
        ("queue_id", "queue id -4 out of range"),
        ("layout", "undecodable record: record layout does not match its size"),
        ("topic", "may hold only letters"),
        ("properties", "undecodable record: record properties are not UTF-8"),
        ("blank", "does not end its segment"),
    ],
)
def test_a_corrupt_record_mid_batch_is_refused_and_nothing_is_written(
    tmp_path: Path, kind: str, reason: str
) -> None:
    master = open_store(tmp_path / "master")
    slave = open_store(tmp_path / "slave")
    master.put("Other", 1, [Message(topic="Other", body=b"first")], NOW)
    slave.append_raw(0, master.read_raw(0, 1 << 20))
    before = slave.max_offset
    results = [
        master.put(TOPIC, 0, [Message(topic=TOPIC, body=b"b" * 200, tags="T")] * 2, NOW)
        for _ in range(4)
    ]
    bad_at = results[1].physical_offsets[1]  # the 4th record of the batch, 6 more after it
    raw = master.read_raw(before, 1 << 20).tobytes()
    data = corrupt(kind, raw, bad_at - before)
    with pytest.raises(CorruptRecordError) as info:
        slave.append_raw(before, memoryview(data))
    assert info.value.offset == bad_at
    assert reason in info.value.reason
    assert str(info.value).startswith(f"corrupt record at offset {bad_at}: ")
    assert slave.topics() == ["Other"]
    nothing_written_then_replayed(master, slave, before, raw, queued=8)


def test_stray_bytes_at_a_segment_end_are_refused(tmp_path: Path) -> None:
    slave = open_store(tmp_path)
    raw = encode_batch([Spec(TOPIC, 0, b"z" * 500)] * 4)
    tail = SEGMENT - len(raw)
    assert tail > 1000
    # Fill the segment up to 5 bytes before its end, then 5 non-zero bytes.
    filler = encode_batch(
        [Spec(TOPIC, 0, b"f" * (tail - 5 - 76 - len(TOPIC)))],
        base=len(raw),
        next_offsets={(TOPIC, 0): 4},
    )
    assert len(raw) + len(filler) == SEGMENT - 5
    data = raw + filler + b"\x01" * 5
    with pytest.raises(CorruptRecordError, match="5 stray bytes at segment end") as info:
        slave.append_raw(0, data)
    assert info.value.offset == SEGMENT - 5
    assert slave.max_offset == 0
    slave.append_raw(0, raw + filler + bytes(5))
    assert slave.max_offset == SEGMENT and slave.queue_max_offset(TOPIC, 0) == 5
    slave.close()


# --------------------------------------------------------------------------- read_tail


@settings(max_examples=examples(200), deadline=None)
@given(
    topic=st.text(min_size=1, max_size=20),
    tags=st.text(max_size=8),
    props=st.dictionaries(st.text(min_size=1, max_size=6), st.text(max_size=6), max_size=3),
)
def test_read_tail_agrees_with_the_full_decoder(
    topic: str, tags: str, props: dict[str, str]
) -> None:
    msg = Message(topic=topic, body=b"body", tags=tags, properties=props)
    raw = ENCODER.encode(msg, queue_id=0, queue_offset=0, physical_offset=0, store_timestamp=0)
    rec = decode_record(raw)
    assert read_tail(raw[HEAD_SIZE + 4 :]) == (rec.topic, tag_hash(rec.tags))
    for cut in (raw[HEAD_SIZE + 4 : -1], raw[HEAD_SIZE + 4 :] + b"\0", b"\0\0\0"):
        with pytest.raises(RecordError, match="layout does not match"):
            read_tail(cut)


@pytest.mark.parametrize(
    ("errno_", "error"), [(errno.ENOSPC, DiskFullError), (errno.EIO, StoreError)]
)
def test_a_failed_write_leaves_nothing_past_the_write_position(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, errno_: int, error: type[StoreError]
) -> None:
    master = open_store(tmp_path / "master")
    slave = open_store(tmp_path / "slave")
    for _ in range(6):
        master.put(TOPIC, 0, [Message(topic=TOPIC, body=b"w" * 300)] * 4, NOW)
    first = master.read_raw(0, 3000)
    slave.append_raw(0, first)
    before, queued = slave.max_offset, slave.queue_max_offset(TOPIC, 0)
    assert 0 < queued < 24
    rest = master.read_raw(before, 1 << 20).tobytes()
    pwrite = os.pwrite

    def half_then_fail(fd: int, data: bytes, offset: int) -> int:
        pwrite(fd, memoryview(data)[: len(data) // 2], offset)
        raise OSError(errno_, os.strerror(errno_))

    with monkeypatch.context() as m:
        m.setattr(os, "pwrite", half_then_fail)
        with pytest.raises(error):
            slave.append_raw(before, rest)
    assert slave.queue_max_offset(TOPIC, 0) == queued
    nothing_written_then_replayed(master, slave, before, rest, queued=24)
