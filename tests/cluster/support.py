"""What the whole-cluster tests share: controller queries, waits with deadlines, raw sends to one
broker, a consumer that collects everything, and the replica byte comparison."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import time
from collections.abc import Iterator, Sequence
from typing import Any

import msgpack

from client import Consumer, Producer
from client.admin import Admin
from client.bootstrap import Bootstrap
from client.errors import ClientError
from client.simple_consumer import PopMessage, SimpleConsumer
from protocol.codes import RequestCode, ResponseCode
from protocol.rocketmq_v2 import definition_pb2 as pb
from protocol.rocketmq_v2 import service_pb2 as rpc
from protocol.rocketmq_v2.service_pb2_grpc import MessagingServiceStub
from remoting.client import RemotingClient
from remoting.errors import RemotingError
from tests.support.cli import rmqctl as cli_rmqctl
from tests.support.cli import rmqctl_run
from tests.support.cluster import BrokerNode, Cluster
from tests.support.messages import create_once_registered as create_once_registered
from tests.support.procs import free_port
from tests.support.wait import wait_until_async

Key = tuple[str, int, int]
"""(broker name, queue id, queue offset): where an acknowledged message must be found."""


async def sync_state(boot: Bootstrap, group: str = "broker-a") -> dict[str, Any] | None:
    """The controllers' CONTROLLER_GET_SYNC_STATE_DATA document, or None when unreachable."""
    try:
        resp = await boot.call(
            RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, {"brokerName": group}, timeout=2.0
        )
    except (ClientError, RemotingError):
        return None
    return msgpack.unpackb(resp.body) if resp.body else None


async def full_sync_state_set(
    boot: Bootstrap, cluster: Cluster, size: int = 3, timeout: float = 60
) -> dict[str, Any]:
    async def full() -> dict[str, Any] | None:
        doc = await sync_state(boot)
        ok = doc and doc.get("masterAddress") and len(doc["syncStateSet"]) == size
        return doc if ok else None

    doc: dict[str, Any] = await wait_until_async(
        full,
        f"a master with {size} replicas in sync",
        timeout,
        interval=0.1,
        on_timeout=cluster.logs,
    )
    return doc


async def new_master(
    boot: Bootstrap, cluster: Cluster, old: str, group: str = "broker-a"
) -> dict[str, Any]:
    async def changed() -> dict[str, Any] | None:
        doc = await sync_state(boot, group)
        ok = doc and doc.get("masterAddress") not in (None, "", old)
        return doc if ok else None

    doc: dict[str, Any] = await wait_until_async(
        changed, f"a master other than {old}", 30, interval=0.1, on_timeout=cluster.logs
    )
    return doc


async def group_masters(boot: Bootstrap, cluster: Cluster, *groups: str) -> dict[str, str]:
    """Each group's master address, once the controllers name one."""
    masters: dict[str, str] = {}
    for group in groups:

        async def master(g: str = group) -> str | None:
            doc = await sync_state(boot, g)
            return str(doc["masterAddress"]) if doc and doc.get("masterAddress") else None

        masters[group] = await wait_until_async(
            master, f"{group} master", 60, interval=0.2, on_timeout=cluster.logs
        )
    return masters


async def masters_of(cluster: Cluster, *groups: str) -> dict[str, str]:
    """:func:`group_masters` through a bootstrap of its own on the cluster's controllers,
    closed after."""
    boot = Bootstrap(cluster.controller_addresses, timeout=2.0)
    try:
        return await group_masters(boot, cluster, *groups)
    finally:
        boot.close()


def with_one_group(replicas: int, config: str = "") -> Any:
    """A module's ``cluster`` fixture (``cluster = with_one_group(2)``): the controllers of
    tests/cluster/conftest.py's ``cluster`` with one group, broker-a, of ``replicas`` brokers
    that read ``config`` (TOML)."""
    import pytest  # here, not at the top: bench/ imports this module outside pytest

    @pytest.fixture(name="cluster")
    def one_group(cluster: Cluster) -> Cluster:
        cluster.add_group("broker-a", replicas, config=config)
        return cluster

    return one_group


def shared_cluster(
    replicas: int, config: str = "", name: str = "cluster", groups: Sequence[str] = ("broker-a",)
) -> Any:
    """A module's ``cluster`` fixture (``cluster = shared_cluster(2)``) as
    :func:`with_one_group`'s, started once for the whole module (module scope; the module's
    tests then run on one xdist worker: tests/conftest.py). Only for modules whose tests stop,
    kill or freeze no process and each use topics and groups of their own, so that none can
    change what another reads, in whatever order they run. ``name``: the fixture's name;
    ``groups``: the broker groups, each of ``replicas`` brokers that read ``config``."""
    import pytest  # here, not at the top: bench/ imports this module outside pytest

    @pytest.fixture(name=name, scope="module")
    def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
        c = Cluster(tmp_path_factory.mktemp("cluster"))
        try:
            c.start_controllers()
            for group in groups:
                c.add_group(group, replicas, config=config)
            yield c
        finally:
            c.thaw_and_stop()

    return shared


def two_groups(cluster: Cluster, a: int = 1, b: int = 1) -> str:
    """Start broker-a with ``a`` brokers and broker-b with ``b``: the controllers' addresses."""
    cluster.add_group("broker-a", a)
    cluster.add_group("broker-b", b)
    return cluster.controller_addresses


async def synced_master(boot: Bootstrap, cluster: Cluster, size: int = 3) -> BrokerNode:
    """The group's master once it has ``size`` replicas in sync (:func:`full_sync_state_set`)."""
    doc = await full_sync_state_set(boot, cluster, size=size)
    return node_at(cluster, doc["masterAddress"])


async def master_with_topic(
    boot: Bootstrap, cluster: Cluster, topic: str, queues: int, size: int = 3
) -> BrokerNode:
    """:func:`synced_master`, once ``topic`` is created through the controllers and routed
    (:func:`create_routed`)."""
    master = await synced_master(boot, cluster, size)
    await create_routed(cluster.controller_addresses, topic, queues)
    return master


def node_at(cluster: Cluster, address: str) -> BrokerNode:
    return next(b for b in cluster.brokers if b.address == address)


async def epoch_cache(address: str) -> dict[str, Any]:
    conn = await RemotingClient.connect(address, timeout=2.0)
    try:
        resp = await conn.call(RequestCode.GET_BROKER_EPOCH_CACHE, timeout=2.0)
        return dict(msgpack.unpackb(resp.body))
    finally:
        conn.close()


def commitlog_bytes(node: BrokerNode, upto: int) -> bytes:
    out = bytearray()
    for seg in sorted((node.data_dir / "commitlog").iterdir()):
        if seg.name.isdigit():
            out += seg.read_bytes()
    return bytes(out[:upto])


async def assert_replicas_identical(cluster: Cluster) -> int:
    """Every replica's CommitLog is byte-identical up to the smallest confirm offset; returns it."""
    caches = [await epoch_cache(b.address) for b in cluster.brokers]
    confirm = min(int(c["confirmOffset"]) for c in caches)
    assert confirm > 0
    logs = [commitlog_bytes(b, confirm) for b in cluster.brokers]
    assert all(log == logs[0] for log in logs), "replicas differ below the confirm offset"
    return confirm


async def route_has_master(boot: Bootstrap) -> bool:
    try:
        resp = await boot.call(RequestCode.GET_BROKER_CLUSTER_INFO, timeout=2.0)
    except (ClientError, RemotingError):
        return False
    doc = msgpack.unpackb(resp.body)
    return any(
        b.get("role") == "MASTER" for group in doc.get("clusters", {}).values() for b in group
    )


async def wait_route_has_master(boot: Bootstrap, cluster: Cluster) -> None:
    """Wait (30 s at most) until the controllers route some master: the brokers registered."""
    await wait_until_async(
        lambda: route_has_master(boot),
        "brokers registered for routes",
        30,
        interval=0.1,
        on_timeout=cluster.logs,
    )


async def routed(boot: Bootstrap, topic: str) -> bool:
    """Whether the controllers route ``topic`` (GET_ROUTEINFO_BY_TOPIC answers)."""
    try:
        await boot.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}, timeout=2.0)
        return True
    except (ClientError, RemotingError):
        return False


async def wait_routed(addresses: str, topic: str, timeout: float = 20) -> None:
    """Until the controllers at ``addresses`` route ``topic``. A master registers a topic it
    just created soon after, not before it answers: a producer asking for the route in between
    gets TOPIC_NOT_EXIST (not retried)."""
    boot = Bootstrap(addresses, timeout=2.0)
    try:
        await wait_until_async(
            lambda: routed(boot, topic),
            f"topic {topic} in the controllers' routes",
            timeout,
            interval=0.1,
        )
    finally:
        boot.close()


async def create_routed(addresses: str, topic: str, queues: int) -> None:
    """Create ``topic`` through the controllers at ``addresses`` and wait until they route it
    (:func:`wait_routed`)."""
    async with Admin(addresses) as admin:
        await admin.create_topic(topic, queues)
    await wait_routed(addresses, topic)


async def create_topic(boot: Bootstrap, master: str, topic: str, queues: int = 4) -> None:
    """Create ``topic`` on ``master`` and wait until the controllers route it."""
    conn = await RemotingClient.connect(master)
    try:
        await conn.call(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": topic, "queues": queues})
    finally:
        conn.close()
    await wait_until_async(
        lambda: routed(boot, topic), f"topic {topic} in the controllers' routes", 20, interval=0.1
    )


def cluster_rmqctl(
    cluster: Cluster, *args: str, flag: str = "-a"
) -> subprocess.CompletedProcess[str]:
    """``rmqctl <flag> <the cluster's controllers> *args`` in this process (tests/support/cli.py
    ``rmqctl_run``: what ``python -m rmqctl`` gives, without a Python start each, about 0.5 s of
    CPU); ``flag`` -a, or -n as RocketMQ's tools name the NameServer."""
    return rmqctl_run(flag, cluster.controller_addresses, *args)


def cluster_rmqctl_json(cluster: Cluster, *args: str, flag: str = "-a") -> Any:
    """:func:`cluster_rmqctl` ``--json *args``, which must succeed: its JSON answer."""
    proc = cluster_rmqctl(cluster, "--json", *args, flag=flag)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


async def takes_writes(address: str) -> bool:
    """Whether the broker at ``address`` holds itself master with a write lease (not fenced):
    what it says, which can trail what the controllers decided by a poll."""
    try:
        conn = await RemotingClient.connect(address, timeout=2.0)
    except RemotingError:
        return False
    try:
        resp = await conn.request(RequestCode.GET_BROKER_RUNTIME_INFO, {}, None, 2.0)
    except RemotingError:
        return False
    finally:
        conn.close()
    doc = msgpack.unpackb(resp.body or b"\x80") if resp.code == ResponseCode.SUCCESS else {}
    return doc.get("role") == "MASTER" and not doc.get("fenced")


async def pulls_waiting(address: str) -> int:
    """How many pulls and POPs the broker at ``address`` holds in long polling now (its
    runtime info's ``pullsWaiting``)."""
    conn = await RemotingClient.connect(address, timeout=2.0)
    try:
        resp = await conn.request(RequestCode.GET_BROKER_RUNTIME_INFO, {}, None, 2.0)
    finally:
        conn.close()
    assert resp.code == ResponseCode.SUCCESS, resp
    return int(msgpack.unpackb(resp.body or b"\x80")["pullsWaiting"])


async def long_polling_receive(
    stub: MessagingServiceStub, broker: str, group: str, topic: str, tag: str
) -> Any:
    """A gRPC ReceiveMessage of ``group`` for up to 16 messages of ``topic`` tagged ``tag``
    (hidden 60 s, a 10 s long poll, a 20 s deadline), once its POP long-polls at the broker at
    ``broker``: the call."""
    request = rpc.ReceiveMessageRequest(
        group=pb.Resource(name=group),
        message_queue=pb.MessageQueue(topic=pb.Resource(name=topic)),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression=tag),
        batch_size=16,
        invisible_duration={"seconds": 60},
        long_polling_timeout={"seconds": 10},
    )
    call = stub.ReceiveMessage(request, timeout=20)

    async def long_polling() -> bool:
        return await pulls_waiting(broker) == 1

    await wait_until_async(long_polling, "the receive's POP to long-poll at the broker", 10)
    return call


async def receive_some(sdk: SimpleConsumer, what: str, timeout: float = 20) -> list[PopMessage]:
    """What ``sdk`` receives (16 at most, hidden 30 s) once it receives anything: ``what``
    names it in the timeout's error."""
    got: list[PopMessage] = []

    async def back() -> bool:
        got.extend(await sdk.receive(16, invisible_duration=30, wait=1))
        return bool(got)

    await wait_until_async(back, what, timeout)
    return got


async def settings_on(address: str, group: str) -> dict[str, Any] | None:
    """The consumer group settings one broker holds for ``group``, None when it has none."""
    conn = await RemotingClient.connect(address, timeout=2.0)
    try:
        resp = await conn.request(
            RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG, {"group": group}, None, 5.0
        )
        return msgpack.unpackb(resp.body) if resp.code == ResponseCode.SUCCESS else None
    finally:
        conn.close()


def add_grpc_group(cluster: Cluster, replicas: int = 3) -> list[int]:
    """Add broker-a with ``replicas`` brokers, each with a gRPC endpoint on a port of its own;
    the ports, in the order of the group's brokers (of ``cluster.brokers`` for a first group)."""
    ports = [free_port() for _ in range(replicas)]
    cluster.add_group(
        "broker-a", replicas, per_broker=[["--grpc-listen", f"127.0.0.1:{p}"] for p in ports]
    )
    return ports


async def start_group_with_topic(cluster: Cluster, boot: Bootstrap, topic: str) -> str:
    """The controllers and broker-a of three replicas in sync, with ``topic`` on four queues in
    the routes; the master's address."""
    cluster.start_controllers()
    cluster.add_group("broker-a", 3)
    master: str = (await full_sync_state_set(boot, cluster, size=3))["masterAddress"]
    await wait_route_has_master(boot, cluster)
    await create_topic(boot, master, topic, queues=4)
    return master


async def start_fifo_group(
    cluster: Cluster, boot: Bootstrap, topic: str, group: str, settings: dict[str, Any]
) -> str:
    """start_group_with_topic, and ``group`` a FIFO consumer group (with ``settings``) that
    every replica holds, so that the next master knows it too; the master's address."""
    master = await start_group_with_topic(cluster, boot, topic)
    await fifo_group_everywhere(cluster, group, settings)
    return master


async def fifo_group_everywhere(
    cluster: Cluster, group: str, settings: dict[str, Any] | None = None
) -> None:
    """``group`` made a FIFO consumer group (with ``settings``), once every replica holds it,
    so that the next master knows it too."""
    async with Admin(cluster.controller_addresses) as admin:
        await admin.update_sub_group(
            {"groupName": group, "consumeMessageOrderly": True, **(settings or {})}
        )

    async def everywhere() -> bool:
        for b in cluster.brokers:
            got = await settings_on(b.address, group)
            if got is None or got.get("consumeMessageOrderly") is not True:
                return False
        return True

    await wait_until_async(everywhere, "every replica to hold the FIFO setting", 30)


async def raw_send(
    conn: RemotingClient, topic: str, body: bytes, timeout: float = 10
) -> tuple[int, Key | None]:
    """SEND_MESSAGE straight to one broker: (response code, where it was stored if SUCCESS)."""
    resp = await conn.request(
        RequestCode.SEND_MESSAGE, {"topic": topic, "queueId": 0}, body, timeout
    )
    if resp.code != ResponseCode.SUCCESS:
        return resp.code, None
    h = resp.header
    return resp.code, (str(h["brokerName"]), int(h["queueId"]), int(h["queueOffset"]))  # type: ignore[arg-type]


async def consume_all(
    addresses: str, topic: str, expect: set[Key], timeout: float = 60
) -> dict[Key, bytes]:
    """Everything a fresh consumer group receives, until ``expect`` is covered or the deadline.

    Right after a failover the controllers may not route the topic for a moment (the brokers
    re-register it); the consumer starts once they do."""
    received: dict[Key, bytes] = {}
    deadline = time.monotonic() + timeout
    await wait_routed(addresses, topic, deadline - time.monotonic())
    async with Consumer(addresses, f"checker-{time.monotonic_ns()}", topic) as consumer:
        while not expect <= set(received) and time.monotonic() < deadline:
            for m in await consumer.receive(timeout=1.0):
                received[(m.broker_name, m.physical_queue_id, m.physical_queue_offset)] = m.body
        # A little longer: anything served beyond what was expected must show up too.
        with contextlib.suppress(TimeoutError):
            for m in await asyncio.wait_for(consumer.receive(timeout=1.0), 3):
                received[(m.broker_name, m.physical_queue_id, m.physical_queue_offset)] = m.body
    return received


async def send_acked(
    producer: Producer, topic: str, numbers: range, acked: dict[Key, bytes]
) -> None:
    """Send ``m-<i>`` to ``topic`` for each i in ``numbers``, one after the other; each
    acknowledged send goes into ``acked`` (where it was stored -> body). A send that fails is
    not acknowledged: it may or may not survive, and is not checked."""
    for i in numbers:
        body = f"m-{i}".encode()
        try:
            r = await producer.send(topic, body)
        except ClientError:
            continue
        acked[(r.broker_name, r.queue_id, r.queue_offset)] = body


async def receive_acked(
    consumer: Consumer, acked: dict[Key, bytes], timeout: float = 60
) -> dict[Key, bytes]:
    """What ``consumer`` receives (where it was stored -> body) until every key of ``acked`` is
    among it or ``timeout`` s have passed."""
    received: dict[Key, bytes] = {}
    deadline = time.monotonic() + timeout
    while not set(acked) <= set(received) and time.monotonic() < deadline:
        for m in await consumer.receive(timeout=1.0):
            received[(m.broker_name, m.queue_id, m.queue_offset)] = m.body
    return received


async def remap_static_topic(
    cluster: Cluster, addrs: str, topic: str, queue: int, broker: str
) -> dict[str, Any]:
    """``rmqctl --json remapStaticTopic`` of ``topic``'s logical ``queue`` to ``broker`` (in this
    process, off the loop: producers and consumers keep running), which must succeed: its
    JSON answer."""
    code, out, err = await asyncio.to_thread(
        cli_rmqctl, "--json", "remapStaticTopic", "-a", addrs,
        "-t", topic, "-q", str(queue), "-b", broker,
    )  # fmt: skip
    assert code == 0, err + cluster.logs()
    answer: dict[str, Any] = json.loads(out)
    return answer
