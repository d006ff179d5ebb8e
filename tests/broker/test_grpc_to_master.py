"""A request of a slave's gRPC endpoint that cannot reach the master waits for the group's next
master (broker/grpc/to_master.py): what is sent again, where, and what is answered when not."""

from __future__ import annotations

import asyncio
import time

import pytest

from broker.grpc.to_master import Master, MasterWatch, NotDone, at_master, is_next
from broker.grpc.translate import Refused, Unreached
from protocol.rocketmq_v2 import definition_pb2 as pb
from remoting.client import RemotingClient
from remoting.errors import ConnectError, ConnectionClosedError, NotSentError, RequestTimeoutError

OLD = Master("10.0.0.1:1", 3)


@pytest.mark.parametrize(
    ("now", "next_one"),
    [
        (OLD, False),  # the same master: still the one that could not be reached
        (Master("", 3), False),  # none known
        (Master("", 4), False),  # an election under way, no master yet
        (Master("10.0.0.2:1", 4), True),  # another broker
        (Master("10.0.0.1:1", 4), True),  # the same one, re-elected
        (Master("10.0.0.9:1", 4, is_self=True), True),  # this broker
    ],
)
def test_the_next_master_is_another_broker_a_later_epoch_or_this_one(
    now: Master, next_one: bool
) -> None:
    assert is_next(OLD, now) is next_one


def test_this_broker_as_master_is_not_next_after_itself() -> None:
    me = Master("10.0.0.9:1", 4, is_self=True)
    assert not is_next(me, me)  # its own loopback failed: wait for a change, no busy loop


class _Role:
    def __init__(self, master: Master) -> None:
        self.master = master

    def __call__(self) -> Master:
        return self.master


def _watch(role: _Role) -> MasterWatch:
    return MasterWatch(role, bound_s=5.0, poll_s=0.005)


async def test_a_request_that_never_left_goes_to_the_next_master() -> None:
    role = _Role(OLD)
    tried: list[str] = []

    async def remote(address: str) -> str:
        tried.append(address)
        if address == OLD.address:
            asyncio.get_running_loop().call_later(0.05, setattr, role, "master", NEW)
            raise Unreached(address, ConnectError("connection refused"))
        return "done at " + address

    NEW = Master("10.0.0.2:1", 4)
    watch = _watch(role)
    got = await at_master(watch, watch.deadline(3.0), remote, None, "send")
    assert got == "done at 10.0.0.2:1"
    assert tried == [OLD.address, NEW.address]


async def test_a_request_becomes_this_brokers_own_when_it_is_elected() -> None:
    role = _Role(Master("", 3))  # the master died, none elected yet

    async def remote(address: str) -> str:
        raise AssertionError("nothing to forward to")

    async def here() -> str:
        return "stored here"

    asyncio.get_running_loop().call_later(0.05, setattr, role, "master", Master("me", 4, True))
    watch = _watch(role)
    assert await at_master(watch, watch.deadline(3.0), remote, here, "send") == "stored here"


async def test_a_refusal_of_a_master_that_did_nothing_is_sent_again() -> None:
    role = _Role(OLD)
    answers = iter(["refused", "done"])

    async def remote(address: str) -> str:
        answer = next(answers)
        if answer == "refused":  # NOT_MASTER or MASTER_FENCED: it stored nothing
            role.master = Master("10.0.0.2:1", 4)
            raise NotDone("not the master")
        return answer

    watch = _watch(role)
    assert await at_master(watch, watch.deadline(3.0), remote, None, "send") == "done"


@pytest.mark.parametrize(
    "cut",
    [ConnectionClosedError("closed after the write"), RequestTimeoutError("timed out")],
)
async def test_a_request_that_may_have_been_done_is_not_sent_again(cut: Exception) -> None:
    """The next master is awaited (the client's own resend finds it), then PROXY_TIMEOUT."""
    role = _Role(OLD)
    calls = 0

    async def remote(address: str) -> str:
        nonlocal calls
        calls += 1
        asyncio.get_running_loop().call_later(0.05, setattr, role, "master", Master("b:1", 4))
        raise Unreached(address, cut)  # type: ignore[arg-type]

    watch = _watch(role)
    start = time.monotonic()
    with pytest.raises(Refused) as refused:
        await at_master(watch, watch.deadline(3.0), remote, None, "send")
    assert refused.value.code == pb.PROXY_TIMEOUT
    assert "may have been done" in refused.value.message
    assert calls == 1
    assert time.monotonic() - start >= 0.04  # answered once the next master was known


async def test_no_master_within_the_calls_deadline_answers_ha_not_available() -> None:
    role = _Role(OLD)

    async def remote(address: str) -> str:
        raise Unreached(address, NotSentError("closed before the write"))

    watch = _watch(role)
    start = time.monotonic()
    with pytest.raises(Refused) as refused:
        await at_master(watch, watch.deadline(0.25), remote, None, "send")
    waited = time.monotonic() - start
    assert refused.value.code == pb.HA_NOT_AVAILABLE
    assert "nothing was done" in refused.value.message
    assert 0.15 <= waited < 0.25  # 4/5 of what was left of the call's deadline


def test_what_never_left_is_told_from_what_may_have_arrived() -> None:
    assert not Unreached("a:1", ConnectError("refused")).sent
    assert not Unreached("a:1", NotSentError("closed")).sent
    assert Unreached("a:1", ConnectionClosedError("closed")).sent
    assert Unreached("a:1", RequestTimeoutError("late")).sent


async def test_the_remoting_client_tells_a_request_never_written_from_one_cut_after() -> None:
    """A request on a connection already closed raises NotSentError; one whose connection the
    peer closes after reading it raises a plain ConnectionClosedError (it may have been done)."""
    read = asyncio.Event()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1)  # the request arrived: hang up without answering
        read.set()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        conn = await RemotingClient.connect(f"127.0.0.1:{port}", timeout=2.0)
        with pytest.raises(ConnectionClosedError) as cut:
            await conn.request(10, {"topic": "t"}, b"x", timeout=5.0)
        assert read.is_set()
        assert not isinstance(cut.value, NotSentError)
        with pytest.raises(NotSentError):
            await conn.request(10, {"topic": "t"}, b"x", timeout=5.0)
    finally:
        server.close()
        await server.wait_closed()


async def test_an_end_of_transaction_cut_after_the_write_goes_to_the_next_master() -> None:
    """Ending a transaction twice the same way does what ending it once does: repeatable."""
    role = _Role(OLD)
    tried: list[str] = []

    async def remote(address: str) -> str:
        tried.append(address)
        if address == OLD.address:
            role.master = Master("10.0.0.2:1", 4)
            raise Unreached(address, ConnectionClosedError("closed after the write"))
        return "ended"

    watch = _watch(role)
    got = await at_master(watch, watch.deadline(3.0), remote, None, "end", repeatable=True)
    assert got == "ended"
    assert tried == [OLD.address, "10.0.0.2:1"]


async def test_a_repeatable_request_that_may_have_been_done_never_says_nothing_was_done() -> None:
    role = _Role(OLD)  # the master timed out but stays the master

    async def remote(address: str) -> str:
        raise Unreached(address, RequestTimeoutError("late"))

    watch = _watch(role)
    with pytest.raises(Refused) as refused:
        await at_master(watch, watch.deadline(0.1), remote, None, "end", repeatable=True)
    assert refused.value.code == pb.PROXY_TIMEOUT


async def test_a_new_master_that_has_not_taken_the_role_yet_is_asked_again() -> None:
    """This slave learned of the election before the new master took the role: the new master
    answers NOT_MASTER (nothing done) and the role here names it still; the request is sent to
    it again shortly rather than waiting for a master other than it until the deadline."""
    new = Master("10.0.0.2:1", 4)
    role = _Role(new)
    answers = iter(["not yet", "not yet", "stored"])
    start = time.monotonic()

    async def remote(address: str) -> str:
        assert address == new.address
        answer = next(answers)
        if answer == "not yet":
            raise NotDone(f"broker {address} is not the master of broker-a")
        return answer

    watch = _watch(role)
    assert await at_master(watch, watch.deadline(3.0), remote, None, "send") == "stored"
    assert time.monotonic() - start < 1.0


async def test_a_master_that_keeps_refusing_is_given_up_at_the_deadline() -> None:
    role = _Role(OLD)  # fenced: MASTER_FENCED until the controllers answer it again

    async def remote(address: str) -> str:
        raise NotDone("fenced")

    watch = _watch(role)
    with pytest.raises(Refused) as refused:
        await at_master(watch, watch.deadline(0.3), remote, None, "send")
    assert refused.value.code == pb.HA_NOT_AVAILABLE
