"""The controller's Prometheus metrics, on a registry of its own.

Raft figures are read from the driver at scrape time (plain ints); per-group and liveness figures
are refreshed by the service's scan on the event loop, so the scrape thread never walks the
state machine's dicts while the loop changes them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector

from controller.metadata import ReplicaInfo
from controller.raft import NodeId, Role
from controller.raft_driver import RaftDriver, RaftObserver
from daemon import build_info
from remoting.server import DROP_PARTIAL_FRAME_BUDGET, Connection, RemotingServer

FSYNC_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class ControllerMetrics(RaftObserver):
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        ProcessCollector(registry=r)  # process_open_fds, process_max_fds, memory, CPU
        build_info.export(r, "controller")
        self.term = Gauge("rmq_controller_raft_term", "Current Raft term", registry=r)
        self.role = Gauge(
            "rmq_controller_raft_role", "1 for this node's current Raft role", ["role"], registry=r
        )
        self.commit_index = Gauge(
            "rmq_controller_raft_commit_index", "Highest Raft log index known committed", registry=r
        )
        self.applied_index = Gauge(
            "rmq_controller_raft_applied_index",
            "Highest Raft log index applied to the state machine",
            registry=r,
        )
        self.last_index = Gauge(
            "rmq_controller_raft_last_index", "Last index of the local Raft log", registry=r
        )
        self.elections = Counter(
            "rmq_controller_raft_elections_total",
            "Elections this node started as a candidate",
            registry=r,
        )
        self.leader_changes = Counter(
            "rmq_controller_raft_leader_changes_total",
            "Times this node saw a new Raft leader",
            registry=r,
        )
        self.fsync_seconds = Histogram(
            "rmq_controller_raft_fsync_seconds",
            "Time to make one Ready durable (group fsync)",
            buckets=FSYNC_BUCKETS,
            registry=r,
        )
        self.snapshot_bytes = Gauge(
            "rmq_controller_raft_snapshot_size_bytes", "Size of the latest snapshot", registry=r
        )
        self.dropped_total = Counter(
            "rmq_controller_raft_messages_dropped_total",
            "Raft messages dropped because a peer was unreachable or slow",
            ["peer"],
            registry=r,
        )
        self.members = Gauge(
            "rmq_controller_raft_members", "Members of the Raft group", ["kind"], registry=r
        )
        self.member_log_lost = Gauge(
            "rmq_controller_raft_member_log_lost",
            "1 per member that no longer holds entries it acknowledged (it lost its data "
            "directory and came back under its old id; known on the leader only)",
            ["member"],
            registry=r,
        )
        self._lost: set[str] = set()
        self.active = Gauge(
            "rmq_controller_active", "1 on the active controller (the Raft leader)", registry=r
        )
        self.brokers_alive = Gauge(
            "rmq_controller_brokers_alive",
            "Brokers alive by heartbeat (known on the active controller only)",
            registry=r,
        )
        self.route_registrations = Gauge(
            "rmq_controller_route_registrations",
            "Live REGISTER_BROKER registrations on this controller",
            registry=r,
        )
        self.master_epoch = Gauge(
            "rmq_controller_group_master_epoch",
            "Master epoch of a broker group",
            ["broker_name"],
            registry=r,
        )
        self.sync_state_set_size = Gauge(
            "rmq_controller_group_sync_state_set_size",
            "Members of a broker group's SyncStateSet",
            ["broker_name"],
            registry=r,
        )
        self.has_master = Gauge(
            "rmq_controller_group_has_master",
            "1 while a broker group has a master",
            ["broker_name"],
            registry=r,
        )
        self.replicas = Gauge(
            "rmq_controller_group_replicas",
            "Replicas registered in a broker group (what a full SyncStateSet holds)",
            ["broker_name"],
            registry=r,
        )
        self.master_elections = Counter(
            "rmq_controller_master_elections_total",
            "Broker master elections decided by this controller",
            ["broker_name", "result"],
            registry=r,
        )
        self.requests = Counter(
            "rmq_controller_requests_total",
            "Requests answered, by request code and response code",
            ["request", "code"],
            registry=r,
        )
        self.requests_by_codes: dict[tuple[int, int], Counter] = {}
        """``requests``' child per (request code, response code), looked up once (requests.py
        count: every answer, each heartbeat among them)."""
        self.proposals_in_flight = Gauge(
            "rmq_controller_proposals_in_flight",
            "Write decisions proposed to the Raft log and not yet applied (the shedding budget)",
            registry=r,
        )
        self.proposals_shed = Counter(
            "rmq_controller_proposals_shed_total",
            "Writes answered SYSTEM_BUSY because max_inflight_proposals or "
            "max_inflight_proposal_bytes was reached",
            registry=r,
        )
        self.notifications = Counter(
            "rmq_controller_role_notifications_total",
            "NOTIFY_BROKER_ROLE_CHANGED pushes to brokers",
            ["result"],
            registry=r,
        )
        for result in ("ok", "refused", "unreachable"):
            # Every outcome is exported from the start, so rate() sees the first push.
            self.notifications.labels(result=result)
        self.partial_frame_bytes = Gauge(
            "rmq_controller_partial_frame_bytes",
            "Bytes of incomplete frames held by all connections",
            registry=r,
        )
        self.partial_frame_drops = Counter(
            "rmq_controller_partial_frame_drops_total",
            "Connections closed because incomplete frames exceeded max_partial_frame_bytes",
            registry=r,
        )
        self.group_traffic = Gauge(
            "rmq_controller_group_traffic_msg_per_sec",
            "Messages put per second on each broker group with a master, from its brokers' "
            "heartbeats (active controller)",
            ["broker_name"],
            registry=r,
        )
        self.rebalance_imbalance = Gauge(
            "rmq_controller_rebalance_imbalance_msg_per_sec",
            "Traffic spread between the busiest and the idlest broker group (active controller)",
            registry=r,
        )
        self.rebalance_moves = Counter(
            "rmq_controller_rebalance_moves_total",
            "Queue moves of the automatic re-balance, by result (done, refused)",
            ["result"],
            registry=r,
        )
        for result in ("done", "refused"):  # exported at zero: rate() sees the first one
            self.rebalance_moves.labels(result=result)
        self.rebalance_dry_run_plans = Counter(
            "rmq_controller_rebalance_dry_run_plans_total",
            "Plans the automatic re-balance logged instead of applying (rebalance_dry_run)",
            registry=r,
        )
        self.auth_refused = Counter(
            "rmq_controller_auth_refused_total",
            "Requests refused NO_PERMISSION with authentication on, by reason (unsigned, "
            "malformed, unknown_user, bad_signature, expired, replayed, denied)",
            ["reason"],
            registry=r,
        )
        self._groups: set[str] = set()
        self._traffic: dict[str, float] = {}
        """What ``group_traffic`` exports, by broker name (:meth:`refresh_group_traffic`)."""

    def bind_server(self, server: RemotingServer) -> None:
        """Count the connections ``server`` closes for its incomplete-frame budget."""

        def dropped(_conn: Connection, reason: str) -> None:
            if reason == DROP_PARTIAL_FRAME_BUDGET:
                self.partial_frame_drops.inc()

        server.on_drop.append(dropped)
        self.partial_frame_bytes.set_function(lambda: server.partial_bytes)

    def bind(self, driver: RaftDriver) -> None:
        """Read the Raft figures from ``driver`` at scrape time."""
        self.term.set_function(lambda: driver.node.term)
        self.commit_index.set_function(lambda: driver.node.commit_index)
        self.applied_index.set_function(lambda: driver.applied)
        self.last_index.set_function(lambda: driver.node.log.last_index())
        self.active.set_function(lambda: 1.0 if driver.active else 0.0)
        for role in Role:
            self.role.labels(role=role.value).set_function(_is_role(driver, role))
        self.members.labels(kind="voter").set_function(lambda: len(driver.conf_state.voters))
        self.members.labels(kind="learner").set_function(lambda: len(driver.conf_state.learners))

    # RaftObserver ------------------------------------------------------------------------------

    def fsync(self, seconds: float) -> None:
        self.fsync_seconds.observe(seconds)

    def campaign(self) -> None:
        self.elections.inc()

    def leader_changed(self, leader: NodeId | None) -> None:
        self.leader_changes.inc()

    def snapshot_size(self, size: int) -> None:
        self.snapshot_bytes.set(size)

    def messages_dropped(self, peer: NodeId, count: int) -> None:
        self.dropped_total.labels(peer=peer).inc(count)

    def members_lost_log(self, members: Mapping[NodeId, int]) -> None:
        for member in members:
            self.member_log_lost.labels(member=member).set(1)
        for gone in self._lost - members.keys():
            self.member_log_lost.remove(gone)
        self._lost = set(members)

    # Refreshed by the service's scan ------------------------------------------------------------

    def refresh_groups(self, groups: Iterable[ReplicaInfo]) -> None:
        seen: set[str] = set()
        for info in groups:
            name = info.broker_name
            seen.add(name)
            self.master_epoch.labels(broker_name=name).set(info.master_epoch)
            self.sync_state_set_size.labels(broker_name=name).set(len(info.sync_state_set))
            self.has_master.labels(broker_name=name).set(0 if info.master_broker_id is None else 1)
            self.replicas.labels(broker_name=name).set(len(info.replicas))
        for gone in self._groups - seen:
            for gauge in (
                self.master_epoch,
                self.sync_state_set_size,
                self.has_master,
                self.replicas,
            ):
                gauge.remove(gone)
        self._groups = seen

    def refresh_group_traffic(self, loads: Mapping[str, float]) -> None:
        """``group_traffic`` made to export ``loads`` (msg/s by broker name): the gauges whose
        value changed are set, those of groups no longer listed (a group that lost its master)
        removed. Clearing and setting every group's gauge at each re-balance check held the
        active controller's loop 0.7 ms at 100 groups (issue 34)."""
        exported = self._traffic
        for name, load in loads.items():
            if exported.get(name) != load:
                self.group_traffic.labels(broker_name=name).set(load)
        for gone in exported.keys() - loads.keys():
            self.group_traffic.remove(gone)
        self._traffic = dict(loads)


def _is_role(driver: RaftDriver, role: Role) -> Callable[[], float]:
    return lambda: 1.0 if driver.role is role else 0.0
