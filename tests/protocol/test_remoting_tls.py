"""TLS on the remoting ports (remoting/tls.py), in-process over real sockets with a test CA made
by the openssl CLI: the config checks a daemon makes at start (a world-readable key, a key that
does not match its certificate, mTLS without a CA), clients that do not trust the CA or speak
plaintext, the client-certificate gate of a shared port, the internal (HA) listener's mTLS, and
a SIGHUP reload: new connections get the new certificate, open ones go on."""

from __future__ import annotations

import asyncio
import shutil
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import cast

import pytest
import structlog

from broker.config import BrokerConfig
from daemon.config import ConfigError
from protocol.codes import ControllerCode, RequestCode, ResponseCode
from protocol.remoting import Frame, request, response
from protocol.request_auth import cluster_credentials
from remoting.client import RemotingClient, signer_for
from remoting.errors import ConnectError, ConnectionClosedError, RemotingError
from remoting.server import Connection, RemotingServer
from remoting.tls import (
    NO_CLIENT_CERT,
    ClientCertGate,
    DaemonTls,
    TlsError,
    TlsFiles,
    check_key_file,
    client_context,
    files_from_config,
)
from tests.support.tls import Pki, make_ca, peer_name


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_ca(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def node(pki: Pki) -> tuple[Path, Path]:
    return pki.issue("node-a")


def ok(conn: Connection, req: Frame) -> Frame:
    return response(req, ResponseCode.SUCCESS)


class Served:
    def __init__(self, tls: DaemonTls, gate: bool = False) -> None:
        self.tls = tls
        self.server = RemotingServer(name="test")
        for code in (RequestCode.GET_ROUTEINFO_BY_TOPIC, RequestCode.CONTROLLER_REGISTER_BROKER):
            self.server.register(code, ok)
        if gate:
            self.server.guard = ClientCertGate(None, [RequestCode.CONTROLLER_REGISTER_BROKER])
        self.port = 0
        self.address = ""

    async def start(self) -> None:
        self.port = await self.server.start("127.0.0.1", 0, self.tls.shared_listener)
        self.address = f"127.0.0.1:{self.port}"


@pytest.fixture
async def served(pki: Pki, node: tuple[Path, Path]) -> AsyncIterator[Served]:
    s = Served(DaemonTls(TlsFiles(cert=node[0], key=node[1], ca_file=pki.ca)))
    await s.start()
    yield s
    await s.server.stop()


# --- checks at start ---------------------------------------------------------------------------


def test_a_world_readable_key_is_refused_with_the_file_and_its_mode(tmp_path: Path) -> None:
    key = tmp_path / "k.pem"
    key.write_text("x")
    key.chmod(0o644)
    with pytest.raises(TlsError, match=r"k.pem may be read by anyone \(mode 644\); chmod 600"):
        check_key_file(key, "TLS key")
    key.chmod(0o640)  # a group (ssl-cert) may read it
    check_key_file(key, "TLS key")


def test_config_checks_name_the_key_at_fault(pki: Pki, node: tuple[Path, Path]) -> None:
    cert, key = node
    with pytest.raises(TlsError, match=r"^config key 'tls_enabled' needs tls_cert and tls_key$"):
        files_from_config(enabled=True, cert=cert, key=None, ca_file=None, verify_client=False)
    with pytest.raises(TlsError, match=r"^config key 'tls_verify_client' needs tls_ca_file$"):
        files_from_config(enabled=True, cert=cert, key=key, ca_file=None, verify_client=True)
    _, other_key = pki.issue("other")
    with pytest.raises(TlsError, match=r"^config key 'tls_cert': certificate .* with key"):
        files_from_config(
            enabled=True, cert=cert, key=other_key, ca_file=pki.ca, verify_client=True
        )
    with pytest.raises(TlsError, match=r"cannot read CA file .*missing.pem"):
        files_from_config(
            enabled=True,
            cert=cert,
            key=key,
            ca_file=pki.dir / "missing.pem",
            verify_client=True,
        )
    assert (
        files_from_config(enabled=False, cert=None, key=None, ca_file=None, verify_client=False)
        is None
    )


def test_a_broker_with_tls_and_a_world_readable_key_refuses_its_config(
    tmp_path: Path, node: tuple[Path, Path]
) -> None:
    key = tmp_path / "open.key"
    shutil.copy(node[1], key)
    key.chmod(0o604)
    with pytest.raises(
        ConfigError, match=r"config key 'tls_key': TLS key .* may be read by anyone"
    ):
        BrokerConfig(tls_enabled=True, tls_cert=node[0], tls_key=key)
    key.chmod(0o600)
    assert BrokerConfig(tls_enabled=True, tls_cert=node[0], tls_key=key).tls_files is not None


def test_tls_enabled_turns_the_plaintext_grpc_port_off_unless_the_operator_says_so(
    node: tuple[Path, Path],
) -> None:
    cert, key = node
    tls = {"tls_enabled": True, "tls_cert": cert, "tls_key": key}
    assert BrokerConfig().grpc_endpoint == ("127.0.0.1", 10913)  # TLS off: as before
    assert BrokerConfig(**tls).grpc_endpoint is None
    assert BrokerConfig(**tls, grpc_listen="0").grpc_endpoint is None
    assert BrokerConfig(**tls, grpc_plaintext_with_tls=True).grpc_endpoint == (
        "127.0.0.1",
        10913,
    )
    with pytest.raises(
        ConfigError,
        match=r"^config key 'grpc_listen' serves plaintext gRPC, off with tls_enabled: set "
        r"grpc_plaintext_with_tls = true to serve it anyway, or serve gRPC over TLS on "
        r"grpc_tls_listen$",
    ):
        BrokerConfig(**tls, grpc_listen="127.0.0.1:7000")
    with pytest.raises(ConfigError, match=r"127.0.0.1:10913 is also the plaintext gRPC port"):
        BrokerConfig(**tls, grpc_plaintext_with_tls=True, grpc_tls_listen="127.0.0.1:10913")


# --- serving -----------------------------------------------------------------------------------


async def test_a_client_trusting_the_ca_is_served_others_are_not(
    served: Served, pki: Pki, tmp_path: Path
) -> None:
    conn = await RemotingClient.connect(served.address, tls=client_context(pki.ca))
    try:
        resp = await conn.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "t"})
        assert resp.code == ResponseCode.SUCCESS
    finally:
        conn.close()
    # A CA that did not sign the server's certificate: the handshake fails, nothing is sent.
    stranger = make_ca(tmp_path / "stranger", "stranger-ca")
    with pytest.raises(ConnectError, match=r"CERTIFICATE_VERIFY_FAILED"):
        await RemotingClient.connect(served.address, tls=client_context(stranger.ca))
    # Plaintext to a TLS port: no answer, the server closes the connection.
    plain = await RemotingClient.connect(served.address)
    try:
        with pytest.raises((ConnectionClosedError, RemotingError)):
            await plain.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "t"}, timeout=5)
    finally:
        plain.close()


async def test_a_shared_port_with_verify_client_gates_internal_requests(
    pki: Pki, node: tuple[Path, Path], tmp_path: Path
) -> None:
    files = TlsFiles(cert=node[0], key=node[1], ca_file=pki.ca, verify_client=True)
    served = Served(DaemonTls(files), gate=True)
    await served.start()
    cluster = signer_for(cluster_credentials(b"k" * 32))
    anonymous = client_context(pki.ca)
    member = client_context(pki.ca, *pki.issue("broker-1"))
    try:
        no_cert = await RemotingClient.connect(served.address, tls=anonymous)
        signed = await RemotingClient.connect(served.address, tls=anonymous, signer=cluster)
        with_cert = await RemotingClient.connect(served.address, tls=member, signer=cluster)
        try:
            # A client without a certificate: client requests go through, internal ones not.
            resp = await no_cert.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "t"})
            assert resp.code == ResponseCode.SUCCESS
            resp = await no_cert.request(RequestCode.CONTROLLER_REGISTER_BROKER, {})
            assert (resp.code, resp.header["remark"]) == (
                ResponseCode.NO_PERMISSION,
                NO_CLIENT_CERT,
            )
            # Signed as the cluster, whatever the code: needs the certificate too.
            resp = await signed.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "t"})
            assert resp.code == ResponseCode.NO_PERMISSION
            for code in (
                RequestCode.CONTROLLER_REGISTER_BROKER,
                RequestCode.GET_ROUTEINFO_BY_TOPIC,
            ):
                assert (await with_cert.request(code, {"topic": "t"})).code == ResponseCode.SUCCESS
        finally:
            for c in (no_cert, signed, with_cert):
                c.close()
        # A certificate of another CA: the handshake itself fails.
        stranger = make_ca(tmp_path / "stranger", "stranger-ca")
        foreign = client_context(pki.ca, *stranger.issue("intruder"))
        with pytest.raises((ConnectError, ConnectionClosedError, RemotingError)):
            bad = await RemotingClient.connect(served.address, tls=foreign)
            try:
                await bad.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "t"}, timeout=5)
            finally:
                bad.close()
    finally:
        await served.server.stop()
    assert ControllerCode.RAFT_MESSAGE in ClientCertGate(None)._internal


async def test_the_internal_listener_requires_a_client_certificate(
    pki: Pki, node: tuple[Path, Path]
) -> None:
    tls = DaemonTls(TlsFiles(cert=node[0], key=node[1], ca_file=pki.ca, verify_client=True))

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"stream")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0, ssl=tls.internal_listener)
    port = server.sockets[0].getsockname()[1]
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=tls.client)
        assert await reader.read() == b"stream"
        writer.close()
        # No certificate: TLS 1.3 finishes the client's side of the handshake first, then the
        # server's alert ends the connection before a byte of the stream.
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=client_context(pki.ca)
        )
        try:
            got = await reader.read()
        except (ssl.SSLError, ConnectionError):
            got = b""
        assert got == b""
        writer.close()
    finally:
        server.close()
        await server.wait_closed()


async def test_reload_serves_new_connections_with_the_new_certificate(
    pki: Pki, tmp_path: Path
) -> None:
    cert, key = tmp_path / "node.crt", tmp_path / "node.key"
    for src, dst in zip(pki.issue("first"), (cert, key), strict=True):
        shutil.copy(src, dst)
    tls = DaemonTls(TlsFiles(cert=cert, key=key, ca_file=pki.ca))
    served = Served(tls)
    await served.start()
    trust = client_context(pki.ca)
    try:
        assert await peer_name(served.port, trust) == "first"
        old = await RemotingClient.connect(served.address, tls=trust)
        for src, dst in zip(pki.issue("second"), (cert, key), strict=True):
            shutil.copy(src, dst)
        tls.reload()
        assert await peer_name(served.port, trust) == "second"
        # The connection opened before the reload goes on.
        resp = await old.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "t"})
        assert resp.code == ResponseCode.SUCCESS
        old.close()
        # A reload that fails (a key of another certificate) keeps what was loaded.
        shutil.copy(pki.issue("third")[1], key)
        with pytest.raises(TlsError):
            tls.reload()
        assert await peer_name(served.port, trust) == "second"
        assert tls.reloads == 1
    finally:
        await served.server.stop()


def test_a_gate_refusal_is_counted_each_time_and_logged_once_with_its_server() -> None:
    class Plain:  # a connection without a client certificate
        peer = "10.0.0.7:40000"
        transport = None
        attrs: dict[str, object] = {}

    counted: list[str] = []
    gate = ClientCertGate(
        None, [RequestCode.CONTROLLER_REGISTER_BROKER], counted.append, lambda: 0, server="broker"
    )
    req = request(RequestCode.CONTROLLER_REGISTER_BROKER, 1, {}, None)
    with structlog.testing.capture_logs() as logs:
        for _ in range(3):
            refused = gate(cast(Connection, Plain()), req)
            assert refused is not None and refused.code == ResponseCode.NO_PERMISSION
    assert counted == ["no_client_cert"] * 3
    assert [(e["event"], e["server"], e["reason"]) for e in logs] == [
        ("request refused", "broker", "no_client_cert")
    ]
