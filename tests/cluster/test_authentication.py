"""Authenticated clients on the remoting protocol (issue 14, item 2), against real processes:
three controllers and a broker group of two with ``auth_enabled``, the cluster's own traffic
(Raft, registration, heartbeats, the slave's requests to its master) signed with the cluster's
credentials.

Admin commands need a super user; a user with pub on topic A cannot send to B nor consume A; a
replayed request, a wrong secret, a bad signature, an expired timestamp and an unknown user are
refused NO_PERMISSION with the reason, and a refused send stores nothing.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import msgpack
import pytest

from client import Consumer, Credentials, Producer
from client.errors import BrokerError
from protocol import ha_auth
from protocol.acl import make_rule
from protocol.codes import ControllerCode, RequestCode, ResponseCode
from protocol.ha import SlaveHandshake, encode_slave_handshake
from protocol.remoting import Frame, Header, Scalar
from protocol.request_auth import NONCE, RequestSigner
from protocol.request_permissions import SUPER_ONLY_CONTROLLER_CODES
from remoting.client import RemotingClient, signer_for, wall_ms
from remoting.errors import ResponseError
from tests.cluster.secured import ROOT, WINDOW_MS, admin_call, create_root, secured_cluster
from tests.support.cli import rmqctl_run as rmqctl
from tests.support.cluster import BrokerNode, Cluster
from tests.support.wait import wait_until, wait_until_async

pytestmark = pytest.mark.multiprocess

APP = Credentials("app", "app-Secret-4242")
READER = Credentials("reader", "reader-Secret-42")


class Secured:
    def __init__(self, cluster: Cluster, key: Path, group: list[BrokerNode]) -> None:
        self.cluster = cluster
        self.key = key
        self.group = group
        self.addresses = cluster.controller_addresses

    async def admin(
        self, code: int, header: Mapping[str, Scalar], doc: dict[str, Any] | None = None
    ) -> Frame:
        return await admin_call(self.addresses, code, header, doc)

    async def sync_state(self) -> dict[str, Any]:
        header = {"brokerName": "broker-a"}
        resp = await self.admin(RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, header)
        doc: dict[str, Any] = msgpack.unpackb(resp.body or b"", raw=False)
        return doc

    async def master(self) -> str:
        return str((await self.sync_state())["masterAddress"])

    async def create_user(self, creds: Credentials, *rules: tuple[str, str]) -> None:
        """The user with allow rules (resource, comma-separated actions)."""
        await self.admin(ControllerCode.AUTH_CREATE_USER, {"username": creds.access_key},
                         {"secret": creds.secret_key})  # fmt: skip
        docs = [make_rule(r, a.split(","), "allow").to_doc() for r, a in rules]
        await self.admin(ControllerCode.AUTH_CREATE_ACL, {"username": creds.access_key},
                         {"rules": docs})  # fmt: skip

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
    cluster, key, settings = secured_cluster(tmp_path_factory.mktemp("auth"))
    try:
        cluster.start_controllers()
        create_root(cluster, key)
        group = cluster.add_group(
            "broker-a", replicas=2, config=settings + "auth_refresh_interval_ms = 1000\n"
        )
        secured = Secured(cluster, key, group)

        # The cluster's own signed traffic works: both replicas registered, heartbeating, and
        # the slave replicating (in the SyncStateSet).
        def in_sync() -> bool:
            try:
                state = asyncio.run(secured.sync_state())
            except ResponseError:
                return False
            return state["masterAddress"] is not None and len(state["syncStateSet"]) == 2

        wait_until(in_sync, "both replicas in the SyncStateSet", 60, on_timeout=cluster.logs)

        async def users_and_topics() -> None:
            await secured.create_user(APP, ("Topic:A", "pub"))
            await secured.create_user(READER, ("Topic:A", "sub"), ("Group:g*", "sub"))
            for topic in ("A", "B"):
                header = {"topic": topic, "queues": 1, "brokerName": "broker-a"}
                await secured.admin(RequestCode.UPDATE_AND_CREATE_TOPIC, header)

        asyncio.run(users_and_topics())
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
    """The master, once it knows user app (pub on Topic:A only; its cache follows the
    controllers within a heartbeat or a refresh)."""
    master = await secured.master()

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

    # With the super user's credentials they pass the guard and do their work: through rmqctl
    # (credentials from the environment) ...
    assert secured.ctl(ROOT, "createUser", "-u", "temp", "-p", "temp-Secret-1")["version"] == 1
    assert secured.ctl(ROOT, "listAcl", "-s", "temp")["acls"] == []
    # ... and as plain signed requests.
    user = {"username": "temp"}
    rule = {"rules": [make_rule("Topic:x", ["sub"], "allow").to_doc()]}
    await secured.admin(ControllerCode.AUTH_UPDATE_USER, {**user, "userType": "super"})
    await secured.admin(ControllerCode.AUTH_CREATE_ACL, user, rule)
    rule["rules"][0]["actions"] = ["pub"]
    await secured.admin(ControllerCode.AUTH_UPDATE_ACL, user, rule)

    async def listed_pub() -> bool:  # a follower answers from its state: soon current
        listed = await secured.admin(ControllerCode.AUTH_LIST_ACL, user)
        return bool(
            msgpack.unpackb(listed.body or b"")["acls"][0]["rules"][0]["actions"] == ["pub"]
        )

    await wait_until_async(listed_pub, "the updated rule listed", 10)
    await secured.admin(ControllerCode.AUTH_DELETE_ACL, user, {})
    await secured.admin(ControllerCode.AUTH_LIST_USER, {})
    await secured.admin(ControllerCode.AUTH_DELETE_USER, user)
    master_id = (await secured.sync_state())["masterBrokerId"]
    elected = secured.ctl(ROOT, "electMaster", "-b", "broker-a", "-i", str(master_id), ok=False)
    # Its own answer (the master is already that broker), not a refusal.
    assert "denied" not in elected.stderr and "unsigned" not in elected.stderr, elected.stderr
    assert (await secured.sync_state())["masterBrokerId"] == master_id
    with pytest.raises(ResponseError) as info:  # nothing to clean: its own refusal
        await secured.admin(RequestCode.CLEAN_BROKER_DATA, {"brokerName": "nowhere"})
    assert info.value.code != ResponseCode.NO_PERMISSION
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
    pull: Header = {
        "consumerGroup": "g",
        "topic": "A",
        "queueId": 0,
        "queueOffset": 0,
        "maxMsgNums": 1,
    }
    assert "sub on Topic:A" in refused(
        await call(master, APP, RequestCode.PULL_MESSAGE, pull), "denied"
    )
    # A reader with sub on the topic and its group consumes what app sent, through the SDK,
    # queue-bound and in POP mode (its inner SimpleConsumer signs too).
    for group, pop in (("g", False), ("g-pop", True)):
        consumer = Consumer(
            secured.addresses, group, "A", credentials=READER, request_timeout=2.0, pop=pop
        )
        async with consumer:

            async def allowed_body(c: Consumer = consumer) -> bool:
                return any(m.body == b"allowed" for m in await c.receive(timeout=1.0))

            await wait_until_async(allowed_body, f"the reader to consume A (pop={pop})", 30)


async def test_a_consumer_whose_user_may_not_use_its_group_is_told_so(secured: Secured) -> None:
    """reader has sub on Topic:A and Group:g* only: a queue-bound consumer of group "other"
    fails to start with the broker's NO_PERMISSION refusal of its heartbeat, and rmqctl
    consumeMessage prints it on one line, exit 1, queue-bound as with --pop (instead of
    waiting out --timeout and saying "0 of 1 received", exit 0)."""
    master = await secured.master()

    async def reader_known() -> bool:
        resp = await call(master, READER, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "A"})
        return resp.code == ResponseCode.SUCCESS

    await wait_until_async(reader_known, "the broker to know user reader", 20)
    denied = "denied: no rule of reader allows sub on Group:other"
    consumer = Consumer(secured.addresses, "other", "A", credentials=READER, request_timeout=2.0)
    with pytest.raises(BrokerError) as info:
        await consumer.start()
    assert info.value.code == ResponseCode.NO_PERMISSION, info.value
    assert denied in str(info.value), info.value
    await consumer.close()
    for pop in ([], ["--pop"]):
        args = ["consumeMessage", "-t", "A", "-g", "other", "--count", "1", "--timeout", "20"]
        done = await asyncio.to_thread(secured.ctl, READER, *args, *pop, ok=False)
        assert done.returncode == 1, (pop, done.stdout, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("rmqctl: NO_PERMISSION (16)"), lines
        assert denied in lines[0], lines


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
    send: Header = {"topic": "A", "queueId": 0}
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
    # A daemon's log lines are written by a thread of their own (daemon/logs.py): the refusal's
    # answer can reach us before its line reaches the file, so wait for the line.
    node = next(b for b in secured.group if b.address == master)

    async def logged() -> bool:
        return '"request refused"' in node.log()

    await wait_until_async(logged, "the refusal logged", 10)
    broker_log = node.log()
    assert 1 <= broker_log.count('"request refused"') <= 2, broker_log[-3000:]


async def test_a_rule_change_reaches_the_broker(secured: Secured) -> None:
    """The broker follows the controllers: a new allow, then a deny, within seconds."""
    master = await grant_app(secured)

    async def send_to_b() -> int:
        resp = await call(master, APP, RequestCode.SEND_MESSAGE, {"topic": "B"}, b"now")
        return resp.code

    assert await send_to_b() == ResponseCode.NO_PERMISSION
    app = {"username": APP.access_key}
    rule = {"rules": [make_rule("Topic:B", ["pub"], "allow").to_doc()]}
    await secured.admin(ControllerCode.AUTH_CREATE_ACL, app, rule)
    try:
        await wait_until_async(
            lambda: _is(send_to_b, ResponseCode.SUCCESS), "pub on B to reach the broker", 15
        )
        rule["rules"][0]["decision"] = "deny"
        await secured.admin(ControllerCode.AUTH_UPDATE_ACL, app, rule)
        await wait_until_async(
            lambda: _is(send_to_b, ResponseCode.NO_PERMISSION), "the deny to reach the broker", 15
        )
    finally:
        await secured.admin(ControllerCode.AUTH_DELETE_ACL, app, {"resources": ["Topic:B"]})


async def test_a_refusal_by_a_rules_source_range_names_the_address_seen(
    secured: Secured,
) -> None:
    """pub on A from 10.0.0.0/8 only, and the client on 127.0.0.1: rmqctl prints the broker's
    remark, which names the address the broker saw and the ranges the rule allows."""
    ranged = Credentials("ranged", "ranged-Secret-42")
    rule = make_rule("Topic:A", ["pub"], "allow", ["10.0.0.0/8"])
    await secured.admin(ControllerCode.AUTH_CREATE_USER, {"username": ranged.access_key},
                        {"secret": ranged.secret_key})  # fmt: skip
    await secured.admin(ControllerCode.AUTH_CREATE_ACL, {"username": ranged.access_key},
                        {"rules": [rule.to_doc()]})  # fmt: skip
    master = await secured.master()

    async def known() -> bool:  # refused for its rule, no longer as an unknown user
        resp = await call(master, ranged, RequestCode.SEND_MESSAGE, {"topic": "A"}, b"x")
        return str(resp.header.get("remark")).startswith("denied:")

    await wait_until_async(known, "the broker to know user ranged", 20)
    done = await asyncio.to_thread(
        secured.ctl, ranged, "sendMessage", "-t", "A", "-p", "from loopback", ok=False
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert (
        "denied: no rule of ranged allows pub on Topic:A from 127.0.0.1 (rule Topic:A allows it "
        "from 10.0.0.0/8 only); any one of pub, sub, get would do\n"
    ) in done.stderr, done.stderr


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


def test_the_spark_source_and_sink_options_sign(secured: Secured) -> None:
    """The pipeline's requests (here the snapshot of a topic's route and queue bounds every read
    and write starts with) carry the accessKey/secretKey options' signature."""
    from pipeline.errors import OptionError, PipelineError
    from pipeline.options import ReadOptions, WriteOptions
    from pipeline.snapshot import snapshot

    options = {
        "controllers": secured.addresses,
        "topic": "A",
        "accessKey": READER.access_key,
        "secretKey": READER.secret_key,
    }
    read = ReadOptions.parse(options)
    assert read.credentials == READER
    assert WriteOptions.parse(options).credentials == READER

    def bounds() -> bool:
        snap = snapshot(read.controllers, "A", 5.0, read.credentials)
        return not snap.missing and bool(snap.bounds)

    wait_until(bounds, "the reader's signed snapshot of A", 20)
    with pytest.raises(PipelineError, match="unsigned"):
        snapshot(read.controllers, "A", 5.0)
    with pytest.raises(OptionError, match="go together"):
        ReadOptions.parse({"controllers": secured.addresses, "topic": "A", "accessKey": "x"})


async def test_a_forged_raft_vote_from_a_member_id_changes_nothing(secured: Secured) -> None:
    """Without the cluster's credentials a process cannot speak for a controller: a vote
    request naming another member as the candidate, with a huge term and a leadership transfer
    flag, unsigned or signed by a user, is refused before Raft sees it."""
    before = msgpack.unpackb(
        (await secured.admin(RequestCode.CONTROLLER_GET_METADATA_INFO, {})).body or b""
    )
    term, leader = int(before["term"]), before["leaderId"]
    nodes = {c.node_id: c.address for c in secured.cluster.controllers}
    for dst, address in nodes.items():
        src = next(n for n in nodes if n != dst)
        # VoteRequest [0, src, dst, term, last_log_index, last_log_term, pre_vote, transfer]
        vote = msgpack.packb([0, src, dst, term + 1000, 1 << 40, term + 999, False, True])
        for creds in (None, APP):
            conn = await RemotingClient.connect(address, signer=signer_for(creds))
            try:
                conn.send_oneway(ControllerCode.RAFT_MESSAGE, None, vote)
                # Answered after the vote was refused (frames are dispatched in order).
                ok = await conn.request(RequestCode.GET_BROKER_CLUSTER_INFO, None, None, 5.0)
                expected = ResponseCode.NO_PERMISSION if creds is None else ResponseCode.SUCCESS
                assert ok.code == expected, ok.header
            finally:
                conn.close()
    deadline = asyncio.get_running_loop().time() + 1.5  # several election timeouts
    while asyncio.get_running_loop().time() < deadline:
        for address in nodes.values():
            conn = await RemotingClient.connect(address, signer=signer_for(ROOT))
            try:
                resp = await conn.request(RequestCode.CONTROLLER_GET_METADATA_INFO, None, None)
            finally:
                conn.close()
            doc = msgpack.unpackb(resp.body or b"")
            assert int(doc["term"]) < term + 1000, doc
            assert doc["leaderId"] in (leader, None), doc
        await asyncio.sleep(0.1)


def test_a_slave_without_the_cluster_key_gets_nothing_from_the_ha_port(secured: Secured) -> None:
    """The master opens with a challenge; a handshake sent instead of the answer, or an answer
    computed with another key, closes the connection: no handshake reply, no CommitLog byte."""
    master = asyncio.run(secured.master())
    node = next(b for b in secured.group if b.address == master)
    slave_id = next(b for b in secured.group if b.address != master)
    handshake = encode_slave_handshake(SlaveHandshake(broker_id=2, address=slave_id.address))
    # Hex text, as a key file holds: raw random bytes may begin or end with whitespace, which a
    # key's reader strips (then 31 bytes, refused: 'at least 32 bytes, not 31').
    other_key = ha_auth.ha_key(os.urandom(32).hex().encode())
    for first in ("handshake", "wrong key"):
        with socket.create_connection(("127.0.0.1", node.ha_port), timeout=5) as sock:
            challenge = b""
            while len(challenge) < ha_auth.CHALLENGE_BYTES:
                chunk = sock.recv(ha_auth.CHALLENGE_BYTES - len(challenge))
                assert chunk, "closed before the challenge"
                challenge += chunk
            master_nonce = ha_auth.parse_challenge(challenge)
            if first == "handshake":
                sock.sendall(handshake + bytes(ha_auth.ANSWER_BYTES))
            else:
                sock.sendall(ha_auth.answer(other_key, master_nonce, os.urandom(16)) + handshake)
            received = b""
            sock.settimeout(10)
            while True:  # until the master closes it
                try:
                    chunk = sock.recv(65536)
                except ConnectionResetError:
                    break
                if not chunk:
                    break
                received += chunk
            assert received == b"", f"{first}: the master sent {len(received)} bytes"
    # The refusal is logged (by the log's own thread, so maybe after the close reached us).
    wait_until(
        lambda: '"unauthenticated"' in node.log(),
        "the HA refusal logged",
        10,
        on_timeout=lambda: node.log()[-3000:],
    )


def test_rmq_pipeline_signs_its_precheck(secured: Secured) -> None:
    """``rmq-pipeline`` with $RMQ_ACCESS_KEY/$RMQ_SECRET_KEY (or the flags) signs its pre-check:
    signed, the unknown topic is what stops it; unsigned, the refusal. No Spark starts."""
    pytest.importorskip("pyspark", reason="the spark extra is not installed")
    from click.testing import CliRunner

    from pipeline.cli import cli

    job = ["traffic", "-a", secured.addresses, "-t", "NoSuchTopic"]
    runner = CliRunner(env=dict.fromkeys(("RMQ_ACCESS_KEY", "RMQ_SECRET_KEY")))
    keys = {"RMQ_ACCESS_KEY": ROOT.access_key, "RMQ_SECRET_KEY": ROOT.secret_key}
    for args, env in (
        (job, keys),
        (["--access-key", ROOT.access_key, "--secret-key", ROOT.secret_key, *job], {}),
    ):
        done = runner.invoke(cli, args, env=env)
        assert done.exit_code == 1, done.output
        assert done.output.startswith("rmq-pipeline: topic 'NoSuchTopic' does not exist"), (
            done.output
        )
    done = runner.invoke(cli, job)
    assert done.exit_code == 1 and "unsigned" in done.output, done.output
