"""Consumer group membership: who is in a group, for the clients' rebalance.

A client is a member while it heart-beats; it leaves when it unregisters, when its connection
closes, or when it has been silent too long: our own clients (our SDK, the gRPC front's) after
``client_expiry_ms``; classic members (RocketMQ's remoting clients, which heart-beat every 30 s)
after :data:`CHANNEL_EXPIRED_MS`, RocketMQ's rule (or ``client_expiry_ms`` if that is longer).
Time is passed in (ms).

Each member is recorded with how it consumes, as its heartbeat said: ``pop`` (it holds no queue:
every POP member reads every queue), ``push`` or ``pull`` (it takes its share of the queues), or
"" (not said: an older client, taken as holding queues). The member list the rebalancing members
share the queues by leaves the POP members out.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from protocol.broker_requests.clients import POP


@dataclass(frozen=True, slots=True)
class ClientInfo:
    """Who a client says it is: its language and version ("" unknown), and how it reaches the
    broker: remoting (our SDK), gRPC (the official RocketMQ 5 clients, through a broker's gRPC
    front) or classic (RocketMQ's remoting clients)."""

    language: str = ""
    version: str = ""
    protocol: str = "remoting"


CHANNEL_EXPIRED_MS = 120_000
"""A classic client silent this long is forgotten: RocketMQ's channelExpiredTimeout. Its clients
(the Java client, ali-ons) heart-beat every 30 s, so ``client_expiry_ms`` (10 s) would drop them
between two heartbeats."""

CLASSIC = "classic"
""":attr:`ClientInfo.protocol` of RocketMQ's remoting clients."""

REMOTING_CLIENT = ClientInfo()
"""A client of our remoting protocol that did not say its language or version."""


@dataclass(slots=True)
class Member:
    client_id: str
    topic: str
    last_seen_ms: int
    connection_id: int
    address: str = ""
    """The member's address as this broker saw its connection (host:port)."""
    info: ClientInfo = REMOTING_CLIENT
    consume_type: str = ""
    """pop, push, pull, or "" when its heartbeat did not say."""


ConnectionIndex = dict[int, set[tuple[str, str]]]
"""connection id -> the (group, client id) pairs heard over it."""


def unindex(index: ConnectionIndex, connection_id: int, key: tuple[str, str]) -> None:
    """``key`` out of ``index``'s entry for ``connection_id`` (the entry gone once empty)."""
    keys = index.get(connection_id)
    if keys is not None:
        keys.discard(key)
        if not keys:
            del index[connection_id]


class ConsumerGroups:
    def __init__(self, expiry_ms: int) -> None:
        self._expiry_ms = expiry_ms
        self._groups: dict[str, dict[str, Member]] = {}
        self._by_connection: ConnectionIndex = {}
        """connection id -> (group, client id) of the members that heart-beat over it: a closed
        connection drops its members without a scan over every group's (issue 34)."""
        self._lists: dict[str, tuple[int, tuple[str, ...]]] = {}
        """group -> (the last instant it holds at, its live queue-holding members' ids sorted):
        the list every member of a group asks for at each rebalance, built once per change
        instead of per ask (issue 34: O(members) per ask made a group's rebalance O(members^2)
        on the broker). It holds until a member joins, leaves or comes back, or its first
        member's expiry."""

    def set_expiry_ms(self, expiry_ms: int) -> None:
        """A member silent for longer than ``expiry_ms`` leaves, from the next check on (a
        classic member: :data:`CHANNEL_EXPIRED_MS` unless ``expiry_ms`` is longer)."""
        self._expiry_ms = expiry_ms
        self._lists.clear()

    def _deadline(self, m: Member) -> int:
        """The last instant ``m`` is live at without another heartbeat."""
        expiry = self._expiry_ms
        if m.info.protocol == CLASSIC:
            expiry = max(expiry, CHANNEL_EXPIRED_MS)
        return m.last_seen_ms + expiry

    def _live(self, m: Member, now_ms: int) -> bool:
        return now_ms <= self._deadline(m)

    def heartbeat(
        self,
        group: str,
        client_id: str,
        topic: str,
        now_ms: int,
        connection_id: int,
        address: str = "",
        info: ClientInfo = REMOTING_CLIENT,
        consume_type: str = "",
    ) -> bool:
        """Record a heartbeat; True when the client is new to the group."""
        members = self._groups.setdefault(group, {})
        member = members.get(client_id)
        if member is None:
            members[client_id] = Member(
                client_id, topic, now_ms, connection_id, address, info, consume_type
            )
            self._by_connection.setdefault(connection_id, set()).add((group, client_id))
            self._lists.pop(group, None)
            return True
        if (
            not self._live(member, now_ms)
            or now_ms < member.last_seen_ms
            or member.info != info
            or member.consume_type != consume_type
        ):
            # Back in the list, its expiry moved earlier, or it became or stopped being POP.
            self._lists.pop(group, None)
        if member.connection_id != connection_id:
            unindex(self._by_connection, member.connection_id, (group, client_id))
            self._by_connection.setdefault(connection_id, set()).add((group, client_id))
        member.last_seen_ms = now_ms
        member.topic = topic
        member.connection_id = connection_id
        member.address = address
        member.info = info
        member.consume_type = consume_type
        return False

    def unregister(self, group: str, client_id: str) -> bool:
        members = self._groups.get(group)
        member = None if members is None else members.pop(client_id, None)
        if members is None or member is None:
            return False
        unindex(self._by_connection, member.connection_id, (group, client_id))
        self._lists.pop(group, None)
        if not members:
            del self._groups[group]
        return True

    def connection_closed(self, connection_id: int) -> list[tuple[str, str]]:
        """Drop every member that heart-beat over this connection; returns (group, client),
        sorted. Reads only that connection's members."""
        dropped = sorted(self._by_connection.get(connection_id, ()))
        for group, client_id in dropped:
            self.unregister(group, client_id)
        return dropped

    def expire(self, now_ms: int) -> list[tuple[str, str]]:
        expired = [
            (group, m.client_id)
            for group, members in self._groups.items()
            for m in members.values()
            if not self._live(m, now_ms)
        ]
        for group, client_id in expired:
            self.unregister(group, client_id)
        return expired

    def is_member(self, group: str, client_id: str, now_ms: int) -> bool:
        """Whether ``client_id`` is a live member of ``group`` (whatever its consume type)."""
        m = self._groups.get(group, {}).get(client_id)
        return m is not None and self._live(m, now_ms)

    def members(self, group: str, now_ms: int) -> list[str]:
        """The client ids of the group's live members that hold queues (all but the POP
        members: what the rebalancing members share the queues among), sorted."""
        return list(self.member_ids(group, now_ms))

    def member_ids(self, group: str, now_ms: int) -> tuple[str, ...]:
        """:meth:`members` as a tuple: the same object until the list changes."""
        cached = self._lists.get(group)
        if cached is not None and now_ms <= cached[0]:
            return cached[1]
        live = [
            m
            for m in self._groups.get(group, {}).values()
            if m.consume_type != POP and self._live(m, now_ms)
        ]
        ids = tuple(sorted(m.client_id for m in live))
        # A member that is not live comes back only by a heartbeat, which drops the list.
        self._lists[group] = (min((self._deadline(m) for m in live), default=now_ms), ids)
        return ids

    def live(self, group: str, now_ms: int) -> list[Member]:
        """The group's live members (copies), sorted by client id."""
        members = self._groups.get(group, {})
        return sorted(
            (replace(m) for m in members.values() if self._live(m, now_ms)),
            key=lambda m: m.client_id,
        )

    def subscriptions(self) -> dict[str, set[str]]:
        """group -> the topics its members subscribe to."""
        return {
            group: {m.topic for m in members.values() if m.topic}
            for group, members in self._groups.items()
        }

    def member_on(self, group: str, connection_id: int, now_ms: int) -> str | None:
        """The id of a live member of ``group`` that heart-beats over this connection."""
        for m in self._groups.get(group, {}).values():
            if m.connection_id == connection_id and self._live(m, now_ms):
                return m.client_id
        return None

    def groups(self) -> list[str]:
        return sorted(self._groups)
