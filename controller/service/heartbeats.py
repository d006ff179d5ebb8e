"""Broker liveness on the active controller: BROKER_HEARTBEAT (904), answered at once (no Raft
round trip) and only by a leader whose lease a quorum confirmed, since the answer extends the
broker's write lease.

A heartbeat counts only on the connection that registered the broker. A broker turning alive
wakes the election scan.

A leader without its lease for the moment (a quorum's acknowledgement late on a busy host)
still counts a heartbeat it hears, but refuses it (2007): the answer would extend the broker's
lease, the hearing only proves the broker alive. Counting it moves the broker's deadline later,
never earlier, so the lease still ends before the controllers may elect another master, and a
leader whose lease flickered for a second does not elect a new master over a healthy one.
A heartbeat heard more than half the broker's timeout after the previous one is logged
(``broker heartbeat late``): the margin against a false failover was thin.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

from controller.config import ControllerConfig
from controller.metadata import BrokerBindings, BrokerLiveTable, ReplicasInfoManager
from controller.metadata.traffic import TrafficTable
from controller.metrics import ControllerMetrics
from controller.raft import Role
from controller.raft_driver import RaftDriver
from controller.service.connections import ConnectionIds
from controller.service.gate import LeadershipGate
from controller.service.group_view import GroupView
from controller.service.requests import Refused, count, refusal
from protocol.codes import ResponseCode
from protocol.controller_requests.base import InvalidRequest
from protocol.controller_requests.heartbeats import BrokerHeartbeat, HeartbeatAnswer
from protocol.remoting import Frame, response
from protocol.traffic import TrafficError, TrafficReport, decode_report
from remoting.server import Connection, error_response

log = structlog.get_logger(__name__)


class HeartbeatHandler:
    def __init__(
        self,
        cfg: ControllerConfig,
        driver: RaftDriver,
        manager: ReplicasInfoManager,
        live: BrokerLiveTable,
        bindings: BrokerBindings,
        gate: LeadershipGate,
        connections: ConnectionIds,
        metrics: ControllerMetrics | None,
        now_ms: Callable[[], int],
        wake_scan: Callable[[], None],
        traffic: TrafficTable | None = None,
        view: GroupView | None = None,
    ) -> None:
        self.cfg = cfg
        self.driver = driver
        self.manager = manager
        self.live = live
        self.bindings = bindings
        self.gate = gate
        self.connections = connections
        self.metrics = metrics
        self.now_ms = now_ms
        self.wake_scan = wake_scan
        self.traffic = traffic
        self.view = view or GroupView(manager)
        """The groups' metadata, built again only once a group's changed: a heartbeat builds
        none."""
        self._heard: dict[tuple[str, int], tuple[bytes, TrafficReport | str]] = {}
        """Each broker's last report body, decoded (or why it was dropped)."""
        self._active_since_ms: int | None = None
        """When this controller last became active (gaps are measured within one leadership)."""

    def broker_heartbeat(self, conn: Connection, req: Frame) -> Frame:
        """BROKER_HEARTBEAT: answered at once (no Raft round trip); may be oneway."""
        try:
            resp = self._heartbeat(conn, req)
        except Refused as refused:
            resp = refusal(req, refused)
        except InvalidRequest as exc:
            resp = refusal(req, Refused(exc.code, str(exc)))
        count(self.metrics, req, resp)
        return resp

    def _heartbeat(self, conn: Connection, req: Frame) -> Frame:
        # The answer extends the broker's write lease: only a leader whose lease a quorum
        # confirmed may give it, never one that merely believes it leads (a deposed leader
        # just thawed from SIGSTOP still does). A leader without it counts the heartbeat all
        # the same (module doc) and refuses it after.
        leased = self.driver.holds_lease()
        if not leased and self.driver.role is not Role.LEADER:
            self.gate.require_lease()  # a follower: refused with the leader's address
        beat = BrokerHeartbeat.parse(req.header, req.body)
        name = beat.broker_name
        broker_id = beat.broker_id
        # A broker may ask for its own timeout, within the configured bound: a huge one must
        # not keep a dead broker (and its master role) alive.
        timeout_ms = min(beat.heartbeat_timeout_ms, self.cfg.broker_heartbeat_timeout_max_ms)
        info = self.view.get(name)
        unknown = info is None or all(r.broker_id != broker_id for r in info.replicas)
        if unknown and self.driver.active:  # a new leader's applied state may still be behind
            if not leased:
                self.gate.require_lease()
            return error_response(
                req,
                ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
                f"broker {broker_id} of {name} is not registered",
            )
        connection_id = self.connections.of(conn)
        if self.bindings.holder(name, broker_id) != connection_id:
            # Only the connection that registered the broker (CONTROLLER_REGISTER_BROKER) speaks
            # for it; a broker told so registers again on its connection.
            if not leased:
                self.gate.require_lease()
            return error_response(
                req,
                ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
                f"broker {broker_id} of {name} is not registered on this connection "
                f"with {self.driver.id}: send CONTROLLER_REGISTER_BROKER first",
            )
        now_ms = self.now_ms()
        self._check_gap(name, broker_id, now_ms)
        revived = self.live.on_heartbeat(
            cluster=beat.cluster,
            broker_name=name,
            broker_id=broker_id,
            address=beat.broker_address,
            now_ms=now_ms,
            epoch=beat.epoch,
            max_offset=beat.max_offset,
            confirm_offset=beat.confirm_offset,
            election_priority=beat.election_priority,
            timeout_ms=max(timeout_ms, 0),
            connection_id=connection_id,
            damaged=beat.damaged_records,
        )
        if beat.traffic_report is not None and self.traffic is not None:
            self._traffic_report(name, broker_id, beat.traffic_report, now_ms)
        if revived:
            log.info("broker alive", broker_name=name, broker_id=broker_id)
            self.wake_scan()
        if not leased:
            self.gate.require_lease()  # heard, not answered
        # Who is master, at which epoch: a broker renews its write lease only on an answer
        # that names it master at its own epoch (a deposed master, thawed or healed, must not
        # take writes on the strength of a heartbeat that was merely answered).
        # And how long its write lease may run: never past the timeout this controller holds it
        # to, nor past the grace period of a newly active controller (one default timeout),
        # which cannot know what was granted to a broker it has not heard yet and deposes a
        # silent master once that grace is over. A broker that asked for a longer timeout is
        # judged dead later, but fences itself as soon as any master would be replaced.
        default_ms = self.cfg.broker_heartbeat_timeout_ms
        held_ms = min(timeout_ms, default_ms) if timeout_ms > 0 else default_ms
        header, body = HeartbeatAnswer(
            master_broker_id=None if info is None else info.master_broker_id,
            master_epoch=0 if info is None else info.master_epoch,
            heartbeat_timeout_ms=held_ms,
            # Users and rules changed: the broker fetches them again (AUTH_SYNC_USERS).
            auth_digest=self.manager.auth.digest(),
            # The brokers refuse idempotent producer ids at or above it (with authentication).
            producer_id_limit=self.manager.next_producer_id,
        ).encode()
        return response(req, ResponseCode.SUCCESS, header, body)

    def _traffic_report(self, name: str, broker_id: int, body: bytes, now_ms: int) -> None:
        """The body's traffic report into the table. A broker re-sends the same bytes until its
        next sample, so a body equal to the last one is not decoded again. A malformed one is
        dropped (the heartbeat still counts: liveness never depends on a measurement) and
        logged once."""
        assert self.traffic is not None
        key = (name, broker_id)
        last = self._heard.get(key)
        if last is not None and last[0] == body:
            decoded = last[1]
        else:
            try:
                decoded = decode_report(body)
            except TrafficError as exc:
                decoded = str(exc)
                log.warning(
                    "broker traffic report dropped",
                    broker_name=name,
                    broker_id=broker_id,
                    error=decoded,
                )
            self._heard[key] = (body, decoded)
        if isinstance(decoded, TrafficReport):
            self.traffic.on_report(name, broker_id, decoded, now_ms)

    def _check_gap(self, broker_name: str, broker_id: int, now_ms: int) -> None:
        """Log a heartbeat heard more than half the broker's timeout after its previous one."""
        last = self.live.get(broker_name, broker_id)
        since = self._active_since_ms
        if last is None or since is None or last.last_heartbeat_ms < since:
            return  # heard by an earlier leadership (or never): no gap of ours
        gap = now_ms - last.last_heartbeat_ms
        if last.timeout_ms < gap * 2 <= last.timeout_ms * 4:  # longer: it was down, not late
            log.info(
                "broker heartbeat late",
                broker_name=broker_name,
                broker_id=broker_id,
                gap_ms=gap,
                timeout_ms=last.timeout_ms,
            )

    def active_changed(self, active: bool) -> None:
        """Driver listener: liveness starts over (with its grace period) on becoming active."""
        if active:
            self._active_since_ms = self.now_ms()
            self.live.became_active(self._active_since_ms)
            self.wake_scan()
        else:
            self._active_since_ms = None
            self.live.became_standby()
