"""Adaptive batching: which gathered sends go out together, and when (no asyncio, no clock).

One :class:`Accumulator` per (topic, broker group) of a producer. A send that finds nothing in
flight and nothing held goes out alone at once, so an idle producer adds no latency. While a
request is in flight, further sends are gathered and go as one batch:

- when a request ends (:meth:`Accumulator.done`): the producer then calls
  :meth:`Accumulator.drain` on its next loop turn, so the senders that request just woke can
  add their next message first (a closed loop of N senders settles at batches of about N; a
  lone sender's sends go out alone, one after the other);
- at once when the gathered messages reach ``max_count`` or ``max_bytes`` (more requests in
  flight, never one over the limits);
- with a linger: a send that finds nothing in flight is held too, and the producer drains when
  the linger ends (or earlier, at a fill).

At most ``max_in_flight`` requests that were not full when they left are in flight per
accumulator; full batches leave whatever is in flight. The driver (``client/producer.py``) sends
what these methods return and calls :meth:`Accumulator.done` once per request it sent, whatever
its outcome.

Sends with a FIFO message group do not come here: they gather per (topic, queue) in an ordered
lane (``client/lane.py``) with one request in flight, so a group's messages keep their order.
"""

from __future__ import annotations

from typing import Generic, TypeVar

T = TypeVar("T")


class Accumulator(Generic[T]):
    """Gathered items of one (topic, broker group) and its requests in flight."""

    __slots__ = (
        "held",
        "in_flight",
        "linger",
        "max_bytes",
        "max_count",
        "max_in_flight",
        "pending",
        "pending_bytes",
    )

    def __init__(
        self, max_count: int, max_bytes: int, *, max_in_flight: int = 1, linger: bool = False
    ) -> None:
        if max_count < 1 or max_bytes < 1 or max_in_flight < 1:
            raise ValueError("max_count, max_bytes and max_in_flight must be >= 1")
        self.max_count = max_count
        self.max_bytes = max_bytes
        self.max_in_flight = max_in_flight
        self.linger = linger
        self.pending: list[T] = []
        self.pending_bytes = 0
        self.in_flight = 0
        # A drain is due (a request ended, or a linger runs): sends only gather until it comes.
        self.held = False

    @property
    def idle(self) -> bool:
        """Nothing gathered, held or in flight (the producer may forget this accumulator)."""
        return not self.pending and not self.held and self.in_flight == 0

    def try_alone(self) -> bool:
        """True if a new send may leave alone at once (nothing gathered or held, no linger, a
        request slot free); it then counts as in flight. False: :meth:`add` it."""
        if self.pending or self.held or self.linger or self.in_flight >= self.max_in_flight:
            return False
        self.in_flight += 1
        return True

    def add(self, item: T, size: int) -> list[list[T]]:
        """A new send of ``size`` bytes: the requests to send now (each a list of items, in the
        order they were added). Empty: ``item`` waits for a drain. When the result is empty and
        :attr:`needs_linger` is true, the driver must arm the linger timer."""
        out: list[list[T]] = []
        if size >= self.max_bytes:  # too big to share a request: alone, at once
            self.in_flight += 1
            return [[item]]
        if self.pending and self.pending_bytes + size > self.max_bytes:
            out.append(self._cut())  # full by bytes: leaves now, ``item`` starts the next
        if (
            not self.pending
            and not self.held
            and not self.linger
            and self.in_flight < self.max_in_flight
            and not out
        ):
            self.in_flight += 1
            out.append([item])
            return out
        self.pending.append(item)
        self.pending_bytes += size
        if len(self.pending) >= self.max_count or self.pending_bytes >= self.max_bytes:
            out.append(self._cut())
        return out

    @property
    def needs_linger(self) -> bool:
        """Gathered items that nothing will drain: no request in flight, no drain due. The
        driver arms a linger timer, calls :meth:`hold`, and :meth:`drain` when it fires."""
        return bool(self.pending) and not self.held and self.in_flight == 0

    def hold(self) -> None:
        """A drain is now due (the driver scheduled one)."""
        self.held = True

    def done(self, woken: int) -> bool:
        """A request of ``woken`` messages ended (its answer, error or give-up). True: a drain
        is due, and the driver schedules :meth:`drain` on its next turn (not now, so that the
        senders the answer woke add their next messages first). It is due when messages were
        gathered meanwhile, or when the answer woke several senders; a lone sender's next send
        goes out at once, as if nothing had been in flight."""
        if self.in_flight > 0:
            self.in_flight -= 1
        if self.pending or woken > 1:
            self.held = True
        return self.held

    def drain(self) -> list[list[T]]:
        """The due drain: the gathered items as one request if another may be in flight (else
        they wait for the next :meth:`done`)."""
        self.held = False
        if self.pending and self.in_flight < self.max_in_flight:
            return [self._cut()]
        return []

    def _cut(self) -> list[T]:
        """Everything gathered as one request in flight (:meth:`add` cuts as soon as a limit is
        reached, so what is gathered always fits one request)."""
        batch = self.pending
        self.pending = []
        self.pending_bytes = 0
        self.in_flight += 1
        return batch
