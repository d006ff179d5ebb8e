"""A broker's route registration sent again unchanged (every 30 s) is not read and checked
again (issue 34: at 1,000 topics a registration cost the controller 1.3 ms of CPU to decode and
check, each time, on every controller, and the bench counted it into the heartbeats' CPU).

Controllers in this process; the leader's topic checks are counted. What must be read again: a
body that differs by a byte, and any body after the topic was deleted from the registrations.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import controller.service.topics_routes as topics_routes
from tests.controller.support import FakeBroker, ServiceCluster

TOPICS = {f"RefreshTopic{i:04d}": 8 for i in range(200)}


async def test_an_unchanged_registration_is_not_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checked = 0
    real = topics_routes.check_topic

    def counted(*args: Any) -> None:
        nonlocal checked
        checked += 1
        real(*args)

    monkeypatch.setattr(topics_routes, "check_topic", counted)
    async with ServiceCluster(tmp_path) as cluster:
        leader = await cluster.leader()
        address = cluster.address(leader.cfg.id)
        routes = leader.service.routes
        broker = FakeBroker(cluster.addresses, "refresh-a")
        try:
            await broker.start()
            await broker.join()
            await broker.register_routes(TOPICS, address)
            assert checked == len(TOPICS)
            for _ in range(5):
                await broker.register_routes(TOPICS, address)
            assert checked == len(TOPICS)  # the same bytes: read once
            reg = routes.get("refresh-a", broker.broker_id)
            assert reg is not None and dict(reg.topics) == TOPICS

            changed = TOPICS | {"RefreshTopic0000": 16}
            await broker.register_routes(changed, address)
            assert checked == 2 * len(TOPICS)
            reg = routes.get("refresh-a", broker.broker_id)
            assert reg is not None and reg.topics["RefreshTopic0000"] == 16

            routes.drop_topic("RefreshTopic0001")  # a deleted topic leaves the registrations
            await broker.register_routes(changed, address)
            assert checked == 3 * len(TOPICS)  # still listed by the broker: read again
            reg = routes.get("refresh-a", broker.broker_id)
            assert reg is not None and "RefreshTopic0001" in reg.topics
        finally:
            await broker.stop()
