"""The master's SyncStateSet and confirm offset, as pure logic (no clock, no asyncio, no sockets).

The driver (:class:`broker.ha.service.HAService`) feeds it what happens, with the time in
milliseconds and the master's max offset, and reads back what to do::

    tracker.slave_connected(id, now_ms=, async_learner=)    a slave handshook
    tracker.slave_acked(id, offset, master_max_offset=, now_ms=)
    tracker.slave_disconnected(id, now_ms=)
    tracker.tick(master_max_offset=, now_ms=)               periodically (shrink deadlines)
    tracker.update_confirm_offset(master_max_offset)        after each of the above -> advanced?
    tracker.next_proposal(now_ms=)                          -> a new set to send, or None
    tracker.proposal_accepted(members, epoch, now_ms=) / proposal_failed(members, now_ms=)

Rules (DESIGN.md sections 5-7, RocketMQ's AutoSwitchHAService):

- **Shrink** a member that lost its connection during this mastership (even if it is back: it
  may have lost unflushed bytes it had acked), whose ack is below the confirm offset, or whose
  last caught-up time is ``max_time_not_catchup_ms`` old (a member that never connected counts
  from the mastership's start, or from when it joined).
- **Caught up**: an ack at or past the master's max offset catches a slave up *now*. Under a
  steady stream a slave never acks the very latest byte, so each slave also carries a *mark*
  ``(time, master max offset then)``: an ack reaching the mark means the slave was caught up at
  the mark's time, and the mark moves to ``(now, master max offset now)`` (RocketMQ's
  lastMasterMaxOffset / lastTransferTime).
- **Expand** a connected slave (not an isAsyncLearner) whose ack is at least the current confirm
  offset and at least the start offset of the current master epoch.
- One change is in flight at a time (shrinks and expands together); the new set goes to the
  controller and, while it is in flight, acks count against the **union** of the old and the
  proposed sets (RocketMQ bug #5663), so a shrink only frees the confirm offset once accepted and
  an expansion binds at once. A failed proposal is retried no sooner than ``retry_after_ms``.
- **confirmOffset** = the smallest ack among the counted members (the master's own max offset for
  itself). It never advances while a counted member is disconnected or has not acked on its
  current connection (RocketMQ bug #6662), and it never goes back.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

__all__ = ["DEFAULT_MAX_TIME_NOT_CATCHUP_MS", "SlaveProgress", "SyncState"]

DEFAULT_MAX_TIME_NOT_CATCHUP_MS: Final = 15_000
DEFAULT_RETRY_AFTER_MS: Final = 1_000


@dataclass(slots=True, kw_only=True)
class SlaveProgress:
    """What the master knows of one slave during this mastership."""

    broker_id: int
    async_learner: bool = False
    connected: bool = False
    lost_connection: bool = False
    """It was connected during this mastership and lost that connection."""
    acked: int | None = None
    """Its last ack on the current connection (None before the first one)."""
    last_caught_up_ms: int = 0
    mark_ms: int = 0
    mark_offset: int | None = None


class SyncState:
    """The SyncStateSet of one mastership (one master epoch) and its confirm offset."""

    __slots__ = (
        "_confirm",
        "_epoch",
        "_epoch_start",
        "_master",
        "_max_not_catchup",
        "_members",
        "_proposed",
        "_retry_after",
        "_retry_at",
        "_slaves",
    )

    def __init__(
        self,
        *,
        master_id: int,
        members: Iterable[int],
        sync_state_set_epoch: int,
        epoch_start_offset: int,
        confirm_offset: int,
        now_ms: int,
        max_time_not_catchup_ms: int = DEFAULT_MAX_TIME_NOT_CATCHUP_MS,
        retry_after_ms: int = DEFAULT_RETRY_AFTER_MS,
    ) -> None:
        if max_time_not_catchup_ms <= 0:
            raise ValueError("max_time_not_catchup_ms must be positive")
        if retry_after_ms < 0:
            raise ValueError("retry_after_ms must be >= 0")
        if confirm_offset < 0 or epoch_start_offset < 0:
            raise ValueError("offsets must be >= 0")
        self._master = master_id
        self._members = frozenset(members) | {master_id}  # the set always holds the master
        self._epoch = sync_state_set_epoch
        self._epoch_start = epoch_start_offset
        self._confirm = confirm_offset
        self._max_not_catchup = max_time_not_catchup_ms
        self._retry_after = retry_after_ms
        self._retry_at = now_ms
        self._proposed: frozenset[int] | None = None
        self._slaves: dict[int, SlaveProgress] = {}
        for member in self._members - {master_id}:
            self._progress(member, now_ms)

    # ---------------------------------------------------------------- state

    @property
    def master_id(self) -> int:
        return self._master

    @property
    def members(self) -> frozenset[int]:
        """The SyncStateSet the controller last accepted."""
        return self._members

    @property
    def epoch(self) -> int:
        """The syncStateSetEpoch of :attr:`members`."""
        return self._epoch

    @property
    def proposed(self) -> frozenset[int] | None:
        """The set sent to the controller and not answered yet."""
        return self._proposed

    @property
    def counted_members(self) -> frozenset[int]:
        """Whose acks the confirm offset waits for: the union of the accepted and proposed sets."""
        if self._proposed is None:
            return self._members
        return self._members | self._proposed

    @property
    def solo(self) -> bool:
        """Only the master counts: the confirm offset is the master's max offset."""
        counted = self.counted_members
        return len(counted) == 1

    @property
    def confirm_offset(self) -> int:
        return self._confirm

    def in_sync_replicas(self) -> int:
        """How many replicas are surely in the set (a proposal in flight counts the smaller
        side): what ``min_in_sync_replicas`` is checked against."""
        if self._proposed is None:
            return len(self._members)
        return len(self._members & self._proposed)

    def slave(self, broker_id: int) -> SlaveProgress | None:
        return self._slaves.get(broker_id)

    def acked_offsets(self) -> dict[int, int]:
        """Each connected slave's last ack (slaves that have not acked yet are left out)."""
        return {
            s.broker_id: s.acked
            for s in self._slaves.values()
            if s.connected and s.acked is not None
        }

    def _progress(self, broker_id: int, now_ms: int) -> SlaveProgress:
        p = self._slaves.get(broker_id)
        if p is None:
            p = self._slaves[broker_id] = SlaveProgress(
                broker_id=broker_id, last_caught_up_ms=now_ms, mark_ms=now_ms
            )
        return p

    # ---------------------------------------------------------------- events

    def slave_connected(self, broker_id: int, *, now_ms: int, async_learner: bool = False) -> None:
        """A slave handshook (a second connection of the same slave replaces the first)."""
        if broker_id == self._master:
            return
        p = self._progress(broker_id, now_ms)
        p.connected = True
        p.async_learner = async_learner
        p.acked = None
        p.mark_offset = None

    def slave_disconnected(self, broker_id: int, *, now_ms: int) -> None:
        p = self._slaves.get(broker_id)
        if p is None or not p.connected:
            return
        p.connected = False
        p.lost_connection = True
        p.acked = None
        p.mark_offset = None

    def slave_acked(
        self, broker_id: int, offset: int, *, master_max_offset: int, now_ms: int
    ) -> None:
        """Slave ``broker_id`` holds every byte below ``offset`` (the connection checked that
        acks never go back on one connection)."""
        p = self._slaves.get(broker_id)
        if p is None or not p.connected:
            return
        p.acked = offset
        if offset >= master_max_offset:
            p.last_caught_up_ms = max(p.last_caught_up_ms, now_ms)
            p.mark_offset = None
        elif p.mark_offset is None:
            p.mark_ms, p.mark_offset = now_ms, master_max_offset
        elif offset >= p.mark_offset:
            p.last_caught_up_ms = max(p.last_caught_up_ms, p.mark_ms)
            p.mark_ms, p.mark_offset = now_ms, master_max_offset

    def tick(self, *, master_max_offset: int, now_ms: int) -> None:
        """A caught-up slave stays caught up while nothing is written."""
        for p in self._slaves.values():
            if p.connected and p.acked is not None and p.acked >= master_max_offset:
                p.last_caught_up_ms = max(p.last_caught_up_ms, now_ms)

    def update_confirm_offset(self, master_max_offset: int) -> bool:
        """Recompute the confirm offset; True when it advanced."""
        low = master_max_offset
        for member in self.counted_members:
            if member == self._master:
                continue
            p = self._slaves.get(member)
            if p is None or not p.connected or p.acked is None:
                return False  # bug #6662: an unknown ack holds the confirm offset
            if p.acked < low:
                low = p.acked
        if low > self._confirm:
            self._confirm = low
            return True
        return False

    # ---------------------------------------------------------------- changes of the set

    def _should_shrink(self, p: SlaveProgress, now_ms: int) -> bool:
        if p.lost_connection:
            return True  # even if back: it may have lost unflushed bytes it had acked
        if p.acked is not None and p.acked < self._confirm:
            return True  # it lacks bytes the set promised
        return now_ms - p.last_caught_up_ms >= self._max_not_catchup

    def _may_expand(self, p: SlaveProgress) -> bool:
        return (
            p.connected
            and not p.async_learner
            and p.acked is not None
            and p.acked >= self._confirm
            and p.acked >= self._epoch_start
        )

    def next_proposal(self, *, now_ms: int) -> frozenset[int] | None:
        """The set to propose now (it is then in flight), or None: nothing to change, a
        proposal already in flight, or too soon after a failure."""
        if self._proposed is not None or now_ms < self._retry_at:
            return None
        shrink = {
            m
            for m in self._members
            if m != self._master and self._should_shrink(self._progress(m, now_ms), now_ms)
        }
        expand = {
            p.broker_id
            for p in self._slaves.values()
            if p.broker_id not in self._members and self._may_expand(p)
        }
        if not shrink and not expand:
            return None
        self._proposed = (self._members - shrink) | expand
        return self._proposed

    def proposal_accepted(self, members: frozenset[int], epoch: int, *, now_ms: int) -> None:
        """The controller accepted ``members`` as the set of syncStateSetEpoch ``epoch``."""
        if self._proposed == members:
            self._proposed = None
        self.set_members(members, epoch, now_ms=now_ms)

    def proposal_failed(self, members: frozenset[int], *, now_ms: int) -> None:
        if self._proposed == members:
            self._proposed = None
            self._retry_at = now_ms + self._retry_after

    def set_members(self, members: Iterable[int], epoch: int, *, now_ms: int) -> bool:
        """Adopt a set the controller holds (a newer ``epoch`` only); True when adopted.

        A member that joins starts its not-caught-up clock now.
        """
        if epoch <= self._epoch:
            return False
        new = frozenset(members) | {self._master}
        for joined in new - self._members:
            p = self._progress(joined, now_ms)
            p.last_caught_up_ms = max(p.last_caught_up_ms, now_ms)
        for left in self._members - new:
            if (p_left := self._slaves.get(left)) is not None:
                p_left.lost_connection = False  # out of the set: a candidate like any other
        self._members = new
        self._epoch = epoch
        return True
