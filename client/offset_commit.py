"""Committing a consumer's consumed offsets to the brokers (CONSUMER_OFFSET_UPDATE): a queue's
consumed offset, or a static topic's logical offset as physical offsets on its mapping items."""

from __future__ import annotations

import asyncio

from client import logs
from client.errors import ClientError
from client.pull import QueueState
from client.routes import LOGICAL_BROKER, RouteCache
from client.subscription import Subscription, queue_name
from protocol.pull import ConsumerOffsetUpdate
from protocol.static_topic import commit_points
from remoting.errors import RemotingError

# The consumer's logger: its lines keep the name applications filter on.
log = logs.get_logger("client.consumer")


class OffsetCommitter:
    """Commits the offsets of a group member's queues, of its topic (``main``) and of its
    group's retry topic (``retry``)."""

    def __init__(
        self,
        group: str,
        routes: RouteCache,
        main: Subscription,
        retry: Subscription,
        *,
        request_timeout: float,
    ) -> None:
        self.group = group
        self.routes = routes
        self._main = main
        self._retry = retry
        self.request_timeout = request_timeout

    async def commit(self, state: QueueState) -> None:
        """Commit ``state``'s consumed offset if it moved."""
        offset = state.consumed
        if offset is None or offset == state.committed:
            return
        mq = state.mq
        sub = self._retry if state.topic == self._retry.topic else self._main
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

    async def _commit_logical(self, sub: Subscription, state: QueueState, offset: int) -> None:
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

    async def commit_all(self, states: list[QueueState]) -> None:
        """Commit every queue of ``states``, logging the failures."""
        results = await asyncio.gather(*(self.commit(s) for s in states), return_exceptions=True)
        for state, result in zip(states, results, strict=True):
            if isinstance(result, Exception):
                log.warning("offset commit failed", queue=queue_name(state.mq), error=str(result))

    async def commit_dropped(self, state: QueueState) -> None:
        """Commit a queue given away (its new owner starts there), logging a failure."""
        try:
            await self.commit(state)
        except (ClientError, RemotingError) as exc:
            log.warning(
                "offset commit on handover failed", queue=queue_name(state.mq), error=str(exc)
            )
