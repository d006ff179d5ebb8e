"""Reading one queue range (task side): :class:`RangeReader` pulls the messages of ``[start,
end)`` with a few pulls in flight, following failovers, and checks that every offset of the range
is delivered (or reported lost, see ``failOnDataLoss``); :func:`read_range` drives it from a
synchronous generator."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

import structlog

from client.bootstrap import Bootstrap
from client.errors import ClientError
from client.pull import corrupt_error
from client.routes import TopicRoute
from pipeline.errors import DataLossError, PipelineError, ReadError, UnknownTopicError, describe
from pipeline.loop import SyncLoop
from pipeline.replicas import replica_addresses, topic_route
from pipeline.tls import ClientTls, context_of
from protocol.pull import (
    AnswerError,
    PullCorrupt,
    PullFound,
    PullNotFound,
    PullOffsetMoved,
    PullRequest,
    decode_pull_answer,
)
from protocol.remoting import Frame
from protocol.request_auth import Credentials
from remoting.client import ConnectionPool
from remoting.errors import RemotingError

log = structlog.get_logger(__name__)

#: the consumer group named in pull requests (the source commits no consumer offsets)
PULL_GROUP = "rmq-spark-source"
#: how long a pull waits at the broker for a message that is not readable yet
_SUSPEND_MS = 1000


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
    credentials: Credentials | None = None
    """signs every request (options accessKey and secretKey)"""
    tls: ClientTls | None = None
    """every connection over TLS (options tls and caFile)"""


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
        self._pool = ConnectionPool(
            settings.request_timeout, settings.credentials, context_of(settings.tls)
        )
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
            self._route = await topic_route(self._bootstrap, self.qr.controllers, self.qr.topic)
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
        raise _Retry(f"pull answered {resp.code}: {resp.remark}")


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
