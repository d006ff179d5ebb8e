"""Traffic reports on the controllers (controller/service/rebalance.py): heard with heartbeats,
answered by GET_BROKER_TRAFFIC (5123) and GET_REBALANCE_PLAN (5124), used to place new static
topics; a malformed report is dropped while the heartbeat still counts."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgpack
import pytest

from client.errors import BrokerError
from protocol.codes import ControllerCode, ResponseCode
from protocol.traffic import TopicRate, TrafficReport
from tests.controller.support import FakeBroker, ServiceCluster, replica_info
from tests.support.wait import wait_until_async


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[ServiceCluster]:
    async with ServiceCluster(tmp_path) as c:
        yield c


async def traffic(broker: FakeBroker) -> dict[str, Any]:
    resp = await broker.call(ControllerCode.GET_BROKER_TRAFFIC, {})
    doc: dict[str, Any] = msgpack.unpackb(resp.body, strict_map_key=False)
    return doc


async def test_reports_are_kept_bad_ones_dropped_and_plans_and_placement_use_them(
    cluster: ServiceCluster,
) -> None:
    broker = await FakeBroker(cluster.addresses).start()
    try:
        await broker.join()
        broker.start_heartbeats()
        await cluster.leader()

        async def has_master() -> bool:
            info = await replica_info(cluster.addresses, "broker-a")
            return bool(info["masterBrokerId"] != -1)

        await wait_until_async(has_master, "a first master", 10, interval=0.02)
        report = TrafficReport(60_000, 30.0, {"Busy": TopicRate(30.0, {0: 20.0, 1: 10.0})})
        await broker.heartbeat_as_a_broker(report.encode())
        doc = await traffic(broker)
        assert doc["groups"] == [
            {
                "brokerName": "broker-a",
                "master": True,
                "heard": True,
                "msgPerSec": 30.0,
                "windowMs": 60_000,
                "topics": {"Busy": {"msgPerSec": 30.0, "queues": {"0": 20.0, "1": 10.0}}},
            }
        ]
        # Garbage and a report that breaks the rules: the heartbeat is answered, nothing stored.
        for body in (b"\xc1garbage", msgpack.packb({"windowMs": 1, "msgPerSec": -5})):
            resp = await broker.heartbeat_as_a_broker(body)
            assert resp.code == ResponseCode.SUCCESS
            assert await traffic(broker) == doc

        plan_resp = await broker.call(ControllerCode.GET_REBALANCE_PLAN, {"threshold": 0})
        plan = msgpack.unpackb(plan_resp.body)
        assert plan["groupsBefore"] == {"broker-a": 30.0}
        assert (
            plan["moves"] == [] and plan["reason"] == "fewer than two broker groups with a master"
        )
        for bad in ("abc", -1, True):
            with pytest.raises(BrokerError) as refused:
                await broker.call(ControllerCode.GET_REBALANCE_PLAN, {"threshold": bad})
            assert refused.value.code == ResponseCode.CONTROLLER_INVALID_REQUEST

        header = {"topic": "Fresh", "queues": 2, "placeGroups": 2}
        with pytest.raises(BrokerError, match="cannot place on 2 broker groups: 1 have a master"):
            await broker.call(ControllerCode.UPDATE_AND_CREATE_STATIC_TOPIC, header)
        with pytest.raises(BrokerError, match="give brokerNames or placeGroups, not both"):
            await broker.call(
                ControllerCode.UPDATE_AND_CREATE_STATIC_TOPIC,
                {**header, "placeGroups": 1, "brokerNames": "broker-a"},
            )
        created = await broker.call(
            ControllerCode.UPDATE_AND_CREATE_STATIC_TOPIC, {**header, "placeGroups": 1}
        )
        mapping = msgpack.unpackb(created.body)
        assert {q["items"][0]["brokerName"] for q in mapping["queues"]} == {"broker-a"}
    finally:
        await broker.stop()


@pytest.mark.parametrize("dry_run", [True, False])
async def test_the_automatic_mode_logs_a_dry_run_plan_or_counts_a_refused_move(
    tmp_path: Path, dry_run: bool
) -> None:
    """broker-a carries a static topic's 100 msg/s, broker-b nothing. In dry run the active
    controller counts plans and moves nothing; otherwise it tries the plan's first move, which
    these fake brokers cannot fence (no FENCE_STATIC_QUEUE handler): counted as refused, and
    the mapping is unchanged either way."""
    cluster = await ServiceCluster(
        tmp_path,
        rebalance_enabled=True,
        rebalance_dry_run=dry_run,
        rebalance_threshold=10.0,
        rebalance_hold_ms=200,
        rebalance_interval_ms=100,
    ).start()
    brokers = [
        await FakeBroker(cluster.addresses, name).start() for name in ("broker-a", "broker-b")
    ]
    try:
        for b in brokers:
            await b.join()
            b.start_heartbeats()
        leader = await cluster.leader()
        for b in brokers:

            async def has_master(name: str = b.broker_name) -> bool:
                return bool((await replica_info(cluster.addresses, name))["masterBrokerId"] != -1)

            await wait_until_async(has_master, "a first master", 10, interval=0.02)
        header = {"topic": "Busy", "queues": 4, "brokerNames": "broker-a"}
        created = await brokers[0].call(ControllerCode.UPDATE_AND_CREATE_STATIC_TOPIC, header)
        report = TrafficReport(
            1000, 100.0, {"Busy": TopicRate(100.0, dict.fromkeys(range(4), 25.0))}
        )
        metrics = leader.metrics
        counter = (
            metrics.rebalance_dry_run_plans
            if dry_run
            else metrics.rebalance_moves.labels(result="refused")
        )

        async def acted() -> bool:
            await brokers[0].heartbeat_as_a_broker(report.encode())
            return bool(counter._value.get() >= 1)

        await wait_until_async(acted, "the automatic mode to act", 15, interval=0.1)
        assert metrics.rebalance_imbalance._value.get() == 100.0
        assert metrics.rebalance_moves.labels(result="done")._value.get() == 0
        mapping = await brokers[0].call(ControllerCode.GET_STATIC_TOPIC_MAPPING, {"topic": "Busy"})
        assert mapping.body == created.body
    finally:
        for b in brokers:
            await b.stop()
        await cluster.stop()
