"""RECALL_MESSAGE (RocketMQ 5.3's number): recall a scheduled message before its delivery.

Header ``topic`` and ``msgId`` (the id its send answered). The master checks the CommitLog
record at that id's offset is a scheduled message of that topic still pending, appends a recall
record (so every replica cancels it from the CommitLog too) and cancels it in its wheel; it
answers once the recall record is as durable as a send (all-ack waits for the replicas).
Refusals: BAD_REQUEST (malformed id), MESSAGE_ILLEGAL (not a scheduled message of that topic),
QUERY_NOT_FOUND (unknown id, or already delivered or recalled), NOT_MASTER / MASTER_FENCED.
The decisions are :func:`broker.recall_scheduled.recall_scheduled`'s.
"""

from __future__ import annotations

from broker.context import BrokerContext
from broker.durable_wait import DurableAnswer, answer_when_durable
from broker.recall_scheduled import recall_scheduled
from broker.timer.recall import RecallError
from protocol.broker_requests.recall import Recalled, RecallRequest
from protocol.codes import RequestCode, ResponseCode
from protocol.remoting import Frame, response
from remoting.server import Connection, RemotingServer, error_response


class RecallProcessor:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx

    def register(self, server: RemotingServer) -> None:
        server.register(RequestCode.RECALL_MESSAGE, self.recall)

    def recall(self, conn: Connection, req: Frame) -> Frame | DurableAnswer:
        ctx = self.ctx
        recall = RecallRequest.parse(req.header, req.body)
        try:
            result = recall_scheduled(ctx.gate, ctx.timer, recall.topic, recall.msg_id)
        except RecallError as refused:
            return error_response(req, refused.code, refused.remark)
        resp = response(req, ResponseCode.SUCCESS, *Recalled(msg_id=recall.msg_id).encode())
        return answer_when_durable(ctx, result, req, resp)
