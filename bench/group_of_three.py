"""The cluster most benchmarks run against: 3 controllers and one broker group of 3 replicas
(``broker-a``, all-ack, flush async, 1 GiB segments) in a temporary directory, plus what those
benchmarks share around it (message bodies, fast client settings)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from client.bootstrap import Bootstrap
from tests.cluster.support import full_sync_state_set
from tests.support.cluster import Cluster

FAST_CONSUMER: dict[str, Any] = {
    "heartbeat_interval": 0.5,
    "commit_interval": 0.5,
    "suspend_ms": 1000,
    "route_refresh_interval": 1.0,
}
"""Consumer settings that make a benchmark's consumer join and rebalance within a second."""


def payload(size: int) -> bytes:
    """``size`` bytes of random hex digits: a body no compression shrinks to nothing."""
    return os.urandom(size // 2).hex().encode()[:size]


@dataclass(frozen=True, slots=True)
class GroupOfThree:
    cluster: Cluster
    boot: Bootstrap
    master: str
    """The master's address once all three replicas were in the sync state set."""
    sync_state: dict[str, Any]

    @property
    def addresses(self) -> str:
        """The controllers' addresses, the bootstrap a client is given."""
        return self.cluster.controller_addresses


@asynccontextmanager
async def group_of_three(
    prefix: str, per_broker: list[list[str]] | None = None
) -> AsyncIterator[GroupOfThree]:
    """Start the cluster in a temporary directory named ``prefix``..., yield it once all three
    replicas are in sync, and stop every process it started on the way out (also on errors).
    ``per_broker[i]``: flags of broker ``i`` only (a gRPC port, say)."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        cluster = Cluster(Path(tmp))
        boot = Bootstrap(cluster.controller_addresses, timeout=2.0)
        try:
            cluster.start_controllers()
            cluster.add_group("broker-a", 3, per_broker=per_broker, segment_bytes=1 << 30)
            doc = await full_sync_state_set(boot, cluster, timeout=120)
            yield GroupOfThree(cluster, boot, doc["masterAddress"], doc)
        finally:
            boot.close()
            cluster.stop()
