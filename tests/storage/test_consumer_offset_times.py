"""The last consume time kept with each committed consumer offset: persisted with the offsets,
read back after a restart, absent from files written before it existed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from storage.config_files import ConsumerOffsetStore
from storage.errors import StoreError
from storage.small_file import decode, write_atomic

T0 = 1_700_000_000_000


def test_times_persist_with_the_offsets_and_load_back(tmp_path: Path) -> None:
    store = ConsumerOffsetStore(tmp_path)
    store.commit("g", "T", 0, 5, T0)
    store.commit("g", "T", 1, 7)  # no time given: none recorded
    store.commit("g", "T", 0, 5)  # a commit without a time keeps the recorded one
    store.persist()
    doc = json.loads(decode(store.path.read_bytes()))
    assert doc["offsets"] == {"g": {"T": {"0": 5, "1": 7}}}
    assert doc["lastConsumeMs"] == {"g": {"T": {"0": T0}}}
    again = ConsumerOffsetStore(tmp_path)
    again.load()
    assert again.last_consume_ms("g", "T", 0) == T0
    assert again.last_consume_ms("g", "T", 1) is None
    assert again.snapshot_times() == {"g": {"T": {0: T0}}}


def test_a_file_without_times_loads_with_none(tmp_path: Path) -> None:
    path = tmp_path / "config" / "consumerOffset.json"
    path.parent.mkdir(parents=True)
    write_atomic(path, json.dumps({"version": 1, "offsets": {"g": {"T": {"0": 3}}}}).encode())
    store = ConsumerOffsetStore(tmp_path)
    store.load()
    assert store.query("g", "T", 0) == 3 and store.last_consume_ms("g", "T", 0) is None


@pytest.mark.parametrize("times", [[1, 2], {"g": {"T": {"0": "soon"}}}, {"g": 5}])
def test_a_bad_times_table_is_an_error(tmp_path: Path, times: object) -> None:
    path = tmp_path / "config" / "consumerOffset.json"
    path.parent.mkdir(parents=True)
    doc = {"version": 1, "offsets": {}, "lastConsumeMs": times}
    write_atomic(path, json.dumps(doc).encode())
    with pytest.raises(StoreError):
        ConsumerOffsetStore(tmp_path).load()
