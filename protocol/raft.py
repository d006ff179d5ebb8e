"""Raft peer messages on the wire: pure encode/decode, no sockets.

A message is one msgpack array; the driver carries it as the body of a remoting frame (one-way
request between controllers). The first four elements are common; the rest depend on the tag::

    [tag, src, dst, term, field...]

    tag  message              fields after term
    ---  -------------------  -----------------------------------------------------------
    0    VoteRequest          last_log_index, last_log_term, pre_vote, transfer
    1    VoteResponse         granted, pre_vote
    2    AppendEntries        prev_log_index, prev_log_term, commit, [entry, ...]
    3    AppendResponse       index, reject, reject_hint, hint_term
    4    Heartbeat            commit, read_seq
    5    HeartbeatResponse    read_seq
    6    InstallSnapshot      meta, offset, data, done
    7    InstallSnapshotAck   snapshot_index, offset
    8    TimeoutNow           (none)
    9    ReadIndexRequest     ctx
    10   ReadIndexResponse    ctx, index

    entry  [term, index, type, data]          type 0 normal, 1 conf change, 2 no-op
    meta   [index, term, [voter, ...], [learner, ...]]

``src``/``dst``/voters/learners are node ids (non-empty UTF-8 strings of at most 255 bytes);
integers (terms, indexes, offsets, sequence numbers) are unsigned and at most 2^63-1
(:data:`protocol.raft_types.MAX_COUNTER`), so that the core can always add one; ``data`` is
bin, ``ctx`` is bin of at most 1 KiB. :func:`decode` checks every element and raises
:class:`protocol.remoting.ProtocolError` (and nothing else) on malformed or out-of-range input;
the driver then closes the connection the message came on.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import pairwise
from typing import Any, Final

import msgpack

from protocol.raft_types import (
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
    MessageBase,
    ReadIndexRequest,
    ReadIndexResponse,
    SnapshotMeta,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
)
from protocol.remoting import ProtocolError

MAX_NODE_ID_BYTES: Final = 255
MAX_CTX_BYTES: Final = 1024
"""A read-index context is a request id; the driver's are a few bytes."""

_U64, _BOOL, _BYTES, _CTX, _ENTRIES, _META = "u64", "bool", "bytes", "ctx", "entries", "meta"

#: Fields after ``term``, per message class, in wire order.
SCHEMAS: Final[dict[type[MessageBase], tuple[tuple[str, str], ...]]] = {
    VoteRequest: (
        ("last_log_index", _U64),
        ("last_log_term", _U64),
        ("pre_vote", _BOOL),
        ("transfer", _BOOL),
    ),
    VoteResponse: (("granted", _BOOL), ("pre_vote", _BOOL)),
    AppendEntries: (
        ("prev_log_index", _U64),
        ("prev_log_term", _U64),
        ("commit", _U64),
        ("entries", _ENTRIES),
    ),
    AppendResponse: (
        ("index", _U64),
        ("reject", _BOOL),
        ("reject_hint", _U64),
        ("hint_term", _U64),
    ),
    Heartbeat: (("commit", _U64), ("read_seq", _U64)),
    HeartbeatResponse: (("read_seq", _U64),),
    InstallSnapshot: (("meta", _META), ("offset", _U64), ("data", _BYTES), ("done", _BOOL)),
    InstallSnapshotAck: (("snapshot_index", _U64), ("offset", _U64)),
    TimeoutNow: (),
    ReadIndexRequest: (("ctx", _CTX),),
    ReadIndexResponse: (("ctx", _CTX), ("index", _U64)),
}
_TAGS: Final = {cls: tag for tag, cls in enumerate(MESSAGE_TYPES)}
_ENTRY_TYPES: Final = {int(t): t for t in EntryType}


# --- encoding ------------------------------------------------------------------------------------


def _encode_entry(e: Entry) -> list[Any]:
    return [e.term, e.index, int(e.type), e.data]


def _encode_meta(meta: SnapshotMeta) -> list[Any]:
    return [meta.index, meta.term, list(meta.conf_state.voters), list(meta.conf_state.learners)]


def _encode_value(kind: str, value: Any) -> Any:
    if kind == _ENTRIES:
        return [_encode_entry(e) for e in value]
    if kind == _META:
        return _encode_meta(value)
    return value


def to_wire(m: Message) -> list[Any]:
    """The message as a msgpack-ready list (for embedding in a larger document)."""
    cls = type(m)
    fields = [_encode_value(kind, getattr(m, name)) for name, kind in SCHEMAS[cls]]
    return [_TAGS[cls], m.src, m.dst, m.term, *fields]


def encode(m: Message) -> bytes:
    payload: bytes = msgpack.packb(to_wire(m), use_bin_type=True)
    return payload


# --- decoding ------------------------------------------------------------------------------------


def _u64(value: Any, what: str) -> int:
    if type(value) is not int:
        raise ProtocolError(f"{what} is not an integer")
    if not 0 <= value <= MAX_COUNTER:
        raise ProtocolError(f"{what} {value} is out of range (0 to 2^63-1)")
    return value


def _bool(value: Any, what: str) -> bool:
    if type(value) is not bool:
        raise ProtocolError(f"{what} is not a boolean")
    return value


def _bytes(value: Any, what: str) -> bytes:
    if type(value) is not bytes:
        raise ProtocolError(f"{what} is not bin")
    return value


def _ctx(value: Any, what: str) -> bytes:
    data = _bytes(value, what)
    if len(data) > MAX_CTX_BYTES:
        raise ProtocolError(f"{what} of {len(data)} bytes is longer than {MAX_CTX_BYTES}")
    return data


def _node_id(value: Any, what: str) -> str:
    if type(value) is not str or not value or len(value.encode()) > MAX_NODE_ID_BYTES:
        raise ProtocolError(f"{what} is not a node id")
    return value


def _array(value: Any, what: str, length: int | None = None) -> list[Any]:
    if type(value) is not list or (length is not None and len(value) != length):
        raise ProtocolError(f"{what} is not an array" + (f" of {length}" if length else ""))
    return value


def _entry(value: Any) -> Entry:
    term, index, kind, data = _array(value, "entry", 4)
    kind_int = _u64(kind, "entry type")
    if kind_int not in _ENTRY_TYPES:
        raise ProtocolError(f"unknown entry type {kind_int}")
    return Entry(
        term=_u64(term, "entry term"),
        index=_u64(index, "entry index"),
        type=_ENTRY_TYPES[kind_int],
        data=_bytes(data, "entry data"),
    )


def _entries(value: Any, what: str) -> tuple[Entry, ...]:
    entries = tuple(_entry(item) for item in _array(value, what))
    for before, after in pairwise(entries):
        if after.index != before.index + 1:
            raise ProtocolError("entries are not consecutive")
    return entries


def _meta(value: Any, what: str) -> SnapshotMeta:
    index, term, voters, learners = _array(value, what, 4)
    voter_ids = tuple(_node_id(v, "voter") for v in _array(voters, "voters"))
    learner_ids = tuple(_node_id(v, "learner") for v in _array(learners, "learners"))
    try:
        conf = ConfState(voters=voter_ids, learners=learner_ids)
    except ValueError as exc:
        raise ProtocolError(f"bad configuration: {exc}") from None
    return SnapshotMeta(
        index=_u64(index, "snapshot index"), term=_u64(term, "snapshot term"), conf_state=conf
    )


_DECODERS: Final[dict[str, Callable[[Any, str], Any]]] = {
    _U64: _u64,
    _BOOL: _bool,
    _BYTES: _bytes,
    _CTX: _ctx,
    _ENTRIES: _entries,
    _META: _meta,
}


def from_wire(obj: Any) -> Message:
    """The inverse of :func:`to_wire`; raises ProtocolError."""
    if type(obj) is not list or len(obj) < 4:
        raise ProtocolError("raft message is not an array of at least 4 elements")
    tag = obj[0]
    if type(tag) is not int or not 0 <= tag < len(MESSAGE_TYPES):
        raise ProtocolError(f"unknown raft message tag {tag!r}")
    cls = MESSAGE_TYPES[tag]
    schema = SCHEMAS[cls]
    if len(obj) != 4 + len(schema):
        raise ProtocolError(f"{cls.__name__} has {len(obj) - 4} fields, expected {len(schema)}")
    kwargs: dict[str, Any] = {
        "src": _node_id(obj[1], "src"),
        "dst": _node_id(obj[2], "dst"),
        "term": _u64(obj[3], "term"),
    }
    for (name, kind), value in zip(schema, obj[4:], strict=True):
        kwargs[name] = _DECODERS[kind](value, name)
    message: Message = cls(**kwargs)  # type: ignore[assignment]
    return message


def decode(payload: bytes) -> Message:
    """Decode one message; raises ProtocolError on anything that is not a valid message."""
    try:
        obj = msgpack.unpackb(payload, raw=False, use_list=True, strict_map_key=True)
    except Exception as exc:  # msgpack raises several unrelated types on garbage
        raise ProtocolError(f"undecodable raft message: {type(exc).__name__}") from None
    return from_wire(obj)
