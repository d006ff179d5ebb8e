"""Fixtures the whole-cluster tests share: three controllers as processes, a Bootstrap to them,
and test hosts in network namespaces (``net``: skipped where namespaces cannot be made, failed
there under CI=true). Brokers are each test's own to add (``cluster.add_group``); a module that
always wants the same group overrides ``cluster`` and adds it. Every process is thawed (a test
may have frozen it) and ended by its PID, also when the test fails."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from client.bootstrap import Bootstrap
from tests.cluster import netns
from tests.support.cluster import Cluster, controllers_started


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with controllers_started(tmp_path) as c:
        yield c


@pytest.fixture
async def boot(cluster: Cluster) -> AsyncIterator[Bootstrap]:
    b = Bootstrap(cluster.controller_addresses, timeout=2.0)
    yield b
    b.close()


@pytest.fixture
def net() -> Iterator[netns.HostNet]:
    netns.require()  # skips where namespaces cannot be made; fails under CI=true
    hosts = netns.HostNet()
    try:
        yield hosts
    finally:
        hosts.close()
