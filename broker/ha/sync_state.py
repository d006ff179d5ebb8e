"""The master's SyncStateSet and confirm offset, as pure logic (no clock, no asyncio, no sockets).

The driver (:class:`broker.ha.service.HAService`) feeds it what happens, with the time in
milliseconds and the master's max offset, and reads back what to do::

    tracker.set_replicas({id: address})                      the group's registered replicas
    tracker.slave_connected(id, address=, now_ms=, async_learner=)  -> None, or why it is refused
    tracker.slave_acked(id, offset, master_max_offset=, now_ms=)
    tracker.slave_disconnected(id, now_ms=)
    tracker.tick(master_max_offset=, now_ms=)               periodically (shrink deadlines)
    tracker.update_confirm_offset(master_max_offset)        after each of the above -> advanced?
    tracker.next_proposal(now_ms=)                          -> a set to send, or None
    tracker.proposal_accepted(members, epoch, now_ms=, attempt=)    the controller said yes
    tracker.proposal_failed(members, now_ms=, attempt=)             ... said no (it was evaluated)
    tracker.proposal_unknown(members, now_ms=, attempt=)            no answer: it may have committed
    tracker.set_members(members, epoch, now_ms=)            a newer set learnt from the controllers

Rules (DESIGN.md sections 5-7, RocketMQ's AutoSwitchHAService):

- **Who may count.** A connection counts for the set only when its broker id is a registered
  replica of this group at the address the controllers know (:meth:`SyncState.set_replicas`;
  without a view, e.g. a broker without controllers, every id may), and it is the id's only live
  connection: a second one is refused until the first is reported lost. An id that lost its
  connection during this mastership counts again only after the shrink that loss causes was
  accepted (it may have lost unflushed bytes it had acked, and the new connection may not even be
  the same process). Acks are bounded by what was sent on their connection
  (:class:`~broker.ha.master_conn.MasterConnection` closes a connection whose ack passes it).
- **Shrink** a member that lost its connection during this mastership (even if it is back),
  that the controllers no longer list (or list at another address than its connection's), whose
  ack is below the confirm offset, or whose last caught-up time is ``max_time_not_catchup_ms`` old
  (a member that never connected counts from the mastership's start, or from when it joined).
- **Caught up**: an ack at or past the master's max offset catches a slave up *now*. Under a
  steady stream a slave never acks the very latest byte, so each slave also carries a *mark*
  ``(time, master max offset then)``: an ack reaching the mark means the slave was caught up at
  the mark's time, and the mark moves to ``(now, master max offset now)`` (RocketMQ's
  lastMasterMaxOffset / lastTransferTime).
- **Expand** a connected, countable slave (not an isAsyncLearner) whose ack is at least the
  current confirm offset and at least the start offset of the current master epoch. Ids the
  controllers do not list never enter a proposal.
- **One change at a time, shrinks first.** A shrink is proposed alone (never bundled with an
  expansion), so a rejected expansion never blocks it; a rejected shrink or expansion is retried
  no sooner than ``retry_after_ms``, each on its own clock.
- **Union while undecided.** While a proposal is in flight, acks count against the **union** of
  the old and the proposed sets (RocketMQ bug #5663), so a shrink only frees the confirm offset
  once accepted and an expansion binds at once. When the answer is lost (a timeout, the
  controller gone, an answer that does not settle it) the proposal *may* have committed: the
  union keeps counting and the same proposal is sent again every ``retry_after_ms`` until an
  answer settles it or a newer set is learnt from the controllers (whose epoch passed the
  proposal's base, so it can no longer commit).
- **confirmOffset** = the smallest ack among the counted members (the master's own max offset for
  itself). It never advances while a counted member cannot count (disconnected, no ack on its
  current connection (RocketMQ bug #6662), not registered, or back after a loss), and it never
  goes back.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from broker.ha.refusals import DUPLICATE_ID, NOT_A_REPLICA, Refusal

__all__ = [
    "DEFAULT_MAX_TIME_NOT_CATCHUP_MS",
    "EXPECTED_NOT_ALIVE_REFUSALS",
    "NotAliveRefusals",
    "SlaveProgress",
    "SyncState",
]

DEFAULT_MAX_TIME_NOT_CATCHUP_MS: Final = 15_000
DEFAULT_RETRY_AFTER_MS: Final = 1_000


@dataclass(slots=True, kw_only=True)
class SlaveProgress:
    """What the master knows of one slave during this mastership."""

    broker_id: int
    address: str = ""
    """The broker address its current (or last) connection claimed in its handshake."""
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
        "_attempt",
        "_confirm",
        "_epoch",
        "_epoch_start",
        "_expand_retry_at",
        "_master",
        "_max_not_catchup",
        "_members",
        "_proposed",
        "_replicas",
        "_retry_after",
        "_shrink_retry_at",
        "_slaves",
        "_unknown_retry_at",
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
        replicas: Mapping[int, str] | None = None,
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
        self._shrink_retry_at = now_ms
        self._expand_retry_at = now_ms
        self._proposed: frozenset[int] | None = None
        self._unknown_retry_at: int | None = None  # set while the proposal's outcome is unknown
        self._attempt = 0
        self._replicas: dict[int, str] | None = None if replicas is None else dict(replicas)
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
        """The set sent to the controller and not settled yet."""
        return self._proposed

    @property
    def outcome_unknown(self) -> bool:
        """The proposal in flight got no answer that settles it: it may have committed."""
        return self._unknown_retry_at is not None

    @property
    def attempt(self) -> int:
        """Numbers each proposal sent (a re-sent one too); answers name the attempt they settle."""
        return self._attempt

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

    @property
    def replicas(self) -> Mapping[int, str] | None:
        """The group's registered replicas (id -> address) as last learnt, or None (no view)."""
        return self._replicas

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

    def registered(self, broker_id: int, address: str | None = None) -> bool:
        """Whether the controllers list ``broker_id`` in this group (at ``address`` if given)."""
        if self._replicas is None:
            return True
        known = self._replicas.get(broker_id)
        return known is not None and (address is None or known == address)

    def _countable(self, p: SlaveProgress) -> bool:
        """Whether ``p``'s acks may count for the set now."""
        return (
            p.connected
            and p.acked is not None
            and not p.lost_connection
            and self.registered(p.broker_id, p.address)
        )

    # ---------------------------------------------------------------- events

    def set_replicas(self, replicas: Mapping[int, str]) -> None:
        """The group's registered replicas (broker id -> broker address), as the controllers
        list them now (their answer to a registration or a poll, never a push)."""
        self._replicas = dict(replicas)

    def slave_connected(
        self, broker_id: int, *, address: str = "", now_ms: int, async_learner: bool = False
    ) -> Refusal | None:
        """A slave handshook: None when the connection is admitted, else why it is refused (its
        id is the master's, it is not a registered replica at ``address``, or it already has a
        live connection)."""
        if broker_id == self._master:
            return Refusal(NOT_A_REPLICA, f"a slave claims broker id {broker_id}, the master's own")
        if not self.registered(broker_id, address):
            known = None if self._replicas is None else self._replicas.get(broker_id)
            where = "is not registered" if known is None else f"is registered at {known}"
            return Refusal(
                NOT_A_REPLICA,
                f"broker id {broker_id} (claiming {address or 'no address'}) {where} with the "
                "controllers for this group",
                unknown_yet=True,
            )
        p = self._progress(broker_id, now_ms)
        if p.connected:
            return Refusal(
                DUPLICATE_ID,
                f"broker id {broker_id} already has a live HA connection; a new one is refused "
                "until that one is lost",
            )
        p.connected = True
        if broker_id not in self.counted_members:
            p.lost_connection = False  # a loss matters only while the set counts it
        p.address = address
        p.async_learner = async_learner
        p.acked = None
        p.mark_offset = None
        return None

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
        acks never go back on one connection nor pass what it was sent)."""
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
            if p is None or not self._countable(p):
                return False  # bug #6662: an ack that cannot count holds the confirm offset
            assert p.acked is not None
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
        if not self.registered(p.broker_id, p.address if p.connected else None):
            return True  # the controllers no longer list it (there)
        if p.acked is not None and p.acked < self._confirm:
            return True  # it lacks bytes the set promised
        return now_ms - p.last_caught_up_ms >= self._max_not_catchup

    def _may_expand(self, p: SlaveProgress) -> bool:
        return (
            self._countable(p)
            and not p.async_learner
            and p.acked is not None
            and p.acked >= self._confirm
            and p.acked >= self._epoch_start
        )

    def next_proposal(self, *, now_ms: int) -> frozenset[int] | None:
        """The set to propose now (it is then in flight, as :attr:`attempt`), or None: nothing
        to change, a proposal already in flight, or too soon after a failure. A proposal whose
        outcome is unknown is returned again (the same set, from the same base epoch) every
        ``retry_after_ms``."""
        if self._proposed is not None:
            if self._unknown_retry_at is None or now_ms < self._unknown_retry_at:
                return None
            self._unknown_retry_at = None  # in flight again
            self._attempt += 1
            return self._proposed
        shrink = {
            m
            for m in self._members
            if m != self._master and self._should_shrink(self._progress(m, now_ms), now_ms)
        }
        if shrink:
            if now_ms < self._shrink_retry_at:
                return None
            self._proposed = self._members - shrink
        else:
            if now_ms < self._expand_retry_at:
                return None
            expand = {
                p.broker_id
                for p in self._slaves.values()
                if p.broker_id not in self._members and self._may_expand(p)
            }
            if not expand:
                return None
            self._proposed = self._members | expand
        self._attempt += 1
        return self._proposed

    def _settles(self, members: frozenset[int], attempt: int | None) -> bool:
        """Whether an answer about ``members`` (for ``attempt``) is about the proposal in flight."""
        return self._proposed == members and (attempt is None or attempt == self._attempt)

    def proposal_accepted(
        self, members: frozenset[int], epoch: int, *, now_ms: int, attempt: int | None = None
    ) -> None:
        """The controller accepted ``members`` as the set of syncStateSetEpoch ``epoch`` (it
        also answers so when the set already is ``members``: an earlier attempt committed)."""
        if self.set_members(members, epoch, now_ms=now_ms):
            return  # a newer set settles any proposal in flight
        if self._settles(frozenset(members), attempt):
            self._proposed = None
            self._unknown_retry_at = None
            self._forget_losses()

    def proposal_failed(
        self, members: frozenset[int], *, now_ms: int, attempt: int | None = None
    ) -> None:
        """The controller evaluated the proposal and refused it: nothing changed."""
        if not self._settles(frozenset(members), attempt):
            return
        shrink = not members >= self._members
        self._proposed = None
        self._unknown_retry_at = None
        self._forget_losses()
        if shrink:
            self._shrink_retry_at = now_ms + self._retry_after
        else:
            self._expand_retry_at = now_ms + self._retry_after

    def proposal_unknown(
        self, members: frozenset[int], *, now_ms: int, attempt: int | None = None
    ) -> None:
        """No answer settles the proposal (lost, timed out, or a stale base epoch): it may have
        committed. Keep counting the union; send it again after ``retry_after_ms``."""
        if self._settles(frozenset(members), attempt):
            self._unknown_retry_at = now_ms + self._retry_after

    def set_members(self, members: Iterable[int], epoch: int, *, now_ms: int) -> bool:
        """Adopt a set the controller holds (a newer ``epoch`` only); True when adopted.

        A member that joins starts its not-caught-up clock now. A proposal in flight is settled
        by it: it was based on an older epoch, so it is this set or can no longer commit.
        """
        if epoch <= self._epoch:
            return False
        new = frozenset(members) | {self._master}
        for joined in new - self._members:
            p = self._progress(joined, now_ms)
            p.last_caught_up_ms = max(p.last_caught_up_ms, now_ms)
        self._members = new
        self._epoch = epoch
        self._proposed = None
        self._unknown_retry_at = None
        self._forget_losses()
        return True

    def outdated(self, members: Iterable[int]) -> bool:
        """Whether ``members`` (a proposal) keeps a slave whose connection was lost since: the
        controllers refusing it (that slave is not alive for them either) is expected, and the
        next proposal drops it."""
        for broker_id in members:
            p = self._slaves.get(broker_id)
            if broker_id != self._master and p is not None and p.lost_connection:
                return True
        return False

    def _forget_losses(self) -> None:
        """An id the set no longer counts is a candidate like any other: its lost connection
        no longer matters."""
        counted = self.counted_members
        for p in self._slaves.values():
            if p.broker_id not in counted:
                p.lost_connection = False


EXPECTED_NOT_ALIVE_REFUSALS: Final = 3
"""How many times in a row a proposal may be refused as naming a replica the controllers do not
hear (yet, or any more) before the refusal is a warning (:class:`NotAliveRefusals`)."""


class NotAliveRefusals:
    """Tells a refusal of a proposed SyncStateSet that a healthy group sees (logged at info) from
    one that signals trouble (a warning).

    Such refusals, all "not alive", come from the master's view of its slaves lagging the
    controllers' for a moment:

    - a shrink that still names a second slave lost since (two slaves stopped together), whether
      the master noticed that loss already (``outdated``) or not yet: the controllers hear a
      slave's controller connection close a little before the master's HA connection to it does;
    - an expansion sent before the joining slave's first heartbeat reached the active controller
      (a slave catches up over HA faster than the controllers hear it at start-up, more so on a
      loaded host).

    A refused proposal is sent again every ``propose_retry_ms``; refused more than
    :data:`EXPECTED_NOT_ALIVE_REFUSALS` times in a row (and not outdated), the controllers do not
    hear a slave this master does, which is worth a warning."""

    __slots__ = ("_count", "_last")

    def __init__(self) -> None:
        self._last: frozenset[int] = frozenset()
        self._count = 0

    def refused(self, proposal: frozenset[int], not_alive: bool, *, outdated: bool) -> bool:
        """A settled refusal of ``proposal`` (``not_alive``: the controllers' reason); whether it
        is expected. ``outdated``: :meth:`SyncState.outdated`."""
        if not not_alive:
            self.accepted()
            return False
        self._count = self._count + 1 if self._last == proposal else 1
        self._last = proposal
        if outdated:
            return True
        return self._count <= EXPECTED_NOT_ALIVE_REFUSALS

    def accepted(self) -> None:
        """A proposal went through (or was refused for another reason): the streak ends."""
        self._last = frozenset()
        self._count = 0
