"""The background scrub's reading of the CommitLog (storage/scrub.py, issue 31): every flushed
record checked a slice at a time, damage handed back with its size, the position kept over a
restart, and a record written back from an intact copy checks again."""

from __future__ import annotations

from pathlib import Path

from protocol.message import HEAD_SIZE
from storage.store import MessageStore
from tests.storage.support import TOPIC, messages, open_store


def filled(tmp_path: Path, count: int = 40) -> tuple[MessageStore, list[int]]:
    store = open_store(tmp_path)
    put = store.put(TOPIC, 0, messages(count, 300), 1_700_000_000_000)
    store.flush()
    return store, put.physical_offsets


def flip(store: MessageStore, offset: int, mask: int = 0x01) -> None:
    seg_path = sorted((store.config.data_dir / "commitlog").iterdir())[0]
    with seg_path.open("r+b") as f:
        f.seek(offset)
        byte = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([byte ^ mask]))


def scrub_all(store: MessageStore, slice_bytes: int = 4096) -> list[tuple[int, int]]:
    damage: list[tuple[int, int]] = []
    while True:
        step = store.repairs.scrub(slice_bytes)
        damage += step.damage
        if step.wrapped:
            return damage


def test_a_clean_log_is_passed_over_in_slices_and_a_pass_ends_at_the_flushed_offset(
    tmp_path: Path,
) -> None:
    store, _ = filled(tmp_path)
    first = store.repairs.scrub(1000)
    assert first.damage == [] and 1000 <= first.scanned < 1000 + 400
    assert scrub_all(store) == []
    assert store.repairs.scrub_position == (0, 1)
    store.close()


def test_a_flipped_body_byte_is_found_with_the_records_size(tmp_path: Path) -> None:
    store, offsets = filled(tmp_path)
    size = offsets[8] - offsets[7]
    flip(store, offsets[7] + HEAD_SIZE + 9)
    assert scrub_all(store) == [(offsets[7], size)]
    assert store.corruption["scrub"] == 1
    assert store.repairs.unreadable_size(offsets[7]) == size
    assert store.repairs.unrepaired() == [(offsets[7], size)]
    # Found again on the next pass, counted once.
    assert scrub_all(store) == [(offsets[7], size)]
    assert store.corruption["scrub"] == 1
    # Bytes that check again (here flipped back by hand) are no longer reported as damage.
    flip(store, offsets[7] + HEAD_SIZE + 9)
    assert store.repairs.unrepaired() == []
    store.close()


def test_a_damaged_size_field_runs_to_the_next_valid_record(tmp_path: Path) -> None:
    store, offsets = filled(tmp_path)
    flip(store, offsets[20] + 1, 0x10)
    assert scrub_all(store) == [(offsets[20], offsets[21] - offsets[20])]
    store.close()


def test_a_record_written_back_checks_again_and_is_no_longer_damage(
    tmp_path: Path,
) -> None:
    store, offsets = filled(tmp_path)
    good = store.repairs.record_bytes(offsets[3], offsets[4] - offsets[3])
    flip(store, offsets[3] + HEAD_SIZE + 2)
    assert scrub_all(store) == [(offsets[3], len(good))]
    store.repairs.repair(offsets[3], good)()
    assert scrub_all(store) == []
    assert store.repairs.unrepaired() == []
    assert store.repairs.unreadable_size(offsets[3]) is None
    store.close()


def test_the_position_is_kept_over_a_restart(tmp_path: Path) -> None:
    store, offsets = filled(tmp_path)
    store.repairs.scrub(5000)
    at = store.repairs.scrub_position
    assert 5000 <= at[0] < offsets[-1]
    store.repairs.save_scrub()
    store.close()
    again = open_store(tmp_path)
    assert again.repairs.scrub_position == at
    again.close()


def test_a_truncation_moves_the_scrub_back_to_a_record_boundary(tmp_path: Path) -> None:
    # A slave's log cut back by HA and written again: the new records need not start where the
    # cut ones did, so a position past the cut would read the middle of one as damage.
    store, offsets = filled(tmp_path)
    while store.repairs.scrub_position[0] < offsets[15]:
        store.repairs.scrub(1000)
    store.truncate(offsets[10])
    assert store.repairs.scrub_position[0] == offsets[10]
    store.put(TOPIC, 0, messages(5, 1000, prefix="new"), 1_700_000_000_001)
    store.flush()
    assert scrub_all(store) == []
    store.close()
