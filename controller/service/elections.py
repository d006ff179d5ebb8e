"""Master elections: CONTROLLER_ELECT_MASTER (1002) asked by a broker or an admin (naming a
broker with ``designateElect``, or a planned switch with ``plannedSwitch``), and the elections the
scan starts (:mod:`controller.service.scheduler`). The policy is
``ReplicasInfoManager.elect_master``'s, and one that names no broker (a planned switch too)
waits like the scan's during a newly active controller's grace period (``held_by_grace``); each outcome is counted in
``rmq_controller_master_elections_total``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import structlog

from controller.config import ControllerConfig
from controller.documents import group_metadata
from controller.metadata import BrokerLiveTable, Decision, ReplicasInfoManager, held_by_grace
from controller.metrics import ControllerMetrics
from controller.service.commit import DecisionCommitter
from controller.service.gate import LeadershipGate
from controller.service.requests import Refused, refuse
from protocol.codes import code_name
from protocol.controller_requests.groups import ElectMaster
from protocol.remoting import Frame, response
from remoting.server import Connection

log = structlog.get_logger(__name__)


class ElectionHandlers:
    def __init__(
        self,
        cfg: ControllerConfig,
        manager: ReplicasInfoManager,
        live: BrokerLiveTable,
        gate: LeadershipGate,
        committer: DecisionCommitter,
        metrics: ControllerMetrics | None,
        now_ms: Callable[[], int],
    ) -> None:
        self.cfg = cfg
        self.manager = manager
        self.live = live
        self.gate = gate
        self.committer = committer
        self.metrics = metrics
        self.now_ms = now_ms

    async def elect_master(self, conn: Connection, req: Frame) -> Frame:
        await self.gate.require_active()
        ask = ElectMaster.parse(req.header, req.body)
        name = ask.broker_name
        designated = ask.designated
        # an operator's election naming no broker: a planned switch away from an alive master
        planned = ask.planned_switch
        now = self.now_ms()
        alive = self.live.election_view(name, now)
        if ask.force and designated in alive:
            # The operator knows the broker reports damage no replica could repair: elect it.
            alive[designated] = replace(alive[designated], damaged=0)
        info = self.manager.replica_info(name)
        held = None
        if designated is None and info is not None:
            held = held_by_grace(
                info,
                self.live,
                now,
                enable_elect_unclean_master=self.cfg.enable_elect_unclean_master,
                first_election_wait_ms=self.cfg.first_election_wait_ms,
            )
        d = (
            held
            if held is not None
            else self.manager.elect_master(
                name,
                alive_replicas=alive,
                designated_broker_id=designated,
                enable_elect_unclean_master=self.cfg.enable_elect_unclean_master,
                planned=planned,
            )
        )
        settled = await self.committer.settle(d)
        admin = designated is not None or planned
        self._count(name, settled, "admin" if admin else "request")
        info = settled.response
        if info is None:
            raise refuse(settled)
        header, body = group_metadata(
            info,
            self.manager.sealed_queues(name),
            remark=None if settled.ok else settled.remark,
        ).encode()
        return response(req, settled.code, header, body)

    async def elect(self, broker_name: str, reason: str) -> None:
        """A controller-triggered election of ``broker_name``'s master (the scan's)."""
        d = self.manager.elect_master(
            broker_name,
            alive_replicas=self.live.election_view(broker_name, self.now_ms()),
            enable_elect_unclean_master=self.cfg.enable_elect_unclean_master,
        )
        if not d.events:
            return
        log.info("electing a master", broker_name=broker_name, reason=reason)
        try:
            settled = await self.committer.settle(d, shed=False)
        except Refused as exc:
            log.warning("election not committed", broker_name=broker_name, error=exc.remark)
            return
        self._count(broker_name, settled, "controller")
        if settled.ok or settled.response is None:
            return
        # The master was cleared with no successor: say why, and what would bring one back.
        alive = sorted(self.live.election_view(broker_name, self.now_ms()))
        in_sync = sorted(settled.response.sync_state_set)
        unclean = self.cfg.enable_elect_unclean_master
        # A warning while a replica is alive and none may be elected (an operator may act); a
        # group none of whose replicas is alive (every one stopped, as make run's Ctrl-C does)
        # is said at info level: its brokers' own alerts tell of that.
        say = log.warning if alive else log.info
        say(
            f"broker group {broker_name} has no master: {settled.remark} (SyncStateSet "
            f"{in_sync}, alive replicas {alive}, enable_elect_unclean_master "
            f"{'on' if unclean else 'off'}); it gets one when "
            f"{'a replica' if unclean else 'a SyncStateSet member'} comes back "
            "(docs/operations.md, 'Unclean election and what it risks')",
            broker_name=broker_name,
            sync_state_set=in_sync,
            alive=alive,
        )

    def _count(self, broker_name: str, d: Decision[Any], trigger: str) -> None:
        if self.metrics is None:
            return
        result = "elected" if d.ok else code_name(d.code).lower()
        self.metrics.master_elections.labels(broker_name=broker_name, result=result).inc()
        if d.ok:
            log.info("master elected", broker_name=broker_name, trigger=trigger)
