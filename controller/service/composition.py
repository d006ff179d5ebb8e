"""ControllerService: the controller's request handlers, composed and registered on a server.

Each area lives in a module of its own (see the package docstring); this module builds them on
the shared tables (liveness, bindings, routes), wires the driver's and the state machine's
listeners, and starts and stops the background work.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import structlog

from controller.config import ControllerConfig
from controller.metadata import BrokerBindings, BrokerLiveTable
from controller.metadata.traffic import TrafficTable
from controller.metrics import ControllerMetrics
from controller.raft_driver import RaftDriver
from controller.routes import RouteTable
from controller.service.admission import ProposalBudget, shedding
from controller.service.auth import AuthHandlers, ControllerUsers
from controller.service.brokers import BrokerHandlers
from controller.service.commit import DecisionCommitter
from controller.service.connections import ConnectionIds
from controller.service.elections import ElectionHandlers
from controller.service.gate import LeadershipGate
from controller.service.group_view import GroupView
from controller.service.heartbeats import HeartbeatHandler
from controller.service.membership import MembershipHandlers
from controller.service.notifier import BrokerNotifier
from controller.service.producers import ProducerIdHandlers
from controller.service.rebalance import Rebalancer, TrafficView
from controller.service.requests import AsyncHandler, guarded
from controller.service.scheduler import ElectionScheduler
from controller.service.static_retention import StaticItemRetention
from controller.service.static_topics import StaticTopicHandlers
from controller.service.sync_state import SyncStateHandlers
from controller.service.tasks import BackgroundTasks
from controller.service.topic_admin import TopicAdminHandlers
from controller.service.topics_routes import TopicRouteHandlers
from controller.state_machine import MetadataStateMachine
from daemon.auth_key import load_auth_key
from daemon.tasks import cancel_and_wait
from protocol.acl import Decision, User
from protocol.codes import ControllerCode, RequestCode
from protocol.producer_token import token_key
from protocol.remoting import Frame
from protocol.request_auth import Credentials, cluster_credentials
from protocol.request_permissions import authorize, controller_checks
from remoting.auth import RequestGuard
from remoting.client import ConnectionPool
from remoting.server import Connection, RemotingServer

log = structlog.get_logger(__name__)

_WRITES = frozenset(
    {
        RequestCode.CONTROLLER_APPLY_BROKER_ID,
        RequestCode.CONTROLLER_REGISTER_BROKER,
        RequestCode.CONTROLLER_ELECT_MASTER,
        RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET,
        RequestCode.CLEAN_BROKER_DATA,
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        RequestCode.DELETE_TOPIC_IN_NAMESRV,
        ControllerCode.AUTH_CREATE_USER,
        ControllerCode.AUTH_UPDATE_USER,
        ControllerCode.AUTH_DELETE_USER,
        ControllerCode.AUTH_CREATE_ACL,
        ControllerCode.AUTH_UPDATE_ACL,
        ControllerCode.AUTH_DELETE_ACL,
        ControllerCode.UPDATE_AND_CREATE_STATIC_TOPIC,
        ControllerCode.REMAP_STATIC_TOPIC,
    }
)
"""Requests whose decisions append to the Raft log: answered SYSTEM_BUSY at once while the
proposal budget is full (the budget itself is checked again when the decision is proposed)."""


class ControllerService:
    def __init__(
        self,
        cfg: ControllerConfig,
        driver: RaftDriver,
        state_machine: MetadataStateMachine,
        metrics: ControllerMetrics | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cfg = cfg
        self.driver = driver
        self.sm = state_machine
        self.manager = manager = state_machine.manager
        self.metrics = metrics
        self._clock = clock
        self.live = BrokerLiveTable(default_timeout_ms=cfg.broker_heartbeat_timeout_ms)
        self.bindings = BrokerBindings()
        self.routes = RouteTable(expiry_ms=cfg.route_expiry_ms)
        self.groups = GroupView(manager)
        auth_key = load_auth_key(cfg.auth_key_file) if cfg.auth_key_file is not None else None
        self.auth_key = auth_key
        self.cluster_credentials = (
            cluster_credentials(auth_key) if cfg.auth_enabled and auth_key is not None else None
        )
        # Pushes to brokers (role changes, topics) sign as the cluster when auth is on.
        self.pool = ConnectionPool(
            connect_timeout=cfg.notify_timeout_ms / 1000, credentials=self.cluster_credentials
        )
        self.connections = ConnectionIds()
        self.tasks = BackgroundTasks()
        self._scan_task: asyncio.Task[None] | None = None
        self._rebalance_task: asyncio.Task[None] | None = None
        self._retention_task: asyncio.Task[None] | None = None
        timeout = cfg.request_timeout_ms / 1000
        now_ms = self.now_ms

        self.gate = gate = LeadershipGate(driver, timeout)
        self.budget = ProposalBudget(
            cfg.max_inflight_proposals, cfg.max_inflight_proposal_bytes, metrics
        )
        self.committer = committer = DecisionCommitter(driver, gate, timeout, self.budget)
        self.notifier = BrokerNotifier(
            driver,
            manager,
            self.pool,
            self.tasks,
            metrics,
            notify_timeout=cfg.notify_timeout_ms / 1000,
            replaying=lambda: state_machine.replaying,
        )
        self.brokers = BrokerHandlers(
            cfg, manager, self.live, self.bindings, gate, committer, self.connections, now_ms
        )
        self.elections = ElectionHandlers(cfg, manager, self.live, gate, committer, metrics, now_ms)
        self.scheduler = ElectionScheduler(
            cfg,
            driver,
            manager,
            self.live,
            self.routes,
            self.elections,
            self.tasks,
            metrics,
            now_ms,
            self.groups,
        )
        self.traffic = TrafficTable()
        self.traffic_view = TrafficView(
            manager,
            self.groups,
            self.traffic,
            now_ms,
            cfg.broker_heartbeat_timeout_max_ms,
            self.live,
        )
        self.heartbeats = HeartbeatHandler(
            cfg,
            driver,
            manager,
            self.live,
            self.bindings,
            gate,
            self.connections,
            metrics,
            now_ms,
            self.scheduler.wake,
            self.traffic,
            self.groups,
        )
        self.sync_state = SyncStateHandlers(manager, self.live, gate, committer, now_ms)
        self.topics = TopicRouteHandlers(
            driver,
            manager,
            self.routes,
            gate,
            committer,
            self.notifier,
            self.tasks,
            self.connections,
            now_ms,
            timeout=timeout,
        )
        self.topic_admin = TopicAdminHandlers(
            manager,
            self.routes,
            self.topics,
            gate,
            committer,
            self.pool,
            now_ms,
            live=self.live,
            timeout=timeout,
        )
        self.static_topics = StaticTopicHandlers(
            manager,
            gate,
            committer,
            self.pool,
            timeout,
            self.traffic_view.least_loaded,
            self.notifier,
        )
        self.rebalancer = Rebalancer(
            cfg, driver, gate, self.traffic_view, self.static_topics, metrics
        )
        self.static_retention = StaticItemRetention(
            cfg, driver, manager, committer, self.pool, timeout
        )
        self.membership = MembershipHandlers(cfg, driver, gate, timeout)
        self.auth = AuthHandlers(manager, gate, committer, auth_key)
        self.producers = ProducerIdHandlers(
            manager,
            gate,
            committer,
            token_key(auth_key) if self.cluster_credentials is not None and auth_key else None,
            require_token=cfg.require_producer_token,
        )

        driver.on_active_change.append(self.heartbeats.active_changed)
        driver.on_active_change.append(self.rebalancer.active_changed)
        state_machine.on_master_changed.append(self.notifier.master_changed)
        state_machine.on_cleaned.append(self._cleaned)
        state_machine.on_topic_changed.append(self.topics.topic_changed)

    # --- wiring ----------------------------------------------------------------------------

    def register(self, server: RemotingServer) -> None:
        handlers: dict[int, AsyncHandler] = {
            RequestCode.CONTROLLER_GET_NEXT_BROKER_ID: self.brokers.get_next_broker_id,
            RequestCode.CONTROLLER_GET_PRODUCER_ID: self.producers.get_producer_id,
            RequestCode.CONTROLLER_APPLY_BROKER_ID: self.brokers.apply_broker_id,
            RequestCode.CONTROLLER_REGISTER_BROKER: self.brokers.register_broker,
            RequestCode.CONTROLLER_ELECT_MASTER: self.elections.elect_master,
            RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET: self.sync_state.alter_sync_state_set,
            RequestCode.CONTROLLER_GET_REPLICA_INFO: self.brokers.get_replica_info,
            RequestCode.CONTROLLER_GET_SYNC_STATE_DATA: self.sync_state.get_sync_state_data,
            RequestCode.CONTROLLER_GET_METADATA_INFO: self.membership.get_metadata_info,
            RequestCode.CLEAN_BROKER_DATA: self.brokers.clean_broker_data,
            RequestCode.REGISTER_BROKER: self.topics.register_routes,
            RequestCode.GET_ROUTEINFO_BY_TOPIC: self.topics.get_route,
            RequestCode.GET_BROKER_CLUSTER_INFO: self.topics.get_cluster_info,
            RequestCode.UPDATE_AND_CREATE_TOPIC: self.topics.update_topic,
            RequestCode.DELETE_TOPIC_IN_NAMESRV: self.topic_admin.delete_topic,
            RequestCode.DELETE_SUBSCRIPTIONGROUP: self.topic_admin.delete_group,
            RequestCode.GET_TOPICS_BY_CLUSTER: self.topic_admin.topic_list,
            ControllerCode.GET_CONTROLLER_CONFIG: self.membership.get_controller_config,
            ControllerCode.ADD_CONTROLLER: self.membership.add_controller,
            ControllerCode.REMOVE_CONTROLLER: self.membership.remove_controller,
            ControllerCode.TRANSFER_CONTROLLER_LEADER: self.membership.transfer_leader,
            ControllerCode.AUTH_CREATE_USER: self.auth.create_user,
            ControllerCode.AUTH_UPDATE_USER: self.auth.update_user,
            ControllerCode.AUTH_DELETE_USER: self.auth.delete_user,
            ControllerCode.AUTH_LIST_USER: self.auth.list_users,
            ControllerCode.AUTH_CREATE_ACL: self.auth.create_acl,
            ControllerCode.AUTH_UPDATE_ACL: self.auth.update_acl,
            ControllerCode.AUTH_DELETE_ACL: self.auth.delete_acl,
            ControllerCode.AUTH_LIST_ACL: self.auth.list_acl,
            ControllerCode.AUTH_SYNC_USERS: self.auth.sync_users,
            ControllerCode.UPDATE_AND_CREATE_STATIC_TOPIC: self.static_topics.create,
            ControllerCode.GET_STATIC_TOPIC_MAPPING: self.static_topics.mapping,
            ControllerCode.REMAP_STATIC_TOPIC: self.static_topics.remap,
            ControllerCode.GET_BROKER_TRAFFIC: self.rebalancer.get_traffic,
            ControllerCode.GET_REBALANCE_PLAN: self.rebalancer.get_plan,
        }
        for code, handler in handlers.items():
            if code in _WRITES:
                server.register(code, shedding(guarded(handler, self.metrics), self.budget))
            else:
                server.register(code, guarded(handler, self.metrics))
        server.register(RequestCode.BROKER_HEARTBEAT, self.heartbeats.broker_heartbeat)
        if self.cluster_credentials is not None and self.auth_key is not None:
            server.guard = self._request_guard(self.auth_key, self.cluster_credentials)
        server.on_open.append(self._connection_opened)
        server.on_close.append(self._connection_closed)

    def _request_guard(self, auth_key: bytes, cluster: Credentials) -> RequestGuard:
        """Every request signed by a known user (or the cluster), admin commands for super
        users only (:mod:`protocol.request_permissions`)."""
        metrics = self.metrics

        def allowed(user: User, req: Frame, host: str) -> Decision:
            return authorize(user, controller_checks(req, ""), host, req.code)

        def refused(reason: str) -> None:
            if metrics is not None:
                metrics.auth_refused.labels(reason=reason).inc()

        log.info("authentication on", window_ms=self.cfg.auth_timestamp_window_ms)
        return RequestGuard(
            ControllerUsers(self.manager, auth_key),
            allowed,
            cluster=cluster,
            window_ms=self.cfg.auth_timestamp_window_ms,
            server="controller",
            on_refused=refused,
        )

    async def start(self) -> None:
        self._scan_task = asyncio.create_task(self.scheduler.run(), name="controller-scan")
        self._rebalance_task = asyncio.create_task(self.rebalancer.run(), name="rebalance")
        self._retention_task = asyncio.create_task(
            self.static_retention.run(), name="static-item-retention"
        )

    async def stop(self) -> None:
        running = (
            self._scan_task,
            self._rebalance_task,
            self._retention_task,
            *self.tasks.running(),
        )
        await cancel_and_wait(t for t in running if t is not None)
        self._scan_task = self._rebalance_task = self._retention_task = None
        self.pool.close()

    def now_ms(self) -> int:
        return int(self._clock() * 1000)

    def scan(self) -> None:
        """One election scan now (see ElectionScheduler.scan)."""
        self.scheduler.scan()

    # --- connections and cleaned brokers ---------------------------------------------------

    def _connection_opened(self, conn: Connection) -> None:
        self.connections.of(conn)

    def _connection_closed(self, conn: Connection) -> None:
        cid = self.connections.known(conn)
        if cid is None:
            return
        self.routes.connection_closed(cid)
        self.bindings.connection_closed(cid)
        inactive = self.live.on_connection_closed(cid)
        if inactive:
            log.info("broker connection closed", brokers=inactive)
            self.scheduler.wake()

    def _cleaned(self, broker_name: str, broker_ids: frozenset[int] | None) -> None:
        self.live.forget(broker_name, broker_ids)
        self.traffic.forget(broker_name, broker_ids)
        self.routes.forget(broker_name, broker_ids)
        self.bindings.forget(broker_name, broker_ids)
