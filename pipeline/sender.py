"""Producing (write tasks): :class:`BatchSender` sends SEND_BATCH_MESSAGE batches with a
bounded number in flight, counting what was acknowledged."""

from __future__ import annotations

import concurrent.futures
import contextlib
import random
from dataclasses import dataclass, field

from client.message import Message
from client.producer import Producer
from pipeline.loop import SyncLoop


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
