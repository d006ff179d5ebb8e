"""What the active controller's re-balance check costs, by the work it does rather than by a
timing (issue 34; the figures are bench/scale_bench.py's and docs/architecture.md's).

The check runs every ``rebalance_interval_ms`` (5 s) on the active controller, also with the
automatic re-balance off: it exports the traffic gauges. In the 10x column of the scale bench
(100 groups) it was the longest step of the active controller's loop, 1.3 to 1.5 ms of CPU: it
built every group's ReplicaInfo from the metadata (0.6 ms), then cleared the per-group traffic
gauge and set every group's again (0.7 ms). Now, in a quiet cluster (no Raft entry applied
meanwhile), a check builds no group's metadata (it reads the GroupView's infos, built once per
applied index, as the heartbeats and the election scan do) and sets only the gauges whose value
changed; a group no longer listed loses its gauge.

Controllers in this process (the leader's groups' builds and its gauge's sets are counted),
simulated brokers of ``GROUPS`` groups speaking the real requests.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from protocol.traffic import TopicRate, TrafficReport
from tests.controller.quiet_cluster import GroupBuilds, groups_with_masters
from tests.controller.support import ServiceCluster

GROUPS = 12
ROUNDS = 10
GAUGE = "rmq_controller_group_traffic_msg_per_sec"


def report(rate: float) -> bytes:
    return TrafficReport(60_000, rate, {"Busy": TopicRate(rate, {0: rate})}).encode()


async def test_a_re_balance_check_in_a_quiet_cluster_builds_no_group_metadata(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The daemons' tick (elections after 0.5-1 s without the leader), not the tests' 20 ms:
    # the three controllers share this process's loop, and on a loaded machine a stall of it
    # past 100-200 ms moved the leadership in the middle of the count.
    async with ServiceCluster(tmp_path, tick_ms=100) as cluster:
        leader = await cluster.leader()
        term = leader.driver.term
        service = leader.service
        metrics = service.metrics
        async with groups_with_masters(cluster, service, "check", GROUPS) as brokers:
            busy = brokers[0]
            assert (await busy.heartbeat_as_a_broker(report(30.0))).code == 0

            def exported() -> dict[str, float | None]:
                return {
                    b.broker_name: metrics.registry.get_sample_value(
                        GAUGE, {"broker_name": b.broker_name}
                    )
                    for b in brokers
                }

            await service.rebalancer.step()  # the infos at today's applied index, built once
            assert leader.driver.term == term, "a Raft election: the report went elsewhere"
            want = {b.broker_name: 0.0 for b in brokers} | {busy.broker_name: 30.0}
            assert exported() == want

            built = GroupBuilds(monkeypatch, service)
            gauge = metrics.group_traffic
            labelled: list[str] = []
            labels = gauge.labels

            def counted_labels(*args: Any, **kwargs: Any) -> Any:
                labelled.append(kwargs.get("broker_name", ""))
                return labels(*args, **kwargs)

            monkeypatch.setattr(gauge, "labels", counted_labels)
            applied = {leader.driver.applied}
            for _ in range(ROUNDS):
                await service.rebalancer.step()
                applied.add(leader.driver.applied)
            # Every group's info built again only when an entry was applied meanwhile (an
            # election of the controllers' own, on a loaded machine); never per check.
            moves = len(applied) - 1
            assert built.count <= GROUPS * moves, (built.count, sorted(applied))
            # Nothing changed: no gauge set again (before: every group's, every check).
            assert labelled == [], labelled
            assert exported() == want

            # One group's traffic changes: that gauge, and only it, is set.
            assert (await busy.heartbeat_as_a_broker(report(60.0))).code == 0
            await service.rebalancer.step()
            assert labelled == [busy.broker_name], labelled
            assert exported() == want | {busy.broker_name: 60.0}

            # A group no longer listed (one that lost its master) loses its gauge; the others
            # are exported as listed.
            gone = brokers[1].broker_name
            metrics.refresh_group_traffic({n: v for n, v in want.items() if n != gone})
            assert exported() == want | {gone: None}
