"""Sessions over TLS (remoting/auth.py, remoting/client.py), in-process over real TLS sockets: a
client with credentials authenticates its TLS connection once with a signed AUTHENTICATE bound
to that connection (tls-unique), and its later requests travel unsigned yet count as its user's;
the user's rules still apply to each request, a deleted user or a changed secret ends the
session, and a captured AUTHENTICATE is worth nothing on another connection. Over plain TCP
there is no session: every request is signed as before."""

from __future__ import annotations

import base64
import itertools
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import structlog

from protocol.acl import Decision, User, UserType
from protocol.codes import RequestCode, ResponseCode
from protocol.remoting import FLAG_ONEWAY, Frame, Header, Scalar, response
from protocol.request_auth import (
    ACCESS_KEY,
    CHANNEL_BINDING,
    VERIFIED_USER,
    Credentials,
    RequestSigner,
    channel_binding_field,
    cluster_credentials,
)
from remoting.auth import RequestGuard
from remoting.client import RemotingClient, signer_for, wall_ms
from remoting.errors import ConnectionClosedError
from remoting.server import Connection, RemotingServer
from remoting.tls import NO_CLIENT_CERT, ClientCertGate, DaemonTls, TlsFiles, client_context
from tests.support.tls import Pki, make_ca
from tests.support.wait import wait_until_async

ALICE = Credentials("alice", "alice-Secret-1")
BOB = Credentials("bob", "bob-Secret-1")
CLUSTER = cluster_credentials(b"k" * 32)
RULES = {"alice": "A", "bob": "B"}


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

    def __init__(
        self, tls: DaemonTls | None, internal_codes: tuple[int, ...] | None = None
    ) -> None:
        """``internal_codes``: wrap the guard in the ClientCertGate of a shared port with
        ``tls_verify_client`` (those codes, and anything signed as the cluster, need a client
        certificate)."""
        self.tls = tls
        self.users = Users()
        self.server = RemotingServer(name="test")
        self.server.register(RequestCode.SEND_MESSAGE, self.send)
        self.server.register(RequestCode.CONTROLLER_REGISTER_BROKER, self.send)
        self.refused: list[str] = []
        guard = RequestGuard(
            self.users,
            self.allowed,
            cluster=CLUSTER,
            window_ms=60_000,
            server="test",
            on_refused=self.refused.append,
        )
        self.signed: list[bool] = []  # per request reaching the guard: did it carry a signature

        def watching(conn: Connection, req: Frame) -> Frame | None:
            self.signed.append(ACCESS_KEY in req.header)
            return guard(conn, req)

        self.server.guard = (
            watching
            if internal_codes is None
            else ClientCertGate(watching, internal_codes, self.refused.append)
        )
        self.handled: list[Header] = []
        """The header of each request handled, without the guard's ``verifiedUser``."""
        self.verified: list[Scalar] = []
        """The ``verifiedUser`` each handled request came with."""
        self.address = ""

    def send(self, conn: Connection, req: Frame) -> Frame:
        header = dict(req.header)
        self.verified.append(header.pop(VERIFIED_USER, None))
        self.handled.append(header)
        return response(req, ResponseCode.SUCCESS)

    @staticmethod
    def allowed(user: User, req: Frame, host: str) -> Decision:
        """alice may send to A, bob to B, the cluster (a super user) anywhere."""
        topic = req.header.get("topic")
        if user.type is UserType.SUPER or topic == RULES.get(user.username):
            return Decision(True, "ok")
        return Decision(False, f"no rule of {user.username} allows pub on Topic:{topic}")

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
    assert served.verified == ["alice"] * 3
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
        signer = RequestSigner(ALICE, "test")
        header = {CHANNEL_BINDING: binding_of(first)}
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


def binding_of(conn: RemotingClient) -> str:
    """The ChannelBinding field naming ``conn``'s TLS connection (as its client sees it)."""
    binding = conn.tls_unique
    assert binding is not None
    return channel_binding_field(binding)


_PREFIXES = itertools.count()


def authenticate(
    creds: Credentials,
    binding: Scalar | None,
    *,
    at_ms: int | None = None,
    flags: int = 0,
) -> Header:
    """An AUTHENTICATE header signed by ``creds`` (ChannelBinding left out when None)."""
    header: Header = {} if binding is None else {CHANNEL_BINDING: binding}
    at = wall_ms() if at_ms is None else at_ms
    return RequestSigner(creds, f"hostile{next(_PREFIXES)}-").sign(
        RequestCode.AUTHENTICATE, flags, header, None, at
    )


def remark(resp: Frame) -> str:
    return str(resp.header.get("remark"))


def no_errors_logged(logs: list[dict[str, object]]) -> bool:
    """Nothing logged at error level or with a traceback (a refusal is a warning)."""
    return not any(e.get("log_level") in ("error", "critical") or "exc_info" in e for e in logs)


async def test_a_malformed_channel_binding_is_refused_and_the_connection_goes_on(
    served: Served, client_tls: ssl.SSLContext
) -> None:
    """A correctly signed AUTHENTICATE whose ChannelBinding is missing, not a string, empty, not
    base64, one byte short or long, padded, or a megabyte long opens nothing: each is refused
    with reason ``session``, counted, logged once for the source, and the connection stays
    usable (a right one afterwards opens the session)."""
    conn = await RemotingClient.connect(served.address, tls=client_tls)
    try:
        right = binding_of(conn)
        raw = base64.b64decode(right)
        missing = f"session: {CHANNEL_BINDING} (base64 of the connection's tls-unique) is missing"
        wrong = f"session: {CHANNEL_BINDING} does not name this TLS connection"
        cases: list[tuple[Scalar | None, str]] = [
            (None, missing),
            (12345, missing),
            (True, missing),
            ("", wrong),
            ("!!not base64!!", wrong),
            (channel_binding_field(raw[:-1]), wrong),
            (channel_binding_field(raw + b"\0"), wrong),
            (channel_binding_field(bytes(len(raw))), wrong),
            (f" {right}", wrong),
            (f"{right}\n", wrong),
            (f"{right}=", wrong),
            ("A" * (1 << 20), wrong),
        ]
        with structlog.testing.capture_logs() as logs:
            for binding, why in cases:
                resp = await conn.request(RequestCode.AUTHENTICATE, authenticate(ALICE, binding))
                assert resp.code == ResponseCode.NO_PERMISSION, binding
                assert remark(resp).startswith(why), (binding, remark(resp))
                unsigned = await conn.request(RequestCode.SEND_MESSAGE, {"topic": "A"}, b"x")
                assert remark(unsigned).startswith("unsigned:")
            assert not conn.is_closed
            ok = await conn.request(RequestCode.AUTHENTICATE, authenticate(ALICE, right))
            assert (ok.code, remark(ok)) == (ResponseCode.SUCCESS, "authenticated as alice")
            sent = await conn.request(RequestCode.SEND_MESSAGE, {"topic": "A"}, b"x")
            assert sent.code == ResponseCode.SUCCESS
    finally:
        conn.close()
    assert served.refused == ["session", "unsigned"] * len(cases)
    assert served.handled == [{"topic": "A"}]
    refusals = [e for e in logs if e["event"] == "request refused"]
    assert [e["reason"] for e in refusals] == ["session"]  # once per source host per minute
    assert no_errors_logged(logs)


async def test_an_expired_forged_or_unknown_authenticate_opens_nothing(
    served: Served, client_tls: ssl.SSLContext
) -> None:
    """AUTHENTICATE is verified like any signed request before its binding is looked at: a
    timestamp out of the window (either side), a wrong secret, an unknown user are refused
    with their own reasons, and the connection's unsigned requests stay refused."""
    conn = await RemotingClient.connect(served.address, tls=client_tls)
    try:
        right = binding_of(conn)
        now = wall_ms()
        cases: list[tuple[Header, str]] = [
            (authenticate(ALICE, right, at_ms=now - 120_000), "expired:"),
            (authenticate(ALICE, right, at_ms=now + 120_000), "expired:"),
            (authenticate(Credentials("alice", "not-Her-Secret"), right), "bad_signature:"),
            (authenticate(Credentials("mallory", "m-Secret-1"), right), "unknown_user:"),
        ]
        # The binding and the user are covered by the signature: altered after signing, refused.
        forged = authenticate(ALICE, right)
        forged[ACCESS_KEY] = "bob"
        served.users.secrets["bob"] = BOB.secret_key
        cases.append((forged, "bad_signature:"))
        rebound = authenticate(ALICE, "AAAA")
        rebound[CHANNEL_BINDING] = right
        cases.append((rebound, "bad_signature:"))
        for header, why in cases:
            resp = await conn.request(RequestCode.AUTHENTICATE, header)
            assert resp.code == ResponseCode.NO_PERMISSION
            assert remark(resp).startswith(why), remark(resp)
            unsigned = await conn.request(RequestCode.SEND_MESSAGE, {"topic": "A"}, b"x")
            assert remark(unsigned).startswith("unsigned:")
    finally:
        conn.close()
    assert served.handled == []
    assert (
        served.refused
        == [
            r
            for why in ("expired", "expired", "bad_signature", "unknown_user")
            for r in (why, "unsigned")
        ]
        + ["bad_signature", "unsigned"] * 2
    )


async def test_a_second_authenticate_makes_the_connection_its_users_and_a_refused_one_nobodys_else(
    served: Served, client_tls: ssl.SSLContext
) -> None:
    """Whose rules apply is always clear: the session is the last user who proved, on this
    connection, that it holds its secret; a refused AUTHENTICATE (another connection's binding,
    a wrong secret, a replay) changes nothing, and a request signed anyway is that signer's
    alone."""
    served.users.secrets["bob"] = BOB.secret_key
    conn = await RemotingClient.connect(served.address, signer=signer_for(ALICE), tls=client_tls)
    other = await RemotingClient.connect(served.address, tls=client_tls)

    async def send(topic: str, header: Header | None = None) -> str:
        resp = await conn.request(RequestCode.SEND_MESSAGE, header or {"topic": topic}, b"x")
        return "ok" if resp.code == ResponseCode.SUCCESS else remark(resp)

    try:
        assert conn.session
        assert await send("A") == "ok"
        assert await send("B") == "denied: no rule of alice allows pub on Topic:B"
        # bob, refused three ways: still alice's connection.
        refused = [
            authenticate(BOB, binding_of(other)),
            authenticate(Credentials("bob", "not-His-Secret"), binding_of(conn)),
        ]
        for header in refused:
            resp = await conn.request(RequestCode.AUTHENTICATE, header)
            assert resp.code == ResponseCode.NO_PERMISSION
        bob_here = authenticate(BOB, binding_of(conn))
        assert (await other.request(RequestCode.AUTHENTICATE, bob_here)).code == (
            ResponseCode.NO_PERMISSION
        )  # spends its nonce on the wrong connection
        resp = await conn.request(RequestCode.AUTHENTICATE, bob_here)
        assert remark(resp).startswith("replayed:")
        assert await send("A") == "ok"
        # Unsigned AUTHENTICATE in a session: says who the connection is, changes nothing.
        resp = await conn.request(RequestCode.AUTHENTICATE, {})
        assert (resp.code, remark(resp)) == (ResponseCode.SUCCESS, "authenticated as alice")
        # bob proves it on this connection: from then on, bob's rules and only his.
        resp = await conn.request(RequestCode.AUTHENTICATE, authenticate(BOB, binding_of(conn)))
        assert (resp.code, remark(resp)) == (ResponseCode.SUCCESS, "authenticated as bob")
        assert await send("B") == "ok"
        assert await send("A") == "denied: no rule of bob allows pub on Topic:A"
        # A request signed by alice on bob's connection is alice's, and only that one.
        signer = RequestSigner(ALICE, "inline")
        signed = signer.sign(RequestCode.SEND_MESSAGE, 0, {"topic": "A"}, b"x", wall_ms())
        assert await send("A", signed) == "ok"
        signed = signer.sign(RequestCode.SEND_MESSAGE, 0, {"topic": "B"}, b"x", wall_ms())
        assert await send("B", signed) == "denied: no rule of alice allows pub on Topic:B"
        assert await send("A") == "denied: no rule of bob allows pub on Topic:A"
        # alice again, signed as herself: alice's connection again.
        resp = await conn.request(RequestCode.AUTHENTICATE, authenticate(ALICE, binding_of(conn)))
        assert remark(resp) == "authenticated as alice"
        assert await send("A") == "ok"
    finally:
        conn.close()
        other.close()
    assert served.handled == [{"topic": t} for t in ("A", "A", "B", "A", "A")]
    # the handler is told who each came from: the session's user, or the one who signed it
    assert served.verified == ["alice", "alice", "bob", "alice", "alice"]


async def test_a_oneway_authenticate_is_verified_and_never_answered(
    served: Served, client_tls: ssl.SSLContext
) -> None:
    """AUTHENTICATE sent oneway gets no answer either way; its signature covers the oneway flag
    and its binding this connection like any other, and a refusal is counted. One that verifies
    opens the session (it proves as much as a two-way one)."""
    conn = await RemotingClient.connect(served.address, tls=client_tls)
    other = await RemotingClient.connect(served.address, tls=client_tls)
    try:
        right = binding_of(conn)
        oneway = FLAG_ONEWAY
        for header in (
            authenticate(ALICE, binding_of(other), flags=oneway),  # another connection's
            authenticate(ALICE, right),  # signed as two-way, sent oneway: the flag is signed
            authenticate(ALICE, right, at_ms=wall_ms() - 120_000, flags=oneway),
        ):
            conn.send_oneway(RequestCode.AUTHENTICATE, header)
            # Frames of one connection are served in order: this answer comes after the oneway.
            resp = await conn.request(RequestCode.SEND_MESSAGE, {"topic": "A"}, b"x")
            assert remark(resp).startswith("unsigned:")
        conn.send_oneway(RequestCode.AUTHENTICATE, authenticate(ALICE, right, flags=oneway))
        resp = await conn.request(RequestCode.SEND_MESSAGE, {"topic": "A"}, b"x")
        assert resp.code == ResponseCode.SUCCESS
        conn.send_oneway(RequestCode.AUTHENTICATE, {})  # in the session: nothing to say
        resp = await conn.request(RequestCode.SEND_MESSAGE, {"topic": "B"}, b"x")
        assert remark(resp) == "denied: no rule of alice allows pub on Topic:B"
    finally:
        conn.close()
        other.close()
    assert served.refused == [
        "session",
        "unsigned",
        "bad_signature",
        "unsigned",
        "expired",
        "unsigned",
        "denied",
    ]
    assert served.handled == [{"topic": "A"}]


async def test_an_unsigned_authenticate_in_a_session_is_checked_like_any_session_request(
    served: Served, client_tls: ssl.SSLContext
) -> None:
    """Asking a session who it is must not answer 'authenticated' once its user is gone or its
    secret changed: a deleted user answers unknown_user, a changed secret ends the session."""
    conn = await RemotingClient.connect(served.address, signer=signer_for(ALICE), tls=client_tls)
    try:
        assert conn.session
        resp = await conn.request(RequestCode.AUTHENTICATE, {})
        assert (resp.code, remark(resp)) == (ResponseCode.SUCCESS, "authenticated as alice")
        del served.users.secrets["alice"]
        resp = await conn.request(RequestCode.AUTHENTICATE, {})
        assert (resp.code, remark(resp)) == (
            ResponseCode.NO_PERMISSION,
            "unknown_user: unknown user alice",
        )
        served.users.secrets["alice"] = "alice-Secret-2"
        resp = await conn.request(RequestCode.AUTHENTICATE, {})
        assert resp.code == ResponseCode.NO_PERMISSION
        assert remark(resp).startswith("session: the secret of alice changed")
        await wait_until_async(lambda: conn.is_closed, "the server closed the connection")
    finally:
        conn.close()
    assert served.refused == ["unknown_user", "session"]


async def test_sessions_over_tls_1_2_bind_to_their_own_connection(served: Served, pki: Pki) -> None:
    """tls-unique is defined by TLS 1.2 (RFC 5929): a client capped at 1.2 gets its session,
    and its binding is worth nothing on another 1.2 connection."""
    capped = client_context(pki.ca)
    capped.maximum_version = ssl.TLSVersion.TLSv1_2
    conn = await RemotingClient.connect(served.address, signer=signer_for(ALICE), tls=capped)
    other = await RemotingClient.connect(served.address, tls=capped)
    try:
        assert conn._transport is not None
        assert conn._transport.get_extra_info("ssl_object").version() == "TLSv1.2"
        assert conn.session
        assert binding_of(conn) != binding_of(other)
        ok = await conn.request(RequestCode.SEND_MESSAGE, {"topic": "A"}, b"x")
        assert ok.code == ResponseCode.SUCCESS
        resp = await other.request(RequestCode.AUTHENTICATE, authenticate(ALICE, binding_of(conn)))
        assert remark(resp).startswith(f"session: {CHANNEL_BINDING} does not name this TLS")
    finally:
        conn.close()
        other.close()
    assert served.signed == [True, False, True]


@pytest.fixture(scope="module")
def gated_tls(pki: Pki) -> DaemonTls:
    cert, key = pki.issue("gated-node")
    return DaemonTls(TlsFiles(cert=cert, key=key, ca_file=pki.ca, verify_client=True))


async def test_a_cluster_session_on_a_shared_port_needs_a_client_certificate(
    gated_tls: DaemonTls, pki: Pki
) -> None:
    """On a shared port with tls_verify_client, AUTHENTICATE as rmq:cluster without a client
    certificate is refused before the guard (so no super-user session); a user's session on a
    connection without a certificate still cannot send cluster-internal codes; with a
    certificate the cluster's session serves them unsigned."""
    internal = RequestCode.CONTROLLER_REGISTER_BROKER
    s = Served(gated_tls, internal_codes=(internal,))
    await s.start()
    anonymous = client_context(pki.ca)
    member = client_context(pki.ca, *pki.issue("member"))
    logs: list[dict[str, object]] = []
    try:
        with structlog.testing.capture_logs() as logs:
            cluster_no_cert = await RemotingClient.connect(
                s.address, signer=signer_for(CLUSTER), tls=anonymous
            )
            alice_no_cert = await RemotingClient.connect(
                s.address, signer=signer_for(ALICE), tls=anonymous
            )
            cluster_member = await RemotingClient.connect(
                s.address, signer=signer_for(CLUSTER), tls=member
            )
            try:
                assert not cluster_no_cert.session
                # Asked for by hand with the right binding: refused all the same.
                hand = authenticate(CLUSTER, binding_of(cluster_no_cert))
                resp = await cluster_no_cert.request(RequestCode.AUTHENTICATE, hand)
                assert (resp.code, remark(resp)) == (ResponseCode.NO_PERMISSION, NO_CLIENT_CERT)
                for code in (internal, RequestCode.SEND_MESSAGE):
                    resp = await cluster_no_cert.request(code, {"topic": "B"}, b"x")
                    assert remark(resp) == NO_CLIENT_CERT  # signed as the cluster: gated
                assert alice_no_cert.session
                resp = await alice_no_cert.request(internal, {"topic": "A"}, b"x")
                assert (resp.code, remark(resp)) == (ResponseCode.NO_PERMISSION, NO_CLIENT_CERT)
                resp = await alice_no_cert.request(RequestCode.SEND_MESSAGE, {"topic": "A"}, b"x")
                assert resp.code == ResponseCode.SUCCESS
                assert cluster_member.session
                for code in (internal, RequestCode.SEND_MESSAGE):
                    resp = await cluster_member.request(code, {"topic": "B"}, b"x")
                    assert resp.code == ResponseCode.SUCCESS
            finally:
                for c in (cluster_no_cert, alice_no_cert, cluster_member):
                    c.close()
    finally:
        await s.server.stop()
    assert s.refused == ["no_client_cert"] * 5
    # Counted each time, logged once for the source host (as the guard's own refusals).
    refusals = [e for e in logs if e["event"] == "request refused"]
    assert [(e["reason"], e["user"]) for e in refusals] == [("no_client_cert", "rmq:cluster")]
    # The gate kept every request of the cluster without a certificate from the guard.
    assert s.signed == [True, True, False, False, False]
    assert s.handled == [{"topic": "A"}, {"topic": "B"}, {"topic": "B"}]
