"""What a consumer last gave the application (:class:`Handout`), the queue-bound consumer's
(:mod:`client.queue_delivery`) and the POP consumer's (:mod:`client.pop_consumer`) alike.

``receive()`` hands out every message it returns; iteration hands them out one at a time. A
message handed out is confirmed once the application asks for more (the next ``receive()`` or
the next message): each consumer then counts it as consumed its own way (an offset commit, an
ack). Pure: no I/O.
"""

from __future__ import annotations

from typing import Generic, TypeVar

__all__ = ["Handout"]

M = TypeVar("M")


class Handout(Generic[M]):
    """The messages last delivered, how many of them the application holds (``handed``) and how
    many of those it confirmed by asking for more (``confirmed``)."""

    __slots__ = ("confirmed", "delivered", "handed")

    def __init__(self) -> None:
        self.delivered: list[M] = []
        self.handed = 0
        self.confirmed = 0

    def confirm(self) -> int:
        """The application asks for more (``receive()``): every message it holds is confirmed;
        returns how many that is."""
        self.confirmed = self.handed
        return self.handed

    def rest(self, max_messages: int) -> list[M] | None:
        """The rest of the delivery that iteration had not reached yet (up to
        ``max_messages``), handed out now; None when every delivered message was handed out."""
        if self.handed >= len(self.delivered):
            return None
        rest = self.delivered[self.handed : self.handed + max_messages]
        self.handed += len(rest)
        return rest

    def clear(self) -> None:
        self.delivered = []
        self.handed = self.confirmed = 0

    def deliver(self, msgs: list[M]) -> list[M]:
        """``msgs`` are delivered and handed out (``receive()`` returns them)."""
        self.delivered = msgs
        self.handed = len(msgs)
        return msgs

    def next(self) -> M | None:
        """The next delivered message for iteration (the one before it is confirmed); None when
        every delivered message was handed out."""
        pos = self.handed
        delivered = self.delivered
        if pos < len(delivered):
            self.confirmed = pos
            self.handed = pos + 1
            return delivered[pos]
        return None

    def first(self, msgs: list[M]) -> M:
        """Iteration takes the first of ``msgs``, which ``receive()`` just delivered."""
        self.handed = 1
        return msgs[0]
