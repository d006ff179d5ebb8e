"""A topic's permission and message type against real processes (issue 33's topics page gap):
a controller quorum and one group of two brokers (master and slave) with
``topic_message_type_check`` on; rmqctl as an operator sets them, the SDK and a classic
client send.

- updateTopic -p 4 (read only): the SDK's send and a classic SEND_MESSAGE are refused with
  NO_PERMISSION, "the topic[...] sending message is forbidden"; the slave holds the same
  permission (pushed by the controllers); -p 6 again and the send is stored. -p 2 (write
  only): a pull is refused.
- A write-only topic (-p 2) takes sends; the SDK's pull consumer raises the NO_PERMISSION
  refusal from receive (pulling stops, nothing is waited for in silence), also when the topic
  turns write only while it reads, and consumeMessage, pull or --pop, prints it on one line
  and exits 1.
- updateTopic --attributes +message.type=FIFO: a message without a message group is refused,
  one with a group stored; a FIFO message to a NORMAL topic and a delayed one to the FIFO
  topic are refused; topicList and topicRoute show the type and permission.
- A bad type or permission: a usage error (exit 2), nothing changed.
"""

from __future__ import annotations

import asyncio
from typing import Any

import msgpack
import pytest

from client import Consumer, Producer
from client.bootstrap import Bootstrap
from client.errors import BrokerError
from protocol.broker_requests.send import SendRequest
from protocol.codes import RequestCode, ResponseCode
from protocol.pull import PullRequest
from remoting.client import RemotingClient
from tests.cluster.support import (
    cluster_rmqctl,
    cluster_rmqctl_json,
    full_sync_state_set,
    routed,
    shared_cluster,
    synced_master,
)
from tests.support.cluster import Cluster
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.multiprocess

cluster = shared_cluster(2, config="topic_message_type_check = true\n")
"""One cluster for the module: each test changes only topics of its own (ReadOnly; Orders and
Plain; Bad) and stops no process."""


async def call(address: str, code: int, header: Any, body: bytes | None = None) -> Any:
    conn = await RemotingClient.connect(address, timeout=2.0)
    try:
        return await conn.request(code, header, body, 5.0)
    finally:
        conn.close()


async def topic_config(address: str, topic: str) -> dict[str, Any]:
    resp = await call(address, RequestCode.GET_ALL_TOPIC_CONFIG, {})
    assert resp.code == ResponseCode.SUCCESS
    return dict(msgpack.unpackb(resp.body or b"\x80", strict_map_key=False).get(topic) or {})


def update_topic(cluster: Cluster, *args: str) -> dict[str, Any]:
    doc: dict[str, Any] = cluster_rmqctl_json(cluster, "updateTopic", "-q", "2", *args)
    return doc


async def send_refusal(producer: Producer, topic: str, **kw: Any) -> BrokerError:
    with pytest.raises(BrokerError) as refused:
        await producer.send(topic, b"x", **kw)
    return refused.value


async def test_a_read_only_topic_refuses_sends_from_the_sdk_and_a_classic_client(
    cluster: Cluster, boot: Bootstrap
) -> None:
    master = await synced_master(boot, cluster, size=2)
    slave = next(b for b in cluster.brokers if b is not master)
    made = await asyncio.to_thread(update_topic, cluster, "-t", "ReadOnly", "-p", "4")
    assert made["perm"] == 4
    await wait_until_async(lambda: routed(boot, "ReadOnly"), "ReadOnly routed", 20, interval=0.1)
    # Both brokers hold the permission: the master from the request, the slave pushed.
    for b in (master, slave):
        await wait_until_async(
            lambda b=b: _perm_is(b.address, "ReadOnly", 4),
            f"perm 4 on {b.name}",
            20,
            interval=0.1,
            on_timeout=cluster.logs,
        )
    async with Producer(cluster.controller_addresses, retries=0) as producer:
        refused = await send_refusal(producer, "ReadOnly")
        assert refused.code == ResponseCode.NO_PERMISSION
        assert "the topic[ReadOnly] sending message is forbidden" in refused.remark
        # A classic (our remoting) SEND_MESSAGE to the master: the same answer, nothing stored.
        send = SendRequest(topic="ReadOnly", body=b"y", queue_id=0)
        resp = await call(master.address, RequestCode.SEND_MESSAGE, *send.encode())
        assert resp.code == ResponseCode.NO_PERMISSION, resp
        route = await asyncio.to_thread(
            cluster_rmqctl_json, cluster, "topicRoute", "-t", "ReadOnly"
        )
        assert [(b["perm"], b["messageType"]) for b in route["brokers"]] == [(4, "NORMAL")]
        # Writable again: stored.
        await asyncio.to_thread(update_topic, cluster, "-t", "ReadOnly", "-p", "6")
        await wait_until_async(
            lambda: _perm_is(master.address, "ReadOnly", 6), "perm 6 on the master", 20
        )
        stored = await producer.send("ReadOnly", b"z")
        assert stored.queue_offset == 0
    # Write only: a pull is refused.
    await asyncio.to_thread(update_topic, cluster, "-t", "ReadOnly", "-p", "2")
    await wait_until_async(lambda: _perm_is(master.address, "ReadOnly", 2), "perm 2", 20)
    pull = PullRequest(group="g", topic="ReadOnly", queue_id=stored.queue_id, offset=0)
    resp = await call(master.address, pull.code, pull.header(), None)
    assert resp.code == ResponseCode.NO_PERMISSION, resp
    assert "pulling message is forbidden" in (resp.remark or "")


async def test_a_write_only_topic_refuses_the_sdk_consumer_and_consume_message(
    cluster: Cluster, boot: Bootstrap
) -> None:
    master = await synced_master(boot, cluster, size=2)
    made = await asyncio.to_thread(update_topic, cluster, "-t", "WriteOnly", "-p", "2")
    assert made["perm"] == 2
    await wait_until_async(lambda: routed(boot, "WriteOnly"), "WriteOnly routed", 20, interval=0.1)
    await wait_until_async(
        lambda: _perm_is(master.address, "WriteOnly", 2), "perm 2 on the master", 20
    )
    async with Producer(cluster.controller_addresses, retries=0) as producer:
        for _ in range(3):
            await producer.send("WriteOnly", b"w")
    # The SDK's pull consumer: receive raises the broker's refusal (within a few pulls, not
    # after backing off for ever).
    async with Consumer(cluster.controller_addresses, "wo-sdk", "WriteOnly") as consumer:

        async def refusal() -> BrokerError | None:
            try:
                got = await consumer.receive(timeout=0.5)
            except BrokerError as exc:
                return exc
            assert got == [], got
            return None

        raised = await wait_until_async(refusal, "receive to raise the refusal", 20)
        assert raised is not None and raised.code == ResponseCode.NO_PERMISSION, raised
        assert "the topic[WriteOnly] pulling message is forbidden" in raised.remark
    # A topic made write only while a consumer reads it (its cached route still says
    # readable): the same, once the route is fetched again.
    await asyncio.to_thread(update_topic, cluster, "-t", "TurnedWriteOnly")
    await wait_until_async(lambda: routed(boot, "TurnedWriteOnly"), "routed", 20, interval=0.1)
    async with Producer(cluster.controller_addresses, retries=0) as producer:
        await producer.send("TurnedWriteOnly", b"before")
    async with Consumer(cluster.controller_addresses, "two-sdk", "TurnedWriteOnly") as turned:
        got = await wait_until_async(lambda: turned.receive(timeout=0.5), "the message", 20)
        assert [m.body for m in got] == [b"before"]
        await asyncio.to_thread(update_topic, cluster, "-t", "TurnedWriteOnly", "-p", "2")

        async def turned_refusal() -> BrokerError | None:
            try:
                assert await turned.receive(timeout=0.5) == []
            except BrokerError as exc:
                return exc
            return None

        raised = await wait_until_async(turned_refusal, "receive to raise the refusal", 20)
        assert raised is not None and raised.code == ResponseCode.NO_PERMISSION, raised
    # rmqctl, pulling and by POP: the refusal on one line, exit status 1, well before --timeout.
    for extra in ((), ("--pop",)):
        proc = await asyncio.to_thread(
            cluster_rmqctl, cluster, "--json", "consumeMessage",
            "-t", "WriteOnly", "-g", "wo-cli", "--count", "1", "--timeout", "15", *extra,
        )  # fmt: skip
        assert proc.returncode == 1 and proc.stdout == "", (extra, proc)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("rmqctl: "), (extra, proc.stderr)
        assert "NO_PERMISSION" in lines[0], (extra, proc.stderr)
        assert "the topic[WriteOnly] pulling message is forbidden" in lines[0], proc.stderr


async def test_a_fifo_topic_takes_only_fifo_messages_with_the_type_check_on(
    cluster: Cluster, boot: Bootstrap
) -> None:
    await full_sync_state_set(boot, cluster, size=2)
    made = await asyncio.to_thread(
        update_topic, cluster, "-t", "Orders", "--attributes", "+message.type=FIFO"
    )
    assert made["messageType"] == "FIFO"
    await asyncio.to_thread(update_topic, cluster, "-t", "Plain")
    for t in ("Orders", "Plain"):
        await wait_until_async(lambda t=t: routed(boot, t), f"{t} routed", 20, interval=0.1)
    listed = await asyncio.to_thread(cluster_rmqctl_json, cluster, "topicList")
    kinds = {t["topic"]: (t["messageType"], t["perm"]) for t in listed["topics"]}
    assert kinds["Orders"] == ("FIFO", 6) and kinds["Plain"] == ("NORMAL", 6)
    async with Producer(cluster.controller_addresses, retries=0) as producer:
        await wait_until_async(
            lambda: _stored(producer, "Orders", message_group="o-1"),
            "a FIFO message stored on the FIFO topic",
            20,
            interval=0.2,
        )
        normal = await send_refusal(producer, "Orders")
        assert normal.code == ResponseCode.MESSAGE_ILLEGAL
        assert "topic Orders takes FIFO messages, not NORMAL" in normal.remark
        delayed = await send_refusal(producer, "Orders", delay=60)
        assert "not DELAY" in delayed.remark
        fifo = await send_refusal(producer, "Plain", message_group="o-1")
        assert "topic Plain takes NORMAL messages, not FIFO" in fifo.remark
        await producer.send("Plain", b"plain")


def test_a_bad_type_or_permission_is_a_usage_error_and_changes_nothing(cluster: Cluster) -> None:
    for args, words in (
        (("--attributes", "+message.type=ORDERED"), "is not one of NORMAL, FIFO"),
        (("--attributes", "+retention=1"), "is not known"),
        (("-p", "9"), "is not 0..7"),
    ):
        proc = cluster_rmqctl(cluster, "--json", "updateTopic", "-t", "Bad", *args)
        # A bad option value: a usage error (exit status 2), the last line naming it.
        assert proc.returncode == 2, (proc.stdout, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        assert lines[-1].startswith("Error: ") and words in lines[-1], proc.stderr
    listed = cluster_rmqctl_json(cluster, "topicList")
    assert "Bad" not in {t["topic"] for t in listed["topics"]}


async def _perm_is(address: str, topic: str, perm: int) -> bool:
    return (await topic_config(address, topic)).get("perm", 6) == perm


async def _stored(producer: Producer, topic: str, **kw: Any) -> bool:
    try:
        await producer.send(topic, b"m", **kw)
    except BrokerError as exc:
        if exc.code == ResponseCode.MESSAGE_ILLEGAL:
            raise
        return False
    return True
