"""rmqctl's broker commands against real broker processes (issue 28 item 3): getBrokerConfig and
updateBrokerConfig (a live key takes effect at once, is kept in the broker's data directory, never
in its config file, and survives a restart; restart-only,
unknown and invalid keys and a user without permission are refused and change nothing),
brokerStatus, statsAll, checkMsgSendRT, clusterRT, producerConnection and consumerConnection."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from pathlib import Path
from subprocess import CompletedProcess
from typing import Any

import grpc
import pytest

from client.consumer import Consumer
from client.errors import BrokerError
from client.identity import SDK_VERSION
from client.producer import Producer
from client.transaction import TransactionProducer, TransactionStatus
from protocol.codes import RequestCode, ResponseCode
from protocol.rocketmq_v2 import definition_pb2 as pb
from protocol.rocketmq_v2 import service_pb2 as rpc
from protocol.rocketmq_v2 import service_pb2_grpc
from remoting.client import RemotingClient
from storage.small_file import read_atomic
from tests.cluster.secured import ROOT, create_root, secured_cluster
from tests.support.classic import Raw, consumer_heartbeat
from tests.support.cli import ok_json
from tests.support.cli import rmqctl_run as rmqctl
from tests.support.cluster import STEADY_MASTER, BrokerNode, Cluster
from tests.support.procs import BrokerProc, free_port, port_open
from tests.support.wait import wait_until, wait_until_async

pytestmark = pytest.mark.multiprocess


def refused(*args: str, env: dict[str, str] | None = None, status: int = 1) -> str:
    """The one line rmqctl writes for a refusal (exit ``status``)."""
    done = rmqctl(*args, env=env)
    assert done.returncode == status, (done.stdout, done.stderr)
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 or status == 2, done.stderr
    return done.stderr


def config_file(broker: BrokerProc) -> Path:
    return broker.data_dir.parent / f"{broker.name}-test.toml"


async def send(address: str, size: int) -> None:
    async with Producer(address) as producer:
        await producer.send("T", b"x" * size)


def send_refused(address: str, size: int) -> BrokerError:
    with pytest.raises(BrokerError) as refusal:
        asyncio.run(send(address, size))
    return refusal.value


def live_file(broker: BrokerProc | BrokerNode) -> Path:
    return broker.data_dir / "config" / "liveConfig.json"


def live_entries(broker: BrokerProc | BrokerNode) -> dict[str, Any]:
    raw = read_atomic(live_file(broker))
    assert raw is not None
    entries: dict[str, Any] = json.loads(raw)["entries"]
    return entries


def test_a_live_key_takes_effect_at_once_and_survives_a_restart(broker: BrokerProc) -> None:
    a = broker.address
    ok_json("updateTopic", "-a", a, "-t", "T", "-q", "1")
    asyncio.run(send(a, 3000))
    before = config_file(broker).read_bytes()

    changed = ok_json("updateBrokerConfig", "-b", a, "-k", "max_message_bytes", "-v", "2048")
    (one,) = changed["brokers"]
    assert (changed["key"], one["old"], one["new"], one["persisted"], one["startValue"]) == (
        "max_message_bytes",
        4 * 1024 * 1024,
        2048,
        True,
        4 * 1024 * 1024,
    )
    assert one["liveFile"] == one["configFile"] == str(live_file(broker).resolve())
    # Live: the next send over the limit is refused, one under it is stored.
    refusal = send_refused(a, 3000)
    assert refusal.code == ResponseCode.MESSAGE_ILLEGAL and "exceeds 2048" in refusal.remark
    asyncio.run(send(a, 1000))
    # Kept in the data directory, the config file as it was.
    assert config_file(broker).read_bytes() == before
    entry = live_entries(broker)["max_message_bytes"]
    assert (entry["value"], entry["startValue"]) == (2048, 4 * 1024 * 1024)

    broker.stop()
    broker.start_and_wait()
    (shown,) = ok_json("getBrokerConfig", "-b", a)["brokers"]
    assert shown["config"]["max_message_bytes"] == 2048
    assert "max_message_bytes" in shown["liveKeys"] and "listen" not in shown["liveKeys"]
    assert shown["changedLive"]["max_message_bytes"]["startValue"] == 4 * 1024 * 1024
    assert shown["configFile"] == str(config_file(broker).resolve())
    assert send_refused(a, 3000).code == ResponseCode.MESSAGE_ILLEGAL

    # A second change replaces the key's entry (one entry per key).
    ok_json("updateBrokerConfig", "-b", a, "-k", "max_message_bytes", "-v", "8192")
    asyncio.run(send(a, 3000))
    assert list(live_entries(broker)) == ["max_message_bytes"]
    assert live_entries(broker)["max_message_bytes"]["value"] == 8192
    assert config_file(broker).read_bytes() == before


def test_log_level_changes_live(broker: BrokerProc) -> None:
    # The broker logs each change at warning after applying it: at error the change of
    # max_pull_batch to 10 is not logged; back at info, the next change is.
    a = broker.address
    ok_json("updateBrokerConfig", "-b", a, "-k", "log_level", "-v", "error")
    ok_json("updateBrokerConfig", "-b", a, "-k", "max_pull_batch", "-v", "10")
    ok_json("updateBrokerConfig", "-b", a, "-k", "log_level", "-v", "info")
    ok_json("updateBrokerConfig", "-b", a, "-k", "max_pull_batch", "-v", "11")

    def changes() -> list[dict[str, Any]]:
        lines = [json.loads(line) for line in broker.log().splitlines() if line.startswith("{")]
        return [d for d in lines if d.get("event") == "config changed live"]

    wait_until(lambda: any(d["new"] == 11 for d in changes()), "the change to 11 logged", 10)
    assert [(d["key"], d["new"]) for d in changes()] == [
        ("log_level", "info"),
        ("max_pull_batch", 11),
    ]


def test_refused_changes_name_the_key_and_change_nothing(broker: BrokerProc) -> None:
    a = broker.address
    before = config_file(broker).read_bytes()
    restart = refused("updateBrokerConfig", "-b", a, "-k", "listen", "-v", "127.0.0.1:1")
    assert "CONFIG_KEY_NEEDS_RESTART" in restart and "'listen' needs a restart" in restart
    assert "port" in restart  # why
    segment = refused("updateBrokerConfig", "-b", a, "-k", "commitlog_segment_bytes", "-v", "1")
    assert "'commitlog_segment_bytes' needs a restart" in segment
    unknown = refused("updateBrokerConfig", "-b", a, "-k", "flush_intervall_ms", "-v", "5")
    assert "CONFIG_KEY_UNKNOWN" in unknown and "'flush_intervall_ms'" in unknown
    # Values are checked as at start-up: the same words as a bad config file's.
    low = refused("updateBrokerConfig", "-b", a, "-k", "flush_interval_ms", "-v", "0")
    assert "CONFIG_VALUE_INVALID" in low and "'flush_interval_ms' must be >= 1, got 0" in low
    word = refused("updateBrokerConfig", "-b", a, "-k", "log_level", "-v", "loud")
    assert "must be one of debug, info, warning, error" in word
    typed = refused("updateBrokerConfig", "-b", a, "-k", "max_pull_batch", "-v", "many")
    assert "'max_pull_batch' must be an integer" in typed
    # Neither -b nor -c (or both): a usage error.
    refused("updateBrokerConfig", "-k", "log_level", "-v", "debug", status=2)
    refused("getBrokerConfig", "-b", a, "-c", "DefaultCluster", status=2)
    assert config_file(broker).read_bytes() == before
    assert not live_file(broker).exists()
    (shown,) = ok_json("getBrokerConfig", "-b", a)["brokers"]
    assert shown["config"]["flush_interval_ms"] == 500
    assert shown["config"]["log_level"] == "info"


def test_a_broker_without_a_config_file_keeps_a_change_too(
    broker_factory: type[BrokerProc], tmp_path: Path
) -> None:
    proc = broker_factory(tmp_path)
    config_at = proc.argv.index("--config")
    del proc.argv[config_at : config_at + 2]
    proc.start_and_wait()
    changed = ok_json("updateBrokerConfig", "-b", proc.address, "-k", "max_pull_batch", "-v", "7")
    (one,) = changed["brokers"]
    assert (one["new"], one["persisted"], one["liveFile"]) == (
        7,
        True,
        str(live_file(proc).resolve()),
    )
    human = rmqctl("updateBrokerConfig", "-b", proc.address, "-k", "max_pull_batch", "-v", "8")
    assert human.returncode == 0
    assert f"max_pull_batch 7 -> 8 (kept in {live_file(proc).resolve()}; start value 256" in (
        human.stdout
    )
    proc.stop()
    proc.start_and_wait()
    (shown,) = ok_json("getBrokerConfig", "-b", proc.address)["brokers"]
    assert (shown["configFile"], shown["config"]["max_pull_batch"]) == (None, 8)
    back = rmqctl("updateBrokerConfig", "-b", proc.address, "-k", "max_pull_batch", "-v", "256")
    assert "(back to its start value: its entry removed from " in back.stdout
    assert live_entries(proc) == {}


# -- with authentication on, across a cluster (-c) ------------------------------------------------

NORMAL = ("ops-reader", "reader-Secret-4242")


def signed(access_key: str, secret_key: str) -> dict[str, str]:
    return {**os.environ, "RMQ_ACCESS_KEY": access_key, "RMQ_SECRET_KEY": secret_key}


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, list[BrokerNode]]]:
    cluster, key, settings = secured_cluster(tmp_path_factory.mktemp("broker-admin"))
    try:
        cluster.start_controllers()
        create_root(cluster, key)
        # Admin commands, not failover: clusterRT's sends must meet a master that holds its lease.
        group = cluster.add_group("broker-a", replicas=2, config=settings + STEADY_MASTER)
        root = signed(ROOT.access_key, ROOT.secret_key)
        ok_json(
            "-a", cluster.controller_addresses, "createUser", "-u", NORMAL[0], "-p", NORMAL[1],
            env=root,
        )  # fmt: skip

        def both_listed() -> bool:
            done = rmqctl("--json", "-a", cluster.controller_addresses, "clusterList", env=root)
            if done.returncode != 0:
                return False
            brokers = json.loads(done.stdout)["clusters"].get("DefaultCluster", [])
            return len(brokers) == 2

        wait_until(both_listed, "both brokers listed", 60, on_timeout=cluster.logs)

        def user_known_to_both() -> bool:
            # The brokers learn a new user from the controllers soon after, not at once: until
            # then a broker refuses its requests as from an unknown access key.
            done = rmqctl(
                "getBrokerConfig", "-a", cluster.controller_addresses, "-c", "DefaultCluster",
                env=signed(*NORMAL),
            )  # fmt: skip
            return done.returncode == 1 and "unknown access key" not in done.stderr

        wait_until(
            user_known_to_both, f"both brokers to know {NORMAL[0]}", 60,
            interval=0.2, on_timeout=cluster.logs,
        )  # fmt: skip
        yield cluster, group
    finally:
        cluster.stop()


def test_without_permission_a_change_is_refused_and_changes_nothing(
    secured: tuple[Cluster, list[BrokerNode]],
) -> None:
    cluster, group = secured
    addresses = cluster.controller_addresses
    before = [b.config_path.read_bytes() for b in group]
    entries = [live_entries(b) if live_file(b).exists() else {} for b in group]
    why = refused(
        "updateBrokerConfig", "-a", addresses, "-c", "DefaultCluster",
        "-k", "max_pull_batch", "-v", "9", env=signed(*NORMAL),
    )  # fmt: skip
    assert "NO_PERMISSION" in why and NORMAL[0] in why
    # Both brokers refused alike: said once, naming both.
    assert why.count("NO_PERMISSION") == 1 and all(b.address in why for b in group)
    assert [b.config_path.read_bytes() for b in group] == before
    assert [live_entries(b) if live_file(b).exists() else {} for b in group] == entries
    root = signed(ROOT.access_key, ROOT.secret_key)
    shown = ok_json("getBrokerConfig", "-a", addresses, "-c", "DefaultCluster", env=root)
    assert [b["config"]["max_pull_batch"] for b in shown["brokers"]] == [256, 256]

    # A super user changes every broker of the cluster, each kept in its own data directory.
    changed = ok_json(
        "updateBrokerConfig", "-a", addresses, "-c", "DefaultCluster",
        "-k", "max_pull_batch", "-v", "9", env=root,
    )  # fmt: skip
    assert sorted(b["address"] for b in changed["brokers"]) == sorted(b.address for b in group)
    assert all(b["new"] == 9 and b["persisted"] for b in changed["brokers"])
    for b in group:
        assert live_entries(b)["max_pull_batch"]["value"] == 9
    assert [b.config_path.read_bytes() for b in group] == before


def test_a_normal_users_refusals_are_one_line_naming_what_would_do(
    secured: tuple[Cluster, list[BrokerNode]],
) -> None:
    """Seen against make run SECURE=1 as a user without rules: getBrokerConfig -b/-c wrote an
    empty line on stdout before its refusal, and topicStatus (a route lookup: pub, sub or get on
    the topic) said only 'no rule ... allows pub', as if pub were what it needs."""
    cluster, _group = secured
    addresses, root = cluster.controller_addresses, signed(ROOT.access_key, ROOT.secret_key)
    ok_json("updateTopic", "-a", addresses, "-t", "Perm", "-q", "1", env=root)
    why = refused("topicStatus", "-a", addresses, "-t", "Perm", env=signed(*NORMAL))
    assert (
        f"no rule of {NORMAL[0]} allows pub on Topic:Perm; any one of pub, sub, get would do"
    ) in why
    why = refused("getBrokerConfig", "-a", addresses, "-c", "DefaultCluster", env=signed(*NORMAL))
    assert "NO_PERMISSION" in why and "get on Cluster:DefaultCluster" in why


def test_broker_status_of_a_cluster_lists_every_replica(
    secured: tuple[Cluster, list[BrokerNode]],
) -> None:
    cluster, group = secured
    root = signed(ROOT.access_key, ROOT.secret_key)

    def roles() -> list[str]:
        shown = ok_json("brokerStatus", "-a", cluster.controller_addresses, "-c",
                        "DefaultCluster", env=root)  # fmt: skip
        assert sorted(b["address"] for b in shown["brokers"]) == sorted(b.address for b in group)
        return sorted(b["role"] for b in shown["brokers"])

    wait_until(lambda: roles() == ["MASTER", "SLAVE"], "a master and a slave", 30)


def test_cluster_rt_and_stats_all_through_the_controllers(
    secured: tuple[Cluster, list[BrokerNode]],
) -> None:
    cluster, group = secured
    addresses, root = cluster.controller_addresses, signed(ROOT.access_key, ROOT.secret_key)
    # The probe topic is created through the controllers on the group's master, then timed.
    rt = ok_json("clusterRT", "-a", addresses, "-c", "DefaultCluster", "--amount", "5", env=root)
    (one,) = rt["brokers"]
    assert (one["brokerName"], one["sent"], one["failed"]) == ("broker-a", 5, 0)
    assert one["address"] in {b.address for b in group}
    # checkMsgSendRT names the master as clusterRT does, by its id (ours start at 1; it said 0).
    listed = ok_json("clusterList", "-a", addresses, env=root)["clusters"]["DefaultCluster"]
    master = {b["address"]: b["brokerId"] for b in listed}[one["address"]]
    assert one["brokerId"] == master >= 1
    checked = ok_json("checkMsgSendRT", "-a", addresses, "-t", "rmqctl_rt_probe", "--amount",
                      "2", env=root)  # fmt: skip
    (same,) = checked["brokers"]
    assert (same["address"], same["brokerId"], same["sent"]) == (one["address"], master, 2)

    def probe() -> dict[str, Any] | None:
        # The master registers the probe topic it just created with the controllers soon after,
        # not before it answers: until then statsAll says no group has it (exit 1).
        done = rmqctl("--json", "statsAll", "-a", addresses, "-t", "rmqctl_rt_probe", env=root)
        if done.returncode == 1 and "no broker group has topic 'rmqctl_rt_probe'" in done.stderr:
            return None
        assert done.returncode == 0, done.stderr
        docs = json.loads(done.stdout)["topics"]
        # Both commands' sends (5 and 2): a read between their counts saw 5 (CI at e6df7f2).
        return docs[0] if docs and docs[0]["putTotal"] >= 7 else None

    counted = wait_until(probe, "the probe messages counted on the master", 20)
    assert counted["putTotal"] == 7 and counted["groups"] == []


# -- brokerStatus, statsAll, checkMsgSendRT, clusterRT ---------------------------------------------


def test_broker_status_and_stats_all_show_what_was_put_and_consumed(broker: BrokerProc) -> None:
    a = broker.address
    ok_json("updateTopic", "-a", a, "-t", "T", "-q", "2")
    ok_json("sendMessage", "-a", a, "-t", "T", "-p", "m", "--count", "200")
    consumed = rmqctl(
        "--json", "consumeMessage", "-a", a, "-t", "T", "-g", "G", "--count", "200",
        "--timeout", "45",
    )  # fmt: skip
    assert consumed.returncode == 0, consumed.stderr

    def status() -> dict[str, Any]:
        (doc,) = ok_json("brokerStatus", "-b", a)["brokers"]
        assert isinstance(doc, dict)
        return doc

    # The rates come from samples a second apart: wait for a window holding the traffic.
    wait_until(
        lambda: status()["statsWindowMs"] > 0 and status()["getTotal"] >= 200,
        "the broker to have sampled the traffic",
        20,
    )
    doc = status()
    assert (doc["role"], doc["putTotal"], doc["address"]) == ("MASTER", 200, a)
    assert doc["maxOffset"] > doc["minOffset"] == 0 and doc["confirmOffset"] == doc["maxOffset"]
    assert 0 < doc["commitLogDiskRatio"] < 1
    assert doc["pageCacheLockMs"] is None and doc["popInflight"] == 0
    assert doc["putTps"] >= 0 and doc["timerOverdueMs"] == 0
    human = rmqctl("brokerStatus", "-b", a)
    assert human.returncode == 0 and "pageCacheLockMs" in human.stdout
    assert "not measured" in human.stdout

    def topic_t() -> dict[str, Any]:
        docs = ok_json("statsAll", "-a", a, "-t", "T")["topics"]
        assert [d["topic"] for d in docs] == ["T"]
        return dict(docs[0])

    wait_until(lambda: topic_t()["groups"] != [], "group G's offsets sampled", 20)
    t = topic_t()
    assert (t["putTotal"], t["getTotal"] >= 200) == (200, True)
    assert [g["group"] for g in t["groups"]] == ["G"]
    # A second group: the topic's row carries the totals once (served to every group), each
    # group's row its own Out TPS and no totals (each repeated the topic's Out Total, which
    # read as that group's count).
    again = rmqctl(
        "--json", "consumeMessage", "-a", a, "-t", "T", "-g", "G2", "--count", "200",
        "--timeout", "45",
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    wait_until(
        lambda: len(topic_t()["groups"]) == 2 and topic_t()["getTotal"] >= 400,
        "group G2's offsets and reads sampled",
        20,
    )
    table = rmqctl("statsAll", "-a", a, "-t", "T")
    assert table.returncode == 0, table.stderr
    head, *rows = [line.split() for line in table.stdout.splitlines()]
    assert head == ["Topic", "Consumer", "Group", "In", "TPS", "Out", "TPS", "In", "Total", "Out",
                    "Total"]  # fmt: skip
    totals = topic_t()
    assert [r[:2] for r in rows] == [["T", "*"], ["T", "G"], ["T", "G2"]], table.stdout
    assert rows[0][4:] == [str(totals["putTotal"]), str(totals["getTotal"])], table.stdout
    assert [len(r) for r in rows[1:]] == [3, 3], table.stdout  # topic, group, Out TPS
    # An unknown topic is one line and exit status 1 (it printed an empty table, exit 0).
    assert "no broker group has topic 'Nope'" in refused("statsAll", "-a", a, "-t", "Nope")


def test_send_round_trips_per_broker_group(broker: BrokerProc) -> None:
    a = broker.address
    ok_json("updateTopic", "-a", a, "-t", "T", "-q", "2")
    rt = ok_json("checkMsgSendRT", "-a", a, "-t", "T", "--amount", "20", "-s", "64")
    (one,) = rt["brokers"]
    assert (rt["topic"], one["brokerName"], one["sent"], one["failed"]) == ("T", "broker-a", 20, 0)
    assert 0 < one["avgRtMs"] <= one["p99RtMs"] <= one["maxRtMs"]
    missing = refused("checkMsgSendRT", "-a", a, "-t", "Nope", "--amount", "1")
    assert "TOPIC_NOT_EXIST" in missing and "Nope" in missing

    cluster = ok_json("clusterRT", "-a", a, "--amount", "10")
    (probe,) = cluster["brokers"]
    assert (cluster["topic"], probe["sent"], probe["failed"]) == ("rmqctl_rt_probe", 10, 0)
    route = ok_json("topicRoute", "-a", a, "-t", "rmqctl_rt_probe")
    assert [b["brokerName"] for b in route["brokers"]] == ["broker-a"]
    refused("clusterRT", "-a", a, "-c", "NoSuchCluster", "--amount", "1")


# -- producerConnection, consumerConnection --------------------------------------------------------


def _classic_producer_heartbeat(client_id: str, group: str) -> bytes:
    return json.dumps(
        {"clientID": client_id, "consumerDataSet": [], "producerDataSet": [{"groupName": group}]}
    ).encode()


def test_connection_lists_say_each_clients_language_version_and_protocol(
    broker: BrokerProc,
) -> None:
    a = broker.address
    ok_json("updateTopic", "-a", a, "-t", "T", "-q", "2")

    async def no_check(_: object) -> TransactionStatus:
        return TransactionStatus.UNKNOWN

    async def scenario() -> tuple[dict[str, Any], dict[str, Any], CompletedProcess[str]]:
        raw = await Raw.open(broker.port)  # a classic (RocketMQ remoting) client, as JAVA 401

        async def classic_heartbeats() -> None:
            # Again at every look: the SDK's clients may take a while to show up on a loaded
            # machine.
            for body in (
                consumer_heartbeat("classic-c", "G", "T"),
                _classic_producer_heartbeat("classic-p", "PG"),
            ):
                beat = await raw.call(34, {}, body)
                assert beat.code == 0, beat.remark

        seen: list[dict[str, Any]] = []
        try:
            async with (
                Consumer(a, "G", "T", client_id="sdk-c", heartbeat_interval=0.5),
                TransactionProducer(a, "PG", no_check, topics=["T"], heartbeat_interval=0.5),
            ):

                async def listed() -> tuple[dict[str, Any], dict[str, Any]] | None:
                    await classic_heartbeats()
                    cons = await asyncio.to_thread(
                        ok_json, "consumerConnection", "-a", a, "-g", "G"
                    )
                    prods = await asyncio.to_thread(
                        ok_json, "producerConnection", "-a", a, "-g", "PG", "-t", "T"
                    )
                    seen[:] = [cons, prods]
                    if len(cons["members"]) == 2 and len(prods["producers"]) == 2:
                        return cons, prods
                    return None

                found = await wait_until_async(
                    listed, "both clients of each group listed", 30, on_timeout=lambda: str(seen)
                )
                assert found is not None
                human = await asyncio.to_thread(
                    rmqctl, "producerConnection", "-a", a, "-g", "PG", "-t", "T"
                )
                return (*found, human)
        finally:
            raw.close()

    consumers, producers, human = asyncio.run(scenario())
    who = {
        m["clientId"]: (m["language"], m["version"], m["protocol"]) for m in consumers["members"]
    }
    assert who == {
        "classic-c": ("JAVA", "401", "classic"),
        "sdk-c": ("PYTHON", SDK_VERSION, "remoting"),
    }
    by_protocol = {p["protocol"]: p for p in producers["producers"]}
    assert by_protocol["classic"]["clientId"] == "classic-p"
    assert (by_protocol["classic"]["language"], by_protocol["classic"]["version"]) == (
        "JAVA",
        "401",
    )
    assert by_protocol["remoting"]["language"] == "PYTHON"
    assert by_protocol["remoting"]["clientId"].startswith("PG@")
    assert all(p["address"].startswith("127.0.0.1:") for p in producers["producers"])
    assert producers["producers"][0]["brokers"] == [a]
    assert human.returncode == 0 and "classic" in human.stdout and "PYTHON" in human.stdout
    # Both closed their connections: nobody left in the group, one line and exit 1.
    wait_until(
        lambda: rmqctl("producerConnection", "-a", a, "-g", "PG", "-t", "T").returncode == 1,
        "the producers gone with their connections",
        20,
    )
    gone = refused("producerConnection", "-a", a, "-g", "PG", "-t", "T")
    assert "producer group 'PG' has no live client on the brokers of 'T'" in gone


def test_a_grpc_consumer_is_listed_with_what_its_headers_say(
    broker_factory: type[BrokerProc], tmp_path: Path
) -> None:
    grpc_port = free_port()
    proc = broker_factory(tmp_path, extra=["--grpc-listen", f"127.0.0.1:{grpc_port}"])
    proc.start_and_wait()
    a = proc.address
    wait_until(lambda: port_open(grpc_port), "the gRPC port to listen", 20)
    ok_json("updateTopic", "-a", a, "-t", "T", "-q", "2")
    metadata = (
        ("x-mq-client-id", "grpc-c"),
        ("x-mq-language", "JAVA"),
        ("x-mq-client-version", "5.0.7"),
        ("x-mq-protocol", "v2"),
    )

    async def heartbeat() -> tuple[int, str]:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
            stub = service_pb2_grpc.MessagingServiceStub(channel)  # type: ignore[no-untyped-call]
            request = rpc.HeartbeatRequest(
                group=pb.Resource(name="G"), client_type=pb.SIMPLE_CONSUMER
            )
            answer = await stub.Heartbeat(request, metadata=metadata, timeout=10)
            return answer.status.code, str(answer.status.message)

    code, message = asyncio.run(heartbeat())
    assert code == pb.OK, message
    (member,) = ok_json("consumerConnection", "-a", a, "-g", "G")["members"]
    assert (member["clientId"], member["language"], member["version"], member["protocol"]) == (
        "grpc-c",
        "JAVA",
        "5.0.7",
        "gRPC",
    )
    assert member["address"].startswith("127.0.0.1:")  # as the gRPC port saw the client


def test_client_expiry_changes_live_for_members_already_known(broker: BrokerProc) -> None:
    # A member of our protocol heart-beats every 2 s: with the default 10 s expiry it is always
    # listed; once client_expiry_ms is 500 it is gone between two heartbeats. (A classic
    # member keeps RocketMQ's 120 s: tests/broker/test_classic_membership.py.)
    a = broker.address
    ok_json("updateTopic", "-a", a, "-t", "T", "-q", "1")

    def members() -> int:
        done = rmqctl("--json", "consumerConnection", "-a", a, "-g", "G")
        return len(json.loads(done.stdout)["members"]) if done.returncode == 0 else 0

    async def scenario() -> None:
        conn = await RemotingClient.connect(a)

        async def beat() -> None:
            while True:
                beat = {"clientId": "sdk-c", "consumerGroup": "G", "topic": "T"}
                await conn.call(RequestCode.HEART_BEAT, beat)
                await asyncio.sleep(2)

        beating = asyncio.create_task(beat())
        try:
            await wait_until_async(lambda: asyncio.to_thread(members), "the member listed", 20)
            await asyncio.to_thread(
                ok_json, "updateBrokerConfig", "-b", a, "-k", "client_expiry_ms", "-v", "500"
            )
            await wait_until_async(
                lambda: asyncio.to_thread(lambda: members() == 0),
                "the member expired between two heartbeats",
                30,
            )
        finally:
            beating.cancel()
            conn.close()

    asyncio.run(scenario())
