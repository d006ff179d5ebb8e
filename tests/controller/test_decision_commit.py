"""A decision commits exactly the events it carries, in order, through the Raft log of three
in-process controllers (real sockets, real Raft storage)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from controller.metadata import ApplyBrokerId, Decision, UpdateTopic
from protocol.codes import ResponseCode
from tests.controller.support import ServiceCluster
from tests.support.wait import wait_until_async

GROUP = "broker-multi"


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[ServiceCluster]:
    async with ServiceCluster(tmp_path) as c:
        yield c


def apply_id(broker_id: int, code: str) -> ApplyBrokerId:
    return ApplyBrokerId(
        cluster="DefaultCluster", broker_name=GROUP, broker_id=broker_id, register_code=code
    )


def ids_on(node: object) -> set[int]:
    info = node.service.manager.replica_info(GROUP)  # type: ignore[attr-defined]
    return {r.broker_id for r in info.replicas} if info is not None else set()


async def test_a_decision_with_several_events_commits_every_one(cluster: ServiceCluster) -> None:
    leader = await cluster.leader()
    # The second event is valid only once the first applied (id 2 is next after id 1).
    decision: Decision[str] = Decision(
        events=(apply_id(1, "code-1"), apply_id(2, "code-2")), response="both applied"
    )
    before = leader.driver.status().last_index
    settled = await leader.service.committer.settle(decision)
    assert leader.driver.status().last_index == before + 2
    assert settled.code == ResponseCode.SUCCESS
    assert settled.response == "both applied"
    assert settled.events == ()
    assert ids_on(leader) == {1, 2}  # applied on the leader before the answer
    for node in cluster.nodes.values():
        await wait_until_async(lambda node=node: ids_on(node) == {1, 2}, "both ids everywhere", 5)


async def test_events_after_a_rejected_one_are_not_committed(cluster: ServiceCluster) -> None:
    leader = await cluster.leader()
    # The topic's group does not exist yet: the first event is rejected when applied, and the
    # second, decided as following it, must not take effect on its own.
    decision: Decision[str] = Decision(
        events=(UpdateTopic(broker_name=GROUP, topic="T", queues=4), apply_id(1, "code-1")),
        response="never given",
    )
    before = leader.driver.status().last_index
    settled = await leader.service.committer.settle(decision)
    assert settled.code != ResponseCode.SUCCESS
    assert settled.response is None
    assert GROUP in settled.remark
    assert leader.driver.status().last_index == before + 1  # the second was never proposed
    assert ids_on(leader) == set()
