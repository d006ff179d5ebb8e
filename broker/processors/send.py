"""SEND_MESSAGE and SEND_BATCH_MESSAGE: the typed request to one call of the send service
(:class:`broker.send.service.SendService`, where every decision is), its result to the typed
answer, given after the flush if sync, after every SyncStateSet member's ack with all-ack.

A send that must wait returns a :class:`~broker.durable_wait.DurableAnswer` that the wait's callback
answers; the remoting server writes the answer right then (no future, no task, no callback
scheduled per send).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Coroutine
from typing import Any

from broker.context import BrokerContext
from broker.durable_wait import defer_until_durable
from broker.send.answer import DurableSendAnswer
from broker.send.service import SendRefused, SendService
from protocol.broker_requests.send import (
    SendAnswer,
    SendBatchAnswer,
    SendBatchRequest,
    SendRequest,
)
from protocol.codes import RequestCode, ResponseCode
from protocol.idempotence import ProducerSeq, QueueWindow
from protocol.remoting import Frame, response
from remoting.server import (
    Connection,
    DeferredAnswer,
    HandlerResult,
    RemotingServer,
    error_response,
)
from storage.store import PutResult


class SendProcessor:
    def __init__(self, ctx: BrokerContext) -> None:
        self.service: SendService = ctx.sends
        self.durability = ctx

    def register(self, server: RemotingServer) -> None:
        server.register(RequestCode.SEND_MESSAGE, self.send_message)
        server.register(RequestCode.SEND_BATCH_MESSAGE, self.send_batch)

    # -- handlers ------------------------------------------------------------------------------
    def send_message(self, conn: Connection, req: Frame) -> HandlerResult:
        start = time.perf_counter()
        send = SendRequest.parse(req.header, req.body)
        if not send.body:
            self.service.count_refusal(ResponseCode.MESSAGE_ILLEGAL)
            return error_response(req, ResponseCode.MESSAGE_ILLEGAL, "message body is empty")
        # The request's fields read once (compiled, each a look-up on the Python class): the
        # usual window and the put take them as they are.
        topic = send.topic
        queue_id = send.queue_id
        seq = send.producer
        window: QueueWindow | None = None
        if seq is not None:
            window = self.service.usual_window(topic, queue_id, seq)
            if window is None:
                wait = self.service.before_sequenced(topic, seq, req.header)
                if wait is not None:
                    return self._message_later(wait, conn, req, send, start)
        try:
            result, resp = self._put_message(conn, req, send, topic, queue_id, seq, window)
        except SendRefused as refused:
            return error_response(req, refused.code, refused.remark)
        return self._answer(req, result, resp, start)

    def _message_later(
        self,
        wait: Coroutine[Any, Any, None],
        conn: Connection,
        req: Frame,
        send: SendRequest,
        start: float,
    ) -> Coroutine[Any, Any, Frame]:
        """:meth:`_later` for a single send. A method of its own: compiled, a function holding
        a lambda builds the lambda's closure on every call, so :meth:`send_message` holds
        none."""
        return self._later(
            wait,
            req,
            start,
            lambda: self._put_message(
                conn, req, send, send.topic, send.queue_id, send.producer, None
            ),
        )

    def _put_message(
        self,
        conn: Connection,
        req: Frame,
        send: SendRequest,
        topic: str,
        queue_id: int,
        seq: ProducerSeq | None,
        window: QueueWindow | None,
    ) -> tuple[PutResult, Frame]:
        service = self.service
        result = service.put(topic, queue_id, [send.message(conn.peer)], seq, window)
        answer = SendAnswer(  # positional: a send's hot path (msg_id, queue, offset, broker)
            service.msg_id(result.physical_offsets[0]),
            result.queue_id,
            result.first_queue_offset,
            service.broker_name,
        )
        return result, response(req, ResponseCode.SUCCESS, *answer.encode())

    def send_batch(self, conn: Connection, req: Frame) -> HandlerResult:
        start = time.perf_counter()
        batch = SendBatchRequest.parse(req.header, req.body, born_host=conn.peer)
        seq = batch.producer
        window: QueueWindow | None = None
        if seq is not None:
            window = self.service.usual_window(batch.topic, batch.queue_id, seq)
            if window is None:
                wait = self.service.before_sequenced(batch.topic, seq, req.header)
                if wait is not None:
                    return self._batch_later(wait, req, batch, start)
        try:
            result, resp = self._put_batch(req, batch, window)
        except SendRefused as refused:
            return error_response(req, refused.code, refused.remark)
        return self._answer(req, result, resp, start)

    def _batch_later(
        self,
        wait: Coroutine[Any, Any, None],
        req: Frame,
        batch: SendBatchRequest,
        start: float,
    ) -> Coroutine[Any, Any, Frame]:
        """:meth:`_later` for a batch (a method of its own, as :meth:`_message_later`)."""
        return self._later(wait, req, start, lambda: self._put_batch(req, batch, None))

    def _put_batch(
        self, req: Frame, batch: SendBatchRequest, window: QueueWindow | None
    ) -> tuple[PutResult, Frame]:
        service = self.service
        result = service.put(
            batch.topic, batch.queue_id, list(batch.messages), batch.producer, window
        )
        answer = SendBatchAnswer(
            queue_id=result.queue_id,
            queue_offset=result.first_queue_offset,
            count=result.count,
            broker_name=service.broker_name,
            msg_ids=service.msg_id.many(result.physical_offsets),
        )
        return result, response(req, ResponseCode.SUCCESS, *answer.encode())

    async def _later(
        self,
        wait: Coroutine[Any, Any, None],
        req: Frame,
        start: float,
        put: Callable[[], tuple[PutResult, Frame]],
    ) -> Frame:
        """A sequenced send that waits first (the idempotence state being built, a producer
        id not yet known issued: :meth:`SendService.before_sequenced`), then is stored and
        answered once durable."""
        try:
            await wait
            result, resp = put()
            await self.service.durable(result, start)
        except SendRefused as refused:
            return error_response(req, refused.code, refused.remark)
        return resp

    # -- shared --------------------------------------------------------------------------------
    def _answer(
        self, req: Frame, result: PutResult, resp: Frame, start: float
    ) -> Frame | DeferredAnswer:
        if not self.durability.needs_wait(result):
            self.service.settled(start, ResponseCode.SUCCESS)
            return resp
        return defer_until_durable(
            self.durability, result, DurableSendAnswer(self.service, req, resp, start)
        )
