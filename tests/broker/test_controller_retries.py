"""What a broker logs while it waits for the controllers: an election in progress (every
controller answered, none is leader yet) is expected at every cluster start, so info; no answer
at all is a warning. The answers come from real loopback servers."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from broker.replicas_manager import electing
from protocol.codes import RequestCode, ResponseCode
from protocol.remoting import Frame, response
from remoting.errors import RemotingError, UnreachableError
from remoting.failover import AddressFailover
from remoting.server import Connection, RemotingServer
from tests.support.procs import dead_address


@pytest.fixture
async def followers() -> AsyncIterator[list[str]]:
    """Two controllers that know no leader yet: every request answers CONTROLLER_NOT_LEADER."""

    def not_leader(conn: Connection, req: Frame) -> Frame:
        return response(req, ResponseCode.CONTROLLER_NOT_LEADER, {"remark": "no leader known"})

    servers: list[RemotingServer] = []
    addresses: list[str] = []
    for _ in range(2):
        server = RemotingServer(name="follower")
        server.register(RequestCode.CONTROLLER_GET_NEXT_BROKER_ID, not_leader)
        addresses.append(f"127.0.0.1:{await server.start('127.0.0.1', 0)}")
        servers.append(server)
    try:
        yield addresses
    finally:
        for server in servers:
            await server.stop()


async def failure(addresses: list[str]) -> RemotingError:
    failover = AddressFailover(addresses, busy_rounds=1)
    try:
        await failover.call(RequestCode.CONTROLLER_GET_NEXT_BROKER_ID, {"brokerName": "b"})
    except RemotingError as exc:
        return exc
    finally:
        failover.close()
    raise AssertionError("the request succeeded")


async def test_every_controller_answering_not_leader_is_an_election(followers: list[str]) -> None:
    exc = await failure(followers)
    assert isinstance(exc, UnreachableError) and exc.answered
    assert electing(exc)
    assert electing(await failure(followers[:1]))  # one address: its answer as it is


async def test_a_controller_that_does_not_answer_is_no_election(followers: list[str]) -> None:
    exc = await failure([*followers, dead_address()])
    assert isinstance(exc, UnreachableError) and not exc.answered
    assert not electing(exc)
    assert not electing(await failure([dead_address()]))
