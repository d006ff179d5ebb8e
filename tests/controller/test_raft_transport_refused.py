"""PeerTransport tells a refused connection (nothing listens: the peer's process is gone) apart
from other failed sends, so the Raft core may act on a dead leader at once (issue 34:
``RaftNode.report_refused``) and not on a leader that is merely slow (a timeout)."""

from __future__ import annotations

import pytest

from controller import transport as transport_module
from controller.raft import Heartbeat, Message, VoteRequest
from controller.transport import PeerTransport, _refused
from protocol.codes import ControllerCode
from remoting.errors import ConnectError
from remoting.server import RemotingServer
from tests.support.procs import free_port
from tests.support.wait import wait_until_async


async def test_a_refused_connection_is_reported_as_such() -> None:
    unreachable: list[str] = []
    refused: list[str] = []
    transport = PeerTransport(
        "n1",
        on_message=lambda m: None,
        on_unreachable=unreachable.append,
        on_refused=refused.append,
    )
    transport.set_address("n2", f"127.0.0.1:{free_port()}")  # nothing listens there
    transport.start()
    try:
        transport.send([Heartbeat(src="n1", dst="n2", term=1, commit=0)])
        await wait_until_async(lambda: bool(refused), "the refusal reported", 10)
        assert refused[0] == "n2" and "n2" in unreachable
    finally:
        await transport.stop()


def test_only_a_refusal_counts_as_one() -> None:
    """A connect that timed out or failed otherwise (the peer may be alive and slow) is
    unreachable, not refused."""

    def failed(cause: BaseException) -> ConnectError:
        try:
            raise ConnectError("cannot connect") from cause
        except ConnectError as exc:
            return exc

    assert _refused(failed(ConnectionRefusedError()))
    assert _refused(ConnectionRefusedError())
    assert not _refused(failed(TimeoutError()))
    assert not _refused(failed(ConnectionResetError()))
    assert not _refused(failed(OSError(113, "No route to host")))


async def test_a_peer_heard_from_is_reconnected_at_once_not_after_the_back_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A link whose connects were refused (the peer down) waits out a back-off before the
    next; a message from the peer (on its own connection) proves it is up again, and the link
    reconnects then. Here the back-off is an hour: the message queued for the peer arrives
    only if the link was woken (issue 34: a survivor answered a restarted controller's votes
    up to a second late, the back-off's ceiling, and a failover right after a restart waited)."""
    monkeypatch.setattr(transport_module, "BACKOFF_MIN", 3600.0)
    monkeypatch.setattr(transport_module, "BACKOFF_MAX", 3600.0)
    got: dict[str, list[Message]] = {"n1": [], "n2": []}
    refused: list[str] = []
    ports = {"n1": free_port(), "n2": free_port()}
    transports = {
        node: PeerTransport(
            node,
            on_message=got[node].append,
            on_unreachable=lambda _p: None,
            on_refused=refused.append,
        )
        for node in ("n1", "n2")
    }
    for node, other in (("n1", "n2"), ("n2", "n1")):
        transports[node].set_address(other, f"127.0.0.1:{ports[other]}")
    servers: list[RemotingServer] = []

    async def serve(node: str) -> None:
        server = RemotingServer(name=f"raft-{node}")
        server.register(ControllerCode.RAFT_MESSAGE, transports[node].handle_frame)
        await server.start("127.0.0.1", ports[node])
        servers.append(server)

    try:
        await serve("n1")
        transports["n1"].start()
        # n2 is down: n1's connect is refused and its link backs off (an hour here).
        await wait_until_async(lambda: "n2" in refused, "n1's connect to n2 refused", 10)
        transports["n1"].send([Heartbeat(src="n1", dst="n2", term=1, commit=0)])
        await serve("n2")
        transports["n2"].start()
        transports["n2"].send(
            [
                VoteRequest(
                    src="n2", dst="n1", term=2, last_log_index=0, last_log_term=0, pre_vote=True
                )
            ]
        )
        await wait_until_async(lambda: bool(got["n1"]), "n2's vote request at n1", 10)
        await wait_until_async(lambda: bool(got["n2"]), "n1's heartbeat at n2", 20)
        assert isinstance(got["n2"][0], Heartbeat) and got["n2"][0].src == "n1"
    finally:
        for t in transports.values():
            await t.stop()
        for server in servers:
            await server.stop()
