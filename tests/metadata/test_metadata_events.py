"""Events of the controller log: field checks, deterministic codec, garbage never escapes."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.metadata import (
    AlterSyncStateSet,
    ApplyBrokerId,
    CleanBrokerData,
    DeleteTopic,
    ElectMaster,
    Event,
    EventDecodeError,
    UpdateBrokerAddress,
    UpdateTopic,
    decode_event,
    encode_event,
)
from controller.metadata.events import MAX_EVENT_BYTES, MAX_ID, MAX_NAME_CHARS
from tests.hypothesis_profiles import examples

names = st.text(min_size=1, max_size=20)
texts = st.text(max_size=40)
ids = st.integers(min_value=1, max_value=MAX_ID)
epochs = st.integers(min_value=0, max_value=MAX_ID)
id_sets = st.frozensets(ids, min_size=1, max_size=8)

events: st.SearchStrategy[Event] = st.one_of(
    st.builds(
        ApplyBrokerId,
        cluster=names,
        broker_name=names,
        broker_id=ids,
        register_code=texts,
        address=texts,
    ),
    st.builds(UpdateBrokerAddress, cluster=names, broker_name=names, broker_id=ids, address=texts),
    st.builds(
        ElectMaster,
        broker_name=names,
        new_master_broker_id=st.none() | ids,
        master_epoch=epochs,
        sync_state_set_epoch=epochs,
    ),
    st.builds(
        AlterSyncStateSet,
        broker_name=names,
        master_broker_id=ids,
        master_epoch=epochs,
        sync_state_set_epoch=epochs,
        new_sync_state_set=id_sets,
    ),
    st.builds(CleanBrokerData, broker_name=names, broker_ids=st.none() | id_sets),
    st.builds(
        UpdateTopic,
        broker_name=names,
        topic=st.text(alphabet="abcXYZ019-_%", min_size=1, max_size=127),
        queues=st.integers(1, 1024),
    ),
    st.builds(DeleteTopic, topic=st.text(alphabet="abcXYZ019-_%", min_size=1, max_size=127)),
)


@given(events)
def test_every_event_round_trips_through_the_codec(event: Event) -> None:
    data = encode_event(event)
    assert decode_event(data) == event
    assert encode_event(decode_event(data)) == data


def test_equal_events_encode_to_equal_bytes_whatever_the_set_order() -> None:
    def alter(members: list[int]) -> AlterSyncStateSet:
        return AlterSyncStateSet(
            broker_name="b",
            master_broker_id=1,
            master_epoch=2,
            sync_state_set_epoch=3,
            new_sync_state_set=frozenset(members),
        )

    a, b = alter([3, 1, 2, 100, 7]), alter([7, 100, 2, 1, 3])
    assert encode_event(a) == encode_event(b)
    assert msgpack.unpackb(encode_event(a))[-1] == [1, 2, 3, 7, 100]


@pytest.mark.parametrize(
    "make",
    [
        lambda: ApplyBrokerId(cluster="c", broker_name="b", broker_id=0, register_code="x"),
        lambda: ApplyBrokerId(cluster="c", broker_name="b", broker_id=True, register_code="x"),
        lambda: ApplyBrokerId(cluster="", broker_name="b", broker_id=1, register_code="x"),
        lambda: ApplyBrokerId(
            cluster="c", broker_name="b" * (MAX_NAME_CHARS + 1), broker_id=1, register_code="x"
        ),
        lambda: ApplyBrokerId(cluster="c", broker_name="b", broker_id=1, register_code=5),  # type: ignore[arg-type]
        lambda: UpdateBrokerAddress(cluster="c", broker_name="b", broker_id=MAX_ID + 1, address=""),
        lambda: ElectMaster(
            broker_name="b", new_master_broker_id=1, master_epoch=-1, sync_state_set_epoch=0
        ),
        lambda: AlterSyncStateSet(
            broker_name="b",
            master_broker_id=1,
            master_epoch=0,
            sync_state_set_epoch=0,
            new_sync_state_set=frozenset(),
        ),
        lambda: AlterSyncStateSet(
            broker_name="b",
            master_broker_id=1,
            master_epoch=0,
            sync_state_set_epoch=0,
            new_sync_state_set={1},  # type: ignore[arg-type]
        ),
        lambda: CleanBrokerData(broker_name="b", broker_ids=frozenset()),
        lambda: CleanBrokerData(broker_name="b", broker_ids=frozenset({0})),
        lambda: UpdateTopic(broker_name="b", topic="T", queues=0),
        lambda: UpdateTopic(broker_name="b", topic="T", queues=1025),
        lambda: UpdateTopic(broker_name="b", topic="T", queues=True),
        lambda: UpdateTopic(broker_name="b", topic="", queues=1),
        lambda: UpdateTopic(broker_name="b", topic="a b", queues=1),
        lambda: UpdateTopic(broker_name="b", topic="T" * 128, queues=1),
    ],
)
def test_events_refuse_malformed_fields(make: Any) -> None:
    with pytest.raises((TypeError, ValueError)):
        make()


def test_events_are_frozen_and_keyword_only() -> None:
    event = CleanBrokerData(broker_name="b")
    with pytest.raises(AttributeError):
        event.broker_name = "c"  # type: ignore[misc]
    with pytest.raises(TypeError):
        CleanBrokerData("b")  # type: ignore[call-arg]


def _packed(obj: Any) -> bytes:
    data: bytes = msgpack.packb(obj, use_bin_type=True)
    return data


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\xc1",
        b"\x93\x01",  # truncated array
        _packed([]),
        _packed({"tag": 1}),
        _packed("ApplyBrokerId"),
        _packed([99, "b"]),
        _packed([True, "c", "b", 1, "code", ""]),
        _packed([1, "c", "b", 1, "code"]),  # arity
        _packed([1, "c", "b", 1, "code", "", "extra"]),
        _packed([1, "c", "b", 0, "code", ""]),  # id below 1
        _packed([1, "c", "b", True, "code", ""]),  # bool is not an id
        _packed([1, "c", "b", 1.0, "code", ""]),
        _packed([1, "c", "", 1, "code", ""]),
        _packed([1, b"c", "b", 1, "code", ""]),  # bytes are not a name
        _packed([2, "c", "b", 2**64 - 1, ""]),  # beyond int64
        _packed([3, "b", 1, -1, 0]),
        _packed([3, "b", "1", 0, 0]),
        _packed([4, "b", 1, 0, 0, [2, 1]]),  # not ascending
        _packed([4, "b", 1, 0, 0, [1, 1]]),  # duplicate
        _packed([4, "b", 1, 0, 0, []]),
        _packed([4, "b", 1, 0, 0, None]),
        _packed([5, "b", []]),
        _packed([5, "b", "1;2"]),
        _packed([5, "b", None]) + b"\x00",  # trailing bytes
        b"\x00" * (MAX_EVENT_BYTES + 1),
    ],
)
def test_garbage_raises_event_decode_error(data: bytes) -> None:
    with pytest.raises(EventDecodeError):
        decode_event(data)


def test_non_bytes_raise_event_decode_error() -> None:
    with pytest.raises(EventDecodeError):
        decode_event("not bytes")  # type: ignore[arg-type]


def _decode_or_error(data: bytes) -> None:
    try:
        event = decode_event(data)
    except EventDecodeError:
        return
    # What decodes is a valid event: it encodes, and decodes back to itself (the bytes may
    # differ from ``data``: msgpack has several spellings of one value).
    assert decode_event(encode_event(event)) == event


@settings(max_examples=examples(300))
@given(st.binary(max_size=200))
def test_random_bytes_only_ever_raise_event_decode_error(data: bytes) -> None:
    _decode_or_error(data)


msgpack_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=10)
    | st.binary(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=7) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=20,
)


@settings(max_examples=examples(300))
@given(st.integers(min_value=0, max_value=6), st.lists(msgpack_values, max_size=7))
def test_well_formed_msgpack_of_the_wrong_shape_raises_event_decode_error(
    tag: int, fields: list[Any]
) -> None:
    _decode_or_error(_packed([tag, *fields]))


@settings(max_examples=examples(300))
@given(events, st.data())
def test_corrupted_encodings_only_ever_raise_event_decode_error(event: Event, data: Any) -> None:
    encoded = bytearray(encode_event(event))
    position = data.draw(st.integers(min_value=0, max_value=len(encoded) - 1))
    encoded[position] = data.draw(st.integers(min_value=0, max_value=255))
    cut = data.draw(st.integers(min_value=0, max_value=len(encoded)))
    _decode_or_error(bytes(encoded[:cut]))
    _decode_or_error(bytes(encoded))
