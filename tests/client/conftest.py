"""Fixtures shared by the client tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.client.fakebroker import FakeCluster


@pytest.fixture
async def cluster() -> AsyncIterator[FakeCluster]:
    """Two fake broker groups, broker-a and broker-b, each with topic T of 4 queues."""
    c = FakeCluster()
    for name in ("broker-a", "broker-b"):
        (await c.add(name)).create("T", 4)
    yield c
    await c.stop()
