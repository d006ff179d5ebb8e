"""The key index: its file format, and a store's index through puts, reopen, crashes, torn and
deleted files, truncation, retention and replication."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.message import Message, encode_properties
from storage.errors import StoreError
from storage.index import format as fmt
from storage.store import MessageNotFoundError, MessageStore
from tests.hypothesis_profiles import examples
from tests.storage.support import SEGMENT, TOPIC, crash_copy, open_store

T0 = 1_700_000_000_000
ALL = (0, 1 << 62)
SMALL = {"index_slots": 16, "index_max_entries": 40}


def keyed(
    keys: list[str], *, topic: str = TOPIC, props: dict[str, str] | None = None
) -> list[Message]:
    return [
        Message(topic=topic, body=f"body-{k}-{i}".encode(), keys=k, properties=dict(props or {}))
        for i, k in enumerate(keys)
    ]


def found_keys(store: MessageStore, key: str, topic: str = TOPIC, limit: int = 1024) -> list[str]:
    return [hit.record.body.decode() for hit in store.query_by_key(topic, key, *ALL, limit)]


def index_files(data_dir: Path) -> list[Path]:
    return sorted((data_dir / "index").iterdir())


# -- format ---------------------------------------------------------------------------------


def test_header_round_trips_and_a_torn_header_is_refused() -> None:
    h = fmt.Header(7, 9, 100, 250, 3, T0, T0 + 5, fmt.FLAG_CLEAN, 1234)
    raw = fmt.encode_header(h)
    assert len(raw) == fmt.HEADER_SIZE
    size = fmt.file_size(7, 9)
    assert fmt.decode_header(raw, size) == h
    for at in (0, 10, 30, 55):
        torn = bytearray(raw)
        torn[at] ^= 0x40
        with pytest.raises(fmt.IndexFormatError):
            fmt.decode_header(torn, size)
    with pytest.raises(fmt.IndexFormatError, match="do not make"):
        fmt.decode_header(raw, size + 1)
    with pytest.raises(fmt.IndexFormatError, match="shorter"):
        fmt.decode_header(raw[:20], 20)


def test_record_keys_split_keys_on_spaces_and_add_the_uniq_key() -> None:
    raw = b"TAGS\x01a\x02KEYS\x01order-1  order-2 order-1\x02UNIQ_KEY\x01ABC\x02XKEYS\x01no\x02"
    assert fmt.record_keys(raw) == [b"order-1", b"order-2", b"ABC"]
    assert fmt.record_keys(b"TAGS\x01a\x02") == []
    assert fmt.record_keys(b"") == []
    assert fmt.keys_of(" a  b ") == ["a", "b"]


def test_slot_arithmetic_and_entry_positions() -> None:
    assert fmt.entry_position(4, 0) == fmt.HEADER_SIZE + 16
    assert fmt.entry_position(4, 3) == fmt.HEADER_SIZE + 16 + 60
    assert fmt.slot_of(17, 16) == 1
    assert fmt.time_delta(T0 + 5, T0) == 5
    assert fmt.time_delta(T0 - 5, T0) == 0
    assert fmt.time_delta(T0 + (1 << 40), T0) == fmt.MAX_TIME_DELTA
    assert fmt.key_hash(b"T", b"k") != fmt.key_hash(b"U", b"k")


def test_a_chain_that_points_forward_stops_instead_of_looping() -> None:
    size = fmt.file_size(1, 4)
    buf = bytearray(size)
    fmt.SLOT.pack_into(buf, fmt.slot_position(0), 2)
    fmt.ENTRY.pack_into(buf, fmt.entry_position(1, 1), 5, 100, 0, 2)  # points at itself
    assert list(fmt.iter_chain(buf, 1, 4, 0)) == [(5, 100, 0)]


# -- a store's index -------------------------------------------------------------------------


def test_every_message_of_a_key_is_found_across_files_with_one_slot(tmp_path: Path) -> None:
    store = open_store(tmp_path, index_slots=1, index_max_entries=25)
    for i in range(30):
        store.put(TOPIC, i % 3, keyed([f"k{i % 4}", f"k{i % 4}"]), T0 + i)
    assert len(index_files(tmp_path)) == 3  # 60 entries, 25 per file
    for k in range(4):
        bodies = found_keys(store, f"k{k}")
        assert len(bodies) == 2 * len([i for i in range(30) if i % 4 == k])
    assert found_keys(store, "k9") == []
    assert found_keys(store, "k1", topic="Other") == []
    # The newest max_count, oldest first.
    last = store.query_by_key(TOPIC, "k0", *ALL, 3)
    offsets = [hit.record.physical_offset for hit in last]
    assert offsets == sorted(offsets) and len(offsets) == 3
    store.close()


def test_a_hash_collision_is_confirmed_against_the_record(tmp_path: Path) -> None:
    a, b = "ab2b0dc8ea64", "ddf29c209b6e"  # found by a birthday search over random keys
    assert fmt.key_hash(TOPIC.encode(), a.encode()) == fmt.key_hash(TOPIC.encode(), b.encode())
    store = open_store(tmp_path, **SMALL)
    store.put(TOPIC, 0, keyed([a, b, a]), T0)
    assert found_keys(store, a) == [f"body-{a}-0", f"body-{a}-2"]
    assert found_keys(store, b) == [f"body-{b}-1"]
    store.close()


def test_uniq_key_and_time_range(tmp_path: Path) -> None:
    store = open_store(tmp_path, **SMALL)
    store.put(TOPIC, 0, keyed(["a"], props={"UNIQ_KEY": "U1"}), T0)
    store.put(TOPIC, 0, keyed(["a"]), T0 + 10_000)
    assert found_keys(store, "U1") == ["body-a-0"]
    assert len(store.query_by_key(TOPIC, "a", T0, T0 + 5_000, 10)) == 1
    assert len(store.query_by_key(TOPIC, "a", T0 + 1, T0 + 10_000, 10)) == 1
    assert store.query_by_key(TOPIC, "a", T0 + 20_000, T0 + 30_000, 10) == []
    assert store.oldest_store_timestamp() == T0
    store.close()


def test_lookup_reads_only_below_the_visible_offset(tmp_path: Path) -> None:
    store = open_store(tmp_path, **SMALL)
    first = store.put(TOPIC, 0, keyed(["a"]), T0)
    second = store.put(TOPIC, 0, keyed(["a"]), T0 + 1)
    visible = first.end_offset
    assert len(store.query_by_key(TOPIC, "a", *ALL, 10, visible)) == 1
    assert store.read_message(first.physical_offsets[0], visible).record.keys == "a"
    with pytest.raises(MessageNotFoundError, match="no committed message"):
        store.read_message(second.physical_offsets[0], visible)
    store.close()


def test_read_message_refuses_an_offset_that_is_not_a_record(tmp_path: Path) -> None:
    store = open_store(tmp_path, **SMALL)
    put = store.put(TOPIC, 0, keyed(["a", "b"]), T0)
    hit = store.read_message(put.physical_offsets[1])
    assert hit.record.body == b"body-b-1" and hit.record.physical_offset == put.physical_offsets[1]
    for bad in (put.physical_offsets[1] - 4, put.physical_offsets[0] + 8, -1, store.max_offset):
        with pytest.raises(MessageNotFoundError):
            store.read_message(bad)
    store.close()


def test_index_survives_a_clean_restart_without_reindexing(tmp_path: Path) -> None:
    store = open_store(tmp_path, **SMALL)
    for i in range(50):
        store.put(TOPIC, 0, keyed([f"k{i % 5}"]), T0 + i)
    store.close()
    store = open_store(tmp_path, **SMALL)
    assert store.index is not None and store.index.stats().rebuilt_files == 0
    assert all(len(found_keys(store, f"k{k}")) == 10 for k in range(5))
    store.put(TOPIC, 0, keyed(["k0"]), T0 + 99)
    assert len(found_keys(store, "k0")) == 11
    store.close()


def test_a_crash_rebuilds_the_unsealed_file_and_loses_nothing(tmp_path: Path) -> None:
    store = open_store(tmp_path / "a", **SMALL)
    for i in range(50):
        store.put(TOPIC, 0, keyed([f"k{i % 5}"]), T0 + i)
    copy = crash_copy(store, tmp_path / "b")
    store.close()
    crashed = open_store(copy, **SMALL)
    assert crashed.index is not None and crashed.index.stats().rebuilt_files == 1
    assert all(len(found_keys(crashed, f"k{k}")) == 10 for k in range(5))
    crashed.close()


@pytest.mark.parametrize("damage", ["delete_all", "delete_first", "corrupt_sealed", "truncate"])
def test_deleted_or_corrupt_index_files_are_rebuilt(tmp_path: Path, damage: str) -> None:
    store = open_store(tmp_path, **SMALL)
    for i in range(100):
        store.put(TOPIC, 0, keyed([f"k{i % 5}"]), T0 + i)
    store.close()
    files = index_files(tmp_path)
    assert len(files) >= 3
    if damage == "delete_all":
        for f in files:
            f.unlink()
    elif damage == "delete_first":
        files[0].unlink()
    elif damage == "corrupt_sealed":
        with files[1].open("r+b") as f:
            f.seek(fmt.HEADER_SIZE + 16 * 4 + 7)  # inside the first entry
            byte = f.read(1)
            f.seek(-1, os.SEEK_CUR)
            f.write(bytes([byte[0] ^ 0xFF]))
    else:
        os.truncate(files[1], 100)
    store = open_store(tmp_path, **SMALL)
    assert store.index is not None and store.index.stats().rebuilt_files >= (
        0 if damage == "delete_all" else 1
    )
    assert all(len(found_keys(store, f"k{k}")) == 20 for k in range(5))
    store.close()
    # Rebuilt files are trusted on the next start.
    store = open_store(tmp_path, **SMALL)
    assert store.index is not None and store.index.stats().rebuilt_files == 0
    store.close()


def test_truncate_drops_entries_past_the_cut(tmp_path: Path) -> None:
    store = open_store(tmp_path, **SMALL)
    kept = [store.put(TOPIC, 0, keyed(["k"]), T0 + i) for i in range(30)]
    cut = kept[20].physical_offsets[0]
    store.truncate(cut)
    assert len(found_keys(store, "k")) == 20
    store.put(TOPIC, 0, keyed(["other"]), T0 + 50)
    assert len(found_keys(store, "k")) == 20 and len(found_keys(store, "other")) == 1
    store.close()


def test_retention_deletes_index_files_with_the_log(tmp_path: Path) -> None:
    store = open_store(tmp_path, retention_hours=1, index_slots=16, index_max_entries=20)
    i = 0
    while store.max_offset < 3 * SEGMENT + 100:
        store.put(TOPIC, 0, [*keyed([f"k{i}"]), Message(topic=TOPIC, body=b"x" * 1500)], T0 + i)
        i += 1
    before = len(index_files(tmp_path))
    assert store.delete_expired(T0 + i + 3_600_001, disk_used_ratio=0.1) == 3
    after = len(index_files(tmp_path))
    assert 0 < after < before
    assert found_keys(store, "k0") == []
    assert len(found_keys(store, f"k{i - 1}")) == 1
    store.close()


def test_index_off_removes_files_and_refuses_queries(tmp_path: Path) -> None:
    store = open_store(tmp_path, **SMALL)
    store.put(TOPIC, 0, keyed(["a"]), T0)
    store.close()
    store = open_store(tmp_path, index_enable=False)
    assert not (tmp_path / "index").exists()
    with pytest.raises(StoreError, match="index is off"):
        store.query_by_key(TOPIC, "a", *ALL, 1)
    store.put(TOPIC, 0, keyed(["a"]), T0 + 1)
    store.close()
    store = open_store(tmp_path, **SMALL)
    assert len(found_keys(store, "a")) == 2
    store.close()


def test_a_replica_indexes_what_it_replays(tmp_path: Path) -> None:
    master = open_store(tmp_path / "m", **SMALL)
    replica = open_store(tmp_path / "r", **SMALL)
    for i in range(40):
        master.put(TOPIC, i % 2, keyed([f"k{i % 3}"]), T0 + i)
    pos = 0
    while pos < master.max_offset:
        chunk = bytes(master.read_raw(pos, 1500))
        pos = replica.append_raw(pos, chunk)
    for k in range(3):
        assert found_keys(replica, f"k{k}") == found_keys(master, f"k{k}")
    master.close()
    replica.close()


plans = st.lists(
    st.tuples(
        st.lists(st.sampled_from(["a", "b", "c", "d e", ""]), min_size=1, max_size=5),
        st.integers(0, 3),
    ),
    min_size=1,
    max_size=30,
)


@settings(
    max_examples=examples(25),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(plan=plans, crash=st.booleans())
def test_property_every_key_is_found_after_reopen_or_crash(
    tmp_path_factory: pytest.TempPathFactory, plan: list[tuple[list[str], int]], crash: bool
) -> None:
    base = tmp_path_factory.mktemp("prop")
    store = open_store(base / "s", index_slots=3, index_max_entries=7)
    expected: dict[str, int] = {}
    for i, (keys, queue_id) in enumerate(plan):
        store.put(TOPIC, queue_id, keyed(keys), T0 + i * 1000)
        for k in keys:
            for part in set(fmt.keys_of(k)):
                expected[part] = expected.get(part, 0) + 1
    if crash:
        reopened = open_store(crash_copy(store, base / "c"), index_slots=3, index_max_entries=7)
        store.close()
    else:
        store.close()
        reopened = open_store(base / "s", index_slots=3, index_max_entries=7)
    for key, count in expected.items():
        assert len(found_keys(reopened, key)) == count, key
    reopened.close()


key_text = st.text(alphabet="ab \u00e9", max_size=8)


@settings(max_examples=examples(200), deadline=None)
@given(keys=key_text, props_keys=st.none() | key_text, uniq=st.none() | key_text)
def test_property_the_send_path_and_the_record_agree_on_keys(
    keys: str, props_keys: str | None, uniq: str | None
) -> None:
    props = {}
    if props_keys is not None:
        props["KEYS"] = props_keys
    if uniq is not None:
        props["UNIQ_KEY"] = uniq
    msg = Message(topic=TOPIC, body=b"", keys=keys, properties=props)
    raw = encode_properties(msg.all_properties())
    assert fmt.message_keys(msg.keys, msg.properties) == fmt.record_keys(raw)
