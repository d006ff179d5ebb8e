"""TLS on every port with a test CA (made here with the openssl CLI), mutual TLS inside the cluster
and authentication on, against real processes: three controllers and a broker group of three.
rmqctl creates the first user over TLS; a producer sends over TLS while the master is killed -9,
and everything it had acknowledged is read back over TLS from the new master. A normal user's
TLS connection authenticates once (a session) and its rules still hold for every request: pub on
the topic sends, another topic and a pull are refused; its AUTHENTICATE sent on another
connection is refused and counted. A plaintext client, a client whose CA did not sign the
servers' certificates, a client without a certificate on the HA port, and one asking the
controllers for a cluster-internal request without a client certificate are refused. A
controller reloads its certificate on SIGHUP and refuses to start with a world-readable key.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import ssl
import subprocess
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import msgpack
import pytest

from client import Consumer, Credentials, Producer
from client.bootstrap import Bootstrap
from client.errors import ClientError
from daemon.auth_key import load_auth_key
from protocol.acl import make_rule
from protocol.codes import ControllerCode, RequestCode, ResponseCode
from protocol.remoting import Header
from protocol.request_auth import (
    CHANNEL_BINDING,
    RequestSigner,
    channel_binding_field,
    cluster_credentials,
)
from remoting.client import ConnectionPool, RemotingClient, signer_for, wall_ms
from remoting.errors import ConnectError, ConnectionClosedError, RemotingError
from remoting.tls import NO_CLIENT_CERT, client_context
from tests.cluster.support import full_sync_state_set, new_master, receive_acked, send_acked
from tests.support.cluster import BrokerNode, Cluster, ControllerNode
from tests.support.metrics import by_reason, metrics_port, scrape
from tests.support.procs import free_port, port_open, rmqctl
from tests.support.tls import make_ca
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.multiprocess

ROOT = Credentials("root", "root-Secret-4242")
TOPIC = "TlsTopic"


def secured_cluster(tmp: Path) -> tuple[Cluster, Path, Path, Any]:
    """The cluster (not started), its auth key, CA, and (the CA, the daemons' settings)."""
    pki = make_ca(tmp / "pki")
    cert, key = pki.issue("node")
    auth_key = tmp / "auth.key"
    auth_key.write_bytes(os.urandom(32).hex().encode())
    auth_key.chmod(0o600)
    settings = (
        f'auth_key_file = "{auth_key}"\nauth_enabled = true\n'
        f'tls_enabled = true\ntls_cert = "{cert}"\ntls_key = "{key}"\n'
        f'tls_ca_file = "{pki.ca}"\ntls_verify_client = true\n'
    )
    (tmp / "controller.toml").write_text(settings)
    cluster = Cluster(tmp)
    for c in cluster.controllers:
        c.argv += ["--config", str(tmp / "controller.toml")]
    return cluster, auth_key, pki.ca, (pki, settings)


async def test_tls_everywhere_failover_loses_nothing_and_outsiders_are_refused(
    tmp_path: Path,
) -> None:
    cluster, auth_key, ca, (pki, settings) = secured_cluster(tmp_path)
    cert, key = pki.dir / "node.crt", pki.dir / "node.key"
    tls = client_context(ca)
    try:
        cluster.start_controllers()
        done = rmqctl(
            "-a", cluster.controller_addresses, "--ca-file", str(ca),
            "--auth-key-file", str(auth_key), "--cert", str(cert), "--key", str(key),
            "createUser", "-u", ROOT.access_key, "-p", ROOT.secret_key, "-t", "Super",
        )  # fmt: skip
        assert done.returncode == 0, done.stderr + cluster.logs()
        # Without --tls, rmqctl cannot talk to a TLS controller: one line, exit 1.
        plain = rmqctl("-a", cluster.controller_addresses, "--auth-key-file", str(auth_key),
                       "listUser")  # fmt: skip
        assert plain.returncode == 1 and plain.stderr.count("\n") == 1, plain.stderr

        cluster.add_group(
            "broker-a",
            3,
            config=settings + "auth_refresh_interval_ms = 1000\n",
            per_broker=[["--metrics-port", str(free_port())] for _ in range(3)],
        )
        boot = Bootstrap(cluster.controller_addresses, ConnectionPool(2.0, ROOT, tls), 2.0)
        try:
            await run_failover(cluster, boot, tls)
            await a_session_keeps_its_users_rules(cluster, boot, tls)
            await outsiders_are_refused(cluster, boot, pki, tls)
        finally:
            boot.close()
    finally:
        cluster.stop()


async def run_failover(cluster: Cluster, boot: Bootstrap, tls: ssl.SSLContext) -> None:
    doc = await full_sync_state_set(boot, cluster)
    first_master, first_epoch = doc["masterAddress"], doc["masterEpoch"]
    await create_topic_tls(boot, first_master, tls)
    acked: dict[tuple[str, int, int], bytes] = {}
    async with Producer(
        cluster.controller_addresses,
        retries=6,
        send_timeout=5.0,
        send_deadline=30.0,
        credentials=ROOT,
        tls=tls,
    ) as producer:

        def send_range(lo: int, hi: int) -> Awaitable[None]:
            return send_acked(producer, TOPIC, range(lo, hi), acked)

        senders = asyncio.gather(*(send_range(w * 150, w * 150 + 150) for w in range(4)))
        await wait_until_async(lambda: len(acked) >= 100, "100 acknowledged sends", 30)
        master = next(b for b in cluster.brokers if b.address == first_master)
        master.kill9()
        await senders
        doc = await new_master(boot, cluster, first_master)
        assert doc["masterEpoch"] > first_epoch
        await asyncio.gather(*(send_range(1000 + w * 50, 1000 + w * 50 + 50) for w in range(4)))
    assert len(acked) > 400

    async with Consumer(
        cluster.controller_addresses, "tls-checker", TOPIC, credentials=ROOT, tls=tls
    ) as consumer:
        received = await receive_acked(consumer, acked)
    missing = [k for k in acked if received.get(k) != acked[k]]
    assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {missing[:5]}"


async def create_topic_tls(boot: Bootstrap, master: str, tls: ssl.SSLContext) -> None:
    conn = await RemotingClient.connect(master, signer=signer_for(ROOT), tls=tls)
    try:
        await conn.call(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": TOPIC, "queues": 4})
    finally:
        conn.close()

    async def routed() -> bool:
        try:
            await boot.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC}, timeout=2.0)
            return True
        except (ClientError, RemotingError):
            return False

    await wait_until_async(routed, f"topic {TOPIC} routed", 20, interval=0.1)


async def a_session_keeps_its_users_rules(
    cluster: Cluster, boot: Bootstrap, tls: ssl.SSLContext
) -> None:
    app = Credentials("app", "app-Secret-4242")
    body = msgpack.packb({"secret": app.secret_key})
    await boot.call(ControllerCode.AUTH_CREATE_USER, {"username": app.access_key}, body)
    rules = {"rules": [make_rule(f"Topic:{TOPIC}", ["pub"], "allow").to_doc()]}
    await boot.call(ControllerCode.AUTH_CREATE_ACL, {"username": "app"}, msgpack.packb(rules))
    master = (await full_sync_state_set(boot, cluster, size=2))["masterAddress"]

    async def app_session() -> RemotingClient | None:
        """A connection the master authenticated as app (its user cache follows the
        controllers within a refresh)."""
        conn = await RemotingClient.connect(master, signer=signer_for(app), tls=tls)
        if conn.session:
            return conn
        conn.close()
        return None

    conn: RemotingClient = await wait_until_async(app_session, "a session as user app", 20)
    try:
        header: Header = {"topic": TOPIC, "queueId": 0, "bornTimestamp": int(time.time() * 1000)}

        async def sent_in_session() -> bool:
            """The master's table may hold app and not yet its rule: fetched between the two
            writes, it is fetched again once a heartbeat answer names the new digest."""
            sent = await conn.request(RequestCode.SEND_MESSAGE, header, b"from a session")
            assert sent.code in (ResponseCode.SUCCESS, ResponseCode.NO_PERMISSION), sent
            return sent.code == ResponseCode.SUCCESS

        await wait_until_async(sent_in_session, "app's rule on the master", 20)
        other = await conn.request(RequestCode.SEND_MESSAGE, {**header, "topic": "Other"}, b"x")
        assert other.code == ResponseCode.NO_PERMISSION
        assert str(other.header["remark"]).startswith("denied: no rule of app allows pub")
        pull: Header = {"consumerGroup": "g", "topic": TOPIC, "queueId": 0, "queueOffset": 0,
                "maxMsgNums": 1}  # fmt: skip
        pulled = await conn.request(RequestCode.PULL_MESSAGE, pull)
        assert pulled.code == ResponseCode.NO_PERMISSION
        assert str(pulled.header["remark"]).startswith("denied:")
        assert conn.session  # all of it unsigned, in the session
        # app's AUTHENTICATE naming this connection, sent on another: refused 'session', counted
        # by the master, which goes on serving both connections.
        node = next(b for b in cluster.brokers if b.address == master)
        before = session_refusals(node)
        stolen = RequestSigner(app, "stolen").sign(
            RequestCode.AUTHENTICATE, 0, {CHANNEL_BINDING: binding_of(conn)}, None, wall_ms()
        )
        other_conn = await RemotingClient.connect(master, tls=tls)
        try:
            resp = await other_conn.request(RequestCode.AUTHENTICATE, stolen)
            assert resp.code == ResponseCode.NO_PERMISSION
            assert str(resp.header["remark"]).startswith(f"session: {CHANNEL_BINDING} does not")
            resp = await other_conn.request(RequestCode.SEND_MESSAGE, header, b"x")
            assert str(resp.header["remark"]).startswith("unsigned:")
        finally:
            other_conn.close()
        assert session_refusals(node) == before + 1
        sent = await conn.request(RequestCode.SEND_MESSAGE, header, b"still in its session")
        assert sent.code == ResponseCode.SUCCESS, sent.header
    finally:
        conn.close()


def binding_of(conn: RemotingClient) -> str:
    """The ChannelBinding naming ``conn``'s TLS connection."""
    binding = conn.tls_unique
    assert binding is not None
    return channel_binding_field(binding)


def session_refusals(node: BrokerNode) -> float:
    """rmq_broker_auth_refused_total{reason="session"} from ``node``'s /metrics."""
    text = scrape(metrics_port(node))
    return by_reason(text, "rmq_broker_auth_refused_total").get("session", 0.0)


async def outsiders_are_refused(
    cluster: Cluster, boot: Bootstrap, pki: Any, tls: ssl.SSLContext
) -> None:
    doc = await full_sync_state_set(boot, cluster, size=2)
    master = doc["masterAddress"]
    node = next(b for b in cluster.brokers if b.address == master)
    controller = cluster.controllers[0].address

    # Plaintext on the client port and on a controller's port: no answer, the connection goes.
    for address in (master, controller):
        conn = await RemotingClient.connect(address, signer=signer_for(ROOT))
        try:
            with pytest.raises((ConnectionClosedError, RemotingError)):
                await conn.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC}, timeout=5)
        finally:
            conn.close()

    # A client whose CA did not sign the servers' certificates refuses them.
    stranger = make_ca(cluster.tmp / "stranger", "stranger-ca")
    with pytest.raises(ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        await RemotingClient.connect(master, tls=client_context(stranger.ca))

    # The HA port without a client certificate of the cluster's CA: not a byte of the stream.
    for context in (client_context(pki.ca), client_context(pki.ca, *stranger.issue("intruder"))):
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection("127.0.0.1", node.ha_port, ssl=context), 5
            )
        except (ssl.SSLError, ConnectionError):
            continue
        try:
            writer.write(b"\x00" * 64)
            got = await asyncio.wait_for(reader.read(), 10)
        except (ssl.SSLError, ConnectionError):
            got = b""
        finally:
            writer.close()
        assert got == b""

    # A controller's cluster-internal requests need a client certificate, even signed with the
    # cluster's own credentials; the same request over a member's certificate is served.
    cluster_signer = signer_for(cluster_credentials(load_auth_key(cluster.tmp / "auth.key")))
    header = {"clusterName": "DefaultCluster", "brokerName": "broker-a"}
    no_cert = await RemotingClient.connect(controller, signer=cluster_signer, tls=tls)
    try:
        resp = await no_cert.request(RequestCode.CONTROLLER_GET_NEXT_BROKER_ID, header)
        assert (resp.code, resp.header.get("remark")) == (
            ResponseCode.NO_PERMISSION,
            NO_CLIENT_CERT,
        )
    finally:
        no_cert.close()
    # A user's request without a certificate is served (clients need none).
    user = await RemotingClient.connect(controller, signer=signer_for(ROOT), tls=tls)
    try:
        resp = await user.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC})
        assert resp.code == ResponseCode.SUCCESS, resp.header
    finally:
        user.close()
    member = client_context(pki.ca, *pki.issue("member"))
    with_cert = await RemotingClient.connect(controller, signer=cluster_signer, tls=member)
    try:
        resp = await with_cert.request(RequestCode.CONTROLLER_GET_NEXT_BROKER_ID, header)
        assert resp.header.get("remark") != NO_CLIENT_CERT
    finally:
        with_cert.close()


async def peer_name(address: str, context: ssl.SSLContext) -> str:
    """The common name of the certificate the server at ``address`` presents."""
    host, _, port = address.rpartition(":")
    _, writer = await asyncio.open_connection(host, int(port), ssl=context)
    try:
        cert = writer.get_extra_info("peercert")
        return str(dict(x[0] for x in cert["subject"])["commonName"])
    finally:
        writer.close()


async def test_sighup_reloads_the_certificate_and_a_world_readable_key_stops_the_start(
    tmp_path: Path,
) -> None:
    """A controller process: SIGHUP makes new connections get the new certificate (the
    process serving on); a bad reload keeps the old one; started with a key others may read,
    it refuses with one line and exit status 2."""
    pki = make_ca(tmp_path / "pki")
    cert, key = tmp_path / "ctl.crt", tmp_path / "ctl.key"
    for src, dst in zip(pki.issue("first"), (cert, key), strict=True):
        shutil.copy(src, dst)
    key.chmod(0o600)
    config = tmp_path / "tls.toml"
    config.write_text(
        f'tls_enabled = true\ntls_cert = "{cert}"\ntls_key = "{key}"\ntls_ca_file = "{pki.ca}"\n'
    )
    port = free_port()
    node = ControllerNode(tmp_path, "n0", port, f"n0-127.0.0.1:{port}")
    node.argv += ["--config", str(config)]
    trust = client_context(pki.ca)
    node.start()
    try:
        await wait_until_async(lambda: port_open(port), "the controller to listen", 30)
        assert await peer_name(node.address, trust) == "first"
        for src, dst in zip(pki.issue("second"), (cert, key), strict=True):
            shutil.copy(src, dst)
        node.signal(signal.SIGHUP)

        async def reloaded() -> bool:
            return await peer_name(node.address, trust) == "second"

        await wait_until_async(reloaded, "the new certificate served", 20, on_timeout=node.log)
        # A key of another certificate: the reload fails, the old pair stays, the process too.
        shutil.copy(pki.issue("third")[1], key)
        node.signal(signal.SIGHUP)
        await wait_until_async(
            lambda: "TLS reload failed" in node.log(), "the failed reload logged", 20
        )
        assert node.alive() and await peer_name(node.address, trust) == "second"
    finally:
        node.stop()

    shutil.copy(pki.issue("fourth")[1], key)
    shutil.copy(pki.dir / "fourth.crt", cert)
    key.chmod(0o644)
    done = subprocess.run(node.argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"rmq-controller: config key 'tls_key': TLS key {key} may be read by anyone (mode 644); "
        "chmod 600 (or 640) it"
    ]
