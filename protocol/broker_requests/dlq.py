"""QUERY_DLQ_MESSAGES and RESEND_DLQ_MESSAGES: a consumer group's dead letter queue, looked
at and re-sent to the messages' original topics (docs/protocol.md, rmqctl queryDlq and
resendDlq). Pure: no sockets, no clock.

Requests (header fields; ``?`` may be left out)::

    QUERY_DLQ_MESSAGES 5200    consumerGroup, offset? (the DLQ's first retained one),
                               maxCount? (1000, at most 10,000)
    RESEND_DLQ_MESSAGES 5201   consumerGroup, and either msgId (one message) or all = true
                               (every message not re-sent before)

Both answer SUCCESS with a msgpack map in the body.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, Final

from protocol.broker_requests import req_group
from protocol.codes import RequestCode
from protocol.fields import FieldError, opt_bool, opt_int, opt_str
from protocol.remoting import Header, Scalar

__all__ = ["DEFAULT_QUERY", "MAX_QUERY", "DlqQuery", "DlqResend"]

MAX_QUERY: Final = 10_000
DEFAULT_QUERY: Final = 1000


@dataclass(frozen=True, slots=True, kw_only=True)
class DlqQuery:
    """QUERY_DLQ_MESSAGES: up to ``max_count`` messages of ``group``'s DLQ from queue offset
    ``offset`` (-1: its first retained one)."""

    code: ClassVar[RequestCode] = RequestCode.QUERY_DLQ_MESSAGES

    group: str
    offset: int = -1
    max_count: int = DEFAULT_QUERY

    def encode(self) -> tuple[Header, bytes | None]:
        header: Header = {"consumerGroup": self.group}
        if self.offset >= 0:
            header["offset"] = self.offset
        header["maxCount"] = self.max_count
        return header, None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> DlqQuery:
        group = req_group(header)
        offset = opt_int(header, "offset", -1)
        max_count = opt_int(header, "maxCount", DEFAULT_QUERY)
        if not 1 <= max_count <= MAX_QUERY:
            raise FieldError(f"maxCount must be 1..{MAX_QUERY}")
        return cls(group=group, offset=max(offset, -1), max_count=max_count)


@dataclass(frozen=True, slots=True, kw_only=True)
class DlqResend:
    """RESEND_DLQ_MESSAGES: re-send the DLQ message ``msg_id`` of ``group``, or (None) every
    one not re-sent before."""

    code: ClassVar[RequestCode] = RequestCode.RESEND_DLQ_MESSAGES

    group: str
    msg_id: str | None = None

    def encode(self) -> tuple[Header, bytes | None]:
        header: Header = {"consumerGroup": self.group}
        if self.msg_id:
            header["msgId"] = self.msg_id
        else:
            header["all"] = True
        return header, None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> DlqResend:
        group = req_group(header)
        msg_id = opt_str(header, "msgId")
        resend_all = opt_bool(header, "all")
        if bool(msg_id) == resend_all:
            raise FieldError("give exactly one of msgId and all = true")
        return cls(group=group, msg_id=msg_id or None)
