"""The producer's FIFO message groups (``message_group=``, docs/fifo.md).

A send goes to the queue its group hashes to (``protocol/fifo.py``,
:func:`client.routing_retry.group_lane`) through that queue's ordered lane
(``client/lane.py``: one request in flight, sends in call order), and its retries go only to
the group's queue. :class:`FifoSender` drives the lanes; :class:`client.batch_send.BatchSender`
sends what they let go.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping

from client.batch_send import BatchSender, Gathered, item_size
from client.lane import OrderedLane
from client.message import SendResult
from client.routes import TopicRoute
from client.routing_retry import LaneKey, SendRouter, group_lane
from protocol.broker_requests.send import SendRequest


class FifoSender:
    """One ordered lane per (topic, broker group, queue) of message groups."""

    def __init__(
        self, router: SendRouter, sender: BatchSender, *, batch_max_count: int, batch_max_bytes: int
    ) -> None:
        self._router = router
        self._sender = sender
        # Messages one lane's request may carry (1: every message alone).
        self.batch_max_count = batch_max_count
        self.batch_max_bytes = batch_max_bytes
        self._lanes: dict[LaneKey, OrderedLane[Gathered]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        # Message-group sends of a topic waiting for its first route, in call order.
        self._route_waits: dict[str, tuple[asyncio.Lock, list[int]]] = {}

    async def send(
        self,
        topic: str,
        request: SendRequest,
        properties: Mapping[str, str],
        group: str,
    ) -> SendResult:
        """A send of a message group: into the lane of the group's queue (see
        client/lane.py), alone at once when the lane is idle."""
        router = self._router
        router.check_open()
        deadline = time.monotonic() + router.send_deadline
        item = Gathered(request, properties, None, deadline, None, group)
        route = router.routes.peek(topic)
        wait = self._route_waits.get(topic)
        if route is None or wait is not None:
            # No route yet (or earlier sends still wait for it): wait in call order, so that
            # the sends of a group enter their lane in the order they were made.
            if wait is None:
                wait = self._route_waits[topic] = (asyncio.Lock(), [0])
            lock, waiting = wait
            waiting[0] += 1
            try:
                async with lock:
                    route = router.routes.peek(topic) or await router.route(
                        topic, deadline, fresh=False, first=True
                    )
                    return await self._enter_lane(topic, route, item)
            finally:
                waiting[0] -= 1
                if waiting[0] == 0 and self._route_waits.get(topic) is wait:
                    del self._route_waits[topic]
        return await self._enter_lane(topic, route, item)

    async def _enter_lane(self, topic: str, route: TopicRoute, item: Gathered) -> SendResult:
        """Add ``item`` to its lane without a pause (its place in the order is taken at once);
        then wait for its own result."""
        assert item.group is not None
        key = group_lane(topic, route, item.group)
        lane = self._lanes.get(key)
        if lane is None:
            lane = self._lanes[key] = OrderedLane(self.batch_max_count, self.batch_max_bytes)
        if lane.add(item, item_size(item)):
            try:
                return await self._sender.send_alone(topic, item, None)
            finally:
                self._lane_done(key, lane)
        item.fut = asyncio.get_running_loop().create_future()
        return await item.fut

    def _lane_done(self, key: LaneKey, lane: OrderedLane[Gathered]) -> None:
        """A request of ``lane`` ended: send the next on the next loop turn, after the senders
        its answer woke have added their next messages (the lane counts as in flight until
        then, so they gather)."""
        asyncio.get_running_loop().call_soon(self._lane_next, key, lane)

    def _lane_next(self, key: LaneKey, lane: OrderedLane[Gathered]) -> None:
        batch = lane.done()
        if batch:
            task = asyncio.get_running_loop().create_task(self._send_lane(key, lane, batch))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        elif self._lanes.get(key) is lane:
            del self._lanes[key]

    async def _send_lane(
        self, key: LaneKey, lane: OrderedLane[Gathered], batch: list[Gathered]
    ) -> None:
        try:
            await self._sender.deliver(key[0], batch, None)
        finally:
            self._lane_done(key, lane)
