"""POP_MESSAGE, ACK_MESSAGE, BATCH_ACK_MESSAGE and CHANGE_MESSAGE_INVISIBLETIME: requests and
their SUCCESS answers (docs/pop.md, docs/protocol.md). Pure: no sockets, no clock.

Requests (header fields; ``?`` may be left out)::

    POP_MESSAGE 200050      consumerGroup, topic, queueId? (-1: any), maxMsgNums,
                            invisibleTime (ms), pollTime? (ms, long polling),
                            expressionType? ("TAG" or "SQL92"), exp? (default "*")
    ACK_MESSAGE 200051      consumerGroup, receiptHandle
    CHANGE_MESSAGE_INVISIBLETIME 200053
                            consumerGroup, receiptHandle, invisibleTime (ms)
    BATCH_ACK_MESSAGE 200151
                            consumerGroup, receiptHandles (1..1024, separated by spaces)

SUCCESS answers: a POP's ``count``, ``receiptHandles`` and ``attempts`` (one per record, in
order, separated by spaces) with the records in the body (:class:`PopFound`); a batch ack's
``results`` (one code per handle) and ``remark`` (:class:`BatchAckAnswer`); a change's new
``receiptHandle`` (:class:`InvisibleChanged`). An answer that lacks or mistypes one of these
raises :class:`~protocol.fields.FieldError` too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from protocol.broker_requests import req_group
from protocol.codes import RequestCode
from protocol.fields import FieldError, opt_int, opt_str, req_int, req_str
from protocol.filter import TAG, FilterError, filter_type, parse_filter
from protocol.pop import MAX_POP_BATCH
from protocol.remoting import Header, Scalar

__all__ = [
    "MAX_INVISIBLE_MS",
    "MIN_INVISIBLE_MS",
    "AckRequest",
    "BatchAckAnswer",
    "BatchAckRequest",
    "ChangeInvisibleRequest",
    "InvisibleChanged",
    "PopFound",
    "PopRequest",
]

MIN_INVISIBLE_MS = 1_000
MAX_INVISIBLE_MS = 12 * 3600 * 1000


def _invisible(header: Mapping[str, Scalar]) -> int:
    ms = req_int(header, "invisibleTime")
    if not MIN_INVISIBLE_MS <= ms <= MAX_INVISIBLE_MS:
        raise FieldError(
            f"invisibleTime must be {MIN_INVISIBLE_MS}..{MAX_INVISIBLE_MS} ms, not {ms}"
        )
    return ms


@dataclass(frozen=True, slots=True, kw_only=True)
class PopRequest:
    """POP_MESSAGE: up to ``max_count`` messages of ``topic`` (queue ``queue_id``, -1 any) for
    ``group``, hidden from others for ``invisible_ms``; the broker waits up to ``poll_ms`` for
    the first one. ``expression`` is a tag expression (``expression_type`` TAG) or a SQL92
    condition over the message's properties (``expression_type`` SQL92)."""

    code: ClassVar[RequestCode] = RequestCode.POP_MESSAGE

    group: str
    topic: str
    queue_id: int = -1
    max_count: int
    invisible_ms: int
    poll_ms: int = 0
    expression_type: str = "TAG"
    expression: str = "*"

    def encode(self) -> tuple[Header, bytes | None]:
        header: Header = {
            "consumerGroup": self.group,
            "topic": self.topic,
            "queueId": self.queue_id,
            "maxMsgNums": self.max_count,
            "invisibleTime": self.invisible_ms,
            "pollTime": self.poll_ms,
            "expressionType": self.expression_type,
            "exp": self.expression,
        }
        return header, None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> PopRequest:
        group = req_group(header)
        topic = req_str(header, "topic")
        queue_id = opt_int(header, "queueId", -1)
        max_count = req_int(header, "maxMsgNums")
        if max_count < 1:
            raise FieldError(f"maxMsgNums must be at least 1, not {max_count}")
        invisible = _invisible(header)
        expression_type = opt_str(header, "expressionType", TAG)
        try:
            filter_type(expression_type)
        except FilterError as exc:
            raise FieldError(f"expressionType: {exc}") from None
        expression = opt_str(header, "exp", "*")
        try:
            parse_filter(expression_type, expression)
        except FilterError as exc:
            raise FieldError(str(exc)) from None
        return cls(
            group=group,
            topic=topic,
            queue_id=queue_id,
            max_count=max_count,
            invisible_ms=invisible,
            poll_ms=opt_int(header, "pollTime", 0),
            expression_type=expression_type,
            expression=expression,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class AckRequest:
    """ACK_MESSAGE: the message of ``receipt_handle`` is consumed."""

    code: ClassVar[RequestCode] = RequestCode.ACK_MESSAGE

    group: str
    receipt_handle: str

    def encode(self) -> tuple[Header, bytes | None]:
        return {"consumerGroup": self.group, "receiptHandle": self.receipt_handle}, None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> AckRequest:
        return cls(group=req_group(header), receipt_handle=req_str(header, "receiptHandle"))


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchAckRequest:
    """BATCH_ACK_MESSAGE: the messages of 1..1024 receipt handles are consumed."""

    code: ClassVar[RequestCode] = RequestCode.BATCH_ACK_MESSAGE

    group: str
    receipt_handles: tuple[str, ...]

    def encode(self) -> tuple[Header, bytes | None]:
        header: Header = {
            "consumerGroup": self.group,
            "receiptHandles": " ".join(self.receipt_handles),
        }
        return header, None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> BatchAckRequest:
        group = req_group(header)
        handles = tuple(req_str(header, "receiptHandles").split())
        if not 0 < len(handles) <= MAX_POP_BATCH:
            raise FieldError(f"receiptHandles must hold 1..{MAX_POP_BATCH} handles")
        return cls(group=group, receipt_handles=handles)


@dataclass(frozen=True, slots=True, kw_only=True)
class ChangeInvisibleRequest:
    """CHANGE_MESSAGE_INVISIBLETIME: hide the message of ``receipt_handle`` for
    ``invisible_ms`` from now; the answer holds its new handle."""

    code: ClassVar[RequestCode] = RequestCode.CHANGE_MESSAGE_INVISIBLETIME

    group: str
    receipt_handle: str
    invisible_ms: int

    def encode(self) -> tuple[Header, bytes | None]:
        header: Header = {
            "consumerGroup": self.group,
            "receiptHandle": self.receipt_handle,
            "invisibleTime": self.invisible_ms,
        }
        return header, None

    @classmethod
    def parse(
        cls, header: Mapping[str, Scalar], body: bytes | None = None
    ) -> ChangeInvisibleRequest:
        group = req_group(header)
        invisible = _invisible(header)
        return cls(
            group=group, receipt_handle=req_str(header, "receiptHandle"), invisible_ms=invisible
        )


# -- answers ----------------------------------------------------------------------------------


def _words(header: Mapping[str, Scalar], name: str) -> list[str]:
    """A field holding words separated by spaces (none when empty); it must be there."""
    value = header.get(name)
    if not isinstance(value, str):
        raise FieldError(f"header field {name!r} must be a string")
    return value.split()


@dataclass(frozen=True, slots=True, kw_only=True)
class PopFound:
    """A POP's SUCCESS: ``body`` holds the records back to back (as a pull's), each with its
    receipt handle and delivery attempt, in order."""

    receipt_handles: tuple[str, ...]
    attempts: tuple[int, ...]
    body: bytes

    def encode(self) -> tuple[Header, bytes | None]:
        header: Header = {
            "count": len(self.receipt_handles),
            "receiptHandles": " ".join(self.receipt_handles),
            "attempts": " ".join(str(a) for a in self.attempts),
        }
        return header, self.body

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> PopFound:
        handles = _words(header, "receiptHandles")
        attempts_text = _words(header, "attempts")
        try:
            attempts = tuple(int(a) for a in attempts_text)
        except ValueError:
            raise FieldError("header field 'attempts' must hold integers") from None
        return cls(receipt_handles=tuple(handles), attempts=attempts, body=body or b"")


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchAckAnswer:
    """A batch ack's SUCCESS: one response code per handle, in order (0 acked), and why the
    others were refused."""

    results: tuple[int, ...]
    remark: str = ""

    def encode(self) -> tuple[Header, bytes | None]:
        header: Header = {"results": " ".join(str(c) for c in self.results)}
        if self.remark:
            header["remark"] = self.remark
        return header, None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> BatchAckAnswer:
        try:
            results = tuple(int(c) for c in opt_str(header, "results").split())
        except ValueError:
            raise FieldError("header field 'results' must hold integers") from None
        return cls(results=results, remark=opt_str(header, "remark"))


@dataclass(frozen=True, slots=True, kw_only=True)
class InvisibleChanged:
    """A change of invisible time's SUCCESS: the message's new receipt handle."""

    receipt_handle: str

    def encode(self) -> tuple[Header, bytes | None]:
        return {"receiptHandle": self.receipt_handle}, None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> InvisibleChanged:
        return cls(receipt_handle=req_str(header, "receiptHandle"))
