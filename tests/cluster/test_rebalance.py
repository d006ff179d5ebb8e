"""Placement and re-balancing by traffic against real processes: three controllers with the
automatic mode on, broker-a, then broker-b joining.

A producer keeps a static topic of four queues busy on broker-a (about 100 msg/s); the brokers
report their traffic with their heartbeats. When broker-b joins, new topics go to it (the least
loaded group), and the active controller moves the busy topic's queues there, one at a time,
each on figures that show the previous move, until the spread is within the threshold. Bad plans
are refused with one line and change nothing; a good one applies; every acknowledged message is
still consumed (the SDK consumer reads each logical queue across its items).

Right after a change of active controller (transferControllerLeader), a topic placed by traffic
still goes to the idle group: the new active controller waits for the masters' heartbeats
instead of reading every group as idle. Right after a busy group's master is killed, too: its
new master reports its own puts from its first second, not spread over its window.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from client import Producer
from client.errors import ClientError
from tests.cluster.support import Key, consume_all
from tests.support.cli import has_master, rmqctl, rmqctl_json
from tests.support.cluster import STEADY_MASTER, Cluster
from tests.support.wait import stays_async, wait_until_async

pytestmark = pytest.mark.multiprocess

TOPIC = "Busy"
THRESHOLD = 20.0
RATE = 100.0
"""Messages per second the producer aims at: the four queues' 25 msg/s each balance with two
on each group; one move leaves a spread of 50, above the threshold."""

CONTROLLER_TOML = f"""
rebalance_enabled = true
rebalance_threshold = {THRESHOLD}
rebalance_hold_ms = 1500
rebalance_interval_ms = 300
"""
BROKER_TOML = "traffic_window_ms = 2000\n"


def newest_groups(addrs: str, topic: str = TOPIC) -> list[str]:
    doc = rmqctl_json(addrs, "staticTopicMapping", "-t", topic)
    return [q["items"][-1]["brokerName"] for q in doc["queues"]]


def settled_groups(cluster: Cluster) -> list[str] | None:
    """newest_groups once every controller answers the same, else None."""
    seen = []
    for c in cluster.controllers:
        code, out, _ = rmqctl("--json", "staticTopicMapping", "-a", c.address, "-t", TOPIC)
        if code != 0:
            return None  # not applied there yet
        seen.append([q["items"][-1]["brokerName"] for q in json.loads(out)["queues"]])
    return seen[0] if all(g == seen[0] for g in seen) else None


def moves_logged(cluster: Cluster) -> list[dict[str, Any]]:
    """The automatic mode's moves, from the controllers' logs, in time order."""
    found = []
    for c in cluster.controllers:
        for line in c.log().splitlines():
            if '"re-balance move' in line:
                found.append(json.loads(line))
    return sorted(found, key=lambda e: str(e.get("timestamp")))


async def produce(
    stop: asyncio.Event, addrs: str, acked: list[Key], topic: str, rate: float
) -> None:
    """About ``rate`` sends per second to ``topic`` until ``stop``; acknowledged ones go to
    ``acked``."""
    async with Producer(addrs, retries=6) as producer:
        start = time.monotonic()
        n = 0
        while not stop.is_set():
            try:
                r = await producer.send(topic, f"m-{n}".encode())
                acked.append((r.broker_name, r.queue_id, r.queue_offset))
            except ClientError:
                pass  # not acknowledged: nothing to find
            n += 1
            await asyncio.sleep(max(0.0, start + n / rate - time.monotonic()))


@contextlib.asynccontextmanager
async def producing(addrs: str, topic: str = TOPIC, rate: float = RATE) -> AsyncIterator[list[Key]]:
    """:func:`produce` running while the block runs; yields the acknowledged sends' keys."""
    stop = asyncio.Event()
    acked: list[Key] = []
    sending = asyncio.create_task(produce(stop, addrs, acked, topic, rate))
    try:
        yield acked
    finally:
        stop.set()
        await sending


def refused(addrs: str, plan: Path, doc: Any, error: str) -> None:
    plan.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    code, out, err = rmqctl("rebalanceApply", "-a", addrs, "--plan", str(plan))
    assert code == 1 and out == "", (code, out, err)
    assert err.count("\n") == 1 and error in err, err


def test_a_new_group_takes_new_topics_and_busy_queues_until_balanced(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    cluster.configure_controllers(CONTROLLER_TOML)
    try:
        cluster.start_controllers()
        asyncio.run(scenario(cluster, cluster.controller_addresses, tmp_path))
    finally:
        cluster.stop()


async def add_group_with_master(
    cluster: Cluster, addrs: str, name: str, replicas: int = 1, config: str = BROKER_TOML
) -> None:
    """Start group ``name`` (``replicas`` brokers reading ``config``) and wait until the
    controllers at ``addrs`` name its master."""
    cluster.add_group(name, replicas, config=config)
    await wait_until_async(
        lambda: asyncio.to_thread(has_master, addrs, name), f"{name}'s master", 30, interval=0.2
    )


async def scenario(cluster: Cluster, addrs: str, tmp: Path) -> None:
    def run(*args: str) -> Any:
        return asyncio.to_thread(rmqctl_json, addrs, *args)

    await add_group_with_master(cluster, addrs, "broker-a")
    await run("updateStaticTopic", "-t", TOPIC, "-q", "4")
    await run("updateTopic", "-t", "Plain", "-q", "2", "-g", "1")
    # Every controller applied the create (a follower answers mappings from what it applied).
    assert (
        await wait_until_async(
            lambda: asyncio.to_thread(settled_groups, cluster), "the topic everywhere", 10
        )
        == ["broker-a"] * 4
    )
    one = await run("rebalancePlan")
    assert one["moves"] == [] and one["reason"] == "fewer than two broker groups with a master"

    # Bad plans: refused with one line before anything moves.
    plan = tmp / "plan.json"
    move = {"topic": TOPIC, "queue": 0, "from": "broker-a", "to": "broker-a"}
    for doc, error in [
        ("{not json", "cannot read plan"),
        ([move], "must be a rebalancePlan document"),
        ({"moves": [{**move, "queue": "0"}]}, 'move 1 must have "topic": str, "queue": int'),
        ({"moves": [move, move]}, "moves Busy queue 0 again"),
        ({"moves": [{**move, "topic": "Nope"}]}, "topic Nope does not exist"),
        ({"moves": [{**move, "topic": "Plain"}]}, "Plain is not a static topic"),
        ({"moves": [{**move, "queue": 9}]}, "has queues 0 to 3"),
        ({"moves": [{**move, "from": "broker-z"}]}, "is on broker-a now, not broker-z"),
        ({"moves": [{**move, "to": "broker-z"}]}, "broker group broker-z does not exist"),
        ({"moves": [move]}, "Busy queue 0 is already on broker group broker-a"),
    ]:
        await asyncio.to_thread(refused, addrs, plan, doc, error)
    assert await asyncio.to_thread(newest_groups, addrs) == ["broker-a"] * 4

    async with producing(addrs) as acked:

        async def busy() -> bool:
            doc = await run("brokerTraffic")
            a = [g for g in doc["groups"] if g["brokerName"] == "broker-a"]
            # Above 3x the threshold: one move leaves more than the threshold, two balance it.
            return bool(a) and a[0]["topics"].get(TOPIC, {}).get("msgPerSec", 0) > 3 * THRESHOLD

        await wait_until_async(busy, "broker-a's traffic report", 30, interval=0.3)

        await add_group_with_master(cluster, addrs, "broker-b")
        # New topics go to the group with the least traffic: broker-b (not yet at a's level).
        fresh = await run("updateStaticTopic", "-t", "Fresh", "-q", "2", "-g", "1")
        assert {i["brokerName"] for q in fresh["queues"] for i in q["items"]} == {"broker-b"}, (
            await run("brokerTraffic"),
            await run("getControllerMetaData"),
        )
        placed = await run("updateTopic", "-t", "Plain2", "-q", "2", "-g", "1")
        assert placed["brokers"] == ["broker-b"], await run("brokerTraffic")

        async def balanced() -> list[str] | None:
            groups = await asyncio.to_thread(newest_groups, addrs)
            plan = await run("rebalancePlan")
            ok = groups.count("broker-b") == 2 and not plan["rebalance"]
            return groups if ok else None

        groups = await wait_until_async(
            balanced, "the automatic re-balance", 40, interval=0.5, on_timeout=cluster.logs
        )
    moved = groups.count("broker-b")
    logged = moves_logged(cluster)
    done = [e for e in logged if e["event"] == "re-balance move done"]
    assert len(done) == moved == 2, logged
    assert all(e["move"]["to"] == "broker-b" for e in done)
    # One at a time, each decided on figures that showed the one before.
    spreads = [e["spread"] for e in done]
    assert spreads == sorted(spreads, reverse=True) and len(set(spreads)) == len(spreads)

    # Idle now: a plan written by hand applies, one move; applied again it is stale.
    async def idle() -> bool:
        doc = await run("brokerTraffic")
        return all(g["msgPerSec"] == 0 for g in doc["groups"])

    await wait_until_async(idle, "the traffic to settle", 20, interval=0.5)
    # The traffic job's plan (topics moved whole) as queue moves; a bad one refused.
    job = {
        "rebalance": True,
        "threshold": 5000.0,
        "rate": "peak hourly msg/s",
        "groupsBefore": {"broker-a": 9000.0, "broker-b": 0.0},
        "groupsAfter": {"broker-a": 10.0, "broker-b": 8990.0},
        "moves": [
            {"topic": TOPIC, "msgPerSec": 8990.0, "from": ["broker-a"], "to": "broker-b"},
            {"topic": "Plain", "msgPerSec": 10.0, "from": ["broker-a"], "to": "broker-b"},
        ],
    }
    job_file = tmp / "traffic-plan.json"
    job_file.write_text(json.dumps(job))
    from_job = await run("rebalancePlan", "--from", str(job_file))
    on_a = [i for i, g in enumerate(groups) if g == "broker-a"]
    assert [(m["queue"], m["from"], m["to"]) for m in from_job["moves"]] == [
        (i, "broker-a", "broker-b") for i in on_a
    ]
    assert [(u["topic"], u["brokerName"]) for u in from_job["unmovable"]] == [("Plain", "broker-a")]
    job["moves"][0]["topic"] = "Nope"
    job_file.write_text(json.dumps(job))
    code, out, err = await asyncio.to_thread(
        rmqctl, "rebalancePlan", "-a", addrs, "--from", str(job_file)
    )
    assert code == 1 and err.count("\n") == 1 and "topic Nope does not exist" in err, err
    code, out, err = await asyncio.to_thread(
        rmqctl, "updateStaticTopic", "-a", addrs, "-t", "Three", "-q", "2", "-g", "3"
    )
    assert code == 1 and "cannot place on 3 broker groups: 2 have a master" in err, err

    queue = groups.index("broker-b")
    move = {"topic": TOPIC, "queue": queue, "from": "broker-b", "to": "broker-a"}
    plan.write_text(json.dumps({"moves": [move]}))
    code, out, err = await asyncio.to_thread(
        rmqctl, "--json", "rebalanceApply", "-a", addrs, "--plan", str(plan)
    )
    assert code == 0, err
    assert json.loads(out) == {"applied": 1, "moves": [move]}
    # Every controller applied it (a follower answers mappings from what it applied).
    await wait_until_async(
        lambda: asyncio.to_thread(settled_groups, cluster),
        "the move on every controller",
        10,
        interval=0.1,
    )
    assert (await asyncio.to_thread(settled_groups, cluster))[queue] == "broker-a"
    await asyncio.to_thread(refused, addrs, plan, {"moves": [move]}, "the plan is stale")

    # Every acknowledged message is consumed, from where it was stored (three moves later).
    expect = set(acked)
    assert len(expect) == len(acked) > 0
    received = await consume_all(addrs, TOPIC, expect, timeout=40)
    assert expect <= set(received), sorted(expect - set(received))[:10]


def test_placement_right_after_a_controller_failover_waits_for_the_traffic_reports(
    tmp_path: Path,
) -> None:
    """A newly active controller has heard no traffic report yet (they are soft state, kept by
    the active controller only): a topic placed by traffic at once after a leadership change
    must still go to the idle group, not to the first one by name as if every group were
    idle."""
    cluster = Cluster(tmp_path)
    try:
        cluster.start_controllers()
        asyncio.run(after_failover(cluster, cluster.controller_addresses))
    finally:
        cluster.stop()


async def next_leader(cluster: Cluster, addrs: str) -> None:
    """transferControllerLeader to the controller after the leader (by id, in a ring)."""
    ids = sorted(c.node_id for c in cluster.controllers)
    leader = (await asyncio.to_thread(rmqctl_json, addrs, "getControllerMetaData"))["leaderId"]
    to = ids[(ids.index(leader) + 1) % len(ids)]
    moved = await asyncio.to_thread(rmqctl_json, addrs, "transferControllerLeader", "--id", to)
    assert moved["leaderId"] == to, moved


async def after_failover(cluster: Cluster, addrs: str) -> None:
    def run(*args: str) -> Any:
        return asyncio.to_thread(rmqctl_json, addrs, *args)

    await add_group_with_master(cluster, addrs, "broker-a")
    await run("updateStaticTopic", "-t", TOPIC, "-q", "4")
    await add_group_with_master(cluster, addrs, "broker-b")
    async with producing(addrs):

        async def busy() -> bool:
            doc = await run("brokerTraffic")
            rates = {g["brokerName"]: g["msgPerSec"] for g in doc["groups"] if g["master"]}
            return rates.get("broker-a", 0) > 3 * THRESHOLD and rates.get("broker-b") == 0

        async def static(i: int) -> list[str]:  # placed by the controller
            doc = await run("updateStaticTopic", "-t", f"Fresh{i}", "-q", "1", "-g", "1")
            return sorted({item["brokerName"] for q in doc["queues"] for item in q["items"]})

        async def ordinary(i: int) -> list[str]:  # placed by rmqctl, from brokerTraffic
            return list(
                (await run("updateTopic", "-t", f"Plain{i}", "-q", "1", "-g", "1"))["brokers"]
            )

        for i in range(4):
            await wait_until_async(busy, "broker-a busy, broker-b idle", 30, interval=0.3)
            await next_leader(cluster, addrs)
            # At once, each kind first in turn: the new active controller may not have heard
            # the brokers' heartbeats yet.
            for place in (static, ordinary) if i % 2 == 0 else (ordinary, static):
                assert await place(i) == ["broker-b"], (i, place, await run("brokerTraffic"))


def test_placement_right_after_a_broker_failover_counts_the_new_masters_puts(
    tmp_path: Path,
) -> None:
    """broker-a (three replicas) takes about 100 msg/s and broker-b about 40; broker-a's master
    is killed and the producer carries on with the new one. broker-a is still the busier group,
    so a topic placed by traffic goes to broker-b. A new master's traffic meter held its time as
    a slave, with nothing put: its first puts were spread over its whole window (30 s here), so
    once the dead master's last report aged out (the controllers' broker_heartbeat_timeout_max_ms,
    2 s here) broker-a read as a fraction of its rate, below broker-b."""
    cluster = Cluster(tmp_path)
    cluster.configure_controllers("broker_heartbeat_timeout_max_ms = 2000\n")
    try:
        cluster.start_controllers()
        asyncio.run(after_broker_failover(cluster, cluster.controller_addresses))
    finally:
        cluster.stop()


async def after_broker_failover(cluster: Cluster, addrs: str) -> None:
    def run(*args: str) -> Any:
        return asyncio.to_thread(rmqctl_json, addrs, *args)

    async def rates() -> dict[str, float]:
        doc = await run("brokerTraffic")
        return {g["brokerName"]: g["msgPerSec"] for g in doc["groups"] if g["master"]}

    window = "traffic_window_ms = 30000\n"
    await add_group_with_master(cluster, addrs, "broker-a", 3, window)
    await run("updateTopic", "-t", "BusyA", "-q", "4")  # on broker-a: the only group yet
    await add_group_with_master(cluster, addrs, "broker-b", 1, window)
    async with producing(addrs, "BusyA", 100.0):

        async def a_busy() -> bool:
            return (await rates()).get("broker-a", 0) > 60

        await wait_until_async(a_busy, "broker-a busy", 60, interval=0.5)
        assert (await run("updateTopic", "-t", "BusyB", "-q", "2", "-g", "1"))["brokers"] == [
            "broker-b"
        ]
        async with producing(addrs, "BusyB", 40.0):

            async def both() -> bool:
                r = await rates()
                return r.get("broker-a", 0) > 80 and 30 < r.get("broker-b", 0) < 60

            await wait_until_async(both, "both groups' traffic reported", 90, interval=0.5)
            master = (await run("getSyncStateSet", "-b", "broker-a"))["masterAddress"]
            next(b for b in cluster.brokers if b.address == master).kill9()

            async def new_master() -> bool:
                doc = await run("getSyncStateSet", "-b", "broker-a")
                return doc.get("masterAddress") not in (None, "", master)

            await wait_until_async(new_master, "a new master of broker-a", 30, interval=0.2)
            placed: list[tuple[int, list[str], dict[str, float]]] = []

            async def goes_to_broker_b() -> bool:
                i = len(placed)
                doc = await run("updateTopic", "-t", f"Fresh{i}", "-q", "1", "-g", "1")
                placed.append((i, doc["brokers"], await rates()))
                return bool(doc["brokers"] == ["broker-b"])

            # Over the seconds after the election, while the dead master's last report ages
            # out (2 s) and before a whole window (30 s) of the new master's puts.
            await stays_async(
                goes_to_broker_b,
                8.0,
                "topics placed by traffic going to broker-b, the less busy group",
                interval=1.0,
                on_failure=lambda: repr(placed),
            )


def test_placement_after_a_controller_failover_leaves_out_a_group_whose_master_is_silent(
    tmp_path: Path,
) -> None:
    """broker-a's master frozen (SIGSTOP) across a change of active controller: the new one
    never hears it, so broker-a's traffic is unknown, not idle. A topic placed by traffic goes
    to broker-b, brokerTraffic shows broker-a ``"heard": false``, and a placement on two groups
    is refused with broker-a named. Before, once the wait for heartbeats ended (3 s, or the
    grace period), broker-a read as idle and took the topic, first by name (a CI run on a slow
    machine: a busy broker-a's first heartbeat to a new active controller came after its
    grace period). The controllers' grace period is 30 s here: the frozen master is not judged
    dead (and its group left without a master) while the test runs."""
    cluster = Cluster(tmp_path)
    cluster.configure_controllers(
        "broker_heartbeat_timeout_ms = 30000\nbroker_heartbeat_timeout_max_ms = 30000\n"
    )
    try:
        cluster.start_controllers()
        asyncio.run(silent_master(cluster, cluster.controller_addresses))
    finally:
        cluster.thaw_and_stop()


async def silent_master(cluster: Cluster, addrs: str) -> None:
    def run(*args: str) -> Any:
        return asyncio.to_thread(rmqctl_json, addrs, *args)

    await add_group_with_master(cluster, addrs, "broker-a", config=STEADY_MASTER)
    await add_group_with_master(cluster, addrs, "broker-b", config=STEADY_MASTER)
    (frozen,) = [b for b in cluster.brokers if b.broker_name == "broker-a"]
    frozen.signal(signal.SIGSTOP)
    await next_leader(cluster, addrs)

    doc = await run("updateStaticTopic", "-t", "Fresh", "-q", "1", "-g", "1")
    assert sorted({item["brokerName"] for q in doc["queues"] for item in q["items"]}) == [
        "broker-b"
    ], doc
    assert (await run("updateTopic", "-t", "Plain", "-q", "1", "-g", "1"))["brokers"] == [
        "broker-b"
    ]
    heard = {g["brokerName"]: g["heard"] for g in (await run("brokerTraffic"))["groups"]}
    assert heard == {"broker-a": False, "broker-b": True}, heard
    for args in (("updateStaticTopic", "-t", "Both"), ("updateTopic", "-t", "Both2")):
        code, out, err = await asyncio.to_thread(
            rmqctl, args[0], "-a", addrs, *args[1:], "-q", "2", "-g", "2"
        )
        assert code == 1 and out == "", (args, code, out, err)
        assert "has not heard the master of broker-a" in err and "try again" in err, err
        assert "not the active controller" not in err, err  # the leader's answer alone

    frozen.signal(signal.SIGCONT)

    async def heard_again() -> bool:
        groups = (await run("brokerTraffic"))["groups"]
        return all(g["heard"] for g in groups)

    await wait_until_async(heard_again, "broker-a heard again", 30, interval=0.3)
    doc = await run("updateTopic", "-t", "Both3", "-q", "1", "-g", "2")
    assert doc["brokers"] == ["broker-a", "broker-b"], doc
