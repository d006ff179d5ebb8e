"""Producing from a write task: :class:`QueueSender` sends ready-made SEND_BATCH_MESSAGE bodies to
a queue it is told (rows with a message group: the queue their hash picks) or to the next
writable queue (rows without), a bounded number in flight, retrying through failovers.

One batch of a queue is in flight at a time for a chosen queue, and a failed batch is retried on
that same queue (after the group elects a new master), so the messages of one message group keep
their order; batches without a group go to any queue and move to another group when theirs fails.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import random
import time
import zlib
from dataclasses import dataclass, field
from typing import Any

from client.bootstrap import Bootstrap
from client.errors import ClientError
from client.producer import RETRIABLE_CODES
from client.routes import MessageQueue, TopicRoute
from pipeline.errors import PipelineError, UnknownTopicError, WriteError, describe
from pipeline.loop import SyncLoop
from pipeline.replicas import topic_route
from pipeline.tls import ClientTls, context_of
from protocol.broker_requests.send import PackedBatch, SendBatchAnswer
from protocol.codes import ResponseCode
from protocol.fields import FieldError
from protocol.request_auth import Credentials
from remoting.client import ConnectionPool
from remoting.errors import RemotingError


def queue_for(group: bytes, queues: list[MessageQueue]) -> MessageQueue:
    """The queue of a message group: CRC-32 of its UTF-8 bytes modulo the number of the
    topic's queues, taken in (broker group, queue id) order. Stable while the topic keeps its
    queues."""
    return queues[zlib.crc32(group) % len(queues)]


def all_queues(route: TopicRoute) -> list[MessageQueue]:
    """Every queue of the route, writable or not (a group between masters keeps its queues); a
    static topic's: its logical queues' newest items in logical order, as the SDK producer
    hashes message groups (a group keeps its logical queue when that queue moves, and no group
    goes to a sealed item)."""
    if route.logical_queues:
        return list(route.logical_queues)
    return sorted(MessageQueue(b.broker_name, q) for b in route.brokers for q in range(b.queues))


@dataclass(slots=True)
class SendTally:
    """What a write task got acknowledged: counts and the offset span of every queue written."""

    acknowledged: int = 0
    #: (topic, broker, queue id) -> [first offset, last offset]
    spans: dict[tuple[str, str, int], list[int]] = field(default_factory=dict)

    def add(self, topic: str, broker: str, queue_id: int, first: int, count: int) -> None:
        self.acknowledged += count
        key = (topic, broker, queue_id)
        last = first + count - 1
        span = self.spans.get(key)
        if span is None:
            self.spans[key] = [first, last]
        else:
            span[0] = min(span[0], first)
            span[1] = max(span[1], last)

    def describe(self) -> str:
        if not self.spans:
            return "none"
        return ", ".join(
            f"{t}@{b}/{q} [{lo}..{hi}]" for (t, b, q), (lo, hi) in sorted(self.spans.items())
        )


class _Retry(Exception):
    """This attempt failed in a way a later one may not."""


class QueueSender:
    """Sends batch bodies with at most ``max_in_flight`` outstanding.

    The first failure stops the sender: :meth:`send` and :meth:`finish` raise it, after every
    batch still in flight has settled, so :attr:`tally` counts every acknowledged message.
    """

    def __init__(
        self,
        controllers: str,
        *,
        max_in_flight: int,
        retries: int | None,
        deadline: float,
        timeout: float,
        credentials: Credentials | None = None,
        tls: ClientTls | None = None,
    ) -> None:
        self._controllers = controllers
        self._loop = SyncLoop()
        self._pool = ConnectionPool(timeout, credentials, context_of(tls))
        self._bootstrap = Bootstrap(controllers, self._pool, timeout)
        self._timeout = timeout
        self._deadline = deadline
        self._retries = retries
        self._max = max_in_flight
        self._routes: dict[str, TopicRoute] = {}
        self._locks: dict[tuple[str, MessageQueue], asyncio.Lock] = {}
        # Every write task starts at a random queue (as RocketMQ's producers do), or the first
        # batch of every task would land on the same queue.
        self._rr = random.randrange(1 << 16)
        self._inflight: set[concurrent.futures.Future[None]] = set()
        self.tally = SendTally()
        self.failure: BaseException | None = None
        #: messages of batches that failed (not acknowledged)
        self.failed_messages = 0

    # -- the task's thread ----------------------------------------------------------------------

    def queues(self, topic: str) -> list[MessageQueue]:
        """Every queue of ``topic`` (for picking a message group's queue)."""
        return all_queues(self._loop.run(self._route(topic, fresh=False)))

    def send(self, topic: str, queue: MessageQueue | None, body: bytes, count: int) -> None:
        """Send one batch body of ``count`` messages to ``queue`` (None: any writable one)."""
        if len(self._inflight) >= self._max:
            _done, self._inflight = concurrent.futures.wait(
                self._inflight, return_when=concurrent.futures.FIRST_COMPLETED
            )
        self._raise_failure()
        self._inflight.add(self._loop.submit(self._one(topic, queue, body, count)))

    def settle(self) -> None:
        """Wait until every batch in flight is answered (or failed)."""
        concurrent.futures.wait(self._inflight)
        self._inflight.clear()

    def finish(self) -> None:
        """Wait for every batch in flight; raise the first failure, if any."""
        self.settle()
        self._raise_failure()

    def _raise_failure(self) -> None:
        if self.failure is not None:
            self.settle()
            raise self.failure

    def close(self) -> None:
        self.settle()
        with contextlib.suppress(Exception):
            self._loop.run(self._close())
        self._loop.close()

    # -- the loop's thread ----------------------------------------------------------------------

    async def _close(self) -> None:
        self._pool.close()

    async def _route(self, topic: str, *, fresh: bool) -> TopicRoute:
        route = None if fresh else self._routes.get(topic)
        if route is None:
            route = self._routes[topic] = await topic_route(
                self._bootstrap, self._controllers, topic
            )
        return route

    async def _one(self, topic: str, queue: MessageQueue | None, body: bytes, count: int) -> None:
        try:
            if queue is None:
                broker, queue_id, first = await self._deliver(topic, None, body)
            else:
                # One batch per chosen queue at a time, in the order sent: a group's order.
                lock = self._locks.setdefault((topic, queue), asyncio.Lock())
                async with lock:
                    broker, queue_id, first = await self._deliver(topic, queue, body)
        except Exception as exc:
            self.failed_messages += count
            if self.failure is None:
                self.failure = exc
            return
        self.tally.add(topic, broker, queue_id, first, count)

    def _pick(self, route: TopicRoute, avoid: set[str]) -> tuple[MessageQueue, str]:
        writable = [w for w in route.writable if w[0].broker_name not in avoid] or list(
            route.writable
        )
        if not writable:
            raise _Retry(f"no broker group of topic {route.topic!r} has a master")
        self._rr += 1
        return writable[self._rr % len(writable)]

    async def _deliver(
        self, topic: str, queue: MessageQueue | None, body: bytes
    ) -> tuple[str, int, int]:
        """Send until acknowledged; returns (broker, queue id, first queue offset)."""
        deadline = time.monotonic() + self._deadline
        avoid: set[str] = set()
        attempt = 0
        last = ""
        while True:
            attempt += 1
            target: MessageQueue | None = queue
            try:
                route = await self._route(topic, fresh=attempt > 1)
                if queue is None:
                    target, address = self._pick(route, avoid)
                else:
                    master = route.master_address(queue.broker_name)
                    if master is None:
                        raise _Retry(f"broker group {queue.broker_name} has no master")
                    address = master
                assert target is not None
                conn = await self._pool.get(address)
                timeout = max(min(self._timeout, deadline - time.monotonic()), 0.001)
                batch = PackedBatch(topic, body)
                resp = await conn.request(batch.code, *batch.to_queue(target.queue_id), timeout)
                if resp.code == ResponseCode.SUCCESS:
                    try:
                        sent = SendBatchAnswer.parse(resp.header, resp.body)
                    except FieldError as exc:  # stored, unreadably answered: never sent again
                        raise WriteError(f"malformed batch answer from {address}: {exc}") from None
                    return target.broker_name, sent.queue_id, sent.queue_offset
                what = f"{address} answered {ResponseCode(resp.code).name}: {resp.remark}"
                if resp.code == ResponseCode.TOPIC_NOT_EXIST:
                    raise UnknownTopicError(f"topic {topic!r} does not exist ({what})")
                if resp.code not in RETRIABLE_CODES:
                    raise WriteError(f"batch refused: {what}")
                raise _Retry(what)
            except (UnknownTopicError, WriteError):
                raise
            except (_Retry, RemotingError, ClientError, PipelineError, ValueError) as exc:
                last = describe(exc)
            if target is not None:
                avoid.add(target.broker_name)
            remaining = deadline - time.monotonic()
            if remaining <= 0 or (self._retries is not None and attempt > self._retries):
                where = f" to {queue.broker_name}/{queue.queue_id}" if queue else ""
                raise WriteError(
                    f"batch{where} of topic {topic!r} not acknowledged after {attempt} "
                    f"attempts: {last}"
                )
            await asyncio.sleep(min(0.05 * 2 ** (attempt - 1), 1.0, remaining))


def encode_items(items: list[dict[str, Any]]) -> bytes:
    """A SEND_BATCH_MESSAGE body: the msgpack array of message maps."""
    import msgpack

    body: bytes = msgpack.packb(items, use_bin_type=True)
    return body
