"""``rmq_controller_raft_leader_changes_total`` counts new leaders, not the same leader found again.

Three ``rmq-controller`` processes with their metrics on. A follower cut off from the other two
(both frozen with SIGSTOP) forgets its leader and campaigns in vain: its pre-votes get no answer,
so no new term begins. Once the two run again it hears the same leader of the same term: the
leader did not change, and RmqControllerLeaderFlapping (which reads this counter) must not count
it as a change.
"""

from __future__ import annotations

import signal
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.controller.support import ControllerCluster, ControllerProc, agreed_leader
from tests.support.procs import free_port
from tests.support.wait import wait_until

pytestmark = pytest.mark.multiprocess


class MetricsCluster(ControllerCluster):
    """A ControllerCluster whose controllers serve /metrics on ports of their own."""

    def __init__(self, tmp: Path) -> None:
        self.metrics_ports: dict[str, int] = {}
        super().__init__(tmp)

    def make(self, node_id: str, port: int, peers: str, *extra: str) -> ControllerProc:
        metrics = free_port()
        self.metrics_ports[node_id] = metrics
        return super().make(node_id, port, peers, *extra, "--metrics-port", str(metrics))

    def scrape(self, node_id: str) -> dict[str, float]:
        """{sample name with its labels, as in the text format: value} of one controller."""
        url = f"http://127.0.0.1:{self.metrics_ports[node_id]}/metrics"
        with urllib.request.urlopen(url, timeout=5) as answer:
            text = answer.read().decode()
        out: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
                out[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
        return out


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[MetricsCluster]:
    with MetricsCluster(tmp_path) as c:
        yield c


def role(figures: dict[str, float], name: str) -> bool:
    return figures.get(f'rmq_controller_raft_role{{role="{name}"}}') == 1.0


async def test_the_same_leader_heard_again_is_no_leader_change(cluster: MetricsCluster) -> None:
    leader = await agreed_leader([p.address for p in cluster.procs.values()])
    follower, other = (i for i in cluster.procs if i != leader)

    def knows_leader() -> dict[str, float] | None:
        got = cluster.scrape(follower)
        ok = role(got, "follower") and got["rmq_controller_raft_leader_changes_total"] >= 1
        return got if ok else None

    before = wait_until(knows_leader, f"{follower} to follow {leader}", 15, interval=0.05)
    frozen = [cluster.procs[leader], cluster.procs[other]]
    try:
        for p in frozen:
            p.signal(signal.SIGSTOP)
        # Alone, the follower times out and campaigns; without a quorum no term begins.
        wait_until(
            lambda: role(cluster.scrape(follower), "pre-candidate"),
            f"{follower} to campaign alone",
            15,
            interval=0.05,
        )
    finally:
        for p in frozen:
            p.signal(signal.SIGCONT)
    after = wait_until(knows_leader, f"{follower} to follow a leader again", 15, interval=0.05)

    terms = after["rmq_controller_raft_term"] - before["rmq_controller_raft_term"]
    changes = (
        after["rmq_controller_raft_leader_changes_total"]
        - before["rmq_controller_raft_leader_changes_total"]
    )
    # A term has at most one leader: a new leader comes with a new term.
    assert changes <= terms, (
        f"{follower} counted {changes:.0f} leader change(s) over {terms:.0f} new term(s)"
    )
