"""protocol.raft: every message round-trips; garbage only ever raises ProtocolError."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.raft import (
    MAX_COUNTER,
    MESSAGE_TYPES,
    AppendEntries,
    AppendResponse,
    ConfState,
    Entry,
    EntryType,
    Heartbeat,
    HeartbeatResponse,
    InstallSnapshot,
    InstallSnapshotAck,
    Message,
    ReadIndexRequest,
    ReadIndexResponse,
    SnapshotMeta,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
)
from protocol.raft import MAX_CTX_BYTES, decode, encode, from_wire, to_wire
from protocol.remoting import ProtocolError

META = SnapshotMeta(index=40, term=3, conf_state=ConfState(voters=("n0", "n1"), learners=("n9",)))
ENTRIES = (
    Entry(term=2, index=7, type=EntryType.NOOP),
    Entry(term=2, index=8, data=b"x" * 100),
    Entry(term=3, index=9, type=EntryType.CONF_CHANGE, data=b"\x01\x00\x01\x00\x02n3"),
)

EXAMPLES: list[Message] = [
    VoteRequest(src="n0", dst="n1", term=5, last_log_index=9, last_log_term=4),
    VoteRequest(
        src="n0", dst="n1", term=6, last_log_index=9, last_log_term=4, pre_vote=True, transfer=True
    ),
    VoteResponse(src="n1", dst="n0", term=5, granted=True),
    VoteResponse(src="n1", dst="n0", term=6, granted=False, pre_vote=True),
    AppendEntries(src="n0", dst="n2", term=3, prev_log_index=6, prev_log_term=2, commit=5),
    AppendEntries(
        src="n0", dst="n2", term=3, prev_log_index=6, prev_log_term=2, commit=5, entries=ENTRIES
    ),
    AppendResponse(src="n2", dst="n0", term=3, index=9),
    AppendResponse(src="n2", dst="n0", term=3, index=6, reject=True, reject_hint=4, hint_term=1),
    Heartbeat(src="n0", dst="n1", term=3, commit=9, read_seq=17),
    HeartbeatResponse(src="n1", dst="n0", term=3, read_seq=17),
    InstallSnapshot(src="n0", dst="n1", term=3, meta=META, offset=1024, data=b"abc", done=False),
    InstallSnapshot(src="n0", dst="n1", term=3, meta=SnapshotMeta(), offset=0, data=b"", done=True),
    InstallSnapshotAck(src="n1", dst="n0", term=3, snapshot_index=40, offset=2048),
    TimeoutNow(src="n0", dst="n1", term=3),
    ReadIndexRequest(src="n1", dst="n0", term=3, ctx=b"req-1"),
    ReadIndexResponse(src="n0", dst="n1", term=3, ctx=b"req-1", index=9),
]


def test_every_message_type_has_an_example() -> None:
    assert {type(m) for m in EXAMPLES} == set(MESSAGE_TYPES)


@pytest.mark.parametrize("message", EXAMPLES, ids=lambda m: type(m).__name__)
def test_round_trip(message: Message) -> None:
    assert decode(encode(message)) == message
    assert from_wire(to_wire(message)) == message


@pytest.mark.parametrize("message", EXAMPLES, ids=lambda m: type(m).__name__)
def test_every_truncation_is_a_protocol_error(message: Message) -> None:
    raw = encode(message)
    for cut in range(len(raw)):
        with pytest.raises(ProtocolError):
            decode(raw[:cut])


@pytest.mark.parametrize(
    "obj",
    [
        None,
        [],
        [0, "n0", "n1"],
        [99, "n0", "n1", 1],
        [-1, "n0", "n1", 1],
        [8, "n0", "n1", -1],
        [8, "", "n1", 1],
        [8, "n0", 5, 1],
        [8, "x" * 256, "n1", 1],
        [8, "n0", "n1", 1.5],
        [8, "n0", "n1", 1, "extra"],
        [0, "n0", "n1", 1, 2, 3, "yes", False],
        [1, "n0", "n1", 1, 1, 0],
        [2, "n0", "n1", 1, 0, 0, 0, [[1, 2, 3]]],
        [2, "n0", "n1", 1, 0, 0, 0, [[1, 2, 9, b""]]],
        [2, "n0", "n1", 1, 0, 0, 0, [[1, 2, 0, "text"]]],
        [2, "n0", "n1", 1, 0, 0, 0, [[1, 2, 0, b""], [1, 4, 0, b""]]],
        [6, "n0", "n1", 1, [1, 1, ["a"], ["a"]], 0, b"", True],
        [6, "n0", "n1", 1, [1, 1, "a", []], 0, b"", True],
        [9, "n0", "n1", 1, "not bytes"],
    ],
)
def test_malformed_documents_are_rejected(obj: object) -> None:
    with pytest.raises(ProtocolError):
        decode(msgpack.packb(obj, use_bin_type=True))


# Every integer field, at the first value past the range: 2^63, and 2^64-1 (the term of the
# forged heartbeat that made all three controllers exit with an OverflowError).
_OUT_OF_RANGE = [
    [4, "rogue", "n1", 1 << 63, 0, 0],
    [4, "rogue", "n1", (1 << 64) - 1, 0, 0],
    [4, "n0", "n1", 3, (1 << 64) - 1, 0],
    [4, "n0", "n1", 3, 0, 1 << 63],
    [0, "n0", "n1", 3, 1 << 63, 1, False, False],
    [0, "n0", "n1", 3, 1, 1 << 63, False, False],
    [2, "n0", "n1", 3, 1 << 63, 0, 0, []],
    [2, "n0", "n1", 3, 0, 0, 0, [[1 << 63, 1, 0, b""]]],
    [2, "n0", "n1", 3, 0, 0, 0, [[1, 1 << 63, 0, b""]]],
    [3, "n1", "n0", 3, 0, True, 1 << 63, 0],
    [6, "n0", "n1", 3, [1 << 63, 1, ["n0"], []], 0, b"", True],
    [6, "n0", "n1", 3, [1, 1, ["n0"], []], 1 << 63, b"", True],
    [7, "n1", "n0", 3, 1, 1 << 63],
    [8, "n0", "n1", 1 << 63],
    [10, "n0", "n1", 3, b"ctx", 1 << 63],
    [9, "n1", "n0", 3, b"x" * (MAX_CTX_BYTES + 1)],
]


@pytest.mark.parametrize("obj", _OUT_OF_RANGE)
def test_out_of_range_values_are_rejected_with_a_clear_error(obj: list[object]) -> None:
    with pytest.raises(ProtocolError, match=r"out of range|longer than"):
        decode(msgpack.packb(obj, use_bin_type=True))


def test_the_largest_values_in_range_round_trip() -> None:
    m = AppendEntries(
        src="n0",
        dst="n1",
        term=MAX_COUNTER,
        prev_log_index=MAX_COUNTER,
        prev_log_term=MAX_COUNTER,
        commit=MAX_COUNTER,
        entries=(Entry(term=MAX_COUNTER, index=MAX_COUNTER),),
    )
    assert decode(encode(m)) == m


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=200))
def test_garbage_bytes_raise_only_protocol_error(raw: bytes) -> None:
    try:
        decode(raw)
    except ProtocolError:
        pass


_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(1 << 63), max_value=(1 << 64) - 1),
    st.text(max_size=8),
    st.binary(max_size=8),
    st.floats(allow_nan=False),
)
_documents = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=8) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=30,
)


@settings(max_examples=500, deadline=None)
@given(st.integers(min_value=0, max_value=12), st.lists(_documents, max_size=9))
def test_garbage_documents_raise_only_protocol_error(tag: int, rest: list[object]) -> None:
    try:
        decode(msgpack.packb([tag, *rest], use_bin_type=True))
    except ProtocolError:
        pass


_ids = st.text(alphabet="abcn0123456789-", min_size=1, max_size=12)
_u64 = st.integers(min_value=0, max_value=MAX_COUNTER)


@st.composite
def _entries(draw: st.DrawFn) -> tuple[Entry, ...]:
    start = draw(st.integers(min_value=1, max_value=1 << 40))
    kinds = draw(st.lists(st.sampled_from(list(EntryType)), max_size=5))
    return tuple(
        Entry(term=draw(_u64), index=start + i, type=k, data=draw(st.binary(max_size=20)))
        for i, k in enumerate(kinds)
    )


@st.composite
def _metas(draw: st.DrawFn) -> SnapshotMeta:
    voters = draw(st.sets(_ids, max_size=4))
    learners = draw(st.sets(_ids, max_size=3)) - voters
    return SnapshotMeta(
        index=draw(_u64),
        term=draw(_u64),
        conf_state=ConfState(voters=tuple(voters), learners=tuple(learners)),
    )


def _message_strategy() -> st.SearchStrategy[Message]:
    common = {"src": _ids, "dst": _ids, "term": _u64}
    return st.one_of(
        st.builds(
            VoteRequest,
            last_log_index=_u64,
            last_log_term=_u64,
            pre_vote=st.booleans(),
            transfer=st.booleans(),
            **common,
        ),
        st.builds(VoteResponse, granted=st.booleans(), pre_vote=st.booleans(), **common),
        st.builds(
            AppendEntries,
            prev_log_index=_u64,
            prev_log_term=_u64,
            commit=_u64,
            entries=_entries(),
            **common,
        ),
        st.builds(
            AppendResponse,
            index=_u64,
            reject=st.booleans(),
            reject_hint=_u64,
            hint_term=_u64,
            **common,
        ),
        st.builds(Heartbeat, commit=_u64, read_seq=_u64, **common),
        st.builds(HeartbeatResponse, read_seq=_u64, **common),
        st.builds(
            InstallSnapshot,
            meta=_metas(),
            offset=_u64,
            data=st.binary(max_size=64),
            done=st.booleans(),
            **common,
        ),
        st.builds(InstallSnapshotAck, snapshot_index=_u64, offset=_u64, **common),
        st.builds(TimeoutNow, **common),
        st.builds(ReadIndexRequest, ctx=st.binary(max_size=16), **common),
        st.builds(ReadIndexResponse, ctx=st.binary(max_size=16), index=_u64, **common),
    )


@settings(max_examples=300, deadline=None)
@given(_message_strategy())
def test_generated_messages_round_trip(message: Message) -> None:
    assert decode(encode(message)) == message
