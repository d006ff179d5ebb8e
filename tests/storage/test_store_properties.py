"""Property tests: whatever was put is readable at its offsets after a reopen or a crash; a
replica fed in arbitrary chunks is byte-identical to its master."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.message import Message, iter_records
from storage.store import GetStatus, PutResult
from tests.hypothesis_profiles import examples
from tests.storage.support import commitlog_bytes, crash_copy, open_store

SEGMENT = 16 * 1024

batches = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=3),  # queue id
        st.lists(st.binary(max_size=1500), min_size=1, max_size=8),  # bodies
        st.sampled_from(["", "TagA", "TagB"]),
    ),
    min_size=1,
    max_size=40,
)


def put_all(
    store: object, plan: list[tuple[int, list[bytes], str]]
) -> list[tuple[PutResult, list[bytes]]]:
    from storage.store import MessageStore

    assert isinstance(store, MessageStore)
    done = []
    for i, (queue_id, bodies, tag) in enumerate(plan):
        msgs = [Message(topic="T", body=b, tags=tag, keys=str(i)) for b in bodies]
        done.append((store.put("T", queue_id, msgs, 1_000 + i), bodies))
    return done


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan=batches, crash=st.booleans(), flush_at=st.integers(min_value=0, max_value=40))
def test_every_put_is_readable_at_its_offsets_after_reopen(
    plan: list[tuple[int, list[bytes], str]], crash: bool, flush_at: int
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        live = Path(tmp) / "live"
        store = open_store(live, commitlog_segment_bytes=SEGMENT, consumequeue_segment_entries=7)
        done = put_all(store, plan[:flush_at])
        store.flush()
        done += put_all(store, plan[flush_at:])
        if crash:
            data_dir = crash_copy(store, Path(tmp) / "crashed")
            store.close()
        else:
            store.close()
            data_dir = live
        again = open_store(
            data_dir, commitlog_segment_bytes=SEGMENT, consumequeue_segment_entries=7
        )
        for result, bodies in done:
            got = again.get("T", result.queue_id, result.first_queue_offset, result.count, 1 << 30)
            assert got.status is GetStatus.FOUND and got.count == result.count
            records = list(iter_records(got.body))
            assert [r.physical_offset for r in records] == result.physical_offsets
            assert [r.body for r in records] == bodies
            assert [r.queue_offset for r in records] == list(
                range(result.first_queue_offset, result.first_queue_offset + result.count)
            )
        again.close()


@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan=batches, chunks=st.lists(st.integers(min_value=1, max_value=20_000), min_size=1))
def test_replica_fed_in_any_chunks_matches_its_master(
    plan: list[tuple[int, list[bytes], str]], chunks: list[int]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        master = open_store(Path(tmp) / "m", commitlog_segment_bytes=SEGMENT)
        slave = open_store(Path(tmp) / "s", commitlog_segment_bytes=SEGMENT)
        put_all(master, plan)
        i = 0
        while slave.max_offset < master.max_offset:
            offset = slave.max_offset
            slave.append_raw(offset, master.read_raw(offset, chunks[i % len(chunks)]))
            i += 1
        assert commitlog_bytes(slave) == commitlog_bytes(master)
        for queue_id in master.queue_ids("T"):
            assert slave.queue_max_offset("T", queue_id) == master.queue_max_offset("T", queue_id)
            a = master.get("T", queue_id, 0, 1000, 1 << 30)
            b = slave.get("T", queue_id, 0, 1000, 1 << 30)
            assert (a.status, a.count, a.body) == (b.status, b.count, b.body)
        slave.close()
        master.close()
