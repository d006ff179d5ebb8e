"""Resetting a consumer group's offsets of a topic on every master that holds it
(INVOKE_BROKER_TO_RESET_OFFSET, :mod:`protocol.broker_requests.offsets`): what rmqctl's
resetOffsetByTime and skipAccumulatedMessage and the SDK's ``Consumer.seek`` and
``seek_to_time`` send. Each master commits the new offsets and tells the group's live members
(docs/operations.md, "Resetting offsets").

A static topic (docs/static-topics.md) resets by logical offset: per logical queue the time is
looked up on its items (SEARCH_OFFSET_BY_TIMESTAMP on each item's physical queue, oldest first:
the first item that holds a message stored at or after it), and the logical offset is written
as physical offsets on the items (:func:`protocol.static_topic.commit_points`: older items at
their end, newer ones at their start), as the group's own commits are.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from client.bootstrap import BootstrapClient
from client.errors import BrokerError, ClientError, GroupNotFoundError
from client.routes import LOGICAL_BROKER, MessageQueue, TopicRoute, fetch_route
from protocol.broker_requests.offsets import (
    TO_MAX,
    OffsetsReset,
    Outcome,
    QueueReset,
    ResetOffset,
)
from protocol.codes import ResponseCode
from protocol.fields import FieldError
from protocol.pull import AnswerError, MaxOffsetQuery, OffsetSearch, decode_offset
from protocol.static_topic import LogicalQueue, commit_points, holding_item, logical_of
from remoting.client import ConnectionPool
from remoting.errors import RemotingError, ResponseError

__all__ = ["OffsetAdmin", "OffsetResetter", "ResetReport"]


@dataclass(slots=True)
class ResetReport:
    """What a reset did: per queue (a static topic's logical queues under
    :data:`client.routes.LOGICAL_BROKER`), how many member connections the masters told, and
    the broker groups that had nothing to reset (the group has no offset and no member there)."""

    group: str
    topic: str
    queues: dict[MessageQueue, QueueReset] = field(default_factory=dict)
    notified: int = 0
    skipped: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "topic": self.topic,
            "queues": [
                {"brokerName": mq.broker_name, "queueId": mq.queue_id, **r.to_dict()}
                for mq, r in sorted(self.queues.items())
            ],
            "notified": self.notified,
            "skipped": [{"brokerName": n, "why": w} for n, w in sorted(self.skipped.items())],
        }


class OffsetResetter:
    """Sends resets to the masters of a topic, whose route ``route_of`` gives."""

    def __init__(
        self,
        pool: ConnectionPool,
        route_of: Callable[[str], Awaitable[TopicRoute]],
        timeout: float,
    ) -> None:
        self._pool = pool
        self._route_of = route_of
        self.timeout = timeout

    async def by_time(
        self, group: str, topic: str, timestamp: int, *, force: bool = False
    ) -> ResetReport:
        """Move ``group``'s offsets of every queue of ``topic`` to the first message stored at
        or after ``timestamp`` (epoch ms; :data:`TO_MAX`: to each queue's end). Without
        ``force`` a queue only moves back (a static topic's always move)."""
        route = await self._route_of(topic)
        if route.mapping:
            return await self._logical_by_time(group, route, timestamp)
        ask = ResetOffset(topic=topic, group=group, timestamp=timestamp, force=force)
        return await self._each_master(group, route, {name: [ask] for name in _names(route)})

    async def to_offset(
        self, group: str, topic: str, queue: MessageQueue, offset: int
    ) -> ResetReport:
        """Move ``group``'s offset of one queue of ``topic`` to ``offset`` (a static topic's
        logical queue and logical offset)."""
        if offset < 0:
            raise ClientError(f"offset must be >= 0, not {offset}")
        route = await self._route_of(topic)
        if route.mapping:
            if queue.broker_name != LOGICAL_BROKER or queue.queue_id >= len(route.mapping):
                raise ClientError(
                    f"{topic} is a static topic: seek one of its logical queues "
                    f"MessageQueue({LOGICAL_BROKER!r}, 0..{len(route.mapping) - 1})"
                )
            return await self._logical_to(group, route, {queue.queue_id: offset})
        if queue not in route.queues:
            raise ClientError(f"{topic} has no queue {queue.broker_name}/{queue.queue_id}")
        ask = ResetOffset(
            topic=topic, group=group, force=True, queue_id=queue.queue_id, offset=offset
        )
        return await self._each_master(group, route, {queue.broker_name: [ask]})

    async def _each_master(
        self,
        group: str,
        route: TopicRoute,
        asks: dict[str, list[ResetOffset]],
        *,
        reset_before: bool = False,
        partial: bool = False,
    ) -> ResetReport:
        """Send ``asks`` to their masters. A master that has neither offset nor member of the
        group is skipped when another reset something (also ``reset_before``: an earlier part
        of this reset did; ``partial``: a later part may), else it fails the reset."""
        report = ResetReport(group, route.topic)
        failures: list[str] = []
        refusals: dict[str, BrokerError] = {}

        async def one(name: str, ask: ResetOffset) -> None:
            address = route.master_address(name)
            if address is None:
                failures.append(f"{name}: no master now (its offsets were not reset)")
                return
            try:
                conn = await self._pool.get(address)
                resp = await conn.call(ask.code, *ask.encode(), self.timeout)
                answer = OffsetsReset.parse(resp.header, resp.body)
            except ResponseError as exc:
                refusals[name] = BrokerError(exc.code, exc.remark, address)
                return
            except RemotingError as exc:
                failures.append(f"{name} ({address}): {exc}")
                return
            except FieldError as exc:
                failures.append(f"{name} ({address}): malformed answer: {exc}")
                return
            report.notified += answer.notified
            for q, r in answer.queues.items():
                report.queues[MessageQueue(name, q)] = r

        await asyncio.gather(*(one(n, a) for n, ask_list in asks.items() for a in ask_list))
        unknown = not failures and not reset_before and bool(refusals)
        for name, refusal in refusals.items():
            if refusal.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST and (
                partial or reset_before or report.queues or len(refusals) < len(asks)
            ):
                report.skipped[name] = refusal.remark or str(refusal)
            else:
                unknown = unknown and refusal.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
                failures.append(f"{name}: {refusal}")
        if failures:
            done = sorted({mq.broker_name for mq in report.queues})
            also = f" (reset on {', '.join(done)})" if done else " (nothing reset)"
            # Every master said it knows no such group: the group does not exist (the console's
            # 404); anything else is the cluster's failure.
            error = GroupNotFoundError if unknown and not done else ClientError
            raise error(
                f"resetting the offsets of {group} on {route.topic} failed on "
                f"{'; '.join(sorted(failures))}{also}"
            )
        return report

    async def _logical_by_time(self, group: str, route: TopicRoute, timestamp: int) -> ResetReport:
        found = await asyncio.gather(
            *(self._logical_at(route, items, timestamp) for items in route.mapping)
        )
        return await self._logical_to(group, route, dict(enumerate(found)), found_by_time=True)

    async def _logical_at(self, route: TopicRoute, items: LogicalQueue, timestamp: int) -> int:
        """The logical offset of the first message of the logical queue stored at or after
        ``timestamp`` (its end for :data:`TO_MAX` or when none was)."""
        for item in items:
            end = item.physical_end()
            if timestamp == TO_MAX and end is not None:
                continue
            physical = await self._physical(route, item.broker_name, item.physical_queue, timestamp)
            if end is None or physical < end:
                return logical_of(item, max(physical, item.physical_start))
        raise ClientError(f"the logical queue of {route.topic} has no open item")

    async def _physical(self, route: TopicRoute, name: str, queue: int, timestamp: int) -> int:
        address = route.read_address(name)
        if address is None:
            raise ClientError(f"{name} has no replica to read {route.topic} from")
        if timestamp == TO_MAX:
            ask: OffsetSearch | MaxOffsetQuery = MaxOffsetQuery(topic=route.topic, queue_id=queue)
        else:
            ask = OffsetSearch(topic=route.topic, queue_id=queue, timestamp=timestamp)
        conn = await self._pool.get(address)
        resp = await conn.call(ask.code, *ask.encode(), self.timeout)
        try:
            return decode_offset(resp)
        except AnswerError as exc:
            raise ClientError(f"{name} ({address}): {exc}") from None

    async def _logical_to(
        self,
        group: str,
        route: TopicRoute,
        logical: dict[int, int],
        *,
        found_by_time: bool = False,
    ) -> ResetReport:
        """Write each logical queue's offset as physical offsets on its items: first, without
        a notice, on the items that do not hold it; then on the item that does, whose master
        tells the members the logical offset to go on from. (Told by every item's master as
        its offset moved, a member read the others back before they had moved: it received
        again what came after them and its commits undid their reset.)"""
        quiet: dict[str, list[ResetOffset]] = {}
        told: dict[str, list[ResetOffset]] = {}
        for queue, offset in logical.items():
            items = route.mapping[queue]
            holder = holding_item(items, offset)
            for item, physical in commit_points(items, offset):
                holds = item is holder
                (told if holds else quiet).setdefault(item.broker_name, []).append(
                    ResetOffset(
                        topic=route.topic,
                        group=group,
                        force=True,
                        queue_id=item.physical_queue,
                        offset=physical,
                        logical_offset=offset if holds else None,
                        notify=holds,
                    )
                )
        before = await self._each_master(group, route, quiet, partial=True) if quiet else None
        physical_report = await self._each_master(
            group, route, told, reset_before=before is not None and bool(before.queues)
        )
        report = ResetReport(
            group, route.topic, notified=physical_report.notified, skipped=physical_report.skipped
        )
        if before is not None:
            report.skipped = {**before.skipped, **report.skipped}
        for queue, offset in logical.items():
            items = route.mapping[queue]
            first = logical_of(items[0], items[0].physical_start)
            outcome: Outcome = "min" if found_by_time and offset == first else "reset"
            report.queues[MessageQueue(LOGICAL_BROKER, queue)] = QueueReset(
                offset=offset, previous=None, min_offset=first, max_offset=-1, outcome=outcome
            )
        return report


def _names(route: TopicRoute) -> list[str]:
    return sorted({mq.broker_name for mq in route.queues})


class OffsetAdmin(BootstrapClient):
    """Resets through the bootstrap addresses (what rmqctl uses)."""

    def resetter(self) -> OffsetResetter:
        return OffsetResetter(self._pool, lambda t: fetch_route(self.bootstrap, t), self.timeout)
