"""CONSUMER_SEND_MSG_BACK (36): a consumer nacks a message; the broker re-publishes it to the
group's retry topic after its back-off, or to the group's DLQ (docs/protocol.md). Pure: no
sockets, no clock.

Request header (RocketMQ's ConsumerSendMsgBackRequestHeader, the fields we use): ``group``,
``offset`` (the message's CommitLog offset), ``originTopic``, ``originMsgId``?,
``reason``? (ours), ``maxReconsumeTimes``? (lowers the group's setting). SUCCESS answers
``reconsumeTimes``, ``deadLetter``, ``deliverAtMs`` (a retry's), ``topic`` (the retry or DLQ
topic) and ``msgId`` (the copy's id).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from protocol.broker_requests import req_group
from protocol.codes import RequestCode
from protocol.fields import FieldError, opt_int, opt_int_or_none, opt_str, req_int, req_str
from protocol.remoting import Header, Scalar

__all__ = ["SendBack", "SentBack"]


@dataclass(frozen=True, slots=True, kw_only=True)
class SendBack:
    """CONSUMER_SEND_MSG_BACK: ``group`` failed the message at CommitLog ``offset``, consumed
    from ``origin_topic``; ``max_reconsume_times`` (None: the group's) caps its retries."""

    code: ClassVar[RequestCode] = RequestCode.CONSUMER_SEND_MSG_BACK

    group: str
    offset: int
    origin_topic: str
    origin_msg_id: str = ""
    reason: str = ""
    max_reconsume_times: int | None = None

    def encode(self) -> tuple[Header, bytes | None]:
        header: Header = {
            "group": self.group,
            "offset": self.offset,
            "originTopic": self.origin_topic,
            "originMsgId": self.origin_msg_id,
            "reason": self.reason,
        }
        if self.max_reconsume_times is not None:
            header["maxReconsumeTimes"] = self.max_reconsume_times
        return header, None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> SendBack:
        group = req_group(header, "group")
        offset = req_int(header, "offset")
        origin_topic = req_str(header, "originTopic")
        reason = opt_str(header, "reason")
        client_max = opt_int(header, "maxReconsumeTimes", -1)
        return cls(
            group=group,
            offset=offset,
            origin_topic=origin_topic,
            origin_msg_id=opt_str(header, "originMsgId"),
            reason=reason,
            max_reconsume_times=client_max if client_max >= 0 else None,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class SentBack:
    """CONSUMER_SEND_MSG_BACK's SUCCESS: the copy ``msg_id`` in ``topic`` (the group's retry
    topic, delivered at ``deliver_at_ms``, or its DLQ), and the message's reconsume count."""

    reconsume_times: int
    dead_letter: bool
    topic: str
    msg_id: str
    deliver_at_ms: int | None = None

    def encode(self) -> tuple[Header, bytes | None]:
        header: Header = {"reconsumeTimes": self.reconsume_times, "deadLetter": self.dead_letter}
        if self.deliver_at_ms is not None:
            header["deliverAtMs"] = self.deliver_at_ms
        header["topic"] = self.topic
        header["msgId"] = self.msg_id
        return header, None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> SentBack:
        dead = header.get("deadLetter")
        if not isinstance(dead, bool):
            raise FieldError("header field 'deadLetter' must be a boolean")
        return cls(
            reconsume_times=req_int(header, "reconsumeTimes"),
            dead_letter=dead,
            topic=req_str(header, "topic"),
            msg_id=req_str(header, "msgId"),
            deliver_at_ms=opt_int_or_none(header, "deliverAtMs"),
        )
