"""rmqctl against two broker groups (one replica each) behind three controllers: queryMsgByTime
finds the messages of a range on both groups and printMsg reads one group's queues; resendMessage
reaches a member through the controllers; once broker-b's only broker is killed (its group has
no master and no slave), consumerProgress -g still lists broker-b's queues, without figures and
with a note, instead of leaving them out (exit status 1: a group could not be asked)."""

from __future__ import annotations

import asyncio
import functools
import json
import time

import pytest

from client import Consumer, Producer
from client.bootstrap import Bootstrap
from client.lookup import Lookup
from client.message import SendResult
from tests.cluster.support import (
    cluster_rmqctl,
    cluster_rmqctl_json,
    create_once_registered,
    sync_state,
)
from tests.support.cluster import Cluster
from tests.support.wait import wait_until, wait_until_async

pytestmark = pytest.mark.multiprocess

TOPIC = "TimeTopic"


rmqctl = functools.partial(cluster_rmqctl, flag="-n")  # -n: RocketMQ's tools' NameServer flag
rmqctl_json = functools.partial(cluster_rmqctl_json, flag="-n")


async def send(cluster: Cluster, key: str, count: int) -> list[tuple[SendResult, int]]:
    """What ``count`` sends stored, with each message's store time."""
    async with Producer(cluster.controller_addresses, send_deadline=30.0) as producer:
        sent = [await producer.send(TOPIC, f"{key}-{i}".encode(), keys=key) for i in range(count)]
    async with Lookup(cluster.controller_addresses) as lookup:
        found = [await lookup.by_id(r.msg_id) for r in sent]
    return [(r, m.record.store_timestamp) for r, m in zip(sent, found, strict=True)]


def target_body(during: list[tuple[SendResult, int]], target: SendResult) -> bytes:
    index = [r.msg_id for r, _ in during].index(target.msg_id)
    return str(index).encode()


async def test_time_queries_span_both_groups_and_a_group_without_master_is_listed(
    cluster: Cluster,
) -> None:
    (only_a,) = cluster.add_group("broker-a", 1)
    (only_b,) = cluster.add_group("broker-b", 1)
    boot = Bootstrap(cluster.controller_addresses, timeout=2.0)
    try:

        async def masters() -> bool:
            for name in ("broker-a", "broker-b"):
                doc = await sync_state(boot, name)
                if not (doc and doc.get("masterAddress")):
                    return False
            return True

        await wait_until_async(masters, "both groups' masters", 60, on_timeout=cluster.logs)
        created = await create_once_registered(cluster, TOPIC, 2, "the topic on both")
        assert created == ["broker-a", "broker-b"]

        before = await send(cluster, "before", 8)
        wait_until(lambda: time.time() * 1000 > max(t for _, t in before) + 2, "a new ms", 5)
        during = await send(cluster, "during", 24)
        wait_until(lambda: time.time() * 1000 > max(t for _, t in during) + 2, "a new ms", 5)
        await send(cluster, "after", 8)
        assert {r.broker_name for r, _ in during} == {"broker-a", "broker-b"}
        begin, end = min(t for _, t in during), max(t for _, t in during)

        doc = rmqctl_json(cluster, "queryMsgByTime", "-t", TOPIC, "-b", str(begin), "-e", str(end))
        assert sorted(m["msgId"] for m in doc["messages"]) == sorted(r.msg_id for r, _ in during)
        assert {m["brokerName"] for m in doc["messages"]} == {"broker-a", "broker-b"}
        printed = rmqctl_json(
            cluster, "printMsg", "-t", TOPIC, "--broker", "broker-b", "-b", str(begin),
            "-e", str(end),
        )  # fmt: skip
        assert [(q["brokerName"], q["queueId"]) for q in printed["queues"]] == [
            ("broker-b", 0),
            ("broker-b", 1),
        ]
        assert sorted(m["msgId"] for q in printed["queues"] for m in q["messages"]) == sorted(
            r.msg_id for r, _ in during if r.broker_name == "broker-b"
        )

        # A group consumes everything, so both broker groups hold its offsets.
        total = 40
        async with Consumer(
            cluster.controller_addresses, "billing", TOPIC, commit_interval=0.2
        ) as consumer:
            got = 0

            async def all_of_them() -> bool:
                nonlocal got
                got += len(await consumer.receive(timeout=0.5))
                return got >= total

            await wait_until_async(all_of_them, "the group to read 40", 60, on_timeout=cluster.logs)
            # resendMessage through the controllers: the running member gets it again (it
            # commits what the application received: keep receiving meanwhile).
            target = next(r for r, _ in during if r.broker_name == "broker-b")
            again: list[bytes] = []

            async def keep_receiving() -> None:
                while True:
                    again.extend(m.body for m in await consumer.receive(timeout=0.2))

            receiving = asyncio.create_task(keep_receiving())
            try:
                proc = await asyncio.to_thread(
                    rmqctl, cluster, "--json", "resendMessage", "-i", target.msg_id, "-g",
                    "billing",
                )  # fmt: skip
            finally:
                receiving.cancel()
                await asyncio.gather(receiving, return_exceptions=True)
            assert proc.returncode == 0, proc.stderr
            resent = json.loads(proc.stdout)
            assert resent["copy"]["topic"] == "%RETRY%billing" and resent["consumed"] is True
            assert again == [b"during-" + target_body(during, target)]

        async def progress_both() -> bool:
            doc = rmqctl_json(cluster, "consumerProgress", "-g", "billing", "-t", TOPIC)
            return {q["brokerName"] for q in doc["queues"]} == {"broker-a", "broker-b"} and all(
                q["lag"] == 0 for q in doc["queues"]
            )

        await wait_until_async(progress_both, "lag 0 on both groups", 30, interval=0.3)

        # broker-b's only broker dies: its group has neither master nor slave.
        only_b.kill9()

        async def b_gone() -> bool:
            doc = await sync_state(boot, "broker-b")
            proc = rmqctl(cluster, "--json", "clusterList")
            listed = proc.returncode == 0 and "broker-b" in proc.stdout
            return not listed and doc is not None

        await wait_until_async(b_gone, "broker-b out of the cluster list", 60, interval=0.3)
        proc = rmqctl(cluster, "--json", "consumerProgress", "-g", "billing", "-t", TOPIC)
        assert proc.returncode == 1, proc.stderr
        assert proc.stderr.startswith("rmqctl: not every broker group answered")
        doc = json.loads(proc.stdout)
        rows = {(q["brokerName"], q["queueId"]): q for q in doc["queues"]}
        assert set(rows) == {("broker-a", 0), ("broker-a", 1), ("broker-b", 0), ("broker-b", 1)}
        for q in (rows[("broker-b", 0)], rows[("broker-b", 1)]):
            assert q["noMaster"] is True and q["lag"] is None and q["maxOffset"] is None
        assert rows[("broker-a", 0)]["noMaster"] is False and rows[("broker-a", 0)]["lag"] == 0
        (note,) = [n for n in doc["notes"] if n.startswith("broker-b:")]
        assert "no master" in note and "2 queues of TimeTopic" in note
        human = rmqctl(cluster, "consumerProgress", "-g", "billing", "-t", TOPIC)
        assert human.returncode == 1
        assert "Note: broker-b: no master" in human.stdout
        assert "2 without figures" in human.stdout
        # topicStatus lists broker-b's queues with a note (they were left out, exit 0).
        proc = rmqctl(cluster, "--json", "topicStatus", "-t", TOPIC)
        assert proc.returncode == 1, proc.stderr
        assert proc.stderr == (
            "rmqctl: broker-b: no master and no slave registered with the controllers: "
            "offsets not known\n"
        )
        status = {(q["brokerName"], q["queueId"]): q for q in json.loads(proc.stdout)["queues"]}
        assert set(status) == set(rows)
        for key in (("broker-b", 0), ("broker-b", 1)):
            assert status[key]["note"] == "no master: offsets not known"
            assert status[key]["minOffset"] is None and status[key]["maxOffset"] is None
        assert status[("broker-a", 0)]["note"] is None
        human = rmqctl(cluster, "topicStatus", "-t", TOPIC)
        b_rows = [line for line in human.stdout.splitlines() if line.startswith("broker-b ")]
        assert len(b_rows) == 2 and all(
            line.split()[2:4] == ["?", "?"] and line.endswith("no master: offsets not known")
            for line in b_rows
        ), human.stdout

        # broker-a's only broker dies too: no broker at all is registered. The controllers
        # still route the topic (its groups with no master): -g with -t lists its queues from
        # there, every one without figures; without -t (the topics a group consumes are known
        # only to its brokers) and without -g, one line says why nothing can be listed.
        only_a.kill9()

        def none_registered() -> bool:
            proc = rmqctl(cluster, "--json", "clusterList")
            return proc.returncode == 0 and json.loads(proc.stdout)["clusters"] == {}

        wait_until(none_registered, "no broker registered", 60, interval=0.3)
        proc = rmqctl(cluster, "--json", "consumerProgress", "-g", "billing", "-t", TOPIC)
        assert proc.returncode == 1, proc.stderr
        assert proc.stderr == (
            "rmqctl: not every broker group answered: broker group broker-a: none of its brokers "
            "is registered with the controllers; broker group broker-b: none of its brokers is "
            "registered with the controllers\n"
        )
        doc = json.loads(proc.stdout)
        assert [
            (q["brokerName"], q["queueId"], q["noMaster"], q["lag"]) for q in doc["queues"]
        ] == [
            ("broker-a", 0, True, None),
            ("broker-a", 1, True, None),
            ("broker-b", 0, True, None),
            ("broker-b", 1, True, None),
        ]
        assert doc["totalLag"] == 0 and len(doc["notes"]) == 2
        assert all("none of its brokers is registered" in n for n in doc["notes"])
        human = rmqctl(cluster, "consumerProgress", "-g", "billing", "-t", TOPIC)
        assert human.returncode == 1
        assert "Total lag: 0 (4 queues; 4 without figures, see the notes)" in human.stdout
        blind = [line.split()[:6] for line in human.stdout.splitlines() if " ? " in line]
        assert blind == [
            [TOPIC, name, str(qid), "?", "?", "?"]
            for name in ("broker-a", "broker-b")
            for qid in (0, 1)
        ]
        assert "Note: broker-a: no master" in human.stdout
        nobody = (
            "rmqctl: no broker is registered with the controllers (every broker is down, or cut "
            "off from them): "
        )
        for json_flag in ([], ["--json"]):
            proc = rmqctl(cluster, *json_flag, "consumerProgress", "-g", "billing")
            assert proc.returncode == 1 and proc.stdout == "", proc
            assert proc.stderr == nobody + (
                "the topics consumer group 'billing' consumes, and its offsets, are known only "
                "to its brokers; -t TOPIC lists a topic's queues from its route, without "
                "figures\n"
            )
        for json_flag in ([], ["--json"]):
            proc = rmqctl(cluster, *json_flag, "consumerProgress")
            assert proc.returncode == 1 and proc.stdout == "", proc
            assert proc.stderr == nobody + (
                "the consumer groups and their offsets are known only to the brokers\n"
            )
    finally:
        boot.close()
