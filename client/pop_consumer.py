"""The POP mode of :class:`client.consumer.Consumer` (``Consumer(..., pop=True)``, docs/pop.md).

No rebalance and no queue ownership: every member long-polls every broker group of the topic
with POP requests for any of its queues (two tasks per broker group), so any number of members
share all queues. The application API is the queue-bound consumer's: :meth:`receive`,
iteration, :meth:`process` and :meth:`nack`.

* **Ack.** A message counts as consumed (and is acked, one BATCH_ACK_MESSAGE per broker group,
  in the background) when the application asks for more after it was handed out, or closes
  the consumer normally: the queue-bound consumer's rule for committing offsets.
* **Nack** (or a handler that raises in :meth:`process`): the message is not acked; its
  invisible time is changed to the nack delay, after which the broker re-publishes it to the
  group's retry topic with its reconsume count + 1 (the group's ``retryMaxTimes``, then its DLQ)
  and some member receives it with ``attempt`` one higher. For a FIFO group
  (``consumeMessageOrderly``) it comes back in place instead, at the same queue offset, and
  holds its message group until it is acked (docs/fifo.md).
* **In flight.** At most ``max_in_flight`` messages per member are popped and not yet acked or
  nacked (buffered, in the application's hands, or asked for by a POP under way): the fetch
  tasks stop asking while the member is full.
* **Close.** Messages popped but not handed to the application, and (with
  ``commit_delivered=False``) the last one handed out, are not acked: they come back to the
  group after their invisible time.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections import deque
from collections.abc import Awaitable, Callable

from client import logs
from client.errors import BrokerError, ClientError, ClosedError, report_nack_outcomes
from client.handout import Handout
from client.message import ReceivedMessage
from client.simple_consumer import PopMessage, SimpleConsumer
from protocol.codes import ResponseCode
from protocol.retry import SubscriptionGroupConfig, backoff_ms
from remoting.errors import RemotingError

__all__ = ["PopDelivery"]

log = logs.get_logger(__name__)

Handler = Callable[[ReceivedMessage], Awaitable[object] | object]

MIN_NACK_DELAY = 1.0
"""The shortest invisible time a broker accepts (seconds)."""
FETCHES_PER_BROKER = 2
"""POP requests a member keeps under way per broker group: one's replicated round trip
overlaps the other's (the in-flight bound still caps what they ask for)."""
_ERROR_BACKOFF = (0.2, 2.0)
"""A fetch task's first and longest pause after a failed POP (seconds)."""


class PopDelivery:
    """POP consumption of one topic for one consumer-group member. See the module docstring."""

    def __init__(
        self,
        simple: SimpleConsumer,
        *,
        invisible_duration: float,
        max_in_flight: int,
        batch_size: int,
        poll_ms: int,
        nack_delay: float | None,
        route_check_interval: float,
    ) -> None:
        if max_in_flight < 1:
            raise ValueError("max_in_flight must be >= 1")
        if invisible_duration < MIN_NACK_DELAY:
            raise ValueError(f"invisible_duration must be >= {MIN_NACK_DELAY} s")
        self.simple = simple
        self.invisible_duration = invisible_duration
        self.max_in_flight = max_in_flight
        self.batch_size = max(1, batch_size)
        self.poll_ms = max(0, poll_ms)
        self.nack_delay = nack_delay
        self.route_check_interval = route_check_interval
        self._config = SubscriptionGroupConfig(simple.group)
        self._fetchers: dict[tuple[str, int], asyncio.Task[None]] = {}
        self._route_task: asyncio.Task[None] | None = None
        self._acks: set[asyncio.Task[None]] = set()
        self._ready: deque[PopMessage] = deque()
        self._data = asyncio.Event()
        self._space = asyncio.Event()
        self._space.set()
        self.in_flight = 0
        """Messages popped (or asked for) and not acked, nacked or dropped yet."""
        self._reserved = 0
        # What the application was last given (as in the queue-bound consumer), how many of
        # those messages are settled (acked or dropped), and those never to ack (nacked, or
        # abandoned in process).
        self._out: Handout[PopMessage] = Handout()
        self._settled = 0
        self._skip: set[PopMessage] = set()
        self._started = False
        self._closed = False
        self.acked = 0
        self.nacked = 0

    @property
    def buffered(self) -> int:
        """Messages popped and not handed to the application yet."""
        return len(self._ready)

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        if self._closed:
            raise ClosedError("consumer is closed")
        if self._started:
            return
        await self.simple.start()
        self._started = True
        self._sync_fetchers()
        self._route_task = asyncio.ensure_future(self._route_loop())

    async def close(self, *, commit_delivered: bool = True) -> None:
        if self._closed:
            return
        self._closed = True
        self._data.set()
        self._space.set()
        tasks = [*self._fetchers.values()]
        if self._route_task is not None:
            tasks.append(self._route_task)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._fetchers.clear()
        if self._started:
            self._settle(self._out.handed if commit_delivered else self._out.confirmed)
            if self._acks:
                await asyncio.gather(*self._acks, return_exceptions=True)
        # Popped, never handed out (or handed and not confirmed): back after the invisible time.
        self._ready.clear()
        await self.simple.close()

    # -- application API ---------------------------------------------------------------------
    async def receive(self, timeout: float | None, max_messages: int) -> list[PopMessage]:
        if not self._started:
            raise ClosedError("consumer is not started")
        out = self._out
        self._settle(out.confirm())
        rest = out.rest(max_messages)
        if rest is not None:
            return rest
        out.clear()
        self._settled = 0
        self._skip.clear()
        if self._closed:
            return []
        if not self._ready:
            self._data.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._data.wait()
        if self._closed or not self._ready:
            return []
        ready = self._ready
        return out.deliver([ready.popleft() for _ in range(min(max_messages, len(ready)))])

    async def next(self, poll: float) -> PopMessage | None:
        """The next message for iteration; None once closed."""
        msg = self._out.next()
        if msg is not None:
            return msg
        while not self._closed:
            msgs = await self.receive(poll, 1 << 30)
            if msgs:
                return self._out.first(msgs)
        return None

    async def nack(self, msg: ReceivedMessage, reason: str = "") -> None:
        """Leave ``msg`` unacked and bring it back after the nack delay (see the module
        docstring). A nack the broker refuses as expired is only logged: the message comes
        back anyway; other failures raise :class:`ClientError` (the message comes back after
        its invisible time)."""
        if not self._started:
            raise ClosedError("consumer is not started")
        if not isinstance(msg, PopMessage):
            raise ClientError("a consumer in POP mode nacks only the messages it received")
        self._skip.add(msg)
        delay = self.nack_delay
        if delay is None:
            delay = backoff_ms(self._config, msg.attempt - 1) / 1000
        try:
            await self.simple.change_invisible_duration(msg, max(MIN_NACK_DELAY, delay))
        except BrokerError as exc:
            if exc.code != ResponseCode.RECEIPT_HANDLE_EXPIRED:
                raise ClientError(f"nack of {msg.msg_id} failed: {exc}") from exc
            log.warning("nack of an expired message", msg_id=msg.msg_id, error=str(exc))
        except RemotingError as exc:
            raise ClientError(f"nack of {msg.msg_id} failed: {exc}") from exc
        else:
            self.nacked += 1
            log.debug("nacked", msg_id=msg.msg_id, reason=reason, attempt=msg.attempt)

    async def process(self, handler: Handler, poll: float) -> None:
        while not self._closed:
            msgs = await self.receive(poll, 1 << 30)
            failed: list[tuple[PopMessage, str]] = []
            for i, msg in enumerate(msgs):
                try:
                    result = handler(msg)
                    if inspect.isawaitable(result):
                        await result
                except asyncio.CancelledError:
                    # Neither this message nor the rest of the batch was handled.
                    self._skip.update(msgs[i:])
                    self._skip.update(m for m, _ in failed)
                    raise
                except Exception as exc:
                    failed.append((msg, f"{type(exc).__name__}: {exc}"))
            if failed:
                outcomes = await asyncio.gather(
                    *(self.nack(m, reason) for m, reason in failed), return_exceptions=True
                )
                report_nack_outcomes(log, (msg.msg_id for msg, _ in failed), outcomes)

    # -- internals: acks -----------------------------------------------------------------------
    def _settle(self, count: int) -> None:
        """The first ``count`` delivered messages are done: ack those not nacked (in the
        background, one batch ack per broker group)."""
        done = self._out.delivered[self._settled : count]
        if not done:
            return
        self._settled = count
        to_ack = [m for m in done if m not in self._skip]
        self._release(len(done) - len(to_ack))
        if to_ack:
            task = asyncio.ensure_future(self._ack(to_ack))
            self._acks.add(task)
            task.add_done_callback(self._acks.discard)

    async def _ack(self, msgs: list[PopMessage]) -> None:
        try:
            results = await self.simple.ack_many(msgs)
        except (ClientError, RemotingError) as exc:
            log.warning("ack failed: the messages come back", count=len(msgs), error=str(exc))
        else:
            refused = [e for e in results if e is not None]
            self.acked += len(msgs) - len(refused)
            if refused:
                log.warning(
                    "acks refused: the messages come back",
                    count=len(refused),
                    error=str(refused[0]),
                )
        finally:
            self._release(len(msgs))

    def _release(self, count: int) -> None:
        if count:
            self.in_flight -= count
            self._space.set()

    # -- internals: fetching ----------------------------------------------------------------------
    async def _route_loop(self) -> None:
        while True:
            await asyncio.sleep(self.route_check_interval)
            self._sync_fetchers()

    def _sync_fetchers(self) -> None:
        """:data:`FETCHES_PER_BROKER` fetch tasks per broker group of the topic that has
        queues."""
        route = self.simple.routes.peek(self.simple.topic)
        if route is None or self._closed:
            return
        wanted = {
            (b.broker_name, i) for b in route.brokers if b.queues for i in range(FETCHES_PER_BROKER)
        }
        for gone in [k for k in self._fetchers if k not in wanted]:
            self._fetchers.pop(gone).cancel()
        for key in sorted(wanted - self._fetchers.keys()):
            self._fetchers[key] = asyncio.ensure_future(self._fetch(key[0]))

    async def _reserve(self) -> int:
        """Wait for room in flight; reserve and return how many messages to ask for."""
        while True:
            room = self.max_in_flight - self.in_flight
            if room > 0:
                want = min(room, self.batch_size)
                self.in_flight += want
                return want
            self._space.clear()
            await self._space.wait()
            if self._closed:
                raise asyncio.CancelledError

    async def _fetch(self, broker_name: str) -> None:
        pause = _ERROR_BACKOFF[0]
        invisible_ms = int(self.invisible_duration * 1000)
        while not self._closed:
            want = await self._reserve()
            got: list[PopMessage] = []
            try:
                got = await self.simple.pop_from(broker_name, want, invisible_ms, self.poll_ms)
            except (ClientError, RemotingError) as exc:
                log.warning("POP failed", broker_name=broker_name, error=str(exc))
                await asyncio.sleep(pause)
                pause = min(pause * 2, _ERROR_BACKOFF[1])
                continue
            finally:
                self._release(want - len(got))
            pause = _ERROR_BACKOFF[0]
            if got:
                self._ready.extend(got)
                self._data.set()
