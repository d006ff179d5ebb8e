"""The official RocketMQ 5 Node.js client (rocketmq-client-nodejs, from npm) produces and
consumes through a broker's gRPC endpoint: its Producer sends, its SimpleConsumer (which starts
only once Telemetry answered its settings) receives with a tag filter, changes an invisible
duration and acks; our SDK reads what it sent, field by field. Against a replicated group,
through a slave's endpoint, its sends go on through a kill -9 of the master and nothing it had
acknowledged is lost.

The client is installed with ``npm ci`` from tests/nodejs (package.json and its lockfile) into a
cache directory named by the lockfile's hash, once per machine. Without node or npm the test is
skipped, except under CI=true, where that is a failure (.ci/run installs them)."""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

import pytest

from client.admin import Admin
from client.bootstrap import Bootstrap
from client.simple_consumer import PopMessage, SimpleConsumer
from tests.cluster.support import (
    add_grpc_group,
    create_topic,
    fifo_group_everywhere,
    full_sync_state_set,
    new_master,
    node_at,
)
from tests.support.cluster import Cluster
from tests.support.official_client import StreamingClient, client_env, npm_modules, run_to_end
from tests.support.procs import ROOT, GrpcBrokerProc, free_port, module_broker
from tests.support.wait import wait_until, wait_until_async

pytestmark = pytest.mark.multiprocess

TOPIC = "GrpcNodeTopic"
PACKAGE = ROOT / "tests" / "nodejs"


broker = module_broker("grpc-node", GrpcBrokerProc)


async def test_nodejs_producer_and_simple_consumer(broker: GrpcBrokerProc, tmp_path: Path) -> None:
    modules = npm_modules(PACKAGE, "the official Node.js client")
    async with Admin(broker.address) as admin:
        await admin.create_topic(TOPIC, 2)
    endpoint = f"127.0.0.1:{broker.grpc_port}"
    result = await run_to_end(
        [
            str(shutil.which("node")),
            str(PACKAGE / "simple_consumer.js"),
            endpoint,
            TOPIC,
            "node-simple",
        ],
        tmp_path,
        env=client_env(tmp_path, PATH=os.environ.get("PATH", ""), NODE_PATH=str(modules)),
    )

    sent = {s["id"]: s for s in result["sent"]}
    assert len(sent) == 4
    received = result["received"]
    assert sorted(m["body"] for m in received) == ["node-0", "node-2"], result  # NodeA only
    for m in received:
        i = int(m["body"].rsplit("-", 1)[1])
        assert m["id"] in sent
        assert m["topic"] == TOPIC and m["tag"] == "NodeA"
        assert m["keys"] == [f"node-key-{i}"]
        assert m["properties"] == {"from": "nodejs", "n": str(i)}
        assert m["attempt"] == 1 and m["corrupted"] is False and m["bornHost"]
    assert result["changed"] is True  # the change of invisible duration gave a new handle

    # Our SDK reads what the Node.js producer sent, every field.
    got: list[PopMessage] = []
    async with SimpleConsumer(broker.address, "node-readers", TOPIC) as ours:

        async def all_read() -> bool:
            got.extend(await ours.receive(16, invisible_duration=30, wait=1))
            return len(got) >= 4

        await wait_until_async(all_read, "our consumer to read the 4 messages", 30)
    for m in got:
        i = int(m.body.decode().rsplit("-", 1)[1])
        assert m.properties["UNIQ_KEY"] in sent
        assert m.queue_offset == sent[m.properties["UNIQ_KEY"]]["offset"]
        assert m.tags == ("NodeA" if i % 2 == 0 else "NodeB")
        assert m.keys == f"node-key-{i}"
        assert m.properties["from"] == "nodejs" and m.properties["n"] == str(i)


async def test_nodejs_fifo_push_consumer_retries_a_failed_message_in_place(
    broker: GrpcBrokerProc, tmp_path: Path
) -> None:
    """A FIFO group's push consumer on the Node.js client retries a message its listener
    failed before the message group's next, up to the group's attempts. The client reads no
    customized backoff (the settings answer other clients get); before, it kept no retry
    policy, took 1 attempt as the limit and sent the failed message to the DLQ at once, then
    went on with the group's next message."""
    modules = npm_modules(PACKAGE, "the official Node.js client")
    async with Admin(broker.address) as admin:
        await admin.create_topic("GrpcNodeFifo", 2)
        await admin.update_sub_group(
            {"groupName": "node-fifo", "consumeMessageOrderly": True, "retryMaxTimes": 3}
        )
    result = await run_to_end(
        [
            str(shutil.which("node")),
            str(PACKAGE / "fifo_push.js"),
            f"127.0.0.1:{broker.grpc_port}",
            "GrpcNodeFifo",
            "node-fifo",
        ],
        tmp_path,
        env=client_env(tmp_path, PATH=os.environ.get("PATH", ""), NODE_PATH=str(modules)),
    )
    assert result["failed"] == ["g1:4"]
    consumed = result["consumed"]
    assert sorted(consumed) == sorted(f"g{i % 3}:{i}" for i in range(12)), result
    for k in range(3):  # each message group in the order sent, g1:4 before g1:7
        group = [int(b.split(":")[1]) for b in consumed if b.startswith(f"g{k}:")]
        assert group == list(range(k, 12, 3)), result


async def test_nodejs_producer_rides_through_a_master_failover(
    cluster: Cluster, tmp_path: Path
) -> None:
    """The route of a replicated group names every broker of it; the Node.js client dials the
    addresses of one ``Endpoints`` joined by commas as one gRPC target, which grpc-js cannot
    resolve, so the route it gets names one: the broker it reached (which forwards to
    whichever master the group has). Before, its first send never returned."""
    modules = npm_modules(PACKAGE, "the official Node.js client")
    ports = add_grpc_group(cluster, replicas=2)
    boot = Bootstrap(cluster.controller_addresses, timeout=2.0)
    try:
        old = (await full_sync_state_set(boot, cluster, size=2))["masterAddress"]
        await create_topic(boot, old, "GrpcNodeFailover", 2)
        slave = next(i for i, b in enumerate(cluster.brokers) if b.address != old)
        with StreamingClient(
            str(PACKAGE / "keep_sending.js"),
            tmp_path,
            f"127.0.0.1:{ports[slave]}",
            "GrpcNodeFailover",
            "node-failover",
            runner=(str(shutil.which("node")),),
            env={"NODE_PATH": str(modules)},
        ) as client:

            def logs() -> str:
                return client.stderr_tail(20) + cluster.logs()

            def acked() -> int:
                return sum("acked" in line for line in client.lines)

            wait_until(lambda: acked() >= 30, "30 sends before the kill", 30, on_timeout=logs)
            node_at(cluster, old).kill9()
            await new_master(boot, cluster, old)
            elected = acked()
            wait_until(
                lambda: acked() >= elected + 30,
                "30 sends acknowledged after the kill",
                30,
                on_timeout=logs,
            )
            client.stop()
            assert client.returncode == 0, logs()
    finally:
        boot.close()
    sent = {str(line["acked"]) for line in client.lines if "acked" in line}
    received = set(client.lines[-1]["received"])
    assert sent - received == set(), client.stderr_tail()


async def on_both_slaves_through_a_master_kill(
    cluster: Cluster,
    tmp_path: Path,
    *,
    script: str,
    topics: list[str],
    name: str,
    count: int,
    config: str = "",
) -> list[StreamingClient]:
    """Run ``script`` with the official Node.js client on the endpoint of each slave of a new
    group of three (``topics[n]`` the n-th client's), until each has ``count`` acknowledged
    before and ``count`` more after a kill -9 of the master and the next election; the clients,
    stopped, with what they printed."""
    modules = npm_modules(PACKAGE, "the official Node.js client")
    ports = [free_port() for _ in range(3)]
    cluster.add_group(
        "broker-a",
        3,
        config=config,
        per_broker=[["--grpc-listen", f"127.0.0.1:{p}"] for p in ports],
    )
    boot = Bootstrap(cluster.controller_addresses, timeout=2.0)
    try:
        old = (await full_sync_state_set(boot, cluster, size=3))["masterAddress"]
        for topic in topics:
            await create_topic(boot, old, topic, 2)
        slaves = [i for i, b in enumerate(cluster.brokers) if b.address != old]
        with contextlib.ExitStack() as stack:
            clients = []
            for n, i in enumerate(slaves):
                home = tmp_path / f"client-{n}"
                home.mkdir()
                clients.append(
                    stack.enter_context(
                        StreamingClient(
                            str(PACKAGE / script),
                            home,
                            f"127.0.0.1:{ports[i]}",
                            topics[n],
                            f"{name}-{n}",
                            runner=(str(shutil.which("node")),),
                            env={"NODE_PATH": str(modules)},
                        )
                    )
                )

            def logs() -> str:
                return "".join(c.stderr_tail(20) for c in clients) + cluster.logs()

            def acked(client: StreamingClient) -> int:
                return sum("acked" in line for line in client.lines)

            wait_until(
                lambda: all(acked(c) >= count for c in clients),
                f"{count} acknowledged by each client before the kill",
                30,
                on_timeout=logs,
            )
            node_at(cluster, old).kill9()
            await new_master(boot, cluster, old)
            elected = [acked(c) for c in clients]
            wait_until(
                lambda: all(acked(c) >= e + count for c, e in zip(clients, elected, strict=True)),
                f"{count} acknowledged by each client after the election",
                30,
                on_timeout=logs,
            )
            for c in clients:
                c.stop_file.touch()  # both read what they sent at once
            for c in clients:
                c.stop()
                assert c.returncode == 0, logs()
    finally:
        boot.close()
    return clients


async def test_nodejs_producers_on_both_slaves_lose_no_send_through_a_master_kill(
    cluster: Cluster, tmp_path: Path
) -> None:
    """Two Node.js producers send one message after another through the endpoints of the two
    slaves of a group of three while its master is killed with kill -9: not one send fails,
    and nothing acknowledged is lost or stored twice. A send whose forward finds the master gone
    waits for the group's next master (one slave becomes it and stores the send itself, the
    other forwards to it), within the call's deadline. Before, the forward's connection refused
    answered INTERNAL_ERROR at once: the client spent its three attempts within milliseconds,
    before the controllers had elected the next master, and the send failed.

    The topics are in ``uniq_key_window_topics``: a send that was in flight when the master died
    may have been stored; the endpoint does not send it again but answers PROXY_TIMEOUT, and
    the client's own resend (the same message id) is then answered from the new master's
    UNIQ_KEY window rather than stored twice."""
    topics = ["GrpcNodeKill0", "GrpcNodeKill1"]  # one a client: their bodies are alike
    clients = await on_both_slaves_through_a_master_kill(
        cluster,
        tmp_path,
        script="keep_sending.js",
        topics=topics,
        name="node-kill",
        count=30,
        config=f'uniq_key_window_topics = "{",".join(topics)}"\n',
    )
    for c in clients:
        result = c.lines[-1]
        failed = [line for line in c.errors if line.startswith("send ")]
        assert result["errors"] == 0, f"{result['errors']} sends failed: {failed[:10]}"
        sent = {str(line["acked"]) for line in c.lines if "acked" in line}
        assert sent - set(result["received"]) == set(), c.stderr_tail()
        assert result["duplicates"] == [], c.stderr_tail()


async def test_nodejs_transactions_on_both_slaves_ride_through_a_master_kill(
    cluster: Cluster, tmp_path: Path
) -> None:
    """Two transactional Node.js producers (one on each slave of a group of three) send and
    commit one transaction after another while the master is killed with kill -9. The client
    resends neither a transactional send nor an EndTransaction, so the endpoint's wait for the
    next master is all that carries them: no commit fails (an EndTransaction cut after it was
    written goes to the next master too: a repeat finds it resolved), and a send fails only when
    it was on its way to the master as it died (PROXY_TIMEOUT, at most that one a client: it
    may have been stored, and the client's checker rolls it back). Every committed message is
    delivered, none twice. Before, sends and commits failed with INTERNAL_ERROR until the next
    master was elected."""
    clients = await on_both_slaves_through_a_master_kill(
        cluster,
        tmp_path,
        script="keep_committing.js",
        topics=["GrpcNodeTx0", "GrpcNodeTx1"],
        name="node-tx",
        count=20,
    )
    for c in clients:
        result = c.lines[-1]
        assert result["commitErrors"] == [], result["commitErrors"]
        assert len(result["sendErrors"]) <= 1, result["sendErrors"]
        assert all("50400" in e for e in result["sendErrors"]), result["sendErrors"]
        committed = {str(line["acked"]) for line in c.lines if "acked" in line}
        assert committed - set(result["received"]) == set(), c.stderr_tail()
        assert result["duplicates"] == [], c.stderr_tail()


async def test_nodejs_fifo_push_consumer_keeps_each_message_group_in_order_through_a_master_kill(
    cluster: Cluster, tmp_path: Path
) -> None:
    """A Node.js FIFO PushConsumer consumes while a Node.js producer sends FIFO messages in three
    message groups, both through a slave's endpoint, and the master is killed with kill -9: no
    send fails, every acknowledged message is consumed, and each message group is consumed for
    the first time in the order it was sent."""
    modules = npm_modules(PACKAGE, "the official Node.js client")
    topic, group = "GrpcNodeFifoKill", "node-fifo-kill"
    ports = [free_port() for _ in range(3)]
    cluster.add_group(
        "broker-a", 3, per_broker=[["--grpc-listen", f"127.0.0.1:{p}"] for p in ports]
    )
    boot = Bootstrap(cluster.controller_addresses, timeout=2.0)
    try:
        old = (await full_sync_state_set(boot, cluster, size=3))["masterAddress"]
        await create_topic(boot, old, topic, 2)
        await fifo_group_everywhere(cluster, group)
        slave = next(i for i, b in enumerate(cluster.brokers) if b.address != old)
        with StreamingClient(
            str(PACKAGE / "keep_fifo.js"),
            tmp_path,
            f"127.0.0.1:{ports[slave]}",
            topic,
            group,
            runner=(str(shutil.which("node")),),
            env={"NODE_PATH": str(modules)},
        ) as client:

            def logs() -> str:
                return client.stderr_tail(20) + cluster.logs()

            def acked() -> int:
                return sum("acked" in line for line in client.lines)

            wait_until(lambda: acked() >= 30, "30 sends before the kill", 30, on_timeout=logs)
            node_at(cluster, old).kill9()
            await new_master(boot, cluster, old)
            elected = acked()
            wait_until(
                lambda: acked() >= elected + 30,
                "30 sends acknowledged after the election",
                30,
                on_timeout=logs,
            )
            client.stop()
            assert client.returncode == 0, logs()
    finally:
        boot.close()
    result = client.lines[-1]
    sent = [str(line["acked"]) for line in client.lines if "acked" in line]
    consumed = result["consumed"]
    assert result["errors"] == 0, client.stderr_tail()
    assert set(sent) - set(consumed) == set(), client.stderr_tail()
    for k in range(3):
        firsts = list(dict.fromkeys(b for b in consumed if b.startswith(f"g{k}:")))
        in_order = [b for b in sent if b.startswith(f"g{k}:")]
        assert firsts == in_order[: len(firsts)], (k, firsts, in_order)
