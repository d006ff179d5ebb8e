"""A controller started again under its old id with an empty data directory is named.

Raft assumes a member keeps what it acknowledged. A controller whose data directory was wiped
(a replaced disk, an operator "fixing" a refusal to start) and that is started again under its
old id with ``join = false`` founds the group afresh from the bootstrap entry and then rejects
every append: its log ends below what it acknowledged. Before, the leader ignored those
rejections (as stale) and probed again at once, for ever: the member never caught up, nothing
said why, and the two exchanged messages as fast as they could. Now the leader logs an error
naming the member and what to do, exports ``rmq_controller_raft_member_log_lost``, and
``getControllerMetaData`` marks it; it probes it once a heartbeat. The documented remedy
(remove it, add it back under a new id) then works.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.controller.support import FakeBroker, agreed_leader, metadata
from tests.controller.test_leader_changes_metric import MetricsCluster
from tests.support.cli import rmqctl_run
from tests.support.wait import wait_until, wait_until_async

pytestmark = pytest.mark.multiprocess


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[MetricsCluster]:
    with MetricsCluster(tmp_path) as c:
        yield c


def log_lines(text: str, event: str) -> list[dict[str, object]]:
    out = []
    for line in text.splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict) and doc.get("event") == event:
            out.append(doc)
    return out


async def test_a_wiped_controller_back_under_its_old_id_is_reported(
    cluster: MetricsCluster,
) -> None:
    addresses = [p.address for p in cluster.procs.values()]
    leader = await agreed_leader(addresses)
    wiped = next(i for i in cluster.procs if i != leader)
    brokers = [await FakeBroker(cluster.addresses).start() for _ in range(3)]
    try:
        assert await brokers[0].join() == 1

        async def acknowledged() -> bool:
            ours, theirs = (
                await metadata(cluster.procs[wiped].address),
                await metadata(cluster.procs[leader].address),
            )
            return bool(ours and theirs and ours["commitIndex"] >= theirs["commitIndex"] > 2)

        await wait_until_async(acknowledged, f"{wiped} to hold the leader's entries", 15)

        proc = cluster.procs[wiped]
        proc.stop()
        shutil.rmtree(proc.data_dir)
        proc.start_and_wait()
        assert await brokers[1].join() == 2  # a write after what it acknowledged: rejected

        leader_proc = cluster.procs[leader]
        lines = wait_until(
            lambda: log_lines(leader_proc.log(), "raft member lost its log"),
            f"{leader} to report that {wiped} lost its log",
            15,
            interval=0.1,
        )
        assert lines[0]["member"] == wiped
        assert lines[0]["log_ends_at"] == 1
        assert "removeController" in str(lines[0]["what_to_do"])
        gauge = f'rmq_controller_raft_member_log_lost{{member="{wiped}"}}'
        assert cluster.scrape(leader).get(gauge) == 1.0

        done = rmqctl_run("--json", "getControllerMetaData", "-a", cluster.addresses)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["lostLog"] == {wiped: 1}
        done = rmqctl_run("getControllerMetaData", "-a", cluster.addresses)
        assert done.returncode == 0, done.stderr
        row = next(line for line in done.stdout.splitlines() if line.startswith(wiped))
        assert "LOST ITS LOG" in row

        # The remedy: remove it; the group goes on with the two that kept their logs.
        done = rmqctl_run("removeController", "-a", cluster.addresses, "--id", wiped)
        assert done.returncode == 0, done.stderr
        proc.stop()
        assert await brokers[2].join() == 3
        assert gauge not in cluster.scrape(leader)
        assert not log_lines(leader_proc.log(), "raft member holds its log again")
    finally:
        for b in brokers:
            await b.stop()
