"""Message lookup: QUERY_MESSAGE (by key, through the key index) and VIEW_MESSAGE_BY_ID (by
CommitLog offset, which a message id carries).

Both answer committed messages only (up to the confirm offset in controller mode, as pulls do),
as records back to back in the body, exactly as stored (``protocol.message.iter_records``
decodes them: properties, store time, store host, body).
"""

from __future__ import annotations

from datetime import UTC, datetime

from broker.context import BrokerContext
from protocol.broker_requests.query import MessagesFound, QueryMessage, ViewMessage
from protocol.codes import RequestCode, ResponseCode
from protocol.remoting import Frame, response
from remoting.server import Connection, RemotingServer, error_response
from storage.store import MessageNotFoundError, StoreError


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


class QueryProcessor:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx

    def register(self, server: RemotingServer) -> None:
        server.register(RequestCode.QUERY_MESSAGE, self.query_message)
        server.register(RequestCode.VIEW_MESSAGE_BY_ID, self.view_message)

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

    def view_message(self, conn: Connection, req: Frame) -> Frame:
        """Header: offset (the CommitLog offset a message id carries). Answers SUCCESS with the
        record, or QUERY_NOT_FOUND saying why there is none."""
        offset = ViewMessage.parse(req.header, req.body).offset
        ctx = self.ctx
        try:
            hit = ctx.store.read_message(offset, ctx.visible_offset())
        except MessageNotFoundError as exc:
            return error_response(
                req,
                ResponseCode.QUERY_NOT_FOUND,
                f"{ctx.cfg.broker_name} at {ctx.cfg.listen}: {exc}",
            )
        return response(req, ResponseCode.SUCCESS, *MessagesFound(count=1, body=hit.raw).encode())
