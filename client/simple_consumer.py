"""The simple consumer: POP consumption, any number of members per group (docs/pop.md).

::

    async with SimpleConsumer("127.0.0.1:9878", "billing", "orders", filter="TagA || TagB") as consumer:
        for msg in await consumer.receive(16, invisible_duration=30):
            handle(msg.body)
            await consumer.ack(msg)

There is no rebalance: every member asks any broker group of the topic for messages of any of
its queues. The broker hides each message it hands out for ``invisible_duration`` seconds; a
message not acked by then is delivered again (to any member) with :attr:`PopMessage.attempt`
one higher, through the group's retry topic, so the group's ``retryMaxTimes`` and its DLQ
apply. :meth:`SimpleConsumer.change_invisible_duration` extends the time (or shortens it: a
nack with a delay) and gives the message its new receipt handle.

A FIFO consumer group (``consumeMessageOrderly``, docs/fifo.md) is served by the broker one
message per message group at a time (:attr:`PopMessage.message_group`): a group's next message
comes only after the previous one was acked, and a message not acked in time comes back in place
(same queue offset, attempt + 1) instead of through the retry topic.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import ssl
from collections.abc import Sequence

from client import logs
from client.bootstrap import Bootstrap
from client.brokers import MasterCaller
from client.errors import BrokerError, ClientError, ClosedError, NoRouteError
from client.identity import default_client_id, heartbeat
from client.message import ReceivedMessage
from client.routes import RouteCache
from client.trace import ClientTracer, now_ms
from protocol.broker_requests.clients import POP, UnregisterClient
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
from protocol.fields import FieldError
from protocol.filter import Filter, as_filter
from protocol.message import MessageRecord, iter_records
from protocol.remoting import Frame, Header
from protocol.request_auth import Credentials
from remoting.client import ConnectionPool
from remoting.errors import RemotingError

__all__ = ["PopMessage", "SimpleConsumer"]

log = logs.get_logger(__name__)

_MOVED = frozenset(
    {
        ResponseCode.NOT_MASTER,
        ResponseCode.MASTER_FENCED,
        ResponseCode.IN_SYNC_REPLICAS_NOT_ENOUGH,
        ResponseCode.FLUSH_SLAVE_TIMEOUT,
        ResponseCode.SYSTEM_BUSY,
    }
)
"""Answers worth a retry at the group's (next) master."""
_ATTEMPTS = 4


class PopMessage(ReceivedMessage):
    """A message handed out by POP: its receipt handle (opaque) and delivery attempt (1 the
    first time)."""

    __slots__ = ("attempt", "receipt_handle")

    def __init__(
        self, record: MessageRecord, broker_name: str, receipt_handle: str, attempt: int
    ) -> None:
        super().__init__(record, broker_name)
        self.receipt_handle = receipt_handle
        self.attempt = attempt


def decode_pop_answer(frame: Frame, broker_name: str) -> list[PopMessage]:
    """The messages of a POP answer (SUCCESS); raises :class:`ClientError` when the handles
    do not match the records."""
    try:
        found = PopFound.parse(frame.header, frame.body)
    except FieldError as exc:
        raise ClientError(f"POP answer lacks receiptHandles / attempts: {exc}") from None
    handles, attempts = found.receipt_handles, found.attempts
    records = list(iter_records(found.body))
    if not len(records) == len(handles) == len(attempts):
        raise ClientError(
            f"POP answer holds {len(records)} records, {len(handles)} handles, "
            f"{len(attempts)} attempts"
        )
    return [
        PopMessage(r, broker_name, hd, a)
        for r, hd, a in zip(records, handles, attempts, strict=True)
    ]


class SimpleConsumer:
    """A POP consumer of one topic for one consumer group."""

    def __init__(
        self,
        bootstrap: str | Sequence[str],
        group: str,
        topic: str,
        filter: str | Filter = "*",
        *,
        connect_timeout: float = 3.0,
        request_timeout: float = 5.0,
        route_refresh_interval: float = 30.0,
        credentials: Credentials | None = None,
        tls: ssl.SSLContext | None = None,
        trace: bool = False,
        client_id: str | None = None,
        heartbeat_interval: float = 3.0,
    ) -> None:
        """``trace=True`` (RocketMQ's enableMsgTrace): each message received, and its ack or
        change of invisible time (failed), goes to the trace topic (docs/traces.md).

        While started, the consumer heart-beats its group to every broker group of the topic
        each ``heartbeat_interval`` (as RocketMQ's POP consumers do), so the brokers list it as
        a live member (rmqctl consumerConnection, resendMessage, an offset reset's notice), and
        leaves the group when closed."""
        self.group = group
        self.topic = topic
        self.client_id = client_id or default_client_id()
        self._heartbeat_interval = heartbeat_interval
        self._heartbeats: asyncio.Task[None] | None = None
        self._tracer = (
            ClientTracer(bootstrap, producer_options={"credentials": credentials, "tls": tls})
            if trace
            else None
        )
        self._tracing: dict[str, tuple[str, int]] = {}
        """trace: receipt handle -> (request id, when received) until acked or changed."""
        flt = as_filter(filter)  # raises FilterError for a bad expression, before any I/O
        self.filter = flt.expression
        self.filter_type = flt.type
        self._pool = ConnectionPool(connect_timeout, credentials, tls)
        self._bootstrap = Bootstrap(bootstrap, self._pool, connect_timeout)
        self.routes = RouteCache(self._bootstrap, refresh_interval=route_refresh_interval)
        self._caller = MasterCaller(self._pool, self.routes, topic)
        self._timeout = request_timeout
        self._rotate = itertools.count()
        self._closed = False

    async def start(self) -> None:
        if self._closed:
            raise ClosedError("consumer is closed")
        self.routes.start()
        await self.routes.get(self.topic)
        if self._heartbeats is None:
            self._heartbeats = asyncio.create_task(self._heartbeat_loop(), name="pop-heartbeat")

    async def _heartbeat_loop(self) -> None:
        beat = heartbeat(self.group, self.client_id, topic=self.topic, consume_type=POP)
        while True:
            await self._to_every_group(RequestCode.HEART_BEAT, beat)
            await asyncio.sleep(self._heartbeat_interval)

    async def _to_every_group(self, code: int, header: Header) -> None:
        """One request to every broker group of the topic (its master, or a slave while it
        has none); failures are passed over: the next heartbeat tries again."""
        route = self.routes.peek(self.topic)
        if route is None:
            return

        async def one(address: str) -> None:
            conn = await self._pool.get(address)
            await conn.request(code, header, None, self._timeout)

        results = await asyncio.gather(
            *(one(a) for a in route.read_addresses().values()), return_exceptions=True
        )
        for result in results:
            if isinstance(result, (ClientError, RemotingError)):
                log.debug("POP consumer heartbeat failed", group=self.group, error=str(result))
            elif isinstance(result, BaseException):
                raise result

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._heartbeats is not None:
            self._heartbeats.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._heartbeats
            leave, _ = UnregisterClient(group=self.group, client_id=self.client_id).encode()
            with contextlib.suppress(ClientError, RemotingError, TimeoutError):
                async with asyncio.timeout(self._timeout):
                    await self._to_every_group(RequestCode.UNREGISTER_CLIENT, leave)
        if self._tracer is not None:
            await self._tracer.close()
        await self.routes.close()
        self._pool.close()

    async def __aenter__(self) -> SimpleConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- receive ---------------------------------------------------------------------------------
    async def receive(
        self, max_messages: int = 16, invisible_duration: float = 30.0, wait: float = 5.0
    ) -> list[PopMessage]:
        """Up to ``max_messages`` messages, hidden from the group for ``invisible_duration``
        seconds; waits up to ``wait`` seconds for the first (an empty list then). Raises
        ValueError for ``max_messages`` below 1."""
        if max_messages < 1:
            raise ValueError(f"max_messages must be at least 1, not {max_messages}")
        got = await self._receive(max_messages, invisible_duration, wait)
        if self._tracer is not None:
            now = now_ms()
            for m in got:
                request_id = self._tracer.consuming(self.group, m.record, m.attempt, now)
                self._tracing[m.receipt_handle] = (request_id, now)
        return got

    def _traced(self, msg: PopMessage, handle: str, *, success: bool) -> None:
        if self._tracer is None:
            return
        held = self._tracing.pop(handle, None)
        if held is not None:
            self._tracer.consumed(
                self.group, msg.record, held[0], held[1], now_ms(), success=success
            )

    async def _receive(
        self, max_messages: int, invisible_duration: float, wait: float
    ) -> list[PopMessage]:
        if self._closed:
            raise ClosedError("consumer is closed")
        route = await self.routes.get(self.topic)
        names = [b.broker_name for b in route.brokers if b.queues]
        if not names:
            raise NoRouteError(f"topic {self.topic} has no queues")
        start = next(self._rotate)
        order = [names[(start + i) % len(names)] for i in range(len(names))]
        invisible_ms = int(invisible_duration * 1000)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        while True:
            # One pass without waiting over every group, then a long poll at the first one.
            for name in order:
                got = await self.pop_from(name, max_messages, invisible_ms, 0)
                if got:
                    return got
            remaining = deadline - loop.time()
            if remaining <= 0:
                return []
            got = await self.pop_from(order[0], max_messages, invisible_ms, int(remaining * 1000))
            if got:
                return got
            if deadline - loop.time() <= 0:
                return []

    async def pop_from(
        self, broker_name: str, max_messages: int, invisible_ms: int, poll_ms: int
    ) -> list[PopMessage]:
        """One POP of any queue of broker group ``broker_name``, long-polling up to
        ``poll_ms``; an empty list when nothing came (or the group had no master to answer)."""
        pop = PopRequest(
            group=self.group,
            topic=self.topic,
            queue_id=-1,
            max_count=max_messages,
            invisible_ms=invisible_ms,
            poll_ms=poll_ms,
            expression=self.filter,
            expression_type=self.filter_type,
        )
        header, _ = pop.encode()
        resp = await self._request(broker_name, pop.code, header, poll_ms / 1000)
        if resp is None or resp.code == ResponseCode.PULL_NOT_FOUND:
            return []
        if resp.code != ResponseCode.SUCCESS:
            raise BrokerError.of(resp, self._caller.address(broker_name))
        return decode_pop_answer(resp, broker_name)

    async def _request(
        self, broker_name: str, code: int, header: Header, extra_timeout: float = 0.0
    ) -> Frame | None:
        """The answer of the group's master, retried at a new master after a failover; None
        when no master answered (a POP then simply found nothing)."""
        last: Exception | None = None
        for attempt in range(_ATTEMPTS):
            try:
                resp = await self._caller.request(
                    broker_name, code, header, timeout=self._timeout + extra_timeout
                )
            except (RemotingError, NoRouteError, OSError) as exc:
                last = exc
            else:
                if resp.code not in _MOVED:
                    return resp
                last = BrokerError.of(resp, self._caller.address(broker_name))
            if attempt + 1 < _ATTEMPTS:
                await asyncio.sleep(0.2 * (attempt + 1))
                try:
                    await self.routes.refresh(self.topic, force=True)
                except ClientError as exc:
                    last = exc
        if code == RequestCode.POP_MESSAGE:
            log.warning("POP found no master to answer", broker_name=broker_name, error=str(last))
            return None
        if isinstance(last, BrokerError):
            raise last
        raise ClientError(f"broker group {broker_name} did not answer: {last}")

    # -- ack / change ------------------------------------------------------------------------------
    async def ack(self, msg: PopMessage) -> None:
        """Ack ``msg``: it is not delivered again. Raises :class:`BrokerError` with
        RECEIPT_HANDLE_EXPIRED when its invisible time passed (it will be delivered again)."""
        ack = AckRequest(group=self.group, receipt_handle=msg.receipt_handle)
        resp = await self._request(msg.broker_name, ack.code, ack.encode()[0])
        assert resp is not None
        if resp.code != ResponseCode.SUCCESS:
            raise BrokerError.of(resp, self._caller.address(msg.broker_name))
        self._traced(msg, msg.receipt_handle, success=True)

    async def ack_many(self, msgs: list[PopMessage]) -> list[BrokerError | None]:
        """Ack several messages, one request (and one record) per broker group; returns per
        message None (acked) or the error that refused it, in order."""
        out: list[BrokerError | None] = [None] * len(msgs)
        by_broker: dict[str, list[int]] = {}
        for i, msg in enumerate(msgs):
            by_broker.setdefault(msg.broker_name, []).append(i)

        async def one(broker_name: str, idx: list[int]) -> None:
            for first in range(0, len(idx), 1024):
                part = idx[first : first + 1024]
                batch = BatchAckRequest(
                    group=self.group, receipt_handles=tuple(msgs[i].receipt_handle for i in part)
                )
                resp = await self._request(broker_name, batch.code, batch.encode()[0])
                assert resp is not None
                address = self._caller.address(broker_name)
                if resp.code != ResponseCode.SUCCESS:
                    raise BrokerError.of(resp, address)
                try:
                    answer = BatchAckAnswer.parse(resp.header, resp.body)
                except FieldError as exc:
                    raise ClientError(f"batch ack answer: {exc}") from None
                results = answer.results
                if len(results) != len(part):
                    raise ClientError(f"batch ack answered {len(results)} results for {len(part)}")
                for i, code in zip(part, results, strict=True):
                    if code != ResponseCode.SUCCESS:
                        out[i] = BrokerError(code, answer.remark, address)

        await asyncio.gather(*(one(b, idx) for b, idx in by_broker.items()))
        for msg, refused in zip(msgs, out, strict=True):
            if refused is None:
                self._traced(msg, msg.receipt_handle, success=True)
        return out

    async def change_invisible_duration(self, msg: PopMessage, seconds: float) -> None:
        """Hide ``msg`` for ``seconds`` from now (extend while working on it, or nack with a
        delay); ``msg`` takes the new receipt handle the broker answers with."""
        change = ChangeInvisibleRequest(
            group=self.group, receipt_handle=msg.receipt_handle, invisible_ms=int(seconds * 1000)
        )
        resp = await self._request(msg.broker_name, change.code, change.encode()[0])
        assert resp is not None
        if resp.code != ResponseCode.SUCCESS:
            raise BrokerError.of(resp, self._caller.address(msg.broker_name))
        self._traced(msg, msg.receipt_handle, success=False)
        try:
            changed = InvisibleChanged.parse(resp.header, resp.body)
        except FieldError:
            raise ClientError(
                "change of invisible time answered without a receipt handle"
            ) from None
        msg.receipt_handle = changed.receipt_handle
