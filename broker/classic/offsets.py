"""The offset requests of classic consumers: QUERY_CONSUMER_OFFSET (14), UPDATE_CONSUMER_OFFSET
(15), SEARCH_OFFSET_BY_TIMESTAMP (29), GET_MAX_OFFSET (30) and GET_MIN_OFFSET (31), on the
broker's consumer offsets and store: the offsets our own clients commit, so either door's
consumers of one group go on from the other's.

QUERY_CONSUMER_OFFSET of a group with no committed offset answers 0 while the queue still holds
its first message (offset 0), as RocketMQ's broker does (a new group starts at the beginning),
unless the header's ``setZeroIfNotFound`` is false; else QUERY_NOT_FOUND, and the client starts
where its consumeFromWhere says. GET_MAX_OFFSET counts what consumers may read (up to the
confirm offset).
"""

from __future__ import annotations

from broker.context import BrokerContext
from protocol.rocketmq_remoting.codes import RequestCode, ResponseCode
from protocol.rocketmq_remoting.frame import RemotingCommand, make_response
from protocol.rocketmq_remoting.headers import (
    QueryConsumerOffsetHeader,
    QueueHeader,
    SearchOffsetHeader,
    UpdateConsumerOffsetHeader,
    offset_answer,
)
from remoting.classic_door import ClassicDoor, ClassicRefusal, ClassicSession

__all__ = ["ClassicOffsets"]


class ClassicOffsets:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx

    def register(self, door: ClassicDoor) -> None:
        door.register(RequestCode.QUERY_CONSUMER_OFFSET, self.query)
        door.register(RequestCode.UPDATE_CONSUMER_OFFSET, self.update)
        door.register(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, self.search)
        door.register(RequestCode.GET_MAX_OFFSET, self.max_offset)
        door.register(RequestCode.GET_MIN_OFFSET, self.min_offset)

    def query(self, session: ClassicSession, req: RemotingCommand) -> RemotingCommand:
        h = QueryConsumerOffsetHeader.parse(req.ext_fields)
        offset = self.ctx.offsets.query(h.consumer_group, h.topic, h.queue_id)
        if offset is None:
            if h.set_zero_if_not_found is not False and (
                self.ctx.store.queue_min_offset(h.topic, h.queue_id) == 0
            ):
                offset = 0
            else:
                raise ClassicRefusal(
                    ResponseCode.QUERY_NOT_FOUND,
                    f"group {h.consumer_group} has no offset on {h.topic}:{h.queue_id}",
                )
        return make_response(req, ResponseCode.SUCCESS, ext_fields=offset_answer(offset))

    def update(self, session: ClassicSession, req: RemotingCommand) -> RemotingCommand:
        h = UpdateConsumerOffsetHeader.parse(req.ext_fields)
        offsets = self.ctx.offsets
        # The last consume time is when the offset last moved (a repeated commit keeps it).
        moved = offsets.query(h.consumer_group, h.topic, h.queue_id) != h.commit_offset
        offsets.commit(
            h.consumer_group,
            h.topic,
            h.queue_id,
            h.commit_offset,
            self.ctx.now_ms() if moved else None,
        )
        return make_response(req, ResponseCode.SUCCESS)

    def search(self, session: ClassicSession, req: RemotingCommand) -> RemotingCommand:
        h = SearchOffsetHeader.parse(req.ext_fields)
        offset = self.ctx.store.offset_by_timestamp(h.topic, h.queue_id, h.timestamp)
        return make_response(req, ResponseCode.SUCCESS, ext_fields=offset_answer(offset))

    def max_offset(self, session: ClassicSession, req: RemotingCommand) -> RemotingCommand:
        h = QueueHeader.parse(req.ext_fields)
        offset = self.ctx.store.queue_visible_max_offset(
            h.topic, h.queue_id, self.ctx.visible_offset()
        )
        return make_response(req, ResponseCode.SUCCESS, ext_fields=offset_answer(offset))

    def min_offset(self, session: ClassicSession, req: RemotingCommand) -> RemotingCommand:
        h = QueueHeader.parse(req.ext_fields)
        offset = self.ctx.store.queue_min_offset(h.topic, h.queue_id)
        return make_response(req, ResponseCode.SUCCESS, ext_fields=offset_answer(offset))
