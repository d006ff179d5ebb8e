"""A slave's replay describes an idempotent producer's records once per topic and properties,
not once per record (``protocol.message.seq_blind``): their tails differ in the ``__PSEQ``
value alone, which neither the key index nor the filter index reads. Before, each such record
missed the replay's tail cache and was decoded on its own (about 0.3 µs more a record, and the
cache cleared every 4,096 records). What the replay writes for them is checked against the
per-record path in tests/storage/test_replay_batch.py, whose batches carry the property too."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from protocol.idempotence import ProducerSeq, stamp
from protocol.message import (
    Message,
    RecordEncoder,
    seq_blind,
    seq_value_at,
    seq_value_span,
    tag_hash,
)
from storage.dispatch import Replayer, Scan
from storage.queues import ConsumeQueues
from storage.tracker import FileTracker
from tests.storage.support import open_store

_U16 = struct.Struct(">H")


def _tail(topic: str, props: bytes) -> bytes:
    raw = topic.encode()
    return _U16.pack(len(raw)) + raw + _U16.pack(len(props)) + props


def test_a_tail_without_the_property_has_no_blind_form() -> None:
    assert seq_blind(_tail("Orders", b"")) is None
    assert seq_blind(_tail("Orders", b"TAGS\x01a\x02KEYS\x01k\x02")) is None


def test_the_blind_form_drops_the_value_alone_wherever_the_property_stands() -> None:
    first = _tail("Orders", b"__PSEQ\x017.0.12.0.1\x02TAGS\x01a\x02")
    assert seq_blind(first) == first.replace(b"7.0.12.0.1", b"")
    last = _tail("Orders", b"TAGS\x01a\x02__PSEQ\x017.0.12.0.1")
    assert seq_blind(last) == last.replace(b"7.0.12.0.1", b"")
    # two records of one producer, sequences of the same length: one blind form
    assert seq_blind(_tail("Orders", b"__PSEQ\x017.0.13.0.1\x02TAGS\x01a\x02")) == seq_blind(first)


@pytest.mark.parametrize(
    "props",
    [
        b"X__PSEQ\x017.0.1.0.1\x02",  # the name inside another property's name
        b"k\x01__PSEQ\x017.0.1.0.1\x02",  # inside another property's value
        b"__PSEQ\x017.0.x.0.1\x02",  # a value no broker writes
        b"__PSEQ\x01\xff\xfe\x02",  # not UTF-8: described on its own, refused there
    ],
)
def test_a_property_not_written_by_a_broker_is_not_made_blind(props: bytes) -> None:
    assert seq_blind(_tail("Orders", props)) is None


def test_a_tail_whose_lengths_do_not_add_up_is_not_made_blind() -> None:
    """So a forged record (a good CRC over a bad layout) is described, and refused, on its own
    even after a good one of the same blind form was remembered."""
    good = _tail("Orders", b"__PSEQ\x017.0.1.0.1\x02")
    bad = good.replace(b"7.0.1.0.1", b"7.0.10.0.1")  # the properties' length left as it was
    assert seq_blind(good) is not None
    assert seq_blind(bad) is None


def test_the_value_s_span_and_the_replay_s_shortcut_check() -> None:
    """The replay takes a tail as saying what the last idempotent record's said when it is as
    long, has the same bytes around the value and digits and dots in its place: then its
    blind form is the same."""
    first = _tail("Orders", b"__PSEQ\x017.0.12.0.1\x02TAGS\x01a\x02")
    span = seq_value_span(first)
    assert span is not None
    start, stop = span
    assert first[start:stop] == b"7.0.12.0.1"
    assert seq_value_at(first, start, stop)
    nxt = first.replace(b"7.0.12.0.1", b"7.0.13.0.1")
    assert seq_value_at(nxt, start, stop) and seq_blind(nxt) == seq_blind(first)
    assert not seq_value_at(first.replace(b"7.0.12.0.1", b"7.0.1x.0.1"), start, stop)
    last = _tail("Orders", b"TAGS\x01a\x02__PSEQ\x017.0.12.0.1\x02")
    assert seq_value_span(last) == (len(last) - 11, len(last) - 1)
    assert seq_value_span(_tail("Orders", b"TAGS\x01a\x02")) is None


_ENCODER = RecordEncoder("127.0.0.1:10911")


def _raw(props: list[dict[str, str]]) -> bytes:
    """One record a property set, queue 0 of ``Orders`` in order (encoded as they are: no
    broker's stamp)."""
    out = b""
    for i, p in enumerate(props):
        out += _ENCODER.encode(
            Message(topic="Orders", body=b"b%d" % i, properties=dict(p)),
            queue_id=0,
            queue_offset=i,
            physical_offset=len(out),
            store_timestamp=1_700_000_000_000 + i,
        )
    return out


def _alone(root: Path, data: bytes) -> list[tuple[int, int, int]]:
    """Each record's (tag hash, digest) described by a replayer that has seen no other."""
    pos = 0
    out: list[tuple[int, int, int]] = []
    while pos < len(data):
        size = int.from_bytes(data[pos : pos + 4], "big")
        _, one = _scan(root / str(pos), data, pos, pos + size)
        (run,) = one.queues.values()
        out.append((run.tag_hashes[0], run.digests_lo[0], run.digests_hi[0]))
        pos += size
    return out


def test_a_tail_as_long_and_alike_around_the_value_but_not_a_value_is_described_alone(
    tmp_path: Path,
) -> None:
    """The shortcut's cases: a tail that starts and ends as the last idempotent record's and
    is as long, but holds another property where the value was, says what it says (its tags),
    not what the last one said."""
    tagged = "__PSEQ\x011\x02TAGS\x01ab\x02"
    value = "7." + "1" * (len(tagged) - len("__PSEQ\x01\x02") - 2)  # as long as tagged's
    props = [
        {"__PSEQ": value},
        {"__PSEQ": "1", "TAGS": "ab"},  # same start, end and length: not a value inside
        {"__PSEQ": value.replace("1", "2")},  # the usual: the shortcut
        {"__PSEQ": "9.9", "TAGS": "ab"},
        {"__PSEQ": "8.8", "TAGS": "ab"},  # the shortcut, with a property after the value
        {"__PSEQ": "8.8", "TAGS": "ac"},  # same length and start, another end
    ]
    data = _raw(props)
    assert data.count(tagged.encode()) == 1
    replayer, scan = _scan(tmp_path / "together", data, 0, len(data))
    (run,) = scan.queues.values()
    together = list(zip(run.tag_hashes, run.digests_lo, run.digests_hi, strict=True))
    assert [t for t, _, _ in together] == [tag_hash(p.get("TAGS", "")) for p in props]
    assert together == _alone(tmp_path / "alone", data)
    # blind forms (the properties' length is in them): the value alone, TAGS ab after a
    # value of 1 and of 3 bytes, TAGS ac
    assert len(replayer._seq_tails) == 4


def _records(root: Path, count: int) -> bytes:
    """``count`` records of one idempotent producer on 4 queues of one topic, 3 keys in turn
    (sequences of 1 and 2 digits): 6 forms of tail without the sequence."""
    master = open_store(root / "master")
    try:
        for i in range(count):
            msgs = [Message(topic="Orders", body=b"b%d" % i, tags="TagA", keys=f"k{i % 3}")]
            stamp(msgs, ProducerSeq(7, 0, i // 4))
            master.put("Orders", i % 4, msgs, 1_700_000_000_000 + i)
        return bytes(master.read_raw(0, 1 << 20))
    finally:
        master.close()


def _scan(root: Path, data: bytes, start: int, limit: int) -> tuple[Replayer, Scan]:
    replayer = Replayer(ConsumeQueues(root, 64, FileTracker()), keys=True, digests=True)
    scan = replayer.scan(
        data, base=0, start=start, limit=limit, segment_end=len(data), zeros_end_data=True
    )
    assert scan.error is None
    return replayer, scan


def test_a_replay_describes_a_producer_s_records_once_per_form(tmp_path: Path) -> None:
    data = _records(tmp_path, 400)
    replayer, scan = _scan(tmp_path / "a", data, 0, len(data))
    assert scan.dispatched == 400
    assert len(replayer._tails) == 0
    assert len(replayer._seq_tails) == 6
    # what each record says, described by a replayer that has seen no other record
    pos = 0
    alone: dict[tuple[str, int], list[tuple[int, int, int]]] = {}
    keys: list[list[int]] = []
    while pos < len(data):
        size = int.from_bytes(data[pos : pos + 4], "big")
        _, one = _scan(tmp_path / "b" / str(pos), data, pos, pos + size)
        for key, run in one.queues.items():
            alone.setdefault(key, []).append(
                (run.tag_hashes[0], run.digests_lo[0], run.digests_hi[0])
            )
        keys.extend(one.key_hashes)
        pos += size
    together = {
        key: list(zip(run.tag_hashes, run.digests_lo, run.digests_hi, strict=True))
        for key, run in scan.queues.items()
    }
    assert together == alone
    assert scan.key_hashes == keys
