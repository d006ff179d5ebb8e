"""A restarted controller applies its Raft log again to rebuild its state: those entries are its
history, not news. Found in a rolling restart (docs/operations.md, "Upgrades, one node at a
time"): each controller restart logged the whole master history of every group again at info,
`master changed` with `master: null` at epoch 0, then every master since, and `membership
changed` BOOTSTRAP, all stamped with the restart's time, so `journalctl -u rmq-controller@n0`
read as if the groups had just lost and regained their masters. Now they are debug lines, and
one info line, `state rebuilt from the raft log`, says where the replay ended.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from client.bootstrap import Bootstrap
from tests.cluster.support import full_sync_state_set
from tests.support.cluster import STEADY_MASTER, Cluster
from tests.support.procs import port_open
from tests.support.wait import wait_until

pytestmark = pytest.mark.multiprocess


def json_lines(text: str) -> list[dict[str, Any]]:
    lines = []
    for line in text.splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict):
            lines.append(doc)
    return lines


async def test_a_restarted_controller_does_not_log_its_history_as_news(
    cluster: Cluster, boot: Bootstrap
) -> None:
    cluster.add_group("broker-a", 3, config=STEADY_MASTER)
    doc = await full_sync_state_set(boot, cluster)
    epoch = doc["masterEpoch"]
    node = cluster.controllers[0]
    before = json_lines(node.log())
    assert any(d["event"] == "master changed" and d["master_epoch"] == epoch for d in before), (
        node.log()[-3000:]
    )  # it logged the election when it happened
    seen = len(node.log())
    node.stop()
    node.start()
    wait_until(lambda: port_open(node.port), f"{node.name} to listen again", 30)
    wait_until(
        lambda: any(d["event"] == "raft leader" for d in json_lines(node.log()[seen:])),
        f"{node.name} to hear the leader again",
        30,
        on_timeout=lambda: node.log()[-3000:],
    )
    after = json_lines(node.log()[seen:])
    history = [
        d
        for d in after
        if d.get("level") == "info"
        and (
            (d["event"] == "master changed" and d["master_epoch"] <= epoch)
            or d["event"] == "membership changed"
        )
    ]
    assert history == [], history
    rebuilt = [d for d in after if d["event"] == "state rebuilt from the raft log"]
    assert len(rebuilt) == 1 and rebuilt[0]["index"] > 1, after
