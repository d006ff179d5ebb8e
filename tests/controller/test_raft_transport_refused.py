"""PeerTransport tells a refused connection (nothing listens: the peer's process is gone) apart
from other failed sends, so the Raft core may act on a dead leader at once (issue 34:
``RaftNode.report_refused``) and not on a leader that is merely slow (a timeout)."""

from __future__ import annotations

from controller.raft import Heartbeat
from controller.transport import PeerTransport, _refused
from remoting.errors import ConnectError
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
