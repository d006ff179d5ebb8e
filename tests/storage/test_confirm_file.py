"""The confirm offset file (storage/confirm_file.py): two CRC-checked copies, so a process killed
while writing one leaves the other."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage.confirm_file import SIZE, ConfirmFile, ConfirmFileError, read_confirm_file

SLOT_A, SLOT_B = 8, 24


def made(path: Path, *offsets: int) -> None:
    f = ConfirmFile.open(path, offsets[0])
    for offset in offsets[1:]:
        f.write(offset)
    f.close()


def test_it_holds_the_last_offset_written(tmp_path: Path) -> None:
    path = tmp_path / "confirm"
    assert read_confirm_file(path) is None
    made(path, 0, 100, 4096, 70)  # a truncation may lower it
    assert read_confirm_file(path) == 70
    assert path.stat().st_size == SIZE
    again = ConfirmFile.open(path, 5000)
    again.close()
    assert read_confirm_file(path) == 5000


@pytest.mark.parametrize(("torn", "left"), [(SLOT_A, 200), (SLOT_B, 300)])
def test_a_torn_copy_leaves_the_other(tmp_path: Path, torn: int, left: int) -> None:
    """Slot A is written first: torn in A, B still holds the value before; torn in B, A holds
    the new one."""
    path = tmp_path / "confirm"
    made(path, 200)
    raw = bytearray(path.read_bytes())
    raw[SLOT_A : SLOT_A + 8] = (300).to_bytes(8, "big")  # A rewritten, its CRC not yet
    if torn == SLOT_B:
        made(path, 200, 300)
        raw = bytearray(path.read_bytes())
        raw[SLOT_B + 7] ^= 0xFF
    path.write_bytes(raw)
    assert read_confirm_file(path) == left


@pytest.mark.parametrize(
    "content",
    [b"", b"RMQC", b"XXXX" + bytes(SIZE - 4), b"RMQC" + b"\xff" * (SIZE - 4)],
    ids=["empty", "short", "magic", "both-torn"],
)
def test_what_is_not_a_confirm_file_is_refused_and_rewritten(
    tmp_path: Path, content: bytes
) -> None:
    path = tmp_path / "confirm"
    path.write_bytes(content)
    with pytest.raises(ConfirmFileError):
        read_confirm_file(path)
    made(path, 42)
    assert read_confirm_file(path) == 42
