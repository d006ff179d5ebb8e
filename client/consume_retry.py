"""What becomes of a message the application failed (:class:`ConsumeRetry`).

In a normal group it is sent back (CONSUMER_SEND_MSG_BACK): the broker re-publishes it to the
group's retry topic after the group's back-off, or to its DLQ once its retries are used up. In
a FIFO group it is retried in place: its queue is rewound to it and pulled again after the
group's back-off, up to the group's retries; then it is sent back to the DLQ and the queue goes
on. A message whose send-back failed holds its queue's commits at it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

from client import logs
from client.buffer import MessageBuffer
from client.errors import BrokerError, ClientError, NoRouteError
from client.message import ReceivedMessage
from client.pull import QueueState
from client.routes import RouteCache
from client.subscription import Subscription, queue_name, queue_of
from protocol.broker_requests.send_back import SendBack
from protocol.codes import ResponseCode
from protocol.retry import (
    DeadLetter,
    Retry,
    SubscriptionGroupConfig,
    backoff_ms,
    clip_reason,
    next_step,
)
from remoting.errors import RemotingError

# The consumer's logger: its lines keep the name applications filter on.
log = logs.get_logger("client.consumer")

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


class ConsumeRetry:
    """Sends failed messages back, or retries them in place in a FIFO group.

    ``fifo`` gives the group's FIFO settings of the moment (None: not a FIFO group);
    ``closed`` says whether the consumer is closing (a failed send-back is not retried then).
    """

    def __init__(
        self,
        *,
        routes: RouteCache,
        buffer: MessageBuffer[QueueState, ReceivedMessage],
        main: Subscription,
        retry: Subscription,
        group: str,
        request_timeout: float,
        nack_deadline: float,
        max_reconsume_times: int | None,
        fifo: Callable[[], SubscriptionGroupConfig | None],
        closed: Callable[[], bool],
    ) -> None:
        self.routes = routes
        self._buffer = buffer
        self._main = main
        self._retry = retry
        self.group = group
        self.request_timeout = request_timeout
        self.nack_deadline = nack_deadline
        self.max_reconsume_times = max_reconsume_times
        self._fifo = fifo
        self._closed = closed

    def _sub_of(self, msg: ReceivedMessage) -> Subscription:
        return self._retry if msg.stored_topic == self._retry.topic else self._main

    def state_of(self, msg: ReceivedMessage) -> QueueState | None:
        """The state of the owned queue ``msg`` was read from (None: not owned now)."""
        return self._sub_of(msg).owned.get(queue_of(msg))

    async def send_back(
        self, msg: ReceivedMessage, reason: str, max_reconsume_times: int | None
    ) -> None:
        """CONSUMER_SEND_MSG_BACK for ``msg``, retried until ``nack_deadline``."""
        sub = self._sub_of(msg)
        back = SendBack(
            group=self.group,
            offset=msg.record.physical_offset,
            origin_topic=msg.topic,
            origin_msg_id=msg.origin_msg_id,
            reason=clip_reason(reason),
            max_reconsume_times=max_reconsume_times,
        )
        header, _ = back.encode()
        deadline = time.monotonic() + self.nack_deadline
        backoff = 0.05
        while True:
            try:
                await sub.caller.call(
                    msg.broker_name,
                    back.code,
                    header,
                    timeout=self.request_timeout,
                )
                return
            except (BrokerError, NoRouteError, RemotingError) as exc:
                retriable = not isinstance(exc, BrokerError) or exc.code in _NACK_RETRIABLE
                if not retriable or time.monotonic() + backoff > deadline or self._closed():
                    self.hold(msg)
                    raise ClientError(f"nack of {msg.msg_id} failed: {exc}") from exc
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 1.0)
            with contextlib.suppress(ClientError, RemotingError):
                await self.routes.refresh(sub.topic)

    def hold(self, msg: ReceivedMessage) -> None:
        """Consumption of ``msg``'s queue never counts past it (it comes again after a restart
        or a handover)."""
        state = self.state_of(msg)
        if state is not None and (state.hold is None or msg.queue_offset < state.hold):
            state.hold = msg.queue_offset

    async def fifo_failed(self, msg: ReceivedMessage, reason: str) -> bool:
        """A message of a FIFO group failed. False: its queue is rewound to it and it comes
        again after the group's back-off (the queue's later messages with it); True: its
        retries were used up and it went to the group's DLQ (its queue goes on)."""
        config = self._fifo()
        sub = self._sub_of(msg)
        state = sub.owned.get(queue_of(msg))
        if config is None or state is None or state.dropped:
            return False  # the queue was given away: its new owner delivers it again
        offset = msg.queue_offset
        if state.fifo_offset != offset:
            state.fifo_offset, state.fifo_retries = offset, 0
        step: Retry | DeadLetter = next_step(config, state.fifo_retries, self.max_reconsume_times)
        if isinstance(step, DeadLetter):
            try:
                # maxReconsumeTimes 0: the DLQ whatever the broker's settings say.
                await self.send_back(msg, reason, 0)
            except ClientError as exc:
                log.error(
                    "sending a FIFO message to the DLQ failed", msg_id=msg.msg_id, error=str(exc)
                )
                step = Retry(backoff_ms(config, state.fifo_retries), state.fifo_retries)
            else:
                log.warning(
                    "FIFO message sent to the DLQ",
                    msg_id=msg.msg_id,
                    queue=queue_name(state.mq),
                    offset=offset,
                    retries=state.fifo_retries,
                )
                self.fifo_passed(msg)
                return True
        state.fifo_retries = step.count
        self._rewind(sub, state, offset, step.delay_ms / 1000)
        return False

    def fifo_passed(self, msg: ReceivedMessage) -> None:
        """A message of a FIFO group was consumed (or went to the DLQ): its queue is free."""
        state = self.state_of(msg)
        if state is not None and state.fifo_offset == msg.queue_offset:
            state.fifo_offset, state.fifo_retries = None, 0
            if state.hold == msg.queue_offset:
                state.hold = None

    def _rewind(self, sub: Subscription, state: QueueState, offset: int, delay: float) -> None:
        """Pull ``state``'s queue again from ``offset`` after ``delay`` seconds: nothing at or
        after it counts as consumed meanwhile; what was pulled after it is dropped."""
        if state.hold is None or offset < state.hold:
            state.hold = offset
        if state.task is not None:
            state.task.cancel()
        self._buffer.discard(state)
        state.task = asyncio.ensure_future(self._resume(sub, state, offset, delay))

    async def _resume(
        self, sub: Subscription, state: QueueState, offset: int, delay: float
    ) -> None:
        await asyncio.sleep(delay)
        if state.dropped:
            return
        state.start_at(offset)
        await sub.puller.run(state)
