"""Re-mapping a static topic queue against real processes: three controllers, broker-a (master
and slave, all-ack) and broker-b (one broker).

An SDK producer sends without pause while ``rmqctl remapStaticTopic`` moves logical queue 1 from
broker-a to broker-b: every acknowledged message is stored (read back by a consumer) on
broker-a's physical queue below the seal or on broker-b's new one; the mapping shows the sealed
item and the new one with no gap; later sends never reach the sealed queue; a raw send there is
refused, by the fenced master and, after kill -9 of it, by the new master too. Bad moves (and a
plan file that stops at its first refusal, and a second move of a queue being moved) are refused
with one line and change nothing. kill -9 of the source master or of the controller leader during
a move leaves the old mapping or the new one, never half.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import msgpack
import pytest

from client import Producer
from client.bootstrap import Bootstrap
from client.errors import BrokerError, ClientError
from protocol.codes import ControllerCode, RequestCode, ResponseCode
from protocol.remoting import Scalar
from remoting.client import RemotingClient
from remoting.errors import ResponseError
from tests.cluster.secured import admin_call, create_root, secured_cluster
from tests.cluster.support import (
    Key,
    consume_all,
    new_master,
    remap_static_topic,
    sync_state,
    two_groups,
)
from tests.support.cli import rmqctl, rmqctl_json
from tests.support.cluster import Cluster
from tests.support.wait import wait_until, wait_until_async

pytestmark = pytest.mark.multiprocess

TOPIC = "Moving"


async def produce_until(stop: asyncio.Event, addrs: str, acked: list[Key], retries: int) -> None:
    """An SDK producer sending to TOPIC without pause until ``stop``: each acknowledged send's
    (group, physical queue, offset) goes to ``acked``."""
    async with Producer(addrs, retries=retries) as producer:
        n = 0
        while not stop.is_set():
            try:
                r = await producer.send(TOPIC, f"m-{n}".encode())
            except ClientError:
                continue  # not acknowledged: nothing to find
            acked.append((r.broker_name, r.queue_id, r.queue_offset))
            n += 1


def mapping(addrs: str) -> Any:
    return rmqctl_json(addrs, "staticTopicMapping", "-t", TOPIC)


def mapping_everywhere(cluster: Cluster) -> Any:
    """The mapping once every live controller answers the same one (followers answer what they
    applied), else None."""
    docs = []
    for c in cluster.controllers:
        if not c.alive():
            continue
        code, out, _ = rmqctl("--json", "staticTopicMapping", "-a", c.address, "-t", TOPIC)
        if code != 0:
            return None
        docs.append(json.loads(out))
    return docs[0] if all(d == docs[0] for d in docs) else None


def items(doc: Any, queue: int) -> list[tuple[str, int, int, int | None]]:
    return [
        (i["brokerName"], i["physicalQueue"], i["logicalStart"], i["logicalEnd"])
        for i in doc["queues"][queue]["items"]
    ]


async def master_of(boot: Bootstrap, cluster: Cluster, group: str, size: int) -> str:
    async def ready() -> str | None:
        doc = await sync_state(boot, group)
        ok = doc and doc.get("masterAddress") and len(doc["syncStateSet"]) == size
        return str(doc["masterAddress"]) if ok and doc else None

    address: str = await wait_until_async(
        ready, f"{group} master with {size} in sync", 60, interval=0.2, on_timeout=cluster.logs
    )
    return address


async def send_to(address: str, queue: int) -> tuple[int, str]:
    conn = await RemotingClient.connect(address)
    try:
        resp = await conn.request(
            RequestCode.SEND_MESSAGE, {"topic": TOPIC, "queueId": queue}, b"raw", 10
        )
        return resp.code, str(resp.header.get("remark") or "")
    finally:
        conn.close()


def test_a_queue_moves_under_load_and_bad_moves_change_nothing(
    cluster: Cluster, tmp_path: Path
) -> None:
    addrs = two_groups(cluster, 2)
    asyncio.run(scenario(cluster, addrs, tmp_path))


async def scenario(cluster: Cluster, addrs: str, tmp_path: Path) -> None:
    boot = Bootstrap(addrs, timeout=2.0)
    try:
        master_a = await master_of(boot, cluster, "broker-a", 2)
        await master_of(boot, cluster, "broker-b", 1)
        code, _, err = await asyncio.to_thread(
            rmqctl, "updateStaticTopic", "-a", addrs, "-t", TOPIC, "-q", "2", "-b", "broker-a"
        )
        assert code == 0, err
        code, _, err = await asyncio.to_thread(
            rmqctl, "updateTopic", "-a", addrs, "-t", "Plain", "-q", "2"
        )
        assert code == 0, err

        # Bad moves: one line each, nothing changed.
        before = await wait_until_async(
            lambda: asyncio.to_thread(mapping_everywhere, cluster), "the mapping everywhere", 10
        )
        plan = tmp_path / "plan.json"
        plan.write_text('[{"topic": "Moving", "queue": 0}]')
        for args, line in [
            (("-t", "Nope", "-q", "0", "-b", "broker-b"), "static topic Nope does not exist"),
            (("-t", "Plain", "-q", "0", "-b", "broker-b"), "Plain is not a static topic"),
            (("-t", TOPIC, "-q", "5", "-b", "broker-b"), "has queues 0 to 1, not 5"),
            (("-t", TOPIC, "-q", "0", "-b", "broker-z"), "broker group broker-z does not exist"),
            (("-t", TOPIC, "-q", "0", "-b", "broker-a"), "already on broker group broker-a"),
            (("--plan", str(plan)), "move 1 must be"),
        ]:
            code, out, err = await asyncio.to_thread(rmqctl, "remapStaticTopic", "-a", addrs, *args)
            assert code == 1 and out == "" and len(err.splitlines()) == 1, (args, err)
            assert line in err, (args, err)
        # A missing option is a usage error (exit status 2, click's usage lines), sent nowhere.
        code, out, err = await asyncio.to_thread(
            rmqctl, "remapStaticTopic", "-a", addrs, "-t", TOPIC, "-q", "0"
        )
        assert code == 2 and out == "", err
        assert err.splitlines()[-1] == (
            "Error: -t TOPIC, -q QUEUE and -b GROUP are required (or --plan FILE)"
        ), err
        assert await asyncio.to_thread(mapping, addrs) == before

        # A producer sends without pause while queue 1 moves.
        acked: list[Key] = []
        stop = asyncio.Event()
        sending = asyncio.create_task(produce_until(stop, addrs, acked, retries=6))
        await wait_until_async(lambda: len(acked) >= 30, "sends before the move", 30, interval=0.05)
        moved = await remap_static_topic(cluster, addrs, TOPIC, 1, "broker-b")
        queue1 = items(moved, 1)
        assert len(queue1) == 2
        (old_group, old_queue, old_start, seal), (new_group, new_queue, new_start, new_end) = queue1
        assert (old_group, old_queue, old_start) == ("broker-a", 1, 0)
        assert seal is not None and seal > 0
        assert (new_group, new_queue, new_start, new_end) == ("broker-b", 0, seal, None)
        assert items(moved, 0) == [("broker-a", 0, 0, None)]
        # Every controller applies it (a follower answers from what it has applied).
        settled = await wait_until_async(
            lambda: asyncio.to_thread(mapping_everywhere, cluster), "the mapping everywhere", 10
        )
        assert settled == moved
        marker = len(acked)

        def reached_b() -> bool:
            return any(k[0] == "broker-b" for k in acked[marker:])

        await wait_until_async(reached_b, "sends on broker-b", 30, interval=0.05)
        await wait_until_async(lambda: len(acked) >= marker + 30, "sends after", 30, interval=0.05)
        stop.set()
        await sending

        # Every acknowledged message: below the seal on broker-a's queue 1, or elsewhere live.
        on_old = [k for k in acked if k[:2] == ("broker-a", 1)]
        assert on_old and all(k[2] < seal for k in on_old)
        assert {k[:2] for k in acked} <= {("broker-a", 0), ("broker-a", 1), ("broker-b", 0)}
        # Nothing was accepted on the sealed queue after the fence: every message stored there,
        # acknowledged or not, is below the seal (checked on what the consumer reads below).
        stored = await consume_all(addrs, TOPIC, set(acked))
        missing = set(acked) - set(stored)
        assert not missing, sorted(missing)[:10]
        assert all(k[2] < seal for k in stored if k[:2] == ("broker-a", 1))

        # The sealed queue refuses sends: on the fenced master, and on a new master after it.
        code, remark = await send_to(master_a, 1)
        assert code == ResponseCode.QUEUE_NOT_EXIST and "sealed" in remark, remark
        assert (await send_to(master_a, 0))[0] == ResponseCode.SUCCESS
        again = await asyncio.to_thread(
            rmqctl, "remapStaticTopic", "-a", addrs, "-t", TOPIC, "-q", "1", "-b", "broker-b"
        )
        assert again[0] == 1 and "already on broker group broker-b" in again[2]

        node = next(b for b in cluster.brokers if b.address == master_a)
        node.kill9()
        doc = await new_master(boot, cluster, master_a)
        successor = str(doc["masterAddress"])

        async def refused_there() -> tuple[int, str] | None:
            result = await send_to(successor, 1)
            waiting = (ResponseCode.MASTER_FENCED, ResponseCode.NOT_MASTER)
            return result if result[0] not in waiting else None

        code, remark = await wait_until_async(
            refused_there, "the new master answers", 30, interval=0.2, on_timeout=cluster.logs
        )
        assert code == ResponseCode.QUEUE_NOT_EXIST and "sealed" in remark, (code, remark)
        assert (await send_to(successor, 0))[0] == ResponseCode.SUCCESS  # it takes writes
        assert await asyncio.to_thread(mapping, addrs) == moved
    finally:
        boot.close()


def test_a_plan_applies_moves_in_order_and_stops_at_the_first_refusal(
    cluster: Cluster, tmp_path: Path
) -> None:
    addrs = two_groups(cluster)

    async def masters() -> None:
        boot = Bootstrap(addrs, timeout=2.0)
        try:
            await master_of(boot, cluster, "broker-a", 1)
            await master_of(boot, cluster, "broker-b", 1)
        finally:
            boot.close()

    asyncio.run(masters())
    code, _, err = rmqctl("updateStaticTopic", "-a", addrs, "-t", TOPIC, "-q", "3")
    assert code == 0, err
    # Queues 0 and 2 start on broker-a, 1 on broker-b.
    plan = tmp_path / "plan.json"
    moves = [
        {"topic": TOPIC, "queue": 0, "target": "broker-b"},
        {"topic": TOPIC, "queue": 1, "target": "broker-a"},
        {"topic": TOPIC, "queue": 2, "target": "broker-a"},  # already there: refused
        {"topic": TOPIC, "queue": 1, "target": "broker-b"},  # never tried
    ]
    plan.write_text(json.dumps(moves))
    code, out, err = rmqctl("remapStaticTopic", "-a", addrs, "--plan", str(plan))
    assert code == 1 and out == "" and len(err.splitlines()) == 1, err
    assert "move 3 of 4 (Moving queue 2 -> broker-a) refused after 2 applied" in err, err
    assert "already on broker group broker-a" in err
    doc = mapping(addrs)
    assert [i[0] for i in items(doc, 0)] == ["broker-a", "broker-b"]
    assert [i[0] for i in items(doc, 1)] == ["broker-b", "broker-a"]
    assert [i[0] for i in items(doc, 2)] == ["broker-a"]

    def routed() -> bool:
        code, out, _ = rmqctl("--json", "topicRoute", "-a", addrs, "-t", TOPIC)
        if code != 0:
            return False
        writable = {b["brokerName"]: b.get("writeQueues") for b in json.loads(out)["brokers"]}
        return writable == {"broker-a": [1, 2], "broker-b": [1]}

    wait_until(routed, "the route's write queues", 20, interval=0.2, on_timeout=cluster.logs)

    # Two moves of one queue at once: one is done, the other refused (while the first runs, or
    # after it, as the queue is then on broker-b); one new item.
    async def twice() -> list[str]:
        boot = Bootstrap(addrs, timeout=10.0)
        header: dict[str, Scalar] = {"topic": TOPIC, "queueId": 2, "brokerName": "broker-b"}

        async def move() -> str:
            try:
                await boot.call(ControllerCode.REMAP_STATIC_TOPIC, header)
            except BrokerError as exc:
                return exc.remark
            return "moved"

        try:
            return list(await asyncio.gather(move(), move()))
        finally:
            boot.close()

    outcomes = sorted(asyncio.run(twice()))
    assert outcomes[-1] == "moved" and outcomes[0] != "moved", outcomes
    assert (
        "a move of Moving queue 2 is in progress" in outcomes[0]
        or "already on broker group broker-b" in outcomes[0]
    ), outcomes
    after = wait_until(
        lambda: mapping_everywhere(cluster), "the mapping everywhere", 10, interval=0.2
    )
    assert [i[0] for i in items(after, 2)] == ["broker-a", "broker-b"]


def chained(doc: Any) -> bool:
    """Every logical queue's items start at 0 and each where the one before it was sealed."""
    for q in doc["queues"]:
        start = 0
        for n, i in enumerate(q["items"]):
            if i["logicalStart"] != start or i["generation"] != q["items"][0]["generation"] + n:
                return False
            start = i["logicalEnd"]
            if start is None and n != len(q["items"]) - 1:
                return False
    return True


@pytest.mark.parametrize(
    ("victim", "kill_after"),
    [
        ("source master", 0.0),
        ("source master", 0.02),
        ("target master", 0.0),
        ("controller leader", 0.0),
    ],
)
def test_kill9_during_a_move_leaves_the_old_or_the_new_mapping(
    cluster: Cluster, victim: str, kill_after: float
) -> None:
    """kill -9 of the source group's master, before the fence (the move is refused, the retry
    moves it from the new master) or between the fence and the answer (moved, or refused when
    the new master's election committed first); of the target group's master while the queue
    moves to it (moved, sends wait for its successor; or refused, and a retry moves it there);
    or of the controller leader while it moves the queue (the entry commits or not; a retry
    finishes it). Either way one mapping, no gap, nothing stored past the seal, every
    acknowledged message read back."""
    addrs = two_groups(cluster, 2, 2 if victim == "target master" else 1)
    asyncio.run(kill_during_move(cluster, addrs, victim, kill_after))


def controller_leader(cluster: Cluster) -> Any:
    code, out, err = rmqctl("--json", "getControllerMetaData", "-a", cluster.controller_addresses)
    assert code == 0, err
    leader = json.loads(out)["leaderId"]
    return next(c for c in cluster.controllers if c.node_id == leader)


async def kill_during_move(cluster: Cluster, addrs: str, victim: str, kill_after: float) -> None:
    boot = Bootstrap(addrs, timeout=2.0)
    try:
        master_a = await master_of(boot, cluster, "broker-a", 2)
        size_b = 2 if victim == "target master" else 1
        master_b = await master_of(boot, cluster, "broker-b", size_b)
        code, _, err = await asyncio.to_thread(
            rmqctl, "updateStaticTopic", "-a", addrs, "-t", TOPIC, "-q", "2", "-b", "broker-a"
        )
        assert code == 0, err
        acked: list[Key] = []
        stop = asyncio.Event()
        sending = asyncio.create_task(produce_until(stop, addrs, acked, retries=8))
        await wait_until_async(lambda: len(acked) >= 30, "sends before the move", 30)
        leader = await asyncio.to_thread(controller_leader, cluster)
        move = asyncio.create_task(
            asyncio.to_thread(
                rmqctl, "--json", "remapStaticTopic", "-a", addrs,
                "-t", TOPIC, "-q", "1", "-b", "broker-b",
            )
        )  # fmt: skip
        await asyncio.sleep(kill_after)
        if victim == "source master":
            node = next(b for b in cluster.brokers if b.address == master_a)
            node.kill9()
            code, out, err = await move
            await new_master(boot, cluster, master_a)
        elif victim == "target master":
            node = next(b for b in cluster.brokers if b.address == master_b)
            node.kill9()
            code, out, err = await move
            await new_master(boot, cluster, master_b, "broker-b")
        else:
            leader.kill9()
            code, out, err = await move

            def new_leader() -> bool:
                code, out, _ = rmqctl("--json", "getControllerMetaData", "-a", addrs)
                return code == 0 and json.loads(out)["leaderId"] not in (None, leader.node_id)

            await wait_until_async(
                lambda: asyncio.to_thread(new_leader), "a new controller leader", 30, interval=0.2
            )
        doc = await wait_until_async(
            lambda: asyncio.to_thread(mapping_everywhere, cluster), "the mapping everywhere", 20
        )
        assert chained(doc), doc
        queue1 = items(doc, 1)
        moved = [i[0] for i in queue1] == ["broker-a", "broker-b"]
        assert moved or queue1 == [("broker-a", 1, 0, None)], queue1  # never half
        if code == 0:
            assert moved and json.loads(out) == doc
        else:  # one line; after a source master's death, nothing moved
            assert len(err.splitlines()) == 1, err
            if victim in ("source master", "target master"):
                assert not moved and ("nothing moved" in err or "has no master" in err), err
            else:  # the leader died before the answer: rmqctl asked the next leader
                assert moved == ("already on broker group broker-b" in err), err
        if not moved:
            # A retry moves it, once the new master (or leader) serves: until then it is
            # refused like the first attempt.
            def retry() -> Any:
                code, out, err = rmqctl(
                    "--json", "remapStaticTopic", "-a", addrs,
                    "-t", TOPIC, "-q", "1", "-b", "broker-b",
                )  # fmt: skip
                if code == 0:
                    return json.loads(out)
                assert any(
                    why in err
                    for why in ("nothing moved", "not the active controller", "has no master")
                ), err
                return None

            doc = await wait_until_async(
                lambda: asyncio.to_thread(retry), "a retried move", 30, interval=0.3
            )
            queue1 = items(doc, 1)
        seal = queue1[0][3]
        # The new item starts at the seal on broker-b (in physical queue 1 when a first attempt
        # added queue 0 there and was then rejected: an empty queue, no route sends to it).
        assert seal is not None and queue1[1][0] == "broker-b" and queue1[1][2] == seal
        marker = len(acked)
        await wait_until_async(
            lambda: any(k[0] == "broker-b" for k in acked[marker:]), "sends on broker-b", 30
        )
        stop.set()
        await sending
        stored = await consume_all(addrs, TOPIC, set(acked))
        missing = set(acked) - set(stored)
        assert not missing, sorted(missing)[:10]
        # No message stored past the seal on the old item, acknowledged or not.
        assert all(k[2] < seal for k in stored if k[:2] == ("broker-a", 1)), seal

        if victim == "target master":
            return  # broker-b has a second broker; the rest is about a group without one
        # broker-b loses its only broker: no move to it, and none off it.
        only_b = next(b for b in cluster.brokers if b.broker_name == "broker-b")
        only_b.kill9()

        async def masterless() -> bool:
            state = await sync_state(boot, "broker-b")
            return bool(state) and not (state or {}).get("masterAddress")

        await wait_until_async(
            masterless, "broker-b without a master", 30, interval=0.2, on_timeout=cluster.logs
        )

        def refused(queue: str, target: str, line: str) -> bool:
            code, _, err = rmqctl(
                "remapStaticTopic", "-a", addrs, "-t", TOPIC, "-q", queue, "-b", target
            )
            assert code == 1 and len(err.splitlines()) == 1, err
            return line in err

        assert await asyncio.to_thread(
            refused, "0", "broker-b", "broker group broker-b has no master"
        )
        assert await asyncio.to_thread(
            refused, "1", "broker-a", "broker group broker-b (holding Moving queue 1) has no master"
        )
        assert await asyncio.to_thread(mapping_everywhere, cluster) == doc
    finally:
        boot.close()


def test_with_authentication_a_super_user_moves_a_queue_and_the_fence_needs_one(
    tmp_path: Path,
) -> None:
    """The controller fences the source queue with the cluster's own signature; the broker
    refuses an unsigned FENCE_STATIC_QUEUE (and the controllers refuse a non-super user's move,
    tests/cluster/test_authentication.py)."""
    cluster, key, settings = secured_cluster(tmp_path)
    try:
        cluster.start_controllers()
        create_root(cluster, key)
        cluster.add_group("broker-a", 1, config=settings)
        cluster.add_group("broker-b", 1, config=settings)
        asyncio.run(secured_move(cluster, cluster.controller_addresses))
    finally:
        cluster.stop()


async def secured_move(cluster: Cluster, addrs: str) -> None:
    async def master(group: str) -> str | None:
        try:
            resp = await admin_call(
                addrs, RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, {"brokerName": group}
            )
        except ResponseError:
            return None
        address = msgpack.unpackb(resp.body or b"\x80").get("masterAddress")
        return str(address) if address else None

    master_a = await wait_until_async(
        lambda: master("broker-a"), "broker-a master", 60, interval=0.2, on_timeout=cluster.logs
    )
    await wait_until_async(
        lambda: master("broker-b"), "broker-b master", 60, interval=0.2, on_timeout=cluster.logs
    )
    header: dict[str, Scalar] = {"topic": TOPIC, "queues": 2, "brokerNames": "broker-a"}
    await admin_call(addrs, ControllerCode.UPDATE_AND_CREATE_STATIC_TOPIC, header)
    resp = await admin_call(
        addrs,
        ControllerCode.REMAP_STATIC_TOPIC,
        {"topic": TOPIC, "queueId": 1, "brokerName": "broker-b"},
    )
    doc = msgpack.unpackb(resp.body or b"\x80")
    assert [i[0] for i in items(doc, 1)] == ["broker-a", "broker-b"]
    conn = await RemotingClient.connect(master_a)
    try:
        fence = {"topic": TOPIC, "queueId": 0, "masterEpoch": 1}
        refused = await conn.request(RequestCode.FENCE_STATIC_QUEUE, fence, None, 5.0)
        assert refused.code == ResponseCode.NO_PERMISSION, refused.header
    finally:
        conn.close()
