"""Broker liveness on the active controller: soft state, never replicated, never in a snapshot.

A broker is alive while its last heartbeat is at most its own ``timeout_ms`` old (a heartbeat
whose timeout is not positive gets the table's default) and the connection it last heartbeated
on is open. Closing that connection makes it inactive at once; its next heartbeat revives it.

Judging a broker dead is reserved to the active controller, and only after a grace period:
:meth:`BrokerLiveTable.became_active` starts a window of one broker-heartbeat timeout (the largest
of the default and every known broker's timeout) during which :meth:`expired` reports nothing and
:meth:`declared_dead` says yes only for a broker whose connection to this controller closed. So
a table that is stale (filled during an earlier leadership) or empty (a fresh leader) never
deposes a master by silence. :meth:`stood_still` starts the same window after the controller
itself could not listen for a while (its loop ran late). ``is_alive`` stays honest throughout:
only a recent heartbeat makes a broker alive, so an election during the grace period (of a group
without a master, once every candidate is alive: scheduler.py) picks among brokers known alive.

Time is an int of milliseconds passed in by the caller (a monotonic clock); no clock is read here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from controller.metadata.election import ElectionInfo

DEFAULT_BROKER_TIMEOUT_MS: Final = 3000
_NEVER: Final = 2**60
"""Later than any deadline (milliseconds)."""

BrokerKey = tuple[str, int]
"""(broker_name, broker_id)"""


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerLiveInfo:
    """A broker's last heartbeat, as the active controller received it (a heartbeat makes a new
    one). Its ``__init__`` is written out: one is made per heartbeat, and the one the dataclasses
    module writes stays interpreted when compiled (docs/compiled.md); the dataclass still gives
    the fields, eq, hash, repr and frozenness."""

    cluster: str
    broker_name: str
    broker_id: int
    address: str
    epoch: int
    max_offset: int
    confirm_offset: int
    election_priority: int
    timeout_ms: int
    connection_id: int
    last_heartbeat_ms: int
    damaged: int = 0
    """Damaged CommitLog records it reports holding unrepaired (issue 31)."""

    def __init__(
        self,
        *,
        cluster: str,
        broker_name: str,
        broker_id: int,
        address: str,
        epoch: int,
        max_offset: int,
        confirm_offset: int,
        election_priority: int,
        timeout_ms: int,
        connection_id: int,
        last_heartbeat_ms: int,
        damaged: int = 0,
    ) -> None:
        # Frozen: object.__setattr__ passes the dataclass's refusal in pure Python, and mypyc
        # compiles it to a native store.
        object.__setattr__(self, "cluster", cluster)
        object.__setattr__(self, "broker_name", broker_name)
        object.__setattr__(self, "broker_id", broker_id)
        object.__setattr__(self, "address", address)
        object.__setattr__(self, "epoch", epoch)
        object.__setattr__(self, "max_offset", max_offset)
        object.__setattr__(self, "confirm_offset", confirm_offset)
        object.__setattr__(self, "election_priority", election_priority)
        object.__setattr__(self, "timeout_ms", timeout_ms)
        object.__setattr__(self, "connection_id", connection_id)
        object.__setattr__(self, "last_heartbeat_ms", last_heartbeat_ms)
        object.__setattr__(self, "damaged", damaged)

    def deadline_ms(self) -> int:
        """The last instant at which the broker is still alive by its timeout."""
        return self.last_heartbeat_ms + self.timeout_ms

    def election_info(self) -> ElectionInfo:
        return ElectionInfo(
            epoch=self.epoch,
            max_offset=self.max_offset,
            election_priority=self.election_priority,
            damaged=self.damaged,
        )


@dataclass(slots=True)
class _Entry:
    info: BrokerLiveInfo
    closed: bool = False  # its connection closed after its last heartbeat
    reported: bool = False  # expired() or on_connection_closed() already reported it
    since_ms: int = 0  # when it last became alive: new, or back after it expired or closed


class BrokerLiveTable:
    __slots__ = (
        "_active",
        "_active_since_ms",
        "_by_connection",
        "_changes",
        "_default_timeout_ms",
        "_entries",
        "_grace_until_ms",
        "_next_expiry_ms",
    )

    def __init__(self, *, default_timeout_ms: int = DEFAULT_BROKER_TIMEOUT_MS) -> None:
        if default_timeout_ms <= 0:
            raise ValueError("default_timeout_ms must be positive")
        self._default_timeout_ms = default_timeout_ms
        self._entries: dict[BrokerKey, _Entry] = {}
        self._by_connection: dict[int, set[BrokerKey]] = {}
        self._active = False
        self._active_since_ms = 0
        self._grace_until_ms = 0
        self._next_expiry_ms = _NEVER
        """At most the earliest deadline of a broker not reported yet: until then
        :meth:`expired` has nothing to report and looks at no entry (the election scan asks ten
        times a second, a heartbeat moves one deadline every half second)."""
        self._changes = 0
        """See :attr:`changes`."""

    # Leadership --------------------------------------------------------------------------------

    @property
    def changes(self) -> int:
        """Moves whenever a judgement of this table may change other than by a deadline
        passing: a broker heard from anew (new, after its deadline, after its connection
        closed) or given an earlier deadline, a connection closed, a broker forgotten, the
        leadership or the grace period moved. While it stays, every broker alive at some
        instant stays alive until :meth:`alive_until` of that instant, and every other one
        stays not alive (the election scan keeps its verdicts that long)."""
        return self._changes

    @property
    def active(self) -> bool:
        """True between became_active() and became_standby()."""
        return self._active

    @property
    def active_since_ms(self) -> int:
        """When this controller last became the active one (0 before it ever did)."""
        return self._active_since_ms

    def became_active(self, now_ms: int) -> None:
        """This controller just became the active one: start the grace period."""
        self._active = True
        self._active_since_ms = now_ms
        self._changes += 1
        self._grace_until_ms = self._grace_end(now_ms)
        for entry in self._entries.values():
            entry.reported = False  # a previous leadership's verdicts are not ours
        self._next_expiry_ms = -_NEVER  # every entry is a candidate again: look at them all

    def stood_still(self, now_ms: int) -> None:
        """This controller could not hear anyone for a while (its scan came late: its process
        or its whole host stood still). Silence up to now is no evidence against a broker, so
        the grace period starts again, as for a newly active controller; the heartbeats that
        waited in the sockets meanwhile arrive within it. Safe for fencing: the controller only
        judges later than it would have."""
        if self._active:
            self._changes += 1
            self._grace_until_ms = max(self._grace_until_ms, self._grace_end(now_ms))

    def _grace_end(self, now_ms: int) -> int:
        """A grace period from ``now_ms``: the longest broker timeout (default or known)."""
        timeouts = [e.info.timeout_ms for e in self._entries.values()]
        return now_ms + max([self._default_timeout_ms, *timeouts])

    def became_standby(self) -> None:
        """This controller is no longer the active one: it judges nobody."""
        self._active = False
        self._changes += 1

    def in_grace(self, now_ms: int) -> bool:
        """True while a newly active controller must not declare brokers dead by silence."""
        return self._active and now_ms < self._grace_until_ms

    def heard_since_active(self, broker_name: str, broker_id: int) -> bool:
        """Whether this active controller has heard the broker since it became active (what it
        knows of the broker's figures that are soft state, like its traffic, is its own)."""
        entry = self._entries.get((broker_name, broker_id))
        return (
            self._active
            and entry is not None
            and entry.info.last_heartbeat_ms >= self._active_since_ms
        )

    # Inputs ------------------------------------------------------------------------------------

    def on_heartbeat(
        self,
        *,
        cluster: str,
        broker_name: str,
        broker_id: int,
        address: str,
        now_ms: int,
        epoch: int,
        max_offset: int,
        confirm_offset: int,
        election_priority: int,
        timeout_ms: int,
        connection_id: int,
        damaged: int = 0,
    ) -> bool:
        """Record a heartbeat. True when the broker just became alive (new, expired or closed)."""
        key = (broker_name, broker_id)
        old = self._entries.get(key)
        was_alive = _alive(old, now_ms)
        if old is None or old.closed or old.info.connection_id != connection_id:
            # The connection index changes only when the connection does (not per heartbeat).
            if old is not None:
                self._unindex(key, old.info.connection_id)
            self._by_connection.setdefault(connection_id, set()).add(key)
        if old is not None:
            now_ms = max(now_ms, old.info.last_heartbeat_ms)
        info = BrokerLiveInfo(
            cluster=cluster,
            broker_name=broker_name,
            broker_id=broker_id,
            address=address,
            epoch=epoch,
            max_offset=max_offset,
            confirm_offset=confirm_offset,
            election_priority=election_priority,
            timeout_ms=timeout_ms if timeout_ms > 0 else self._default_timeout_ms,
            connection_id=connection_id,
            last_heartbeat_ms=now_ms,
            damaged=damaged,
        )
        deadline = info.deadline_ms()
        if old is None:
            self._entries[key] = _Entry(info=info, since_ms=now_ms)
            self._changes += 1
        else:
            if not was_alive or deadline < old.info.deadline_ms():
                self._changes += 1
            if not was_alive:
                old.since_ms = now_ms
            old.info, old.closed, old.reported = info, False, False
        if deadline < self._next_expiry_ms:
            self._next_expiry_ms = deadline
        return not was_alive

    def on_connection_closed(self, connection_id: int) -> list[BrokerKey]:
        """Brokers whose heartbeat connection this was: inactive from now on (until their next
        heartbeat). Returns the ones that were not already reported inactive, sorted."""
        keys = self._by_connection.pop(connection_id, set())
        if keys:
            self._changes += 1
        made_inactive: list[BrokerKey] = []
        for key in sorted(keys):
            entry = self._entries[key]
            entry.closed = True
            if not entry.reported:
                entry.reported = True
                made_inactive.append(key)
        return made_inactive

    def forget(self, broker_name: str, broker_ids: frozenset[int] | None = None) -> None:
        """Drop the brokers (all of the group when None), e.g. after CleanBrokerData."""
        for key in [k for k in self._entries if k[0] == broker_name]:
            if broker_ids is None or key[1] in broker_ids:
                entry = self._entries.pop(key)
                self._unindex(key, entry.info.connection_id)
                self._changes += 1

    def _unindex(self, key: BrokerKey, connection_id: int) -> None:
        _unindex(self._by_connection, key, connection_id)

    # Judgements --------------------------------------------------------------------------------

    def is_alive(self, broker_name: str, broker_id: int, now_ms: int) -> bool:
        return _alive(self._entries.get((broker_name, broker_id)), now_ms)

    def alive_predicate(self, now_ms: int) -> Callable[[str, int], bool]:
        """``is_alive`` at ``now_ms``, in the shape the state machine takes."""
        return lambda broker_name, broker_id: self.is_alive(broker_name, broker_id, now_ms)

    def declared_dead(self, broker_name: str, broker_id: int, now_ms: int) -> bool:
        """Whether the active controller may act on this broker being dead (see module doc)."""
        if not self._active:
            return False
        entry = self._entries.get((broker_name, broker_id))
        if entry is not None and entry.closed:
            return True
        if self.in_grace(now_ms):
            return False
        return not self.is_alive(broker_name, broker_id, now_ms)

    def expired(self, now_ms: int) -> list[BrokerKey]:
        """Brokers whose timeout passed since the last call: reported once each, sorted.

        Nothing while standby or in the grace period (they are reported when it ends).
        """
        if not self._active or self.in_grace(now_ms) or now_ms <= self._next_expiry_ms:
            return []
        found: list[BrokerKey] = []
        earliest = _NEVER
        for key, entry in self._entries.items():
            if entry.reported:
                continue
            deadline = entry.info.deadline_ms()
            if now_ms > deadline:
                entry.reported = True
                found.append(key)
            elif deadline < earliest:
                earliest = deadline
        self._next_expiry_ms = earliest
        return sorted(found)

    def alive_until(self, now_ms: int) -> int:
        """The earliest deadline among the brokers alive at ``now_ms`` (later than any
        deadline when none is): while :attr:`changes` stays, none of them turns inactive
        before it. Looks at every broker."""
        earliest = _NEVER
        for entry in self._entries.values():
            if _alive(entry, now_ms):
                deadline = entry.info.deadline_ms()
                if deadline < earliest:
                    earliest = deadline
        return earliest

    # Views -------------------------------------------------------------------------------------

    def get(self, broker_name: str, broker_id: int) -> BrokerLiveInfo | None:
        """The broker's last heartbeat, alive or not."""
        entry = self._entries.get((broker_name, broker_id))
        return None if entry is None else entry.info

    def brokers(self, broker_name: str) -> list[BrokerLiveInfo]:
        """Last heartbeats of the group's brokers, alive or not, by broker id."""
        return sorted(
            (e.info for k, e in self._entries.items() if k[0] == broker_name),
            key=lambda info: info.broker_id,
        )

    def alive_since(self, broker_name: str, now_ms: int) -> int | None:
        """When the first of the group's brokers alive at ``now_ms`` became alive (None: none
        is). Looks at every broker."""
        found: int | None = None
        for (name, _), entry in self._entries.items():
            alive = name == broker_name and _alive(entry, now_ms)
            if alive and (found is None or entry.since_ms < found):
                found = entry.since_ms
        return found

    def election_view(self, broker_name: str, now_ms: int) -> dict[int, ElectionInfo]:
        """The group's alive brokers and what the election policy needs of each."""
        return {
            info.broker_id: info.election_info()
            for info in self.brokers(broker_name)
            if self.is_alive(broker_name, info.broker_id, now_ms)
        }


@dataclass(frozen=True, slots=True)
class _Binding:
    connection_id: int
    bound_at_ms: int


class BrokerBindings:
    """Which connection registered each broker (CONTROLLER_REGISTER_BROKER) on this controller.

    Soft state, like the live table. Until authentication exists, a broker id is spoken for by
    the connection that registered it: heartbeats for it count only from that connection, and
    another connection may take the id over only with the broker's register code, or once the
    holder is gone (its connection closed, or it is neither alive nor freshly registered). So a
    forged heartbeat or registration from a stray connection cannot keep a dead master alive or
    move a live master's address.
    """

    __slots__ = ("_by_connection", "_by_key")

    def __init__(self) -> None:
        self._by_key: dict[BrokerKey, _Binding] = {}
        self._by_connection: dict[int, set[BrokerKey]] = {}
        """Connection id -> the brokers it holds: a closed connection frees only those (issue
        34: every connection closed walked every broker's binding)."""

    def holder(self, broker_name: str, broker_id: int) -> int | None:
        """The connection id that registered the broker, None when none did (or it closed)."""
        binding = self._by_key.get((broker_name, broker_id))
        return None if binding is None else binding.connection_id

    def may_bind(
        self,
        broker_name: str,
        broker_id: int,
        connection_id: int,
        *,
        code_verified: bool,
        alive: bool,
        now_ms: int,
        hold_ms: int,
    ) -> bool:
        """Whether a registration from ``connection_id`` may (re)bind the broker now.

        Yes for its own connection, for a free id, with the register code, or when the holder is
        neither alive nor registered within ``hold_ms``.
        """
        binding = self._by_key.get((broker_name, broker_id))
        if binding is None or binding.connection_id == connection_id or code_verified:
            return True
        return not alive and now_ms - binding.bound_at_ms > hold_ms

    def bind(self, broker_name: str, broker_id: int, connection_id: int, now_ms: int) -> None:
        key = (broker_name, broker_id)
        old = self._by_key.get(key)
        if old is not None and old.connection_id != connection_id:
            self._unindex(key, old.connection_id)
        self._by_key[key] = _Binding(connection_id, now_ms)
        self._by_connection.setdefault(connection_id, set()).add(key)

    def _unindex(self, key: BrokerKey, connection_id: int) -> None:
        _unindex(self._by_connection, key, connection_id)

    def connection_closed(self, connection_id: int) -> list[BrokerKey]:
        """Free the brokers this connection held; returns their keys, sorted."""
        freed = sorted(self._by_connection.pop(connection_id, ()))
        for key in freed:
            del self._by_key[key]
        return freed

    def forget(self, broker_name: str, broker_ids: frozenset[int] | None = None) -> None:
        """Free the brokers (all of the group when None), e.g. after CleanBrokerData."""
        for key in [k for k in self._by_key if k[0] == broker_name]:
            if broker_ids is None or key[1] in broker_ids:
                self._unindex(key, self._by_key.pop(key).connection_id)


def _unindex(index: dict[int, set[BrokerKey]], key: BrokerKey, connection_id: int) -> None:
    """Take ``key`` out of ``connection_id``'s set in a connection index (the set goes when
    empty)."""
    keys = index.get(connection_id)
    if keys is not None:
        keys.discard(key)
        if not keys:
            del index[connection_id]


def _alive(entry: _Entry | None, now_ms: int) -> bool:
    """Whether ``entry`` is a live registration at ``now_ms`` (heard from, connection open)."""
    return entry is not None and not entry.closed and now_ms <= entry.info.deadline_ms()
