"""The CommitLog spans the timer's replay passed over, until they are repaired (issue 31).

A replay (:meth:`TimerService._replay <broker.timer.service.TimerService>`) reads only records
that pass their checks (``MessageStore.read_checked``); a damaged one is made known to the store
as damage (the broker has it repaired from a replica, ``broker.repair``) and the replay goes on
past its extent. The span is remembered here, with every CommitLog offset in it that a later
delivery or recall record names (:meth:`Skipped.note`): once the bytes are written back, the
span's scheduled messages are scheduled, except those (a message delivered or recalled by the
master before is never delivered again). Pure bookkeeping, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from broker.timer.records import Delivered, Recalled, TimerEvent

__all__ = ["Skipped", "Span"]


@dataclass(slots=True)
class Span:
    offset: int
    end: int
    done: set[int] = field(default_factory=set)
    """Offsets in the span that a later delivery or recall record names."""


class Skipped:
    def __init__(self) -> None:
        self.spans: dict[int, Span] = {}

    def reset(self) -> None:
        self.spans.clear()

    def add(self, offset: int, size: int) -> None:
        if offset not in self.spans:
            self.spans[offset] = Span(offset, offset + size)

    def first(self) -> int | None:
        """The lowest offset of a span not yet replayed (None: there is none)."""
        return min(self.spans, default=None)

    def note(self, events: list[TimerEvent]) -> None:
        """Remember which messages of the spans these later records deliver or recall."""
        for event in events:
            if isinstance(event, Delivered):
                target = event.source_offset
            elif isinstance(event, Recalled):
                target = event.target
            else:
                continue
            for span in self.spans.values():
                if span.offset <= target < span.end:
                    span.done.add(target)
