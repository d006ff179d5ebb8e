"""POP_MESSAGE, ACK_MESSAGE and CHANGE_MESSAGE_INVISIBLETIME (docs/pop.md, docs/protocol.md).

Requests (header fields; ``?`` may be left out)::

    POP_MESSAGE 200050      consumerGroup, topic, queueId? (-1: any), maxMsgNums,
                            invisibleTime (ms), pollTime? (ms, long polling),
                            expressionType? ("TAG"), exp? (tag expression, default "*")
    ACK_MESSAGE 200051      consumerGroup, receiptHandle
    CHANGE_MESSAGE_INVISIBLETIME 200053
                            consumerGroup, receiptHandle, invisibleTime (ms)
    BATCH_ACK_MESSAGE 200151
                            consumerGroup, receiptHandles (1..1024, separated by spaces)

A POP answers SUCCESS with ``count``, the records back to back in the body (as a pull's), and
``receiptHandles`` / ``attempts``: one handle and one attempt number per record, in order,
separated by spaces; PULL_NOT_FOUND when nothing came within ``pollTime``. An ack answers
SUCCESS (also for a repeated ack); a change answers SUCCESS with ``receiptHandle``, the new
handle. A bad handle answers RECEIPT_HANDLE_INVALID, one no longer in flight
RECEIPT_HANDLE_EXPIRED; nothing is written then. A batch ack answers SUCCESS with ``results``:
one code per handle, in order (0 acked; 5020 or 5021 as for one ack, ``remark`` says why), the
acked ones written as one ack record.
"""

from __future__ import annotations

from collections.abc import Awaitable

from broker.context import BrokerContext
from broker.durable_wait import DurableAnswer, answer_when_durable
from broker.pop.acks import HandleRefused, ack_batch, ack_one, change_invisible
from broker.pop.message import PopMessage
from broker.pop.receive import NOT_DURABLE, PopDenied, Popped, pop_messages
from broker.pop.service import PopService
from protocol.broker_requests.pop import (
    AckRequest,
    BatchAckAnswer,
    BatchAckRequest,
    ChangeInvisibleRequest,
    InvisibleChanged,
    PopFound,
    PopRequest,
)
from protocol.codes import RequestCode, ResponseCode
from protocol.remoting import Frame, Header, response
from remoting.server import Connection, RemotingServer, error_response
from storage.store import PutResult


class PopProcessor:
    def __init__(self, ctx: BrokerContext, service: PopService) -> None:
        self.ctx = ctx
        self.service = service

    def register(self, server: RemotingServer) -> None:
        server.register(RequestCode.POP_MESSAGE, self.pop)
        server.register(RequestCode.ACK_MESSAGE, self.ack)
        server.register(RequestCode.CHANGE_MESSAGE_INVISIBLETIME, self.change)
        server.register(RequestCode.BATCH_ACK_MESSAGE, self.batch_ack)

    # -- POP: broker/pop/receive.py decides ----------------------------------------------------
    def pop(self, conn: Connection, req: Frame) -> Frame | DurableAnswer | Awaitable[Frame]:
        pop = PopRequest.parse(req.header, req.body)
        try:
            popped = pop_messages(self.service, self.ctx, pop)
        except PopDenied as denied:
            return error_response(req, denied.code, denied.remark)
        if isinstance(popped, Popped):
            # Answered at once, or once its checkpoint is durable: only a long poll becomes a
            # coroutine.
            return answer_when_durable(
                self.ctx, popped.last, req, self._popped(req, popped.messages), NOT_DURABLE
            )
        return self._later(req, popped)

    async def _later(self, req: Frame, later: Awaitable[Popped]) -> Frame:
        try:
            popped = await later
        except PopDenied as denied:
            return error_response(req, denied.code, denied.remark)
        return self._popped(req, popped.messages)

    @staticmethod
    def _popped(req: Frame, got: list[PopMessage]) -> Frame:
        if not got:
            return response(req, ResponseCode.PULL_NOT_FOUND, {"remark": "no message"})
        found = PopFound(
            receipt_handles=tuple(m.handle for m in got),
            attempts=tuple(m.attempt for m in got),
            body=b"".join(m.raw for m in got),
        )
        return response(req, ResponseCode.SUCCESS, *found.encode())

    # -- ack / change: broker/pop/acks.py decides ----------------------------------------------
    def ack(self, conn: Connection, req: Frame) -> Frame | DurableAnswer:
        ack = AckRequest.parse(req.header, req.body)
        try:
            result = ack_one(self.service, ack.group, ack.receipt_handle)
        except HandleRefused as refused:
            return error_response(req, refused.code, refused.remark)
        if result is None:
            return response(req, ResponseCode.SUCCESS, {"remark": "acked already"})
        return self._answer(req, result, {})

    def batch_ack(self, conn: Connection, req: Frame) -> Frame | DurableAnswer:
        batch = BatchAckRequest.parse(req.header, req.body)
        try:
            acked = ack_batch(self.service, batch.group, batch.receipt_handles)
        except HandleRefused as refused:
            return error_response(req, refused.code, refused.remark)
        header, _ = BatchAckAnswer(results=acked.codes, remark=acked.remark).encode()
        if acked.result is None:
            return response(req, ResponseCode.SUCCESS, header)
        return self._answer(req, acked.result, header)

    def change(self, conn: Connection, req: Frame) -> Frame | DurableAnswer:
        change = ChangeInvisibleRequest.parse(req.header, req.body)
        try:
            new, result = change_invisible(
                self.service, change.group, change.receipt_handle, change.invisible_ms
            )
        except HandleRefused as refused:
            return error_response(req, refused.code, refused.remark)
        return self._answer(req, result, InvisibleChanged(receipt_handle=new).encode()[0])

    def _answer(self, req: Frame, result: PutResult, header: Header) -> Frame | DurableAnswer:
        return answer_when_durable(
            self.ctx, result, req, response(req, ResponseCode.SUCCESS, header)
        )
