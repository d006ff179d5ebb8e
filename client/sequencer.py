"""An idempotent producer's sequences, per (topic, broker group, queue) (docs/idempotence.md).
Pure: no asyncio, no clock.

Each request to a queue takes the queue's next sequence when its first attempt goes there and
keeps it for every retry there. A request whose attempt may have been stored (no answer, a cut
connection, a flush or replica timeout) is *pinned* to that queue by the router: its retries go
to the queue's group's master of the moment, so the broker that holds the first copy (or its
successor after a failover) recognises the retry. Only a request refused before being stored
moves to another queue, with that queue's next sequence; the one it took here is a gap the
broker accepts.

The broker remembers the last :data:`~protocol.idempotence.WINDOW` requests per queue, so a
new sequence goes out only while it is less than ``WINDOW`` above the oldest one still in
flight on the queue (:meth:`Sequencer.take`); the others wait their turn (:meth:`waiting`).
"""

from __future__ import annotations

from collections import deque

from protocol.idempotence import WINDOW, ProducerSeq

__all__ = ["Lane", "Sequencer"]

Lane = tuple[str, str, int]
"""(topic, broker group, queue id)."""


class _Queue:
    __slots__ = ("done", "inflight", "next")

    def __init__(self) -> None:
        self.next = 0
        self.inflight: deque[int] = deque()
        """Sequences taken, ascending; the front is the oldest not yet released."""
        self.done: set[int] = set()
        """Released out of order (behind a still pending front)."""


class Sequencer:
    """Sequences of one producer incarnation (``producer_id``, ``epoch``; ``token``: the send
    token its sequenced sends carry, with authentication on)."""

    def __init__(
        self, producer_id: int, epoch: int, window: int = WINDOW, token: bytes | None = None
    ) -> None:
        ProducerSeq.checked(producer_id, epoch, 0)
        self.producer_id = producer_id
        self.epoch = epoch
        self.token = token
        self.window = window
        self._queues: dict[Lane, _Queue] = {}

    def take(self, lane: Lane) -> int | None:
        """The lane's next sequence, now in flight; None while that would be ``window`` or
        more above the oldest in flight (wait for a :meth:`release`)."""
        q = self._queues.get(lane)
        if q is None:
            q = self._queues[lane] = _Queue()
        if q.inflight and q.next - q.inflight[0] >= self.window:
            return None
        seq = q.next
        q.next = seq + 1
        q.inflight.append(seq)
        return seq

    def release(self, lane: Lane, seq: int) -> bool:
        """``seq`` is no longer in flight (answered, or given up); True when that let the lane
        take a sequence it could not before."""
        q = self._queues.get(lane)
        if q is None:
            return False
        inflight = q.inflight
        if not inflight or seq < inflight[0]:
            return False
        if seq != inflight[0]:
            q.done.add(seq)
            return False
        was_full = q.next - inflight[0] >= self.window
        inflight.popleft()
        done = q.done
        while inflight and inflight[0] in done:
            done.discard(inflight.popleft())
        return was_full

    def fields(self, seq: int) -> ProducerSeq:
        return ProducerSeq(self.producer_id, self.epoch, seq)

    def in_flight(self, lane: Lane) -> int:
        q = self._queues.get(lane)
        return 0 if q is None else len(q.inflight) - len(q.done)
