"""PULL_MESSAGE and the queue offset queries: request headers and answers, pure encode/decode
with no sockets (docs/protocol.md). The client SDK's consumer and the Spark pipeline's range
reader both build their requests and read the answers here.

Requests (header fields, no body; ``?`` marks a field that may be left out)::

    PULL_MESSAGE 11            consumerGroup, topic, queueId, queueOffset, maxMsgNums,
                               maxBytes?, suspendTimeoutMillis?, subscription? (tags)
    QUERY_CONSUMER_OFFSET 14   consumerGroup, topic, queueId
    UPDATE_CONSUMER_OFFSET 15  consumerGroup, topic, queueId, commitOffset
    GET_MAX_OFFSET 30          topic, queueId, committed?
    GET_MIN_OFFSET 31          topic, queueId

Pull answers, by response code (the body of SUCCESS holds ``count`` message records back to
back, see :mod:`protocol.message`; the broker also sends ``minOffset`` and ``maxOffset``, which
no reader needs)::

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
from dataclasses import dataclass
from typing import ClassVar

from protocol.codes import RequestCode, ResponseCode
from protocol.fields import FieldError, opt_int, opt_str, req_int, req_str
from protocol.remoting import Frame, Header, Scalar

__all__ = [
    "AnswerError",
    "ConsumerOffsetQuery",
    "ConsumerOffsetUpdate",
    "MaxOffsetQuery",
    "MinOffsetQuery",
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
    """A tag expression (``TagA || TagB``; ``*`` everything): the broker serves only the records
    that match and moves ``nextBeginOffset`` past the others."""

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
        if self.subscription != "*":
            header["subscription"] = self.subscription
        return header

    @classmethod
    def parse(cls, header: Mapping[str, Scalar]) -> PullRequest:
        return cls(
            group=req_str(header, "consumerGroup"),
            topic=req_str(header, "topic"),
            queue_id=req_int(header, "queueId"),
            offset=req_int(header, "queueOffset"),
            max_count=opt_int(header, "maxMsgNums", 32),
            max_bytes=_opt_int(header, "maxBytes"),
            suspend_ms=opt_int(header, "suspendTimeoutMillis", 0),
            subscription=opt_str(header, "subscription", "*") or "*",
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class MinOffsetQuery:
    """GET_MIN_OFFSET: the first offset of the queue still retained."""

    code: ClassVar[RequestCode] = RequestCode.GET_MIN_OFFSET

    topic: str
    queue_id: int

    def header(self) -> Header:
        return {"topic": self.topic, "queueId": self.queue_id}

    @classmethod
    def parse(cls, header: Mapping[str, Scalar]) -> MinOffsetQuery:
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

    @classmethod
    def parse(cls, header: Mapping[str, Scalar]) -> MaxOffsetQuery:
        return cls(
            topic=req_str(header, "topic"),
            queue_id=req_int(header, "queueId"),
            committed=_opt_bool(header, "committed"),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerOffsetQuery:
    """QUERY_CONSUMER_OFFSET: the offset ``group`` committed for the queue."""

    code: ClassVar[RequestCode] = RequestCode.QUERY_CONSUMER_OFFSET

    group: str
    topic: str
    queue_id: int

    def header(self) -> Header:
        return {"consumerGroup": self.group, "topic": self.topic, "queueId": self.queue_id}

    @classmethod
    def parse(cls, header: Mapping[str, Scalar]) -> ConsumerOffsetQuery:
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

    @classmethod
    def parse(cls, header: Mapping[str, Scalar]) -> ConsumerOffsetUpdate:
        return cls(
            group=req_str(header, "consumerGroup"),
            topic=req_str(header, "topic"),
            queue_id=req_int(header, "queueId"),
            offset=req_int(header, "commitOffset"),
        )


def offset_answer(offset: int) -> Header:
    """The header of a SUCCESS answer to an offset query."""
    return {"offset": offset}


def decode_offset(frame: Frame) -> int:
    """The ``offset`` of a SUCCESS answer to GET_MIN_OFFSET, GET_MAX_OFFSET or
    QUERY_CONSUMER_OFFSET (the caller checked the code)."""
    return _int(frame.header, "offset")


# -- pull answers -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class PullFound:
    """``count`` records from the requested offset on, in ``body``; the next pull starts at
    ``next_offset`` (past the records, or further when the broker skipped a gap or a tag filter
    passed over entries: a consumer commits up to it once the records are consumed)."""

    next_offset: int
    count: int
    body: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class PullNotFound:
    """Nothing at the requested offset before the suspend timeout; ``next_offset`` is where to
    ask again when the broker said so (past the entries a tag filter passed over meanwhile:
    they count as consumed, as those passed over by a :class:`PullFound`)."""

    next_offset: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class PullRetry:
    """Ask again at once."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PullOffsetMoved:
    """The requested offset is outside the queue: continue at ``next_offset`` (the first retained
    offset when below it, the queue's end when past it)."""

    next_offset: int
    remark: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class PullCorrupt:
    """The broker cannot read the record at the requested offset (it fails its CRC, or its bytes
    were lost); asking again gets the same answer. ``physical_offset`` is its CommitLog offset
    when the broker said."""

    physical_offset: int | None = None
    remark: str = ""

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
    if code == ResponseCode.SUCCESS:
        return PullFound(
            next_offset=_int(header, "nextBeginOffset"),
            count=_int(header, "count"),
            body=frame.body or b"",
        )
    if code == ResponseCode.PULL_NOT_FOUND:
        nxt = header.get("nextBeginOffset")
        return PullNotFound(next_offset=nxt if type(nxt) is int else None)
    if code == ResponseCode.PULL_RETRY_IMMEDIATELY:
        return PullRetry()
    if code == ResponseCode.PULL_OFFSET_MOVED:
        return PullOffsetMoved(next_offset=_int(header, "nextBeginOffset"), remark=_remark(header))
    if code == ResponseCode.MESSAGE_CORRUPT:
        physical = header.get("physicalOffset")
        return PullCorrupt(
            physical_offset=physical if type(physical) is int else None, remark=_remark(header)
        )
    return PullRefused(code=code, remark=_remark(header))


def encode_pull_answer(answer: PullAnswer) -> tuple[int, Header, bytes | None]:
    """The response code, header and body that say ``answer`` (what a broker sends)."""
    header: Header = {}
    if isinstance(answer, PullFound):
        header = {"nextBeginOffset": answer.next_offset, "count": answer.count}
        return ResponseCode.SUCCESS, header, answer.body
    if isinstance(answer, PullNotFound):
        if answer.next_offset is not None:
            header["nextBeginOffset"] = answer.next_offset
        return ResponseCode.PULL_NOT_FOUND, header, None
    if isinstance(answer, PullRetry):
        return ResponseCode.PULL_RETRY_IMMEDIATELY, header, None
    if isinstance(answer, PullOffsetMoved):
        header["nextBeginOffset"] = answer.next_offset
        code: int = ResponseCode.PULL_OFFSET_MOVED
    elif isinstance(answer, PullCorrupt):
        if answer.physical_offset is not None:
            header["physicalOffset"] = answer.physical_offset
        code = ResponseCode.MESSAGE_CORRUPT
    else:
        code = answer.code
    if answer.remark:
        header["remark"] = answer.remark
    return code, header, None


def _int(header: Mapping[str, Scalar], name: str) -> int:
    value = header.get(name)
    if type(value) is not int:
        raise AnswerError(f"response header {name!r} missing or not an integer")
    return value


def _opt_int(header: Mapping[str, Scalar], name: str) -> int | None:
    return None if header.get(name) is None else req_int(header, name)


def _opt_bool(header: Mapping[str, Scalar], name: str) -> bool:
    value = header.get(name, False)
    if not isinstance(value, bool):
        raise FieldError(f"header field {name!r} must be a boolean")
    return value


def _remark(header: Mapping[str, Scalar]) -> str:
    remark = header.get("remark")
    return remark if isinstance(remark, str) else ""
