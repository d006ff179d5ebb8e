"""Cluster.add_group (tests/support/cluster.py): when one broker of a group cannot start, the
test fails and Cluster.stop() still ends every broker of the group that did start. Before, the
group was recorded only once all of it listened, and the others outlived the failed test."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.support.cluster import Cluster

pytestmark = pytest.mark.multiprocess


def test_a_broker_that_cannot_start_leaves_no_other_broker_running(tmp_path: Path) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    cluster = Cluster(tmp_path)
    try:
        cluster.start_controllers()
        per_broker = [[], ["--ha-port", str(taken.getsockname()[1])], []]
        with pytest.raises(AssertionError, match="broker-a-1 exited early"):
            cluster.add_group("broker-a", 3, per_broker=per_broker)
        started = [b for b in cluster.brokers if b.proc is not None]
        assert len(started) == 3
    finally:
        cluster.stop()
        taken.close()
    for b in started:
        assert b.proc is not None and b.proc.poll() is not None, f"{b.name} still runs"
