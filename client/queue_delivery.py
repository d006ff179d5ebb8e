"""Queue-bound delivery (:class:`QueueDelivery`): what a group member hands the application
from its pulled queues, and what of it counts as consumed.

A message counts as consumed once it was handed to the application and the application asked
for more (the next ``receive()`` or the next iteration), or closed the consumer normally; the
consumer's offset commits read that (:meth:`client.pull.QueueState.ack`). A message the
application fails goes to :class:`client.consume_retry.ConsumeRetry`.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable

from client import logs
from client.buffer import MessageBuffer
from client.consume_retry import ConsumeRetry
from client.errors import BrokerError, ClosedError, report_nack_outcomes
from client.handout import Handout
from client.message import ReceivedMessage
from client.pull import QueueState
from client.routes import MessageQueue
from client.subscription import queue_of
from protocol.retry import SubscriptionGroupConfig

# The consumer's logger: its lines keep the name applications filter on.
log = logs.get_logger("client.consumer")

Batch = tuple[QueueState, list[ReceivedMessage]]
Handler = Callable[[ReceivedMessage], Awaitable[object] | object]


class QueueDelivery:
    """Hands out the buffered messages of the owned queues and keeps the delivery bookkeeping.

    ``fifo`` gives the group's FIFO settings of the moment (None: not a FIFO group);
    ``started`` and ``closed`` are the consumer's."""

    def __init__(
        self,
        buffer: MessageBuffer[QueueState, ReceivedMessage],
        retrier: ConsumeRetry,
        *,
        fifo: Callable[[], SubscriptionGroupConfig | None],
        started: Callable[[], bool],
        closed: Callable[[], bool],
    ) -> None:
        self._buffer = buffer
        self._retrier = retrier
        self._fifo = fifo
        self._started = started
        self._closed = closed
        # Queues whose pulling stopped for good, their failures not raised yet (receive raises).
        self._failures: list[tuple[QueueState, BrokerError]] = []
        # What the application was last given: the batches and their messages.
        self._delivered_batches: list[Batch] = []
        self._out: Handout[ReceivedMessage] = Handout()

    async def receive(self, timeout: float | None, max_messages: int) -> list[ReceivedMessage]:
        """See :meth:`client.consumer.Consumer.receive`."""
        if not self._started():
            raise ClosedError("consumer is not started")
        out = self._out
        self._ack(out.confirm())
        self._raise_failure()
        rest = out.rest(max_messages)  # of a batch that iteration had not reached yet
        if rest is not None:
            return rest
        self._delivered_batches = []
        out.clear()
        if self._closed() or not await self._buffer.wait(timeout):
            self._raise_failure()
            return []
        batches = self._buffer.take(max_messages, _alive)
        if not batches:
            return []
        self._delivered_batches = batches
        msgs = batches[0][1] if len(batches) == 1 else [m for _, b in batches for m in b]
        return out.deliver(msgs)

    async def next(self, interval: float) -> ReceivedMessage | None:
        """The next message (None: the consumer is closed), waiting ``interval`` at a time."""
        msg = self._out.next()
        if msg is not None:
            return msg
        while True:
            if self._closed():
                return None
            msgs = await self.receive(interval, 1024)
            if msgs:
                return self._out.first(msgs)

    async def nack(self, msg: ReceivedMessage, reason: str) -> None:
        """See :meth:`client.consumer.Consumer.nack`."""
        if self._fifo() is not None:
            await self._retrier.fifo_failed(msg, reason)
            return
        await self._retrier.send_back(msg, reason, self._retrier.max_reconsume_times)

    async def process(self, handler: Handler, interval: float) -> None:
        """See :meth:`client.consumer.Consumer.process`."""
        while not self._closed():
            msgs = await self.receive(interval, 1024)
            failed: list[tuple[ReceivedMessage, str]] = []
            # FIFO: queues blocked by a failed message in this batch -> its offset; their later
            # messages of the batch are not handled (they come again after it).
            blocked: dict[tuple[str, MessageQueue], int] = {}
            fifo_states: dict[tuple[str, MessageQueue], QueueState | None] = {}
            state: QueueState | None = None
            for msg in msgs:
                if self._fifo() is not None:
                    where = (msg.stored_topic, queue_of(msg))
                    if blocked and msg.queue_offset >= blocked.get(where, msg.queue_offset + 1):
                        continue
                    if where in fifo_states:
                        state = fifo_states[where]
                    else:
                        state = fifo_states[where] = self._retrier.state_of(msg)
                    if not _owned(state):
                        continue  # its queue was given away: the new owner delivers it in order
                try:
                    result = handler(msg)
                    if inspect.isawaitable(result):
                        await result
                except asyncio.CancelledError:
                    for held in (msg, *(m for m, _ in failed)):
                        self._retrier.hold(held)
                    raise
                except Exception as exc:
                    reason = f"{type(exc).__name__}: {exc}"
                    if self._fifo() is None:
                        failed.append((msg, reason))
                    elif not await self._retrier.fifo_failed(msg, reason):
                        blocked[(msg.stored_topic, queue_of(msg))] = msg.queue_offset
                else:
                    if state is not None and state.fifo_offset is not None:
                        self._retrier.fifo_passed(msg)
            if failed:
                await self._nack_batch(failed)

    async def _nack_batch(self, failed: list[tuple[ReceivedMessage, str]]) -> None:
        tasks = [asyncio.ensure_future(self.nack(msg, reason)) for msg, reason in failed]
        try:
            results = await asyncio.gather(*tasks, return_exceptions=True)
        except asyncio.CancelledError:
            for (msg, _), task in zip(failed, tasks, strict=True):
                if not task.done() or task.cancelled() or task.exception() is not None:
                    self._retrier.hold(msg)
                task.cancel()
            raise
        report_nack_outcomes(log, (msg.msg_id for msg, _ in failed), results)

    def queue_failed(self, state: QueueState) -> None:
        """Pulling ``state``'s queue stopped for good, or is stuck at a message the broker
        cannot read: the next receive raises its failure (as it is now: a queue stuck, then
        unstuck before the application asked, still raises it)."""
        if state.failure is not None:
            self._failures.append((state, state.failure))
            self._buffer.wake()

    def _raise_failure(self) -> None:
        """Raise the failure of a queue whose pulling stopped (each once), after the messages
        buffered before it were handed out: they are valid and come first."""
        while self._failures:
            state, failure = self._failures[0]
            if state.dropped:
                self._failures.pop(0)
                continue
            if self._buffer.holds(state):
                return
            self._failures.pop(0)
            raise failure

    def confirm(self) -> None:
        """What the application confirmed (by asking for more) counts as consumed."""
        self._ack(self._out.confirmed)

    def closing(self, commit_delivered: bool) -> None:
        """The consumer closes: with ``commit_delivered`` every message handed out counts as
        consumed, else only what was confirmed."""
        self._ack(self._out.handed if commit_delivered else self._out.confirmed)

    def _ack(self, count: int) -> None:
        """The first ``count`` delivered messages are consumed."""
        for state, batch in self._delivered_batches:
            if count <= 0:
                break
            k = min(count, len(batch))
            state.ack(batch[k - 1].queue_offset + 1)
            count -= k


def _owned(state: QueueState | None) -> bool:
    return state is not None and not state.dropped


def _alive(state: QueueState) -> bool:
    return not state.dropped
