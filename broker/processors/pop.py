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
from dataclasses import dataclass

from broker.context import BrokerContext
from broker.durable_wait import DurableAnswer, answer_when_durable, wait_durable
from broker.pop.acks import HandleRefused, ack_batch, ack_one, change_invisible
from broker.pop.service import PopMessage, PopService
from broker.write_gate import WriteRefused
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
from protocol.filter import TagFilter, parse_tag_expression
from protocol.pop import MAX_POP_BATCH
from protocol.remoting import Frame, Header, response
from protocol.retry import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX, retry_topic
from remoting.server import Connection, RemotingServer, error_response
from storage.errors import StoreError
from storage.store import PutResult


@dataclass(frozen=True, slots=True)
class _PopAsk:
    """What one POP_MESSAGE asks for, checked: each try of a long poll asks it again."""

    group: str
    topic: str
    queue_id: int
    queues: int
    max_count: int
    invisible: int
    tag_filter: TagFilter | None


class PopProcessor:
    def __init__(self, ctx: BrokerContext, service: PopService) -> None:
        self.ctx = ctx
        self.service = service

    def register(self, server: RemotingServer) -> None:
        server.register(RequestCode.POP_MESSAGE, self.pop)
        server.register(RequestCode.ACK_MESSAGE, self.ack)
        server.register(RequestCode.CHANGE_MESSAGE_INVISIBLETIME, self.change)
        server.register(RequestCode.BATCH_ACK_MESSAGE, self.batch_ack)

    # -- POP -----------------------------------------------------------------------------------
    def pop(self, conn: Connection, req: Frame) -> Frame | DurableAnswer | Awaitable[Frame]:
        pop = PopRequest.parse(req.header, req.body)
        group, topic, queue_id, invisible = pop.group, pop.topic, pop.queue_id, pop.invisible_ms
        max_count = max(1, min(pop.max_count, MAX_POP_BATCH, self.ctx.cfg.max_pull_batch))
        tag_filter = parse_tag_expression(pop.expression)
        poll_ms = max(0, min(pop.poll_ms, self.ctx.cfg.max_pull_suspend_ms))
        # System topics in either case (ours are rmq_sys_..., RocketMQ's transaction topics
        # RMQ_SYS_TRANS_...: a POP there would hand out half messages).
        if topic.lower().startswith("rmq_sys_") or topic.startswith(
            (RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX)
        ):
            return error_response(
                req, ResponseCode.NO_PERMISSION, f"topic {topic} is a system topic: no POP"
            )
        tc = self.ctx.topics.get(topic)
        if tc is None:
            return error_response(
                req, ResponseCode.TOPIC_NOT_EXIST, f"topic {topic} does not exist"
            )
        if not -1 <= queue_id < tc.queues:
            return error_response(
                req,
                ResponseCode.QUEUE_NOT_EXIST,
                f"queueId {queue_id} out of range 0..{tc.queues - 1} (or -1: any)",
            )
        # The first try runs here, without a task: a POP that finds messages (or need not
        # wait) is answered at once or once its checkpoint is durable; only a long poll
        # becomes a coroutine.
        ctx = self.ctx
        deadline = ctx.now_ms() + poll_ms
        ask = _PopAsk(group, topic, queue_id, tc.queues, max_count, invisible, tag_filter)
        tried = self._try_pop(req, ask)
        if isinstance(tried, Frame):
            return tried
        got, last, candidates = tried
        if got or poll_ms == 0:
            found = (
                self._found(req, got)
                if got
                else response(req, ResponseCode.PULL_NOT_FOUND, {"remark": "no message"})
            )
            return answer_when_durable(ctx, last, req, found, "POP checkpoint not durable")
        return self._long_poll(req, ask, deadline, last, candidates)

    def _try_pop(
        self, req: Frame, ask: _PopAsk
    ) -> Frame | tuple[list[PopMessage], PutResult | None, list[tuple[str, int]]]:
        """One POP: what it handed out, its last append and the queues it read; or the error
        answer."""
        ctx = self.ctx
        try:
            ctx.check_writable()
            candidates = self.service.candidates(ask.group, ask.topic, ask.queue_id, ask.queues)
            got, last = self.service.pop(
                ask.group, candidates, ask.max_count, ask.invisible, ctx.now_ms(), ask.tag_filter
            )
        except WriteRefused as exc:
            return error_response(req, exc.code, exc.remark)
        except StoreError as exc:
            return error_response(req, ResponseCode.SYSTEM_ERROR, f"POP not recorded: {exc}")
        return got, last, candidates

    async def _long_poll(
        self,
        req: Frame,
        ask: _PopAsk,
        deadline: int,
        last: PutResult | None,
        candidates: list[tuple[str, int]],
    ) -> Frame:
        """Wait for messages until ``deadline`` (the first try found none)."""
        ctx = self.ctx
        while True:
            if last is not None:
                code, remark = await wait_durable(ctx, last)
                if code != ResponseCode.SUCCESS:
                    return error_response(req, code, f"POP checkpoint not durable: {remark}")
            remaining = deadline - ctx.now_ms()
            if remaining <= 0:
                return response(req, ResponseCode.PULL_NOT_FOUND, {"remark": "no message"})
            # The group's retry queue wakes it too, also before its first copy exists.
            keys = [*candidates, (retry_topic(ask.group), 0)]
            await ctx.waiters.wait_any(list(dict.fromkeys(keys)), remaining / 1000)
            tried = self._try_pop(req, ask)
            if isinstance(tried, Frame):
                return tried
            got, last, candidates = tried
            if got:
                if last is not None:
                    code, remark = await wait_durable(ctx, last)
                    if code != ResponseCode.SUCCESS:
                        return error_response(req, code, f"POP checkpoint not durable: {remark}")
                return self._found(req, got)

    @staticmethod
    def _found(req: Frame, got: list[PopMessage]) -> Frame:
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
