"""CONSUMER_SEND_MSG_BACK (36) of classic consumers: a message they failed to consume goes to
the group's retry topic after its back-off, or to its DLQ once its retries are used up
(:func:`broker.send_back.send_back`, the broker's own send-back).

Header: ``offset`` (the message's CommitLog offset, as the pull body's physicalOffset gave it),
``group``, ``delayLevel`` (-1: straight to the DLQ; any other level: the group's back-off, ours,
decides the delay), ``originTopic`` (the topic the application consumed it from; when left out,
the one the stored message says), ``maxReconsumeTimes`` (lowers the group's setting). The
request must come over a connection a member of the group heart-beats on. The retry copy
carries ``RECONSUME_TIME``, which the pull body gives as reconsumeTimes, and ``RETRY_TOPIC``,
which the classic clients read as the message's topic.
"""

from __future__ import annotations

from broker.classic.codes import classic_code
from broker.context import BrokerContext
from broker.send_back import SendBackRefused, origin_topic_of, send_back
from broker.stored_record import visible_record_at
from protocol.rocketmq_remoting.codes import RequestCode, ResponseCode
from protocol.rocketmq_remoting.frame import RemotingCommand, make_response
from protocol.rocketmq_remoting.headers import ConsumerSendMsgBackHeader
from remoting.classic_door import ClassicDoor, ClassicRefusal, ClassicSession

__all__ = ["ClassicSendBack"]


class ClassicSendBack:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx

    def register(self, door: ClassicDoor) -> None:
        door.register(RequestCode.CONSUMER_SEND_MSG_BACK, self.send_back)

    async def send_back(self, session: ClassicSession, req: RemotingCommand) -> RemotingCommand:
        h = ConsumerSendMsgBackHeader.parse(req.ext_fields)
        origin = h.origin_topic
        if not origin:
            record = visible_record_at(self.ctx, h.offset)
            origin = (
                origin_topic_of(record.topic, record.properties, h.group) if record else None
            ) or ""
        try:
            await send_back(
                self.ctx,
                group=h.group,
                offset=h.offset,
                origin_topic=origin,
                connection_id=id(session.conn),
                max_reconsume_times=h.max_reconsume_times,
                dead_letter=h.delay_level < 0,
            )
        except SendBackRefused as refused:
            raise ClassicRefusal(classic_code(refused.code), refused.remark) from None
        return make_response(req, ResponseCode.SUCCESS)
