"""Synchronous access to the brokers for Spark's Python workers, over the asyncio client SDK.

Spark calls data source methods from plain threads, and a ``read()`` is a generator Spark pulls
batches from, so each task drives a private event loop (:class:`SyncLoop`) step by step:
connections live inside one task and are never pickled.

- :func:`snapshot`: a topic's route and, per queue, the first retained offset and the end of the
  committed messages (GET_MAX_OFFSET with ``committed``: up to the confirm offset), each group
  asked at its master or, while it has none, at a slave.
- :class:`RangeReader`: the messages of one queue range ``[start, end)``, with a few pulls in
  flight, following failovers, and checking that every offset of the range is delivered (or
  reported lost, see ``failOnDataLoss``).
- :class:`BatchSender`: SEND_BATCH_MESSAGE with a bounded number in flight, counting what was
  acknowledged.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import random
import threading
import time
from collections import deque
from collections.abc import Awaitable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import structlog

from client.bootstrap import Bootstrap
from client.errors import ClientError, TopicNotFoundError, UnreachableError
from client.message import Message
from client.producer import Producer
from client.pull import corrupt_error
from client.routes import MessageQueue, TopicRoute, fetch_route
from pipeline.errors import DataLossError, PipelineError, ReadError, UnknownTopicError
from pipeline.offsets import QueueBounds
from protocol.pull import (
    AnswerError,
    MaxOffsetQuery,
    MinOffsetQuery,
    PullCorrupt,
    PullFound,
    PullNotFound,
    PullOffsetMoved,
    PullRequest,
    decode_offset,
    decode_pull_answer,
)
from protocol.remoting import Frame
from remoting.client import ConnectionPool
from remoting.errors import RemotingError

log = structlog.get_logger(__name__)

T = TypeVar("T")

#: the consumer group named in pull requests (the source commits no consumer offsets)
PULL_GROUP = "rmq-spark-source"
#: how long a pull waits at the broker for a message that is not readable yet
_SUSPEND_MS = 1000


class SyncLoop:
    """An event loop in a daemon thread, driven from synchronous code.

    :meth:`run` blocks until a coroutine finishes on the loop; :meth:`submit` does not. Between
    calls the loop keeps running, so responses to requests already sent (pulls asked for ahead,
    batches in flight) are received while the caller works on the previous chunk.
    """

    def __init__(self) -> None:
        try:
            import uvloop

            self._loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
        except ImportError:  # pragma: no cover - uvloop is a dependency, but stay usable
            self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="rmq-pipeline-loop", daemon=True
        )
        self._thread.start()

    def submit(self, awaitable: Awaitable[T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(_awaited(awaitable), self._loop)

    def run(self, awaitable: Awaitable[T]) -> T:
        return self.submit(awaitable).result()

    def close(self) -> None:
        """Cancel what is still pending, stop the loop and its thread."""
        if self._loop.is_closed():
            return
        if self._thread.is_alive():
            with contextlib.suppress(Exception):
                self.run(_cancel_others())
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
        if not self._thread.is_alive():
            self._loop.close()

    def __enter__(self) -> SyncLoop:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


async def _awaited(awaitable: Awaitable[T]) -> T:
    return await awaitable


async def _cancel_others() -> None:
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def describe(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


async def _route(bootstrap: Bootstrap, controllers: str, topic: str) -> TopicRoute:
    try:
        return await fetch_route(bootstrap, topic)
    except TopicNotFoundError:
        raise UnknownTopicError(f"topic {topic!r} does not exist (asked {controllers})") from None
    except UnreachableError as exc:
        raise PipelineError(f"controllers unreachable: {exc}") from None
    except ClientError as exc:
        raise PipelineError(f"cannot get the route of topic {topic!r}: {exc}") from None


def replica_addresses(route: TopicRoute, broker: str) -> list[str]:
    """Where a group's messages can be read: its master first, then its slaves."""
    out: list[str] = []
    for b in route.brokers:
        if b.broker_name == broker:
            if b.master_address:
                out.append(b.master_address)
            out.extend(b.slaves)
    return out


# -- topic snapshot (driver side) -------------------------------------------------------------


@dataclass(slots=True)
class Snapshot:
    """A topic's route and the bounds of every queue whose group answered."""

    route: TopicRoute
    bounds: dict[MessageQueue, QueueBounds]
    #: broker group -> why its queues are missing from ``bounds``
    missing: dict[str, str] = field(default_factory=dict)


async def _group_bounds(
    pool: ConnectionPool, topic: str, addresses: list[str], queues: int, timeout: float
) -> dict[int, QueueBounds]:
    """Min and committed max offsets of a group's queues from the first replica that answers."""
    failures: list[str] = []
    for address in addresses:
        try:
            conn = await pool.get(address)

            async def one(queue_id: int, conn: Any = conn) -> QueueBounds:
                low = MinOffsetQuery(topic=topic, queue_id=queue_id)
                high = MaxOffsetQuery(topic=topic, queue_id=queue_id, committed=True)
                lo, hi = await asyncio.gather(
                    conn.call(low.code, low.header(), None, timeout),
                    conn.call(high.code, high.header(), None, timeout),
                )
                return QueueBounds(decode_offset(lo), decode_offset(hi))

            found = await asyncio.gather(*(one(q) for q in range(queues)))
            return dict(enumerate(found))
        except (RemotingError, AnswerError) as exc:
            failures.append(f"{address}: {describe(exc)}")
    raise PipelineError("; ".join(failures) or "no replica in the route")


async def snapshot_async(controllers: str, topic: str, timeout: float) -> Snapshot:
    pool = ConnectionPool(timeout)
    try:
        bootstrap = Bootstrap(controllers, pool, timeout)
        route = await _route(bootstrap, controllers, topic)
        names = [b.broker_name for b in route.brokers]
        results = await asyncio.gather(
            *(
                _group_bounds(
                    pool, topic, replica_addresses(route, b.broker_name), b.queues, timeout
                )
                for b in route.brokers
            ),
            return_exceptions=True,
        )
        snap = Snapshot(route, {})
        for name, result in zip(names, results, strict=True):
            if isinstance(result, BaseException):
                if not isinstance(result, PipelineError):
                    raise result
                snap.missing[name] = describe(result)
                continue
            for queue_id, b in result.items():
                snap.bounds[MessageQueue(name, queue_id)] = b
        return snap
    finally:
        pool.close()


def snapshot(controllers: str, topic: str, timeout: float) -> Snapshot:
    """The route and queue bounds of ``topic`` (raises :class:`PipelineError` for an unknown
    topic or unreachable controllers; unreachable groups are listed in ``missing``)."""
    with SyncLoop() as loop:
        return loop.run(snapshot_async(controllers, topic, timeout))


# -- reading one queue range (task side) ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class QueueRange:
    """Everything a read task needs: where to ask, which queue, which offsets (end exclusive)."""

    controllers: str
    topic: str
    broker: str
    queue_id: int
    start: int
    end: int

    @property
    def name(self) -> str:
        return f"{self.topic}@{self.broker}/{self.queue_id} [{self.start}, {self.end})"


@dataclass(frozen=True, slots=True)
class PullSettings:
    batch_size: int = 256
    max_bytes: int = 4 * 1024 * 1024
    fail_on_data_loss: bool = True
    read_timeout: float = 60.0
    request_timeout: float = 5.0
    window: int = 3
    """pulls in flight at once (the next ones are asked for while one is decoded)"""


@dataclass(frozen=True, slots=True)
class Chunk:
    """One pull's records as the broker sent them: ``records`` records from queue offset
    ``first`` (the body may hold more past the range's end; decode only ``records``)."""

    body: bytes
    first: int
    records: int


class _Retry(Exception):
    """The current replica cannot serve the range right now: look again, after a pause."""


class RangeReader:
    """Pulls ``[start, end)`` of one queue; :meth:`next_chunk` returns records in offset order.

    A few pulls are in flight at once, at the offsets the previous ones will end at (the range is
    committed, so every offset in it exists unless retention deleted it). An answer that ends
    short (byte limit, a gap) drops the pulls asked for ahead and continues from where it ended.
    Failures (connection lost, no master, a lagging slave) back off, look up the route again and
    try the group's next replica; only ``read_timeout`` without progress fails the task.
    """

    def __init__(self, qr: QueueRange, settings: PullSettings) -> None:
        self.qr = qr
        self.s = settings
        self.pos = qr.start  # next offset to deliver
        self.lost = 0  # messages skipped as lost (failOnDataLoss false)
        self._batch = max(1, settings.batch_size)
        self._pool = ConnectionPool(settings.request_timeout)
        self._bootstrap = Bootstrap(qr.controllers, self._pool, settings.request_timeout)
        self._route: TopicRoute | None = None
        self._replica = 0
        #: pulls asked for: (offset, count, replica address, answer)
        self._inflight: deque[tuple[int, int, str, asyncio.Task[Frame]]] = deque()
        self._issued = qr.start
        self._deadline = time.monotonic() + settings.read_timeout
        #: the queue end a replica reported below our position (lagging slave, or data lost)
        self._short_at: int | None = None

    async def close(self) -> None:
        self._drop_inflight()
        self._pool.close()

    def _drop_inflight(self) -> None:
        for _, _, _, task in self._inflight:
            if not task.done():
                task.cancel()
            elif not task.cancelled():
                task.exception()  # retrieved: a dropped pull's failure is not an error
        self._inflight.clear()
        self._issued = self.pos

    async def _address(self) -> str:
        if self._route is None:
            self._route = await _route(self._bootstrap, self.qr.controllers, self.qr.topic)
        addresses = replica_addresses(self._route, self.qr.broker)
        if not addresses:
            raise _Retry(f"broker group {self.qr.broker} has no master or slave in the route")
        return addresses[self._replica % len(addresses)]

    async def _issue(self) -> None:
        address = await self._address()
        conn = await self._pool.get(address)
        while len(self._inflight) < self.s.window and self._issued < self.qr.end:
            count = min(self._batch, self.qr.end - self._issued)
            pull = PullRequest(
                group=PULL_GROUP,
                topic=self.qr.topic,
                queue_id=self.qr.queue_id,
                offset=self._issued,
                max_count=count,
                max_bytes=self.s.max_bytes,
                # Only the head pull may wait at the broker: the range is committed, so it is
                # there or the replica is lagging.
                suspend_ms=_SUSPEND_MS if not self._inflight else 0,
            )
            timeout = self.s.request_timeout + _SUSPEND_MS / 1000
            task = asyncio.ensure_future(conn.request(pull.code, pull.header(), None, timeout))
            self._inflight.append((self._issued, count, address, task))
            self._issued += count

    async def next_chunk(self) -> Chunk | None:
        """The next records of the range (at least one), or None once it is all delivered."""
        while self.pos < self.qr.end:
            try:
                chunk = await self._step()
            except (UnknownTopicError, DataLossError):
                raise
            except (_Retry, RemotingError, ClientError, PipelineError) as exc:
                await self._pause(describe(exc))
                continue
            if chunk is not None:
                self._deadline = time.monotonic() + self.s.read_timeout
                self._short_at = None
                return chunk
        return None

    async def _pause(self, reason: str) -> None:
        """Back off after a failure: drop pulls in flight, look up the route again, try the next
        replica; past the read timeout without progress, fail the task."""
        self._drop_inflight()
        if time.monotonic() > self._deadline:
            if self._short_at is not None:
                self._data_lost(
                    self.qr.end,
                    f"the queue ends at {self._short_at}, before offset {self.pos} the query needs",
                )
                return
            raise ReadError(
                f"{self.qr.name}: no progress at offset {self.pos} for "
                f"{self.s.read_timeout:g}s; last failure: {reason}"
            )
        log.debug("pull retry", queue=self.qr.name, offset=self.pos, reason=reason)
        self._route = None
        self._replica += 1
        await asyncio.sleep(0.2)

    def _data_lost(self, until: int, what: str, event: str = "messages lost, skipping") -> None:
        if self.s.fail_on_data_loss:
            raise DataLossError(
                f"{self.qr.name}: {what}; set failOnDataLoss=false to skip lost messages"
            )
        log.warning(event, queue=self.qr.name, start=self.pos, end=until, reason=what)
        self.lost += until - self.pos
        self.pos = self._issued = until

    async def _step(self) -> Chunk | None:
        if not self._inflight:
            await self._issue()
        offset, count, address, task = self._inflight.popleft()
        resp = await task
        try:
            answer = decode_pull_answer(resp)
        except AnswerError as exc:
            raise _Retry(str(exc)) from None
        if isinstance(answer, PullFound):
            nxt = answer.next_offset
            found = min(answer.count, self.qr.end - offset)
            if found < 1 or not answer.body:
                raise _Retry(f"pull at {offset} answered no records")
            after = offset + found
            if nxt == after == offset + count:
                self.pos = nxt
            else:
                # A short answer (byte limit, a gap): the pulls in flight ask for wrong offsets.
                if found < count and after == nxt:
                    self._batch = found
                self._drop_inflight()
                self.pos = self._issued = min(max(nxt, after), self.qr.end)
            await self._issue()
            return Chunk(answer.body, offset, found)
        if isinstance(answer, PullNotFound):
            raise _Retry(f"offset {offset} not readable yet at this replica")
        if isinstance(answer, PullOffsetMoved):
            nxt = answer.next_offset
            self._drop_inflight()
            if nxt > offset:
                # Deleted by retention (or an unreadable entry skipped by the broker).
                self._data_lost(min(nxt, self.qr.end), f"messages [{offset}, {nxt}) are gone")
                return None
            # The replica's queue ends before our offset: a lagging slave catches up (wait);
            # if it never does, the messages are lost (decided in _pause at the deadline).
            self._short_at = nxt
            raise _Retry(f"queue ends at {nxt}, before offset {offset}")
        if isinstance(answer, PullCorrupt):
            # The broker cannot read the record at ``offset`` (CRC, lost bytes) and asking again
            # gets the same answer: data loss, like a record retention deleted.
            error = corrupt_error(
                answer,
                broker_name=self.qr.broker,
                topic=self.qr.topic,
                queue_id=self.qr.queue_id,
                queue_offset=offset,
                address=address,
            )
            self._drop_inflight()
            self._data_lost(offset + 1, str(error), "message unreadable, skipping")
            return None
        remark = resp.header.get("remark")
        raise _Retry(f"pull answered {resp.code}: {remark}")


def read_range(qr: QueueRange, settings: PullSettings) -> Iterator[Chunk]:
    """Every record of ``qr`` in offset order, pull by pull (a synchronous generator)."""
    if qr.start >= qr.end:
        return
    loop = SyncLoop()
    reader = RangeReader(qr, settings)
    try:
        while True:
            chunk = loop.run(reader.next_chunk())
            if chunk is None:
                return
            yield chunk
    finally:
        with contextlib.suppress(Exception):
            loop.run(reader.close())
        loop.close()


# -- producing (write tasks) ------------------------------------------------------------------


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


class BatchSender:
    """Sends message batches through one producer with at most ``max_in_flight`` outstanding.

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
    ) -> None:
        self._loop = SyncLoop()
        self._producer = Producer(
            controllers,
            retries=retries,
            send_deadline=deadline,
            send_timeout=timeout,
            connect_timeout=timeout,
        )
        # Every write task has its own producer: start each at a random queue (as RocketMQ's
        # producers do), or the first batch of every task would land on the same queue.
        self._producer._rr = random.randrange(1 << 16)
        self._max = max_in_flight
        self._inflight: set[concurrent.futures.Future[None]] = set()
        self.tally = SendTally()
        self.failure: BaseException | None = None
        #: messages of batches that failed (not acknowledged)
        self.failed_messages = 0
        self._loop.run(self._producer.start())

    async def _one(self, topic: str, batch: list[Message]) -> None:
        try:
            results = await self._producer.send_batch(topic, batch)
        except Exception as exc:
            self.failed_messages += len(batch)
            if self.failure is None:
                self.failure = exc
            return
        if results:
            first = results[0]
            self.tally.add(
                topic, first.broker_name, first.queue_id, first.queue_offset, len(results)
            )

    def send(self, topic: str, batch: list[Message]) -> None:
        if len(self._inflight) >= self._max:
            _done, self._inflight = concurrent.futures.wait(
                self._inflight, return_when=concurrent.futures.FIRST_COMPLETED
            )
        self._raise_failure()
        self._inflight.add(self._loop.submit(self._one(topic, batch)))

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
            self._loop.run(self._producer.close())
        self._loop.close()
