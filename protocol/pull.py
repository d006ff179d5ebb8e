"""PULL_MESSAGE and the queue offset queries: request headers and answers, pure encode/decode
with no sockets (docs/protocol.md). The client SDK's consumer and the Spark pipeline's range
reader both build their requests and read the answers here.

Requests (header fields, no body; ``?`` marks a field that may be left out)::

    PULL_MESSAGE 11            consumerGroup, topic, queueId, queueOffset, maxMsgNums,
                               maxBytes?, suspendTimeoutMillis?, subscription? (a tag
                               or SQL92 expression), expressionType? (TAG or SQL92)
    QUERY_CONSUMER_OFFSET 14   consumerGroup, topic, queueId
    UPDATE_CONSUMER_OFFSET 15  consumerGroup, topic, queueId, commitOffset
    GET_MAX_OFFSET 30          topic, queueId, committed?
    GET_MIN_OFFSET 31          topic, queueId
    SEARCH_OFFSET_BY_TIMESTAMP 29  topic, queueId, timestamp
    GET_ALL_CONSUMER_OFFSET 43 withTimes?; SUCCESS's body is the msgpack map
                               {group: {topic: {queueId: offset}}}, with withTimes
                               {"offsets": that, "lastConsumeMs": the same shape of epoch
                               ms} and the header withTimes true (ConsumerOffsetTable)

Each request is a frozen dataclass: ``encode()`` gives its header and body, ``parse(header,
body)`` reads one back and checks its fields (a bad one raises
:class:`~protocol.fields.FieldError`, answered BAD_REQUEST); ``header()`` is ``encode()``'s
header.

Pull answers, by response code (the body of SUCCESS holds ``count`` message records back to
back, see :mod:`protocol.message`; the broker also sends ``minOffset`` and ``maxOffset``, which
which readers may look at but never compare)::

    SUCCESS 0                  nextBeginOffset, count; body     -> PullFound
    PULL_NOT_FOUND 19          nextBeginOffset?                 -> PullNotFound
    PULL_RETRY_IMMEDIATELY 20                                   -> PullRetry
    PULL_OFFSET_MOVED 21       nextBeginOffset                  -> PullOffsetMoved
    MESSAGE_CORRUPT 5007       physicalOffset?, remark?         -> PullCorrupt
    any other code             remark?                          -> PullRefused

Offset query answers: SUCCESS with header ``offset`` (:func:`decode_offset`);
QUERY_CONSUMER_OFFSET answers QUERY_NOT_FOUND when the group never committed.

Requests parse with :mod:`protocol.fields` (a bad field raises
:class:`~protocol.fields.FieldError`). An answer that lacks a field its code requires raises
:class:`AnswerError`; the codec checks types, not values (whether an offset makes sense is the
reader's to judge).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from protocol.broker_requests import body_map, pack_map
from protocol.codes import RequestCode, ResponseCode
from protocol.fields import (
    FieldError,
    opt_bool,
    opt_int,
    opt_int_or_none,
    opt_str,
    req_int,
    req_str,
)
from protocol.filter import TAG, FilterError, parse_filter
from protocol.filter import filter_type as read_filter_type
from protocol.remoting import Frame, Header, Scalar

__all__ = [
    "AllConsumerOffsetsQuery",
    "AnswerError",
    "ConsumerOffsetQuery",
    "ConsumerOffsetTable",
    "ConsumerOffsetUpdate",
    "MaxOffsetQuery",
    "MinOffsetQuery",
    "OffsetSearch",
    "PullAnswer",
    "PullCorrupt",
    "PullFound",
    "PullNotFound",
    "PullOffsetMoved",
    "PullRefused",
    "PullRequest",
    "PullRetry",
    "decode_offset",
    "decode_pull_answer",
    "encode_pull_answer",
    "offset_answer",
]


class AnswerError(ValueError):
    """A broker's answer lacks a header field its response code requires (or mistypes it)."""


# -- requests ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class PullRequest:
    """PULL_MESSAGE: up to ``max_count`` records (and ``max_bytes``) from ``offset`` on; the
    broker waits up to ``suspend_ms`` for the first one (0: answer at once)."""

    code: ClassVar[RequestCode] = RequestCode.PULL_MESSAGE

    group: str
    topic: str
    queue_id: int
    offset: int
    max_count: int = 32
    max_bytes: int | None = None
    suspend_ms: int = 0
    subscription: str = "*"
    """A tag expression (``TagA || TagB``; ``*`` everything) or, with ``filter_type`` SQL92, a
    SQL92 condition over the message's properties: the broker serves only the records that
    match and moves ``nextBeginOffset`` past the others."""
    filter_type: str = TAG
    """TAG or SQL92 (RocketMQ's ``expressionType``; sent only when SQL92)."""

    def header(self) -> Header:
        header: Header = {
            "consumerGroup": self.group,
            "topic": self.topic,
            "queueId": self.queue_id,
            "queueOffset": self.offset,
            "maxMsgNums": self.max_count,
        }
        if self.max_bytes is not None:
            header["maxBytes"] = self.max_bytes
        header["suspendTimeoutMillis"] = self.suspend_ms
        if self.subscription != "*" or self.filter_type != TAG:
            header["subscription"] = self.subscription
        if self.filter_type != TAG:
            header["expressionType"] = self.filter_type
        return header

    def encode(self) -> tuple[Header, bytes | None]:
        return self.header(), None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> PullRequest:
        try:
            kind = read_filter_type(opt_str(header, "expressionType", TAG))
        except FilterError as exc:
            raise FieldError(f"expressionType: {exc}") from None
        subscription = opt_str(header, "subscription", "*")
        if kind == TAG:
            subscription = subscription or "*"
        try:
            parse_filter(kind, subscription)
        except FilterError as exc:
            raise FieldError(f"subscription: {exc}") from None
        return cls(
            group=req_str(header, "consumerGroup"),
            topic=req_str(header, "topic"),
            queue_id=req_int(header, "queueId"),
            offset=req_int(header, "queueOffset"),
            max_count=opt_int(header, "maxMsgNums", 32),
            max_bytes=opt_int_or_none(header, "maxBytes"),
            suspend_ms=opt_int(header, "suspendTimeoutMillis", 0),
            subscription=subscription,
            filter_type=kind,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class MinOffsetQuery:
    """GET_MIN_OFFSET: the first offset of the queue still retained."""

    code: ClassVar[RequestCode] = RequestCode.GET_MIN_OFFSET

    topic: str
    queue_id: int

    def header(self) -> Header:
        return {"topic": self.topic, "queueId": self.queue_id}

    def encode(self) -> tuple[Header, bytes | None]:
        return self.header(), None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> MinOffsetQuery:
        return cls(topic=req_str(header, "topic"), queue_id=req_int(header, "queueId"))


@dataclass(frozen=True, slots=True, kw_only=True)
class MaxOffsetQuery:
    """GET_MAX_OFFSET: the end of the queue; with ``committed``, the end of what pulls may serve
    (records up to the confirm offset)."""

    code: ClassVar[RequestCode] = RequestCode.GET_MAX_OFFSET

    topic: str
    queue_id: int
    committed: bool = False

    def header(self) -> Header:
        header: Header = {"topic": self.topic, "queueId": self.queue_id}
        if self.committed:
            header["committed"] = True
        return header

    def encode(self) -> tuple[Header, bytes | None]:
        return self.header(), None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> MaxOffsetQuery:
        return cls(
            topic=req_str(header, "topic"),
            queue_id=req_int(header, "queueId"),
            committed=opt_bool(header, "committed"),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetSearch:
    """SEARCH_OFFSET_BY_TIMESTAMP: the first offset of the queue stored at or after
    ``timestamp`` (epoch ms)."""

    code: ClassVar[RequestCode] = RequestCode.SEARCH_OFFSET_BY_TIMESTAMP

    topic: str
    queue_id: int
    timestamp: int

    def header(self) -> Header:
        return {"topic": self.topic, "queueId": self.queue_id, "timestamp": self.timestamp}

    def encode(self) -> tuple[Header, bytes | None]:
        return self.header(), None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> OffsetSearch:
        return cls(
            topic=req_str(header, "topic"),
            queue_id=req_int(header, "queueId"),
            timestamp=req_int(header, "timestamp"),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class AllConsumerOffsetsQuery:
    """GET_ALL_CONSUMER_OFFSET: every committed consumer offset (slaves copy them); with
    ``with_times`` also when each last moved. With ``since_incarnation`` and ``since_counter``
    (both or neither: what an earlier answer said) only what changed after that counter, when
    the broker can tell (a slave's copy, issue 34)."""

    code: ClassVar[RequestCode] = RequestCode.GET_ALL_CONSUMER_OFFSET

    with_times: bool = False
    since_incarnation: str | None = None
    since_counter: int | None = None

    def header(self) -> Header:
        header: dict[str, Scalar] = {"withTimes": True} if self.with_times else {}
        if self.since_incarnation is not None and self.since_counter is not None:
            header["sinceIncarnation"] = self.since_incarnation
            header["sinceCounter"] = self.since_counter
        return header

    def encode(self) -> tuple[Header, bytes | None]:
        return self.header(), None

    @classmethod
    def parse(
        cls, header: Mapping[str, Scalar], body: bytes | None = None
    ) -> AllConsumerOffsetsQuery:
        incarnation = opt_str(header, "sinceIncarnation") or None
        counter = opt_int_or_none(header, "sinceCounter")
        if (incarnation is None) != (counter is None):
            raise FieldError("sinceIncarnation and sinceCounter go together")
        if counter is not None and counter < 0:
            raise FieldError("sinceCounter must be >= 0")
        return cls(
            with_times=opt_bool(header, "withTimes"),
            since_incarnation=incarnation,
            since_counter=counter,
        )


OffsetTable = Mapping[str, Mapping[str, Mapping[int, int]]]
"""group -> topic -> queue id -> offset (or epoch ms)."""


def _offset_table(doc: object, what: str) -> dict[str, dict[str, dict[int, int]]]:
    def bad() -> FieldError:
        return FieldError(f"{what} must map group -> topic -> queue id -> integer")

    if not isinstance(doc, dict):
        raise bad()
    table: dict[str, dict[str, dict[int, int]]] = {}
    for group, by_topic in doc.items():
        if not isinstance(group, str) or not isinstance(by_topic, dict):
            raise bad()
        topics = table[group] = {}
        for topic, by_queue in by_topic.items():
            if not isinstance(topic, str) or not isinstance(by_queue, dict):
                raise bad()
            if not all(type(q) is int and type(v) is int for q, v in by_queue.items()):
                raise bad()
            topics[topic] = by_queue
    return table


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerOffsetTable:
    """GET_ALL_CONSUMER_OFFSET's SUCCESS: every committed offset and, when asked for, when each
    last moved (``last_consume_ms`` None: not sent, header ``withTimes`` absent).

    ``incarnation`` and ``counter`` (None from a broker that does not count changes): what a
    later ask sends to get only what changed after this answer. ``delta`` True: ``offsets`` and
    ``last_consume_ms`` hold only the groups changed since the asked counter (each group's whole
    table), ``deleted_groups`` and ``deleted_topics`` what was deleted since, to apply first;
    ``more``: a page of the changes (``counter`` is where it ends): ask again from it."""

    offsets: OffsetTable
    last_consume_ms: OffsetTable | None = None
    incarnation: str | None = None
    counter: int | None = None
    delta: bool = False
    deleted_groups: tuple[str, ...] = ()
    deleted_topics: tuple[str, ...] = ()
    more: bool = False

    def encode(self) -> tuple[Header, bytes]:
        header: dict[str, Scalar] = {}
        if self.incarnation is not None and self.counter is not None:
            header["incarnation"] = self.incarnation
            header["counter"] = self.counter
        if self.delta:
            header["delta"] = True
            if self.more:
                header["more"] = True
        if self.last_consume_ms is None and not self.delta:
            return header, pack_map(self.offsets)
        header["withTimes"] = True
        body: dict[str, object] = {
            "offsets": self.offsets,
            "lastConsumeMs": self.last_consume_ms or {},
        }
        if self.delta:
            body["deletedGroups"] = list(self.deleted_groups)
            body["deletedTopics"] = list(self.deleted_topics)
        return header, pack_map(body)

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> ConsumerOffsetTable:
        doc = body_map(body, "consumer offset table")
        incarnation = opt_str(header, "incarnation") or None
        counter = opt_int_or_none(header, "counter")
        if (incarnation is None) != (counter is None):
            raise FieldError("incarnation and counter go together")
        delta = opt_bool(header, "delta")
        if delta and counter is None:
            raise FieldError("a delta needs its counter")
        more = opt_bool(header, "more")
        if more and not delta:
            raise FieldError("only a delta has more")
        if not opt_bool(header, "withTimes"):
            if delta:
                raise FieldError("a delta is sent withTimes")
            return cls(
                offsets=_offset_table(doc, "the table"), incarnation=incarnation, counter=counter
            )
        return cls(
            offsets=_offset_table(doc.get("offsets") or {}, "offsets"),
            last_consume_ms=_offset_table(doc.get("lastConsumeMs") or {}, "lastConsumeMs"),
            incarnation=incarnation,
            counter=counter,
            delta=delta,
            deleted_groups=_names(doc.get("deletedGroups"), "deletedGroups"),
            deleted_topics=_names(doc.get("deletedTopics"), "deletedTopics"),
            more=more,
        )


def _names(doc: object, what: str) -> tuple[str, ...]:
    if doc is None:
        return ()
    if not isinstance(doc, list) or not all(isinstance(n, str) and n for n in doc):
        raise FieldError(f"{what} must be a list of names")
    return tuple(doc)


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerOffsetQuery:
    """QUERY_CONSUMER_OFFSET: the offset ``group`` committed for the queue."""

    code: ClassVar[RequestCode] = RequestCode.QUERY_CONSUMER_OFFSET

    group: str
    topic: str
    queue_id: int

    def header(self) -> Header:
        return {"consumerGroup": self.group, "topic": self.topic, "queueId": self.queue_id}

    def encode(self) -> tuple[Header, bytes | None]:
        return self.header(), None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> ConsumerOffsetQuery:
        return cls(
            group=req_str(header, "consumerGroup"),
            topic=req_str(header, "topic"),
            queue_id=req_int(header, "queueId"),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerOffsetUpdate:
    """UPDATE_CONSUMER_OFFSET: ``group`` consumed every message of the queue below ``offset``."""

    code: ClassVar[RequestCode] = RequestCode.UPDATE_CONSUMER_OFFSET

    group: str
    topic: str
    queue_id: int
    offset: int

    def header(self) -> Header:
        return {
            "consumerGroup": self.group,
            "topic": self.topic,
            "queueId": self.queue_id,
            "commitOffset": self.offset,
        }

    def encode(self) -> tuple[Header, bytes | None]:
        return self.header(), None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> ConsumerOffsetUpdate:
        offset = req_int(header, "commitOffset")
        if offset < 0:
            raise FieldError("commitOffset must be >= 0")
        return cls(
            group=req_str(header, "consumerGroup"),
            topic=req_str(header, "topic"),
            queue_id=req_int(header, "queueId"),
            offset=offset,
        )


def offset_answer(offset: int) -> Header:
    """The header of a SUCCESS answer to an offset query."""
    return {"offset": offset}


def decode_offset(frame: Frame) -> int:
    """The ``offset`` of a SUCCESS answer to GET_MIN_OFFSET, GET_MAX_OFFSET or
    QUERY_CONSUMER_OFFSET (the caller checked the code)."""
    return _int(frame.header, "offset")


# -- pull answers -----------------------------------------------------------------------------


# ``min_offset`` and ``max_offset`` of the answers below: the queue's first retained offset or
# its end as the broker saw them when it answered (``minOffset``, ``maxOffset``): said when
# known, never compared (two answers that say the same are equal whatever the queue held
# meanwhile). Spelled out in each class: a helper returning ``field(...)`` typed as the value
# is a lie mypyc's compiled return check refuses (docs/compiled.md).


@dataclass(frozen=True, slots=True, kw_only=True)
class PullFound:
    """``count`` records from the requested offset on, in ``body``; the next pull starts at
    ``next_offset`` (past the records, or further when the broker skipped a gap or a tag filter
    passed over entries: a consumer commits up to it once the records are consumed)."""

    next_offset: int
    count: int
    body: bytes
    min_offset: int | None = field(default=None, compare=False)
    max_offset: int | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class PullNotFound:
    """Nothing at the requested offset before the suspend timeout; ``next_offset`` is where to
    ask again when the broker said so (past the entries a tag filter passed over meanwhile:
    they count as consumed, as those passed over by a :class:`PullFound`)."""

    next_offset: int | None = None
    min_offset: int | None = field(default=None, compare=False)
    max_offset: int | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class PullRetry:
    """Ask again at once."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PullOffsetMoved:
    """The requested offset is outside the queue: continue at ``next_offset`` (the first retained
    offset when below it, the queue's end when past it)."""

    next_offset: int
    remark: str = ""
    min_offset: int | None = field(default=None, compare=False)
    max_offset: int | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class PullCorrupt:
    """The broker cannot read the record at the requested offset (it fails its CRC, or its bytes
    were lost); asking again gets the same answer. ``physical_offset`` is its CommitLog offset
    when the broker said."""

    physical_offset: int | None = None
    remark: str = ""
    next_offset: int | None = field(default=None, compare=False)
    """The requested offset, when the broker said (it moves no consumer)."""
    min_offset: int | None = field(default=None, compare=False)
    max_offset: int | None = field(default=None, compare=False)

    def reason(self, topic: str, queue_id: int, offset: int) -> str:
        """The broker's explanation, or one naming the queue and offset when it gave none."""
        return self.remark or f"queue {topic}:{queue_id}, offset {offset} cannot be read"


@dataclass(frozen=True, slots=True, kw_only=True)
class PullRefused:
    """Any other answer (no such topic or queue, not master, ...): ``code`` and why."""

    code: int
    remark: str = ""


PullAnswer = PullFound | PullNotFound | PullRetry | PullOffsetMoved | PullCorrupt | PullRefused


def decode_pull_answer(frame: Frame) -> PullAnswer:
    """What a PULL_MESSAGE answer says (raises :class:`AnswerError` for a missing field)."""
    code = frame.code
    header = frame.header
    low, high = _maybe_int(header, "minOffset"), _maybe_int(header, "maxOffset")
    if code == ResponseCode.SUCCESS:
        return PullFound(
            next_offset=_int(header, "nextBeginOffset"),
            count=_int(header, "count"),
            body=frame.body or b"",
            min_offset=low,
            max_offset=high,
        )
    if code == ResponseCode.PULL_NOT_FOUND:
        nxt = _maybe_int(header, "nextBeginOffset")
        return PullNotFound(next_offset=nxt, min_offset=low, max_offset=high)
    if code == ResponseCode.PULL_RETRY_IMMEDIATELY:
        return PullRetry()
    if code == ResponseCode.PULL_OFFSET_MOVED:
        return PullOffsetMoved(
            next_offset=_int(header, "nextBeginOffset"),
            remark=_remark(header),
            min_offset=low,
            max_offset=high,
        )
    if code == ResponseCode.MESSAGE_CORRUPT:
        return PullCorrupt(
            physical_offset=_maybe_int(header, "physicalOffset"),
            remark=_remark(header),
            next_offset=_maybe_int(header, "nextBeginOffset"),
            min_offset=low,
            max_offset=high,
        )
    return PullRefused(code=code, remark=_remark(header))


def encode_pull_answer(answer: PullAnswer) -> tuple[int, Header, bytes | None]:
    """The response code, header and body that say ``answer`` (what a broker sends): header
    fields in the order ``nextBeginOffset``, ``minOffset``, ``maxOffset``, then those of the
    code."""
    header: Header = {}
    if isinstance(answer, PullRetry):
        return ResponseCode.PULL_RETRY_IMMEDIATELY, header, None
    if isinstance(answer, PullRefused):
        if answer.remark:
            header["remark"] = answer.remark
        return answer.code, header, None
    if answer.next_offset is not None:
        header["nextBeginOffset"] = answer.next_offset
    if answer.min_offset is not None:
        header["minOffset"] = answer.min_offset
    if answer.max_offset is not None:
        header["maxOffset"] = answer.max_offset
    if isinstance(answer, PullFound):
        header["count"] = answer.count
        return ResponseCode.SUCCESS, header, answer.body
    if isinstance(answer, PullNotFound):
        return ResponseCode.PULL_NOT_FOUND, header, None
    code: int = ResponseCode.PULL_OFFSET_MOVED
    if isinstance(answer, PullCorrupt):
        if answer.physical_offset is not None:
            header["physicalOffset"] = answer.physical_offset
        code = ResponseCode.MESSAGE_CORRUPT
    if answer.remark:
        header["remark"] = answer.remark
    return code, header, None


def _int(header: Mapping[str, Scalar], name: str) -> int:
    value = header.get(name)
    if type(value) is not int:
        raise AnswerError(f"response header {name!r} missing or not an integer")
    return value


def _maybe_int(header: Mapping[str, Scalar], name: str) -> int | None:
    value = header.get(name)
    return value if type(value) is int else None


def _remark(header: Mapping[str, Scalar]) -> str:
    remark = header.get("remark")
    return remark if isinstance(remark, str) else ""
