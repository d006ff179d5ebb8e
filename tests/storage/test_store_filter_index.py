"""The property filter index (storage/filter_index.py): with it, a SQL92 read passes over the
records its expression cannot match without reading them from the CommitLog; the records served
are exactly those of a read without it (random expressions over random properties); a slave
that replays the master's bytes, and a store recovering its tail, build the same digests; a
queue offset reused after a truncation is never decided on the old record's digest."""

from __future__ import annotations

import random
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.filter import SqlFilter, filter_records, parse_filter, record_properties
from protocol.idempotence import ProducerSeq, stamp
from protocol.message import Message, iter_records
from protocol.property_index import digest_of
from protocol.sql92 import Node, to_sql
from storage import queue_read
from storage.store import GetStatus, MessageStore
from tests.hypothesis_profiles import examples
from tests.protocol.test_sql92 import NAMES, STR_VALUES, prop_maps, trees
from tests.storage.support import TOPIC, commitlog_bytes, crash_copy, messages, open_store

NOW = 1_700_000_000_000


def sql(text: str) -> SqlFilter:
    flt = parse_filter("SQL92", text)
    assert isinstance(flt, SqlFilter)
    return flt


def put_with(store: MessageStore, props: list[dict[str, str]], queue_id: int = 0) -> None:
    for i, p in enumerate(props):
        (msg,) = messages(1, prefix=f"p{i}-")
        store.put(TOPIC, queue_id, [replace(msg, properties=p)], NOW)


def read_filtered(store: MessageStore, flt: SqlFilter, queue_id: int = 0) -> list[int]:
    """The queue offsets a consumer with ``flt`` gets, reading the queue from 0 to its end."""
    got: list[int] = []
    offset = 0
    while True:
        res = store.get(TOPIC, queue_id, offset, 32, 1 << 20, None, flt.hashes, 1024)
        if res.status is not GetStatus.FOUND:
            return got
        body, _ = filter_records(res.body, flt)
        got += [r.queue_offset for r in iter_records(body)]
        offset = res.next_offset


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The CommitLog offsets of the records reads verify (every record read is)."""
    seen: list[int] = []
    check = queue_read.record_problem

    def counting(seg, physical, size, queue_id, queue_offset, field):  # type: ignore[no-untyped-def]
        seen.append(physical)
        return check(seg, physical, size, queue_id, queue_offset, field)

    monkeypatch.setattr(queue_read, "record_problem", counting)
    return seen


def test_rejected_records_are_not_read(tmp_path: Path, reads: list[int]) -> None:
    props = [{"k": str(i % 100), "region": "eu" if i % 3 else "us"} for i in range(2000)]
    indexed = open_store(tmp_path / "on", filter_index=True)
    plain = open_store(tmp_path / "off")
    try:
        put_with(indexed, props)
        put_with(plain, props)
        flt = sql("k = 7 AND region = 'eu'")
        want = [i for i, p in enumerate(props) if p["k"] == "7" and p["region"] == "eu"]

        reads.clear()
        assert read_filtered(plain, flt) == want
        assert len(reads) == len(props)  # without the index every record is read

        reads.clear()
        assert read_filtered(indexed, flt) == want
        # The matching records and the few whose digest holds the need by chance.
        assert len(want) <= len(reads) <= len(want) + len(props) // 50, len(reads)
        queue = indexed._queues.get(TOPIC, 0)
        assert queue is not None and queue.digests is not None
        assert queue.digests.reads_saved == len(props) - len(reads)
        # A range is decided on presence alone: every record holding k is read.
        reads.clear()
        assert read_filtered(indexed, sql("k < 50")) == [
            i for i, p in enumerate(props) if int(p["k"]) < 50
        ]
        assert len(reads) == len(props)
    finally:
        indexed.close()
        plain.close()


def _random_props(rng: random.Random) -> dict[str, str]:
    values = [*STR_VALUES, *(str(n) for n in range(-5, 6)), "1.0", "0.5e1"]
    return {name: rng.choice(values) for name in NAMES if rng.random() < 0.6}


@pytest.fixture(scope="module")
def twin_stores() -> Iterator[tuple[MessageStore, MessageStore, list[dict[str, str]]]]:
    rng = random.Random(32)
    props = [_random_props(rng) for _ in range(400)]
    with tempfile.TemporaryDirectory(prefix="rmq-filter-index-") as tmp:
        indexed = open_store(Path(tmp) / "on", filter_index=True)
        plain = open_store(Path(tmp) / "off")
        put_with(indexed, props)
        put_with(plain, props)
        try:
            yield indexed, plain, props
        finally:
            indexed.close()
            plain.close()


@settings(
    max_examples=examples(150),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(trees)
def test_results_are_the_same_with_and_without_the_index(
    twin_stores: tuple[MessageStore, MessageStore, list[dict[str, str]]], tree: Node
) -> None:
    indexed, plain, props = twin_stores
    flt = sql(to_sql(tree))
    want = [i for i, p in enumerate(props) if flt.expr.matches(p)]
    assert read_filtered(indexed, flt) == want
    assert read_filtered(plain, flt) == want


def _digests(store: MessageStore, queue_id: int = 0) -> list[tuple[int, int, int]]:
    queue = store._queues.get(TOPIC, queue_id)
    assert queue is not None and queue.digests is not None
    d = queue.digests
    return [(d.base + i, d.lo[i], d.hi[i]) for i in range(len(d))]


def test_a_slave_and_a_recovering_store_build_the_same_digests(tmp_path: Path) -> None:
    props = [{"k": str(i % 10), "tier": "gold" if i % 7 == 0 else "std"} for i in range(300)]
    master = open_store(tmp_path / "master", filter_index=True)
    slave = open_store(tmp_path / "slave", filter_index=True)
    try:
        put_with(master, props[:150])
        put_with(master, props[150:], queue_id=1)
        slave.append_raw(0, commitlog_bytes(master))
        for qid in (0, 1):
            assert _digests(slave, qid) == _digests(master, qid)
            assert len(_digests(slave, qid)) == 150
        flt = sql("tier = 'gold'")
        assert read_filtered(slave, flt) == read_filtered(master, flt)
        # kill -9 (no clean close): recovery replays the tail and digests it again.
        copy = crash_copy(master, tmp_path / "crashed")
    finally:
        master.close()
        slave.close()
    (copy / "checkpoint").unlink(missing_ok=True)
    recovered = open_store(copy, filter_index=True)
    try:
        assert read_filtered(recovered, sql("k = 3 AND tier = 'std'")) == [
            i for i, p in enumerate(props[:150]) if p["k"] == "3" and p["tier"] == "std"
        ]
    finally:
        recovered.close()


def test_a_queue_offset_reused_after_a_truncation_is_decided_on_the_new_record(
    tmp_path: Path, reads: list[int]
) -> None:
    store = open_store(tmp_path, filter_index=True)
    try:
        put_with(store, [{"k": "1"}] * 10)
        cut = store.get(TOPIC, 0, 5, 1, 1 << 20)
        (fifth,) = iter_records(cut.body)
        store.truncate(fifth.physical_offset)  # entries 5.. go (a new master's truncation)
        put_with(store, [{"k": "2"}] * 5)  # queue offsets 5..9 again, other properties
        assert read_filtered(store, sql("k = 2")) == [5, 6, 7, 8, 9]
        assert read_filtered(store, sql("k = 1")) == [0, 1, 2, 3, 4]
    finally:
        store.close()


def test_an_unreadable_record_gets_a_digest_that_matches_anything(tmp_path: Path) -> None:
    store = open_store(tmp_path, filter_index=True)
    try:
        msg = Message(topic=TOPIC, body=b"x", properties={"k": "1"})
        store.put(TOPIC, 0, [msg], NOW)
        queue = store._queues.get(TOPIC, 0)
        assert queue is not None and queue.appended is not None
        physical = queue.entry(0)[0]
        queue.appended(queue, 1, [store.max_offset + 4096])  # no record there
        assert queue.digests is not None
        assert queue.digests.may_match(1, store.max_offset + 4096, sql("k = 5").hashes)
        assert not queue.digests.may_match(0, physical, sql("k = 5").hashes)
    finally:
        store.close()


_requests = st.lists(
    st.tuples(
        st.lists(
            st.tuples(
                prop_maps,
                st.sampled_from(["", "k1", "k1 k2"]),  # keys
                st.sampled_from(["", "TagA", "Tag\x02B"]),  # tags, one with a separator
            ),
            min_size=1,
            max_size=4,
        ),
        st.booleans(),  # an idempotent producer's request: its __PSEQ stamped
    ),
    min_size=1,
    max_size=12,
)


@settings(
    max_examples=examples(100),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(_requests)
def test_a_put_hands_the_index_the_digest_of_the_record_it_wrote(
    tmp_path_factory: pytest.TempPathFactory,
    requests: list[tuple[list[tuple[dict[str, str], str, str]], bool]],
) -> None:
    """The master's put gives the filter index each record's digest from the properties it
    encodes (cached for keys and tags alone; the broker's __PSEQ added as its presence) instead
    of the index reading each record back: the same digest as the record's own properties give
    (what the index computed from the record before, and what a slave's replay computes), for
    any properties, keys and tags, with and without the stamp, single and batched."""
    store = open_store(tmp_path_factory.mktemp("digests"), filter_index=True)
    try:
        for i, (items, sequenced) in enumerate(requests):
            msgs = [
                Message(topic=TOPIC, body=b"b", properties=dict(p), keys=keys, tags=tags)
                for p, keys, tags in items
            ]
            if sequenced:
                stamp(msgs, ProducerSeq(7, 0, i))
            store.put(TOPIC, 0, msgs, NOW)
        got = _digests(store)
        res = store.get(TOPIC, 0, 0, len(got), 1 << 24)
        assert res.status is GetStatus.FOUND
        body = bytes(res.body)
        want: list[tuple[int, int, int]] = []
        pos = 0
        for r in iter_records(body):  # each record's digest as the index read it before
            want.append((r.queue_offset, *digest_of(record_properties(body, pos))))
            pos += int.from_bytes(body[pos : pos + 4], "big")
        assert got == want
    finally:
        store.close()
