"""Sessions over TLS (remoting/auth.py, remoting/client.py), in-process over real TLS sockets: a
client with credentials authenticates its TLS connection once with a signed AUTHENTICATE bound
to that connection (tls-unique), and its later requests travel unsigned yet count as its user's;
the user's rules still apply to each request, a deleted user or a changed secret ends the
session, and a captured AUTHENTICATE is worth nothing on another connection. Over plain TCP
there is no session: every request is signed as before."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from protocol.acl import Decision, User, UserType
from protocol.codes import RequestCode, ResponseCode
from protocol.remoting import Frame, Header, response
from protocol.request_auth import (
    ACCESS_KEY,
    CHANNEL_BINDING,
    Credentials,
    RequestSigner,
    channel_binding_field,
    cluster_credentials,
)
from remoting.auth import RequestGuard
from remoting.client import RemotingClient, signer_for, wall_ms
from remoting.errors import ConnectionClosedError
from remoting.server import Connection, RemotingServer
from remoting.tls import DaemonTls, TlsFiles, client_context
from tests.support.tls import Pki, make_ca
from tests.support.wait import wait_until_async

ALICE = Credentials("alice", "alice-Secret-1")


class Users:
    """A directory whose users a test may change while connections are open."""

    def __init__(self) -> None:
        self.secrets = {"alice": ALICE.secret_key}

    def secret(self, username: str) -> str | None:
        return self.secrets.get(username)

    def user(self, username: str) -> User | None:
        return User(username, UserType.NORMAL) if username in self.secrets else None


class Served:
    """A RemotingServer with the request guard; records what reached the guard (signed or
    not) and what reached the handler."""

    def __init__(self, tls: DaemonTls | None) -> None:
        self.tls = tls
        self.users = Users()
        self.server = RemotingServer(name="test")
        self.server.register(RequestCode.SEND_MESSAGE, self.send)
        self.refused: list[str] = []
        guard = RequestGuard(
            self.users,
            self.allowed,
            cluster=cluster_credentials(b"k" * 32),
            window_ms=60_000,
            server="test",
            on_refused=self.refused.append,
        )
        self.signed: list[bool] = []  # per request reaching the guard: did it carry a signature

        def watching(conn: Connection, req: Frame) -> Frame | None:
            self.signed.append(ACCESS_KEY in req.header)
            return guard(conn, req)

        self.server.guard = watching
        self.handled: list[Header] = []
        self.address = ""

    def send(self, conn: Connection, req: Frame) -> Frame:
        self.handled.append(dict(req.header))
        return response(req, ResponseCode.SUCCESS)

    @staticmethod
    def allowed(user: User, req: Frame, host: str) -> Decision:
        if req.header.get("topic") == "A":
            return Decision(True, "ok")
        return Decision(False, f"no rule of {user.username} allows pub on Topic:B")

    async def start(self) -> None:
        listener = None if self.tls is None else self.tls.shared_listener
        port = await self.server.start("127.0.0.1", 0, listener)
        self.address = f"127.0.0.1:{port}"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_ca(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def tls(pki: Pki) -> DaemonTls:
    cert, key = pki.issue("node")
    return DaemonTls(TlsFiles(cert=cert, key=key, ca_file=pki.ca))


@pytest.fixture
def client_tls(pki: Pki) -> ssl.SSLContext:
    return client_context(pki.ca)


@pytest.fixture
async def served(tls: DaemonTls) -> AsyncIterator[Served]:
    s = Served(tls)
    await s.start()
    yield s
    await s.server.stop()


async def test_a_tls_connection_authenticates_once_then_sends_unsigned_as_its_user(
    served: Served, client_tls: ssl.SSLContext
) -> None:
    conn = await RemotingClient.connect(served.address, signer=signer_for(ALICE), tls=client_tls)
    try:
        assert conn.session
        for _ in range(3):
            ok = await conn.request(RequestCode.SEND_MESSAGE, {"topic": "A"}, b"x")
            assert ok.code == ResponseCode.SUCCESS
        # The user's rules apply to every request of the session.
        denied = await conn.request(RequestCode.SEND_MESSAGE, {"topic": "B"}, b"x")
        assert denied.code == ResponseCode.NO_PERMISSION
        assert denied.header["remark"] == "denied: no rule of alice allows pub on Topic:B"
    finally:
        conn.close()
    # One signed request (AUTHENTICATE), then four unsigned ones.
    assert served.signed == [True, False, False, False, False]
    assert served.handled == [{"topic": "A"}] * 3
    assert served.refused == ["denied"]


async def test_without_credentials_there_is_no_session_and_nothing_unsigned_passes(
    served: Served, client_tls: ssl.SSLContext
) -> None:
    conn = await RemotingClient.connect(served.address, tls=client_tls)
    try:
        assert not conn.session
        resp = await conn.request(RequestCode.SEND_MESSAGE, {"topic": "A"}, b"x")
        assert resp.code == ResponseCode.NO_PERMISSION
        assert str(resp.header["remark"]).startswith("unsigned:")
        # An AUTHENTICATE that is not signed opens nothing.
        resp = await conn.request(RequestCode.AUTHENTICATE, {CHANNEL_BINDING: "AAAA"})
        assert resp.code == ResponseCode.NO_PERMISSION
        resp = await conn.request(RequestCode.SEND_MESSAGE, {"topic": "A"}, b"x")
        assert resp.code == ResponseCode.NO_PERMISSION
    finally:
        conn.close()
    assert served.handled == []


async def test_an_authenticate_naming_another_connection_is_refused(
    served: Served, client_tls: ssl.SSLContext
) -> None:
    """A signed AUTHENTICATE captured on one connection (or relayed by a man in the middle) does
    not open a session on another: its binding names the connection it was made for."""
    first = await RemotingClient.connect(served.address, tls=client_tls)
    second = await RemotingClient.connect(served.address, tls=client_tls)
    try:
        tr = first._transport
        assert tr is not None
        binding = tr.get_extra_info("ssl_object").get_channel_binding("tls-unique")
        signer = RequestSigner(ALICE, "test")
        header = {CHANNEL_BINDING: channel_binding_field(binding)}
        signed = signer.sign(RequestCode.AUTHENTICATE, 0, header, None, wall_ms())
        resp = await second.request(RequestCode.AUTHENTICATE, signed)
        assert resp.code == ResponseCode.NO_PERMISSION
        assert str(resp.header["remark"]).startswith(
            f"session: {CHANNEL_BINDING} does not name this TLS connection"
        )
        unsigned = await second.request(RequestCode.SEND_MESSAGE, {"topic": "A"}, b"x")
        assert str(unsigned.header["remark"]).startswith("unsigned:")
        # On the connection it was made for, the same request is a replay by then.
        resp = await first.request(RequestCode.AUTHENTICATE, signed)
        assert str(resp.header["remark"]).startswith("replayed:")
    finally:
        first.close()
        second.close()
    assert served.refused == ["session", "unsigned", "replayed"]
    assert served.handled == []


async def test_a_changed_secret_ends_the_session_and_a_deleted_user_is_refused(
    served: Served, client_tls: ssl.SSLContext
) -> None:
    conn = await RemotingClient.connect(served.address, signer=signer_for(ALICE), tls=client_tls)
    other = await RemotingClient.connect(served.address, signer=signer_for(ALICE), tls=client_tls)
    try:
        assert conn.session and other.session
        served.users.secrets["alice"] = "alice-Secret-2"
        resp = await conn.request(RequestCode.SEND_MESSAGE, {"topic": "A"}, b"x")
        assert resp.code == ResponseCode.NO_PERMISSION
        assert resp.header["remark"] == (
            "session: the secret of alice changed since this connection authenticated; "
            "connect again"
        )
        await wait_until_async(lambda: conn.is_closed, "the server closed the connection")
        with pytest.raises(ConnectionClosedError):
            await conn.request(RequestCode.SEND_MESSAGE, {"topic": "A"}, b"x")
        # Connecting again with the old secret: no session, and its signed requests fail.
        stale = await RemotingClient.connect(
            served.address, signer=signer_for(ALICE), tls=client_tls
        )
        try:
            assert not stale.session
            resp = await stale.request(RequestCode.SEND_MESSAGE, {"topic": "A"}, b"x")
            assert str(resp.header["remark"]).startswith("bad_signature:")
        finally:
            stale.close()
        fresh = await RemotingClient.connect(
            served.address,
            signer=signer_for(Credentials("alice", "alice-Secret-2")),
            tls=client_tls,
        )
        try:
            assert fresh.session
            ok = await fresh.request(RequestCode.SEND_MESSAGE, {"topic": "A"}, b"x")
            assert ok.code == ResponseCode.SUCCESS
            del served.users.secrets["alice"]
            gone = await fresh.request(RequestCode.SEND_MESSAGE, {"topic": "A"}, b"x")
            assert gone.header["remark"] == "unknown_user: unknown user alice"
        finally:
            fresh.close()
    finally:
        conn.close()
        other.close()
    assert served.handled == [{"topic": "A"}]


async def test_plain_tcp_has_no_session_and_signs_every_request() -> None:
    s = Served(None)
    await s.start()
    try:
        conn = await RemotingClient.connect(s.address, signer=signer_for(ALICE))
        try:
            assert not conn.session
            for _ in range(2):
                ok = await conn.request(RequestCode.SEND_MESSAGE, {"topic": "A"}, b"x")
                assert ok.code == ResponseCode.SUCCESS
            # Asked for anyway, a session over plain TCP is refused.
            signer = RequestSigner(ALICE, "test")
            signed = signer.sign(
                RequestCode.AUTHENTICATE, 0, {CHANNEL_BINDING: "AAAA"}, None, wall_ms()
            )
            resp = await conn.request(RequestCode.AUTHENTICATE, signed)
            assert resp.header["remark"] == (
                "session: sessions need TLS; over plain TCP every request is signed"
            )
        finally:
            conn.close()
    finally:
        await s.server.stop()
    assert s.signed == [True, True, True]
    assert s.refused == ["session"]


async def test_a_server_without_authentication_serves_a_client_with_credentials(
    tls: DaemonTls, client_tls: ssl.SSLContext, tmp_path: Path
) -> None:
    server = RemotingServer(name="open")
    server.register(RequestCode.SEND_MESSAGE, lambda c, r: response(r, ResponseCode.SUCCESS))
    port = await server.start("127.0.0.1", 0, tls.shared_listener)
    try:
        conn = await RemotingClient.connect(
            f"127.0.0.1:{port}", signer=signer_for(ALICE), tls=client_tls
        )
        try:
            assert not conn.session  # AUTHENTICATE is not supported there: it keeps signing
            ok = await conn.request(RequestCode.SEND_MESSAGE, {"topic": "A"}, b"x")
            assert ok.code == ResponseCode.SUCCESS
        finally:
            conn.close()
    finally:
        await server.stop()
