"""Message lookup: QUERY_MESSAGE (by key, through the key index) and VIEW_MESSAGE_BY_ID (by
CommitLog offset, which a message id carries).

Both answer committed messages only (up to the confirm offset in controller mode, as pulls do),
as records back to back in the body, exactly as stored (``protocol.message.iter_records``
decodes them: properties, store time, store host, body).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Final

from broker.context import BrokerContext
from protocol.codes import RequestCode, ResponseCode
from protocol.fields import FieldError, opt_int, req_int, req_str
from protocol.remoting import Frame, response
from remoting.server import Connection, RemotingServer, error_response
from storage.store import MessageNotFoundError, StoreError

DEFAULT_MAX_NUM: Final = 64
MAX_NUM: Final = 1024
END_OF_TIME: Final = (1 << 63) - 1


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
        h = req.header
        topic = req_str(h, "topic")
        key = req_str(h, "key")
        begin = opt_int(h, "beginTimestamp", 0)
        end = opt_int(h, "endTimestamp", END_OF_TIME)
        max_num = opt_int(h, "maxNum", DEFAULT_MAX_NUM)
        if begin < 0 or end < 0:
            raise FieldError("beginTimestamp and endTimestamp must be >= 0")
        if begin > end:
            raise FieldError(f"beginTimestamp {begin} is after endTimestamp {end}")
        if not 1 <= max_num <= MAX_NUM:
            raise FieldError(f"maxNum must be 1..{MAX_NUM}")
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
            found = store.query_by_key(topic, key, begin, end, max_num, ctx.visible_offset())
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
        header = {"count": len(parts), "truncated": len(parts) < len(found)}
        return response(req, ResponseCode.SUCCESS, header, b"".join(parts))

    def view_message(self, conn: Connection, req: Frame) -> Frame:
        """Header: offset (the CommitLog offset a message id carries). Answers SUCCESS with the
        record, or QUERY_NOT_FOUND saying why there is none."""
        offset = req_int(req.header, "offset")
        if offset < 0:
            raise FieldError("offset must be >= 0")
        ctx = self.ctx
        try:
            hit = ctx.store.read_message(offset, ctx.visible_offset())
        except MessageNotFoundError as exc:
            return error_response(
                req,
                ResponseCode.QUERY_NOT_FOUND,
                f"{ctx.cfg.broker_name} at {ctx.cfg.listen}: {exc}",
            )
        return response(req, ResponseCode.SUCCESS, {"count": 1}, hit.raw)
