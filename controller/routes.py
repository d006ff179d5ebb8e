"""The route service's table: which broker serves which topics, as brokers registered them.

Soft state, on every controller and never replicated: every broker sends REGISTER_BROKER (103)
to every controller, periodically and after a topic change. A registration expires
``expiry_ms`` after the last one, and at once when the connection it came on closes (the broker
died or went away), as RocketMQ's name server does.

Routes combine it with the replicated metadata: the master of a group is whatever the
controllers' state machine says (``MasterLookup``), never what a broker claims; a registration
counts only for a broker id the state machine knows, at the address it knows (``Accept``); and a
topic created through the controllers (``known``: group -> queues) keeps its groups in the route
while their brokers are down, with no master and no slaves (clients see "no master now" and
retry, never "no such topic"). Time is an int of milliseconds passed in; nothing here reads a
clock or does I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

MasterLookup = Callable[[str], tuple[int | None, str | None]]
"""``broker_name -> (master broker id, master address)``, both None while there is no master."""
Accept = Callable[[str, int, str], bool]
"""``(broker_name, broker_id, address) -> bool``: whether a registration may be believed."""


_NEVER = 2**60
"""Later than any expiry (milliseconds)."""


def _accept_all(broker_name: str, broker_id: int, address: str) -> bool:
    return True


@dataclass(frozen=True, slots=True, kw_only=True)
class Registration:
    cluster: str
    broker_name: str
    broker_id: int
    address: str
    topics: Mapping[str, int]
    connection_id: int
    at_ms: int
    raw: bytes | None = None
    """The request body the topics were read from (None: not given): a broker that sends the
    same bytes again (every 30 s) need not have them read and checked again."""


class RouteTable:
    def __init__(self, *, expiry_ms: int) -> None:
        if expiry_ms <= 0:
            raise ValueError("expiry_ms must be positive")
        self.expiry_ms = expiry_ms
        self._regs: dict[tuple[str, int], Registration] = {}
        self._by_topic: dict[str, set[tuple[str, int]]] = {}
        """Topic -> the registrations listing it: a lookup reads only those (issue 34: it
        sorted, expired and filtered every broker's registration per lookup)."""
        self._by_connection: dict[int, set[tuple[str, int]]] = {}
        """Connection id -> the registrations made over it: a closed connection reads only
        those (issue 34: every connection closed, a client's too, walked every broker's)."""
        self._next_expiry_ms = _NEVER
        """At most the earliest expiry of a registration held: until then :meth:`expire` drops
        nothing and looks at none (the election scan asks ten times a second; a broker
        registers every 30 s, and a registration lives ``expiry_ms``). A registration lowers it
        to its own expiry if earlier, a look at all of them sets it to the exact earliest;
        dropping one only raises the true earliest, so it stays a bound."""
        self.version = 0
        """Moves whenever a route may read differently (a registration new, changed, refreshed
        after it expired, or gone), not on a refresh of a live one: a route built at one
        version stays true until it moves or until :meth:`horizon` (the route cache's key)."""

    def __len__(self) -> int:
        return len(self._regs)

    def register(
        self,
        *,
        cluster: str,
        broker_name: str,
        broker_id: int,
        address: str,
        topics: Mapping[str, int],
        connection_id: int,
        now_ms: int,
        raw: bytes | None = None,
    ) -> None:
        """Record (or refresh) a broker's registration; its topic list replaces the old one.
        ``raw``: the body ``topics`` was read from (see :meth:`topics_sent_as`)."""
        key = (broker_name, broker_id)
        old = self._regs.get(key)
        reg = Registration(
            cluster=cluster,
            broker_name=broker_name,
            broker_id=broker_id,
            address=address,
            topics=old.topics if old is not None and old.topics == topics else dict(topics),
            connection_id=connection_id,
            at_ms=now_ms,
            raw=raw,
        )
        self._regs[key] = reg
        if now_ms + self.expiry_ms < self._next_expiry_ms:
            self._next_expiry_ms = now_ms + self.expiry_ms
        if old is None or old.connection_id != connection_id:
            if old is not None:
                self._unindex_connection(key, old.connection_id)
            self._by_connection.setdefault(connection_id, set()).add(key)
        if (
            old is None
            or old.topics != reg.topics
            or old.address != address
            or self._expired(old, now_ms)
        ):
            self.version += 1
        if old is not None and old.topics.keys() == reg.topics.keys():
            return  # a refresh: same topics, same index
        if old is not None:
            self._unindex(key, old.topics)
        for topic in reg.topics:
            self._by_topic.setdefault(topic, set()).add(key)

    def _unindex(self, key: tuple[str, int], topics: Mapping[str, int]) -> None:
        for topic in topics:
            keys = self._by_topic.get(topic)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._by_topic[topic]

    def _unindex_connection(self, key: tuple[str, int], connection_id: int) -> None:
        keys = self._by_connection.get(connection_id)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._by_connection[connection_id]

    def _drop(self, key: tuple[str, int]) -> None:
        reg = self._regs.pop(key)
        self._unindex(key, reg.topics)
        self._unindex_connection(key, reg.connection_id)
        self.version += 1

    def connection_closed(self, connection_id: int) -> list[tuple[str, int]]:
        """Drop the registrations made over this connection; returns their keys, sorted."""
        gone = sorted(self._by_connection.get(connection_id, ()))
        for key in gone:
            self._drop(key)
        return gone

    def forget(self, broker_name: str, broker_ids: frozenset[int] | None = None) -> None:
        """Drop a cleaned group's (or some of its brokers') registrations."""
        for key in [k for k in self._regs if k[0] == broker_name]:
            if broker_ids is None or key[1] in broker_ids:
                self._drop(key)

    def drop_topic(self, topic: str) -> None:
        """A deleted topic leaves every registration now (brokers register again without it)."""
        for key in self._by_topic.pop(topic, set()):
            reg = self._regs[key]
            topics = {t: q for t, q in reg.topics.items() if t != topic}
            self._regs[key] = replace(reg, topics=topics, raw=None)  # no longer its body's
        self.version += 1

    def expire(self, now_ms: int) -> list[tuple[str, int]]:
        """Drop registrations older than the expiry; returns their keys, sorted. Looks at
        none before the earliest expiry of those held (``_next_expiry_ms``)."""
        if now_ms <= self._next_expiry_ms:
            return []
        gone: list[tuple[str, int]] = []
        earliest = _NEVER
        for key, reg in self._regs.items():
            if self._expired(reg, now_ms):
                gone.append(key)
            elif reg.at_ms + self.expiry_ms < earliest:
                earliest = reg.at_ms + self.expiry_ms
        self._next_expiry_ms = earliest
        gone.sort()
        for key in gone:
            self._drop(key)
        return gone

    def _expired(self, reg: Registration, now_ms: int) -> bool:
        return now_ms - reg.at_ms > self.expiry_ms

    def horizon(self, topic: str, now_ms: int) -> int | None:
        """The last instant at which every live registration listing ``topic`` is still live
        (None: none is): until then, and while :attr:`version` stays, its route reads the
        same."""
        ends = [
            reg.at_ms + self.expiry_ms
            for reg in (self._regs[k] for k in self._by_topic.get(topic, ()))
            if not self._expired(reg, now_ms)
        ]
        return min(ends) if ends else None

    def get(self, broker_name: str, broker_id: int) -> Registration | None:
        return self._regs.get((broker_name, broker_id))

    def topics_sent_as(
        self, broker_name: str, broker_id: int, raw: bytes
    ) -> Mapping[str, int] | None:
        """The topics of the broker's registration when it was read from the body ``raw``
        (byte for byte), else None: a refresh with the same body is not read again."""
        reg = self._regs.get((broker_name, broker_id))
        return reg.topics if reg is not None and reg.raw is not None and reg.raw == raw else None

    def registrations(self, now_ms: int, accept: Accept = _accept_all) -> list[Registration]:
        """Live registrations that ``accept`` believes, by (broker name, broker id)."""
        self.expire(now_ms)
        return [
            reg
            for reg in (self._regs[k] for k in sorted(self._regs))
            if accept(reg.broker_name, reg.broker_id, reg.address)
        ]

    def route(
        self,
        topic: str,
        masters: MasterLookup,
        now_ms: int,
        *,
        known: Mapping[str, int] | None = None,
        accept: Accept = _accept_all,
        only_known: bool = False,
    ) -> dict[str, Any] | None:
        """The GET_ROUTEINFO_BY_TOPIC document, or None when the topic is unknown.

        Every group in ``known`` (the controllers' topic table) and every group with a
        registration listing the topic is in it. ``queues`` is the largest of the known count and
        the master's registered one (the other brokers' while the master has not registered it);
        ``slaves`` are the other registered brokers of the group; the master is the state
        machine's (one that died is named until the controllers clear it). A known group with
        neither has no master and no slaves: "no master now", which clients retry.

        ``only_known`` (a static topic): the groups and queue counts are the known ones only; a
        larger count or another group a broker registered (a topic it created itself on a send)
        is not routed to.
        """
        known = known or {}
        groups: dict[str, list[Registration]] = {name: [] for name in known}
        # Only the registrations listing the topic (the index), by (broker name, broker id);
        # an expired one is skipped here and dropped by the next expire().
        for key in sorted(self._by_topic.get(topic, ())):
            reg = self._regs[key]
            if self._expired(reg, now_ms) or (only_known and reg.broker_name not in known):
                continue
            if accept(reg.broker_name, reg.broker_id, reg.address):
                groups.setdefault(reg.broker_name, []).append(reg)
        if not groups:
            return None
        brokers = []
        for name in sorted(groups):
            regs = groups[name]
            master_id, master_address = masters(name)
            by_master = [r for r in regs if r.broker_id == master_id]
            counts = [known[name]] if name in known else []
            if not only_known:
                counts += [r.topics[topic] for r in (by_master or regs)]
            queues = max(counts)
            slaves = sorted(r.address for r in regs if r.broker_id != master_id)
            brokers.append(
                {
                    "brokerName": name,
                    "masterAddress": master_address,
                    "slaves": slaves,
                    "queues": queues,
                }
            )
        return {"topic": topic, "brokers": brokers}

    def cluster_info(
        self, masters: MasterLookup, now_ms: int, accept: Accept = _accept_all
    ) -> dict[str, Any]:
        """The GET_BROKER_CLUSTER_INFO document: every live registered broker and its role."""
        clusters: dict[str, list[dict[str, Any]]] = {}
        for reg in self.registrations(now_ms, accept):
            master_id, _ = masters(reg.broker_name)
            clusters.setdefault(reg.cluster, []).append(
                {
                    "brokerName": reg.broker_name,
                    "brokerId": reg.broker_id,
                    "address": reg.address,
                    "role": "MASTER" if reg.broker_id == master_id else "SLAVE",
                }
            )
        return {"clusters": clusters}
