"""Idempotent producers' ids with authentication on (issue 29, docs/idempotence.md): a broker
refuses a producer id the controllers never issued (PRODUCER_ID_NOT_ISSUED, nothing stored)
and takes every id they did issue, also one issued by a new controller leader after the old
one was killed (the broker learns the lowest id not issued from its heartbeat answers and only
ever raises it). A producer id belongs to the user who took it: another user can neither send
with it (and fence its producer) nor take it up at a new epoch (protocol/producer_token.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import msgpack
import pytest

from client import Credentials, Producer
from daemon.auth_key import load_auth_key
from protocol.acl import make_rule
from protocol.codes import ControllerCode, RequestCode, ResponseCode
from protocol.producer_token import TOKEN_FIELD, send_token, token_key
from protocol.remoting import Frame, Scalar
from remoting.client import ConnectionPool, RemotingClient, signer_for
from remoting.errors import RemotingError, ResponseError
from remoting.failover import AddressFailover
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


async def signed_send(
    address: str,
    pid: int,
    *,
    epoch: int = 0,
    token: bytes | None = None,
    creds: Credentials = ROOT,
    topic: str = TOPIC,
) -> Frame:
    conn = await RemotingClient.connect(address, signer=signer_for(creds))
    try:
        header: dict[str, Scalar] = {
            "topic": topic,
            "queueId": 0,
            "producerId": pid,
            "producerEpoch": epoch,
            "sequence": 0,
        }
        if token is not None:
            header[TOKEN_FIELD] = token
        return await conn.request(RequestCode.SEND_MESSAGE, header, b"forged", timeout=30)
    finally:
        conn.close()


async def max_offset(address: str, topic: str = TOPIC) -> int:
    conn = await RemotingClient.connect(address, signer=signer_for(ROOT))
    try:
        resp = await conn.request(
            RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": 0, "committed": False}
        )
        assert resp.code == ResponseCode.SUCCESS, resp.header
        value = resp.header["offset"]
        assert isinstance(value, int)
        return value
    finally:
        conn.close()


async def test_a_producer_id_never_issued_is_refused_and_issued_ones_are_taken(
    secured: Cluster, tmp_path: Path
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
    # with the token the id would have (made with the cluster's key, as only the controllers
    # can), so what refuses it is the broker's knowledge of the ids issued
    key = token_key(load_auth_key(tmp_path / "auth.key"))
    forged = send_token(key, pid + 1000, 0, ROOT.access_key)
    refused = await signed_send(master, pid + 1000, token=forged)
    assert refused.code == ResponseCode.PRODUCER_ID_NOT_ISSUED, refused.header
    assert "not issued by the controllers (the lowest" in str(refused.header.get("remark"))
    # without the token, the same id is refused before that
    refused = await signed_send(master, pid + 1000)
    assert refused.code == ResponseCode.PRODUCER_ID_NOT_ISSUED, refused.header
    assert "to user root (no producerToken was sent)" in str(refused.header.get("remark"))
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


ALICE = Credentials("alice", "alice-Secret-4242")
MALLORY = Credentials("mallory", "mallory-Secret-42")


async def create_user(cluster: Cluster, creds: Credentials, topic: str) -> None:
    """``creds`` with the right to send to ``topic`` only."""
    await admin_call(cluster.controller_addresses, ControllerCode.AUTH_CREATE_USER,
                     {"username": creds.access_key}, {"secret": creds.secret_key})  # fmt: skip
    rule = make_rule(f"Topic:{topic}", ["pub"], "allow").to_doc()
    await admin_call(cluster.controller_addresses, ControllerCode.AUTH_CREATE_ACL,
                     {"username": creds.access_key}, {"rules": [rule]})  # fmt: skip


async def test_another_user_can_neither_send_with_a_producer_id_nor_take_it_up(
    secured: Cluster, tmp_path: Path
) -> None:
    cluster = secured
    master = await master_of(cluster)
    for topic in (TOPIC, "Mallory"):
        await admin_call(
            cluster.controller_addresses,
            RequestCode.UPDATE_AND_CREATE_TOPIC,
            {"topic": topic, "queues": 1, "brokerName": "broker-a"},
        )
    await create_user(cluster, ALICE, TOPIC)
    await create_user(cluster, MALLORY, "Mallory")

    async def mallory_known() -> bool:  # the broker learns new users from the controllers
        resp = await signed_send(master, 1 << 40, creds=MALLORY, topic="Mallory")
        return resp.code != ResponseCode.NO_PERMISSION

    await wait_until_async(mallory_known, "the broker knows mallory", 60, on_timeout=cluster.logs)
    id_file = tmp_path / "alice.pid"
    async with Producer(
        cluster.controller_addresses, credentials=ALICE, producer_id_file=id_file
    ) as alice:
        await alice.send(TOPIC, b"a0")
        pid, epoch = alice.producer_id, alice.producer_epoch
        assert pid is not None and epoch is not None
        # mallory, allowed to send to her own topic only, sends there with alice's id at a
        # later epoch: on the old code it was stored and fenced alice's producer everywhere
        for token in (None, bytes(16)):
            forged = await signed_send(
                master, pid, epoch=epoch + 1, token=token, creds=MALLORY, topic="Mallory"
            )
            assert forged.code == ResponseCode.PRODUCER_ID_NOT_ISSUED, forged.header
            assert "to user mallory" in str(forged.header.get("remark"))
        assert await max_offset(master, "Mallory") == 0
        await alice.send(TOPIC, b"a1")  # not fenced

    # mallory asks the controllers for alice's id at a new epoch: refused, nothing decided
    ask = AddressFailover(cluster.controller_addresses, ConnectionPool(3.0, MALLORY), 10.0)
    try:
        with pytest.raises(ResponseError) as taken:
            await ask.call(RequestCode.CONTROLLER_GET_PRODUCER_ID, {"producerId": pid}, None)
    finally:
        ask.pool.close()
    assert taken.value.code == ResponseCode.CONTROLLER_INVALID_REQUEST
    assert f"producer id {pid} was not issued to user mallory" in str(taken.value)

    # alice, restarted with her id file, takes her id up at a new epoch and sends
    async with Producer(
        cluster.controller_addresses, credentials=ALICE, producer_id_file=id_file
    ) as again:
        await again.send(TOPIC, b"a2")
        assert again.producer_id == pid
        assert again.producer_epoch is not None and again.producer_epoch > epoch
    assert await max_offset(master) == 3
