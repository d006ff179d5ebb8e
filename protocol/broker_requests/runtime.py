"""A broker's own figures: GET_BROKER_RUNTIME_INFO (28), GET_BROKER_EPOCH_CACHE (1007) and
VIEW_BROKER_STATS_DATA (315, :class:`StatsData`), all without fields, answered with a msgpack
map (docs/protocol.md). Pure: no sockets, no clock.

GET_BROKER_RUNTIME_INFO's SUCCESS (:class:`RuntimeInfo`)::

    {"brokerName", "cluster", "address", "brokerId", "role": "MASTER" | "SLAVE", "masterEpoch",
     "maxOffset", "minOffset", "flushedOffset", "confirmOffset", "haAddress" (nil: no HA),
     "fenced", "topics", "connections", "pullsWaiting", "timerPending",
     "grpcEndpoint", "grpcTlsEndpoint" (nil: not listening),
     "putTps", "getTps" (float: messages stored and served per second over "statsWindowMs"),
     "putTotal", "getTotal" (since the broker started), "commitLogDiskRatio" (float: used
     share of the data directory's disk), "pageCacheLockMs" (nil: not measured), "popInflight"
     (POP deliveries not yet acked, on a master), "timerOverdueMs" (how late the earliest due
     scheduled message is; 0: none overdue)}

Readers take what they know: a key left out reads as its default (a broker of an earlier
version sends no ``timerPending``, gRPC endpoints nor the figures from ``putTps`` on; a test's
stand-in master only its ``haAddress``), a key of the wrong type raises
:class:`~protocol.fields.FieldError`.

GET_BROKER_EPOCH_CACHE's SUCCESS (:class:`EpochCache`)::

    {"brokerId", "address", "role", "maxOffset", "confirmOffset",
     "epochs": [{"epoch", "startOffset", "endOffset"}, ...]}

every key required (the answer has had them all since the request exists).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Final, TypeVar

from protocol.broker_requests import body_map, doc_field, pack_map
from protocol.codes import RequestCode
from protocol.fields import FieldError
from protocol.no_fields import NoFields
from protocol.remoting import Header, Scalar

__all__ = [
    "EpochCache",
    "EpochCacheQuery",
    "EpochSpan",
    "GroupStats",
    "RuntimeInfo",
    "RuntimeInfoQuery",
    "StatsData",
    "StatsQuery",
    "TopicStats",
]

_T = TypeVar("_T")

_ROLES = {"MASTER": True, "SLAVE": False}


def _role(doc: Mapping[str, Any], *, default: str | None = None) -> bool:
    role = doc.get("role", default)
    if role not in _ROLES:
        raise FieldError("'role' must be MASTER or SLAVE")
    return _ROLES[role]


def _opt(doc: Mapping[str, Any], name: str, kind: type[_T]) -> _T | None:
    value = doc.get(name)
    if value is not None and type(value) is not kind:
        raise FieldError(f"{name!r} must be {kind.__name__} or nil")
    return value


def _with_default(doc: Mapping[str, Any], name: str, default: _T) -> _T:
    value = doc.get(name, default)
    if type(value) is not type(default):
        raise FieldError(f"{name!r} must be {type(default).__name__}")
    return value


@dataclass(frozen=True, slots=True, kw_only=True)
class RuntimeInfoQuery(NoFields):
    """GET_BROKER_RUNTIME_INFO: the broker's role, offsets, load and endpoints (no fields)."""

    code: ClassVar[RequestCode] = RequestCode.GET_BROKER_RUNTIME_INFO


@dataclass(frozen=True, slots=True, kw_only=True)
class RuntimeInfo:
    """GET_BROKER_RUNTIME_INFO's SUCCESS. Every field has the default a reader assumes when the
    answering broker leaves it out."""

    broker_name: str = ""
    cluster: str = ""
    address: str = ""
    broker_id: int = 0
    master: bool = False
    """``role``: MASTER (true) or SLAVE."""
    master_epoch: int = 0
    max_offset: int = 0
    min_offset: int = 0
    flushed_offset: int = 0
    confirm_offset: int = 0
    ha_address: str | None = None
    """Where the HA master listens (None: no HA service)."""
    fenced: bool = False
    topics: int = 0
    connections: int = 0
    pulls_waiting: int = 0
    timer_pending: int = 0
    grpc_endpoint: str | None = None
    grpc_tls_endpoint: str | None = None
    put_tps: float = 0.0
    get_tps: float = 0.0
    stats_window_ms: int = 0
    """The span ``put_tps`` and ``get_tps`` are measured over (0: not yet two samples)."""
    put_total: int = 0
    get_total: int = 0
    commitlog_disk_ratio: float | None = None
    page_cache_lock_ms: float | None = None
    """None: not measured (this broker does not hold a lock around page cache writes)."""
    pop_inflight: int = 0
    timer_overdue_ms: int = 0

    def encode(self) -> tuple[Header, bytes]:
        doc = {key: getattr(self, name) for name, key in _RUNTIME_KEYS.items()}
        doc["role"] = "MASTER" if self.master else "SLAVE"
        return {}, pack_map(doc)

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> RuntimeInfo:
        doc = body_map(body, "runtime info")
        values: dict[str, Any] = {}
        for f in fields(cls):  # a key left out reads as the field's default
            key = _RUNTIME_KEYS[f.name]
            if f.name == "master":
                values[f.name] = _role(doc, default="SLAVE")
            elif f.default is None:
                values[f.name] = _opt(doc, key, _NIL_KINDS[f.name])
            elif type(f.default) is int:
                values[f.name] = doc_field(doc, key, int, f.default)
            else:
                values[f.name] = _with_default(doc, key, f.default)
        return cls(**values)


_RUNTIME_KEYS: Final = {
    "broker_name": "brokerName",
    "cluster": "cluster",
    "address": "address",
    "broker_id": "brokerId",
    "master": "role",
    "master_epoch": "masterEpoch",
    "max_offset": "maxOffset",
    "min_offset": "minOffset",
    "flushed_offset": "flushedOffset",
    "confirm_offset": "confirmOffset",
    "ha_address": "haAddress",
    "fenced": "fenced",
    "topics": "topics",
    "connections": "connections",
    "pulls_waiting": "pullsWaiting",
    "timer_pending": "timerPending",
    "grpc_endpoint": "grpcEndpoint",
    "grpc_tls_endpoint": "grpcTlsEndpoint",
    "put_tps": "putTps",
    "get_tps": "getTps",
    "stats_window_ms": "statsWindowMs",
    "put_total": "putTotal",
    "get_total": "getTotal",
    "commitlog_disk_ratio": "commitLogDiskRatio",
    "page_cache_lock_ms": "pageCacheLockMs",
    "pop_inflight": "popInflight",
    "timer_overdue_ms": "timerOverdueMs",
}
"""Each field of :class:`RuntimeInfo` and its key in the answer, in the answer's order."""

_NIL_KINDS: Final = {
    "ha_address": str,
    "grpc_endpoint": str,
    "grpc_tls_endpoint": str,
    "commitlog_disk_ratio": float,
    "page_cache_lock_ms": float,
}
"""The fields that may be nil, and the type of a value that is not."""


@dataclass(frozen=True, slots=True, kw_only=True)
class EpochCacheQuery(NoFields):
    """GET_BROKER_EPOCH_CACHE: the broker's epoch entries and offsets (no fields)."""

    code: ClassVar[RequestCode] = RequestCode.GET_BROKER_EPOCH_CACHE


@dataclass(frozen=True, slots=True)
class EpochSpan:
    """One entry of a broker's epoch file: the CommitLog offsets ``epoch`` wrote."""

    epoch: int
    start_offset: int
    end_offset: int

    def to_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "startOffset": self.start_offset, "endOffset": self.end_offset}


def _span(doc: Any) -> EpochSpan:
    if not isinstance(doc, dict):
        raise FieldError("an epoch entry must be a map")
    return EpochSpan(
        doc_field(doc, "epoch", int),
        doc_field(doc, "startOffset", int),
        doc_field(doc, "endOffset", int),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class EpochCache:
    """GET_BROKER_EPOCH_CACHE's SUCCESS: who answers, its offsets and its epoch entries (none
    without an HA service)."""

    broker_id: int
    address: str
    master: bool
    """``role``: MASTER (true) or SLAVE."""
    max_offset: int
    confirm_offset: int
    epochs: tuple[EpochSpan, ...] = ()

    def encode(self) -> tuple[Header, bytes]:
        return {}, pack_map(
            {
                "brokerId": self.broker_id,
                "address": self.address,
                "role": "MASTER" if self.master else "SLAVE",
                "maxOffset": self.max_offset,
                "confirmOffset": self.confirm_offset,
                "epochs": [e.to_dict() for e in self.epochs],
            }
        )

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> EpochCache:
        doc = body_map(body, "epoch cache")
        address, epochs = doc.get("address"), doc.get("epochs")
        if not isinstance(address, str):
            raise FieldError("'address' must be text")
        if not isinstance(epochs, list):
            raise FieldError("'epochs' must be a list")
        return cls(
            broker_id=doc_field(doc, "brokerId", int),
            address=address,
            master=_role(doc),
            max_offset=doc_field(doc, "maxOffset", int),
            confirm_offset=doc_field(doc, "confirmOffset", int),
            epochs=tuple(map(_span, epochs)),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class StatsQuery(NoFields):
    """VIEW_BROKER_STATS_DATA (RocketMQ's 315): this broker's rates per topic and consumer
    group, all of them (no fields; RocketMQ's asks for one statistic at a time)."""

    code: ClassVar[RequestCode] = RequestCode.VIEW_BROKER_STATS_DATA


@dataclass(frozen=True, slots=True)
class TopicStats:
    """One topic's messages stored and served: per second over the window, and in total since
    the broker started."""

    topic: str
    put_tps: float
    get_tps: float
    put_total: int
    get_total: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "putTps": self.put_tps,
            "getTps": self.get_tps,
            "putTotal": self.put_total,
            "getTotal": self.get_total,
        }


@dataclass(frozen=True, slots=True)
class GroupStats:
    """A consumer group's committed offsets on a topic's queues here, moved per second."""

    group: str
    topic: str
    consume_tps: float

    def to_dict(self) -> dict[str, Any]:
        return {"group": self.group, "topic": self.topic, "consumeTps": self.consume_tps}


def _maps(doc: Mapping[str, Any], name: str) -> list[dict[Any, Any]]:
    items = doc.get(name, [])
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise FieldError(f"{name!r} must be a list of maps")
    return items


@dataclass(frozen=True, slots=True, kw_only=True)
class StatsData:
    """VIEW_BROKER_STATS_DATA's SUCCESS::

        {"windowMs", "topics": [{"topic", "putTps", "getTps", "putTotal", "getTotal"}],
         "groups": [{"group", "topic", "consumeTps"}]}

    ``windowMs`` 0: the broker has not two samples yet (every rate 0)."""

    window_ms: int = 0
    topics: tuple[TopicStats, ...] = ()
    groups: tuple[GroupStats, ...] = ()

    def encode(self) -> tuple[Header, bytes]:
        return {}, pack_map(
            {
                "windowMs": self.window_ms,
                "topics": [t.to_dict() for t in self.topics],
                "groups": [g.to_dict() for g in self.groups],
            }
        )

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> StatsData:
        doc = body_map(body, "stats data")
        return cls(
            window_ms=doc_field(doc, "windowMs", int, 0),
            topics=tuple(
                TopicStats(
                    doc_field(t, "topic", str),
                    doc_field(t, "putTps", float),
                    doc_field(t, "getTps", float),
                    doc_field(t, "putTotal", int),
                    doc_field(t, "getTotal", int),
                )
                for t in _maps(doc, "topics")
            ),
            groups=tuple(
                GroupStats(
                    doc_field(g, "group", str),
                    doc_field(g, "topic", str),
                    doc_field(g, "consumeTps", float),
                )
                for g in _maps(doc, "groups")
            ),
        )
