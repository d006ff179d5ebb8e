"""Topic routes and cluster layout, cached and refreshed from the bootstrap addresses.

Controllers and a lone development broker answer GET_ROUTEINFO_BY_TOPIC (105) and
GET_BROKER_CLUSTER_INFO (106) alike, so the cache does not care which it talks to.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from typing import Any

import msgpack

from client import logs
from client.bootstrap import Bootstrap
from client.errors import BrokerError, ClientError, TopicNotFoundError
from protocol.codes import ResponseCode
from protocol.controller_requests.topics import ClusterInfoQuery, RouteQuery
from protocol.remoting import Frame
from protocol.static_topic import LogicalQueue, item_doc, parse_queue
from protocol.topic_attrs import TopicAttrs, attrs_from, put_attrs

log = logs.get_logger(__name__)

LOGICAL_BROKER = "%LOGICAL%"
"""The broker name of a static topic's logical queues as consumers allocate and own them
(``MessageQueue(LOGICAL_BROKER, logical queue id)``): no broker group has it (``%`` is not
allowed in broker names), so it never collides with a physical queue."""


@dataclass(slots=True, frozen=True, order=True)
class MessageQueue:
    """One queue of a topic on one broker group; sorts by (broker name, queue id)."""

    broker_name: str
    queue_id: int


_DEFAULT_ATTRS = TopicAttrs()


@dataclass(slots=True, frozen=True)
class BrokerRoute:
    broker_name: str
    master_address: str | None
    slaves: tuple[str, ...]
    queues: int
    #: a static topic's queues sends may go to (its logical queues' newest open items on this
    #: group); None: every queue
    write_queues: tuple[int, ...] | None = None
    #: the topic's permission and message type on this group (protocol.topic_attrs)
    attrs: TopicAttrs = _DEFAULT_ATTRS

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "brokerName": self.broker_name,
            "masterAddress": self.master_address,
            "slaves": list(self.slaves),
            "queues": self.queues,
        }
        put_attrs(doc, self.attrs)  # as the controllers' route: only when not 6, NORMAL
        if self.write_queues is not None:
            doc["writeQueues"] = list(self.write_queues)
        return doc


@dataclass(slots=True, frozen=True)
class TopicRoute:
    """Which broker groups hold a topic, their masters and queue counts."""

    topic: str
    brokers: tuple[BrokerRoute, ...]
    #: a static topic's logical queues, by logical id: the (group, physical queue) of each one's
    #: newest mapping item (docs/static-topics.md); () for an ordinary topic
    logical_queues: tuple[MessageQueue, ...] = ()
    #: a static topic's logical queues, by logical id: every mapping item, oldest first (what
    #: logical reads translate with); () for an ordinary topic or a route without items
    mapping: tuple[LogicalQueue, ...] = ()
    #: every (broker, queue) pair, sorted: what consumers allocate among themselves
    queues: tuple[MessageQueue, ...] = field(init=False)
    #: (queue, master address) for every queue whose group has a master: where sends may go
    writable: tuple[tuple[MessageQueue, str], ...] = field(init=False)
    _masters: dict[str, str] = field(init=False)

    def __post_init__(self) -> None:
        brokers = tuple(sorted(self.brokers, key=lambda b: b.broker_name))
        masters = {b.broker_name: b.master_address for b in brokers if b.master_address}
        queues = tuple(MessageQueue(b.broker_name, q) for b in brokers for q in range(b.queues))
        allowed = {
            b.broker_name: frozenset(b.write_queues) for b in brokers if b.write_queues is not None
        }
        writable = tuple(
            (mq, masters[mq.broker_name])
            for mq in queues
            if mq.broker_name in masters
            and (mq.broker_name not in allowed or mq.queue_id in allowed[mq.broker_name])
        )
        object.__setattr__(self, "brokers", brokers)
        object.__setattr__(self, "queues", queues)
        object.__setattr__(self, "writable", writable)
        object.__setattr__(self, "_masters", masters)

    def consume_queues(self) -> tuple[MessageQueue, ...]:
        """What a consumer group's members share out: a static topic's logical queues
        (``MessageQueue(LOGICAL_BROKER, i)``, read across their items), else :attr:`queues`."""
        if self.mapping:
            return tuple(MessageQueue(LOGICAL_BROKER, i) for i in range(len(self.mapping)))
        return self.queues

    def master_address(self, broker_name: str) -> str | None:
        return self._masters.get(broker_name)

    def read_address(self, broker_name: str) -> str | None:
        """Where to read a group's messages: its master, or a slave while it has none (slaves
        serve only committed messages, up to the confirm offset)."""
        master = self._masters.get(broker_name)
        if master is not None:
            return master
        for b in self.brokers:
            if b.broker_name == broker_name and b.slaves:
                return b.slaves[0]
        return None

    def read_addresses(self) -> dict[str, str]:
        """broker name -> where to read it (:meth:`read_address`), for every reachable group."""
        out = {}
        for b in self.brokers:
            address = self.read_address(b.broker_name)
            if address is not None:
                out[b.broker_name] = address
        return out

    def master_addresses(self) -> dict[str, str]:
        """broker name -> master address, for the groups that have a master."""
        return dict(self._masters)

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"topic": self.topic, "brokers": [b.to_dict() for b in self.brokers]}
        if self.logical_queues:
            doc["logicalQueues"] = [
                {"queueId": i, "brokerName": mq.broker_name, "physicalQueue": mq.queue_id}
                for i, mq in enumerate(self.logical_queues)
            ]
            for entry, items in zip(doc["logicalQueues"], self.mapping, strict=False):
                entry["items"] = [item_doc(i) for i in items]
        return doc


@dataclass(slots=True, frozen=True)
class ClusterBroker:
    """One broker process as GET_BROKER_CLUSTER_INFO lists it."""

    broker_name: str
    broker_id: int
    address: str
    role: str

    @property
    def is_master(self) -> bool:
        return self.role.upper() == "MASTER"

    def to_dict(self) -> dict[str, Any]:
        return {
            "brokerName": self.broker_name,
            "brokerId": self.broker_id,
            "address": self.address,
            "role": self.role,
        }


def _unpack(frame: Frame, what: str) -> Any:
    try:
        return msgpack.unpackb(frame.body or b"", raw=False)
    except Exception as exc:  # msgpack raises several unrelated types on garbage
        raise ClientError(f"malformed {what} body: {type(exc).__name__}") from None


def parse_route(frame: Frame) -> TopicRoute:
    """Decode a GET_ROUTEINFO_BY_TOPIC response body."""
    doc = _unpack(frame, "route")
    try:
        brokers = tuple(
            BrokerRoute(
                broker_name=str(b["brokerName"]),
                master_address=str(b["masterAddress"]) if b.get("masterAddress") else None,
                slaves=tuple(str(s) for s in b.get("slaves") or ()),
                queues=int(b["queues"]),
                write_queues=None
                if b.get("writeQueues") is None
                else tuple(int(q) for q in b["writeQueues"]),
                attrs=attrs_from(b),
            )
            for b in doc["brokers"]
        )
        entries = doc.get("logicalQueues") or ()
        logical = tuple(
            MessageQueue(str(q["brokerName"]), int(q["physicalQueue"])) for q in entries
        )
        mapping = (
            tuple(parse_queue(q["items"]) for q in entries)
            if entries and all("items" in q for q in entries)
            else ()
        )
        return TopicRoute(
            topic=str(doc["topic"]), brokers=brokers, logical_queues=logical, mapping=mapping
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ClientError(f"malformed route body: {exc!r}") from None


def parse_cluster_info(frame: Frame) -> dict[str, list[ClusterBroker]]:
    """Decode a GET_BROKER_CLUSTER_INFO response body: cluster name -> brokers."""
    doc = _unpack(frame, "cluster info")
    try:
        return {
            str(name): [
                ClusterBroker(
                    broker_name=str(b["brokerName"]),
                    broker_id=int(b["brokerId"]),
                    address=str(b["address"]),
                    role=str(b["role"]),
                )
                for b in members
            ]
            for name, members in doc["clusters"].items()
        }
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ClientError(f"malformed cluster info body: {exc!r}") from None


async def fetch_route(bootstrap: Bootstrap, topic: str) -> TopicRoute:
    """Ask the bootstrap addresses for a topic's route (no caching)."""
    try:
        ask = RouteQuery(topic=topic)
        resp = await bootstrap.call(ask.code, *ask.encode())
    except BrokerError as exc:
        if exc.code == ResponseCode.TOPIC_NOT_EXIST:
            raise TopicNotFoundError(topic, exc.address) from None
        raise
    return parse_route(resp)


async def fetch_cluster_info(bootstrap: Bootstrap) -> dict[str, list[ClusterBroker]]:
    ask = ClusterInfoQuery()
    return parse_cluster_info(await bootstrap.call(ask.code, *ask.encode()))


class RouteCache:
    """Topic routes, fetched on first use, refreshed every ``refresh_interval`` and on demand.

    Concurrent refreshes of one topic share a single request, and a refresh asked for within
    ``min_refresh_interval`` of the last fetch returns the cached route, so a burst of failing
    sends costs one route request. A failing background refresh keeps the old route.
    """

    def __init__(
        self,
        bootstrap: Bootstrap,
        refresh_interval: float = 30.0,
        min_refresh_interval: float = 0.05,
    ) -> None:
        self.bootstrap = bootstrap
        self.refresh_interval = refresh_interval
        self.min_refresh_interval = min_refresh_interval
        self._routes: dict[str, TopicRoute] = {}
        self._fetched_at: dict[str, float] = {}
        self._inflight: dict[str, asyncio.Task[TopicRoute]] = {}
        self._task: asyncio.Task[None] | None = None

    def peek(self, topic: str) -> TopicRoute | None:
        """The cached route, if any (no I/O: the send hot path)."""
        return self._routes.get(topic)

    async def get(self, topic: str) -> TopicRoute:
        """The cached route, fetched first when the topic is new to the cache."""
        route = self._routes.get(topic)
        if route is not None:
            return route
        return await self.refresh(topic, force=True)

    async def refresh(self, topic: str, *, force: bool = False) -> TopicRoute:
        """Fetch the route again (shared with concurrent callers); returns the new route."""
        task = self._inflight.get(topic)
        if task is None:
            cached = self._routes.get(topic)
            fetched = self._fetched_at.get(topic, 0.0)
            if (
                not force
                and cached is not None
                and time.monotonic() - fetched < self.min_refresh_interval
            ):
                return cached
            task = asyncio.ensure_future(self._fetch(topic))
            task.add_done_callback(_consume_exception)
            self._inflight[topic] = task
        return await asyncio.shield(task)

    async def _fetch(self, topic: str) -> TopicRoute:
        try:
            route = await fetch_route(self.bootstrap, topic)
            self._routes[topic] = route
            self._fetched_at[topic] = time.monotonic()
            return route
        finally:
            self._inflight.pop(topic, None)

    def age(self, topic: str) -> float:
        """Seconds since the topic's route was last fetched (infinite: never)."""
        fetched = self._fetched_at.get(topic)
        return float("inf") if fetched is None else time.monotonic() - fetched

    def forget(self, topic: str) -> None:
        self._routes.pop(topic, None)
        self._fetched_at.pop(topic, None)

    def start(self) -> None:
        """Start the periodic refresh of every cached topic."""
        if self._task is None:
            self._task = asyncio.ensure_future(self._refresh_loop())

    async def _refresh_loop(self) -> None:
        while True:
            await asyncio.sleep(self.refresh_interval)
            for topic in list(self._routes):
                try:
                    await self.refresh(topic)
                except ClientError as exc:
                    log.warning("route refresh failed", topic=topic, error=str(exc))

    async def close(self) -> None:
        tasks = [t for t in (self._task, *self._inflight.values()) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._task = None


def _consume_exception(task: asyncio.Task[Any]) -> None:
    # A shared fetch whose callers were all cancelled must not warn "exception never retrieved".
    if not task.cancelled():
        task.exception()
