"""Traffic on the active controller: the brokers' reports (heard with their heartbeats), the
traffic (GET_BROKER_TRAFFIC, 5123) and re-balance plan (GET_REBALANCE_PLAN, 5124) requests,
placement of new topics, and the optional automatic mode.

The plan is :mod:`controller.metadata.rebalance`'s, on the groups that have a master (the only
ones a queue can move to) and the static topics' newest items. The automatic mode
(``rebalance_enabled``) checks every ``rebalance_interval_ms``: once the spread has stayed above
``rebalance_threshold`` for ``rebalance_hold_ms``, it carries out the plan's first move (one
REMAP_STATIC_TOPIC, the same fence and commit as ``rmqctl remapStaticTopic``), then waits for the
brokers' figures to show it (their traffic window) and for the imbalance to hold again before
the next: at most one move at a time, each on fresh figures. With ``rebalance_dry_run`` it logs
the plan instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import msgpack
import structlog

from controller.config import ControllerConfig
from controller.metadata import ReplicasInfoManager
from controller.metadata.heartbeat import BrokerLiveTable
from controller.metadata.rebalance import ImbalanceWatch, queue_traffic
from controller.metadata.traffic import GroupTraffic, TrafficTable, loads
from controller.metrics import ControllerMetrics
from controller.raft_driver import RaftDriver
from controller.service.gate import LeadershipGate
from controller.service.group_view import GroupView
from controller.service.requests import Refused
from controller.service.static_topics import StaticTopicHandlers
from protocol.codes import ResponseCode
from protocol.controller_requests.rebalance import RebalancePlanQuery, TrafficQuery
from protocol.rebalance import Plan, least_loaded, plan_moves
from protocol.remoting import Frame, response
from remoting.server import Connection

log = structlog.get_logger(__name__)

LIVE_RATE = "msg/s put, over the brokers' traffic window"

SETTLE_LIMIT_S = 3.0
"""How long after this controller became active a request that reads the traffic may wait for
the masters it has not heard yet (below rmqctl's 5 s timeout)."""
SETTLE_POLL_S = 0.02


class TrafficView:
    """The groups with a master and their traffic now (reports older than ``max_age_ms`` no
    longer count).

    The groups are read from ``view`` (:class:`GroupView`: built again only once a group's
    metadata changed), not built from the metadata at each check: every group's ReplicaInfo
    built every ``rebalance_interval_ms`` held the active controller's loop 0.6 ms at 100
    groups (issue 34)."""

    def __init__(
        self,
        manager: ReplicasInfoManager,
        view: GroupView,
        table: TrafficTable,
        now_ms: Callable[[], int],
        max_age_ms: int,
        live: BrokerLiveTable | None = None,
    ) -> None:
        """``live``: which brokers this controller heard since it became active, and its grace
        period (the time a newly active controller gives every live broker to be heard)."""
        self.manager = manager
        self.view = view
        self.table = table
        self.now_ms = now_ms
        self.max_age_ms = max_age_ms
        self.live = live

    def not_heard(self) -> list[str]:
        """The groups with a master whose master this controller has not heard since it became
        active: their traffic is not known. In the grace period they may yet report; after it
        their master is silent past its timeout (presumed dead, about to be replaced). Either
        way they are no place for a topic or a queue: read as idle, a busy group took new
        topics (a CI run on a slow machine: broker-a's first heartbeat to a new active
        controller came after its 1 s grace)."""
        live = self.live
        if live is None:
            return []
        return [
            i.broker_name
            for i in self.view.infos()
            if i.master_address
            and i.master_broker_id is not None
            and not live.heard_since_active(i.broker_name, i.master_broker_id)
        ]

    def unheard(self) -> list[str]:
        """:meth:`not_heard` while this controller is in its grace period ([] after: a master
        silent that long is judged dead, so no report is awaited from it)."""
        live = self.live
        if live is None or not live.in_grace(self.now_ms()):
            return []
        return self.not_heard()

    async def settled(self, limit_s: float = SETTLE_LIMIT_S) -> None:
        """Return once :meth:`unheard` is empty, or ``limit_s`` after this controller became
        active (then the groups not heard yet are left out: :meth:`groups`; a client that
        tries again is not held another ``limit_s``). At once but right after a change of
        active controller."""
        if self.live is None:
            return
        deadline = self.live.active_since_ms + int(limit_s * 1000)
        while self.unheard() and self.now_ms() < deadline:
            await asyncio.sleep(SETTLE_POLL_S)

    def groups(self) -> tuple[list[str], list[str], dict[str, GroupTraffic]]:
        """The groups with a master whose traffic is known, those whose traffic is not
        (:meth:`not_heard`), and the traffic of every group reported."""
        silent = self.not_heard()
        left_out = set(silent)
        known = [
            i.broker_name
            for i in self.view.infos()
            if i.master_address and i.broker_name not in left_out
        ]
        return known, silent, self.table.groups(self.now_ms(), self.max_age_ms)

    async def least_loaded(self, count: int) -> list[str]:
        """The ``count`` groups with a master and the least traffic, once the masters' reports
        are in (:meth:`settled`). SYSTEM_BUSY (the client tries again) when fewer than
        ``count`` groups have known traffic because masters were not heard."""
        await self.settled()
        names, silent, traffic = self.groups()
        if len(names) < count and silent:
            raise Refused(
                ResponseCode.SYSTEM_BUSY,
                f"cannot place on {count} broker groups: the active controller has not heard "
                f"the master of {', '.join(silent)} since it became active, so their traffic "
                "is not known; try again",
            )
        return least_loaded(loads(traffic, names), count)

    def plan(self, threshold: float) -> tuple[Plan, int]:
        """The plan now, and the longest traffic window of the groups (ms)."""
        names, _, traffic = self.groups()
        queues = []
        static = set()
        for topic in self.manager.static_topics:
            mapping = self.manager.static_topic(topic)
            assert mapping is not None
            static.add(topic)
            queues += queue_traffic(topic, mapping, traffic)
        ordinary = {
            (topic, group): rate
            for group, t in traffic.items()
            for topic, rate in t.topics.items()
            if topic not in static
        }
        window = max((t.window_ms for t in traffic.values()), default=0)
        return plan_moves(loads(traffic, names), queues, ordinary, threshold, LIVE_RATE), window

    def doc(self) -> dict[str, Any]:
        """GET_BROKER_TRAFFIC's document (and ``rmqctl brokerTraffic``'s)."""
        names, not_heard, traffic = self.groups()
        silent = set(not_heard)
        groups = []
        for name in sorted(set(names) | silent | set(traffic)):
            t = traffic.get(name, GroupTraffic())
            groups.append(
                {
                    "brokerName": name,
                    "master": name in names or name in silent,
                    "heard": name not in silent,
                    "msgPerSec": round(t.msg_per_sec, 3),
                    "windowMs": t.window_ms,
                    "topics": {
                        topic: {
                            "msgPerSec": round(rate, 3),
                            "queues": {
                                str(q): round(r, 3) for q, r in sorted(t.queues[topic].items())
                            },
                        }
                        for topic, rate in sorted(t.topics.items(), key=lambda x: -x[1])
                    },
                }
            )
        return {"groups": groups}


class Rebalancer:
    def __init__(
        self,
        cfg: ControllerConfig,
        driver: RaftDriver,
        gate: LeadershipGate,
        view: TrafficView,
        static_topics: StaticTopicHandlers,
        metrics: ControllerMetrics | None,
    ) -> None:
        self.cfg = cfg
        self.driver = driver
        self.gate = gate
        self.view = view
        self.static_topics = static_topics
        self.metrics = metrics
        self.watch = ImbalanceWatch(cfg.rebalance_hold_ms)

    # --- requests ------------------------------------------------------------------------------

    async def get_traffic(self, conn: Connection, req: Frame) -> Frame:
        """GET_BROKER_TRAFFIC: every group's traffic as the active controller heard it."""
        await self.gate.require_active()
        TrafficQuery.parse(req.header, req.body)
        await self.view.settled()
        await self.gate.require_active()  # still: a standby's table is empty
        return response(req, ResponseCode.SUCCESS, None, msgpack.packb(self.view.doc()))

    async def get_plan(self, conn: Connection, req: Frame) -> Frame:
        """GET_REBALANCE_PLAN: header ``threshold`` (msg/s, optional: the configured one)."""
        await self.gate.require_active()
        asked = RebalancePlanQuery.parse(req.header, req.body).threshold
        threshold = self.cfg.rebalance_threshold if asked is None else asked
        await self.view.settled()
        await self.gate.require_active()
        plan, _ = self.view.plan(threshold)
        return response(req, ResponseCode.SUCCESS, None, msgpack.packb(plan.doc()))

    # --- the automatic mode --------------------------------------------------------------------

    def active_changed(self, active: bool) -> None:
        """Driver listener: a controller starts over (reports and the imbalance's duration)."""
        self.view.table.clear()
        self.watch.reset()
        if self.metrics is not None and not active:  # the active controller's figures only
            self.metrics.rebalance_imbalance.set(0)
            self.metrics.refresh_group_traffic({})

    async def run(self) -> None:
        interval = self.cfg.rebalance_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            if self.driver.active:
                try:
                    await self.step()
                except Exception:  # one bad round must not end the loop
                    log.exception("re-balance check failed")

    async def step(self) -> None:
        """One check: the imbalance now, and a move (or a dry-run plan) when it is time."""
        if self.view.unheard():
            return  # right after becoming active: not every master's figures are in
        now = self.view.now_ms()
        plan, window_ms = self.view.plan(self.cfg.rebalance_threshold)
        if self.metrics is not None:
            self.metrics.rebalance_imbalance.set(plan.spread_before)
            self.metrics.refresh_group_traffic(plan.before)
        if not self.cfg.rebalance_enabled or not self.watch.observe(now, plan.rebalance):
            return
        if self.cfg.rebalance_dry_run or not plan.moves:
            if self.metrics is not None and self.cfg.rebalance_dry_run:
                self.metrics.rebalance_dry_run_plans.inc()
            log.info(
                "re-balance plan (dry run)" if self.cfg.rebalance_dry_run else "re-balance stuck",
                spread=round(plan.spread_before, 3),
                moves=[m.doc() for m in plan.moves],
                reason=plan.reason or None,
            )
            self.watch.acted(now, self.cfg.rebalance_hold_ms)
            return
        move = plan.moves[0]
        result = "done"
        try:
            await self.static_topics.move(move.topic, move.queue, move.target)
        except Refused as refused:
            result = "refused"
            log.warning("re-balance move refused", move=move.doc(), reason=refused.remark)
        else:
            log.info("re-balance move done", move=move.doc(), spread=round(plan.spread_before, 3))
        if self.metrics is not None:
            self.metrics.rebalance_moves.labels(result=result).inc()
        # The next decision waits for figures that show this move: a whole traffic window.
        self.watch.acted(self.view.now_ms(), max(window_ms, self.cfg.rebalance_interval_ms))
