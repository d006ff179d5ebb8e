"""A topic's permission and message type against real processes (issue 33's topics page gap):
a controller quorum and one group of two brokers (master and slave) with
``topic_message_type_check`` on; rmqctl as an operator sets them, the SDK and a classic
client send.

- updateTopic -p 4 (read only): the SDK's send and a classic SEND_MESSAGE are refused with
  NO_PERMISSION, "the topic[...] sending message is forbidden"; the slave holds the same
  permission (pushed by the controllers); -p 6 again and the send is stored. -p 2 (write
  only): a pull is refused.
- updateTopic --attributes +message.type=FIFO: a message without a message group is refused,
  one with a group stored; a FIFO message to a NORMAL topic and a delayed one to the FIFO
  topic are refused; topicList and topicRoute show the type and permission.
- A bad type or permission: one line on stderr, exit 1, nothing changed.
"""

from __future__ import annotations

import asyncio
from typing import Any

import msgpack
import pytest

from client import Producer
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


def test_a_bad_type_or_permission_is_one_line_and_changes_nothing(cluster: Cluster) -> None:
    for args, words in (
        (("--attributes", "+message.type=ORDERED"), "is not one of NORMAL, FIFO"),
        (("--attributes", "+retention=1"), "is not known"),
        (("-p", "9"), "is not 0..7"),
    ):
        proc = cluster_rmqctl(cluster, "--json", "updateTopic", "-t", "Bad", *args)
        assert proc.returncode == 1, (proc.stdout, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and words in lines[0], proc.stderr
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
