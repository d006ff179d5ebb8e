"""A slave replays a transfer batch in one pass (``storage.dispatch.Replayer`` with ``keys`` and
``digests``): the ConsumeQueue entries, the key index's hashes and the property filter digests
come from one decoding of each record. What it writes must be what the per-record path writes:
a store rebuilding its ConsumeQueues and key index from the same CommitLog (recovery: the
Replayer without them, the key index reading every record with ``KeyIndex.catch_up``, each
queue's digests read back from its records by ``FilterIndex.appended``).

Random batches (hypothesis): user and system topics (timer, POP revive log, transaction half
and op records with their properties), keys (none, one, several with repeats, UNIQ_KEY),
random properties, idempotent producers' requests (``__PSEQ`` in every record, a tail of
its own for each), store timestamps that repeat (a master's put) and move past the key
index's file span, key index files small enough to fill, transfer chunks cut at
random record boundaries and torn chunks (cut inside a record), which are refused whole and
sent again."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.idempotence import ProducerSeq, stamp
from protocol.message import Message
from protocol.pop import REVIVE_TOPIC
from protocol.timer import PROP_REAL_QUEUE_ID, PROP_REAL_TOPIC, PROP_TIMER_OUT_MS, TIMER_TOPIC
from protocol.transaction import HALF_TOPIC, OP_TOPIC
from storage.errors import CorruptRecordError
from storage.store import MessageStore
from tests.hypothesis_profiles import examples
from tests.storage.support import open_store

NOW = 1_700_000_000_000
TOPICS = ("Orders", "Audit", TIMER_TOPIC, REVIVE_TOPIC, HALF_TOPIC, OP_TOPIC)
OPTIONS = {
    "filter_index": True,
    "index_slots": 64,
    "index_max_entries": 40,
    "index_file_span_ms": 50,
    "commitlog_segment_bytes": 16 * 1024,
}


@dataclass(frozen=True)
class Put:
    topic: str
    queue_id: int
    at: int
    messages: list[Message]


def _system_properties(topic: str, i: int) -> dict[str, str]:
    if topic == TIMER_TOPIC:
        return {PROP_TIMER_OUT_MS: str(NOW + 1000 * i), PROP_REAL_TOPIC: "Orders"}
    if topic in (HALF_TOPIC, OP_TOPIC):
        return {"TRAN_MSG": "true", "PGROUP": "pg", PROP_REAL_QUEUE_ID: str(i % 3)}
    return {}


@st.composite
def puts(draw: st.DrawFn) -> list[Put]:
    out: list[Put] = []
    at = NOW
    for i in range(draw(st.integers(1, 14))):
        topic = draw(st.sampled_from(TOPICS))
        at += draw(st.sampled_from((0, 0, 1, 7, 60)))
        batch: list[Message] = []
        for j in range(draw(st.integers(1, 6))):
            keys = draw(st.sampled_from(("", "k", f"k{i}", f"a{j} b{j} a{j}", " ", "x  y")))
            props = _system_properties(topic, j)
            props.update(
                draw(
                    st.dictionaries(
                        st.sampled_from(("k", "region", "UNIQ_KEY", "n", "é")),
                        st.sampled_from(("1", "eu", "2.5", "", f"u{i}-{j}", "ü")),
                        max_size=3,
                    )
                )
            )
            body = draw(st.binary(min_size=0, max_size=300))
            tags = draw(st.sampled_from(("", "TagA", "TagB")))
            batch.append(Message(topic=topic, body=body, tags=tags, keys=keys, properties=props))
        if draw(st.booleans()):  # an idempotent producer's request: __PSEQ in each record
            stamp(batch, ProducerSeq(draw(st.integers(0, 99)), 0, draw(st.integers(0, 120))))
        out.append(Put(topic, draw(st.integers(0, 2)), at, batch))
    return out


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(root)): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def _digests(store: MessageStore) -> dict[tuple[str, int], list[tuple[int, int, int, int]]]:
    out: dict[tuple[str, int], list[tuple[int, int, int, int]]] = {}
    for queue in store._queues:
        d = queue.digests
        assert d is not None
        out[(queue.topic, queue.queue_id)] = [
            (d.base + i, d.physical[i], d.lo[i], d.hi[i]) for i in range(len(d))
        ]
    return out


def _replicate(master: MessageStore, slave: MessageStore, cuts: list[int]) -> int:
    """Send the master's CommitLog to the slave in chunks of the sizes ``cuts`` gives in turn
    (each read as whole records); a copy of every other chunk torn inside its last record is
    sent first and must be refused with nothing written. Returns how many torn chunks were refused."""
    torn = 0
    pos = 0
    turn = 0
    while pos < master.max_offset:
        want = cuts[turn % len(cuts)]
        turn += 1
        data = bytes(master.read_raw(pos, want))
        if turn % 2:
            last = 0  # the last record's start: the copy is cut inside it
            while last + int.from_bytes(data[last : last + 4], "big") < len(data):
                last += int.from_bytes(data[last : last + 4], "big")
            cut = last + 1 + cuts[turn % len(cuts)] % (len(data) - last - 1)
            before = slave.max_offset
            with pytest.raises(CorruptRecordError):
                slave.append_raw(pos, data[:cut])
            assert slave.max_offset == before
            torn += 1
        slave.append_raw(pos, data)
        pos += len(data)
    return torn


def _replay_and_rebuild(root: Path, batches: list[Put], cuts: list[int]) -> dict[str, bytes]:
    """The master's log replayed batch-wise by a slave and rebuilt record by record by a third
    store from the slave's CommitLog: their queues' digests, ConsumeQueue and key index files
    must be equal. Returns the slave's key index files."""
    master = open_store(root / "master", **OPTIONS)
    slave = open_store(root / "slave", **OPTIONS)
    for put in batches:
        master.put(put.topic, put.queue_id, put.messages, put.at)
    _replicate(master, slave, cuts)
    assert slave.max_offset == master.max_offset
    batch_digests = _digests(slave)
    master.close()
    slave.close()
    (root / "rebuilt" / "commitlog").mkdir(parents=True)
    for path in (root / "slave" / "commitlog").iterdir():
        (root / "rebuilt" / "commitlog" / path.name).write_bytes(path.read_bytes())
    rebuilt = open_store(root / "rebuilt", **OPTIONS)
    assert rebuilt.max_offset == master.max_offset
    assert batch_digests == _digests(rebuilt)
    rebuilt.close()
    for part in ("consumequeue", "index"):
        replayed = _files(root / "slave" / part)
        assert replayed, part
        assert replayed == _files(root / "rebuilt" / part), part
    return _files(root / "slave" / "index")


@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(puts(), st.lists(st.integers(1, 6000), min_size=1, max_size=6))
def test_a_batch_replay_writes_what_the_per_record_path_writes(
    batches: list[Put], cuts: list[int]
) -> None:
    with tempfile.TemporaryDirectory(prefix="replay-batch-") as tmp:
        _replay_and_rebuild(Path(tmp), batches, cuts)


def test_the_key_index_of_a_batch_replay_rolls_its_files_as_a_per_record_one(
    tmp_path: Path,
) -> None:
    """Keyed records of one store timestamp (one put) fill several small key index files,
    and puts further apart than a file's span seal them."""
    batches = [
        Put(
            "Orders",
            i % 2,
            NOW + i * 30,
            [Message(topic="Orders", body=b"b", keys=f"k{i}-{j} x{j}") for j in range(32)],
        )
        for i in range(6)
    ]
    index_files = _replay_and_rebuild(tmp_path, batches, [1 << 20, 3000])
    assert len(index_files) > 4
