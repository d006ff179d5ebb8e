"""Messages by store time: a topic's messages stored in a time range, on every broker group and
queue of it (what ``rmqctl queryMsgByTime`` and ``printMsg`` use).

::

    async with RangeReader("127.0.0.1:9878") as reader:
        found = await reader.by_time("orders", begin_ms, end_ms, max_num=2000)
        queues = await reader.queues_by_time("orders", begin_ms, end_ms, queue_id=3)

Each queue is asked with QUERY_MESSAGE_BY_TIME (:mod:`protocol.broker_requests.query`): the
broker finds the queue offsets by store time, as SEARCH_OFFSET_BY_TIMESTAMP does, and reads the
range page by page (``fromOffset``). A broker group is read at its master, else at a slave;
brokers answer committed messages only. A static topic is read on the physical queues of every
broker group its route lists, so every mapping item the route names is covered; the messages
show their physical queue and offset.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from client.bootstrap import describe_failure
from client.errors import BrokerError, ClientError
from client.lookup import FoundMessage, Lookup
from client.routes import BrokerRoute, fetch_route
from protocol.broker_requests.query import (
    END_OF_TIME,
    MAX_NUM,
    MessagesInRange,
    QueryMessageByTime,
)
from protocol.codes import ResponseCode
from protocol.fields import FieldError
from protocol.message import RecordError, iter_records
from remoting.errors import RemotingError, ResponseError

__all__ = ["QueueMessages", "RangeReader"]

_PAGE: Final = 256
"""Messages asked for at once (the broker's byte limit may cut a page shorter)."""


@dataclass(slots=True)
class QueueMessages:
    """One queue's messages in the range, oldest first (``truncated``: more were there past
    the limit), or why they could not be read (``error``)."""

    broker_name: str
    queue_id: int
    messages: list[FoundMessage] = field(default_factory=list)
    truncated: bool = False
    error: str | None = None


class RangeReader(Lookup):
    """Messages by store time through the bootstrap addresses (controllers, or a lone broker)."""

    async def queues_by_time(
        self,
        topic: str,
        begin_ms: int = 0,
        end_ms: int = END_OF_TIME,
        *,
        broker_name: str | None = None,
        queue_id: int | None = None,
        limit: int | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> list[QueueMessages]:
        """Every queue of ``topic`` (only ``broker_name``'s, only ``queue_id``, when given):
        the messages stored in ``[begin_ms, end_ms]``, at most ``limit`` per queue (None: all);
        sorted by broker name and queue id. ``progress`` is called with the number of messages
        read so far. Raises :class:`ClientError` for an unknown topic, a bad range, or a broker
        group or queue the topic does not have."""
        if begin_ms < 0 or begin_ms > end_ms:
            raise ClientError(f"the range begins ({begin_ms}) after it ends ({end_ms})")
        route = await fetch_route(self.bootstrap, topic)
        groups = list(route.brokers)
        if broker_name is not None:
            groups = [b for b in groups if b.broker_name == broker_name]
            if not groups:
                names = ", ".join(b.broker_name for b in route.brokers) or "none"
                raise ClientError(
                    f"topic {topic!r} has no queues on broker group {broker_name!r} (it has: "
                    f"{names})"
                )
        wanted = [(b, q) for b in groups for q in range(b.queues) if queue_id in (None, q)]
        if not wanted:
            most = max((b.queues for b in groups), default=0)
            raise ClientError(f"queue {queue_id} out of range: {topic!r} has {most} queues")
        read = 0

        def advance(n: int) -> None:
            nonlocal read
            read += n
            if progress is not None:
                progress(read)

        answers = await asyncio.gather(
            *(self._queue(topic, b, q, begin_ms, end_ms, limit, advance) for b, q in wanted)
        )
        return sorted(answers, key=lambda a: (a.broker_name, a.queue_id))

    async def by_time(
        self,
        topic: str,
        begin_ms: int = 0,
        end_ms: int = END_OF_TIME,
        *,
        max_num: int = 2000,
        errors: list[str] | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> tuple[list[FoundMessage], bool]:
        """The first ``max_num`` messages of ``topic`` stored in ``[begin_ms, end_ms]`` over
        every broker group and queue, oldest first, and whether more were in the range. Raises
        :class:`ClientError` as :meth:`queues_by_time` does, and when no queue could be read;
        what the queues that could not be read said is appended to ``errors`` (if given)."""
        if max_num < 1:
            raise ClientError("max_num must be >= 1")
        queues = await self.queues_by_time(
            topic, begin_ms, end_ms, limit=max_num, progress=progress
        )
        failures = list(dict.fromkeys(q.error for q in queues if q.error is not None))
        if failures and len(failures) == len(queues):
            raise ClientError("; ".join(failures))
        if errors is not None:
            errors.extend(failures)
        found = [m for q in queues for m in q.messages]
        found.sort(
            key=lambda m: (m.record.store_timestamp, m.broker_name, m.record.physical_offset)
        )
        more = len(found) > max_num or any(q.truncated for q in queues)
        return found[:max_num], more

    async def _queue(
        self,
        topic: str,
        group: BrokerRoute,
        queue_id: int,
        begin_ms: int,
        end_ms: int,
        limit: int | None,
        advance: Callable[[int], None],
    ) -> QueueMessages:
        out = QueueMessages(group.broker_name, queue_id)
        addresses = [a for a in (group.master_address, *group.slaves) if a]
        if not addresses:
            out.error = f"broker group {group.broker_name} has no broker to ask"
            return out
        reasons: list[str] = []
        for address in addresses:
            try:
                await self._read_pages(topic, queue_id, begin_ms, end_ms, limit, address, out)
            except ResponseError as exc:
                if exc.code in (ResponseCode.TOPIC_NOT_EXIST, ResponseCode.QUEUE_NOT_EXIST):
                    return out  # no such queue in this group (yet): nothing stored there
                if exc.code == ResponseCode.MESSAGE_CORRUPT:
                    out.error = f"{group.broker_name}: {exc.remark}"
                    return out
                reasons.append(f"{address}: {BrokerError(exc.code, exc.remark)}")
            except RemotingError as exc:
                reasons.append(f"{address}: {describe_failure(exc)}")
            else:
                advance(len(out.messages))
                return out
            out.messages.clear()  # the next broker reads the range again from its start
        out.error = (
            f"broker group {group.broker_name} queue {queue_id} could not be read "
            f"({'; '.join(reasons)})"
        )
        return out

    async def _read_pages(
        self,
        topic: str,
        queue_id: int,
        begin_ms: int,
        end_ms: int,
        limit: int | None,
        address: str,
        out: QueueMessages,
    ) -> None:
        from_offset: int | None = None
        while True:
            want = _PAGE if limit is None else min(_PAGE, limit + 1 - len(out.messages))
            ask = QueryMessageByTime(
                topic=topic,
                queue_id=queue_id,
                begin_ms=begin_ms,
                end_ms=end_ms,
                max_num=min(want, MAX_NUM),
                from_offset=from_offset,
            )
            frame = await self._call(address, ask.code, ask.encode()[0])
            try:
                page = MessagesInRange.parse(frame.header, frame.body)
                records = list(iter_records(page.body))
            except (FieldError, RecordError) as exc:
                raise ClientError(f"malformed answer from {address}: {exc}") from None
            out.messages.extend(FoundMessage(r, out.broker_name, address) for r in records)
            if limit is not None and len(out.messages) > limit:
                del out.messages[limit:]
                out.truncated = True
                return
            if page.done or (from_offset is not None and page.next_offset <= from_offset):
                return  # the range is read, or the broker made no progress (nothing readable)
            from_offset = page.next_offset
