"""What a broker may claim over the wire (issue 9 item 5): heartbeat figures bounded, the
register code checked, a heartbeat counted only on the connection that registered."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from client.errors import BrokerError
from protocol.codes import ResponseCode
from tests.controller.support import FakeBroker, ServiceCluster


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[ServiceCluster]:
    async with ServiceCluster(tmp_path, broker_heartbeat_timeout_max_ms=5000) as c:
        yield c


@pytest.fixture
async def broker(cluster: ServiceCluster) -> AsyncIterator[FakeBroker]:
    b = await FakeBroker(cluster.addresses, register_code="the-code").start()
    try:
        await b.join()
        yield b
    finally:
        await b.stop()


async def test_a_huge_heartbeat_timeout_counts_as_the_configured_bound(
    cluster: ServiceCluster, broker: FakeBroker
) -> None:
    broker.timeout_ms = 3_600_000
    await broker.heartbeat()
    service = (await cluster.leader()).service
    live = service.live.get(broker.broker_name, broker.broker_id)
    assert live is not None and live.timeout_ms == 5000


@pytest.mark.parametrize("field", ["epoch", "maxOffset"])
async def test_heartbeat_figures_out_of_range_are_refused(broker: FakeBroker, field: str) -> None:
    setattr(broker, {"epoch": "epoch", "maxOffset": "max_offset"}[field], -1)
    with pytest.raises(BrokerError) as err:
        await broker.heartbeat()
    assert err.value.code == ResponseCode.CONTROLLER_INVALID_REQUEST
    assert field in str(err.value)


async def test_a_heartbeat_counts_only_on_the_connection_that_registered(
    cluster: ServiceCluster, broker: FakeBroker
) -> None:
    await broker.heartbeat()
    broker.close_connections()  # the next request goes on a new connection
    with pytest.raises(BrokerError) as err:
        await broker.heartbeat()
    assert err.value.code == ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED
    await broker.register()  # registering on the new connection binds it
    await broker.heartbeat()


async def test_a_wrong_register_code_is_refused_and_the_right_one_takes_the_id_over(
    cluster: ServiceCluster, broker: FakeBroker
) -> None:
    await broker.heartbeat()  # alive, its connection holds the id
    other = await FakeBroker(cluster.addresses, register_code="forged").start()
    try:
        other.broker_id = broker.broker_id
        with pytest.raises(BrokerError) as err:
            await other.register(send_code=False)  # no code, the holder is alive
        assert err.value.code == ResponseCode.CONTROLLER_BROKER_ID_INVALID
        with pytest.raises(BrokerError) as err:
            await other.register(code="forged")
        assert err.value.code == ResponseCode.CONTROLLER_BROKER_ID_INVALID
        other.register_code = "the-code"  # the broker itself, on a new connection
        await other.register(code="the-code")
        await other.heartbeat()
        with pytest.raises(BrokerError) as err:
            await broker.heartbeat()  # the old connection no longer speaks for the id
        assert err.value.code == ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED
    finally:
        await other.stop()


async def test_a_dead_brokers_id_is_not_taken_without_its_register_code(
    cluster: ServiceCluster, broker: FakeBroker
) -> None:
    """Once the holder's connection closed (a dead master), a forger that registers its id
    from a new connection, with no code, could keep it "alive" by heartbeating: refused."""
    await broker.heartbeat()
    broker.close_connections()  # the master died: its connection is gone
    forger = await FakeBroker(cluster.addresses, register_code="unknown").start()
    try:
        forger.broker_id = broker.broker_id
        with pytest.raises(BrokerError) as err:
            await forger.register(send_code=False)
        assert err.value.code == ResponseCode.CONTROLLER_INVALID_REQUEST
        assert "registerCheckCode is required" in str(err.value)
        with pytest.raises(BrokerError) as err:
            await forger.heartbeat()
        assert err.value.code == ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED
        await broker.register()  # the broker itself, with its code, comes back
        await broker.heartbeat()
    finally:
        await forger.stop()
