"""Sending gathered messages: alone (SEND_MESSAGE) or as one SEND_BATCH_MESSAGE, each message
settled with its own result or error (:class:`BatchSender`), and reading the answers.

Used by the producer's auto-batching (``client/auto_batch.py``) and its FIFO lanes
(``client/fifo_send.py``): they decide what leaves together, this sends it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence

from client.errors import BrokerError, ClientError, ClosedError, SendError, TopicNotFoundError
from client.message import SendResult
from client.routes import MessageQueue
from client.routing_retry import SendRouter, Target
from protocol.broker_requests.send import (
    SendAnswer,
    SendBatchAnswer,
    SendBatchRequest,
    SendRequest,
)
from protocol.fields import FieldError
from protocol.message import Message as WireMessage
from protocol.remoting import Frame

# Room left in a frame for its header and msgpack framing.
FRAME_OVERHEAD = 64 * 1024
# What a gathered message adds to a batch body besides its body, keys, tags and properties.
_ITEM_OVERHEAD = 48


class Gathered:
    """One ``send()`` on the auto-batching path: what goes on the wire alone or in a batch."""

    __slots__ = ("at", "deadline", "fut", "group", "properties", "queue", "request")

    def __init__(
        self,
        request: SendRequest,
        properties: Mapping[str, str] | None,
        at: int | None,
        deadline: float,
        queue: Target | None,
        group: str | None = None,
    ) -> None:
        self.request = request
        self.properties = properties
        self.at = at
        self.deadline = deadline
        # The queue chosen when it was sent (None: no route yet): its first attempt goes there
        # if it leaves alone.
        self.queue = queue
        #: its FIFO message group: it goes to the group's queue, through the queue's lane
        self.group = group
        self.fut: asyncio.Future[SendResult] | None = None

    def batch_message(self, topic: str) -> WireMessage:
        """This message as an entry of a SEND_BATCH_MESSAGE."""
        req = self.request
        return WireMessage(
            topic=topic,
            body=req.body,
            keys=req.keys,
            tags=req.tags,
            properties=dict(self.properties) if self.properties else {},
            born_timestamp=req.born_timestamp,
        )

    def settle(self, result: SendResult | None, error: BaseException | None = None) -> None:
        fut = self.fut
        if fut is None or fut.done():  # its sender gave up (cancelled) meanwhile
            return
        if error is not None:
            fut.set_exception(error)
        else:
            fut.set_result(result)  # type: ignore[arg-type]


def item_size(item: Gathered) -> int:
    """What a gathered message adds to a batch request."""
    req = item.request
    size = len(req.body) + _ITEM_OVERHEAD
    if req.keys or req.tags or item.properties:
        size += len(req.keys) + len(req.tags)
        size += sum(len(k) + len(v) for k, v in (item.properties or {}).items())
    return size


class BatchSender:
    """Sends gathered messages through ``router`` and settles each one."""

    def __init__(self, router: SendRouter) -> None:
        self._router = router

    async def send_alone(self, topic: str, item: Gathered, first: Target | None) -> SendResult:
        req = item.request
        resp, mq = await self._router.send(
            topic, req.code, req, item.deadline, first, group=item.group
        )
        return single_result(resp, mq, item.at)

    async def _send_batch_of(
        self, topic: str, items: list[Gathered], first: Target | None
    ) -> list[SendResult]:
        batch = SendBatchRequest(
            topic=topic, queue_id=0, messages=tuple(it.batch_message(topic) for it in items)
        ).pack()
        deadline = min(it.deadline for it in items)
        resp, mq = await self._router.send(
            topic, batch.code, batch, deadline, first, group=items[0].group
        )
        return batch_results(resp, mq, [it.at for it in items])

    async def deliver(self, topic: str, batch: list[Gathered], first: Target | None) -> None:
        """Send ``batch`` as one request, retried as a batch until each one's deadline (a
        message-group batch only to its group's queue); settle each message's future with its
        own result or error. A batch refused for good is sent again message by message (one
        after the other for message groups, to keep their order)."""
        try:
            items = [it for it in batch if it.fut is None or not it.fut.done()]
            while items:
                left = time.monotonic()
                try:
                    if len(items) == 1:
                        results = [await self.send_alone(topic, items[0], first)]
                    else:
                        results = await self._send_batch_of(topic, items, first)
                except SendError as exc:  # every attempt failed until the oldest's deadline
                    now = time.monotonic()
                    if self._router.retries is not None or self._router.closed or exc.maybe_stored:
                        # maybe_stored: the batch may be stored (an idempotent producer's retries
                        # stayed on its queue); a later subset would be another request
                        expired, items = items, []
                    else:
                        expired = [it for it in items if it.deadline <= now]
                        items = [it for it in items if it.deadline > now]
                    for it in expired:
                        it.settle(None, self._own_error(topic, it, exc, left, now))
                    first = None
                except (TopicNotFoundError, ClosedError) as exc:
                    for it in items:
                        it.settle(None, exc)
                    return
                except BrokerError:  # refused for good: find out which, message by message
                    if len(items) == 1:
                        raise
                    if items[0].group is not None:
                        for it in items:
                            await self._settle_alone(topic, it)
                    else:
                        await asyncio.gather(*(self._settle_alone(topic, it) for it in items))
                    return
                else:
                    for it, result in zip(items, results, strict=True):
                        it.settle(result)
                    return
        except BaseException as exc:  # a malformed answer, or this task cancelled
            for it in batch:
                if isinstance(exc, Exception):
                    it.settle(None, exc)
                else:
                    it.settle(None, ClosedError("the producer stopped sending this batch"))
            if not isinstance(exc, Exception):
                raise

    def _own_error(
        self, topic: str, item: Gathered, exc: SendError, left: float, now: float
    ) -> SendError:
        """``exc`` as ``item``'s own error: counted from its ``send()`` call, which may have
        waited behind an earlier request to the same broker group (one in flight per group)
        before its request left at ``left``; ``exc`` counts from there only."""
        started = item.deadline - self._router.send_deadline
        waited = left - started
        if waited < 0.05:
            return exc
        last = exc.__cause__ if exc.__cause__ is not None else exc
        own = SendError(
            f"send to topic {topic!r} failed in {now - started:.1f}s: it waited {waited:.1f}s "
            f"behind an earlier request to the same broker group (one request in flight per "
            f"group), then its own request failed in {now - left:.1f}s: {last}"
        )
        own.maybe_stored = exc.maybe_stored
        own.__cause__ = exc.__cause__
        return own

    async def _settle_alone(self, topic: str, item: Gathered) -> None:
        try:
            item.settle(await self.send_alone(topic, item, None))
        except Exception as exc:
            item.settle(None, exc)


def single_result(resp: Frame, mq: MessageQueue, at: int | None) -> SendResult:
    """The result of a SUCCESS answer to SEND_MESSAGE."""
    try:
        sent = SendAnswer.parse(resp.header, resp.body)
    except FieldError as exc:
        raise ClientError(f"malformed send response from {mq.broker_name}: {exc}") from None
    return SendResult(sent.msg_id, mq.broker_name, sent.queue_id, sent.queue_offset, at)


def batch_results(resp: Frame, mq: MessageQueue, times: Sequence[int | None]) -> list[SendResult]:
    """The results of a SUCCESS answer to SEND_BATCH_MESSAGE, in the order sent: the broker
    answers one message id per message (body) and the queue offset of the first message that
    is not scheduled (header); the others that are not follow it one by one, and scheduled
    ones (``times`` not None) have -1."""
    try:
        sent = SendBatchAnswer.parse(resp.header, resp.body)
        if len(sent.msg_ids) != len(times):
            raise FieldError("message id count does not match the batch")
    except FieldError as exc:
        raise ClientError(f"malformed batch response from {mq.broker_name}: {exc}") from None
    queue_id, offset = sent.queue_id, sent.queue_offset
    results: list[SendResult] = []
    for msg_id, at in zip(sent.msg_ids, times, strict=True):
        if at is None:
            results.append(SendResult(msg_id, mq.broker_name, queue_id, offset))
            offset += 1
        else:
            results.append(SendResult(msg_id, mq.broker_name, queue_id, -1, at))
    return results
