"""The per-message dataclasses that write their ``__init__`` out (docs/compiled.md) behave as the
dataclasses module's generated one did, in both builds: the same keywords and defaults (a fresh
dict or list for each object where a default_factory gave one), keyword-only where they were,
and the dataclass's eq, repr, hash, immutability (the frozen ones), ``replace`` and ``asdict``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from broker.ha.batch import Batch
from controller.metadata.heartbeat import BrokerLiveInfo
from protocol.idempotence import ProducerSeq
from protocol.message import Message, RecordInfo
from protocol.raft_types import (
    AppendEntries,
    AppendResponse,
    Entry,
    EntryType,
    HardState,
    Heartbeat,
    HeartbeatResponse,
    ReadIndexRequest,
    ReadIndexResponse,
    ReadState,
)
from protocol.remoting import Frame
from rmqbuild import hook
from storage.queue_write import SizedBatch
from storage.store import PutResult

ENTRY = Entry(term=2, index=7, type=EntryType.CONF_CHANGE, data=b"cc")

# Each class with every field given (by keyword), and whether the dataclass was frozen.
SAMPLES: list[tuple[Any, bool]] = [
    (Frame(kind=1, code=17, opaque=9, flags=2, header={"a": 1}, body=b"x"), False),
    (
        Message(
            topic="t",
            body=b"b",
            keys="k",
            tags="g",
            properties={"p": "v"},
            flag=3,
            born_timestamp=5,
            born_host="1.2.3.4:5",
            seq_property=b"s",
        ),
        False,
    ),
    (ProducerSeq(producer_id=7, epoch=2, sequence=41), True),
    (
        SizedBatch(
            props=[b"p"],
            hosts=[b"h"],
            sizes=[10],
            tag_hashes=[4],
            total=10,
            digests_lo=[5],
            digests_hi=[6],
        ),
        False,
    ),
    (
        RecordInfo(
            size=90,
            topic="t",
            queue_id=1,
            queue_offset=2,
            physical_offset=3,
            store_timestamp=4,
            tags_hash=5,
        ),
        True,
    ),
    (
        Batch(offset=1, epoch=2, epoch_start_offset=0, length=10, confirm_offset=1, max_length=20),
        True,
    ),
    (ENTRY, True),
    (HardState(term=3, vote="n1", commit=2), True),
    (ReadState(index=4, ctx=b"c"), True),
    (
        AppendEntries(
            src="a", dst="b", term=2, prev_log_index=6, prev_log_term=1, commit=5, entries=(ENTRY,)
        ),
        True,
    ),
    (
        AppendResponse(src="b", dst="a", term=2, index=7, reject=True, reject_hint=3, hint_term=1),
        True,
    ),
    (Heartbeat(src="a", dst="b", term=2, commit=5, read_seq=8), True),
    (HeartbeatResponse(src="b", dst="a", term=2, read_seq=8), True),
    (ReadIndexRequest(src="b", dst="a", term=2, ctx=b"r"), True),
    (ReadIndexResponse(src="a", dst="b", term=2, ctx=b"r", index=9), True),
    (
        PutResult(
            queue_id=1,
            first_queue_offset=10,
            count=2,
            physical_offsets=[100, 200],
            end_offset=300,
            store_timestamp=7,
        ),
        False,
    ),
    (
        BrokerLiveInfo(
            cluster="c",
            broker_name="broker-a",
            broker_id=2,
            address="127.0.0.1:10911",
            epoch=3,
            max_offset=4096,
            confirm_offset=2048,
            election_priority=1,
            timeout_ms=1000,
            connection_id=5,
            last_heartbeat_ms=1234,
            damaged=1,
        ),
        True,
    ),
]
IDS = [type(obj).__name__ for obj, _ in SAMPLES]


def values(obj: Any) -> dict[str, Any]:
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}


@pytest.mark.parametrize(("obj", "frozen"), SAMPLES, ids=IDS)
def test_the_init_is_the_written_one(obj: Any, frozen: bool) -> None:
    # The point of writing it: the dataclasses module's __init__ is Python it generates (its code
    # named __create_fn__.<locals>.__init__), which a compiled class would still be built
    # through. Compiled, the written one is native: no Python code object at all.
    code = getattr(type(obj).__init__, "__code__", None)
    if hook.compiled_modules():
        assert code is None
    else:
        assert code is not None
        assert code.co_qualname == f"{type(obj).__name__}.__init__"


@pytest.mark.parametrize(("obj", "frozen"), SAMPLES, ids=IDS)
def test_fields_round_trip_through_the_keywords(obj: Any, frozen: bool) -> None:
    cls = type(obj)
    again = cls(**values(obj))
    assert again == obj
    assert again is not obj
    assert values(again) == values(obj)
    assert dataclasses.asdict(again) == dataclasses.asdict(obj)
    field = dataclasses.fields(obj)[-1].name
    changed = dataclasses.replace(obj, **{field: getattr(obj, field) * 2})
    assert getattr(changed, field) == getattr(obj, field) * 2
    assert changed != obj
    assert values(changed) == {**values(obj), field: getattr(obj, field) * 2}
    assert obj != object()
    assert obj != (*values(obj).values(),)


@pytest.mark.parametrize(("obj", "frozen"), SAMPLES, ids=IDS)
def test_repr_is_the_dataclass_one(obj: Any, frozen: bool) -> None:
    shown = ", ".join(f"{name}={value!r}" for name, value in values(obj).items())
    assert repr(obj) == f"{type(obj).__qualname__}({shown})"


@pytest.mark.parametrize(("obj", "frozen"), SAMPLES, ids=IDS)
def test_frozen_ones_are_immutable_and_hashable(obj: Any, frozen: bool) -> None:
    field = dataclasses.fields(obj)[0].name
    if frozen:
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(obj, field, getattr(obj, field))
        assert hash(obj) == hash(type(obj)(**values(obj)))
        assert {obj, type(obj)(**values(obj))} == {obj}
    else:
        with pytest.raises(TypeError):
            hash(obj)
        before = getattr(obj, field)
        setattr(obj, field, before)
        assert getattr(obj, field) is before


@pytest.mark.parametrize(("obj", "frozen"), SAMPLES, ids=IDS)
def test_defaults_are_the_fields_defaults(obj: Any, frozen: bool) -> None:
    cls = type(obj)
    required = {
        f.name: getattr(obj, f.name)
        for f in dataclasses.fields(obj)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }
    one, two = cls(**required), cls(**required)
    for f in dataclasses.fields(obj):
        if f.name in required:
            continue
        if f.default_factory is not dataclasses.MISSING:
            assert getattr(one, f.name) == f.default_factory()
            assert getattr(one, f.name) is not getattr(two, f.name)  # a fresh one each time
        else:
            assert getattr(one, f.name) == f.default
            assert type(getattr(one, f.name)) is type(f.default)


@pytest.mark.parametrize(("obj", "frozen"), SAMPLES, ids=IDS)
def test_keyword_only_where_the_dataclass_was(obj: Any, frozen: bool) -> None:
    cls = type(obj)
    params = dataclasses.fields(obj)
    positional = list(values(obj).values())
    if all(f.kw_only for f in params):
        with pytest.raises(TypeError):
            cls(*positional)
    else:
        assert cls(*positional) == obj
    with pytest.raises(TypeError):
        cls(**values(obj), not_a_field=1)
    first = params[0]
    if first.default is dataclasses.MISSING and first.default_factory is dataclasses.MISSING:
        with pytest.raises(TypeError):
            cls(**{k: v for k, v in values(obj).items() if k != first.name})
