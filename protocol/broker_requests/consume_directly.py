"""CONSUME_MESSAGE_DIRECTLY (309, RocketMQ's number): deliver one stored message to a consumer
group again (``rmqctl resendMessage``). Pure: no sockets, no clock.

Request header (RocketMQ's ConsumeMessageDirectlyResultRequestHeader, the fields we use; ``?``
may be left out)::

    consumerGroup   the group
    msgId           the message's offset id (store host and CommitLog offset, 32 hex digits)
    clientId?       a member that must be live (RocketMQ names the member it calls)
    topic?          the topic the group consumed it from (checked when given)
    force?          store the copy although no live member is known (ours; default false)

The answer (SUCCESS, :class:`ConsumedDirectly`): ``topic`` (the group's retry topic),
``msgId`` and ``queueOffset`` of the copy stored there (queue 0), ``originTopic``, the
``members`` the broker knows live, and ``consumeResult``: ``CR_RESENT`` (ours: the copy is
stored for the group; RocketMQ's CR_SUCCESS and the like name a member's listener result,
which our fronts do not report, see docs/operations.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, Final

from protocol.codes import RequestCode
from protocol.fields import FieldError, opt_bool, opt_str, req_int, req_str
from protocol.remoting import Header, Scalar
from protocol.retry import group_error

__all__ = ["CR_RESENT", "ConsumeMessageDirectly", "ConsumedDirectly"]

CR_RESENT: Final = "CR_RESENT"


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumeMessageDirectly:
    """CONSUME_MESSAGE_DIRECTLY: the message ``msg_id`` delivered to ``group`` again."""

    code: ClassVar[RequestCode] = RequestCode.CONSUME_MESSAGE_DIRECTLY

    group: str
    msg_id: str
    client_id: str = ""
    topic: str = ""
    force: bool = False

    def encode(self) -> tuple[Header, bytes | None]:
        header: Header = {"consumerGroup": self.group, "msgId": self.msg_id}
        if self.client_id:
            header["clientId"] = self.client_id
        if self.topic:
            header["topic"] = self.topic
        if self.force:
            header["force"] = True
        return header, None

    @classmethod
    def parse(
        cls, header: Mapping[str, Scalar], body: bytes | None = None
    ) -> ConsumeMessageDirectly:
        group = req_str(header, "consumerGroup")
        error = group_error(group)
        if error is not None:
            raise FieldError(error)
        msg_id = req_str(header, "msgId").strip().upper()
        if not msg_id:
            raise FieldError("msgId must not be empty")
        return cls(
            group=group,
            msg_id=msg_id,
            client_id=opt_str(header, "clientId"),
            topic=opt_str(header, "topic"),
            force=opt_bool(header, "force"),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumedDirectly:
    """SUCCESS of CONSUME_MESSAGE_DIRECTLY: where the copy for the group was stored."""

    topic: str
    msg_id: str
    queue_offset: int
    origin_topic: str
    members: int
    consume_result: str = CR_RESENT

    def encode(self) -> tuple[Header, bytes | None]:
        header: Header = {
            "consumeResult": self.consume_result,
            "topic": self.topic,
            "msgId": self.msg_id,
            "queueOffset": self.queue_offset,
            "originTopic": self.origin_topic,
            "members": self.members,
        }
        return header, None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> ConsumedDirectly:
        offset = req_int(header, "queueOffset")
        members = req_int(header, "members")
        if offset < 0 or members < 0:
            raise FieldError("queueOffset and members must be >= 0")
        return cls(
            topic=req_str(header, "topic"),
            msg_id=req_str(header, "msgId"),
            queue_offset=offset,
            origin_topic=req_str(header, "originTopic"),
            members=members,
            consume_result=req_str(header, "consumeResult"),
        )
