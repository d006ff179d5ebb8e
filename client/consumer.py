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

Offsets moved while the group runs (rmqctl resetOffsetByTime and skipAccumulatedMessage,
:meth:`Consumer.seek`, :meth:`Consumer.seek_to_time`): each master tells the members, and a
member drops what it pulled of the queues reset and not consumed yet and pulls from the new
offsets (:mod:`client.queue_rebalance`, docs/operations.md "Resetting offsets").

POP mode (``pop=True``, :mod:`client.pop_consumer`): no rebalance and no queue ownership; any
number of members share every queue of the topic through POP requests, each message acked once
consumed (the rule above) and a nacked one brought back by the broker through the retry topic.
The same application API (``receive``, iteration, ``process``, ``nack``).

Where the parts live: membership and rebalance in ``client/queue_rebalance.py``, offset
commits in ``client/offset_commit.py``, sending back and FIFO retries in
``client/consume_retry.py``, pulling in ``client/pull.py``, handing messages out and what
counts as consumed in ``client/queue_delivery.py`` (``client/pop_consumer.py`` in POP mode);
this module is the application's API over them and the consumer's lifecycle.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Sequence

from client import logs
from client.bootstrap import Bootstrap
from client.brokers import MasterCaller
from client.buffer import MessageBuffer
from client.consume_retry import ConsumeRetry
from client.errors import BrokerError, ClientError, ClosedError
from client.identity import default_client_id
from client.message import ReceivedMessage
from client.offset_commit import OffsetCommitter
from client.offset_reset import OffsetResetter, ResetReport
from client.pop_consumer import PopDelivery
from client.pull import Puller, QueueState
from client.queue_delivery import Handler, QueueDelivery
from client.queue_rebalance import GroupRebalancer
from client.routes import MessageQueue, RouteCache
from client.simple_consumer import SimpleConsumer
from client.subscription import Subscription
from client.trace import ClientTracer, now_ms, traced_handler
from protocol.codes import ResponseCode
from protocol.filter import TAG, Filter, as_filter
from protocol.request_auth import Credentials
from protocol.retry import SubscriptionGroupConfig, retry_topic
from remoting.client import ConnectionPool
from remoting.errors import RemotingError

log = logs.get_logger(__name__)

JOIN_RETRY = 0.2
"""Seconds between two first heartbeats the brokers refused NO_PERMISSION (:meth:`Consumer.start`)."""


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
        filter: str | Filter = "*",
        pop: bool = False,
        invisible_duration: float = 30.0,
        max_in_flight: int = 256,
        nack_delay: float | None = None,
        credentials: Credentials | None = None,
        tls: ssl.SSLContext | None = None,
        trace: bool = False,
    ) -> None:
        """``trace=True`` (RocketMQ's enableMsgTrace): what this member consumes, how long it
        took and whether it failed go to the trace topic (docs/traces.md).

        ``pop=True``: POP mode (see the module docstring and docs/pop.md). Its own settings:
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
        flt = as_filter(filter)  # raises FilterError for a bad expression, with its position
        self.group = group
        self._tracer = (
            ClientTracer(bootstrap, producer_options={"credentials": credentials, "tls": tls})
            if trace
            else None
        )
        self._tracing: dict[str, tuple[ReceivedMessage, str, int]] = {}
        """trace: messages received and not yet consumed -> (message, request id, when)."""
        self.topic = topic
        self.filter = flt.expression
        """The expression of the topic's subscription, of type :attr:`filter_type` (the retry
        topic takes everything: its copies passed the filter when first delivered)."""
        self.filter_type = flt.type
        """TAG (``filter`` a string or ``Filter.tags(...)``) or SQL92 (``Filter.sql(...)``)."""
        self.client_id = client_id or default_client_id()
        self.heartbeat_interval = heartbeat_interval
        self.commit_interval = commit_interval
        self.request_timeout = request_timeout
        self._pool = ConnectionPool(connect_timeout, credentials, tls)
        self._bootstrap = Bootstrap(bootstrap, self._pool, connect_timeout)
        self.routes = RouteCache(self._bootstrap, refresh_interval=route_refresh_interval)
        self._buffer: MessageBuffer[QueueState, ReceivedMessage] = MessageBuffer(buffer_size)

        def subscription(name: str, start: str, tags: str = "*", kind: str = TAG) -> Subscription:
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
                on_failure=lambda state: self._delivery.queue_failed(state),
                subscription=tags,
                filter_type=kind,
            )
            return Subscription(name, caller, puller)

        self._main = subscription(topic, start_from, self.filter, self.filter_type)
        #: the group's retry topic (``%RETRY%<group>``), read beside ``topic`` when
        #: ``consume_retry``; retried messages always start from its earliest message
        self.retry_topic = retry_topic(group)
        self._retry = subscription(self.retry_topic, "earliest")
        self._committer = OffsetCommitter(
            group, self.routes, self._main, self._retry, request_timeout=request_timeout
        )
        self._rebalancer = GroupRebalancer(
            pool=self._pool,
            routes=self.routes,
            buffer=self._buffer,
            committer=self._committer,
            main=self._main,
            retry=self._retry,
            group=group,
            client_id=self.client_id,
            heartbeat_interval=heartbeat_interval,
            request_timeout=request_timeout,
            consume_retry=consume_retry,
            confirm=lambda: self._delivery.confirm(),
            closed=lambda: self._closed,
        )
        self._retrier = ConsumeRetry(
            routes=self.routes,
            buffer=self._buffer,
            main=self._main,
            retry=self._retry,
            group=group,
            request_timeout=request_timeout,
            nack_deadline=nack_deadline,
            max_reconsume_times=max_reconsume_times,
            fifo=lambda: self._rebalancer.fifo,
            closed=lambda: self._closed,
        )
        self._delivery = QueueDelivery(
            self._buffer,
            self._retrier,
            fifo=lambda: self._rebalancer.fifo,
            started=lambda: self._started,
            closed=lambda: self._closed,
        )
        #: the queues of ``topic`` this member owns now
        self.owned: dict[MessageQueue, QueueState] = self._main.owned
        #: the queues of the retry topic this member owns now
        self.retry_owned: dict[MessageQueue, QueueState] = self._retry.owned
        self._tasks: list[asyncio.Task[None]] = []
        self._started = False
        self._closed = False
        #: POP mode's delivery (None: queue-bound)
        self.pop: PopDelivery | None = None
        if pop:
            self.pop = PopDelivery(
                SimpleConsumer(
                    bootstrap,
                    group,
                    topic,
                    flt,
                    connect_timeout=connect_timeout,
                    request_timeout=request_timeout,
                    route_refresh_interval=route_refresh_interval,
                    credentials=credentials,
                    tls=tls,
                    client_id=self.client_id,
                    heartbeat_interval=heartbeat_interval,
                ),
                invisible_duration=invisible_duration,
                max_in_flight=max_in_flight,
                batch_size=pull_batch_size,
                poll_ms=suspend_ms,
                nack_delay=nack_delay,
                route_check_interval=heartbeat_interval,
            )

    @property
    def fifo(self) -> SubscriptionGroupConfig | None:
        """The group's FIFO settings when the brokers say it is a FIFO group (else None)."""
        return self._rebalancer.fifo

    @property
    def members(self) -> list[str]:
        """The group's members as last read from a broker."""
        return self._rebalancer.members

    @property
    def consume_retry(self) -> bool:
        return self._rebalancer.consume_retry

    @property
    def max_reconsume_times(self) -> int | None:
        return self._retrier.max_reconsume_times

    @property
    def nack_deadline(self) -> float:
        return self._retrier.nack_deadline

    # lifecycle --------------------------------------------------------------------------------
    async def start(self) -> None:
        """Join the group and start pulling.

        Fails fast (:class:`UnreachableError`, :class:`TopicNotFoundError`) when the route cannot
        be fetched, and with the brokers' refusal (:class:`BrokerError` NO_PERMISSION: the user
        may not sub on the group) when every broker still refuses the group's heartbeat after
        ``request_timeout`` (a broker learns of a new user or rule within about a heartbeat
        interval); later failures are retried in the background.
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
            await self._join()
        except BaseException:
            await self.close(commit_delivered=False)
            raise
        self._tasks.append(asyncio.ensure_future(self._rebalancer.loop()))
        self._tasks.append(asyncio.ensure_future(self._commit_loop()))

    async def _join(self) -> None:
        """The first heartbeat and rebalance. A NO_PERMISSION refusal everywhere is asked again
        until ``request_timeout`` passed, then raised; other failures are logged, and the group
        loop keeps trying."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.request_timeout
        while True:
            try:
                await self._rebalancer.tick()
                return
            except BrokerError as exc:
                if exc.code != ResponseCode.NO_PERMISSION:
                    log.warning("joining the group failed", group=self.group, error=str(exc))
                    return
                if loop.time() >= deadline:
                    raise
                await asyncio.sleep(JOIN_RETRY)
            except (ClientError, RemotingError) as exc:  # the group loop keeps trying
                log.warning("joining the group failed", group=self.group, error=str(exc))
                return

    async def close(self, *, commit_delivered: bool = True) -> None:
        """Leave the group: stop pulling, commit offsets, unregister, close connections.

        With ``commit_delivered`` (the default) every message handed to the application counts as
        consumed; without it the last message or batch handed out is delivered again later.
        """
        if self._closed:
            return
        self._closed = True
        if self._tracer is not None:
            if commit_delivered:
                self._trace_consumed()
            await self._tracer.close()
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
            self._delivery.closing(commit_delivered)
            await asyncio.gather(
                *(self._committer.commit(s) for s in states), return_exceptions=True
            )
            await self._rebalancer.unregister()
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

        Raises :class:`CorruptMessageError` (once per message) when a broker cannot read the
        message at a queue's next offset (its messages before the offset are delivered first):
        that queue waits there, asked again after 1 s, doubling up to every 30 s, and goes on by
        itself once an operator skipped the message (``rmqctl skipCorruptMessage``) or a
        replica repaired it; the other queues go on meanwhile. The consumer never skips it.
        Raises a :class:`BrokerError` for a queue whose pulls are refused for good (that queue
        is no longer pulled): NO_PERMISSION for a topic without read permission (updateTopic
        -p 2), SQL_FILTER_DISABLED.
        """
        if not self._started:
            raise ClosedError("consumer is not started")
        self._trace_consumed()
        if self.pop is not None:
            got: list[ReceivedMessage] = list(await self.pop.receive(timeout, max_messages))
        else:
            got = await self._delivery.receive(timeout, max_messages)
        if self._tracer is not None:
            now = now_ms()
            for m in got:
                attempt = getattr(m, "attempt", None) or m.reconsume_times + 1
                request_id = self._tracer.consuming(self.group, m.record, attempt, now)
                self._tracing[m.msg_id] = (m, request_id, now)
        return got

    def _trace_consumed(self, nacked: ReceivedMessage | None = None) -> None:
        """trace: ``nacked`` failed; the others received before count as consumed now."""
        tracer = self._tracer
        if tracer is None:
            return
        now = now_ms()
        if nacked is not None:
            held = self._tracing.pop(nacked.msg_id, None)
            if held is not None:
                tracer.consumed(self.group, nacked.record, held[1], held[2], now, success=False)
            return
        for m, request_id, started in self._tracing.values():
            tracer.consumed(self.group, m.record, request_id, started, now, success=True)
        self._tracing.clear()

    def __aiter__(self) -> Consumer:
        return self

    async def __anext__(self) -> ReceivedMessage:
        """The next message; iteration ends when the consumer is closed."""
        delivery = self.pop if self.pop is not None else self._delivery
        msg = await delivery.next(self.heartbeat_interval)
        if msg is None:
            raise StopAsyncIteration
        return msg

    async def nack(self, msg: ReceivedMessage, reason: str = "") -> None:
        """Send ``msg`` back: the broker re-publishes it to the group's retry topic after the
        group's back-off for its reconsume count, or to the group's DLQ once the retries are
        used up (``max_reconsume_times`` lowers the group's ``retry_max_times``). ``reason``
        travels with it (cut to 512 characters); in POP mode it is only logged (docs/pop.md: the
        DLQ then shows "invisible time passed without an ack").

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
        self._trace_consumed(msg)
        if self.pop is not None:
            await self.pop.nack(msg, reason)
            return
        await self._delivery.nack(msg, reason)

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
        if self._tracer is not None:
            handler = traced_handler(self._tracer, self.group, handler)
        if self.pop is not None:
            if not self._started:
                raise ClosedError("consumer is not started")
            await self.pop.process(handler, self.heartbeat_interval)
            return
        await self._delivery.process(handler, self.heartbeat_interval)

    async def commit(self) -> None:
        """Commit the consumed offsets of every owned queue now (also done periodically; in
        POP mode, acks go out as messages are consumed and this does nothing)."""
        self._delivery.confirm()
        await self._committer.commit_all([*self.owned.values(), *self.retry_owned.values()])

    async def seek(self, topic: str, queue: MessageQueue, offset: int) -> ResetReport:
        """Move the group's offset of one queue of ``topic`` (the consumer's topic or its
        group's retry topic) to ``offset``, for every member: the queue's master commits it and
        tells the group's members, and whichever member reads the queue drops what it pulled
        of it and goes on from ``offset`` (this member before this returns). An offset past
        the queue's end or before its first retained message is kept within them (the
        report's ``outcome`` says ``max`` or ``min``). A static topic's queue is a logical
        queue (``MessageQueue(LOGICAL_BROKER, id)``) and ``offset`` a logical offset. In POP
        mode the group's next POP of the queue reads from there.

        Needs update (or admin) on the group when authentication is on. Raises
        :class:`ClientError` when a master refuses or cannot be reached."""
        if not self._started:
            raise ClosedError("consumer is not started")
        report = await self._resetter().to_offset(self.group, topic, queue, offset)
        await self._rebalancer.resets_applied()
        return report

    async def seek_to_time(
        self, timestamp_ms: int, topic: str | None = None, *, force: bool = True
    ) -> ResetReport:
        """Move the group's offsets of every queue of ``topic`` (default: the consumer's) to
        the first message stored at or after ``timestamp_ms`` (epoch ms), as :meth:`seek`
        does for one queue. A time before a queue's first retained message moves it there
        (``outcome`` ``min``); a time in the future is refused. Without ``force`` a queue
        whose committed offset is already before that time keeps it (``kept``)."""
        if not self._started:
            raise ClosedError("consumer is not started")
        report = await self._resetter().by_time(
            self.group, topic or self.topic, timestamp_ms, force=force
        )
        await self._rebalancer.resets_applied()
        return report

    def _resetter(self) -> OffsetResetter:
        return OffsetResetter(self._pool, self.routes.get, self.request_timeout)

    async def _commit_loop(self) -> None:
        while True:
            await asyncio.sleep(self.commit_interval)
            await self.commit()
