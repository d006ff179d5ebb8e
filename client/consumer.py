"""The consumer: a member of a consumer group that shares a topic's queues with its peers.

Each member heart-beats to every master of the topic, reads the group's member list, takes its
slice of the sorted (broker, queue) list (:func:`client.allocate.allocate_averagely`) and runs one
long-polling pull task per owned queue into a bounded buffer. The application takes messages with
:meth:`Consumer.receive` or ``async for``.

Delivery is at least once. A message counts as consumed once it was handed to the application and
the application asked for more (the next ``receive()`` or the next iteration), or closed the
consumer normally. Consumed offsets are committed every ``commit_interval``, when a queue is given
to another member, and on close; a queue's new owner starts from its committed offset, so a
handover may repeat messages but never skips one. With a tag ``filter`` the entries the broker
passed over count as consumed too (the pull answers' next offsets cover them): the committed
offset moves past them and the group's lag falls to 0 (:meth:`client.pull.QueueState.passed`).

Retry: instead of letting a message count as consumed, the application can :meth:`Consumer.nack`
it (or raise in the handler of :meth:`Consumer.process`). The message goes back to its broker,
which re-publishes it to the group's retry topic ``%RETRY%<group>`` after the group's back-off,
or to its dead-letter topic ``%DLQ%<group>`` once its retries are used up; the nacked message
then counts as consumed like any other (the copy carries it on). Every member also reads the
retry topic (one more subscription, shared out like the topic's queues), so a retried message
comes back to some member of the group, showing its original topic and its reconsume count.

FIFO groups (the group setting ``consumeMessageOrderly``, ``rmqctl updateSubGroup --fifo``; the
brokers say so in their heartbeat answers): each queue is consumed in order. A message whose
handler raised (or that was nacked) is not sent to the retry topic: it blocks its queue and is
delivered again from the same queue after the group's back-off for its attempt, up to the
group's ``retryMaxTimes`` (or ``max_reconsume_times``); then it is sent back to the group's DLQ
and the queue goes on. Nothing of its queue after it is committed or handled meanwhile; other
queues keep flowing.

Static topics (docs/static-topics.md): the members share out the logical queues and read each
across its mapping items (:mod:`client.pull`); messages show logical queue ids and offsets, and
the group's logical offsets are committed as physical offsets on the items read, so they survive
re-mapping.

POP mode (``pop=True``, :mod:`client.pop_consumer`): no rebalance and no queue ownership; any
number of members share every queue of the topic through POP requests, each message acked once
consumed (the rule above) and a nacked one brought back by the broker through the retry topic.
The same application API (``receive``, iteration, ``process``, ``nack``).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import socket
import ssl
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import msgpack

from client import logs
from client.allocate import allocate_averagely
from client.bootstrap import Bootstrap
from client.brokers import MasterCaller
from client.buffer import MessageBuffer
from client.errors import BrokerError, ClientError, ClosedError, NoRouteError, TopicNotFoundError
from client.message import ReceivedMessage
from client.pop_consumer import PopDelivery
from client.pull import Puller, QueueState
from client.routes import LOGICAL_BROKER, MessageQueue, RouteCache, TopicRoute
from client.simple_consumer import SimpleConsumer
from protocol.codes import RequestCode, ResponseCode
from protocol.filter import parse_tag_expression
from protocol.pull import ConsumerOffsetUpdate
from protocol.remoting import Frame, Scalar
from protocol.request_auth import Credentials
from protocol.retry import (
    DeadLetter,
    Retry,
    SubscriptionGroupConfig,
    backoff_ms,
    clip_reason,
    next_step,
    parse_delay_levels,
    retry_topic,
)
from protocol.static_topic import commit_points
from remoting.client import ConnectionPool
from remoting.errors import RemotingError

log = logs.get_logger(__name__)

Batch = tuple[QueueState, list[ReceivedMessage]]
Handler = Callable[[ReceivedMessage], Awaitable[object] | object]

# Answers to a nack worth trying again (at the group's next master, after the next heartbeat).
_NACK_RETRIABLE = frozenset(
    {
        ResponseCode.SYSTEM_BUSY,
        ResponseCode.SERVICE_NOT_AVAILABLE,
        ResponseCode.NOT_MASTER,
        ResponseCode.MASTER_FENCED,
        ResponseCode.IN_SYNC_REPLICAS_NOT_ENOUGH,
        ResponseCode.FLUSH_SLAVE_TIMEOUT,
        ResponseCode.FLUSH_DISK_TIMEOUT,
        ResponseCode.TOO_MANY_IN_FLIGHT,
        ResponseCode.NOT_GROUP_MEMBER,
    }
)
RETRY_ROUTE_CHECK_INTERVAL = 2.0
"""While the group's retry topic has no route yet, look again at most this often."""


class _Subscription:
    """One topic the member reads: its route, its pulls and the queues it owns of it."""

    __slots__ = ("caller", "owned", "puller", "topic")

    def __init__(self, topic: str, caller: MasterCaller, puller: Puller) -> None:
        self.topic = topic
        self.caller = caller
        self.puller = puller
        self.owned: dict[MessageQueue, QueueState] = {}


def default_client_id() -> str:
    """host@pid@random: unique per consumer instance, readable in member lists."""
    return f"{socket.gethostname()}@{os.getpid()}@{uuid.uuid4().hex[:8]}"


class Consumer:
    """A consumer-group member reading one topic. See the module docstring for semantics."""

    def __init__(
        self,
        bootstrap: str | Sequence[str],
        group: str,
        topic: str,
        *,
        client_id: str | None = None,
        start_from: str = "earliest",
        buffer_size: int = 4096,
        pull_batch_size: int = 64,
        pull_max_bytes: int = 4 * 1024 * 1024,
        suspend_ms: int = 3000,
        heartbeat_interval: float = 1.0,
        commit_interval: float = 1.0,
        route_refresh_interval: float = 5.0,
        request_timeout: float = 3.0,
        connect_timeout: float = 3.0,
        consume_retry: bool = True,
        max_reconsume_times: int | None = None,
        nack_deadline: float = 10.0,
        filter: str = "*",
        pop: bool = False,
        invisible_duration: float = 30.0,
        max_in_flight: int = 256,
        nack_delay: float | None = None,
        credentials: Credentials | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        """``pop=True``: POP mode (see the module docstring and docs/pop.md). Its own settings:
        ``invisible_duration`` (seconds a message stays hidden from the group once popped; not
        acked by then, it comes back), ``max_in_flight`` (messages popped and not acked or
        nacked yet, per member), ``nack_delay`` (seconds a nacked message stays hidden; None:
        the default retry back-off for its attempt, 10 s, 30 s, 1 min, ...). ``pull_batch_size``
        caps one POP and ``suspend_ms`` is its long-polling wait. ``max_reconsume_times`` does
        not apply: the group's ``retryMaxTimes`` decides (``rmqctl updateSubGroup``); nor does
        ``start_from``: a POP group starts at each queue's first message."""
        if not group or not topic:
            raise ValueError("group and topic must be non-empty")
        if max_reconsume_times is not None and max_reconsume_times < 0:
            raise ValueError("max_reconsume_times must be >= 0")
        if pop and start_from != "earliest":
            raise ValueError(
                "start_from does not apply with pop=True: a POP group starts at each queue's "
                "first message"
            )
        if pop and max_reconsume_times is not None:
            raise ValueError(
                "max_reconsume_times does not apply with pop=True: set the group's "
                "retryMaxTimes (rmqctl updateSubGroup)"
            )
        parse_tag_expression(filter)  # raises FilterError for a bad expression
        self.group = group
        self.topic = topic
        self.filter = filter.strip() or "*"
        """The tag expression of the topic's subscription (the retry topic takes everything:
        its copies passed the filter when first delivered)."""
        self.client_id = client_id or default_client_id()
        self.heartbeat_interval = heartbeat_interval
        self.commit_interval = commit_interval
        self.request_timeout = request_timeout
        self._pool = ConnectionPool(connect_timeout, credentials, tls)
        self._bootstrap = Bootstrap(bootstrap, self._pool, connect_timeout)
        self.routes = RouteCache(self._bootstrap, refresh_interval=route_refresh_interval)
        self._buffer: MessageBuffer[QueueState, ReceivedMessage] = MessageBuffer(buffer_size)

        def subscription(name: str, start: str, tags: str = "*") -> _Subscription:
            caller = MasterCaller(self._pool, self.routes, name)
            puller = Puller(
                caller=caller,
                routes=self.routes,
                buffer=self._buffer,
                group=group,
                topic=name,
                start_from=start,
                batch_size=pull_batch_size,
                max_bytes=pull_max_bytes,
                suspend_ms=suspend_ms,
                request_timeout=request_timeout,
                on_failure=self._queue_failed,
                subscription=tags,
            )
            return _Subscription(name, caller, puller)

        self._main = subscription(topic, start_from, self.filter)
        self._caller = self._main.caller
        #: the group's retry topic (``%RETRY%<group>``), read beside ``topic`` when
        #: ``consume_retry``; retried messages always start from its earliest message
        self.retry_topic = retry_topic(group)
        self._retry = subscription(self.retry_topic, "earliest")
        self.consume_retry = consume_retry
        self.max_reconsume_times = max_reconsume_times
        self.nack_deadline = nack_deadline
        self._retry_checked = -RETRY_ROUTE_CHECK_INTERVAL
        # Brokers whose last heartbeat answer said the group does not consume retries.
        self._retry_off: set[str] = set()
        #: the group's FIFO settings when the brokers say it is a FIFO group (else None)
        self.fifo: SubscriptionGroupConfig | None = None
        self._fifo_answers: dict[str, SubscriptionGroupConfig | None] = {}
        # Queues whose pulling stopped for good, their failures not raised yet (receive raises).
        self._failures: list[QueueState] = []
        #: the queues of ``topic`` this member owns now
        self.owned: dict[MessageQueue, QueueState] = self._main.owned
        #: the queues of the retry topic this member owns now
        self.retry_owned: dict[MessageQueue, QueueState] = self._retry.owned
        #: the group's members as last read from a broker
        self.members: list[str] = []
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._rebalance_lock = asyncio.Lock()
        self._started = False
        self._closed = False
        # What the application was last given: the batches, how many messages of them it holds
        # (handed) and how many of those it has confirmed by asking for more (confirmed).
        self._delivered_batches: list[Batch] = []
        self._delivered: list[ReceivedMessage] = []
        self._handed = 0
        self._confirmed = 0
        #: POP mode's delivery (None: queue-bound)
        self.pop: PopDelivery | None = None
        if pop:
            self.pop = PopDelivery(
                SimpleConsumer(
                    bootstrap,
                    group,
                    topic,
                    self.filter,
                    connect_timeout=connect_timeout,
                    request_timeout=request_timeout,
                    route_refresh_interval=route_refresh_interval,
                    credentials=credentials,
                    tls=tls,
                ),
                invisible_duration=invisible_duration,
                max_in_flight=max_in_flight,
                batch_size=pull_batch_size,
                poll_ms=suspend_ms,
                nack_delay=nack_delay,
                route_check_interval=heartbeat_interval,
            )

    # lifecycle --------------------------------------------------------------------------------
    async def start(self) -> None:
        """Join the group and start pulling.

        Fails fast (:class:`UnreachableError`, :class:`TopicNotFoundError`) when the route cannot
        be fetched; later failures are retried in the background.
        """
        if self._closed:
            raise ClosedError("consumer is closed")
        if self._started:
            return
        if self.pop is not None:
            try:
                await self.pop.start()
            except BaseException:
                await self.pop.close()
                self._pool.close()
                raise
            self._started = True
            return
        try:
            await self.routes.get(self.topic)
        except BaseException:
            await self.routes.close()
            self._pool.close()
            raise
        self._started = True
        self.routes.start()
        try:
            await self._group_tick()
        except (ClientError, RemotingError) as exc:  # the group loop keeps trying
            log.warning("joining the group failed", group=self.group, error=str(exc))
        self._tasks.append(asyncio.ensure_future(self._group_loop()))
        self._tasks.append(asyncio.ensure_future(self._commit_loop()))

    async def close(self, *, commit_delivered: bool = True) -> None:
        """Leave the group: stop pulling, commit offsets, unregister, close connections.

        With ``commit_delivered`` (the default) every message handed to the application counts as
        consumed; without it the last message or batch handed out is delivered again later.
        """
        if self._closed:
            return
        self._closed = True
        if self.pop is not None:
            await self.pop.close(commit_delivered=commit_delivered)
            self._pool.close()
            return
        self._buffer.close()
        for task in self._tasks:
            task.cancel()
        states = [*self.owned.values(), *self.retry_owned.values()]
        for state in states:
            state.dropped = True
            if state.task is not None:
                state.task.cancel()
        for task in [*self._tasks, *(s.task for s in states if s.task is not None)]:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        if self._started:
            self._ack(self._handed if commit_delivered else self._confirmed)
            await asyncio.gather(*(self._commit(s) for s in states), return_exceptions=True)
            await self._unregister()
        self.owned.clear()
        self.retry_owned.clear()
        await self.routes.close()
        self._pool.close()

    async def __aenter__(self) -> Consumer:
        await self.start()
        return self

    async def __aexit__(self, exc_type: object, exc: object, tb: object) -> None:
        await self.close(commit_delivered=exc_type is None)

    # application API ----------------------------------------------------------------------------
    async def receive(
        self, timeout: float | None = 1.0, max_messages: int = 1024
    ) -> list[ReceivedMessage]:
        """Wait up to ``timeout`` seconds for messages; an empty list when none came (or closed).

        Calling it confirms every message handed out before as consumed. One task at a time
        consumes (receive() and iteration share the delivery bookkeeping).

        Raises :class:`CorruptMessageError` (once per queue) when a broker cannot read the
        message at a queue's next offset: that queue is no longer pulled (its messages before
        the offset were delivered first); the other queues go on.
        """
        if not self._started:
            raise ClosedError("consumer is not started")
        if self.pop is not None:
            return list(await self.pop.receive(timeout, max_messages))
        self._ack(self._handed)
        self._confirmed = self._handed
        self._raise_failure()
        if self._handed < len(self._delivered):
            # The rest of a batch that iteration had not reached yet.
            rest = self._delivered[self._handed : self._handed + max_messages]
            self._handed += len(rest)
            return rest
        self._delivered_batches = []
        self._delivered = []
        self._handed = self._confirmed = 0
        if self._closed or not await self._buffer.wait(timeout):
            self._raise_failure()
            return []
        batches = self._buffer.take(max_messages, _alive)
        if not batches:
            return []
        self._delivered_batches = batches
        msgs = batches[0][1] if len(batches) == 1 else [m for _, b in batches for m in b]
        self._delivered = msgs
        self._handed = len(msgs)
        return msgs

    def __aiter__(self) -> Consumer:
        return self

    async def __anext__(self) -> ReceivedMessage:
        """The next message; iteration ends when the consumer is closed."""
        if self.pop is not None:
            msg = await self.pop.next(self.heartbeat_interval)
            if msg is None:
                raise StopAsyncIteration
            return msg
        pos = self._handed
        delivered = self._delivered
        if pos < len(delivered):
            self._confirmed = pos
            self._handed = pos + 1
            return delivered[pos]
        while True:
            if self._closed:
                raise StopAsyncIteration
            msgs = await self.receive(self.heartbeat_interval)
            if msgs:
                self._handed = 1
                return msgs[0]

    async def nack(self, msg: ReceivedMessage, reason: str = "") -> None:
        """Send ``msg`` back: the broker re-publishes it to the group's retry topic after the
        group's back-off for its reconsume count, or to the group's DLQ once the retries are
        used up (``max_reconsume_times`` lowers the group's ``retry_max_times``). ``reason``
        travels with it (cut to 512 characters).

        The message then counts as consumed when the application asks for more, like an
        acknowledged one. A nack that fails in a retriable way (no master during a failover,
        a new master that has not seen this member's heartbeat yet) is retried for
        ``nack_deadline`` seconds; past it, :class:`ClientError` is raised and the message's
        queue stops committing at it, so it is delivered again after a restart or handover.

        In a FIFO group the message is instead retried in place: its queue is pulled again from
        it after the group's back-off (messages of its queue handed out after it come again
        too), and only past the group's retries is it sent back, to the DLQ.
        """
        if not self._started:
            raise ClosedError("consumer is not started")
        if self.pop is not None:
            await self.pop.nack(msg, reason)
            return
        if self.fifo is not None:
            await self._fifo_failed(msg, reason)
            return
        await self._send_back(msg, reason, self.max_reconsume_times)

    async def _send_back(
        self, msg: ReceivedMessage, reason: str, max_reconsume_times: int | None
    ) -> None:
        """CONSUMER_SEND_MSG_BACK for ``msg``, retried until ``nack_deadline``."""
        sub = self._retry if msg.stored_topic == self.retry_topic else self._main
        header: dict[str, Scalar] = {
            "group": self.group,
            "offset": msg.record.physical_offset,
            "originTopic": msg.topic,
            "originMsgId": msg.origin_msg_id,
            "reason": clip_reason(reason),
        }
        if max_reconsume_times is not None:
            header["maxReconsumeTimes"] = max_reconsume_times
        deadline = time.monotonic() + self.nack_deadline
        backoff = 0.05
        while True:
            try:
                await sub.caller.call(
                    msg.broker_name,
                    RequestCode.CONSUMER_SEND_MSG_BACK,
                    header,
                    timeout=self.request_timeout,
                )
                return
            except (BrokerError, NoRouteError, RemotingError) as exc:
                retriable = not isinstance(exc, BrokerError) or exc.code in _NACK_RETRIABLE
                if not retriable or time.monotonic() + backoff > deadline or self._closed:
                    self._hold(sub, msg)
                    raise ClientError(f"nack of {msg.msg_id} failed: {exc}") from exc
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 1.0)
            with contextlib.suppress(ClientError, RemotingError):
                await self.routes.refresh(sub.topic)

    def _hold(self, sub: _Subscription, msg: ReceivedMessage) -> None:
        state = sub.owned.get(_queue_of(msg))
        if state is not None and (state.hold is None or msg.queue_offset < state.hold):
            state.hold = msg.queue_offset

    def _hold_message(self, msg: ReceivedMessage) -> None:
        self._hold(self._retry if msg.stored_topic == self.retry_topic else self._main, msg)

    async def process(self, handler: Handler) -> None:
        """Run ``handler`` (a function or coroutine function) on every message, in order, until
        the consumer is closed. A message whose handler returns is consumed; one whose handler
        raises is nacked with the exception as reason. The nacks of one received batch run
        together, and the batch counts as consumed only once they are answered. A nack that
        fails is logged (its queue then stops committing at it, see :meth:`nack`) and
        processing goes on. Cancelling the task stops it: the message in hand and those whose
        nack had no answer yet are delivered again later (their queues stop committing at
        them). In POP mode a message whose handler returns is acked, one whose handler raises
        is nacked (:meth:`nack`); cancelled, the message in hand and the rest of its batch are
        not acked and come back after their invisible time."""
        if self.pop is not None:
            if not self._started:
                raise ClosedError("consumer is not started")
            await self.pop.process(handler, self.heartbeat_interval)
            return
        while not self._closed:
            msgs = await self.receive(self.heartbeat_interval)
            failed: list[tuple[ReceivedMessage, str]] = []
            # FIFO: queues blocked by a failed message in this batch -> its offset; their later
            # messages of the batch are not handled (they come again after it).
            blocked: dict[tuple[str, MessageQueue], int] = {}
            fifo_states: dict[tuple[str, MessageQueue], QueueState | None] = {}
            state: QueueState | None = None
            for msg in msgs:
                if self.fifo is not None:
                    where = (msg.stored_topic, _queue_of(msg))
                    if blocked and msg.queue_offset >= blocked.get(where, msg.queue_offset + 1):
                        continue
                    if where in fifo_states:
                        state = fifo_states[where]
                    else:
                        state = fifo_states[where] = self._state_of(msg)[1]
                    if not _owned(state):
                        continue  # its queue was given away: the new owner delivers it in order
                try:
                    result = handler(msg)
                    if inspect.isawaitable(result):
                        await result
                except asyncio.CancelledError:
                    for held in (msg, *(m for m, _ in failed)):
                        self._hold_message(held)
                    raise
                except Exception as exc:
                    reason = f"{type(exc).__name__}: {exc}"
                    if self.fifo is None:
                        failed.append((msg, reason))
                    elif not await self._fifo_failed(msg, reason):
                        blocked[(msg.stored_topic, _queue_of(msg))] = msg.queue_offset
                else:
                    if state is not None and state.fifo_offset is not None:
                        self._fifo_passed(msg)
            if failed:
                await self._nack_batch(failed)

    # internals: FIFO groups ----------------------------------------------------------------
    def _state_of(self, msg: ReceivedMessage) -> tuple[_Subscription, QueueState | None]:
        sub = self._retry if msg.stored_topic == self.retry_topic else self._main
        return sub, sub.owned.get(_queue_of(msg))

    async def _fifo_failed(self, msg: ReceivedMessage, reason: str) -> bool:
        """A message of a FIFO group failed. False: its queue is rewound to it and it comes
        again after the group's back-off (the queue's later messages with it); True: its
        retries were used up and it went to the group's DLQ (its queue goes on)."""
        config = self.fifo
        sub, state = self._state_of(msg)
        if config is None or state is None or state.dropped:
            return False  # the queue was given away: its new owner delivers it again
        offset = msg.queue_offset
        if state.fifo_offset != offset:
            state.fifo_offset, state.fifo_retries = offset, 0
        step: Retry | DeadLetter = next_step(config, state.fifo_retries, self.max_reconsume_times)
        if isinstance(step, DeadLetter):
            try:
                # maxReconsumeTimes 0: the DLQ whatever the broker's settings say.
                await self._send_back(msg, reason, 0)
            except ClientError as exc:
                log.error(
                    "sending a FIFO message to the DLQ failed", msg_id=msg.msg_id, error=str(exc)
                )
                step = Retry(backoff_ms(config, state.fifo_retries), state.fifo_retries)
            else:
                log.warning(
                    "FIFO message sent to the DLQ",
                    msg_id=msg.msg_id,
                    queue=_name(state.mq),
                    offset=offset,
                    retries=state.fifo_retries,
                )
                self._fifo_passed(msg)
                return True
        state.fifo_retries = step.count
        self._rewind(sub, state, offset, step.delay_ms / 1000)
        return False

    def _fifo_passed(self, msg: ReceivedMessage) -> None:
        """A message of a FIFO group was consumed (or went to the DLQ): its queue is free."""
        _sub, state = self._state_of(msg)
        if state is not None and state.fifo_offset == msg.queue_offset:
            state.fifo_offset, state.fifo_retries = None, 0
            if state.hold == msg.queue_offset:
                state.hold = None

    def _rewind(self, sub: _Subscription, state: QueueState, offset: int, delay: float) -> None:
        """Pull ``state``'s queue again from ``offset`` after ``delay`` seconds: nothing at or
        after it counts as consumed meanwhile; what was pulled after it is dropped."""
        if state.hold is None or offset < state.hold:
            state.hold = offset
        if state.task is not None:
            state.task.cancel()
        self._buffer.discard(state)
        state.task = asyncio.ensure_future(self._resume(sub, state, offset, delay))

    async def _resume(
        self, sub: _Subscription, state: QueueState, offset: int, delay: float
    ) -> None:
        await asyncio.sleep(delay)
        if state.dropped:
            return
        state.start_at(offset)
        await sub.puller.run(state)

    async def _nack_batch(self, failed: list[tuple[ReceivedMessage, str]]) -> None:
        tasks = [asyncio.ensure_future(self.nack(msg, reason)) for msg, reason in failed]
        try:
            results = await asyncio.gather(*tasks, return_exceptions=True)
        except asyncio.CancelledError:
            for (msg, _), task in zip(failed, tasks, strict=True):
                if not task.done() or task.cancelled() or task.exception() is not None:
                    self._hold_message(msg)
                task.cancel()
            raise
        for (msg, _), outcome in zip(failed, results, strict=True):
            if isinstance(outcome, ClientError):
                log.error("nack failed", msg_id=msg.msg_id, error=str(outcome))
            elif isinstance(outcome, BaseException):
                raise outcome

    def _queue_failed(self, state: QueueState) -> None:
        self._failures.append(state)
        self._buffer.wake()

    def _raise_failure(self) -> None:
        """Raise the failure of a queue whose pulling stopped (each once), after the messages
        buffered before it were handed out: they are valid and come first."""
        while self._failures:
            state = self._failures[0]
            if state.dropped or state.failure is None:
                self._failures.pop(0)
                continue
            if self._buffer.holds(state):
                return
            self._failures.pop(0)
            raise state.failure

    # internals: consumption bookkeeping ---------------------------------------------------------
    def _ack(self, count: int) -> None:
        """The first ``count`` delivered messages are consumed."""
        for state, batch in self._delivered_batches:
            if count <= 0:
                break
            k = min(count, len(batch))
            state.ack(batch[k - 1].queue_offset + 1)
            count -= k

    async def _commit(self, state: QueueState) -> None:
        offset = state.consumed
        if offset is None or offset == state.committed:
            return
        mq = state.mq
        sub = self._retry if state.topic == self.retry_topic else self._main
        if sub is self._retry and state.committed is None and not state.acked:
            # Nothing retried was consumed here yet: the group keeps no position in its retry
            # topic until it has one (a new owner starts from the earliest retry either way).
            return
        if mq.broker_name == LOGICAL_BROKER:
            await self._commit_logical(sub, state, offset)
            return
        update = ConsumerOffsetUpdate(
            group=self.group, topic=sub.topic, queue_id=mq.queue_id, offset=offset
        )
        await sub.caller.call(
            mq.broker_name, update.code, update.header(), timeout=self.request_timeout
        )
        state.committed = offset

    async def _commit_logical(self, sub: _Subscription, state: QueueState, offset: int) -> None:
        """A static topic's logical offset, committed as physical offsets on the items it
        (:func:`commit_points`: the item holding it, every older item at its end, every newer
        one at its start), each on its own group, so the group's position survives re-mapping
        (and the drop of an old item by retention) and every broker's lag of the items read is
        0. Raises the first failure after trying every item."""
        route = self.routes.peek(sub.topic) or await self.routes.get(sub.topic)
        queue = state.mq.queue_id
        if queue >= len(route.mapping):
            raise ClientError(f"the route of {sub.topic} has no logical queue {queue}")
        points = [
            (item, physical)
            for item, physical in commit_points(route.mapping[queue], offset)
            if state.item_commits.get(item.generation) != physical
        ]

        async def one(broker: str, physical_queue: int, physical: int) -> None:
            update = ConsumerOffsetUpdate(
                group=self.group, topic=sub.topic, queue_id=physical_queue, offset=physical
            )
            await sub.caller.call(
                broker, update.code, update.header(), timeout=self.request_timeout
            )

        results = await asyncio.gather(
            *(one(i.broker_name, i.physical_queue, p) for i, p in points), return_exceptions=True
        )
        failure: BaseException | None = None
        for (item, physical), result in zip(points, results, strict=True):
            if isinstance(result, BaseException):
                failure = failure or result
            else:
                state.item_commits[item.generation] = physical
        if failure is not None:
            raise failure
        state.committed = offset

    async def commit(self) -> None:
        """Commit the consumed offsets of every owned queue now (also done periodically; in
        POP mode, acks go out as messages are consumed and this does nothing)."""
        self._ack(self._confirmed)
        states = [*self.owned.values(), *self.retry_owned.values()]
        results = await asyncio.gather(*(self._commit(s) for s in states), return_exceptions=True)
        for state, result in zip(states, results, strict=True):
            if isinstance(result, Exception):
                log.warning("offset commit failed", queue=_name(state.mq), error=str(result))

    async def _commit_loop(self) -> None:
        while True:
            await asyncio.sleep(self.commit_interval)
            await self.commit()

    # internals: membership and rebalance --------------------------------------------------------
    async def _group_loop(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.heartbeat_interval)
            self._wake.clear()
            try:
                await self._group_tick()
            except (ClientError, RemotingError) as exc:
                log.warning("group heartbeat/rebalance failed", group=self.group, error=str(exc))

    async def _group_tick(self) -> None:
        """Heartbeat to every group (its master, or a slave while it has none), read the
        members, rebalance."""
        route = self.routes.peek(self.topic) or await self.routes.get(self.topic)
        groups = sorted(route.read_addresses().items())
        beat = {"clientId": self.client_id, "consumerGroup": self.group, "topic": self.topic}
        self._retry_off.clear()
        self._fifo_answers = {}
        results = await asyncio.gather(
            *(self._heartbeat(address, beat) for _, address in groups), return_exceptions=True
        )
        if self._fifo_answers:  # a broker that answered says whether the group is FIFO
            fifo = next((c for c in self._fifo_answers.values() if c is not None), None)
            if (fifo is None) != (self.fifo is None):
                log.info("FIFO consumption", group=self.group, fifo=fifo is not None)
            self.fifo = fifo
        members: list[str] | None = None
        for (name, _), ok in zip(groups, results, strict=True):
            if ok is not True:
                continue
            try:
                members = await self._member_list(name)
                break
            except (ClientError, RemotingError) as exc:
                log.warning("member list failed", broker=name, error=str(exc))
        if members is None:
            return  # no group answered: keep what we own until one does
        if members != self.members:
            log.info("group members changed", group=self.group, members=members)
            self.members = members
        await self._rebalance(self._main, route, members)
        if not self.consume_retry or self._retry_off:
            # A broker says the group does not consume retries (its nacks go to the DLQ).
            await self._release(self._retry)
            return
        retry_route = await self._retry_route()
        if retry_route is not None:
            await self._rebalance(self._retry, retry_route, members)

    async def _release(self, sub: _Subscription) -> None:
        """Stop reading every queue of ``sub``, committing what was consumed."""
        if not sub.owned:
            return
        async with self._rebalance_lock:
            gone = list(sub.owned.values())
            for state in gone:
                self._give_away(sub, state)
            self._ack(self._confirmed)
            await asyncio.gather(*(self._commit_dropped(s) for s in gone))
            log.info("stopped reading", group=self.group, topic=sub.topic)

    async def _retry_route(self) -> TopicRoute | None:
        """The retry topic's route; None while it has none (the brokers create the topic when
        a member first heart-beats, the route follows their next registration)."""
        route = self.routes.peek(self.retry_topic)
        if route is not None:
            return route
        now = time.monotonic()
        if now - self._retry_checked < RETRY_ROUTE_CHECK_INTERVAL:
            return None
        self._retry_checked = now
        try:
            return await self.routes.get(self.retry_topic)
        except TopicNotFoundError:
            return None

    async def _heartbeat(self, address: str, header: dict[str, str]) -> bool:
        conn = await self._pool.get(address)
        if conn.on_request is None:
            conn.on_request = self._on_broker_request
        resp = await conn.request(RequestCode.HEART_BEAT, header, None, self.request_timeout)
        if resp.header.get("consumeRetry") is False:
            self._retry_off.add(address)
        if resp.code == ResponseCode.SUCCESS:
            self._fifo_answers[address] = _fifo_config(self.group, resp.header)
        return resp.code == ResponseCode.SUCCESS

    async def _member_list(self, broker_name: str) -> list[str]:
        resp = await self._caller.call(
            broker_name,
            RequestCode.GET_CONSUMER_LIST_BY_GROUP,
            {"consumerGroup": self.group},
            timeout=self.request_timeout,
        )
        ids: Any = msgpack.unpackb(resp.body or b"\x90", raw=False)
        if not isinstance(ids, list):
            raise ClientError("malformed consumer list")
        return sorted(str(i) for i in ids)

    def _on_broker_request(self, frame: Frame) -> None:
        if frame.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED:
            self._wake.set()

    async def _rebalance(self, sub: _Subscription, route: TopicRoute, members: list[str]) -> None:
        if self._closed:
            return
        async with self._rebalance_lock:
            owned = sub.owned
            mine = set(allocate_averagely(route.consume_queues(), members, self.client_id))
            gone = [s for mq, s in owned.items() if mq not in mine]
            added = sorted(mq for mq in mine if mq not in owned)
            if not gone and not added:
                return
            for state in gone:
                self._give_away(sub, state)
            # Commit what the old owner (us) consumed, so the new owner starts there.
            self._ack(self._confirmed)
            await asyncio.gather(*(self._commit_dropped(s) for s in gone))
            if self._closed:
                return
            for mq in added:
                state = QueueState(mq, sub.topic)
                state.task = asyncio.ensure_future(sub.puller.run(state))
                owned[mq] = state
            log.info(
                "rebalanced",
                group=self.group,
                client=self.client_id,
                topic=sub.topic,
                queues=[_name(mq) for mq in sorted(owned)],
            )

    def _give_away(self, sub: _Subscription, state: QueueState) -> None:
        state.dropped = True
        if state.task is not None:
            state.task.cancel()
        self._buffer.discard(state)
        del sub.owned[state.mq]

    async def _commit_dropped(self, state: QueueState) -> None:
        try:
            await self._commit(state)
        except (ClientError, RemotingError) as exc:
            log.warning("offset commit on handover failed", queue=_name(state.mq), error=str(exc))

    async def _unregister(self) -> None:
        route = self.routes.peek(self.topic)
        if route is None:
            return
        header = {"clientId": self.client_id, "consumerGroup": self.group}

        async def one(address: str) -> None:
            conn = await self._pool.get(address)
            await conn.request(RequestCode.UNREGISTER_CLIENT, header, None, self.request_timeout)

        await asyncio.gather(
            *(one(a) for a in route.read_addresses().values()), return_exceptions=True
        )


def _fifo_config(group: str, header: dict[str, Scalar]) -> SubscriptionGroupConfig | None:
    """The group's FIFO settings from a heartbeat answer (None: not a FIFO group)."""
    if header.get("consumeOrderly") is not True:
        return None
    times = header.get("retryMaxTimes")
    delays = header.get("retryDelays")
    try:
        levels = parse_delay_levels(delays) if isinstance(delays, str) else None
    except ValueError:
        levels = None
    base = SubscriptionGroupConfig(group)
    return SubscriptionGroupConfig(
        group,
        times if isinstance(times, int) and times >= 0 else base.retry_max_times,
        levels or base.retry_delays_ms,
        False,
        True,
    )


def _owned(state: QueueState | None) -> bool:
    return state is not None and not state.dropped


def _alive(state: QueueState) -> bool:
    return not state.dropped


def _queue_of(msg: ReceivedMessage) -> MessageQueue:
    """The queue a message was read from as the consumer owns it (a static topic's logical
    queue, or its physical queue)."""
    if msg.logical_queue is not None:
        return MessageQueue(LOGICAL_BROKER, msg.logical_queue)
    return MessageQueue(msg.broker_name, msg.queue_id)


def _name(mq: MessageQueue) -> str:
    return f"{mq.broker_name}/{mq.queue_id}"
