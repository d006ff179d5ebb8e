"""SEND_MESSAGE and SEND_BATCH_MESSAGE: validate, append once, answer (after the flush if sync,
after every SyncStateSet member's ack with all-ack).

A send that must wait returns a :class:`~broker.durable_wait.DurableAnswer` that the wait's callback
answers; the remoting server writes the answer right then (no future, no task, no callback
scheduled per send).
"""

from __future__ import annotations

import time

import structlog

from broker.context import BrokerContext
from broker.durable_wait import DurableAnswer, defer_until_durable
from broker.timer.schedule import ScheduleRefused
from broker.write_gate import WriteRefused
from protocol.broker_requests.send import (
    SendAnswer,
    SendBatchAnswer,
    SendBatchRequest,
    SendRequest,
)
from protocol.codes import RequestCode, ResponseCode
from protocol.fifo import PROP_MESSAGE_GROUP, group_queue_index, message_group_error
from protocol.message import Message, MsgIdMaker
from protocol.remoting import Frame, response
from protocol.timer import REQUEST_PROPERTIES
from protocol.transaction import HALF_TOPIC, OP_TOPIC, is_transactional
from remoting.server import Connection, DeferredAnswer, RemotingServer, error_response
from storage.queues import topic_error
from storage.store import DiskFullError, MessageTooLargeError, PutResult, StoreError

log = structlog.get_logger(__name__)

_TRANSACTION_TOPICS = frozenset((HALF_TOPIC, OP_TOPIC))


class SendProcessor:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx
        self._msg_id = MsgIdMaker(ctx.cfg.listen)

    def register(self, server: RemotingServer) -> None:
        server.register(RequestCode.SEND_MESSAGE, self.send_message)
        server.register(RequestCode.SEND_BATCH_MESSAGE, self.send_batch)

    # -- handlers ------------------------------------------------------------------------------
    def send_message(self, conn: Connection, req: Frame) -> Frame | DeferredAnswer:
        start = time.perf_counter()
        send = SendRequest.parse(req.header, req.body)
        topic, body = send.topic, send.body
        if not body:
            return self._error(req, ResponseCode.MESSAGE_ILLEGAL, "message body is empty")
        result = self._put(req, topic, send.queue_id, [send.message(conn.peer)])
        if isinstance(result, Frame):
            return result
        answer = SendAnswer(  # positional: a send's hot path (msg_id, queue, offset, broker)
            self._msg_id(result.physical_offsets[0]),
            result.queue_id,
            result.first_queue_offset,
            self.ctx.cfg.broker_name,
        )
        resp = response(req, ResponseCode.SUCCESS, *answer.encode())
        return self._answer(req, result, resp, start)

    def send_batch(self, conn: Connection, req: Frame) -> Frame | DeferredAnswer:
        start = time.perf_counter()
        batch = SendBatchRequest.parse(req.header, req.body, born_host=conn.peer)
        result = self._put(req, batch.topic, batch.queue_id, list(batch.messages))
        if isinstance(result, Frame):
            return result
        make_id = self._msg_id
        answer = SendBatchAnswer(
            queue_id=result.queue_id,
            queue_offset=result.first_queue_offset,
            count=result.count,
            broker_name=self.ctx.cfg.broker_name,
            msg_ids=tuple(make_id(off) for off in result.physical_offsets),
        )
        resp = response(req, ResponseCode.SUCCESS, *answer.encode())
        return self._answer(req, result, resp, start)

    # -- shared --------------------------------------------------------------------------------
    def _put(
        self, req: Frame, topic: str, queue_id: int, messages: list[Message]
    ) -> PutResult | Frame:
        ctx = self.ctx
        try:
            ctx.check_writable()
        except WriteRefused as refused:
            return self._error(req, refused.code, refused.remark)
        if topic in _TRANSACTION_TOPICS:
            return self._error(
                req, ResponseCode.NO_PERMISSION, f"topic {topic} is the broker's own"
            )
        tc = ctx.topics.get(topic)
        if tc is None:
            # Known topics were checked when created; an unknown name is checked before it can
            # name a topic config or a ConsumeQueue directory.
            bad_name = topic_error(topic)
            if bad_name is not None:
                return self._error(req, ResponseCode.BAD_REQUEST, bad_name)
            if not ctx.cfg.auto_create_topic:
                return self._error(
                    req, ResponseCode.TOPIC_NOT_EXIST, f"topic {topic} does not exist"
                )
            tc = ctx.create_topic(topic, ctx.cfg.default_topic_queues)
        if queue_id < 0:
            # The broker picks: a FIFO message group always its group's queue (the gRPC
            # clients choose the broker group, not the queue), anything else the next queue.
            group = messages[0].properties.get(PROP_MESSAGE_GROUP) if messages else None
            queue_id = (
                group_queue_index(group, tc.queues) if group else ctx.next_queue(topic, tc.queues)
            )
            if ctx.sealed.has_closed(topic) and not group:
                queue_id = _open_queue(ctx, topic, tc.queues, queue_id)
        elif queue_id >= tc.queues:
            return self._error(
                req,
                ResponseCode.QUEUE_NOT_EXIST,
                f"queueId {queue_id} out of range 0..{tc.queues - 1}",
            )
        if ctx.sealed.has_closed(topic) and ctx.sealed.closed(topic, queue_id, time.monotonic()):
            # A static topic's item sealed (or being sealed) here: the queue moved to another
            # group. Retriable: the producer refreshes its route and sends to the new item.
            return self._error(
                req,
                ResponseCode.QUEUE_NOT_EXIST,
                f"queue {queue_id} of {topic} is sealed: it moved to another broker group; "
                "refresh the route",
            )
        limit = ctx.cfg.max_message_bytes
        body_bytes = 0
        for m in messages:
            size = len(m.body)
            if size > limit:
                return self._error(
                    req,
                    ResponseCode.MESSAGE_ILLEGAL,
                    f"message body of {size} bytes exceeds {limit}",
                )
            body_bytes += size
        try:
            if any(m.properties for m in messages):  # only these can ask for a delivery time
                bad_group = _message_group_refusal(messages)
                if bad_group is not None:
                    return self._error(req, ResponseCode.MESSAGE_ILLEGAL, bad_group)
                half = self._transactional(req, topic, queue_id, messages)
                if half is not None:
                    return half
                scheduled = self._scheduled(req, topic, queue_id, messages)
                if scheduled is not None:
                    return scheduled
            result = ctx.appender.put(topic, queue_id, messages, body_bytes)
        except DiskFullError as exc:
            log.error("send failed: disk full", topic=topic, error=str(exc))
            return self._error(req, ResponseCode.DISK_FULL, f"disk full: {exc}")
        except MessageTooLargeError as exc:
            return self._error(req, ResponseCode.MESSAGE_ILLEGAL, str(exc))
        except StoreError as exc:
            log.error("send failed", topic=topic, error=str(exc))
            return self._error(req, ResponseCode.SYSTEM_ERROR, str(exc))
        return result

    def _transactional(
        self, req: Frame, topic: str, queue_id: int, messages: list[Message]
    ) -> PutResult | Frame | None:
        """A transactional send (``TRAN_MSG=true``): store it as a half message
        (docs/transactions.md). None: no message of the send is transactional."""
        if not any(is_transactional(m.properties) for m in messages):
            return None
        if len(messages) != 1:
            return self._error(
                req,
                ResponseCode.MESSAGE_ILLEGAL,
                "a transactional message is sent alone, not in a batch",
            )
        msg = messages[0]
        if any(p in msg.properties for p in REQUEST_PROPERTIES):
            return self._error(
                req,
                ResponseCode.MESSAGE_ILLEGAL,
                "a transactional message cannot have a delivery time",
            )
        try:
            return self.ctx.transactions.put_half(topic, queue_id, msg)
        except ValueError as exc:
            return self._error(req, ResponseCode.MESSAGE_ILLEGAL, str(exc))

    def _scheduled(
        self, req: Frame, topic: str, queue_id: int, messages: list[Message]
    ) -> PutResult | Frame | None:
        """Messages of a send with properties: those asking for a delivery time are stored
        under the timer topic, the rest as usual, all admitted against one clock reading by
        the timer service (:meth:`~broker.timer.service.TimerService.put_send`); a refused send
        stores nothing. None: nothing scheduled, store them all as usual."""
        try:
            return self.ctx.timer.put_send(topic, queue_id, messages)
        except ScheduleRefused as exc:
            return self._error(req, ResponseCode.MESSAGE_ILLEGAL, exc.remark)

    def _answer(
        self, req: Frame, result: PutResult, resp: Frame, start: float
    ) -> Frame | DeferredAnswer:
        ctx = self.ctx
        if not ctx.needs_wait(result):
            ctx.metrics.send_latency.observe(time.perf_counter() - start)
            return resp
        return defer_until_durable(ctx, result, _SendAnswer(self, req, resp, start))

    def _error(self, req: Frame, code: int, remark: str) -> Frame:
        self.ctx.metrics.send_error(code)
        return error_response(req, code, remark)


class _SendAnswer(DurableAnswer):
    """A send waiting for its flush or replicas: answered when the wait ends, its latency
    (and a failure) counted then."""

    __slots__ = ("proc", "start")

    def __init__(self, proc: SendProcessor, req: Frame, resp: Frame, start: float) -> None:
        super().__init__(req, resp)
        self.proc = proc
        self.start = start

    def settled(self, code: int, remark: str) -> None:
        metrics = self.proc.ctx.metrics
        metrics.send_latency.observe(time.perf_counter() - self.start)
        if code != ResponseCode.SUCCESS and self.pending:
            metrics.send_error(code)


def _open_queue(ctx: BrokerContext, topic: str, queues: int, first: int) -> int:
    """The broker's pick for a topic with sealed queues: the next queue from ``first`` that is
    not closed (``first`` itself when all are: the send is then refused)."""
    now = time.monotonic()
    queue_id = first
    for _ in range(queues):
        if not ctx.sealed.closed(topic, queue_id, now):
            return queue_id
        queue_id = ctx.next_queue(topic, queues)
    return first


def _message_group_refusal(messages: list[Message]) -> str | None:
    """Why a message's FIFO group (``__SHARDINGKEY``) cannot be stored; None: all can."""
    for m in messages:
        group = m.properties.get(PROP_MESSAGE_GROUP)
        if group is not None:
            why = message_group_error(group)
            if why is not None:
                return f"property {PROP_MESSAGE_GROUP}: {why}"
    return None
