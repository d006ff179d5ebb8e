"""QUERY_MESSAGE (12) and VIEW_MESSAGE_BY_ID (33) of classic clients and tools: the broker's
key index and its read of one message by CommitLog offset (what a message id carries), answered
in the stored-message layout (:func:`broker.classic.pull.classic_pull_body`).

Both serve committed messages only (up to the confirm offset), as pulls do. QUERY_MESSAGE gives
up to ``maxNum`` (at most 64, RocketMQ's default cap) messages of ``topic`` whose key is ``key``
stored between ``beginTimestamp`` and ``endTimestamp``, the newest ones when there are more;
none answers QUERY_NOT_FOUND. VIEW_MESSAGE_BY_ID of an offset where no visible message starts
answers SYSTEM_ERROR saying why, as RocketMQ's broker does.
"""

from __future__ import annotations

from broker.classic.pull import classic_pull_body
from broker.context import BrokerContext
from protocol.rocketmq_remoting.codes import RequestCode, ResponseCode
from protocol.rocketmq_remoting.frame import RemotingCommand, make_response
from protocol.rocketmq_remoting.headers import QueryMessageHeader, ViewMessageHeader
from remoting.classic_door import ClassicDoor, ClassicRefusal, ClassicSession
from storage.store import MessageNotFoundError, StoreError

__all__ = ["ClassicQuery"]

MAX_QUERY_MESSAGES = 64


class ClassicQuery:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx

    def register(self, door: ClassicDoor) -> None:
        door.register(RequestCode.QUERY_MESSAGE, self.query)
        door.register(RequestCode.VIEW_MESSAGE_BY_ID, self.view)

    def query(self, session: ClassicSession, req: RemotingCommand) -> RemotingCommand:
        h = QueryMessageHeader.parse(req.ext_fields)
        ctx = self.ctx
        limit = max(1, min(h.max_num, MAX_QUERY_MESSAGES))
        try:
            found = ctx.store.query_by_key(
                h.topic, h.key, h.begin_timestamp, h.end_timestamp, limit, ctx.visible_offset()
            )
        except StoreError as exc:
            raise ClassicRefusal(ResponseCode.QUERY_NOT_FOUND, str(exc)) from None
        if not found:
            raise ClassicRefusal(
                ResponseCode.QUERY_NOT_FOUND,
                f"no message of {h.topic} with key {h.key} in that time on {ctx.cfg.broker_name}",
            )
        newest = max(found, key=lambda f: f.record.physical_offset).record
        return make_response(
            req,
            ResponseCode.SUCCESS,
            ext_fields=QueryMessageHeader.answer(newest.store_timestamp, newest.physical_offset),
            body=classic_pull_body(b"".join(f.raw for f in found)),
        )

    def view(self, session: ClassicSession, req: RemotingCommand) -> RemotingCommand:
        h = ViewMessageHeader.parse(req.ext_fields)
        ctx = self.ctx
        try:
            hit = ctx.store.read_message(h.offset, ctx.visible_offset())
        except MessageNotFoundError as exc:
            raise ClassicRefusal(
                ResponseCode.SYSTEM_ERROR, f"{ctx.cfg.broker_name} at {ctx.cfg.listen}: {exc}"
            ) from None
        return make_response(req, ResponseCode.SUCCESS, body=classic_pull_body(hit.raw))
