"""The request guard on a real RemotingServer (remoting/auth.py): a refusal answers NO_PERMISSION
with its reason before any handler runs, is counted by reason, and is logged once per source
host per window; a verified request reaches its handler without the signature fields."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import structlog

from protocol.acl import Decision, User, UserType
from protocol.codes import RequestCode, ResponseCode
from protocol.log_throttle import LogThrottle
from protocol.remoting import Frame, Header, response
from protocol.request_auth import (
    CLUSTER_ACCESS_KEY,
    VERIFIED_USER,
    Credentials,
    cluster_credentials,
)
from remoting.auth import RequestGuard
from remoting.client import RemotingClient, signer_for
from remoting.server import Connection, RemotingServer
from tests.support.wait import wait_until_async

ALICE = Credentials("alice", "alice-Secret-1")
CLUSTER = cluster_credentials(b"k" * 32)


class Users:
    def secret(self, username: str) -> str | None:
        return ALICE.secret_key if username == "alice" else None

    def user(self, username: str) -> User | None:
        return User("alice", UserType.NORMAL) if username == "alice" else None


class Served:
    def __init__(self) -> None:
        self.server = RemotingServer(name="test")
        self.seen: list[Header] = []
        self.refused: list[str] = []
        self.server.register(RequestCode.SEND_MESSAGE, self.send)
        self.server.guard = RequestGuard(
            Users(),
            self.allowed,
            cluster=CLUSTER,
            window_ms=60_000,
            server="test",
            on_refused=self.refused.append,
        )
        self.port = 0

    def send(self, conn: Connection, req: Frame) -> Frame:
        self.seen.append(dict(req.header))
        return response(req, ResponseCode.SUCCESS)

    @staticmethod
    def allowed(user: User, req: Frame, host: str) -> Decision:
        if user.type is UserType.SUPER or req.header.get("topic") == "A":
            return Decision(True, "ok")
        return Decision(False, f"no rule of {user.username} allows pub on Topic:B")


@pytest.fixture
async def served() -> AsyncIterator[Served]:
    s = Served()
    s.port = await s.server.start("127.0.0.1", 0)
    yield s
    await s.server.stop()


async def send(
    port: int, creds: Credentials | None, topic: str, oneway: bool = False, **extra: str
) -> Frame | None:
    conn = await RemotingClient.connect(f"127.0.0.1:{port}", signer=signer_for(creds))
    try:
        header: Header = {"topic": topic, **extra}
        if oneway:
            conn.send_oneway(RequestCode.SEND_MESSAGE, header, b"x")
            return None
        return await conn.request(RequestCode.SEND_MESSAGE, header, b"x")
    finally:
        conn.close()


async def test_refusals_are_answered_counted_and_logged_once(served: Served) -> None:
    with structlog.testing.capture_logs() as logs:
        unsigned = await send(served.port, None, "A")
        assert unsigned is not None and unsigned.code == ResponseCode.NO_PERMISSION
        assert str(unsigned.header["remark"]).startswith("unsigned:")
        denied = await send(served.port, ALICE, "B")
        assert denied is not None and denied.code == ResponseCode.NO_PERMISSION
        assert denied.header["remark"] == "denied: no rule of alice allows pub on Topic:B"
        wrong = await send(served.port, Credentials("alice", "nope-nope-1"), "A")
        assert wrong is not None and str(wrong.header["remark"]).startswith("bad_signature:")
        await send(served.port, None, "A", oneway=True)  # refused silently
        await wait_until_async(lambda: len(served.refused) == 4, "the oneway refusal counted")
    assert served.refused == ["unsigned", "denied", "bad_signature", "unsigned"]
    assert served.seen == []  # no handler ran
    refusals = [e for e in logs if e["event"] == "request refused"]
    assert len(refusals) == 1 and refusals[0]["reason"] == "unsigned"


async def test_a_verified_request_reaches_its_handler_without_the_signature(
    served: Served,
) -> None:
    ok = await send(served.port, ALICE, "A")
    assert ok is not None and ok.code == ResponseCode.SUCCESS
    ok = await send(served.port, CLUSTER, "B")  # the cluster counts as a super user
    assert ok is not None and ok.code == ResponseCode.SUCCESS
    # the signature fields gone; in their place the user it was verified as
    assert served.seen == [
        {"topic": "A", VERIFIED_USER: "alice"},
        {"topic": "B", VERIFIED_USER: CLUSTER_ACCESS_KEY},
    ]


async def test_a_verified_user_a_client_names_itself_is_overwritten(served: Served) -> None:
    ok = await send(served.port, ALICE, "A", **{VERIFIED_USER: "root"})
    assert ok is not None and ok.code == ResponseCode.SUCCESS
    assert served.seen == [{"topic": "A", VERIFIED_USER: "alice"}]


def test_the_log_throttle_says_how_many_went_unlogged() -> None:
    throttle = LogThrottle[str](window_ms=60_000, max_keys=4096)
    assert throttle.admit("10.0.0.1", 0) == 0
    assert throttle.admit("10.0.0.1", 1_000) is None
    assert throttle.admit("10.0.0.2", 1_000) == 0  # per source host
    assert throttle.admit("10.0.0.1", 59_999) is None
    assert throttle.admit("10.0.0.1", 60_000) == 2
