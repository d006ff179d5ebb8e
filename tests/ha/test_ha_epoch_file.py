"""The epoch file: ordering rules, end offsets, durable atomic writes, .bak fallback."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from protocol.ha import EpochEntry
from storage import small_file
from storage.epoch_file import FILE_NAME, EpochFile, EpochFileError, decode_entries, encode_entries


def E(epoch: int, start: int) -> EpochEntry:
    return EpochEntry(epoch=epoch, start_offset=start)


def test_a_new_directory_has_an_empty_history(tmp_path: Path) -> None:
    ef = EpochFile(tmp_path)
    assert ef.entries() == ()
    assert ef.last_entry() is None
    assert ef.last_epoch() is None
    assert ef.find(1) is None
    assert ef.entries_with_end(0) == ()
    assert not (tmp_path / FILE_NAME).exists()


def test_appends_persist_and_reload(tmp_path: Path) -> None:
    ef = EpochFile(tmp_path)
    assert ef.append(1, 0)
    assert ef.append(2, 100)
    assert ef.append(4, 100)  # epoch 2 wrote nothing: an empty range
    assert ef.path == tmp_path / FILE_NAME
    again = EpochFile(tmp_path)
    assert again.entries() == (E(1, 0), E(2, 100), E(4, 100))
    assert again.last_epoch() == 4
    assert again.last_entry() == E(4, 100)
    assert again.find(2) == E(2, 100)
    assert again.find(3) is None
    assert len(again) == 3


def test_the_file_is_rocketmq_style_text_in_a_checksummed_frame(tmp_path: Path) -> None:
    ef = EpochFile(tmp_path)
    ef.append(1, 0)
    ef.append(3, 4096)
    payload = small_file.decode((tmp_path / FILE_NAME).read_bytes())
    assert payload == b"2\n1-0\n3-4096\n"


def test_appending_the_last_entry_again_is_a_no_op(tmp_path: Path) -> None:
    ef = EpochFile(tmp_path)
    ef.append(1, 0)
    ef.append(2, 50)
    mtime = (tmp_path / FILE_NAME).stat().st_mtime_ns
    assert not ef.append(2, 50)
    assert (tmp_path / FILE_NAME).stat().st_mtime_ns == mtime
    assert ef.entries() == (E(1, 0), E(2, 50))


@pytest.mark.parametrize(
    ("epoch", "start", "message"),
    [(2, 60, "not above"), (1, 60, "not above"), (3, 40, "before epoch 2")],
)
def test_append_keeps_the_order(tmp_path: Path, epoch: int, start: int, message: str) -> None:
    ef = EpochFile(tmp_path)
    ef.append(1, 0)
    ef.append(2, 50)
    with pytest.raises(EpochFileError, match=message):
        ef.append(epoch, start)
    assert EpochFile(tmp_path).entries() == (E(1, 0), E(2, 50))


def test_entries_with_end(tmp_path: Path) -> None:
    ef = EpochFile(tmp_path)
    for epoch, start in [(1, 0), (2, 100), (3, 100), (5, 250)]:
        ef.append(epoch, start)
    assert [(r.epoch, r.start_offset, r.end_offset) for r in ef.entries_with_end(400)] == [
        (1, 0, 100),
        (2, 100, 100),
        (3, 100, 250),
        (5, 250, 400),
    ]


def test_truncate_suffix_from_offset(tmp_path: Path) -> None:
    ef = EpochFile(tmp_path)
    for epoch, start in [(1, 0), (2, 100), (3, 100), (5, 250)]:
        ef.append(epoch, start)
    ef.truncate_suffix_from_offset(251)
    assert ef.last_epoch() == 5
    ef.truncate_suffix_from_offset(250)
    assert ef.entries() == (E(1, 0), E(2, 100), E(3, 100))
    ef.truncate_suffix_from_offset(100)  # entries starting at the offset go too
    assert EpochFile(tmp_path).entries() == (E(1, 0),)


def test_truncate_from_epoch(tmp_path: Path) -> None:
    ef = EpochFile(tmp_path)
    for epoch, start in [(1, 0), (2, 100), (4, 300)]:
        ef.append(epoch, start)
    ef.truncate_from_epoch(5)
    assert len(ef) == 3
    ef.truncate_from_epoch(3)
    assert EpochFile(tmp_path).entries() == (E(1, 0), E(2, 100))
    ef.truncate_from_epoch(2)
    assert EpochFile(tmp_path).entries() == (E(1, 0),)


def test_becoming_master_sequence(tmp_path: Path) -> None:
    """DESIGN.md 5: drop entries at or above E, append (E, maxOffset)."""
    ef = EpochFile(tmp_path)
    ef.append(1, 0)
    ef.append(3, 500)  # a stale entry from a term this node never finished
    ef.truncate_from_epoch(3)
    ef.append(3, 700)
    assert EpochFile(tmp_path).entries() == (E(1, 0), E(3, 700))


def test_an_empty_history_persists_and_reloads(tmp_path: Path) -> None:
    ef = EpochFile(tmp_path)
    ef.append(1, 0)
    ef.truncate_suffix_from_offset(0)
    assert ef.entries() == ()
    assert small_file.decode((tmp_path / FILE_NAME).read_bytes()) == b"0\n"
    reloaded = EpochFile(tmp_path)
    assert reloaded.entries() == ()
    reloaded.append(2, 10)
    assert EpochFile(tmp_path).entries() == (E(2, 10),)


def test_flush_writes_an_empty_history(tmp_path: Path) -> None:
    EpochFile(tmp_path).flush()
    assert small_file.decode((tmp_path / FILE_NAME).read_bytes()) == b"0\n"
    assert EpochFile(tmp_path).entries() == ()


def _two_versions(tmp_path: Path) -> Path:
    ef = EpochFile(tmp_path)
    ef.append(1, 0)
    ef.append(2, 100)  # primary: [1, 2]; .bak: [1]
    return tmp_path / FILE_NAME


def test_corrupt_primary_falls_back_to_bak(tmp_path: Path) -> None:
    primary = _two_versions(tmp_path)
    raw = bytearray(primary.read_bytes())
    raw[-3] ^= 0x01
    primary.write_bytes(bytes(raw))
    assert EpochFile(tmp_path).entries() == (E(1, 0),)


def test_torn_primary_falls_back_to_bak(tmp_path: Path) -> None:
    primary = _two_versions(tmp_path)
    raw = primary.read_bytes()
    primary.write_bytes(raw[: len(raw) // 2])
    assert EpochFile(tmp_path).entries() == (E(1, 0),)


def test_missing_primary_falls_back_to_bak(tmp_path: Path) -> None:
    """A crash between 'primary -> .bak' and 'temp -> primary' leaves only the .bak."""
    primary = _two_versions(tmp_path)
    primary.unlink()
    assert EpochFile(tmp_path).entries() == (E(1, 0),)


def test_a_torn_temp_file_is_never_read(tmp_path: Path) -> None:
    primary = _two_versions(tmp_path)
    primary.with_name(FILE_NAME + ".tmp").write_bytes(b"RMQS\x00\x00")
    assert EpochFile(tmp_path).entries() == (E(1, 0), E(2, 100))


def test_both_copies_corrupt_is_an_error_not_an_empty_history(tmp_path: Path) -> None:
    primary = _two_versions(tmp_path)
    primary.write_bytes(b"junk")
    primary.with_name(FILE_NAME + ".bak").write_bytes(b"junk")
    with pytest.raises(EpochFileError):
        EpochFile(tmp_path)


def test_a_good_checksum_over_bad_content_is_an_error(tmp_path: Path) -> None:
    small_file.write_atomic(tmp_path / FILE_NAME, b"2\n1-0\n")
    with pytest.raises(EpochFileError, match="header says 2"):
        EpochFile(tmp_path)


@pytest.mark.parametrize(
    "payload",
    [b"", b"1\n1-0", b"1\n1:0\n", b"x\n", b"2\n2-0\n1-5\n", b"2\n1-50\n2-10\n", b"1\n\xff\n"],
)
def test_decode_rejects_bad_payloads(payload: bytes) -> None:
    with pytest.raises(EpochFileError):
        decode_entries(payload)


def test_encode_decode_round_trip() -> None:
    entries = (E(1, 0), E(2, 0), E(7, 2**40))
    assert decode_entries(encode_entries(entries)) == entries
    assert decode_entries(encode_entries(())) == ()


def test_writes_are_fsynced_before_the_rename_and_the_directory_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        calls.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        calls.append(("replace", f"{Path(src).name}->{Path(dst).name}"))
        real_replace(src, dst)

    ef = EpochFile(tmp_path)
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    ef.append(1, 0)
    ef.append(2, 10)
    tmp = str(tmp_path / (FILE_NAME + ".tmp"))
    assert calls == [
        ("fsync", tmp),
        ("replace", f"{FILE_NAME}.tmp->{FILE_NAME}"),
        ("fsync", str(tmp_path)),
        ("fsync", tmp),
        ("replace", f"{FILE_NAME}->{FILE_NAME}.bak"),
        ("replace", f"{FILE_NAME}.tmp->{FILE_NAME}"),
        ("fsync", str(tmp_path)),
    ]
    assert not Path(tmp).exists()


def test_a_failed_write_changes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ef = EpochFile(tmp_path)
    ef.append(1, 0)

    def boom(fd: int) -> None:
        raise OSError("disk gone")

    monkeypatch.setattr(os, "fsync", boom)
    with pytest.raises(OSError, match="disk gone"):
        ef.append(2, 10)
    monkeypatch.undo()
    assert ef.entries() == (E(1, 0),)
    assert EpochFile(tmp_path).entries() == (E(1, 0),)
