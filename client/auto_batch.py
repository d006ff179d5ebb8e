"""The producer's adaptive batching (``auto_batch``): the driver of ``client/accumulator.py``.

A send that finds nothing in flight to its broker group goes out at once, alone; sends made
while one is in flight are gathered per (topic, broker group) and leave as one
SEND_BATCH_MESSAGE when it returns, or as soon as ``batch_max_count`` / ``batch_max_bytes``
fill (the accumulator decides, :class:`AutoBatcher` sends through
:class:`client.batch_send.BatchSender`). Each send keeps its own result, error and deadline.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping

from client.accumulator import Accumulator
from client.batch_send import BatchSender, Gathered, item_size, single_result
from client.message import SendResult
from client.routing_retry import SendRouter, Target
from protocol.broker_requests.send import SendRequest

# Requests that were not full when they left, in flight at once per (topic, broker group): the
# second lets a batch fill while the first is answered (1 and 4 measured slower, bench/).
_BATCHES_IN_FLIGHT = 2

_Key = tuple[str, str]  # (topic, broker group) of an accumulator


class AutoBatcher:
    """Gathers the sends of each (topic, broker group) while one is in flight."""

    def __init__(
        self,
        router: SendRouter,
        sender: BatchSender,
        *,
        batch_max_count: int,
        batch_max_bytes: int,
        linger_ms: float,
    ) -> None:
        self._router = router
        self._sender = sender
        self.batch_max_count = batch_max_count
        self.batch_max_bytes = batch_max_bytes
        self.linger_ms = linger_ms
        self._accumulators: dict[_Key, Accumulator[Gathered]] = {}
        self._batch_tasks: set[asyncio.Task[None]] = set()
        self._batch_rr: dict[_Key, int] = {}

    async def send(
        self,
        topic: str,
        request: SendRequest,
        properties: Mapping[str, str] | None,
        at: int | None,
    ) -> SendResult:
        """Send one message: alone at once when its broker group is idle, else gathered."""
        first, key, acc = self._accumulator_for(topic)
        if acc.try_alone():  # the idle case: exactly what a send without auto-batching does
            try:
                resp, mq = await self._router.send(topic, request.code, request, None, first)
            finally:
                if acc.done(1):  # sends were gathered meanwhile
                    asyncio.get_running_loop().call_soon(self._drain, key, acc)
            return single_result(resp, mq, at)
        return await self._gather(topic, request, properties, at, first, key, acc)

    def _accumulator_for(self, topic: str) -> tuple[Target | None, _Key, Accumulator[Gathered]]:
        """The queue a new send of ``topic`` would go to alone (None: no route yet, or no
        master now: the send's own retries wait for one), and the accumulator of its broker
        group: sends gather per (topic, broker group); a batch takes the group's next queue
        when it leaves."""
        first = self._router.first_target(topic)
        key = (topic, first[0].broker_name if first is not None else "")
        acc = self._accumulators.get(key)
        if acc is None:
            acc = self._accumulators[key] = Accumulator(
                self.batch_max_count,
                self.batch_max_bytes,
                max_in_flight=_BATCHES_IN_FLIGHT,
                linger=self.linger_ms > 0,
            )
        return first, key, acc

    async def _gather(
        self,
        topic: str,
        request: SendRequest,
        properties: Mapping[str, str] | None,
        at: int | None,
        first: Target | None,
        key: _Key,
        acc: Accumulator[Gathered],
    ) -> SendResult:
        """A send that may not leave alone now: gathered with the others (see
        client/accumulator.py); its future settles with its own result or error."""
        self._router.check_open()
        deadline = time.monotonic() + self._router.send_deadline
        item = Gathered(request, properties, at, deadline, first)
        size = item_size(item)
        batches = acc.add(item, size)
        if batches and batches[-1][0] is item and len(batches[-1]) == 1:
            batches.pop()  # too big to share: this task sends it alone
            for batch in batches:
                self._spawn(key, acc, batch)
            try:
                return await self._sender.send_alone(topic, item, first)
            finally:
                self._request_done(key, acc, 1)
        item.fut = asyncio.get_running_loop().create_future()
        for batch in batches:
            self._spawn(key, acc, batch)
        if not batches and acc.needs_linger:
            acc.hold()
            asyncio.get_running_loop().call_later(self.linger_ms / 1000, self._drain, key, acc)
        return await item.fut

    def _spawn(self, key: _Key, acc: Accumulator[Gathered], batch: list[Gathered]) -> None:
        task = asyncio.get_running_loop().create_task(self._send_gathered(key, acc, batch))
        self._batch_tasks.add(task)
        task.add_done_callback(self._batch_tasks.discard)

    def _request_done(self, key: _Key, acc: Accumulator[Gathered], woken: int) -> None:
        """A request of ``acc`` for ``woken`` messages ended: drain it on the next loop turn if
        due, after the senders this answer woke have added their next messages."""
        if acc.done(woken):
            asyncio.get_running_loop().call_soon(self._drain, key, acc)

    def _drain(self, key: _Key, acc: Accumulator[Gathered]) -> None:
        for batch in acc.drain():
            self._spawn(key, acc, batch)

    async def _send_gathered(
        self,
        key: _Key,
        acc: Accumulator[Gathered],
        batch: list[Gathered],
    ) -> None:
        """Send gathered messages as one request (to the group's next queue), retried as a batch
        (on any queue) until each one's deadline; settle each message's future with its own
        result or error."""
        try:
            items = [it for it in batch if it.fut is None or not it.fut.done()]
            await self._sender.deliver(key[0], batch, self._batch_queue(key, items))
        finally:
            self._request_done(key, acc, len(batch))

    def _batch_queue(self, key: _Key, items: list[Gathered]) -> Target | None:
        """The queue of a request's first attempt: a lone message's own; a batch takes the
        next writable queue of its broker group, round-robin per (topic, group), so that
        batches spread over the group's queues whatever the messages' own picks were."""
        if len(items) != 1:
            route = self._router.routes.peek(key[0])
            if route is not None:
                group = [w for w in route.writable if w[0].broker_name == key[1]]
                if group:
                    i = self._batch_rr.get(key, 0)
                    self._batch_rr[key] = i + 1
                    return group[i % len(group)]
        return items[0].queue if items else None
