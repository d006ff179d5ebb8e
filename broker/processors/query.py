"""Message lookup: QUERY_MESSAGE (by key, through the key index), VIEW_MESSAGE_BY_ID (by
CommitLog offset, which a message id carries) and QUERY_MESSAGE_BY_TIME (a queue's messages
stored in a time range).

All answer committed messages only (up to the confirm offset in controller mode, as pulls do),
as records back to back in the body, exactly as stored (``protocol.message.iter_records``
decodes them: properties, store time, store host, body).
"""

from __future__ import annotations

from collections.abc import Awaitable
from datetime import UTC, datetime

from broker.context import BrokerContext
from broker.processors.consume_directly import ConsumeDirectlyProcessor
from protocol.broker_requests.query import (
    END_OF_TIME,
    MessagesFound,
    MessagesInRange,
    QueryMessage,
    QueryMessageByTime,
    ViewMessage,
)
from protocol.codes import RequestCode, ResponseCode
from protocol.remoting import Frame, response
from remoting.server import Connection, RemotingServer, error_response
from storage.queue_read import GetStatus
from storage.store import MessageNotFoundError, StoreError, UnreadableMessageError


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


class QueryProcessor:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx

    def register(self, server: RemotingServer) -> None:
        server.register(RequestCode.QUERY_MESSAGE, self.query_message)
        server.register(RequestCode.VIEW_MESSAGE_BY_ID, self.view_message)
        server.register(RequestCode.QUERY_MESSAGE_BY_TIME, self.query_by_time)
        # resendMessage's request: found by id like a lookup, served beside them.
        ConsumeDirectlyProcessor(self.ctx).register(server)

    def query_message(self, conn: Connection, req: Frame) -> Frame:
        """Header: topic, key, beginTimestamp (ms, default 0), endTimestamp (ms, default the end
        of time), maxNum (default 64, at most 1024). Answers SUCCESS with ``count`` records
        (``truncated`` when the byte limit cut them), TOPIC_NOT_EXIST, BAD_REQUEST, or
        QUERY_NOT_FOUND when no index covers the range (or the index is off)."""
        query = QueryMessage.parse(req.header, req.body)
        topic, key, begin, end = query.topic, query.key, query.begin_ms, query.end_ms
        ctx = self.ctx
        if ctx.topics.get(topic) is None:
            return error_response(
                req, ResponseCode.TOPIC_NOT_EXIST, f"topic {topic} does not exist"
            )
        store = ctx.store
        oldest = store.oldest_store_timestamp()
        if oldest is not None and end < oldest:
            return error_response(
                req,
                ResponseCode.QUERY_NOT_FOUND,
                f"no index covers {_when(begin)}..{_when(end)} on {ctx.cfg.broker_name}: its "
                f"oldest message was stored at {_when(oldest)}",
            )
        try:
            found = store.query_by_key(topic, key, begin, end, query.max_num, ctx.visible_offset())
        except StoreError as exc:
            return error_response(req, ResponseCode.QUERY_NOT_FOUND, str(exc))
        parts: list[bytes] = []
        size = 0
        limit = ctx.cfg.max_pull_bytes
        for hit in reversed(found):  # keep the newest when the byte limit cuts
            if parts and size + len(hit.raw) > limit:
                break
            parts.append(hit.raw)
            size += len(hit.raw)
        parts.reverse()
        answer = MessagesFound(
            count=len(parts), body=b"".join(parts), truncated=len(parts) < len(found)
        )
        return response(req, ResponseCode.SUCCESS, *answer.encode())

    def view_message(self, conn: Connection, req: Frame) -> Frame | Awaitable[Frame]:
        """Header: offset (the CommitLog offset a message id carries). Answers SUCCESS with the
        record, or QUERY_NOT_FOUND saying why there is none. A record there that fails its
        checks is repaired from another replica first when one may have it (issue 31)."""
        return self._view(req, ViewMessage.parse(req.header, req.body).offset, repair=True)

    def _view(self, req: Frame, offset: int, *, repair: bool) -> Frame | Awaitable[Frame]:
        ctx = self.ctx
        try:
            hit = ctx.store.read_message(offset, ctx.visible_offset())
        except MessageNotFoundError as exc:
            repairer = ctx.store.repairs.repairer
            if repair and repairer is not None and isinstance(exc, UnreadableMessageError):
                repairing = repairer.start(offset)
                if repairing is not None:
                    return self._view_after(repairing, req, offset)
            return error_response(
                req,
                ResponseCode.QUERY_NOT_FOUND,
                f"{ctx.cfg.broker_name} at {ctx.cfg.listen}: {exc}",
            )
        return response(req, ResponseCode.SUCCESS, *MessagesFound(count=1, body=hit.raw).encode())

    async def _view_after(self, repairing: Awaitable[object], req: Frame, offset: int) -> Frame:
        await repairing
        answer = self._view(req, offset, repair=False)
        return await answer if isinstance(answer, Awaitable) else answer

    def query_by_time(self, conn: Connection, req: Frame) -> Frame:
        """Header: topic, queueId, beginTimestamp, endTimestamp, maxNum, fromOffset
        (:class:`QueryMessageByTime`). The range of queue offsets is found by store time as
        SEARCH_OFFSET_BY_TIMESTAMP finds an offset (a binary search of the ConsumeQueue: store
        times rise with the queue offset), then up to maxNum records of it are read as a pull
        reads them (committed only, the broker's byte limit). Answers SUCCESS
        (:class:`MessagesInRange`), TOPIC_NOT_EXIST, QUEUE_NOT_EXIST, BAD_REQUEST, or
        MESSAGE_CORRUPT naming a record that cannot be read (``physicalOffset``)."""
        ask = QueryMessageByTime.parse(req.header, req.body)
        ctx = self.ctx
        name = ctx.cfg.broker_name
        tc = ctx.topics.get(ask.topic)
        if tc is None:
            return error_response(
                req, ResponseCode.TOPIC_NOT_EXIST, f"topic {ask.topic} does not exist on {name}"
            )
        if ask.queue_id >= tc.queues:
            return error_response(
                req,
                ResponseCode.QUEUE_NOT_EXIST,
                f"queueId {ask.queue_id} out of range 0..{tc.queues - 1} of {ask.topic} on {name}",
            )
        store, topic, queue_id = ctx.store, ask.topic, ask.queue_id
        visible = ctx.visible_offset()
        readable = store.queue_visible_max_offset(topic, queue_id, visible)
        end = readable
        if ask.end_ms != END_OF_TIME:
            end = min(end, store.offset_by_timestamp(topic, queue_id, ask.end_ms + 1))
        start = ask.from_offset
        if start is None:
            start = store.offset_by_timestamp(topic, queue_id, ask.begin_ms)
        start = max(start, store.queue_min_offset(topic, queue_id))
        if start >= end:
            answer = MessagesInRange(count=0, next_offset=max(start, end), end_offset=end)
            return response(req, ResponseCode.SUCCESS, *answer.encode())
        res = store.get(
            topic, queue_id, start, min(ask.max_num, end - start), ctx.cfg.max_pull_bytes, visible
        )
        if res.status is GetStatus.CORRUPT:
            remark = (
                f"queue {topic}:{queue_id} offset {start} on {name} cannot be read "
                f"(commitlog offset {res.corrupt_offset}): {res.reason}"
            )
            return response(
                req,
                ResponseCode.MESSAGE_CORRUPT,
                {"remark": remark, "physicalOffset": res.corrupt_offset},
            )
        if res.status is not GetStatus.FOUND:  # deleted or not yet readable meanwhile
            answer = MessagesInRange(count=0, next_offset=end, end_offset=end)
            return response(req, ResponseCode.SUCCESS, *answer.encode())
        answer = MessagesInRange(
            count=res.count, next_offset=res.next_offset, end_offset=end, body=res.body
        )
        return response(req, ResponseCode.SUCCESS, *answer.encode())
