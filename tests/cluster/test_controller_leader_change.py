"""A controller leader change must not take the master's role away (found by the chaos test,
seed 21: every lone controller-leader kill left the group unwritable).

After a kill -9 of the controller leader, the new active controller answers the master's
heartbeat with CONTROLLER_BROKER_NEED_TO_BE_REGISTERED (the heartbeat's connection is not the
one that registered the id with this controller); the master registers again; the answer names
no master (the new active controller has not yet heard the master's heartbeat, so register_broker
drops the master as not alive) at the current master epoch; the broker's apply() takes that as
"someone else or nobody is master": role.is_master = False, silently. Every later answer names it
master at the same epoch, but apply() then only updates the SyncStateSet and never restores
is_master: the master answers NOT_MASTER to every write while every controller names it master,
so no election ever comes.

Fixed at both ends: the controller counts the broker that is registering as alive when it
answers, and a master takes "no master" at its own epoch as "not heard yet", never as a
demotion (clearing a master moves the epoch on).
"""

from __future__ import annotations

import asyncio

import msgpack
import pytest

from client.bootstrap import Bootstrap
from protocol.codes import RequestCode, ResponseCode
from tests.cluster.support import full_sync_state_set, synced_master
from tests.cluster.test_chaos import ask
from tests.controller.support import agreed_leader
from tests.support.cluster import Cluster
from tests.support.procs import port_open
from tests.support.wait import stays_async, wait_until

pytestmark = pytest.mark.multiprocess


async def test_master_keeps_its_role_when_the_controller_leader_dies(
    cluster: Cluster, boot: Bootstrap
) -> None:
    cluster.add_group("broker-a", 3)
    master = await synced_master(boot, cluster)
    leader_id = await agreed_leader([c.address for c in cluster.controllers])
    leader = next(c for c in cluster.controllers if c.node_id == leader_id)
    leader.kill9()
    await asyncio.sleep(0.4)  # the fault's length, not a wait for a condition
    leader.start()
    wait_until(lambda: port_open(leader.port), "the old leader to listen again", 30)
    roles: list[str] = []

    async def still_master() -> bool:
        resp = await ask(master.address, RequestCode.GET_BROKER_RUNTIME_INFO)
        assert resp is not None and resp.code == ResponseCode.SUCCESS
        roles.append(msgpack.unpackb(resp.body)["role"])
        return roles[-1] == "MASTER"

    # The master's role, sampled through the leader change.
    await stays_async(
        still_master,
        10,
        f"{master.name} saying it is MASTER",
        interval=0.2,
        on_failure=lambda: f"the controllers' master said: {roles}",
    )
    doc = await full_sync_state_set(boot, cluster)
    assert doc["masterAddress"] == master.address
