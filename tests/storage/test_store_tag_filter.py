"""A read with tag hashes (``MessageStore.get(..., tag_hashes=...)``) passes over the
ConsumeQueue entries whose tag hash cannot match without reading their records, moves the next
offset past them, never passes over an entry beyond what may be served, and leaves a tag-hash
collision for the caller to resolve on the record."""

from __future__ import annotations

import os
import zlib
from pathlib import Path

from protocol.filter import filter_records, parse_tag_expression
from protocol.message import iter_records, tag_hash
from storage.store import GetStatus
from tests.storage.support import SEGMENT, TOPIC, messages, open_store

NOW = 1_700_000_000_000
# Two tags with the same CRC32, so the same ConsumeQueue tag hash.
TWIN_A, TWIN_B = "plumless", "buckeroo"


def test_the_collision_pair_really_collides() -> None:
    assert tag_hash(TWIN_A) == tag_hash(TWIN_B) == zlib.crc32(b"buckeroo")


def test_non_matching_entries_are_passed_over_without_reading_their_records(
    tmp_path: Path,
) -> None:
    store = open_store(tmp_path)
    try:
        physical: list[int] = []
        for i in range(300):
            tag = "A" if i in (150, 299) else "X"
            result = store.put(TOPIC, 0, messages(1, tag=tag, prefix=f"r{i}-"), NOW)
            physical.append(result.physical_offsets[0])
        # Damage the record of entry 10 (a non-matching one) in place: its CRC fails.
        bad = physical[10]
        fd = os.open(tmp_path / "commitlog" / f"{bad - bad % SEGMENT:020d}", os.O_RDWR)
        try:
            os.pwrite(fd, b"\xff", bad % SEGMENT + 100)
        finally:
            os.close(fd)
        unfiltered = store.get(TOPIC, 0, 10, 32, 1 << 20)
        assert (unfiltered.status, unfiltered.corrupt_offset) == (GetStatus.CORRUPT, bad)

        want = frozenset({tag_hash("A")})
        found = store.get(TOPIC, 0, 0, 32, 1 << 20, None, want, 1024)
        assert (found.status, found.count, found.next_offset) == (GetStatus.FOUND, 2, 300)
        assert [(r.queue_offset, r.tags) for r in iter_records(found.body)] == [
            (150, "A"),
            (299, "A"),
        ]
        # A window of 100 entries holding no match: nothing served, the offset moves past it.
        empty = store.get(TOPIC, 0, 0, 32, 1 << 20, None, want, 100)
        assert (empty.status, empty.count, empty.next_offset) == (GetStatus.FOUND, 0, 100)
        # max_count matches end the read right after the last one served.
        one = store.get(TOPIC, 0, 0, 1, 1 << 20, None, want, 1024)
        assert (one.count, one.next_offset) == (1, 151)
        # Nothing past what may be served (records ending by physical[120]: up to entry 119) is
        # passed over: a new master could give its queue offset to another message.
        held = store.get(TOPIC, 0, 100, 32, 1 << 20, physical[120], want, 1024)
        assert (held.status, held.count, held.next_offset) == (GetStatus.FOUND, 0, 120)
        assert store.get(TOPIC, 0, 120, 32, 1 << 20, physical[120], want, 1024).status is (
            GetStatus.NO_MATCHED_MESSAGE
        )
    finally:
        store.close()


def test_a_tag_hash_collision_is_resolved_on_the_record(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    try:
        for i, tag in enumerate(["X", TWIN_A, "X", TWIN_B, "X"]):
            store.put(TOPIC, 0, messages(1, tag=tag, prefix=f"r{i}-"), NOW)
        wanted = parse_tag_expression(TWIN_A)
        assert wanted is not None
        res = store.get(TOPIC, 0, 0, 32, 1 << 20, None, wanted.hashes, 1024)
        # The hash cannot tell the twins apart: the store returns both...
        assert [r.tags for r in iter_records(res.body)] == [TWIN_A, TWIN_B]
        assert res.next_offset == 5
        # ... and the tags on the record decide.
        body, count = filter_records(res.body, wanted)
        assert count == 1 and [r.tags for r in iter_records(body)] == [TWIN_A]
    finally:
        store.close()
