"""Where a slave's log stops agreeing with its master's: the consistent point (DESIGN.md section 5).

The slave walks its epoch entries from the newest down. The first entry whose epoch exists on
the master *with the same start offset* is the newest epoch both logs agree began at the same
place; both logs hold the same bytes of that epoch up to the shorter of the two ranges. So the
consistent point is ``min(slave end, master end)`` of that epoch, where an entry ends where the
next one starts and the last one ends at the node's max offset. The point is also clamped to the
slave's max offset (an entry left behind by a torn tail may claim a range the slave no longer
holds).

Before that walk, :func:`decide_truncation` checks the master against what the controllers said,
and after it, the point against what the group acknowledged. Five outcomes, as data:

- :class:`ConsistentPoint`: truncate the CommitLog, ConsumeQueues and epoch file to ``offset``,
  durably, then ack ``offset``.
- :class:`EmptyLog`: no common entry, but the slave holds no bytes (max offset 0). It clears its
  epoch file (truncating to 0) and acks 0. An ack of 0 means "I have nothing": the master then
  streams from its own min offset, or, when the slave's handshake set isSyncFromLastFile, from
  the start of its last CommitLog file (RocketMQ's rule). A slave whose consistent point is 0
  ends up in the same place.
- :class:`NoCommonEntry`: no common entry and a non-empty local log. Replicating would either
  keep bytes the master never had or silently drop them, so the slave refuses; an operator
  decides (clean the slave's data, or elect differently).
- :class:`EpochNotNamed`: the master answers at an epoch other than the one the controllers named
  it master for (older: it is not master yet or any more; newer: the controllers have moved on
  and this slave has not heard yet, or the peer lies). Nothing is cut; the slave reconnects later
  (and learns the controllers' view meanwhile).
- :class:`BelowConfirmOffset`: the consistent point lies below the slave's confirm offset, the
  offset every SyncStateSet member had acknowledged, so truncating would destroy acknowledged
  messages. A master elected by the controllers never asks for that (a clean election picks a
  member that has them); a peer that does is an impostor, or an unclean election happened. The
  slave refuses unless the operator allowed it (``ha_allow_truncate_below_confirm``).

The walk compares the slave's entries newest first against a dict of the master's; it is linear
in the number of entries.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from protocol.ha import EpochEntry, with_end_offsets

__all__ = [
    "BelowConfirmOffset",
    "ConsistentPoint",
    "EmptyLog",
    "EpochNotNamed",
    "NoCommonEntry",
    "TruncationDecision",
    "decide_truncation",
    "find_consistent_point",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsistentPoint:
    """Both logs agree up to ``offset``; ``epoch`` is the newest epoch they share."""

    offset: int
    epoch: int


@dataclass(frozen=True, slots=True, kw_only=True)
class EmptyLog:
    """No shared epoch, but the slave has no bytes to lose: start from scratch (ack 0)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class NoCommonEntry:
    """No shared epoch and the slave has bytes: refuse to replicate (an operator decision)."""

    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class EpochNotNamed:
    """The master's epoch is not the one the controllers named: cut nothing, reconnect later."""

    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class BelowConfirmOffset:
    """The consistent point would cut acknowledged bytes: refuse (an operator decision)."""

    offset: int
    """Where the master's history says the logs stop agreeing."""
    confirm_offset: int
    """What this slave knows the group acknowledged (its confirm offset, capped at its log)."""
    reason: str


TruncationDecision = ConsistentPoint | EmptyLog | NoCommonEntry | EpochNotNamed | BelowConfirmOffset


def _describe(entries: Sequence[EpochEntry], max_offset: int, limit: int = 6) -> str:
    shown = [f"{e.epoch}@{e.start_offset}" for e in entries[-limit:]]
    if len(entries) > limit:
        shown.insert(0, "...")
    return f"[{', '.join(shown)}] max offset {max_offset}"


def find_consistent_point(
    *,
    local_entries: Sequence[EpochEntry],
    local_max_offset: int,
    master_entries: Sequence[EpochEntry],
    master_max_offset: int,
) -> TruncationDecision:
    """Decide how a slave's log must be cut before it replicates from this master.

    ``local_entries``/``master_entries`` are ascending epoch histories; the max offsets are each
    log's end, and so the end of each history's last entry.
    """
    local = with_end_offsets(local_entries, local_max_offset)
    master = {r.epoch: r for r in with_end_offsets(master_entries, master_max_offset)}
    for mine in reversed(local):
        theirs = master.get(mine.epoch)
        if theirs is not None and theirs.start_offset == mine.start_offset:
            offset = min(mine.end_offset, theirs.end_offset, local_max_offset)
            return ConsistentPoint(offset=offset, epoch=mine.epoch)
    if local_max_offset == 0:
        return EmptyLog()
    return NoCommonEntry(
        reason=(
            "no epoch in common with the master: local "
            f"{_describe(local_entries, local_max_offset)}, master "
            f"{_describe(master_entries, master_max_offset)}; refusing to replicate "
            "(clean this broker's data or elect another master)"
        )
    )


def decide_truncation(
    *,
    local_entries: Sequence[EpochEntry],
    local_max_offset: int,
    local_confirm_offset: int,
    master_entries: Sequence[EpochEntry],
    master_max_offset: int,
    master_epoch: int,
    named_epoch: int | None,
    allow_below_confirm: bool = False,
) -> TruncationDecision:
    """The whole handshake decision: :func:`find_consistent_point` between two checks.

    ``named_epoch`` is the epoch the controllers named this master for (None: no such check, for
    a slave without controllers); ``local_confirm_offset`` is the slave's persisted confirm
    offset. A point below ``min(local_confirm_offset, local_max_offset)`` is refused unless
    ``allow_below_confirm``.
    """
    if named_epoch is not None and master_epoch != named_epoch:
        side = "older" if master_epoch < named_epoch else "newer"
        return EpochNotNamed(
            reason=(
                f"the master answers at epoch {master_epoch}, {side} than epoch {named_epoch} "
                "the controllers named it master for; not truncating"
            )
        )
    decision = find_consistent_point(
        local_entries=local_entries,
        local_max_offset=local_max_offset,
        master_entries=master_entries,
        master_max_offset=master_max_offset,
    )
    floor = min(local_confirm_offset, local_max_offset)
    if (
        isinstance(decision, ConsistentPoint)
        and decision.offset < floor
        and not allow_below_confirm
    ):
        return BelowConfirmOffset(
            offset=decision.offset,
            confirm_offset=floor,
            reason=(
                f"the master (epoch {master_epoch}) agrees with this broker's log only up to "
                f"offset {decision.offset} (epoch {decision.epoch}), below its confirm offset "
                f"{floor}: "
                f"refusing to truncate {floor - decision.offset} acknowledged bytes "
                "(an operator may allow it with ha_allow_truncate_below_confirm = true)"
            ),
        )
    return decision
