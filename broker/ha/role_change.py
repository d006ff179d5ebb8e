"""What a broker's epoch history must become before it serves as master of an epoch (pure).

DESIGN.md section 5: "truncate any torn tail, drop epoch entries at or above E, append
(E, maxOffset), then serve". The store's recovery has already cut the torn tail; this module
decides the epoch entries, and the driver persists them (``EpochFile``) before serving:

1. Entries that start beyond the max offset describe bytes the log no longer holds (a truncation
   or a torn tail cut after the entry was written): they are dropped, so the new entry can follow.
2. An entry *above* E means this broker already saw a newer master: becoming master of E is a
   stale order and is refused (:class:`StaleMasterEpoch`); nothing is dropped.
3. When the newest remaining entry is E itself, this broker is already master of E (a repeated
   notification, or a restart the controller did not notice): the entry is kept as it is. Only
   one broker is ever master of an epoch, so every byte labelled E here was written by this
   master. Re-appending ``(E, maxOffset)`` instead would relabel those bytes as the previous
   epoch, and a former master of that epoch with an unreplicated tail could then keep its
   divergent bytes at the next handshake.
4. Otherwise ``(E, maxOffset)`` is appended.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from protocol.ha import EpochEntry

__all__ = ["MasterEpochPlan", "StaleMasterEpoch", "plan_master_epochs"]


class StaleMasterEpoch(ValueError):
    """Asked to become master of an epoch older than one this broker already holds."""


@dataclass(frozen=True, slots=True, kw_only=True)
class MasterEpochPlan:
    """Persist :attr:`entries` (when :attr:`changed`) before serving as master."""

    entries: tuple[EpochEntry, ...]
    drop_from_offset: int | None
    """Drop entries starting at or after this offset first (None: none to drop)."""
    append: EpochEntry | None
    """Then append this entry (None: the newest entry already is this epoch)."""

    @property
    def changed(self) -> bool:
        return self.drop_from_offset is not None or self.append is not None

    @property
    def epoch_start_offset(self) -> int:
        """Where the new master's epoch starts."""
        return self.entries[-1].start_offset


def plan_master_epochs(
    entries: Sequence[EpochEntry], *, epoch: int, max_offset: int
) -> MasterEpochPlan:
    """The epoch history for serving as master of ``epoch`` with a log ending at ``max_offset``.

    Raises :class:`StaleMasterEpoch` when an entry's epoch is above ``epoch``.
    """
    if max_offset < 0:
        raise ValueError("max_offset must be >= 0")
    kept = [e for e in entries if e.start_offset <= max_offset]
    drop_from = max_offset + 1 if len(kept) < len(entries) else None
    newer = [e.epoch for e in entries if e.epoch > epoch]
    if newer:
        raise StaleMasterEpoch(
            f"cannot become master of epoch {epoch}: this broker already holds epoch {newer[-1]}"
        )
    if kept and kept[-1].epoch == epoch:
        return MasterEpochPlan(entries=tuple(kept), drop_from_offset=drop_from, append=None)
    entry = EpochEntry(epoch=epoch, start_offset=max_offset)
    return MasterEpochPlan(entries=(*kept, entry), drop_from_offset=drop_from, append=entry)
