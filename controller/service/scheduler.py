"""The election scheduler: a scan every ``scan_interval_ms``, and at once when woken (a broker
turned inactive or alive, this controller became active).

One pass expires soft state, refreshes the group metrics (only when the metadata changed: the
groups are read through GroupView, built once per applied index) and the liveness metric and, on
the active controller, starts the elections ``elections_needed`` asks for, one at a time per
group. A scan that comes more than ``STOOD_STILL_S`` late first restarts the brokers' grace
period: the controller could not hear their heartbeats meanwhile.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import structlog

from controller.config import ControllerConfig
from controller.metadata import BrokerLiveTable, ReplicasInfoManager, elections_needed
from controller.metadata.results import ReplicaInfo
from controller.metrics import ControllerMetrics
from controller.raft_driver import RaftDriver
from controller.routes import RouteTable
from controller.service.elections import ElectionHandlers
from controller.service.group_view import GroupView
from controller.service.tasks import BackgroundTasks

log = structlog.get_logger(__name__)

STOOD_STILL_S = 0.2
"""A scan this late means the process (or its host) stood still: see ``stood_still``."""


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
        self.view = view or GroupView(driver, manager)
        self._refreshed: list[ReplicaInfo] | None = None
        """The groups the metrics were last refreshed from: unchanged, not refreshed again."""
        self._in_flight: set[str] = set()
        self._scan_now = asyncio.Event()
        self._stood_still_logged_ms = -(10**9)

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
            return
        if self.metrics is not None:
            self.metrics.brokers_alive.set(
                sum(
                    1
                    for g in groups
                    for r in g.replicas
                    if self.live.is_alive(g.broker_name, r.broker_id, now)
                )
            )
        for key in self.live.expired(now):
            log.info("broker heartbeat timed out", broker_name=key[0], broker_id=key[1])
        for request in elections_needed(
            groups,
            self.live,
            now,
            enable_elect_unclean_master=self.cfg.enable_elect_unclean_master,
            in_flight=frozenset(self._in_flight),
        ):
            self._in_flight.add(request.broker_name)
            self.tasks.spawn(
                self._elect(request.broker_name, request.reason), f"elect-{request.broker_name}"
            )

    async def _elect(self, broker_name: str, reason: str) -> None:
        try:
            await self.elections.elect(broker_name, reason)
        finally:
            self._in_flight.discard(broker_name)
