"""The election scheduler: a scan every ``scan_interval_ms``, and at once when woken (a broker
turned inactive or alive, this controller became active).

One pass expires soft state, refreshes the group metrics (only when the metadata changed: the
groups are read through GroupView, built again only once a group's metadata changed) and the
liveness metric and, on the active controller, starts the elections ``elections_needed`` asks for, one at a time per
group. A scan that comes more than ``STOOD_STILL_S`` late first restarts the brokers' grace
period: the controller could not hear their heartbeats meanwhile.

A pass looks at no broker and no registration until something may have changed (issue 34):
the route table's expiry waits for its earliest expiry, and the alive count and the masters'
verdicts of a look at every broker are kept while the groups, the live table's ``changes`` and
its grace state stay, up to the earliest deadline of a broker alive at that look (``_Verdicts``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from controller.config import ControllerConfig
from controller.metadata import BrokerLiveTable, ReplicasInfoManager, elections_needed
from controller.metadata.results import ReplicaInfo
from controller.metadata.scheduler import ElectRequest
from controller.metrics import ControllerMetrics
from controller.raft_driver import RaftDriver
from controller.routes import RouteTable
from controller.service.elections import ElectionHandlers
from controller.service.group_view import GroupView
from controller.service.tasks import BackgroundTasks

log = structlog.get_logger(__name__)

STOOD_STILL_S = 0.2
"""A scan this late means the process (or its host) stood still: see ``stood_still``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class _Verdicts:
    """What a pass over every group and broker found at ``at_ms``; true for later passes while
    the groups are the same list, the live table's ``changes`` and its grace state stay, and
    no broker alive then reached its deadline (``until_ms``): each broker's liveness, and so
    whether a group's master is declared dead, reads the same until then (issue 34: at 700
    groups this pass was 0.7 ms of every scan, ten a second)."""

    groups: list[ReplicaInfo]
    changes: int
    in_grace: bool
    at_ms: int
    until_ms: int
    brokers_alive: int
    masters_dead: list[ElectRequest]
    """The elections ``elections_needed`` asks for among the groups with a master."""
    masterless: list[ReplicaInfo]
    """The groups without a master: judged again every pass (their candidates' heartbeats
    carry what the election policy reads)."""

    def holds(self, groups: list[ReplicaInfo], live: BrokerLiveTable, now_ms: int) -> bool:
        return (
            groups is self.groups
            and live.changes == self.changes
            and self.at_ms <= now_ms <= self.until_ms
            and live.in_grace(now_ms) == self.in_grace
        )


class ElectionScheduler:
    def __init__(
        self,
        cfg: ControllerConfig,
        driver: RaftDriver,
        manager: ReplicasInfoManager,
        live: BrokerLiveTable,
        routes: RouteTable,
        elections: ElectionHandlers,
        tasks: BackgroundTasks,
        metrics: ControllerMetrics | None,
        now_ms: Callable[[], int],
        view: GroupView | None = None,
    ) -> None:
        self.cfg = cfg
        self.driver = driver
        self.manager = manager
        self.live = live
        self.routes = routes
        self.elections = elections
        self.tasks = tasks
        self.metrics = metrics
        self.now_ms = now_ms
        self.view = view or GroupView(manager)
        self._refreshed: list[ReplicaInfo] | None = None
        """The groups the metrics were last refreshed from: unchanged, not refreshed again."""
        self._in_flight: set[str] = set()
        self._scan_now = asyncio.Event()
        self._stood_still_logged_ms = -(10**9)
        self._verdicts: _Verdicts | None = None

    def wake(self) -> None:
        """Scan at once."""
        self._scan_now.set()

    async def run(self) -> None:
        interval = self.cfg.scan_interval_ms / 1000
        loop = asyncio.get_running_loop()
        while True:
            # Not asyncio.wait_for: on 3.11 it can swallow a cancellation that races a wake-up.
            due = loop.time() + interval
            timer = loop.call_later(interval, self._scan_now.set)
            try:
                await self._scan_now.wait()
            finally:
                timer.cancel()
            self._scan_now.clear()
            late = loop.time() - due
            try:
                if late > STOOD_STILL_S:
                    self.stood_still(late)
                self.scan()
            except Exception:
                log.exception("controller scan failed")

    def stood_still(self, late_s: float) -> None:
        """The scan came ``late_s`` late: this controller could not listen meanwhile, so it
        judges no broker by that silence (``BrokerLiveTable.stood_still``)."""
        now = self.now_ms()
        self.live.stood_still(now)
        if self.driver.active and now - self._stood_still_logged_ms >= 10_000:
            self._stood_still_logged_ms = now  # at most every 10 s, like ``raft tick late``
            log.info("controller stood still", late_ms=round(late_s * 1000))

    def scan(self) -> None:
        """One pass: expire soft state, refresh metrics, start the elections needed."""
        now = self.now_ms()
        self.routes.expire(now)
        groups = self.view.infos()
        if self.metrics is not None:
            if groups is not self._refreshed:
                self.metrics.refresh_groups(groups)
                self._refreshed = groups
            self.metrics.route_registrations.set(len(self.routes))
        if not self.driver.active:
            if self.metrics is not None:
                self.metrics.brokers_alive.set(0)
            self._verdicts = None
            return
        verdicts = self._verdicts
        if verdicts is None or not verdicts.holds(groups, self.live, now):
            verdicts = self._verdicts = self._judge(groups, now)
        if self.metrics is not None:
            self.metrics.brokers_alive.set(verdicts.brokers_alive)
        for key in self.live.expired(now):
            log.info("broker heartbeat timed out", broker_name=key[0], broker_id=key[1])
        in_flight = frozenset(self._in_flight)
        requests = [r for r in verdicts.masters_dead if r.broker_name not in in_flight]
        if verdicts.masterless:
            requests += elections_needed(
                verdicts.masterless,
                self.live,
                now,
                enable_elect_unclean_master=self.cfg.enable_elect_unclean_master,
                in_flight=in_flight,
                first_election_wait_ms=self.cfg.first_election_wait_ms,
            )
            requests.sort(key=lambda r: r.broker_name)
        for request in requests:
            self._in_flight.add(request.broker_name)
            self.tasks.spawn(
                self._elect(request.broker_name, request.reason), f"elect-{request.broker_name}"
            )

    def _judge(self, groups: list[ReplicaInfo], now: int) -> _Verdicts:
        """A look at every group and broker (see ``_Verdicts``)."""
        live = self.live
        mastered = [g for g in groups if g.master_broker_id is not None]
        return _Verdicts(
            groups=groups,
            changes=live.changes,
            in_grace=live.in_grace(now),
            at_ms=now,
            until_ms=live.alive_until(now),
            brokers_alive=sum(
                1
                for g in groups
                for r in g.replicas
                if live.is_alive(g.broker_name, r.broker_id, now)
            ),
            masters_dead=elections_needed(
                mastered,
                live,
                now,
                enable_elect_unclean_master=self.cfg.enable_elect_unclean_master,
            ),
            masterless=[g for g in groups if g.master_broker_id is None],
        )

    async def _elect(self, broker_name: str, reason: str) -> None:
        try:
            await self.elections.elect(broker_name, reason)
        finally:
            self._in_flight.discard(broker_name)
