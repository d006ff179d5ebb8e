"""Authenticated clients on the remoting protocol (issue 14, item 2), against real processes:
three controllers and a broker group of two with ``auth_enabled``, the cluster's own traffic
(Raft, registration, heartbeats, the slave's requests to its master) signed with the cluster's
credentials.

Admin commands need a super user; a user with pub on topic A cannot send to B nor consume A; a
replayed request, a wrong secret, a bad signature, an expired timestamp and an unknown user are
refused NO_PERMISSION with the reason, and a refused send stores nothing.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from client import Consumer, Credentials, Producer
from client.errors import BrokerError
from protocol.codes import RequestCode, ResponseCode
from protocol.remoting import Frame, Header, Scalar
from protocol.request_auth import NONCE, RequestSigner
from protocol.request_permissions import SUPER_ONLY_CONTROLLER_CODES
from remoting.client import RemotingClient, signer_for, wall_ms
from tests.support.cluster import BrokerNode, Cluster
from tests.support.procs import rmqctl
from tests.support.wait import wait_until, wait_until_async

pytestmark = pytest.mark.multiprocess

ROOT = Credentials("root", "root-Secret-4242")
APP = Credentials("app", "app-Secret-4242")
READER = Credentials("reader", "reader-Secret-42")
WINDOW_MS = 30_000


class Secured:
    def __init__(self, cluster: Cluster, key: Path, group: list[BrokerNode]) -> None:
        self.cluster = cluster
        self.key = key
        self.group = group
        self.addresses = cluster.controller_addresses

    def master(self) -> str:
        doc = self.ctl(ROOT, "getSyncStateSet", "-b", "broker-a")
        return str(doc["masterAddress"])

    def ctl(self, creds: Credentials | None, *args: str, ok: bool = True) -> Any:
        env = dict(os.environ)
        env.pop("RMQ_ACCESS_KEY", None)
        env.pop("RMQ_SECRET_KEY", None)
        if creds is not None:  # through the environment, as an operator would
            env["RMQ_ACCESS_KEY"] = creds.access_key
            env["RMQ_SECRET_KEY"] = creds.secret_key
        done = rmqctl("-a", self.addresses, "--json", *args, env=env)
        if not ok:
            return done
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    tmp = tmp_path_factory.mktemp("auth")
    key = tmp / "auth.key"
    key.write_bytes(os.urandom(32).hex().encode())
    key.chmod(0o600)
    settings = (
        f'auth_key_file = "{key}"\nauth_enabled = true\nauth_timestamp_window_ms = {WINDOW_MS}\n'
    )
    controller_config = tmp / "controller-auth.toml"
    controller_config.write_text(settings)
    cluster = Cluster(tmp)
    for c in cluster.controllers:
        c.argv += ["--config", str(controller_config)]
    try:
        cluster.start_controllers()
        # The first super user, created as the cluster itself (the operator holds the key).
        done = rmqctl(
            "-a", cluster.controller_addresses, "--auth-key-file", str(key),
            "createUser", "-u", ROOT.access_key, "-p", ROOT.secret_key, "-t", "Super",
            timeout=60,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr + cluster.logs()
        group = cluster.add_group(
            "broker-a", replicas=2, config=settings + "auth_refresh_interval_ms = 1000\n"
        )
        secured = Secured(cluster, key, group)

        # The cluster's own signed traffic works: both replicas registered, heartbeating, and
        # the slave replicating (in the SyncStateSet).
        def in_sync() -> bool:
            doc = secured.ctl(ROOT, "getSyncStateSet", "-b", "broker-a", ok=False)
            if doc.returncode != 0:
                return False
            state = json.loads(doc.stdout)
            return state["masterAddress"] is not None and len(state["syncStateSet"]) == 2

        wait_until(in_sync, "both replicas in the SyncStateSet", 60, on_timeout=cluster.logs)
        yield secured
    finally:
        cluster.stop()


async def call(address: str, creds: Credentials | None, code: int, header: Header,
               body: bytes | None = None) -> Frame:  # fmt: skip
    conn = await RemotingClient.connect(address, signer=signer_for(creds))
    try:
        return await conn.request(code, header, body, timeout=5.0)
    finally:
        conn.close()


def refused(resp: Frame, reason: str) -> str:
    remark = str(resp.header.get("remark"))
    assert resp.code == ResponseCode.NO_PERMISSION, (resp.code, remark)
    assert remark.startswith(f"{reason}:"), remark
    return remark


async def max_offset(master: str, topic: str) -> int:
    resp = await call(
        master, ROOT, RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": 0, "committed": False}
    )
    assert resp.code == ResponseCode.SUCCESS, resp.header
    value = resp.header["offset"]
    assert isinstance(value, int)
    return value


async def grant_app(secured: Secured) -> str:
    """User app with pub on Topic:A only; topics A and B with one queue; returns the master once
    the broker knows app (its cache follows the controllers within a heartbeat or a refresh)."""
    listed = secured.ctl(ROOT, "listUser")
    if "app" not in [u["username"] for u in listed["users"]]:
        secured.ctl(ROOT, "createUser", "-u", APP.access_key, "-p", APP.secret_key)
        secured.ctl(ROOT, "createAcl", "-s", "User:app", "-r", "Topic:A", "-A", "pub")
        for topic in ("A", "B"):
            secured.ctl(ROOT, "updateTopic", "-t", topic, "-q", "1")
    master = secured.master()

    async def app_known() -> bool:
        resp = await call(master, APP, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "A"})
        return resp.code == ResponseCode.SUCCESS

    await wait_until_async(app_known, "the broker to know user app", 20)
    return master


async def test_admin_commands_need_a_super_user(secured: Secured) -> None:
    master = await grant_app(secured)
    header: dict[str, Scalar] = {"brokerName": "broker-a", "username": "nobody", "id": "zz"}
    # The guard answers before any handler: every controller refuses alike, leader or not.
    for controller in secured.cluster.controllers:
        for code in sorted(SUPER_ONLY_CONTROLLER_CODES):
            refused(await call(controller.address, None, code, header), "unsigned")
            remark = refused(await call(controller.address, APP, code, header), "denied")
            assert "needs a super user" in remark
    # The broker's admin requests likewise.
    resp = await call(master, APP, RequestCode.NOTIFY_BROKER_ROLE_CHANGED, {})
    refused(resp, "denied")

    # With the super user's credentials they pass the guard and do their work.
    assert secured.ctl(ROOT, "createUser", "-u", "temp", "-p", "temp-Secret-1")["version"] == 1
    secured.ctl(ROOT, "updateUser", "-u", "temp", "-t", "Super")
    secured.ctl(ROOT, "createAcl", "-s", "temp", "-r", "Topic:x", "-A", "sub")
    secured.ctl(ROOT, "updateAcl", "-s", "temp", "-r", "Topic:x", "-A", "pub")
    assert secured.ctl(ROOT, "listAcl", "-s", "temp")["acls"][0]["rules"][0]["actions"] == ["pub"]
    secured.ctl(ROOT, "deleteAcl", "-s", "temp")
    secured.ctl(ROOT, "deleteUser", "-u", "temp")
    state = secured.ctl(ROOT, "getSyncStateSet", "-b", "broker-a")
    master_id = str(state["masterBrokerId"])
    elected = secured.ctl(ROOT, "electMaster", "-b", "broker-a", "-i", master_id, ok=False)
    # Its own answer (the master is already that broker), not a refusal.
    assert "No permission" not in elected.stderr and "denied" not in elected.stderr
    assert secured.ctl(ROOT, "getSyncStateSet", "-b", "broker-a")["masterBrokerId"] == int(
        master_id
    )
    cleaned = secured.ctl(ROOT, "cleanBrokerMetadata", "-b", "nowhere", ok=False)
    assert "denied" not in cleaned.stderr and "unsigned" not in cleaned.stderr
    # Without credentials rmqctl says why, on one line.
    done = secured.ctl(None, "createUser", "-u", "x", "-p", "x-Secret-12", ok=False)
    assert done.returncode == 1 and "unsigned" in done.stderr, done.stderr
    done = secured.ctl(APP, "deleteUser", "-u", "root", ok=False)
    assert done.returncode == 1 and "needs a super user" in done.stderr, done.stderr


async def test_pub_on_a_sends_to_a_only_and_cannot_consume_it(secured: Secured) -> None:
    master = await grant_app(secured)
    before_a, before_b = await max_offset(master, "A"), await max_offset(master, "B")
    async with Producer(secured.addresses, credentials=APP, auto_batch=False) as producer:
        sent = await producer.send("A", b"allowed")
        assert sent.queue_offset == before_a
        with pytest.raises(BrokerError) as info:
            await producer.send("B", b"not allowed")
        assert info.value.code == ResponseCode.NO_PERMISSION
        assert "no rule of app allows pub on Topic:B" in str(info.value)
    assert await max_offset(master, "B") == before_b  # nothing stored
    assert await max_offset(master, "A") == before_a + 1
    pull = {"consumerGroup": "g", "topic": "A", "queueId": 0, "queueOffset": 0, "maxMsgNums": 1}
    assert "sub on Topic:A" in refused(
        await call(master, APP, RequestCode.PULL_MESSAGE, pull), "denied"
    )
    # A reader with sub on the topic and its group consumes what app sent, through the SDK.
    if "reader" not in [u["username"] for u in secured.ctl(ROOT, "listUser")["users"]]:
        secured.ctl(ROOT, "createUser", "-u", READER.access_key, "-p", READER.secret_key)
        secured.ctl(ROOT, "createAcl", "-s", "reader", "-r", "Topic:A,Group:g", "-A", "sub")
    consumer = Consumer(secured.addresses, "g", "A", credentials=READER, request_timeout=2.0)
    async with consumer:

        async def allowed_body() -> bool:
            return any(m.body == b"allowed" for m in await consumer.receive(timeout=1.0))

        await wait_until_async(allowed_body, "the reader to consume A", 30)


async def test_replayed_request_is_refused_and_stores_nothing(secured: Secured) -> None:
    master = await grant_app(secured)
    before = await max_offset(master, "A")
    header = RequestSigner(APP, "replay").sign(
        RequestCode.SEND_MESSAGE, 0, {"topic": "A", "queueId": 0}, b"once", wall_ms()
    )
    first = await call(master, None, RequestCode.SEND_MESSAGE, dict(header), b"once")
    assert first.code == ResponseCode.SUCCESS, first.header
    # The same bytes again, on another connection.
    remark = refused(await call(master, None, RequestCode.SEND_MESSAGE, dict(header), b"once"),
                     "replayed")  # fmt: skip
    assert str(header[NONCE]) in remark
    assert await max_offset(master, "A") == before + 1


async def test_bad_credentials_are_refused_with_the_reason(secured: Secured) -> None:
    master = await grant_app(secured)
    before = await max_offset(master, "A")
    send = {"topic": "A", "queueId": 0}
    refused(await call(master, None, RequestCode.SEND_MESSAGE, send, b"x"), "unsigned")
    wrong = Credentials("app", "not-the-Secret")
    assert "wrong secret" in refused(
        await call(master, wrong, RequestCode.SEND_MESSAGE, send, b"x"), "bad_signature"
    )
    forged = RequestSigner(APP, "forge").sign(RequestCode.SEND_MESSAGE, 0, send, b"x", wall_ms())
    forged["topic"] = "B"  # altered after signing
    refused(await call(master, None, RequestCode.SEND_MESSAGE, forged, b"x"), "bad_signature")
    stale = RequestSigner(APP, "stale").sign(
        RequestCode.SEND_MESSAGE, 0, send, b"x", wall_ms() - 2 * WINDOW_MS
    )
    assert "behind" in refused(
        await call(master, None, RequestCode.SEND_MESSAGE, stale, b"x"), "expired"
    )
    ghost = Credentials("ghost", "ghost-Secret-1")
    refused(await call(master, ghost, RequestCode.SEND_MESSAGE, send, b"x"), "unknown_user")
    assert await max_offset(master, "A") == before  # none of them stored anything
    # The controllers refuse alike.
    controller = secured.cluster.controllers[0].address
    refused(await call(controller, wrong, RequestCode.GET_BROKER_CLUSTER_INFO, {}), "bad_signature")
    refused(await call(controller, ghost, RequestCode.GET_BROKER_CLUSTER_INFO, {}), "unknown_user")
    ok = await call(controller, APP, RequestCode.GET_BROKER_CLUSTER_INFO, {})
    assert ok.code == ResponseCode.SUCCESS
    # Logged once per source per minute, not once per refusal.
    broker_log = next(b for b in secured.group if b.address == master).log()
    assert 1 <= broker_log.count('"request refused"') <= 2, broker_log[-3000:]


async def test_a_rule_change_reaches_the_broker(secured: Secured) -> None:
    """The broker follows the controllers: a new allow, then a deny, within seconds."""
    master = await grant_app(secured)

    async def send_to_b() -> int:
        resp = await call(master, APP, RequestCode.SEND_MESSAGE, {"topic": "B"}, b"now")
        return resp.code

    assert await send_to_b() == ResponseCode.NO_PERMISSION
    secured.ctl(ROOT, "createAcl", "-s", "app", "-r", "Topic:B", "-A", "pub")
    try:
        await wait_until_async(
            lambda: _is(send_to_b, ResponseCode.SUCCESS), "pub on B to reach the broker", 15
        )
        secured.ctl(ROOT, "updateAcl", "-s", "app", "-r", "Topic:B", "-A", "pub", "-d", "deny")
        await wait_until_async(
            lambda: _is(send_to_b, ResponseCode.NO_PERMISSION), "the deny to reach the broker", 15
        )
    finally:
        secured.ctl(ROOT, "deleteAcl", "-s", "app", "-r", "Topic:B")


async def _is(probe: Any, code: int) -> bool:
    return bool(await probe() == code)


def test_rmqctl_takes_a_credentials_file(secured: Secured, tmp_path: Path) -> None:
    path = tmp_path / "creds.toml"
    path.write_text(f'access_key = "{ROOT.access_key}"\nsecret_key = "{ROOT.secret_key}"\n')
    path.chmod(0o644)
    done = rmqctl("-a", secured.addresses, "--credentials-file", str(path), "listUser")
    assert done.returncode == 1 and "chmod 600" in done.stderr
    path.chmod(0o600)
    done = rmqctl("-a", secured.addresses, "--json", "--credentials-file", str(path), "listUser")
    assert done.returncode == 0, done.stderr
    assert "root" in [u["username"] for u in json.loads(done.stdout)["users"]]
    flags = ["--access-key", APP.access_key, "--secret-key", APP.secret_key]
    done = rmqctl("-a", secured.addresses, *flags, "clusterList")
    assert done.returncode == 0, done.stderr
    assert sys.executable  # the subprocesses ran with this interpreter
