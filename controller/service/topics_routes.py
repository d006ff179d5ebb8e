"""Topics and routes: REGISTER_BROKER (103) on every controller, the routes (105, 106) from any
controller, and UPDATE_AND_CREATE_TOPIC committed by the active one.

The route table is soft state filled by brokers' registrations; only registrations of a broker id
the state machine knows, at the address it knows, are believed. Topics are metadata: a created
topic is pushed to the group's brokers, and a broker that registers without some topic of its
group gets the missing ones.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import msgpack
import structlog

from controller.metadata import ReplicasInfoManager
from controller.metadata.events import check_queues, check_topic
from controller.raft_driver import RaftDriver
from controller.routes import RouteTable
from controller.service.commit import DecisionCommitter
from controller.service.connections import ConnectionIds
from controller.service.gate import LeadershipGate
from controller.service.notifier import BrokerNotifier
from controller.service.requests import Refused, answer_of
from controller.service.static_topics import static_route
from controller.service.tasks import BackgroundTasks
from protocol.codes import ResponseCode
from protocol.controller_requests.base import req_broker
from protocol.controller_requests.topics import (
    ClusterInfoQuery,
    RegisterRoutes,
    RouteQuery,
    TopicUpdated,
    UpdateTopic,
)
from protocol.remoting import Frame, response
from protocol.topic_attrs import put_attrs
from remoting.server import Connection

log = structlog.get_logger(__name__)

ROUTE_CACHE_TOPICS = 32_768
"""Encoded route answers kept at most (a few hundred bytes each)."""
_NEVER = 2**62


class TopicRouteHandlers:
    def __init__(
        self,
        driver: RaftDriver,
        manager: ReplicasInfoManager,
        routes: RouteTable,
        gate: LeadershipGate,
        committer: DecisionCommitter,
        notifier: BrokerNotifier,
        tasks: BackgroundTasks,
        connections: ConnectionIds,
        now_ms: Callable[[], int],
        *,
        timeout: float,
    ) -> None:
        self.driver = driver
        self.manager = manager
        self.routes = routes
        self.gate = gate
        self.committer = committer
        self.notifier = notifier
        self.tasks = tasks
        self.connections = connections
        self.now_ms = now_ms
        self.timeout = timeout
        self._reconciling: set[tuple[str, str]] = set()
        self._routes: dict[str, tuple[bytes, int]] = {}
        """Topic -> (GET_ROUTE's encoded answer, the last ms it holds), at ``_routes_at``."""
        self._routes_at = (-1, -1)
        """(route table version, applied index) the cached answers were built at."""

    # --- routes ----------------------------------------------------------------------------

    def master_of(self, broker_name: str) -> tuple[int | None, str | None]:
        # Not replica_info(): that builds the group's whole ReplicaInfo (a route build asked it
        # once per group and once per registration: 44% of a build's time, issue 34).
        return self.manager.master_address_of(broker_name)

    def _accept(self) -> Callable[[str, int, str], bool]:
        """Which route registrations to believe: a broker id the state machine knows, at the
        address it knows (any address while its first CONTROLLER_REGISTER_BROKER is pending)."""
        manager = self.manager

        def accept(broker_name: str, broker_id: int, address: str) -> bool:
            # Looked up per registration asked about: a route reads a few, never every group.
            recorded = manager.broker_address(broker_name, broker_id)
            return recorded is not None and recorded in ("", address)

        return accept

    async def register_routes(self, conn: Connection, req: Frame) -> Frame:
        broker = req_broker(req.header)
        name = broker["broker_name"]
        broker_id = broker["broker_id"]
        address = broker["broker_address"]
        body = req.body or b""
        # A broker sends the same list every 30 s: the same bytes as its registration's were
        # read and checked then (issue 34: 1.3 ms of CPU for 1,000 topics, each time).
        topics = self.routes.topics_sent_as(name, broker_id, body)
        if topics is None:
            topics = RegisterRoutes.parse(req.header, body).topics
            for topic, queues in topics.items():
                # Routes are built from these: a name or count no broker could have is
                # refused, never handed to clients (a huge count would make them build huge
                # routes).
                try:
                    check_topic("topic", topic)
                    check_queues(f"queues of {topic}", queues)
                except (TypeError, ValueError) as exc:
                    raise Refused(ResponseCode.CONTROLLER_INVALID_REQUEST, str(exc)) from None
        info = self.manager.replica_info(name)
        recorded = info.address_of(broker_id) if info is not None else None
        if recorded and recorded != address:
            # Not the broker the controllers know by that id: it would pose as it in the routes.
            raise Refused(
                ResponseCode.CONTROLLER_BROKER_ID_INVALID,
                f"broker {broker_id} of {name} serves on {recorded}, not {address}",
            )
        self.routes.register(
            cluster=broker["cluster"],
            broker_name=name,
            broker_id=broker_id,
            address=address,
            topics=topics,
            connection_id=self.connections.of(conn),
            now_ms=self.now_ms(),
            raw=body,
        )
        if self.driver.active and recorded:
            self._reconcile(name, address, topics)
        return response(req, ResponseCode.SUCCESS)

    async def get_route(self, conn: Connection, req: Frame) -> Frame:
        topic = RouteQuery.parse(req.header, req.body).topic
        await self.gate.route_view()
        return response(req, ResponseCode.SUCCESS, None, self._route_body(topic))

    def _route_body(self, topic: str) -> bytes:
        """GET_ROUTE's encoded answer, built once per topic while the routes and the metadata
        stay as they are: a client fleet asks for the same topics over and over (issue 34: each
        lookup built and encoded the route again). Kept while the route table's version and
        the applied Raft index are the ones it was built at, and until the first of its
        registrations would expire; at most ``ROUTE_CACHE_TOPICS`` topics (then all dropped)."""
        now_ms = self.now_ms()
        at = (self.routes.version, self.driver.applied)
        if at != self._routes_at:
            self._routes.clear()
            self._routes_at = at
        hit = self._routes.get(topic)
        if hit is not None and now_ms <= hit[1]:
            return hit[0]
        body: bytes = msgpack.packb(self._route_now(topic))
        horizon = self.routes.horizon(topic, now_ms)
        if len(self._routes) >= ROUTE_CACHE_TOPICS:
            self._routes.clear()
        self._routes[topic] = (body, _NEVER if horizon is None else horizon)
        return body

    async def route_doc(self, topic: str) -> dict[str, Any]:
        """GET_ROUTE's document (a static topic's with its logical queues); raises
        :class:`Refused` (TOPIC_NOT_EXIST) for a topic no group serves. The NameServer door
        (:mod:`controller.nameserver`) answers from it too."""
        await self.gate.route_view()
        return self._route_now(topic)

    def _route_now(self, topic: str) -> dict[str, Any]:
        """``route_doc`` from the state at hand (the caller passed the gate)."""
        mapping = self.manager.static_topic(topic)
        doc = self.routes.route(
            topic,
            self.master_of,
            self.now_ms(),
            known=self.manager.topic_queues(topic),
            accept=self._accept(),
            only_known=mapping is not None,
        )
        if doc is None:
            raise Refused(ResponseCode.TOPIC_NOT_EXIST, f"no route for topic {topic}")
        for b in doc["brokers"]:
            # The topic's permission and message type on the group, when not the default.
            put_attrs(b, self.manager.topic_attrs(b["brokerName"], topic))
        if mapping is not None:
            doc = static_route(doc, mapping)
        return doc

    async def get_cluster_info(self, conn: Connection, req: Frame) -> Frame:
        ClusterInfoQuery.parse(req.header, req.body)
        doc = await self.cluster_doc()
        return response(req, ResponseCode.SUCCESS, None, msgpack.packb(doc))

    async def cluster_doc(self) -> dict[str, Any]:
        """GET_BROKER_CLUSTER_INFO's document: every live registered broker and its role."""
        await self.gate.route_view()
        return self.routes.cluster_info(self.master_of, self.now_ms(), self._accept())

    async def topic_names(self) -> list[str]:
        """Every topic a live registration lists or the controllers created, sorted."""
        await self.gate.route_view()
        names = {
            t
            for reg in self.routes.registrations(self.now_ms(), self._accept())
            for t in reg.topics
        }
        for info in self.manager.replica_infos():
            names.update(self.manager.group_topics(info.broker_name))
        return sorted(names)

    # --- topics ----------------------------------------------------------------------------

    async def update_topic(self, conn: Connection, req: Frame) -> Frame:
        """UPDATE_AND_CREATE_TOPIC on the controllers (a broker's updateTopic forwards it here):
        answered once the UpdateTopic event is applied, so the topic outlives the group's master;
        the group's brokers then get it pushed (``topic_changed``)."""
        await self.gate.require_active()
        ask = UpdateTopic.parse(req.header, req.body)
        d = self.manager.update_topic(
            ask.cluster, ask.broker_name, ask.topic, ask.queues, ask.perm, ask.message_type
        )
        r = answer_of(await self.committer.settle(d))
        header, body = TopicUpdated(
            topic=r.topic,
            queues=r.queues,
            broker_name=r.broker_name,
            perm=r.perm,
            message_type=r.message_type,
        ).encode()
        return response(req, ResponseCode.SUCCESS, header, body)

    def topic_changed(self, broker_name: str, topic: str) -> None:
        """State machine listener: UpdateTopic applied; the active controller pushes it."""
        if not self.driver.active:
            return
        info = self.manager.replica_info(broker_name)
        queues = self.manager.group_topics(broker_name).get(topic)
        if info is None or queues is None:
            return
        log.info("topic updated", broker_name=broker_name, topic=topic, queues=queues)
        addresses = sorted({r.address for r in info.replicas if r.address})
        self.tasks.spawn(
            self.notifier.push_topics(broker_name, addresses, {topic: queues}, self.timeout),
            f"topic-{broker_name}-{topic}",
        )

    def _reconcile(self, broker_name: str, address: str, registered: Mapping[str, int]) -> None:
        """A broker registered routes without some topic the controllers know for its group
        (it was down or a slave when the topic was created): hand it the missing ones."""
        missing = {
            topic: queues
            for topic, queues in self.manager.group_topics(broker_name).items()
            if registered.get(topic, 0) < queues
        }
        key = (broker_name, address)
        if missing and key not in self._reconciling:
            self._reconciling.add(key)

            async def push() -> None:
                try:
                    await self.notifier.push_topics(broker_name, [address], missing, self.timeout)
                finally:
                    self._reconciling.discard(key)

            self.tasks.spawn(push(), f"reconcile-{broker_name}")
