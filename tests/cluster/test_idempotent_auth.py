"""Idempotent producers' ids with authentication on (issue 29, docs/idempotence.md): a broker
refuses a producer id the controllers never issued (PRODUCER_ID_NOT_ISSUED, nothing stored)
and takes every id they did issue, also one issued by a new controller leader after the old
one was killed (the broker learns the lowest id not issued from its heartbeat answers and only
ever raises it)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import msgpack
import pytest

from client import Producer
from protocol.codes import RequestCode, ResponseCode
from protocol.remoting import Frame, Scalar
from remoting.client import RemotingClient, signer_for
from remoting.errors import RemotingError, ResponseError
from tests.cluster.secured import ROOT, admin_call, create_root, secured_cluster
from tests.support.cluster import Cluster
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.multiprocess

TOPIC = "IdemAuth"


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[Cluster]:
    cluster, key, settings = secured_cluster(tmp_path)
    try:
        cluster.start_controllers()
        create_root(cluster, key)
        cluster.add_group("broker-a", replicas=1, config=settings)
        yield cluster
    finally:
        cluster.stop()


async def master_of(cluster: Cluster) -> str:
    async def master() -> str | None:
        try:
            resp = await admin_call(
                cluster.controller_addresses,
                RequestCode.CONTROLLER_GET_SYNC_STATE_DATA,
                {"brokerName": "broker-a"},
            )
        except ResponseError:  # not registered yet
            return None
        doc = msgpack.unpackb(resp.body or b"", raw=False)
        address = doc.get("masterAddress")
        return str(address) if address else None

    return await wait_until_async(master, "a master", 60, on_timeout=cluster.logs)


async def signed_send(address: str, pid: int) -> Frame:
    conn = await RemotingClient.connect(address, signer=signer_for(ROOT))
    try:
        header: dict[str, Scalar] = {
            "topic": TOPIC,
            "queueId": 0,
            "producerId": pid,
            "producerEpoch": 0,
            "sequence": 0,
        }
        return await conn.request(RequestCode.SEND_MESSAGE, header, b"forged", timeout=30)
    finally:
        conn.close()


async def max_offset(address: str) -> int:
    conn = await RemotingClient.connect(address, signer=signer_for(ROOT))
    try:
        resp = await conn.request(
            RequestCode.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": 0, "committed": False}
        )
        assert resp.code == ResponseCode.SUCCESS, resp.header
        value = resp.header["offset"]
        assert isinstance(value, int)
        return value
    finally:
        conn.close()


async def test_a_producer_id_never_issued_is_refused_and_issued_ones_are_taken(
    secured: Cluster,
) -> None:
    cluster = secured
    master = await master_of(cluster)
    await admin_call(
        cluster.controller_addresses,
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        {"topic": TOPIC, "queues": 1, "brokerName": "broker-a"},
    )
    async with Producer(cluster.controller_addresses, credentials=ROOT) as producer:
        # the id is issued right before the first send: the broker may not have heard of it
        # yet, and waits for its next heartbeat answer instead of refusing it
        for i in range(3):
            await producer.send(TOPIC, b"m%d" % i)
        pid = producer.producer_id
        assert pid is not None
    stored = await max_offset(master)
    assert stored == 3
    refused = await signed_send(master, pid + 1000)
    assert refused.code == ResponseCode.PRODUCER_ID_NOT_ISSUED, refused.header
    assert "not issued by the controllers" in str(refused.header.get("remark"))
    assert await max_offset(master) == stored  # nothing stored

    # the controller leader killed: the next id comes from its successor, and is taken
    async def leader_id() -> str | None:
        named = set()
        for c in cluster.controllers:
            try:
                resp = await admin_call(c.address, RequestCode.CONTROLLER_GET_METADATA_INFO, {})
            except (ResponseError, RemotingError):
                continue
            named.add(msgpack.unpackb(resp.body or b"", raw=False).get("leaderId"))
        return str(named.pop()) if len(named) == 1 and None not in named else None

    known = await wait_until_async(leader_id, "the controller leader", 30)
    leader = next(c for c in cluster.controllers if c.node_id == known)
    leader.kill9()
    async with Producer(cluster.controller_addresses, credentials=ROOT) as producer:
        await producer.send(TOPIC, b"after the failover")
        later = producer.producer_id
        assert later is not None and later > pid
    assert await max_offset(master) == stored + 1
