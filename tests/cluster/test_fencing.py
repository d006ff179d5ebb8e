"""Fencing and detection of a frozen master, seen from a client (issue 17, item 3;
docs/architecture.md, "Fencing lease"): a send already waiting on a master that froze (SIGSTOP:
its connections stay open, only time tells) is taken to the new master once the controllers'
route names it, instead of waiting out its ``send_timeout``.

Real processes on loopback: three controllers and one group of three brokers with the default
timings; every process is thawed and ended by its PID when the test ends, also when it fails.
"""

from __future__ import annotations

import asyncio
import signal

import pytest

from client import Producer
from client.bootstrap import Bootstrap
from tests.cluster.support import (
    create_topic,
    sync_state,
    synced_master,
)
from tests.support.cluster import Cluster

pytestmark = pytest.mark.multiprocess

TOPIC = "FencingTopic"
SEND_TIMEOUT = 60.0
"""Far beyond a failover (about the brokers' 1 s timeout): a send that ends well before it did
not wait it out."""


async def test_a_send_waiting_on_a_frozen_master_goes_to_the_new_master(
    cluster: Cluster, boot: Bootstrap
) -> None:
    cluster.add_group("broker-a", 3)
    old = await synced_master(boot, cluster)
    await create_topic(boot, old.address, TOPIC)
    async with Producer(
        cluster.controller_addresses, send_timeout=SEND_TIMEOUT, send_deadline=2 * SEND_TIMEOUT
    ) as producer:
        await producer.send(TOPIC, b"warm-up")  # the route is cached, the connection open
        old.signal(signal.SIGSTOP)
        try:
            # Sent to the frozen master (the route still names it): only the route watch can
            # end the wait before SEND_TIMEOUT.
            result = await asyncio.wait_for(producer.send(TOPIC, b"after"), SEND_TIMEOUT / 2)
        finally:
            old.signal(signal.SIGCONT)
    after = await sync_state(boot)
    assert after is not None and after["masterAddress"] != old.address, after
    assert result.broker_name == "broker-a"
