"""No false failover with the default timings (issue 17, item 3): a busy, healthy cluster must
never be mistaken for a failed one (docs/architecture.md, "Fencing lease", gives the figures).

Three controllers and one group of three brokers with the default timings run for
``NO_FALSE_FAILOVER_SECONDS`` (600 by default) with 64 sends in flight to the master, beside
two processes of the Raft simulation soak (``tests/raft/test_raft_simulation.py -m soak``) that
keep both cores busy. Afterwards the group has the same master at the same epoch and the
controllers the same Raft term: nothing was elected. ``make soak`` runs it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time
from pathlib import Path

import pytest

from client.bootstrap import Bootstrap
from protocol.codes import RequestCode, ResponseCode
from remoting.client import RemotingClient
from remoting.errors import RemotingError
from tests.cluster.support import create_topic, full_sync_state_set, sync_state
from tests.controller.support import metadata
from tests.support.cluster import Cluster
from tests.support.procs import Daemon

SECONDS = float(os.environ.get("NO_FALSE_FAILOVER_SECONDS", "600"))

pytestmark = [pytest.mark.multiprocess, pytest.mark.soak, pytest.mark.timeout(SECONDS + 300)]
IN_FLIGHT = 64
TOPIC = "NoFalseFailover"


async def controller_term(cluster: Cluster) -> int:
    docs = [await metadata(a) for a in cluster.controller_addresses.split(";")]
    return max(int(d["term"]) for d in docs if d is not None)


def late_heartbeats(cluster: Cluster) -> list[int]:
    """The gaps (ms) the controllers logged as ``broker heartbeat late``: the margin left."""
    gaps: list[int] = []
    for controller in cluster.controllers:
        for line in controller.log_path.read_text(errors="replace").splitlines():
            if "broker heartbeat late" in line:
                with contextlib.suppress(ValueError, KeyError):
                    gaps.append(int(json.loads(line)["gap_ms"]))
    return gaps


def stalls_logged(cluster: Cluster) -> str:
    """What the daemons logged of standing still (each line at most every 10 s per process):
    how many stalls the run went through, and the longest a controller's Raft tick came late."""
    counts = {"raft tick late": 0, "controller stood still": 0, "controller heartbeat late": 0}
    longest = 0
    for daemon in [*cluster.controllers, *cluster.brokers]:
        for line in daemon.log_path.read_text(errors="replace").splitlines():
            for event in counts:
                if event in line:
                    counts[event] += 1
                    if event == "raft tick late":
                        with contextlib.suppress(ValueError, KeyError):
                            longest = max(longest, int(json.loads(line)["late_ms"]))
    return ", ".join(f"{event}: {n}" for event, n in counts.items()) + (
        f" (the latest tick {longest} ms)"
    )


def raft_soak(tmp: Path, index: int) -> Daemon:
    argv = [
        sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "soak",
        "tests/raft/test_raft_simulation.py",
    ]  # fmt: skip
    start = str(1000 + index * 100_000)
    env = {"RAFT_SOAK_SEEDS": "100000", "RAFT_SOAK_START": start}
    return Daemon(f"raft-soak-{index}", argv, tmp / f"raft-soak-{index}.log", env=env)


async def test_a_busy_cluster_elects_no_master_and_no_controller_leader(
    cluster: Cluster, boot: Bootstrap, tmp_path: Path
) -> None:
    cluster.add_group("broker-a", 3)
    doc = await full_sync_state_set(boot, cluster, timeout=120)
    master, epoch = doc["masterAddress"], doc["masterEpoch"]
    await create_topic(boot, master, TOPIC)
    term = await controller_term(cluster)
    burners = [raft_soak(tmp_path, i) for i in range(2)]
    conn = await RemotingClient.connect(master)
    sent = failed = 0
    try:
        for burner in burners:
            burner.start()
        deadline = time.monotonic() + SECONDS

        async def sender(slot: int) -> None:
            nonlocal sent, failed
            while time.monotonic() < deadline:
                header = {"topic": TOPIC, "queueId": slot % 4}
                try:
                    resp = await conn.request(RequestCode.SEND_MESSAGE, header, b"x" * 1024, 30)
                except RemotingError:
                    failed += 1
                    await asyncio.sleep(0.1)
                    continue
                if resp.code == ResponseCode.SUCCESS:
                    sent += 1
                else:  # fenced or not master (a false failover): counted, then the asserts
                    failed += 1
                    await asyncio.sleep(0.1)

        await asyncio.gather(*(sender(i) for i in range(IN_FLIGHT)))
        assert all(b.alive() for b in burners), "the Raft soak beside the cluster stopped"
    finally:
        conn.close()
        for burner in burners:
            burner.stop()
    after = await sync_state(boot)
    assert after is not None
    print(f"{sent:,} sends acknowledged, {failed:,} failed, in {SECONDS:.0f} s")
    gaps = late_heartbeats(cluster)
    print(
        f"heartbeats heard late (more than half the timeout after the previous one): "
        f"{len(gaps)}, the longest gap {max(gaps, default=0)} ms"
    )
    print(f"stalls logged: {stalls_logged(cluster)}")
    assert (after["masterAddress"], after["masterEpoch"]) == (master, epoch), after
    assert await controller_term(cluster) == term
    assert sent > 0
