"""QUERY_MESSAGE (by key, through the key index), VIEW_MESSAGE_BY_ID (by CommitLog offset,
which a message id carries) and QUERY_MESSAGE_BY_TIME (a queue's messages stored in a time
range): requests and their SUCCESS answers. Pure: no sockets, no clock.

Requests (header fields; ``?`` may be left out)::

    QUERY_MESSAGE 12            topic, key, beginTimestamp? (ms, 0), endTimestamp? (ms, the
                                end of time), maxNum? (64, at most 1024)
    VIEW_MESSAGE_BY_ID 33       offset (>= 0)
    QUERY_MESSAGE_BY_TIME 5160  topic, queueId (>= 0), beginTimestamp? (ms, 0),
                                endTimestamp? (ms, the end of time), maxNum? (64, at most
                                1024), fromOffset? (a queue offset: go on from there instead
                                of searching beginTimestamp)

The first two answer SUCCESS with ``count`` records back to back in the body, exactly as stored
(:func:`protocol.message.iter_records`), and a query ``truncated`` when the byte limit cut
them (:class:`MessagesFound`). QUERY_MESSAGE_BY_TIME answers :class:`MessagesInRange`: header
``count``, ``nextOffset`` (the queue offset to ask from next, as ``fromOffset``) and
``endOffset`` (the first offset stored after ``endTimestamp``, or the queue's readable max:
the range is read when ``nextOffset >= endOffset``); body the records as above.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, Final

from protocol.codes import RequestCode
from protocol.fields import FieldError, opt_bool, opt_int, opt_int_or_none, req_int, req_str
from protocol.remoting import Header, Scalar

__all__ = [
    "DEFAULT_MAX_NUM",
    "END_OF_TIME",
    "MAX_NUM",
    "MessagesFound",
    "MessagesInRange",
    "QueryMessage",
    "QueryMessageByTime",
    "ViewMessage",
]

DEFAULT_MAX_NUM: Final = 64
MAX_NUM: Final = 1024
END_OF_TIME: Final = (1 << 63) - 1


def _put_range(header: Header, begin_ms: int, end_ms: int) -> None:
    """A query's time range into ``header``; the defaults (0, the end of time) stay off the
    wire."""
    if begin_ms:
        header["beginTimestamp"] = begin_ms
    if end_ms != END_OF_TIME:
        header["endTimestamp"] = end_ms


def _range_of(header: Mapping[str, Scalar]) -> tuple[int, int, int]:
    """A query's ``beginTimestamp``, ``endTimestamp`` and ``maxNum``, checked."""
    begin = opt_int(header, "beginTimestamp", 0)
    end = opt_int(header, "endTimestamp", END_OF_TIME)
    max_num = opt_int(header, "maxNum", DEFAULT_MAX_NUM)
    if begin < 0 or end < 0:
        raise FieldError("beginTimestamp and endTimestamp must be >= 0")
    if begin > end:
        raise FieldError(f"beginTimestamp {begin} is after endTimestamp {end}")
    if not 1 <= max_num <= MAX_NUM:
        raise FieldError(f"maxNum must be 1..{MAX_NUM}")
    return begin, end, max_num


@dataclass(frozen=True, slots=True, kw_only=True)
class QueryMessage:
    """QUERY_MESSAGE: up to ``max_num`` messages of ``topic`` with ``key`` stored between
    ``begin_ms`` and ``end_ms``."""

    code: ClassVar[RequestCode] = RequestCode.QUERY_MESSAGE

    topic: str
    key: str
    begin_ms: int = 0
    end_ms: int = END_OF_TIME
    max_num: int = DEFAULT_MAX_NUM

    def encode(self) -> tuple[Header, bytes | None]:
        header: Header = {"topic": self.topic, "key": self.key, "maxNum": self.max_num}
        _put_range(header, self.begin_ms, self.end_ms)
        return header, None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> QueryMessage:
        topic = req_str(header, "topic")
        key = req_str(header, "key")
        begin, end, max_num = _range_of(header)
        return cls(topic=topic, key=key, begin_ms=begin, end_ms=end, max_num=max_num)


@dataclass(frozen=True, slots=True, kw_only=True)
class ViewMessage:
    """VIEW_MESSAGE_BY_ID: the record at CommitLog ``offset``."""

    code: ClassVar[RequestCode] = RequestCode.VIEW_MESSAGE_BY_ID

    offset: int

    def encode(self) -> tuple[Header, bytes | None]:
        return {"offset": self.offset}, None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> ViewMessage:
        offset = req_int(header, "offset")
        if offset < 0:
            raise FieldError("offset must be >= 0")
        return cls(offset=offset)


@dataclass(frozen=True, slots=True, kw_only=True)
class MessagesFound:
    """SUCCESS of a query or a view: ``count`` records in ``body``; a query's ``truncated``
    says whether the broker's byte limit left older ones out (None: a view, which does not
    say)."""

    count: int
    body: bytes
    truncated: bool | None = None

    def encode(self) -> tuple[Header, bytes | None]:
        header: Header = {"count": self.count}
        if self.truncated is not None:
            header["truncated"] = self.truncated
        return header, self.body

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> MessagesFound:
        truncated = None if header.get("truncated") is None else opt_bool(header, "truncated")
        return cls(count=req_int(header, "count"), body=body or b"", truncated=truncated)


@dataclass(frozen=True, slots=True, kw_only=True)
class QueryMessageByTime:
    """QUERY_MESSAGE_BY_TIME: up to ``max_num`` messages of queue ``queue_id`` of ``topic``
    stored between ``begin_ms`` and ``end_ms`` (both included), oldest first; from queue offset
    ``from_offset`` when given (a later page of the same range), else from the first message
    stored at or after ``begin_ms`` (found as SEARCH_OFFSET_BY_TIMESTAMP finds it)."""

    code: ClassVar[RequestCode] = RequestCode.QUERY_MESSAGE_BY_TIME

    topic: str
    queue_id: int
    begin_ms: int = 0
    end_ms: int = END_OF_TIME
    max_num: int = DEFAULT_MAX_NUM
    from_offset: int | None = None

    def encode(self) -> tuple[Header, bytes | None]:
        header: Header = {"topic": self.topic, "queueId": self.queue_id, "maxNum": self.max_num}
        _put_range(header, self.begin_ms, self.end_ms)
        if self.from_offset is not None:
            header["fromOffset"] = self.from_offset
        return header, None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> QueryMessageByTime:
        topic = req_str(header, "topic")
        queue_id = req_int(header, "queueId")
        if queue_id < 0:
            raise FieldError("queueId must be >= 0")
        begin, end, max_num = _range_of(header)
        from_offset = opt_int_or_none(header, "fromOffset")
        if from_offset is not None and from_offset < 0:
            raise FieldError("fromOffset must be >= 0")
        return cls(
            topic=topic,
            queue_id=queue_id,
            begin_ms=begin,
            end_ms=end,
            max_num=max_num,
            from_offset=from_offset,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class MessagesInRange:
    """SUCCESS of QUERY_MESSAGE_BY_TIME: ``count`` records in ``body``; ask again from
    ``next_offset`` while it is below ``end_offset`` (:attr:`done`)."""

    count: int
    next_offset: int
    end_offset: int
    body: bytes = b""

    @property
    def done(self) -> bool:
        return self.next_offset >= self.end_offset

    def encode(self) -> tuple[Header, bytes | None]:
        header: Header = {
            "count": self.count,
            "nextOffset": self.next_offset,
            "endOffset": self.end_offset,
        }
        return header, self.body

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> MessagesInRange:
        count = req_int(header, "count")
        next_offset = req_int(header, "nextOffset")
        end_offset = req_int(header, "endOffset")
        if count < 0 or next_offset < 0 or end_offset < 0:
            raise FieldError("count, nextOffset and endOffset must be >= 0")
        return cls(count=count, next_offset=next_offset, end_offset=end_offset, body=body or b"")
