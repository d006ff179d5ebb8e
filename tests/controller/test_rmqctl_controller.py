"""rmqctl's controller commands against three ``rmq-controller`` processes.

The brokers are in-process fakes (tests/controller/support.py) that register, heartbeat and
answer GET_BROKER_EPOCH_CACHE; rmqctl runs in this process (tests/support/cli.py: the exit code
and output of ``python -m rmqctl``) on a thread of its own, so they keep beating on the loop.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.controller.support import (
    ControllerCluster,
    ControllerProc,
    FakeBroker,
    agreed_leader,
    replica_info,
)
from tests.support.cli import rmqctl_run
from tests.support.procs import free_port, port_open
from tests.support.wait import wait_until, wait_until_async

pytestmark = pytest.mark.multiprocess

METADATA_KEYS = {
    "group",
    "leaderId",
    "leaderAddress",
    "term",
    "peers",
    "roles",
    "unreachable",
    "lostLog",
}


@pytest.fixture(scope="module")
def processes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControllerCluster]:
    with ControllerCluster(
        tmp_path_factory.mktemp("rmqctl-controllers"),
        config={"broker_heartbeat_timeout_ms": 1000},
    ) as cluster:
        yield cluster


async def rmqctl(*args: str) -> tuple[int, str, str]:
    """``rmqctl *args`` without holding the loop the fake brokers beat on."""
    done = await asyncio.to_thread(rmqctl_run, *args)
    return done.returncode, done.stdout, done.stderr


async def ok_json(*args: str) -> Any:
    code, out, err = await rmqctl("--json", *args)
    assert code == 0, err
    return json.loads(out)


async def fails(*args: str) -> str:
    code, out, err = await rmqctl(*args)
    assert code == 1, (out, err)
    assert err.startswith("rmqctl: ") and err.count("\n") == 1, err
    return err


@pytest.fixture
async def group(processes: ControllerCluster) -> AsyncIterator[tuple[str, list[FakeBroker]]]:
    """A fresh broker group of two heart-beating fakes with an elected master."""
    name = f"group-{free_port()}"
    brokers = [await FakeBroker(processes.addresses, name).start() for _ in range(2)]
    try:
        for b in brokers:
            await b.join()
            b.start_heartbeats()

        async def elected() -> bool:
            return bool((await replica_info(processes.addresses, name))["masterBrokerId"] != -1)

        await wait_until_async(elected, "a master elected", 15, interval=0.05)
        yield name, brokers
    finally:
        for b in brokers:
            await b.stop()


async def test_get_controller_metadata_names_the_leader_and_the_peers(
    processes: ControllerCluster,
) -> None:
    a = processes.addresses
    leader = await agreed_leader([p.address for p in processes.procs.values()])
    doc = await ok_json("getControllerMetaData", "-a", a)
    assert set(doc) == METADATA_KEYS
    assert doc["lostLog"] == {}  # every member kept its log
    assert doc["leaderId"] == leader
    assert doc["leaderAddress"] == processes.procs[leader].address
    assert doc["peers"] == {i: p.address for i, p in processes.procs.items()}
    assert isinstance(doc["term"], int) and doc["term"] >= 2
    # Any one address is enough; human output is a table.
    doc = await ok_json("getControllerMetaData", "-a", processes.procs["n2"].address)
    assert doc["leaderId"] == leader
    code, out, _ = await rmqctl("getControllerMetaData", "-a", a)
    assert code == 0 and "leader" in out and processes.procs[leader].address in out


async def test_sync_state_set_elect_master_and_broker_epochs(
    processes: ControllerCluster, group: tuple[str, list[FakeBroker]]
) -> None:
    a = processes.addresses
    name, brokers = group
    doc = await ok_json("getSyncStateSet", "-a", a, "-b", name)
    assert set(doc) == {
        "brokerName",
        "masterBrokerId",
        "masterAddress",
        "masterEpoch",
        "syncStateSetEpoch",
        "syncStateSet",
        "replicas",
    }
    master_id = doc["masterBrokerId"]
    master = brokers[master_id - 1]
    other = next(b for b in brokers if b is not master)
    assert doc["brokerName"] == name and doc["masterAddress"] == master.address
    assert doc["syncStateSet"] == [master_id] and doc["masterEpoch"] == 1
    assert doc["replicas"] == [
        {"brokerId": b.broker_id, "address": b.address, "alive": True, "inSync": b is master}
        for b in brokers
    ]
    # A broker outside the SyncStateSet cannot be designated (no unclean election).
    err = await fails("electMaster", "-a", a, "-b", name, "-i", str(other.broker_id))
    assert "2012" in err
    await master.alter(sorted([1, 2]), 1, doc["syncStateSetEpoch"])
    doc = await ok_json("electMaster", "-a", a, "-b", name, "-i", str(other.broker_id))
    assert doc["masterBrokerId"] == other.broker_id
    assert doc["masterAddress"] == other.address
    assert doc["masterEpoch"] == 2 and doc["syncStateSet"] == [other.broker_id]
    await wait_until_async(
        lambda: (
            bool(other.notifications)
            and other.notifications[-1]["masterBrokerId"] == other.broker_id
        ),
        "the role push to the new master",
        5,
        interval=0.02,
    )

    master.max_offset = 4096
    await master.stop()  # unreachable from now on
    epochs = await ok_json("getBrokerEpoch", "-a", a, "-b", name)
    assert [e["brokerId"] for e in epochs] == [1, 2]
    live = epochs[other.broker_id - 1]
    assert live == {
        "brokerId": other.broker_id,
        "address": other.address,
        "role": "MASTER",
        "maxOffset": 0,
        "confirmOffset": 0,
        "epochs": [{"epoch": 1, "startOffset": 0, "endOffset": 0}],
    }
    dead = epochs[master.broker_id - 1]
    assert dead["address"] == master.address and "error" in dead

    human = await rmqctl("getSyncStateSet", "-a", a, "-b", name)
    assert human[0] == 0 and "InSync" in human[1]


async def test_clean_broker_metadata_forgets_a_dead_broker(
    processes: ControllerCluster, group: tuple[str, list[FakeBroker]]
) -> None:
    a = processes.addresses
    name, brokers = group
    master_id = (await replica_info(a, name))["masterBrokerId"]
    slave = next(b for b in brokers if b.broker_id != master_id)
    err = await fails("cleanBrokerMetadata", "-a", a, "-b", name, "-i", str(slave.broker_id))
    assert "2009" in err  # still alive
    await slave.stop()
    errors: list[str] = []

    async def cleaned() -> str | None:
        code, out, err = await rmqctl(
            "--json", "cleanBrokerMetadata", "-a", a, "-b", name, "-i", str(slave.broker_id)
        )
        errors.append(err)
        return out if code == 0 else None

    out = await wait_until_async(
        cleaned, "cleanBrokerMetadata to succeed", 10, interval=0.1, on_timeout=lambda: errors[-1]
    )
    assert json.loads(out) == {"ok": True}
    doc = await ok_json("getSyncStateSet", "-a", a, "-b", name)
    assert [r["brokerId"] for r in doc["replicas"]] == [master_id]
    await fails("getSyncStateSet", "-a", a, "-b", "no-such-group")


async def test_get_controller_config_asks_every_controller(processes: ControllerCluster) -> None:
    down = f"127.0.0.1:{free_port()}"
    doc = await ok_json("getControllerConfig", "-a", f"{processes.addresses};{down}")
    assert set(doc) == {*(p.address for p in processes.procs.values()), down}
    for node_id, proc in processes.procs.items():
        cfg = doc[proc.address]
        assert cfg["id"] == node_id and cfg["peers"] == processes.peers
        assert cfg["broker_heartbeat_timeout_ms"] == 1000 and cfg["tick_ms"] == 100
    assert "error" in doc[down]
    await fails("getControllerConfig", "-a", down)


async def test_a_controller_is_added_transferred_to_and_removed(
    processes: ControllerCluster, tmp_path: Path
) -> None:
    a = processes.addresses
    port = free_port()
    peers = f"{processes.peers};n3-127.0.0.1:{port}"
    n3 = ControllerProc(
        tmp_path, "n3", port, peers, ("--join", "--config", str(processes.config_path))
    )
    try:
        # Nothing answers there yet: refused, nothing changed (it was added, never to catch up).
        err = await fails("addController", "-a", a, "--id", "n3", "--address", n3.address)
        assert f"no controller answers at {n3.address} (connection refused)" in err, err
        n3.start()
        wait_until(lambda: n3.alive() and port_open(port), "n3 to listen", 30)
        err = await fails("addController", "-a", a, "--id", "n4", "--address", n3.address)
        assert f"the controller at {n3.address} is n3, not n4" in err, err
        doc = await ok_json("getControllerMetaData", "-a", a)
        assert set(doc["peers"]) == {"n0", "n1", "n2"}
        doc = await ok_json("addController", "-a", a, "--id", "n3", "--address", n3.address)
        assert set(doc) == METADATA_KEYS
        assert doc["peers"]["n3"] == n3.address and len(doc["peers"]) == 4
        doc = await ok_json("transferControllerLeader", "-a", a, "--id", "n3")
        assert doc["leaderId"] == "n3"
        everyone = [*(p.address for p in processes.procs.values()), n3.address]
        assert await agreed_leader(everyone) == "n3"
        doc = await ok_json("transferControllerLeader", "-a", a, "--id", "n0")
        assert doc["leaderId"] == "n0"
        doc = await ok_json("removeController", "-a", a, "--id", "n3")
        assert "n3" not in doc["peers"] and len(doc["peers"]) == 3
        await fails("removeController", "-a", a, "--id", "n3")
    finally:
        n3.stop()
    doc = await ok_json("getControllerMetaData", "-a", a)
    assert set(doc["peers"]) == {"n0", "n1", "n2"}


async def test_an_unreachable_cluster_is_one_line_and_exit_1() -> None:
    down = f"127.0.0.1:{free_port()}"
    err = await fails("getControllerMetaData", "-a", down)
    assert "connection refused" in err


async def test_a_dead_controller_is_shown_unreachable_not_follower(tmp_path: Path) -> None:
    """kill -9 of the leader: getControllerMetaData (asked of the survivors) still lists it,
    the membership being the leader's, but as unreachable with the reason (as rmq-console's
    cluster page does), never as a follower; in the table and in --json alike."""
    with ControllerCluster(tmp_path) as cluster:
        addresses = [p.address for p in cluster.procs.values()]
        leader = await agreed_leader(addresses)
        dead = cluster.procs[leader]
        dead.kill9()
        wait_until(lambda: not dead.alive(), f"{dead.name} to exit", 15)
        survivors = [p.address for i, p in cluster.procs.items() if i != leader]
        new_leader = await agreed_leader(survivors)
        follower = next(i for i in cluster.procs if i not in (leader, new_leader))
        a = cluster.addresses
        code, out, err = await rmqctl("getControllerMetaData", "-a", a)
        assert code == 0, err
        rows = {line.split()[0]: line.split()[1:] for line in out.splitlines()[2:]}
        assert rows == {
            dead.node_id: [dead.address, "unreachable:", "connection", "refused"],
            new_leader: [cluster.procs[new_leader].address, "leader"],
            follower: [cluster.procs[follower].address, "follower"],
        }, out
        doc = await ok_json("getControllerMetaData", "-a", a)
        assert doc["leaderId"] == new_leader and dead.node_id in doc["peers"]
        assert doc["roles"] == {
            new_leader: "leader",
            follower: "follower",
            dead.node_id: "unreachable",
        }
        assert doc["unreachable"] == {dead.node_id: "connection refused"}
