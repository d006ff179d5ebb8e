"""The official clients' pull consumer RPCs (PullMessage, UpdateOffset, GetOffset, QueryOffset)
against a real broker group with a gRPC endpoint on each broker.

rocketmq-python-client has no pull consumer, so the client here is grpcio with the stubs that
package generated from the published apache.rocketmq.v2 .proto (not this project's copy), run in
a process of its own; it sends what rocketmq-clients' Java PullConsumerImpl sends (QueryRoute,
queues readable at broker id 0; QueryOffset BEGINNING/END/TIMESTAMP; PullMessage with a batch
size, a TAG filter and a long polling timeout; UpdateOffset; GetOffset) and reads the answers as
it does: every response of a pull's stream, its status (OK; MESSAGE_NOT_FOUND and ILLEGAL_OFFSET
are no errors to a pull), its messages and its next offset; OFFSET_NOT_FOUND from GetOffset when
the group never committed."""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from client import Producer
from client.bootstrap import Bootstrap
from protocol.codes import ResponseCode
from protocol.pull import ConsumerOffsetQuery, MaxOffsetQuery, decode_offset
from remoting.client import RemotingClient
from remoting.errors import RemotingError
from tests.cluster.support import (
    add_grpc_group,
    create_topic,
    full_sync_state_set,
    new_master,
    node_at,
)
from tests.support.cluster import Cluster
from tests.support.official_client import run_to_end
from tests.support.wait import wait_until, wait_until_async

pytestmark = pytest.mark.multiprocess

TOPIC = "GrpcPullTopic"
GROUP = "grpc-pullers"

_CLIENT = r"""
import json, sys
import grpc
from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as rpc
from rocketmq.grpc_protocol import service_pb2_grpc

mode, endpoint, topic, group = sys.argv[1:5]
extra = json.loads(sys.argv[5]) if len(sys.argv) > 5 else {}
stub = service_pb2_grpc.MessagingServiceStub(grpc.insecure_channel(endpoint))
G = pb.Resource(name=group)

def code(status):
    return pb.Code.Name(status.code)

def queues():
    r = stub.QueryRoute(rpc.QueryRouteRequest(topic=pb.Resource(name=topic)), timeout=10)
    assert code(r.status) == "OK", r.status
    # PullConsumerImpl: readable queues of the master (broker id 0)
    return [mq for mq in r.message_queues
            if mq.permission in (pb.READ, pb.READ_WRITE) and mq.broker.id == 0]

def query(mq, policy, ts_ms=None):
    req = rpc.QueryOffsetRequest(message_queue=mq, query_offset_policy=policy)
    if ts_ms is not None:
        req.timestamp.CopyFrom(Timestamp(seconds=ts_ms // 1000, nanos=ts_ms % 1000 * 1000000))
    r = stub.QueryOffset(req, timeout=10)
    assert code(r.status) == "OK", r.status
    return r.offset

def get(mq):
    r = stub.GetOffset(rpc.GetOffsetRequest(group=G, message_queue=mq), timeout=10)
    return code(r.status), r.offset

def update(mq, offset):
    r = stub.UpdateOffset(rpc.UpdateOffsetRequest(group=G, message_queue=mq, offset=offset),
                          timeout=10)
    return code(r.status)

def pull(mq, offset, batch=16, poll_ms=300, tags="*"):
    # ConsumerImpl.pullMessage: status defaults to INTERNAL_SERVER_ERROR, next offset to 0
    req = rpc.PullMessageRequest(
        group=G, message_queue=mq, offset=offset, batch_size=batch,
        filter_expression=pb.FilterExpression(type=pb.TAG, expression=tags),
        long_polling_timeout=Duration(nanos=poll_ms * 1000000))
    status, messages, nxt = "INTERNAL_SERVER_ERROR", [], 0
    for r in stub.PullMessage(req, timeout=poll_ms / 1000 + 10):
        kind = r.WhichOneof("content")
        if kind == "status":
            status = code(r.status)
        elif kind == "message":
            sp = r.message.system_properties
            messages.append({"body": r.message.body.decode(), "queue": sp.queue_id,
                             "offset": sp.queue_offset, "id": sp.message_id, "tag": sp.tag,
                             "handle": sp.receipt_handle,
                             "invisible": r.message.system_properties.HasField(
                                 "invisible_duration")})
        elif kind == "next_offset":
            nxt = r.next_offset
    return status, messages, nxt

def drain(mq, offset, stop_at):
    got, statuses = [], []
    while True:
        status, messages, nxt = pull(mq, offset)
        statuses.append(status)
        assert status in ("OK", "MESSAGE_NOT_FOUND"), status
        assert nxt >= offset, (offset, nxt)
        got += messages
        offset = nxt
        if status == "MESSAGE_NOT_FOUND" and offset >= stop_at:
            return got, offset, statuses

def listed():
    # mode slave: the queues as a client cached them from an earlier route
    return [pb.MessageQueue(topic=pb.Resource(name=topic), id=int(q), permission=pb.READ_WRITE,
                            broker=pb.Broker(name="broker-a", id=0)) for q in extra["ends"]]

out = {}
for mq in (listed() if mode == "slave" else queues()):
    q = {}
    if mode == "read":
        q["before"] = get(mq)
        begin, end = query(mq, pb.BEGINNING), query(mq, pb.END)
        q["begin"], q["end"] = begin, end
        q["at"] = query(mq, pb.TIMESTAMP, extra["ts"])
        q["got"], q["next"], q["statuses"] = drain(mq, begin, end)
        q["moved"] = pull(mq, end + 1000)
        q["tagged"] = pull(mq, begin, batch=64, poll_ms=0, tags="TagA")
        q["update"] = update(mq, q["next"])
        q["after"] = get(mq)
    elif mode == "resume":
        status, offset = get(mq)
        q["start"] = (status, offset)
        q["got"], q["next"], _ = drain(mq, offset, query(mq, pb.END))
        q["update"] = update(mq, q["next"])
        q["after"] = get(mq)
    elif mode == "slave":
        q["start"] = get(mq)
        q["got"], q["next"], _ = drain(mq, 0, extra["ends"][str(mq.id)])
        q["update"] = update(mq, q["next"])
    out[mq.id] = q
print(json.dumps(out))
"""


async def _client(home: Path, mode: str, port: int, extra: dict[str, Any] | None = None) -> Any:
    argv = [sys.executable, "-c", _CLIENT, mode, f"127.0.0.1:{port}", TOPIC, GROUP]
    return await run_to_end([*argv, json.dumps(extra or {})], home, timeout=120)


async def _send(cluster: Cluster, prefix: str, count: int) -> dict[str, tuple[int, int]]:
    """``count`` messages, every third one tagged TagA, the others TagB (each queue gets
    both): body -> (queue id, queue offset)."""
    sent: dict[str, tuple[int, int]] = {}
    async with Producer(cluster.controller_addresses) as producer:
        for i in range(count):
            body = f"{prefix}-{i}"
            result = await producer.send(TOPIC, body.encode(), tags=_tag(body))
            sent[body] = (result.queue_id, result.queue_offset)
    return sent


async def _offset_on(address: str, ask: ConsumerOffsetQuery | MaxOffsetQuery) -> int | None:
    """The offset the broker at ``address`` answers ``ask`` with; None when it cannot be reached
    or answers other than SUCCESS."""
    try:
        conn = await RemotingClient.connect(address, timeout=2.0)
    except RemotingError:
        return None
    try:
        resp = await conn.request(ask.code, ask.header(), None, 2.0)
    finally:
        conn.close()
    return decode_offset(resp) if resp.code == ResponseCode.SUCCESS else None


async def _committed_on(address: str, queue_id: int) -> int | None:
    """The offset GROUP committed on one queue as the broker at ``address`` holds it."""
    return await _offset_on(
        address, ConsumerOffsetQuery(group=GROUP, topic=TOPIC, queue_id=queue_id)
    )


async def _visible_on(address: str, queue_id: int) -> int | None:
    """What pulls may read of one queue at the broker at ``address`` (its committed end)."""
    return await _offset_on(address, MaxOffsetQuery(topic=TOPIC, queue_id=queue_id, committed=True))


def _tag(body: str) -> str:
    return "TagA" if int(body.split("-")[1]) % 3 == 0 else "TagB"


def _by_queue(sent: dict[str, tuple[int, int]]) -> dict[int, list[tuple[int, str]]]:
    out: dict[int, list[tuple[int, str]]] = {}
    for body, (qid, offset) in sent.items():
        out.setdefault(qid, []).append((offset, body))
    return {qid: sorted(rows) for qid, rows in out.items()}


async def _grpc_group_with_topic(cluster: Cluster, boot: Bootstrap) -> tuple[list[int], str]:
    """broker-a of three replicas serving gRPC, all in sync, with TOPIC on two queues: the
    replicas' gRPC ports (in the order of cluster.brokers) and the master's address."""
    ports = add_grpc_group(cluster)
    master: str = (await full_sync_state_set(boot, cluster))["masterAddress"]
    await create_topic(boot, master, TOPIC, 2)
    return ports, master


async def test_a_pull_consumer_reads_every_queue_in_order_and_commits(
    cluster: Cluster, tmp_path: Path
) -> None:
    """Through a slave's endpoint (it hands the requests to its master): offsets by policy and
    by time, every message once and in queue order with what a pull carries, long polling at
    the end, an offset past the end, a tag filter, commit and read back."""
    boot = Bootstrap(cluster.controller_addresses, timeout=2.0)
    try:
        ports, master = await _grpc_group_with_topic(cluster, boot)
        first = await _send(cluster, "first", 60)
        start = time.time_ns() // 1_000_000
        wait_until(lambda: time.time_ns() // 1_000_000 > start + 2, "the clock moves", 5)
        second = await _send(cluster, "second", 40)
        slave = next(i for i, b in enumerate(cluster.brokers) if b.address != master)
        answer = await _client(tmp_path, "read", ports[slave], {"ts": start + 1})
    finally:
        boot.close()

    sent = {**first, **second}
    assert sorted(answer) == ["0", "1"]
    for qid, rows in _by_queue(sent).items():
        q = answer[str(qid)]
        assert q["before"] == ["OFFSET_NOT_FOUND", 0]
        assert (q["begin"], q["end"]) == (0, len(rows))
        assert q["at"] == sum(1 for body in first if first[body][0] == qid)
        got = q["got"]
        assert [(m["offset"], m["body"]) for m in got] == rows
        assert {m["queue"] for m in got} == {qid}
        assert all(m["id"] and not m["handle"] and not m["invisible"] for m in got)
        assert all(m["tag"] == _tag(m["body"]) for m in got)
        assert q["next"] == len(rows) and q["statuses"][-1] == "MESSAGE_NOT_FOUND"
        status, moved, nxt = q["moved"]
        assert (status, moved, nxt) == ("ILLEGAL_OFFSET", [], len(rows))
        status, tagged, nxt = q["tagged"]
        assert status == "OK" and {m["tag"] for m in tagged} == {"TagA"}
        assert [m["body"] for m in tagged] == [b for _, b in rows if _tag(b) == "TagA"]
        assert q["update"] == "OK"
        assert q["after"] == ["OK", len(rows)]


async def test_offsets_and_pulls_carry_on_after_a_master_change(
    cluster: Cluster, tmp_path: Path
) -> None:
    """A group commits through the master's endpoint, the master is killed; through another
    endpoint GetOffset answers what was committed, the pulls go on from there with exactly the
    messages sent since, and commits land on the new master."""
    boot = Bootstrap(cluster.controller_addresses, timeout=2.0)
    try:
        ports, old = await _grpc_group_with_topic(cluster, boot)
        before = await _send(cluster, "before", 50)
        index = {b.address: i for i, b in enumerate(cluster.brokers)}
        first = await _client(tmp_path, "read", ports[index[old]], {"ts": 0})
        ends = {int(qid): q["next"] for qid, q in first.items()}
        assert sum(ends.values()) == len(before)
        slaves = [b.address for b in cluster.brokers if b.address != old]
        for address in slaves:  # the slaves copy the master's offsets (1 s interval)
            for qid, end in ends.items():

                async def copied(a: str = address, q: int = qid, e: int = end) -> bool:
                    return await _committed_on(a, q) == e

                await wait_until_async(copied, f"{address} copies offset {end} of queue {qid}", 30)
        node_at(cluster, old).kill9()
        new = (await new_master(boot, cluster, old))["masterAddress"]
        after = await _send(cluster, "after", 30)
        other = next(a for a in slaves if a != new)  # a slave of the new master
        answer = await _client(tmp_path, "resume", ports[index[other]])
        for qid, end in ends.items():
            q = answer[str(qid)]
            assert q["start"] == ["OK", end]
            rows = [(o, b) for o, b in _by_queue(after).get(qid, [])]
            assert [(m["offset"], m["body"]) for m in q["got"]] == rows
            assert q["update"] == "OK" and q["after"] == ["OK", q["next"]]
            assert await _committed_on(new, qid) == q["next"]
    finally:
        boot.close()


async def test_a_slave_serves_pulls_while_its_dead_master_is_not_replaced(
    cluster: Cluster, tmp_path: Path
) -> None:
    """The master is killed while the controllers are frozen (no new master, and the slaves
    still name the dead one): a slave's endpoint answers GetOffset with its copy of the commit
    and the pulls with every message it replicated, in order; a commit is refused (the master
    is unreachable) and the client can commit again later."""
    boot = Bootstrap(cluster.controller_addresses, timeout=2.0)
    try:
        ports, old = await _grpc_group_with_topic(cluster, boot)
        first = await _send(cluster, "first", 40)
        index = {b.address: i for i, b in enumerate(cluster.brokers)}
        committed = await _client(tmp_path, "read", ports[index[old]], {"ts": 0})
        later = await _send(cluster, "later", 20)
        ends = {str(q): len(rows) for q, rows in _by_queue({**first, **later}).items()}
        slave = next(b.address for b in cluster.brokers if b.address != old)
        for qid, end in ends.items():

            async def caught_up(q: int = int(qid), e: int = end) -> bool:
                got = await _visible_on(slave, q), await _committed_on(slave, q)
                return got == (e, committed[str(q)]["next"])

            await wait_until_async(caught_up, f"{slave} replicates queue {qid}", 30)
    finally:
        boot.close()
    for controller in cluster.controllers:
        controller.signal(signal.SIGSTOP)  # the cluster fixture thaws them
    node_at(cluster, old).kill9()
    answer = await _client(tmp_path, "slave", ports[index[slave]], {"ends": ends})
    every = _by_queue({**first, **later})
    for qid, q in answer.items():
        assert q["start"] == ["OK", committed[qid]["next"]]
        assert [(m["offset"], m["body"]) for m in q["got"]] == every[int(qid)]
        assert q["update"] == "INTERNAL_ERROR"
