"""An operator gives up a message no replica can read (StoreRepair.skip_corrupt, issue 31):
reads pass over it, kept over a restart; a readable message is not skipped."""

from __future__ import annotations

from pathlib import Path

import pytest

from protocol.message import HEAD_SIZE, iter_records
from storage.small_file import write_atomic
from storage.store import GetStatus, StoreError
from storage.store_repair import RecordReadable
from tests.storage.support import TOPIC, messages, open_store


def test_a_skipped_message_is_passed_over_also_after_a_restart(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    put = store.put(TOPIC, 0, messages(10, 200), 1_700_000_000_000)
    store.flush()
    with pytest.raises(RecordReadable, match="readable here: nothing skipped"):
        store.repairs.skip_corrupt(TOPIC, 0, 4)
    with pytest.raises(StoreError, match="holds no message at queue offset 10"):
        store.repairs.skip_corrupt(TOPIC, 0, 10)
    seg = sorted((tmp_path / "commitlog").iterdir())[0]
    with seg.open("r+b") as f:
        f.seek(put.physical_offsets[4] + HEAD_SIZE + 3)
        byte = f.read(1)[0]
        f.seek(put.physical_offsets[4] + HEAD_SIZE + 3)
        f.write(bytes([byte ^ 1]))
    assert store.get(TOPIC, 0, 4, 10, 1 << 20).status is GetStatus.CORRUPT
    assert store.repairs.skip_corrupt(TOPIC, 0, 4) == put.physical_offsets[4]
    assert store.corruption["skipped"] == 1

    def read_all() -> list[int]:
        got, offset = [], 0
        while offset < 10:
            res = store.get(TOPIC, 0, offset, 10, 1 << 20)
            assert res.status is GetStatus.FOUND
            got += [r.queue_offset for r in iter_records(res.body)]
            offset = res.next_offset
        return got

    assert read_all() == [0, 1, 2, 3, 5, 6, 7, 8, 9]
    store.close()
    store = open_store(tmp_path)
    assert read_all() == [0, 1, 2, 3, 5, 6, 7, 8, 9]
    store.close()


def flip_body(tmp_path: Path, physical: int) -> None:
    seg = sorted((tmp_path / "commitlog").iterdir())[0]
    with seg.open("r+b") as f:
        f.seek(physical + HEAD_SIZE + 3)
        byte = f.read(1)[0]
        f.seek(physical + HEAD_SIZE + 3)
        f.write(bytes([byte ^ 1]))


def test_a_skipped_record_is_no_longer_damage_to_repair_or_report(tmp_path: Path) -> None:
    # The record of a skipped message is given up: not handed to a repair (unreadable_size),
    # not in unrepaired() (the repair loop, the heartbeats' damage figure), passed over by the
    # scrub; after a restart recovery does not count it and kind="skipped" reads the skips held.
    store = open_store(tmp_path)
    put = store.put(TOPIC, 0, messages(10, 200), 1_700_000_000_000)
    store.flush()
    damaged_at = put.physical_offsets[4]
    flip_body(tmp_path, damaged_at)
    assert store.get(TOPIC, 0, 4, 10, 1 << 20).status is GetStatus.CORRUPT
    store.repairs.repair_refused(damaged_at)
    assert [at for at, _ in store.repairs.unrepairable()] == [damaged_at]
    store.repairs.skip_corrupt(TOPIC, 0, 4)
    assert store.repairs.unrepaired() == []
    assert store.repairs.unrepairable() == []
    assert store.repairs.unreadable_size(damaged_at) is None
    assert store.repairs.scrub(1 << 20).damage == []
    assert store.corruption["scrub"] == 0
    store.close()

    store = open_store(tmp_path)
    assert store.corruption["skipped"] == 1
    assert store.corruption["recovery_quarantined"] == 0
    assert [d.offset for d in store.damaged] == [damaged_at]  # still there, kept in place
    assert store.repairs.unrepaired() == []
    assert store.repairs.unreadable_size(damaged_at) is None
    assert store.repairs.scrub(1 << 20).damage == []
    store.close()


def test_a_skipped_list_of_an_older_version_is_resolved_through_the_queue(
    tmp_path: Path,
) -> None:
    # Lines without the record's offset and size (an older version's) still give it up, once
    # the queue's entry names it; damage next to it is still damage.
    store = open_store(tmp_path)
    put = store.put(TOPIC, 0, messages(10, 200), 1_700_000_000_000)
    store.close()
    for at in (put.physical_offsets[4], put.physical_offsets[6]):
        flip_body(tmp_path, at)
    write_atomic(tmp_path / "skipped", f"{TOPIC} 0 4".encode())
    store = open_store(tmp_path)
    assert store.corruption["skipped"] == 1
    assert store.corruption["recovery_quarantined"] == 1
    assert [at for at, _ in store.repairs.unrepaired()] == [put.physical_offsets[6]]
    store.close()
