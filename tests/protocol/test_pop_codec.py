"""Receipt handles and revive log records: round trips, and every damaged handle refused."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.pop import (
    Ack,
    Change,
    Checkpoint,
    HandleError,
    HandleKey,
    ReceiptHandle,
    Revived,
    ReviveRecordError,
    decode_handle,
    decode_revive_record,
    encode_handle,
    encode_revive_record,
)

KEY = HandleKey(bytes(range(32)))
OTHER_KEY = HandleKey(bytes(32))
HANDLE = ReceiptHandle("broker-a", "g1", "TopicA", 3, 1234, 1_700_000_000_000, 30_000, 98765)

names = st.text(
    alphabet=st.characters(min_codepoint=33, max_codepoint=0x2FF), min_size=1, max_size=40
)


@given(
    broker=names,
    group=names,
    topic=names,
    queue_id=st.integers(0, 65535),
    offset=st.integers(0, 2**62),
    pop_ms=st.integers(0, 2**50),
    invisible=st.integers(0, 2**32 - 1),
    ck=st.integers(0, 2**62),
)
def test_handle_round_trip(
    broker: str,
    group: str,
    topic: str,
    queue_id: int,
    offset: int,
    pop_ms: int,
    invisible: int,
    ck: int,
) -> None:
    handle = ReceiptHandle(broker, group, topic, queue_id, offset, pop_ms, invisible, ck)
    text = encode_handle(handle, KEY)
    assert text.isascii() and "=" not in text
    assert decode_handle(text, KEY, broker) == handle


@given(st.data())
def test_any_altered_byte_fails_the_signature(data: st.DataObject) -> None:
    raw = bytearray(base64.urlsafe_b64decode(encode_handle(HANDLE, KEY) + "=="))
    i = data.draw(st.integers(0, len(raw) - 1))
    raw[i] ^= data.draw(st.integers(1, 255))
    text = base64.urlsafe_b64encode(bytes(raw)).decode().rstrip("=")
    with pytest.raises(HandleError):
        decode_handle(text, KEY, "broker-a")


@given(st.data())
def test_every_truncation_is_refused(data: st.DataObject) -> None:
    text = encode_handle(HANDLE, KEY)
    cut = data.draw(st.integers(0, len(text) - 1))
    with pytest.raises(HandleError):
        decode_handle(text[:cut], KEY, "broker-a")


def test_foreign_and_forged_handles_say_why() -> None:
    text = encode_handle(HANDLE, KEY)
    with pytest.raises(HandleError, match="issued by broker broker-a, this is broker-b"):
        decode_handle(text, KEY, "broker-b")
    with pytest.raises(HandleError, match="signature"):
        decode_handle(encode_handle(HANDLE, OTHER_KEY), KEY, "broker-a")
    with pytest.raises(HandleError, match="signature"):
        decode_handle(text, None, "broker-a")
    with pytest.raises(HandleError, match="base64"):
        decode_handle("not a handle!", KEY, "broker-a")
    with pytest.raises(HandleError, match="empty"):
        decode_handle("", KEY, "broker-a")


checkpoints = st.builds(
    lambda g, t, q, start, count, bits, pop_ms, inv: Checkpoint(
        g,
        t,
        q,
        start,
        count,
        tuple(start + i for i in range(count) if bits >> i & 1),
        pop_ms,
        inv,
    ),
    names,
    names,
    st.integers(0, 65535),
    st.integers(0, 2**60),
    st.integers(1, 1024),
    st.integers(0, 2**1024 - 1),
    st.integers(0, 2**50),
    st.integers(0, 2**32 - 1),
)
pairs = st.lists(st.tuples(st.integers(0, 2**62), st.integers(0, 2**62)), max_size=50).map(tuple)
records = st.one_of(
    checkpoints,
    pairs.map(Ack),
    pairs.map(Revived),
    st.builds(Change, st.integers(0, 2**62), st.integers(0, 2**62), st.integers(0, 2**62)),
    st.binary(min_size=32, max_size=32).map(HandleKey),
)


@given(records)
def test_revive_records_round_trip(record: object) -> None:
    assert decode_revive_record(encode_revive_record(record)) == record  # type: ignore[arg-type]


@given(records, st.data())
def test_truncated_revive_records_are_refused(record: object, data: st.DataObject) -> None:
    body = encode_revive_record(record)  # type: ignore[arg-type]
    cut = data.draw(st.integers(0, len(body) - 1))
    with pytest.raises(ReviveRecordError):
        decode_revive_record(body[:cut])


def test_unknown_kind_is_refused() -> None:
    with pytest.raises(ReviveRecordError, match="kind 99"):
        decode_revive_record(b"\x63")
