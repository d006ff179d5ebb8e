"""A quiet cluster of simulated broker groups, and a count of the group metadata the leader
builds: what the cost tests of the active controller's periodic work count (the heartbeats and
the election scan in test_heartbeat_cost.py, the re-balance check in
test_rebalance_check_cost.py), by the work done rather than by a timing (issue 34)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from controller.metadata.group import BrokerGroup
from controller.metadata.results import ReplicaInfo
from tests.controller.support import FakeBroker, ServiceCluster
from tests.support.wait import wait_until_async

QUIET_TIMEOUT_MS = 10_000
"""The brokers' heartbeat timeout (the controllers' largest, broker_heartbeat_timeout_max_ms)."""


@asynccontextmanager
async def groups_with_masters(
    cluster: ServiceCluster, service: Any, prefix: str, groups: int
) -> AsyncIterator[list[FakeBroker]]:
    """``groups`` groups (``prefix``-00, -01, ...) of one simulated broker each, joined and
    heartbeating once, once every group has a master in ``service``'s metadata (20 s at
    most); every broker stopped on the way out, also on failure.

    Each broker asks for a heartbeat timeout of ``QUIET_TIMEOUT_MS``: the tests heartbeat
    seldom or not at all while they count, and with the tests' default (600 ms) a loaded
    machine's stall made the scan declare masters inactive and elect them again, entries
    applied in the middle of a count (test_heartbeat_cost failed with 77 builds, the applied
    index moving 38, 48, 49, 55, at load 17)."""
    brokers = [FakeBroker(cluster.addresses, f"{prefix}-{g:02d}") for g in range(groups)]
    try:
        for broker in brokers:
            broker.timeout_ms = QUIET_TIMEOUT_MS
            await broker.start()
            await broker.join()
        for broker in brokers:
            assert (await broker.heartbeat_as_a_broker()).code == 0

        def every_group_has_a_master() -> bool:
            infos = service.manager.replica_infos()
            return len(infos) == groups and all(i.master_broker_id is not None for i in infos)

        await wait_until_async(every_group_has_a_master, "a master in every group", 20)
        yield brokers
    finally:
        for broker in brokers:
            await broker.stop()


class GroupBuilds:
    """Counts the ReplicaInfos built from the groups ``service``'s metadata holds now (the
    leader's, not the followers': all three controllers of a ServiceCluster run in this
    process), from its creation on; ``count`` may be set back to 0."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, service: Any) -> None:
        self.count = 0
        original = BrokerGroup.info
        mine = set(map(id, service.manager._groups.values()))

        def counted(group: BrokerGroup) -> ReplicaInfo:
            self.count += id(group) in mine
            return original(group)

        monkeypatch.setattr(BrokerGroup, "info", counted)
