"""An idempotent send's records are the same bytes whether its ``__PSEQ`` travels in the
message's property dict (as the broker wrote it before) or encoded beside it
(:attr:`protocol.message.Message.seq_property`, what :meth:`ProducerSequences.stamp` sets on a
message without properties of its own): every reader of the CommitLog (slaves, recovery, the
idempotence rebuild, the fronts, Spark, the property filter index) sees what it saw before."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from broker.send.idempotence import ProducerSequences
from protocol.idempotence import (
    PROP_PRODUCER_SEQ,
    ProducerSeq,
    parse_record_seq,
    record_seq_value,
    seq_head,
    seq_property,
    stamp,
)
from protocol.message import Message, decode_record, encode_properties, message_copy
from storage.queue_write import RecordSizer
from tests.storage.support import open_store

texts = st.text(alphabet="abcXYZ019 -_.", max_size=12)
SEQ = ProducerSeq(1278463013718893586, 3, 41)


def dict_stamped(messages: list[Message], seq: ProducerSeq) -> list[Message]:
    """The messages as the broker stamped them before: the value in the property dict."""
    out = []
    n = len(messages)
    for i, m in enumerate(messages):
        props = dict(m.properties)
        props[PROP_PRODUCER_SEQ] = record_seq_value(seq, i, n)
        out.append(message_copy(m, m.topic, props))
    return out


def stamped(messages: list[Message], seq: ProducerSeq, window_head: bool = False) -> list[Message]:
    """Stamped as the broker stamps them: ``window_head``, with the head the usual send's
    window keeps (:func:`seq_head`), as the send service does; else formatted for them."""
    out = [message_copy(m, m.topic, dict(m.properties)) for m in messages]
    if window_head:
        stamp(out, seq, seq_head(seq.producer_id, seq.epoch))
    else:
        ProducerSequences.stamp(out, seq)
    return out


def test_the_encoded_property_is_the_dict_encoding() -> None:
    for value in ("1.0.0.0.1", record_seq_value(SEQ, 63, 64)):
        assert seq_property(value) == encode_properties({PROP_PRODUCER_SEQ: value})


@given(
    st.lists(
        st.tuples(st.dictionaries(texts.filter(bool), texts, max_size=3), texts, texts),
        min_size=1,
        max_size=5,
    ),
    st.builds(
        ProducerSeq, st.integers(0, 2**63 - 1), st.integers(0, 2**31 - 1), st.integers(0, 2**63 - 1)
    ),
    st.booleans(),
)
def test_stamped_properties_encode_as_the_dict_did(
    parts: list[tuple[dict[str, str], str, str]], seq: ProducerSeq, window_head: bool
) -> None:
    messages = [Message(topic="T", body=b"x", keys=k, tags=t, properties=p) for p, k, t in parts]
    sizer = RecordSizer(4 * 1024 * 1024)
    before = sizer.size(b"T", dict_stamped(messages, seq))
    after = sizer.size(b"T", stamped(messages, seq, window_head))
    assert after.props == before.props
    assert after.sizes == before.sizes and after.tag_hashes == before.tag_hashes


def test_requests_of_every_size_stamp_their_own_values() -> None:
    """A request's records take their ends from a cache per request size (up to 8 sizes of up
    to 1,024 records, all dropped when a ninth comes): sizes past it, again after it was
    dropped, and too long to cache stamp what :func:`record_seq_value` says, in a request with
    properties of its own among them too."""
    for window_head in (False, True):
        for n in (1, *range(2, 12), 2, 64, 1024, 1025, 3):
            messages = stamped([Message(topic="T", body=b"x") for _ in range(n)], SEQ, window_head)
            assert [m.seq_property for m in messages] == [
                seq_property(record_seq_value(SEQ, i, n)) for i in range(n)
            ]
        for n in (1, 7):
            own = [(i + n) % 3 != 0 for i in range(n)]  # n = 1: a single send with its own
            mixed = stamped(
                [Message(topic="T", body=b"x", properties={"c": "r"} if o else {}) for o in own],
                SEQ,
                window_head,
            )
            for i, m in enumerate(mixed):
                value = record_seq_value(SEQ, i, n)
                if own[i]:
                    assert m.properties[PROP_PRODUCER_SEQ] == value and m.seq_property == b""
                else:
                    assert m.seq_property == seq_property(value)
                    assert PROP_PRODUCER_SEQ not in m.properties


def test_records_in_the_commitlog_are_byte_identical(tmp_path: Path) -> None:
    """Whole records, CRC included, in two real stores: single sends and a batch, with and
    without properties of their own, keys and tags."""
    sends = [
        [Message(topic="T", body=b"plain", born_timestamp=7, born_host="10.0.0.1:9")],
        [Message(topic="T", body=b"keyed", keys="k1 k2", tags="red", born_timestamp=8)],
        [Message(topic="T", body=b"own", properties={"color": "c0"}, tags="t")],
        [
            Message(topic="T", body=b"b0", keys="a"),
            Message(topic="T", body=b"b1", properties={"UNIQ_KEY": "U1"}),
            Message(topic="T", body=b"b2", properties={"KEYS": "pk"}, tags="t2"),
        ],
    ]
    old = open_store(tmp_path / "old")
    new = open_store(tmp_path / "new")
    try:
        for n, send in enumerate(sends):
            seq = ProducerSeq(9, 1, n)
            a = old.put("T", 0, dict_stamped(send, seq), 1000 + n)
            b = new.put("T", 0, stamped(send, seq, window_head=n % 2 == 0), 1000 + n)
            assert a.physical_offsets == b.physical_offsets
        assert old.max_offset == new.max_offset
        raw = bytes(old.read_raw(0, old.max_offset))
        assert bytes(new.read_raw(0, new.max_offset)) == raw
        # and they say what the rebuild reads
        offsets = [o for send in sends for o in range(len(send))]
        pos = 0
        seen = []
        for _ in offsets:
            record = decode_record(raw, pos)
            value = record.producer_seq
            assert value is not None
            seen.append(parse_record_seq(value).seq.sequence)
            pos += record.size
        assert seen == [0, 1, 2, 3, 3, 3]
    finally:
        old.close()
        new.close()
