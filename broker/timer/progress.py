"""The timer's files beside its log, and its progress mark (docs/timer.md, "Progress").

* ``geometry``: the slot and bucket sizes the timer log was written with (its bucket chains
  follow them): a change rebuilds the timer.
* ``dispatched``: the CommitLog offset the saved progress mark covers: a restart replays the
  CommitLog from there. The mark noted at one moment is saved (with that offset) only once the
  CommitLog is durable, and in controller mode replicated, up to where it was noted, so a
  delivery record that survived is never delivered again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import structlog

from storage.errors import StoreError
from storage.small_file import read_atomic, write_atomic
from storage.timer.wheel import TimingWheel, WheelConfig

__all__ = ["DISPATCHED_FILE", "GEOMETRY_FILE", "Progress"]

log = structlog.get_logger(__name__)

DISPATCHED_FILE: Final = "dispatched"
GEOMETRY_FILE: Final = "geometry"


@dataclass(slots=True)
class _Snapshot:
    """The progress mark and the CommitLog offset it covers, noted at one moment."""

    key: tuple[int, int]
    end: int


class Progress:
    """The files of one timer directory beside its log, and the mark waiting to be saved."""

    def __init__(self, directory: Path, config: WheelConfig) -> None:
        self.directory = directory
        self.config = config
        self._snapshot: _Snapshot | None = None
        self._dispatched_saved = -1  # none: the first save writes it (0 too)

    def reset(self) -> None:
        """The timer is rebuilt: nothing noted, nothing saved."""
        self._snapshot = None
        self._dispatched_saved = -1  # none: the first save writes it (0 too)

    # -- geometry --------------------------------------------------------------------------------

    def geometry(self) -> str:
        return f"{self.config.slot_ms} {self.config.slots_per_bucket}"

    def write_geometry(self) -> None:
        write_atomic(self.directory / GEOMETRY_FILE, self.geometry().encode())

    def geometry_changed(self) -> str | None:
        """Why the timer log cannot be read with this configuration (its bucket chains follow
        the slot and bucket sizes it was written with), None when it can."""
        try:
            raw = read_atomic(self.directory / GEOMETRY_FILE)
        except StoreError:
            raw = b"?"
        if raw is None or raw.decode(errors="replace") == self.geometry():
            return None
        return (
            f"timer_slot_ms / timer_slots_per_bucket changed from {raw.decode(errors='replace')}"
            f" to {self.geometry()}"
        )

    # -- the dispatched mark ---------------------------------------------------------------------

    def load_dispatched(self, wheel: TimingWheel) -> int:
        """The CommitLog offset the saved mark covers (the timer log's end without one)."""
        try:
            raw = read_atomic(self.directory / DISPATCHED_FILE)
        except StoreError:
            raw = None  # replay from the timer log's end instead
        if raw is None:
            return wheel.indexed_through
        try:
            value = int(raw.decode())
        except ValueError:
            log.warning("timer dispatched mark is not valid: replaying from the timer log's end")
            return wheel.indexed_through
        self._dispatched_saved = value
        return value

    def note(self, wheel: TimingWheel, end: int, *, force: bool = False) -> None:
        """Note the wheel's mark as covering the CommitLog up to ``end`` (unless one noted
        earlier still waits to be saved, or ``force``)."""
        if self._snapshot is None or force:
            self._snapshot = _Snapshot(wheel.delivered, end)

    def save_if_durable(self, wheel: TimingWheel, durable: Callable[[int], bool]) -> None:
        """Save the mark noted last if ``durable(its end)``: the wheel's progress, then the
        dispatched offset."""
        snap = self._snapshot
        if snap is None or not durable(snap.end):
            return
        wheel.save_progress(snap.key)
        if snap.end != self._dispatched_saved:
            write_atomic(self.directory / DISPATCHED_FILE, str(snap.end).encode())
            self._dispatched_saved = snap.end
        self._snapshot = None
