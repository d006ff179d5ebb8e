"""Consumer progress and group members, asked of every broker group (what rmqctl's
consumerProgress and consumerConnection print).

Each broker group is asked at its master, or at a slave while it has none (the answer says so:
``from_slave``; a slave's committed offsets are its copy of the master's, at most
``slave_config_sync_interval_ms`` old). A group that cannot be reached is reported with its
error, not left out silently. A broker group where the consumer group has no position on a
topic it consumes elsewhere is asked for that topic by name, so its messages count as lag.
A broker that opened ConsumeQueues up to its bound for one request (after a restart) lists the
topics it left out (``ConsumeStats.not_opened``): they are reported as such, not asked again.

::

    async with ProgressAdmin("127.0.0.1:9878") as admin:
        for answer in await admin.consume_stats("billing"):
            ...
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from client.allocate import allocate_averagely
from client.bootstrap import BootstrapClient, describe_failure
from client.errors import BrokerError, ClientError
from client.routes import ClusterBroker, MessageQueue, fetch_cluster_info, fetch_route
from protocol.broker_requests.clients import POP
from protocol.broker_requests.consumer_stats import ConsumerConnectionsQuery, ConsumeStatsQuery
from protocol.consume_stats import (
    ConsumerConnection,
    ConsumeStats,
    StatsError,
    decode_connections,
)
from protocol.remoting import Frame, Scalar
from protocol.static_topic import LogicalQueue
from remoting.errors import RemotingError, ResponseError


@dataclass(frozen=True, slots=True)
class BrokerTarget:
    """Where a broker group is asked: its master, else one of its slaves."""

    broker_name: str
    address: str
    from_slave: bool


@dataclass(frozen=True, slots=True)
class BrokerAnswer:
    """One broker group's answer: ``stats`` or, when it could not be asked, ``error``."""

    target: BrokerTarget
    stats: ConsumeStats | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Member:
    """A live member of a consumer group, merged over the broker groups it heart-beats to."""

    client_id: str
    address: str
    topic: str
    last_heartbeat_ms: int
    brokers: tuple[str, ...]
    """The broker groups that list it."""
    language: str = ""
    version: str = ""
    protocol: str = ""
    """remoting (our SDK), gRPC or classic; "" when the brokers do not say."""
    consume_type: str = ""
    """pop (holds no queue: reads every queue), push or pull; "" when the member or its
    brokers do not say (taken as holding queues)."""

    @property
    def pops(self) -> bool:
        """Whether it consumes by POP: every queue of its topic, none held."""
        return self.consume_type == POP


def pick_targets(clusters: dict[str, list[ClusterBroker]]) -> list[BrokerTarget]:
    """Every broker group once, at its master, else at its slave with the lowest id; sorted by
    broker name."""
    by_group: dict[str, list[ClusterBroker]] = {}
    for brokers in clusters.values():
        for b in brokers:
            by_group.setdefault(b.broker_name, []).append(b)
    targets = []
    for name in sorted(by_group):
        brokers = sorted(by_group[name], key=lambda b: (not b.is_master, b.broker_id))
        best = brokers[0]
        targets.append(BrokerTarget(name, best.address, not best.is_master))
    return targets


def merge_members(answers: dict[str, list[ConsumerConnection]]) -> list[Member]:
    """broker name -> members it lists, into one entry per client id (its latest heartbeat,
    the address and topic that heartbeat gave), sorted by client id."""
    latest: dict[str, ConsumerConnection] = {}
    seen: dict[str, list[str]] = {}
    for broker, members in sorted(answers.items()):
        for m in members:
            seen.setdefault(m.client_id, []).append(broker)
            current = latest.get(m.client_id)
            if current is None or m.last_heartbeat_ms > current.last_heartbeat_ms:
                latest[m.client_id] = m
    return [
        Member(
            m.client_id,
            m.address,
            m.topic,
            m.last_heartbeat_ms,
            tuple(seen[cid]),
            m.language,
            m.version,
            m.protocol,
            m.consume_type,
        )
        for cid, m in sorted(latest.items())
    ]


def allocation(
    members: Sequence[Member], queues_by_topic: Mapping[str, Sequence[MessageQueue]]
) -> dict[str, list[MessageQueue]]:
    """client id -> the queues it holds, computed as every queue-holding member computes its
    own share: the consumer (client.consumer) gives :func:`allocate_averagely` the sorted
    (broker, queue) list of its topic (a static topic's logical queues) and the sorted ids of
    the group's members that hold queues (GET_CONSUMER_LIST_BY_GROUP leaves the POP members
    out). POP members hold none (every one reads every queue): they are not in the answer."""
    holding = [m for m in members if not m.pops]
    ids = sorted(m.client_id for m in holding)
    return {
        m.client_id: allocate_averagely(sorted(queues_by_topic.get(m.topic, ())), ids, m.client_id)
        for m in holding
    }


NO_BROKER_REGISTERED = (
    "no broker is registered with the controllers (every broker is down, or cut off from them)"
)


class NoBrokerRegistered(ClientError):
    """The controllers answer, and no broker is registered with them (every broker is down or
    cut off from them): no broker group can be asked, though the controllers may still route
    the topics they hold (their groups with no master and no slaves)."""

    def __init__(self) -> None:
        super().__init__(NO_BROKER_REGISTERED)


class ProgressAdmin(BootstrapClient):
    """Consumer progress and members through the bootstrap addresses."""

    async def targets(self) -> list[BrokerTarget]:
        targets = pick_targets(await fetch_cluster_info(self.bootstrap))
        if not targets:
            raise NoBrokerRegistered
        return targets

    async def consume_stats(
        self, group: str | None = None, topic: str | None = None
    ) -> list[BrokerAnswer]:
        """GET_CONSUME_STATS of every broker group, sorted by broker name
        (:class:`NoBrokerRegistered` when there is none to ask)."""
        query = ConsumeStatsQuery(group=group or None, topic=topic or None)

        async def one(target: BrokerTarget) -> BrokerAnswer:
            try:
                frame = await self._call(target, query.code, query.encode()[0])
                return BrokerAnswer(target, stats=ConsumeStats.decode(frame.body))
            except (ClientError, StatsError) as exc:
                return BrokerAnswer(target, error=str(exc))

        answers = list(await asyncio.gather(*(one(t) for t in await self.targets())))
        if not topic:
            answers = await self._fill_topics(answers)
        return answers

    async def _fill_topics(self, answers: list[BrokerAnswer]) -> list[BrokerAnswer]:
        """A broker group where a consumer group has no position on a topic it consumes
        elsewhere (its consumers have not reached that broker group yet, or never committed
        there) is asked again for that group and topic by name, so the messages there count as
        lag instead of being left out."""
        topics: dict[str, set[str]] = {}
        for a in answers:
            for name, rows in a.stats.groups.items() if a.stats else ():
                topics.setdefault(name, set()).update(q.topic for q in rows)

        async def fill(answer: BrokerAnswer) -> BrokerAnswer:
            if answer.stats is None:
                return answer
            groups = dict(answer.stats.groups)
            for name, wanted in sorted(topics.items()):
                rows = list(groups.get(name, ()))
                # Topics the broker left out as not opened yet are not asked again one by one:
                # that would open them all after all (the answer lists them).
                unopened = set(answer.stats.not_opened.get(name, ()))
                missing = sorted(wanted - {q.topic for q in rows} - unopened)
                for t in missing:
                    one_topic = ConsumeStatsQuery(group=name, topic=t)
                    try:
                        frame = await self._call(
                            answer.target, one_topic.code, one_topic.encode()[0]
                        )
                        rows.extend(ConsumeStats.decode(frame.body).groups.get(name, ()))
                    except (ClientError, StatsError) as exc:
                        return BrokerAnswer(answer.target, error=str(exc))
                if missing and rows:
                    groups[name] = tuple(sorted(rows, key=lambda q: (q.topic, q.queue_id)))
            return BrokerAnswer(answer.target, stats=replace(answer.stats, groups=groups))

        return list(await asyncio.gather(*(fill(a) for a in answers)))

    async def members(self, group: str) -> tuple[list[Member], dict[str, str]]:
        """The group's live members over every broker group, and broker name -> error for the
        groups that could not be asked (:class:`NoBrokerRegistered` when there is none)."""
        answers: dict[str, list[ConsumerConnection]] = {}
        errors: dict[str, str] = {}

        async def one(target: BrokerTarget) -> None:
            query = ConsumerConnectionsQuery(group=group)
            try:
                frame = await self._call(target, query.code, query.encode()[0])
                answers[target.broker_name] = decode_connections(frame.body)
            except (ClientError, StatsError) as exc:
                errors[target.broker_name] = str(exc)

        await asyncio.gather(*(one(t) for t in await self.targets()))
        return merge_members(answers), errors

    async def queues(self, topics: Sequence[str]) -> dict[str, list[MessageQueue]]:
        """topic -> its sorted (broker, queue) list from the route (a topic without a route has
        none)."""
        out: dict[str, list[MessageQueue]] = {}
        for topic in sorted(set(topics)):
            try:
                out[topic] = list((await fetch_route(self.bootstrap, topic)).consume_queues())
            except BrokerError:
                out[topic] = []
        return out

    async def mappings(self, topics: Iterable[str]) -> dict[str, tuple[LogicalQueue, ...]]:
        """topic -> its logical queues' mapping items, for the static topics among ``topics``
        (from their routes; a topic whose route cannot be read is taken as ordinary)."""

        async def one(topic: str) -> tuple[LogicalQueue, ...]:
            try:
                return (await fetch_route(self.bootstrap, topic)).mapping
            except ClientError:
                return ()

        # Retry and dead-letter topics are never static.
        names = sorted(t for t in set(topics) if not t.startswith("%"))
        found = await asyncio.gather(*(one(t) for t in names))
        return {t: m for t, m in zip(names, found, strict=True) if m}

    async def _call(self, target: BrokerTarget, code: int, header: dict[str, Scalar]) -> Frame:
        where = f"{target.broker_name} ({target.address})"
        try:
            conn = await self._pool.get(target.address)
            return await conn.call(code, header, None, self.timeout)
        except ResponseError as exc:
            raise ClientError(f"{where}: {BrokerError(exc.code, exc.remark)}") from None
        except RemotingError as exc:
            raise ClientError(f"{where}: {describe_failure(exc)}") from None
